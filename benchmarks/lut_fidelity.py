"""How well the cost model predicts whole networks of any NNI model space on this CPU.

For each space: profile it (every distinct leaf once; batch 1, 1 thread), measure
``k`` random networks end to end in two independent passes, and compare the
prediction with the first pass. The noise ceiling is the Spearman of the two
passes. Prints a line per space and one JSON object on its last line:
``{"spaces": {"<space>": {"spearman", "kendall", "mape", "within10", "ceiling", "n",
"profile_s", "leaves", "entries", "flops_spearman", "memory_mape"}}}``.

    PYTHONPATH=examples/own_space python benchmarks/lut_fidelity.py \
        --space nni:NasBench201 --space nni:ProxylessNAS --space nni:ShuffleNetSpace \
        --space nni:MobileNetV3Space --space own_space:OwnSpace --space digits [-k 100]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

sys.path.insert(0, os.getcwd())

from nni_hwaware.cost_model import find_leaves, profile_model_space, space_cost_model
from nni_hwaware.cost_model.fidelity import check_fidelity
from nni_hwaware.spaces.resolve import resolve_space

DEFAULT_SPACES = ["nni:NasBench201", "nni:ProxylessNAS", "nni:ShuffleNetSpace", "nni:MobileNetV3Space",
                  "own_space:OwnSpace", "digits"]


def run(spec: str, k: int, batch_size: int, seed: int) -> dict[str, object]:
    named = resolve_space(spec)
    start = time.perf_counter()
    leaves = find_leaves(named.space, named.dummy_input())
    table = profile_model_space(named.space, named.dummy_input(), leaves=leaves, batch_size=batch_size,
                                seed=seed, progress=False)
    profiled = time.perf_counter() - start
    model = space_cost_model(leaves, table, batch_size=batch_size, name=spec)
    figures, _ = check_fidelity(named.space, model, named.input_shape, k, seed=seed)
    latency = figures["latency"]
    return {key: round(latency[key], 4) for key in ("spearman", "kendall", "mape", "within10", "ceiling",
                                                     "flops_spearman")} | {
        "n": latency["n"], "profile_s": round(profiled, 1), "leaves": leaves.occurrences(),
        "entries": len(leaves.entries), "memory_mape": round(figures["memory"]["mape"], 2),
        "validate_s": round(time.perf_counter() - start - profiled, 1)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--space", action="append", help="a space (repeat); default: the hub spaces, "
                        "the own-space example and digits")
    parser.add_argument("-k", type=int, default=100, help="random networks per space")
    parser.add_argument("--batch-size", type=int, default=1)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    results = {}
    for spec in args.space or DEFAULT_SPACES:
        results[spec] = run(spec, args.k, args.batch_size, args.seed)
        print(f"{spec}: {json.dumps(results[spec])}", flush=True)
    print(json.dumps({"spaces": results}))


if __name__ == "__main__":
    main()
