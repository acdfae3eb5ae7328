"""The report of a multi-trial search: baseline vs the best found network, and every trial.

Written by the last trial of a PPO experiment (see :mod:`nni_hwaware.trial.run`)
into ``<experiment dir>/hwaware/report/``:

* ``comparison.md`` / ``comparison.csv``: the comparison table, baseline vs found
  (top-1, top-3, measured latency and memory, params, FLOPs, relative changes);
* ``accuracy_latency.png``: the two retrained networks, measured;
* ``pareto.png``: validation accuracy against the cost table's latency of every
  trial, the Pareto front drawn and the baseline marked;
* ``calibration.png``: every trial's latency as predicted by the table against as
  measured by the trial on its machine, the budget line, the trials over it marked;
  ``comparison.md`` ends with how many trials were over each budget as measured;
* ``results.json``: everything above as data, from which ``nni-hwaware report``
  renders the files again.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from nni_hwaware.errors import HwAwareError
from nni_hwaware.files import read_json, write_json
from nni_hwaware.measurement import measured_cost, measured_within
from nni_hwaware.training.results import ModelResult

__all__ = ["best_trial", "render_search_report", "write_retrain_report", "write_search_report"]


def best_trial(trials: Sequence[Mapping[str, Any]], budget: Mapping[str, Any] | None = None) -> Mapping[str, Any]:
    """The trial with the highest validation top-1 (``default``) among finite results whose measured
    costs fit ``budget``; when none fits, the best of all (check it with :func:`measured_within`)."""
    finite = [t for t in trials if isinstance(t.get("default"), (int, float)) and t["default"] == t["default"]
              and not t.get("not_trained")]  # a network measured over the budget was never trained
    if not finite:
        raise HwAwareError("no trial finished with a finite validation accuracy; nothing to retrain")
    fitting = [t for t in finite if measured_within(t, budget)]
    return max(fitting or finite, key=lambda t: float(t["default"]))


def write_search_report(out_dir: str | os.PathLike[str], baseline: ModelResult, best: ModelResult,
                        trials: Sequence[Mapping[str, Any]], *, baseline_predicted_ms: float | None = None,
                        budget: Mapping[str, Any] | None = None, space: Mapping[str, Any] | None = None,
                        correction: Mapping[str, Any] | None = None,
                        measurements: Sequence[Mapping[str, Any]] = ()) -> dict[str, Path]:
    """Write the files listed in the module docstring; returns their paths by kind.

    ``space`` (``{space, space_args}``: how the search named its space) lets ``nni-hwaware
    export <experiment>`` rebuild the found network; ``measurements`` are the screening trials'
    measurements (one per candidate), counted apart from the trainings."""
    out = Path(out_dir)
    results = {"baseline": baseline.to_dict(), "best": best.to_dict(), "trials": list(trials),
               "measurements": list(measurements),
               "baseline_predicted_ms": baseline_predicted_ms, "budget": dict(budget or {}),
               **({"space": dict(space)} if space else {}),
               **({"correction": dict(correction)} if correction else {})}
    paths = {"results": write_json(out / "results.json", results)}
    paths.update(render_search_report(out / "results.json", out))
    return paths


def write_retrain_report(out_dir: str | os.PathLike[str], metric: Mapping[str, Any],
                         trials: Sequence[Mapping[str, Any]], *, budget: Mapping[str, Any] | None = None,
                         space: Mapping[str, Any] | None = None,
                         correction: Mapping[str, Any] | None = None,
                         measurements: Sequence[Mapping[str, Any]] = ()) -> tuple[dict[str, Path], list[str]]:
    """The report from the retraining trial's final metric (``results``: both networks, see
    :func:`nni_hwaware.trial.run.retrain_metrics`); returns the paths and the comparison's warnings."""
    import json

    try:
        results = json.loads(metric["results"])
        baseline, found = ModelResult.from_dict(results["baseline"]), ModelResult.from_dict(results["found"])
    except (KeyError, TypeError, json.JSONDecodeError) as err:
        raise HwAwareError(f"the retraining trial's result has no readable 'results' ({err}); the tuner and "
                           "the trial must be the same nni-hwaware version") from None
    paths = write_search_report(out_dir, baseline, found, trials, budget=budget, space=space,
                                baseline_predicted_ms=baseline.predicted_latency_ms, correction=correction,
                                measurements=measurements)
    return paths, list(found.extra.get("vs_baseline", {}).get("warnings", []))


