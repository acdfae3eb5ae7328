"""The comparison table: baseline vs found networks, with the changes.

The searched network is reported against the baseline (e.g. the original ResNet50) as changes:
top-3 accuracy in points, latency and memory in percent. :func:`comparison_table`
builds that table for one baseline and any number of other networks (one searched
network, the points of an alpha sweep, the best trial of a multi-trial search):

=========================  ==========  ==========  ==============
metric                     baseline    searched    searched vs baseline
=========================  ==========  ==========  ==============
top-1 accuracy (%)         98.61       98.33       -0.28 pts
latency, measured (ms)     1.2         0.5         -58.3 %
=========================  ==========  ==========  ==============

:func:`write_report` writes it as Markdown and CSV next to the accuracy-latency plot.
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from nni_hwaware.files import write_atomically
from nni_hwaware.report.plot import PlotPoint, accuracy_latency_plot, sweep_point
from nni_hwaware.training.results import ModelResult

__all__ = ["ROWS", "RUNTIME_NAMES", "Row", "comparison_table", "relative_changes", "to_markdown", "write_report"]

#: How the report names the runtime of a backend or an export format.
RUNTIME_NAMES = {"torch": "PyTorch", "onnxruntime": "ONNX Runtime", "onnxruntime-int8": "ONNX Runtime int8",
                 "openvino": "OpenVINO", "onnx": "ONNX Runtime", "onnx-int8": "ONNX Runtime int8",
                 "torchscript": "TorchScript"}


@dataclass(frozen=True)
class Row:
    """One metric of the table: the result field, its label, how to show it and its change."""

    field: str
    label: str
    #: ``points`` (accuracies: difference in percentage points) or ``relative`` (percent change).
    change: str
    scale: float = 1.0
    digits: int = 2


ROWS: tuple[Row, ...] = (
    Row("test_top1", "top-1 accuracy (%)", "points", 100.0, 2),
    Row("test_top3", "top-3 accuracy (%)", "points", 100.0, 2),
    Row("latency_ms", "latency, measured (ms)", "relative", 1.0, 4),
    Row("predicted_latency_ms", "latency, predicted (ms)", "relative", 1.0, 4),
    Row("memory_mb", "memory, measured (MB)", "relative", 1.0, 4),
    Row("predicted_memory_mb", "memory, predicted (MB)", "relative", 1.0, 4),
    Row("params", "parameters", "relative", 1.0, 0),
    Row("flops", "FLOPs", "relative", 1.0, 0),
)


def _value(result: ModelResult, row: Row) -> float:
    value = getattr(result, row.field)
    return float("nan") if value is None else float(value) * row.scale


def _change(base: float, value: float, row: Row) -> float:
    if row.change == "points":
        return value - base
    return (value / base - 1.0) * 100.0 if base else float("nan")


def relative_changes(baseline: ModelResult, other: ModelResult) -> dict[str, float]:
    """``{field: change}``: accuracy fields in points, costs in percent (negative: smaller)."""
    return {row.field: _change(_value(baseline, row), _value(other, row), row) for row in ROWS}


def comparison_table(baseline: ModelResult, others: Sequence[ModelResult],
                     rows: Sequence[Row] = ROWS) -> pd.DataFrame:
    """A frame with one row per metric: the baseline's value, then per other network its value and change.

    Values are numbers (accuracies in %); changes are in points for accuracies and
    percent for costs. Column names: ``metric``, ``unit of change``, ``baseline``,
    ``<name>``, ``<name> vs baseline``.
    """
    names = [baseline.name] + [o.name for o in others]
    if len(set(names)) != len(names):
        raise ValueError(f"networks in one table need distinct names, got {names}")
    records = []
    for row in rows:
        base = _value(baseline, row)
        record: dict[str, object] = {"metric": row.label, "change in": "pts" if row.change == "points" else "%",
                                     baseline.name: base}
        for other in others:
            value = _value(other, row)
            record[other.name] = value
            record[f"{other.name} vs {baseline.name}"] = _change(base, value, row)
        records.append(record)
    return pd.DataFrame.from_records(records)


def _show(value: object, digits: int) -> str:
    if not isinstance(value, float):
        return str(value)
    if math.isnan(value):
        return "n/a"
    if digits == 0:
        return f"{value:,.0f}"
    return f"{value:.{digits}f}" if abs(value) >= 10 ** -digits or value == 0 else f"{value:.3g}"


def to_markdown(frame: pd.DataFrame, rows: Sequence[Row] = ROWS) -> str:
    """The table as GitHub Markdown, changes signed with their unit (``-0.28 pts``, ``-58.3 %``)."""
    digits = {row.label: row.digits for row in rows}
    columns = [c for c in frame.columns if c != "change in"]
    lines = ["| " + " | ".join(columns) + " |", "|" + "|".join(["---"] + ["---:"] * (len(columns) - 1)) + "|"]
    for _, record in frame.iterrows():
        cells = []
        for column in columns:
            value = record[column]
            if column.endswith(" vs " + frame.columns[2]) and isinstance(value, float):
                cells.append("n/a" if math.isnan(value) else f"{value:+.2f} {record['change in']}")
            elif column == "metric":
                cells.append(str(value))
            else:
                cells.append(_show(float(value), digits.get(record["metric"], 2)))
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def write_report(out_dir: str | os.PathLike[str], baseline: ModelResult, others: Sequence[ModelResult], *,
                 sweep: Sequence[ModelResult] = (), plot: bool = True, title: str | None = None) -> dict[str, Path]:
    """Write ``comparison.md``, ``comparison.csv`` and ``accuracy_latency.png`` into ``out_dir``.

    ``others`` are the networks in the table (e.g. the searched one); ``sweep`` adds
    points to the plot only (e.g. one per alpha). Returns the written paths by kind.
    """
    out = Path(out_dir)
    frame = comparison_table(baseline, others)
    heading = title or f"{', '.join(o.name for o in others)} vs {baseline.name} ({baseline.space}, {baseline.chip})"
    markdown = f"# {heading}\n\n" + to_markdown(frame) + "".join(measured_markdown(o) for o in others)
    markdown += "".join(deliverables_markdown(o, out) for o in others)
    if sweep:
        markdown += "\n## Sweep\n\n" + sweep_markdown(baseline, sweep)
    paths = {
        "markdown": write_atomically(out / "comparison.md", markdown),
        "csv": write_atomically(out / "comparison.csv", frame.to_csv(index=False)),
    }
    if plot:
        points = [PlotPoint.of(baseline, "baseline")]
        points += [PlotPoint.of(o, "searched") for o in others]
        points += [PlotPoint.of(s, "sweep") for s in sweep]
        paths["plot"] = accuracy_latency_plot(points, out / "accuracy_latency.png", title=heading)
    return paths


def measured_markdown(result: ModelResult) -> str:
    """The ratios to the baseline measured interleaved (``extra["vs_baseline"]``, see
    :func:`nni_hwaware.training.compare_with_baseline`) and their warning lines; empty without them."""
    comparison = result.extra.get("vs_baseline")
    if not comparison:
        return ""
    low, high = comparison["latency_ratio_ci95"]
    runtime = RUNTIME_NAMES.get(comparison.get("backend", "torch"), comparison.get("backend"))
    lines = [f"\n{result.name} vs baseline:\n",
             f"- latency ratio, measured interleaved: {comparison['latency_ratio']:.3f} "
             f"(95 % interval {low:.3f} to {high:.3f}, {comparison.get('rounds', '?')} rounds, "
             f"known within ±{100 * comparison['spread']:.1f} %), in {runtime}"]
    beside = result.extra.get("vs_baseline_torch")
    if beside:  # the deployment runtime is the headline; PyTorch, which trains, stands beside it
        low, high = beside["latency_ratio_ci95"]
        lines.append(f"- latency ratio in PyTorch (what trains), measured interleaved: "
                     f"{beside['latency_ratio']:.3f} (95 % interval {low:.3f} to {high:.3f})")
    if comparison.get("predicted_latency_ratio") is not None:
        lines.append(f"- latency ratio, predicted: {comparison['predicted_latency_ratio']:.3f}")
    if comparison.get("memory_ratio") is not None:
        lines.append(f"- memory ratio, measured: {comparison['memory_ratio']:.3f}")
    if comparison.get("predicted_memory_ratio") is not None:
        lines.append(f"- memory ratio, predicted: {comparison['predicted_memory_ratio']:.3f}")
    check = result.extra.get("export_check")
    if check and check.get("expected_latency_ratio") is not None:  # see strategies.gumbel.export_check.measured_export
        lines.append(f"- at export: latency ratio expected {check['expected_latency_ratio']:.3f} (the table "
                     f"corrected by the earlier export checks), measured {check['measured_latency_ratio']:.3f} "
                     f"in the export check; memory ratio expected {check['expected_memory_ratio']:.3f}")
    for key, name in (("latency_ratio", "latency"), ("memory_ratio", "memory")):
        target = result.extra.get("targets", {}).get(key)
        if target is not None and comparison.get(key) is not None:
            measured = float(comparison[key])
            lines.append(f"- {name} target: {target:.3f} of the baseline; measured {measured:.3f} "
                         f"({100 * (measured / target - 1):+.1f} % of the target)")
    lines += [f"\n**{line}**" for line in comparison.get("warnings", [])]
    return "\n".join(lines) + "\n"


def deliverables_markdown(result: ModelResult, report_dir: str | os.PathLike[str]) -> str:
    """Where the trained network's files are and how their checks went (``extra["deliverables"]``, see
    :func:`nni_hwaware.export.write_deliverables`); links when they are on this machine. Empty without them."""
    import socket

    summary = result.extra.get("deliverables")
    if not summary:
        error = result.extra.get("deliverables_error")
        return f"\n## {result.name}: the trained network\n\n**{error}**\n" if error else ""
    where = Path(summary["dir"])
    here = summary.get("host") == socket.gethostname() and where.is_dir()
    files = summary.get("files", {})
    if here:
        names = ", ".join(f"[{name}]({Path(os.path.relpath(where / name, report_dir)).as_posix()})"
                          for name in files.values())
        lines = [f"\n## {result.name}: the trained network\n", f"In {where}: {names}."]
    else:
        lines = [f"\n## {result.name}: the trained network\n",
                 f"On machine {summary.get('host')}, in {where} (the trial's output directory there): "
                 f"{', '.join(files.values())}."]
    for fmt, entry in summary.get("exports", {}).items():
        agree = "matches PyTorch" if entry.get("matches") else "**differs from PyTorch**"
        line = (f"- {entry['path']} ({fmt}): {agree} on a batch of {entry['batch']} "
                f"(largest difference {entry['max_abs_diff']:.2g}); test top-1 {100 * entry['test_top1']:.2f} %")
        if entry.get("test_top1_vs_torch") is not None:
            line += f" ({100 * entry['test_top1_vs_torch']:+.2f} points against PyTorch)"
        lines.append(line)
    timing = summary.get("timing")
    if timing:
        low, high = timing["latency_ratio_ci95"]
        runtime = RUNTIME_NAMES.get(timing.get("format", "onnx"), timing.get("format"))
        lines.append(f"- {runtime} latency ratio, found vs baseline, interleaved (the exports): "
                     f"{timing['latency_ratio']:.3f} "
                     f"(95 % interval {low:.3f} to {high:.3f}, {timing['rounds']} rounds; {timing['found_ms']:.3f} "
                     f"vs {timing['baseline_ms']:.3f} ms at batch {timing['batch_size']})")
    lines += [f"- {note}" for note in summary.get("notes", [])]
    return "\n".join(lines) + "\n"


def _sweep_order(result: ModelResult) -> tuple[int, float]:
    point = result.extra.get("search_point") or {}
    if "latency_target" in point:
        value = point["latency_target"]
        number = float(value.strip().rstrip("%")) if isinstance(value, str) else float(value)
        return (0, number)
    return (1, result.alpha) if result.alpha is not None else (2, 0.0)


def sweep_markdown(baseline: ModelResult, sweep: Sequence[ModelResult]) -> str:
    """One line per sweep point: its latency target or alpha, accuracy, measured costs and their ratios
    to the baseline (the latency ratio measured interleaved where there is one)."""
    lines = ["| point | top-1 (%) | top-3 (%) | latency (ms) | latency ratio | memory (MB) | memory ratio |",
             "|---|---:|---:|---:|---:|---:|---:|"]
    for r in sorted(sweep, key=_sweep_order):
        ratio = (r.extra.get("vs_baseline") or {}).get("latency_ratio", r.latency_ms / baseline.latency_ms)
        lines.append(
            f"| {sweep_point(r)} | {100 * r.test_top1:.2f} | {100 * r.test_top3:.2f} "
            f"| {r.latency_ms:.4f} | {ratio:.3f} | {r.memory_mb:.4f} "
            f"| {r.memory_mb / baseline.memory_mb:.3f} |")
    return "\n".join(lines) + "\n"
