"""The seed-style report: hand-made results, exact changes, Markdown, CSV, plot, JSON round trip."""

from __future__ import annotations

import builtins
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from nni_hwaware.errors import HwAwareError
from nni_hwaware.report import (
    PLOT_INSTALL_HINT,
    ModelResult,
    PlotPoint,
    accuracy_latency_plot,
    comparison_table,
    pareto_front,
    relative_changes,
    to_markdown,
    write_report,
)


def _result(name: str, top1: float, top3: float, latency: float, memory: float, **extra: Any) -> ModelResult:
    return ModelResult(name=name, space="digits", arch={"layer1_0": "skip"}, test_top1=top1, test_top3=top3,
                       val_top1=top1, val_top3=top3, latency_ms=latency, memory_mb=memory, params=1000,
                       flops=20_000, chip="chipA", predicted_latency_ms=latency * 1.1,
                       predicted_memory_mb=memory, **extra)


BASE = _result("baseline", 0.98, 1.0, 2.0, 0.4)
FOUND = _result("searched", 0.975, 0.995, 0.9, 0.2, alpha=1.0, search_seconds=10.0)


def test_changes_are_points_for_accuracy_and_percent_for_costs() -> None:
    changes = relative_changes(BASE, FOUND)
    assert changes["test_top1"] == pytest.approx(-0.5)
    assert changes["test_top3"] == pytest.approx(-0.5)
    assert changes["latency_ms"] == pytest.approx(-55.0)
    assert changes["memory_mb"] == pytest.approx(-50.0)
    assert changes["params"] == 0.0


def test_comparison_table_values() -> None:
    frame = comparison_table(BASE, [FOUND])
    assert list(frame.columns) == ["metric", "change in", "baseline", "searched", "searched vs baseline"]
    row = frame.set_index("metric").loc["latency, measured (ms)"]
    assert (row["baseline"], row["searched"], row["searched vs baseline"]) == pytest.approx((2.0, 0.9, -55.0))
    top1 = frame.set_index("metric").loc["top-1 accuracy (%)"]
    assert (top1["baseline"], top1["searched"], top1["change in"]) == (pytest.approx(98.0), pytest.approx(97.5), "pts")
    with pytest.raises(ValueError, match="distinct names"):
        comparison_table(BASE, [BASE])


def test_markdown_shows_signed_changes_with_units() -> None:
    text = to_markdown(comparison_table(BASE, [FOUND]))
    lines = text.splitlines()
    assert lines[0] == "| metric | baseline | searched | searched vs baseline |"
    assert "| top-1 accuracy (%) | 98.00 | 97.50 | -0.50 pts |" in lines
    assert "| latency, measured (ms) | 2.0000 | 0.9000 | -55.00 % |" in lines
    assert "| parameters | 1,000 | 1,000 | +0.00 % |" in lines


def test_missing_predictions_show_as_not_available() -> None:
    bare = ModelResult(**{**FOUND.to_dict(), "name": "bare", "predicted_latency_ms": None})
    text = to_markdown(comparison_table(BASE, [bare]))
    assert "| latency, predicted (ms) | 2.2000 | n/a | n/a |" in text


def test_write_report_writes_markdown_csv_and_png(tmp_path: Path) -> None:
    sweep = [_result(f"a{a}", 0.98 - a / 100, 1.0, 2.0 / (1 + a), 0.3, alpha=a) for a in (0.5, 1.0, 2.0)]
    paths = write_report(tmp_path / "report", BASE, [FOUND], sweep=sweep)
    assert set(paths) == {"markdown", "csv", "plot"}
    markdown = paths["markdown"].read_text()
    assert markdown.startswith("# searched vs baseline (digits, chipA)")
    assert "| alpha 0.5 | 97.50 | 100.00 | 1.3333 | 0.667 | 0.3000 | 0.750 |" in markdown
    frame = pd.read_csv(paths["csv"])
    assert frame.loc[frame.metric == "memory, measured (MB)", "searched vs baseline"].item() == pytest.approx(-50.0)
    assert paths["plot"].read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert not list(tmp_path.rglob(".*.tmp"))  # written atomically


def test_a_sweep_over_latency_targets_says_each_points_target(tmp_path: Path) -> None:
    """Each row names the target its search aimed at, in target order, with the ratio measured interleaved."""
    sweep = [_result(f"searched_target_{t}pct", 0.97, 1.0, 2.0 * t / 100, 0.3,
                     extra={"search_point": {"latency_target": f"{t}%", "memory_target": "51%"},
                            "vs_baseline": {"latency_ratio": t / 100 + 0.01}})
             for t in (60, 30, 45)] + [_result("searched_target_1p5ms", 0.96, 1.0, 1.4, 0.3,
                                               extra={"search_point": {"latency_target": 1.5}})]
    markdown = write_report(tmp_path / "report", BASE, [FOUND], sweep=sweep, plot=False)["markdown"].read_text()
    rows = [line for line in markdown.splitlines() if line.startswith("| latency target")]
    assert [row.split(" | ")[0] for row in rows] == ["| latency target 1.5 ms", "| latency target 30%",
                                                       "| latency target 45%", "| latency target 60%"]
    assert "| latency target 30% | 97.00 | 100.00 | 0.6000 | 0.310 | 0.3000 | 0.750 |" in markdown
    assert PlotPoint.of(sweep[1], "sweep").label == "target 30%"
    assert PlotPoint.of(_result("x", 0.9, 1.0, 1.0, 0.3, alpha=0.5), "sweep").label == "alpha=0.5"


