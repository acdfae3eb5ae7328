"""Reports: retrain and measure found networks, compare them with the baseline, plot them.

* :func:`evaluate_architecture` -> :class:`ModelResult` (retrained from scratch,
  best-on-validation epoch, test top-1/top-3, latency and memory measured and
  predicted, params, FLOPs), saved as JSON;
* :func:`comparison_table` / :func:`write_report`: the baseline-vs-searched
  table with the relative changes, as Markdown and CSV, and the accuracy-latency plot;
* :func:`accuracy_latency_plot` with :class:`PlotPoint` groups and an optional
  Pareto front, for sweeps and multi-trial searches alike.
"""

from __future__ import annotations

from nni_hwaware.report.plot import (
    PLOT_INSTALL_HINT,
    PlotPoint,
    accuracy_latency_plot,
    pareto_front,
)
from nni_hwaware.report.table import (
    ROWS,
    Row,
    comparison_table,
    relative_changes,
    to_markdown,
    write_report,
)
from nni_hwaware.training.results import ModelResult, evaluate_architecture, measure_architecture

__all__ = [
    "PLOT_INSTALL_HINT",
    "ROWS",
    "ModelResult",
    "PlotPoint",
    "Row",
    "accuracy_latency_plot",
    "comparison_table",
    "evaluate_architecture",
    "measure_architecture",
    "pareto_front",
    "relative_changes",
    "to_markdown",
    "write_report",
]
