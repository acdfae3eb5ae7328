"""How well the cost model predicts whole networks of any NNI model space on this CPU.

For each space: profile it (every distinct leaf once; batch 1, 1 thread; the one
measuring engine, shared shuffled rounds), measure ``k`` random networks end to end in
two passes of independently built instances, interleaved in the same shuffled rounds
with the space's reference network as the probe (``--check-seconds`` per network timed:
the truth's precision), and compare the prediction with the first pass: Spearman, Kendall, MAPE,
share within +-10 % in ms and relative to the reference network timed in the same
rounds (which cancels drift of the machine's speed between profiling and checking).
The noise ceiling is the Spearman of the two passes. With ``--load`` each space is done
twice: quiet, then with the load harness on (:class:`~nni_hwaware.profiling.load.BackgroundLoad`)
for both the profile and the check. Prints a line per space and condition and one JSON
object on its last line: ``{"backend", "busy", "spaces": {"<space>": {"quiet": {...}, "loaded": {...}}}}``.
``--backend`` picks the runtime profiled and checked (``onnxruntime``, ``onnxruntime-int8``, ...);
``--busy N`` runs N more CPU-bound processes beside the load harness. Where the profile fitted the
weights beyond the cache (a CPU table, some calibration network's weights over the core's L2), a run
also gives ``cache_term`` and ``without_cache_term``: the same table's term refitted to the same
calibration networks without it, checked against the same measurements (the ablation, on one run's data).

    PYTHONPATH=examples/own_space python benchmarks/lut_fidelity.py --load -k 60 \
        --space digits --space nni:NasBench201 --space nni:ProxylessNAS --space own_space:OwnSpace
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import subprocess
import sys
import time

sys.path.insert(0, os.getcwd())

from nni_hwaware.cost_model import find_leaves, profile_model_space, space_cost_model
from nni_hwaware.cost_model import profile as profiling
from nni_hwaware.cost_model.calibration import fit_network_term
from nni_hwaware.cost_model.fidelity import agreement, check_fidelity
from nni_hwaware.cost_table.table import CostTable
from nni_hwaware.profiling.load import BackgroundLoad
from nni_hwaware.spaces.resolve import resolve_space

DEFAULT_SPACES = ["nni:NasBench201", "nni:ProxylessNAS", "nni:ShuffleNetSpace", "nni:MobileNetV3Space",
                  "own_space:OwnSpace", "digits"]


def _without_cache_term(table: CostTable, fitted: dict[str, object]) -> CostTable | None:
    """The same table with its per-network term refitted to the same calibration networks without the
    weights beyond the cache (the ablation, on the same measurements); None where no such term was fitted."""
    if not fitted or fitted["term"].beyond_cache is None:
        return None
    args, kwargs = fitted["args"], {k: v for k, v in fitted["kwargs"].items() if k not in ("weights_mb", "cache_mb")}
    term = fit_network_term(*args, **kwargs)
    frame = table.frame.copy()
    network = frame.kind == "network"
    frame.loc[network, "latency_scale"], frame.loc[network, "latency_terms"] = term.scale, term.to_json()
    frame.loc[network, "latency_ms"] = max(term.constant, 1e-6)
    return CostTable(frame)


def run(spec: str, k: int, batch_size: int, seed: int, check_seconds: float,
        backend: str = "torch") -> dict[str, object]:
    named = resolve_space(spec)
    start = time.perf_counter()
    leaves = find_leaves(named.space, named.dummy_input())
    fitted: dict[str, object] = {}

    def keep_fit(*args: object, **kwargs: object) -> object:  # what the profile fitted, for the ablation
        fitted.update(args=args, kwargs=kwargs, term=fit_network_term(*args, **kwargs))
        return fitted["term"]

    profiling.fit_network_term = keep_fit
    try:
        table = profile_model_space(named.space, named.dummy_input(), leaves=leaves, batch_size=batch_size,
                                    backend=backend, seed=seed, progress=False, reference=named.baseline)
    finally:
        profiling.fit_network_term = fit_network_term
    profiled = time.perf_counter() - start
    model = space_cost_model(leaves, table, backend=backend, batch_size=batch_size, name=spec)
    figures, frame = check_fidelity(named.space, model, named.input_shape, k, seed=seed,
                                    reference=named.baseline(model), max_seconds=check_seconds * (2 * k + 1))
    latency = figures["latency"]
    ablation = {}
    if fitted and fitted["kwargs"].get("cache_mb") is not None and fitted["term"].beyond_cache is None:
        over = sum(w > fitted["kwargs"]["cache_mb"] for w in fitted["kwargs"]["weights_mb"])
        ablation = {"cache_term": None, "cache_mb": fitted["kwargs"]["cache_mb"], "networks_beyond": int(over)}
    if (bare_table := _without_cache_term(table, fitted)) is not None:  # the same networks, the same timings
        bare = space_cost_model(leaves, bare_table, backend=backend, batch_size=batch_size, name=spec)
        reference = named.baseline(model)
        predicted = [bare.predict(ast.literal_eval(sample)).latency_ms for sample in frame["sample"]]
        relative = [p / bare.predict(reference).latency_ms for p in predicted]
        ms, vs = agreement(predicted, frame.measured_latency_ms), agreement(relative, frame.measured_vs_reference)
        over = sum(w > fitted["kwargs"]["cache_mb"] for w in fitted["kwargs"]["weights_mb"])
        ablation = {"cache_term": {**fitted["term"].beyond_cache.to_dict(), "networks_beyond": int(over)},
                    "without_cache_term": {
            "spearman": round(ms["spearman"], 4), "within10": round(ms["within10"], 4),
            "within10_vs_reference": round(vs["within10"], 4), "mape": round(ms["mape"], 4)}}
    leaf_rows = table.frame[table.frame.kind == "leaf"]
    return {key: round(latency[key], 4) for key in ("spearman", "kendall", "mape", "within10",
                                                     "within10_vs_reference", "ceiling", "flops_spearman",
                                                     "probe_drift", "share_met")} | {"rounds": latency["rounds"],
        "profile_share_met": round(float(leaf_rows.met_target.astype(bool).mean()), 3),
        "profile_probe_drift": round(float(leaf_rows.probe_drift.max()), 3),
        "n": latency["n"], "profile_s": round(profiled, 1), "leaves": leaves.occurrences(),
        "entries": len(leaves.entries), "memory_mape": round(figures["memory"]["mape"], 2),
        "validate_s": round(time.perf_counter() - start - profiled, 1)} | ablation


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--space", action="append", help="a space (repeat); default: the hub spaces, "
                        "the own-space example and digits")
    parser.add_argument("-k", type=int, default=100, help="random networks per space")
    parser.add_argument("--batch-size", type=int, default=1)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--check-seconds", type=float, default=2.0,
                        help="seconds of shared rounds per network timed by the check (both passes and the "
                             "reference): the truth's precision; `validate` gives 1 s by default")
    parser.add_argument("--load", action="store_true", help="also profile and check each space under the load harness")
    parser.add_argument("--busy", type=int, default=0,
                        help="with --load: this many more CPU-bound processes beside the harness (each "
                             "`python -c 'while True: pass'`, started and stopped by this script)")
    parser.add_argument("--backend", default="torch", help="the runtime profiled and checked (onnxruntime, ...)")
    args = parser.parse_args()
    results: dict[str, dict[str, object]] = {}
    for spec in args.space or DEFAULT_SPACES:
        results[spec] = {"quiet": run(spec, args.k, args.batch_size, args.seed, args.check_seconds, args.backend)}
        print(f"{spec} quiet: {json.dumps(results[spec]['quiet'])}", flush=True)
        if args.load:
            busy = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(args.busy)]
            try:
                with BackgroundLoad(seed=args.seed, seconds=3600):
                    results[spec]["loaded"] = run(spec, args.k, args.batch_size, args.seed, args.check_seconds,
                                                  args.backend)
            finally:
                for process in busy:
                    process.kill()
                    process.wait()
            print(f"{spec} loaded: {json.dumps(results[spec]['loaded'])}", flush=True)
    print(json.dumps({"backend": args.backend, "busy": args.busy, "spaces": results}))


if __name__ == "__main__":
    main()
