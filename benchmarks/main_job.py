"""The default ``config.yml`` end to end through the real NNI manager.

Runs the main job as a user would (``nni-hwaware create --config config.yml``, here on
a free port with the experiment files in a temporary directory), waits for it,
and prints one JSON object on its last line: wall time, number of trials, the
best trial's validation accuracy and latency (the best measured within the budget; its latency
measured by its trial and predicted), the search's cost correction, the
search trials over each budget as measured and as predicted (and how many were measured over it
before training and not trained, against the median seconds a search trial trains), the median measured /
predicted latency of the trials, and the retrained best network against the retrained
baseline: test accuracy, the latency ratio timed in shared rounds with its 95 % interval in the
deployment runtime (``deploy_backend``, config.yml's ``backend``) and in PyTorch beside it, the measured
memory ratio, the predicted ratios, and any warning the comparison raised; the search's mean
milliseconds per decision and the zero-cost proxy's networks scored and milliseconds per network.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import yaml

from nni_hwaware.experiment import create_experiment, write_config
from nni_hwaware.measurement import measured_cost, measured_within
from nni_hwaware.report.search import best_trial

ROOT = Path(__file__).resolve().parents[1]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", help="the deployment runtime (default: config.yml's)")
    args = parser.parse_args(argv)
    template = yaml.safe_load((ROOT / "config.yml").read_text())
    if args.backend:
        template["tuner"]["classArgs"]["backend"] = args.backend
    template["searchSpaceFile"] = str(ROOT / template["searchSpaceFile"])
    template["trialCodeDirectory"] = str(ROOT)
    template["tuner"]["codeDirectory"] = str(ROOT)
    env = dict(os.environ, PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}")
    with tempfile.TemporaryDirectory() as tmp:
        config = write_config(template, Path(tmp) / "config.yml", Path(tmp) / "nni-experiments")
        start = time.perf_counter()
        with create_experiment(config, env=env) as experiment:
            status = experiment.wait(timeout=1800)
            seconds = time.perf_counter() - start
            metrics = experiment.final_metrics()
            jobs = experiment.trial_jobs()
        screens = [m for m in metrics if m.get("screening")]
        search = [m for m in metrics if not m.get("retrain") and not m.get("screening")]
        final = next((m for m in metrics if m.get("retrain")), {})
        found = json.loads(final["results"])["found"] if final.get("results") else {}
        measured = (found.get("extra") or {}).get("vs_baseline", {})  # timed interleaved; the predicted ratios
        reports = sorted(Path(tmp).glob("nni-experiments/*/hwaware/report/results.json"))
        report = json.loads(reports[0].read_text()) if reports else {}
        budget = report.get("budget", {})
        stats_files = sorted(Path(tmp).glob("nni-experiments/*/hwaware/tuner_stats.json"))
        stats = json.loads(stats_files[0].read_text()) if stats_files else {}
        # latency judged as the report judges it: on the table's scale where the trial has it (its ratio
        # to the reference times the table's reference latency), which a busy machine does not move
        # (the report's trials carry it; NNI's metrics are what the trials reported)
        judged = [t for t in report.get("trials", []) if not t.get("retrain")] or search
        best = best_trial(judged, budget) if judged else {}  # the best measured within the budget
        over = {f"over_budget_measured_{m}": sum(float(measured_cost(t, m)) > float(budget[m]) for t in judged if m in t)
                for m in ("latency_ms", "memory_mb") if m in budget}
        over.update({f"over_budget_predicted_{m}": sum(float(t[f"predicted_{m}"]) > float(budget[m])
                                                       for t in search if f"predicted_{m}" in t)
                     for m in ("latency_ms", "memory_mb") if m in budget})
        ratios = sorted(float(t["latency_ms"]) / float(t["predicted_latency_ms"]) for t in search
                        if t.get("predicted_latency_ms"))
        print(json.dumps({
            "status": status, "wall_s": round(seconds, 1), "trials": len(jobs),
            "succeeded": sum(j["status"] == "SUCCEEDED" for j in jobs),
            # the two resources: trainings, and measurements (by screening trials or a trial's own, first)
            "trainings": stats.get("trainings"), "measurements": stats.get("measurements"),
            "measurements_per_training": stats.get("measurements_per_training"),
            "screening_trials": len(screens), "screened": sum(int(m.get("measured", 0)) for m in screens),
            "screened_over_budget": stats.get("screened_over_budget"),
            "trained_over_budget_measured": sum(not measured_within(t, budget) for t in judged
                                                if not t.get("not_trained")),
            "best_val_top1": best.get("default"), "best_latency_ms": best.get("latency_ms"),
            "best_predicted_latency_ms": best.get("predicted_latency_ms"), "budget": budget, **over,
            "not_trained": sum(bool(t.get("not_trained")) for t in search),
            # what a trial measured over the budget no longer spends: the training of a search trial
            "search_train_seconds_median": statistics.median(train) if (
                train := [float(t["train_seconds"]) for t in search if "train_seconds" in t]) else None,
            "measured_over_predicted_latency_median": ratios[len(ratios) // 2] if ratios else None,
            "found_test_top1": final.get("default"), "baseline_test_top1": final.get("baseline_test_top1"),
            "found_latency_ms": final.get("latency_ms"), "baseline_latency_ms": final.get("baseline_latency_ms"),
            # the headline in the deployment runtime (config.yml's backend); PyTorch's, which trains, beside
            "deploy_backend": final.get("deploy_backend"),
            "latency_ratio": final.get("latency_ratio"),
            "latency_ratio_ci95": [final.get("latency_ratio_ci95_low"), final.get("latency_ratio_ci95_high")],
            "torch_latency_ratio": final.get("torch_latency_ratio"),
            "torch_latency_ratio_ci95": [final.get("torch_latency_ratio_ci95_low"),
                                         final.get("torch_latency_ratio_ci95_high")],
            "exported_format": final.get("exported_format"),
            "exported_latency_ratio": final.get("exported_latency_ratio"),
            "exports_test_top1": {k[: -len("_test_top1")]: v for k, v in final.items()
                                  if k.endswith("_test_top1") and k not in ("baseline_test_top1",)},
            "memory_ratio": final.get("memory_ratio"), "predicted_latency_ratio": measured.get("predicted_latency_ratio"),
            "predicted_memory_ratio": measured.get("predicted_memory_ratio"), "warnings": measured.get("warnings", []),
            "cost_correction": report.get("correction"),
            # the search's decisions, the zero-cost proxy's scoring on the spot included, and the proxy's cost
            "decision_ms": 1000 * stats["decision_seconds"] / stats["decisions"] if stats.get("decisions") else None,
            "proxy": stats.get("proxy"),
        }))


if __name__ == "__main__":
    main()
