"""The Gumbel search against the baseline on the digits space, on this CPU (seed 001's comparison).

Runs the whole job of ``nni-hwaware search gumbel`` with ``examples/digits/gumbel.yml``
(profile this CPU, prune, staged search for each alpha of the sweep, export, retrain
the found networks and the baseline from scratch, measure them on this CPU, report)
with a fixed seed, then prints the report table and, on its last line, one JSON
object::

    {"latency_ratio", "latency_ratio_ci95",    # searched / baseline, timed interleaved (A B, B A, ...)
     "memory_ratio",                           # searched / baseline, measured
     "top1_drop_pp", "top3_drop_pp",           # baseline minus searched, test split, points
     "search_s_over_retrain_s",                # search wall time / one retraining of the found network
     "alphas", "sweep": [{alpha, latency_ratio, memory_ratio, top1_drop_pp, ...}],
     "latency_falls_with_alpha", "targets": {name: met}, ...}

Targets (seed 001 on CIFAR-10: latency -55 %, memory -49.22 %, top-3 -0.5 points):
latency <= 0.45x, memory <= 0.51x, top-3 within 0.5 points, top-1 within 1 point,
search at most 3x one retraining, latency falling as alpha grows.
"""

from __future__ import annotations

import argparse
import itertools
import json
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
TARGETS = {"latency_ratio": 0.45, "memory_ratio": 0.51, "top3_drop_pp": 0.5, "top1_drop_pp": 1.0,
           "search_s_over_retrain_s": 3.0}


def _figures(result: dict[str, Any], baseline: dict[str, Any]) -> dict[str, Any]:
    measured = result["extra"]["vs_baseline"]  # timed interleaved with the baseline (A B, B A, ...)
    return {
        "alpha": result["alpha"],
        "latency_ratio": measured["latency_ratio"],
        "latency_ratio_ci95": measured["latency_ratio_ci95"],
        "timing_spread": measured["spread"],
        "warnings": measured["warnings"],
        "memory_ratio": result["memory_mb"] / baseline["memory_mb"],
        "predicted_latency_ratio": result["predicted_latency_ms"] / baseline["predicted_latency_ms"],
        "predicted_memory_ratio": result["predicted_memory_mb"] / baseline["predicted_memory_mb"],
        "top1_drop_pp": 100 * (baseline["test_top1"] - result["test_top1"]),
        "top3_drop_pp": 100 * (baseline["test_top3"] - result["test_top3"]),
        "search_s_over_retrain_s": result["search_seconds"] / result["train_seconds"],
        "search_s": result["search_seconds"], "retrain_s": result["train_seconds"],
        "arch": result["arch"],
    }


def _falls(sweep: list[dict[str, Any]], tolerance: float = 0.03) -> bool:
    """Measured latency never rises (beyond timing noise) as alpha grows, and ends lower than it starts."""
    ordered = [s["latency_ratio"] for s in sorted(sweep, key=lambda s: s["alpha"])]
    steady = all(b <= a * (1 + tolerance) for a, b in itertools.pairwise(ordered))
    return steady and ordered[-1] < ordered[0]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", type=Path, default=ROOT / "examples" / "digits" / "gumbel.yml")
    parser.add_argument("--out", type=Path, default=ROOT / "runs" / "bench_oneshot_vs_baseline")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--table", help="reuse this cost table (default: profile this CPU into <out>)")
    parser.add_argument("--alphas", type=float, nargs="*", help="sweep (default: the config's)")
    args = parser.parse_args()

    from nni_hwaware.strategies.gumbel import GumbelSearchConfig, run_pipeline

    config = GumbelSearchConfig.from_yaml(args.config)
    changes: dict[str, Any] = {"out": str(args.out), "seed": args.seed, "search.resume": False, "baseline": True}
    if args.table:
        changes["cost.table"] = args.table
    if args.alphas:
        changes["sweep.alphas"] = list(args.alphas)
    config = config.replace(**changes)
    if len(set(config.sweep.alphas) | {config.penalty.alpha}) < 4:
        raise SystemExit("the sweep needs at least 4 alpha values")
    if not args.table and not (args.out / "cost_table.csv").exists():
        start = time.perf_counter()
        from nni_hwaware.cost_model import profile_space
        from nni_hwaware.spaces import get_space_config

        table = profile_space(get_space_config(config.space), threads=config.cost.threads, seed=args.seed,
                              progress=False)
        table.save(args.out / "cost_table.csv")
        profile_s = time.perf_counter() - start
    else:
        profile_s = 0.0
    for stale in args.out.glob("search/*/checkpoints/last.ckpt"):  # a fresh search every time
        stale.unlink()

    summary = run_pipeline(config, log=lambda line: print(line, flush=True))
    baseline, searched = summary["baseline"], summary["searched"]
    main_figures = _figures(searched, baseline)
    results = {sweep["alpha"]: sweep for sweep in summary["sweep"]}
    results.setdefault(config.penalty.alpha, searched)
    sweep = [_figures(results[alpha], baseline) for alpha in sorted(results)]
    figures: dict[str, Any] = {
        **{k: main_figures[k] for k in ("latency_ratio", "latency_ratio_ci95", "timing_spread", "warnings",
                                        "memory_ratio", "top1_drop_pp", "top3_drop_pp",
                                        "search_s_over_retrain_s", "predicted_latency_ratio",
                                        "predicted_memory_ratio", "search_s", "retrain_s")},
        "alphas": sorted(results), "alpha": config.penalty.alpha,
        "latency_falls_with_alpha": _falls(sweep),
        "baseline": {k: baseline[k] for k in ("test_top1", "test_top3", "latency_ms", "memory_mb", "params",
                                              "flops", "train_seconds")},
        "searched": {k: searched[k] for k in ("test_top1", "test_top3", "latency_ms", "memory_mb", "params",
                                              "flops", "train_seconds", "search_seconds")},
        "arch": searched["arch"], "chip": summary["chip"], "seed": args.seed, "profile_s": profile_s,
        "sweep": [{k: v for k, v in s.items() if k != "arch"} | {"blocks": _short(s["arch"])} for s in sweep],
    }
    figures["targets"] = {name: figures[name] <= bound for name, bound in TARGETS.items()}
    figures["targets"]["latency_falls_with_alpha"] = figures["latency_falls_with_alpha"]
    print((Path(summary["report"]["markdown"])).read_text(encoding="utf-8"))
    print(json.dumps(figures, default=float))


def _short(arch: dict[str, str]) -> str:
    return " ".join(f"{label.removeprefix('layer')}:{block}" for label, block in arch.items() if block != "skip") or "all skip"


if __name__ == "__main__":
    main()