def _calibration(trials: Sequence[Mapping[str, Any]], budget: Mapping[str, Any]) -> dict[str, Any]:
    """Predicted and measured latencies of the trials that report both, and the over-budget counts
    (latency on the table's scale where the trial has it: its measured ratio to the reference times
    the table's reference latency, which a busy machine does not move)."""
    both = [t for t in trials if isinstance(t.get("predicted_latency_ms"), (int, float))
            and isinstance(measured_cost(t, "latency_ms"), (int, float))]
    lines = []
    for metric, unit in (("latency_ms", "ms"), ("memory_mb", "MB")):
        limit = budget.get(metric)
        measured = [t for t in trials if isinstance(measured_cost(t, metric), (int, float))
                    and isinstance(t.get(f"predicted_{metric}"), (int, float))]
        if limit is None or not measured:
            continue
        over = sum(float(measured_cost(t, metric)) > float(limit) for t in measured)
        predicted_over = sum(float(t[f"predicted_{metric}"]) > float(limit) for t in measured)
        lines.append(f"{metric}: {over} of {len(measured)} trials over the budget of {float(limit):.3g} {unit} "
                     f"as measured ({predicted_over} as predicted)")
        if over == len(measured):
            lines.append(f"no search trial was measured within the {metric} budget: the network retrained is "
                         "the best of those over it")
    if untrained := sum(bool(t.get("not_trained")) for t in trials):
        lines.append(f"{untrained} of {len(trials)} trials measured over the budget before training and were not "
                     "trained")
    if both:
        ratios = [float(measured_cost(t, "latency_ms")) / float(t["predicted_latency_ms"]) for t in both]
        ratios.sort()
        lines.append(f"measured / predicted latency: median {ratios[len(ratios) // 2]:.3f}, "
                     f"from {ratios[0]:.3f} to {ratios[-1]:.3f} over {len(both)} trials")
    return {"predicted": [float(t["predicted_latency_ms"]) for t in both],
            "measured": [float(measured_cost(t, "latency_ms")) for t in both], "lines": lines}


def _accounting(trials: Sequence[Mapping[str, Any]], measurements: Sequence[Mapping[str, Any]]) -> str:
    """The two resources a search spent, counted apart: trainings, and measurements (by screening trials,
    or by a trial of its own network before training it; ``screened`` marks a training of a screened one)."""
    untrained = sum(bool(t.get("not_trained")) for t in trials)
    trained = len(trials) - untrained
    screened_over = sum(not m.get("fits", True) for m in measurements)
    own = sum(1 for t in trials if not t.get("screened") and isinstance(measured_cost(t, "latency_ms"), (int, float)))
    measured = len(measurements) + own
    return (f"trainings: {trained}; measurements: {measured} ({len(measurements)} by screening trials, "
            f"{screened_over} of them over the budget; {own} by search trials of their own network, {untrained} "
            f"of them over the budget and not trained): {measured / max(1, trained):.2f} measurements a training")


def render_search_report(results_file: str | os.PathLike[str], out_dir: str | os.PathLike[str]) -> dict[str, Path]:
    """Render the report files from a ``results.json`` written by :func:`write_search_report`."""
    from nni_hwaware.report.plot import PlotPoint, accuracy_latency_plot
    from nni_hwaware.report.table import write_report

    data = read_json(results_file, "search results")
    if not isinstance(data, dict) or not {"baseline", "best", "trials"} <= set(data):
        raise HwAwareError(f"{results_file} is not a search results file (needs baseline, best, trials)")
    baseline, best = ModelResult.from_dict(data["baseline"]), ModelResult.from_dict(data["best"])
    out = Path(out_dir)
    title = f"best of {len(data['trials'])} trials vs {baseline.name} ({baseline.space}, {baseline.chip})"
    paths = write_report(out, baseline, [best], title=title)
    budget = dict(data.get("budget") or {})
    calibration = _calibration(data["trials"], budget)
    calibration["lines"].insert(0, _accounting(data["trials"], data.get("measurements") or []))
    for metric, fit in (data.get("correction") or {}).items():
        calibration["lines"].append(
            f"{metric} correction from {fit['pairs']} measured trials: scale {fit['scale']:.3f}, spread of "
            f"log(measured / predicted) {fit['spread_before']:.3f} by the table, {fit['spread_after']:.3f} "
            f"corrected (leave-one-out), margin {fit['margin']:.3f}"
            + (f", measured in steps of {fit['resolution']:g}" if fit.get("resolution") else ""))
    if calibration["lines"]:
        with open(paths["markdown"], "a", encoding="utf-8") as md:
            md.write("\n## Trials, predicted and measured\n\n" + "".join(f"- {line}\n" for line in calibration["lines"]))
    if calibration["predicted"]:
        from nni_hwaware.report.plot import calibration_plot
        from nni_hwaware.report.table import RUNTIME_NAMES

        runtimes = sorted({str(t["measured_in"]) for t in data["trials"] if t.get("measured_in")})
        paths["calibration"] = calibration_plot(calibration["predicted"], calibration["measured"],
                                                out / "calibration.png", budget_ms=budget.get("latency_ms"),
                                                title=f"{len(calibration['predicted'])} trials on {baseline.chip}",
                                                runtime=" / ".join(RUNTIME_NAMES.get(r, r) for r in runtimes))
    points = [PlotPoint(float(t.get("predicted_latency_ms", t["latency_ms"])), 100 * float(t["default"]), "", "trial")
              for t in data["trials"] if isinstance(t.get("latency_ms"), (int, float))
              and isinstance(t.get("default"), (int, float))]
    base_ms = data.get("baseline_predicted_ms") or baseline.predicted_latency_ms
    if base_ms is not None:
        points.append(PlotPoint(float(base_ms), 100 * baseline.val_top1, "baseline", "baseline"))
    if points:
        paths["pareto"] = accuracy_latency_plot(
            points, out / "pareto.png", pareto=True, ylabel="validation top-1 accuracy (%)",
            xlabel="latency, predicted by the cost table (ms)", title=f"{len(data['trials'])} trials")
    return paths
