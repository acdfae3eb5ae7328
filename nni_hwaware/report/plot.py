"""Accuracy against latency: baseline, found networks, sweeps or every trial, with the Pareto front.

Points carry a ``group`` (``baseline``, ``searched``, ``sweep``, ``trial``, ...);
each group gets its own marker. ``pareto=True`` draws the front of the points
(no other point is both faster and more accurate), for multi-trial searches.
matplotlib is optional: without it the plot fails early with the install hint.
"""

from __future__ import annotations

import io
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from nni_hwaware.errors import HwAwareError
from nni_hwaware.files import write_atomically

if TYPE_CHECKING:
    from nni_hwaware.training.results import ModelResult

__all__ = ["PLOT_INSTALL_HINT", "PlotPoint", "accuracy_latency_plot", "calibration_plot", "pareto_front", "sweep_point"]

PLOT_INSTALL_HINT = "pip install 'nni-hwaware[plot]'"

_STYLE: dict[str, dict[str, Any]] = {
    "baseline": {"marker": "s", "color": "tab:red", "s": 80, "zorder": 4},
    "searched": {"marker": "*", "color": "tab:green", "s": 180, "zorder": 5},
    "sweep": {"marker": "o", "color": "tab:blue", "s": 40, "zorder": 3},
    "trial": {"marker": ".", "color": "tab:gray", "s": 25, "zorder": 2},
}


@dataclass(frozen=True)
class PlotPoint:
    """One network in the plot: latency (ms), accuracy (%), label and group."""

    latency_ms: float
    accuracy: float
    label: str
    group: str

    @classmethod
    def of(cls, result: Any, group: str, metric: str = "test_top1") -> PlotPoint:
        """The point of a :class:`~nni_hwaware.report.ModelResult` (accuracy in %)."""
        label = result.name
        if group == "sweep":
            point = sweep_point(result)
            label = label if point == "n/a" else point.replace("latency target ", "target ").replace("alpha ", "alpha=")
        return cls(float(result.latency_ms), 100.0 * float(getattr(result, metric)), label, group)


def sweep_point(result: ModelResult) -> str:
    """What the search that found ``result`` aimed at: ``alpha 1.5`` or ``latency target 30%``
    (``extra["search_point"]``, written by the Gumbel pipeline; else the result's alpha)."""
    point = result.extra.get("search_point") or ({"alpha": result.alpha} if result.alpha is not None else {})
    if "latency_target" in point:
        value = point["latency_target"]
        return f"latency target {value}" + ("" if isinstance(value, str) else " ms")
    return f"alpha {point['alpha']:g}" if "alpha" in point else "n/a"


def pareto_front(points: Sequence[PlotPoint]) -> list[PlotPoint]:
    """The points no other point beats on both latency (lower) and accuracy (higher), by latency."""
    front: list[PlotPoint] = []
    for point in sorted(points, key=lambda p: (p.latency_ms, -p.accuracy)):
        if not front or point.accuracy > front[-1].accuracy:
            front.append(point)
    return front


def _pyplot() -> Any:
    try:
        import matplotlib
    except ImportError:
        raise HwAwareError(f"plotting needs matplotlib: {PLOT_INSTALL_HINT}") from None
    matplotlib.use("Agg", force=False)
    import matplotlib.pyplot as plt

    return plt


def accuracy_latency_plot(points: Sequence[PlotPoint], path: str | os.PathLike[str], *,
                          title: str = "", ylabel: str = "test top-1 accuracy (%)",
                          xlabel: str = "latency, measured (ms)", pareto: bool = False,
                          annotate: bool = True) -> Path:
    """Write a PNG scatter of ``points`` (latency on x, accuracy on y) to ``path``."""
    if not points:
        raise HwAwareError("nothing to plot: no points")
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(6.4, 4.4), dpi=120)
    try:
        for group in dict.fromkeys(p.group for p in points):
            members = [p for p in points if p.group == group]
            style = _STYLE.get(group, {"marker": "o"})
            ax.scatter([p.latency_ms for p in members], [p.accuracy for p in members], label=group, **style)
            if annotate and group != "trial":
                for p in members:
                    ax.annotate(p.label, (p.latency_ms, p.accuracy), textcoords="offset points",
                                xytext=(5, 4), fontsize=7)
        if pareto:
            front = pareto_front(points)
            ax.step([p.latency_ms for p in front], [p.accuracy for p in front], where="post",
                    color="black", linewidth=1, label="Pareto front")
        return _finish(fig, ax, path, xlabel=xlabel, ylabel=ylabel, title=title, legend="lower right")
    finally:
        plt.close(fig)


def calibration_plot(predicted: Sequence[float], measured: Sequence[float], path: str | os.PathLike[str], *,
                     budget_ms: float | None = None, title: str = "", runtime: str = "") -> Path:
    """Predicted against measured latency of every trial: the diagonal, the budget, the trials over it;
    ``runtime`` names what the table profiled and the trials measured (the deployment runtime)."""
    if not predicted:
        raise HwAwareError("nothing to plot: no trial reported both a predicted and a measured latency")
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(5.6, 4.6), dpi=120)
    try:
        over = [budget_ms is not None and m > budget_ms for m in measured]
        inside = [not o for o in over]
        for keep, label, color in ((inside, "trial", "tab:blue"), (over, "over budget, measured", "tab:red")):
            xs = [p for p, k in zip(predicted, keep, strict=True) if k]
            ys = [m for m, k in zip(measured, keep, strict=True) if k]
            if xs:
                ax.scatter(xs, ys, s=22, color=color, label=f"{label} ({len(xs)})", zorder=3)
        top = max(max(predicted), max(measured), budget_ms or 0.0) * 1.05
        ax.plot([0, top], [0, top], color="black", linewidth=0.8, label="measured = predicted")
        if budget_ms is not None:
            ax.axhline(budget_ms, color="tab:red", linewidth=0.8, linestyle="--", label="latency budget")
            ax.axvline(budget_ms, color="tab:red", linewidth=0.5, linestyle=":")
        ax.set_xlim(0, top)
        ax.set_ylim(0, top)
        where = f" in {runtime}" if runtime else ""
        return _finish(fig, ax, path, xlabel=f"latency{where}, predicted by the cost table (ms)",
                       ylabel=f"latency{where}, measured by the trial (ms, table's scale)", title=title,
                       legend="upper left")
    finally:
        plt.close(fig)


def _finish(fig: Any, ax: Any, path: str | os.PathLike[str], *, xlabel: str, ylabel: str, title: str,
            legend: str) -> Path:
    """Labels, grid and legend, then the figure written atomically as PNG."""
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    if title:
        ax.set_title(title, fontsize=9)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc=legend)
    fig.tight_layout()
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png")
    return write_atomically(path, buffer.getvalue())