def test_plot_without_matplotlib_names_the_install_hint(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    real_import = builtins.__import__

    def no_matplotlib(name: str, *args: Any, **kwargs: Any) -> Any:
        if name.startswith("matplotlib"):
            raise ImportError("no matplotlib")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_matplotlib)
    with pytest.raises(HwAwareError, match=r"pip install 'nni-hwaware\[plot\]'"):
        accuracy_latency_plot([PlotPoint(1.0, 90.0, "x", "trial")], tmp_path / "p.png")
    assert PLOT_INSTALL_HINT == "pip install 'nni-hwaware[plot]'"


def test_pareto_front_of_trials(tmp_path: Path) -> None:
    points = [PlotPoint(lat, acc, f"t{i}", "trial") for i, (lat, acc) in
              enumerate([(1.0, 90.0), (2.0, 95.0), (1.5, 89.0), (3.0, 94.0), (0.5, 80.0), (2.5, 97.0)])]
    assert [p.label for p in pareto_front(points)] == ["t4", "t0", "t1", "t5"]
    path = accuracy_latency_plot(points, tmp_path / "trials.png", pareto=True)
    assert path.stat().st_size > 1000


def test_results_round_trip_through_json_and_reject_unknown_fields(tmp_path: Path) -> None:
    path = FOUND.save(tmp_path / "r.json")
    assert ModelResult.load(path) == FOUND
    (tmp_path / "bad.json").write_text('{"name": "x", "colour": 1}')
    with pytest.raises(HwAwareError, match=r"unknown fields \['colour'\]"):
        ModelResult.load(tmp_path / "bad.json")
    assert ModelResult.from_dict({**FOUND.to_dict(), "train_seconds": 2.5}).train_seconds == 2.5


def test_search_report_counts_trials_over_budget_as_measured_and_draws_the_calibration(tmp_path: Path) -> None:
    from nni_hwaware.report.search import write_search_report

    # predicted within the 1.0 ms budget, but two of the four measured over it
    trials = [{"default": 0.9, "latency_ms": m, "predicted_latency_ms": p, "memory_mb": 0.1, "predicted_memory_mb": 0.1}
              for p, m in ((0.5, 0.6), (0.8, 1.2), (0.9, 1.1), (0.95, 0.9))]
    paths = write_search_report(tmp_path / "report", BASE, FOUND, trials,
                                budget={"latency_ms": 1.0, "memory_mb": 0.5})
    markdown = paths["markdown"].read_text()
    assert "latency_ms: 2 of 4 trials over the budget of 1 ms as measured (0 as predicted)" in markdown
    assert "memory_mb: 0 of 4 trials over the budget of 0.5 MB as measured (0 as predicted)" in markdown
    assert "measured / predicted latency: median 1.222, from 0.947 to 1.500 over 4 trials" in markdown
    assert paths["calibration"].read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_search_report_shows_the_correction_and_the_step_a_chip_reports_in(tmp_path: Path) -> None:
    from nni_hwaware.report.search import write_search_report
    from nni_hwaware.strategies.correction import CostCorrection

    # a phone that reports whole milliseconds, 1.1x what the table predicts
    correction = CostCorrection([3, 3])
    for i in range(12):
        key = (i % 3, i // 3 % 3)
        predicted = 10.0 + 2 * key[0] + key[1]
        correction.add(key, {"latency_ms": predicted}, {"latency_ms": float(round(1.1 * predicted))})
    trials = [{"default": 0.9, "latency_ms": 12.0, "predicted_latency_ms": 11.0}]
    markdown = write_search_report(tmp_path / "report", BASE, FOUND, trials, budget={"latency_ms": 13.0},
                                   correction=correction.summary())["markdown"].read_text()
    line = next(line for line in markdown.splitlines() if line.startswith("- latency_ms correction from 12 measured"))
    assert "scale 1.08" in line and line.endswith(", measured in steps of 1")  # 1.1x, less its rounding


def test_the_found_networks_export_check_shows_what_was_expected_of_it_beside_what_it_measured() -> None:
    from nni_hwaware.report.table import measured_markdown

    comparison = {"latency_ratio": 0.44, "latency_ratio_ci95": [0.43, 0.45], "spread": 0.02, "rounds": 20,
                  "predicted_latency_ratio": 0.39, "warnings": []}
    check = {"expected_latency_ratio": 0.4461, "measured_latency_ratio": 0.4312, "expected_memory_ratio": 0.5052}
    found = _result("searched", 0.975, 0.995, 0.9, 0.2, extra={"vs_baseline": comparison, "export_check": check})
    text = measured_markdown(found)
    assert ("- at export: latency ratio expected 0.446 (the table corrected by the earlier export checks), "
            "measured 0.431 in the export check; memory ratio expected 0.505") in text
    unchecked = _result("searched", 0.975, 0.995, 0.9, 0.2, extra={"vs_baseline": comparison})
    assert "at export" not in measured_markdown(unchecked)
