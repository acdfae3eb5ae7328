"""How well the cost table predicts whole networks on this CPU.

Profiles the digits space (batch 1 and 32) and the CIFAR-10 ResNet50 space
(batch 1), measures random architectures end to end, and compares with the
table's prediction. Prints one JSON object on its last line:
``{"digits_b1": {"latency": {"spearman", "kendall", "mape", "within_10pct",
"flops_spearman", ...}, "memory": {...}, "n_archs"}, ...}``.

    python benchmarks/lut_fidelity.py [--digits-archs 100] [--cifar-archs 30] [--quick]
"""

from __future__ import annotations

import argparse
import json
import time

from nni_hwaware.cost_table import CostModel, profile_space, validate
from nni_hwaware.spaces import get_space_config


def run(space: str, batch_size: int, archs: int, seed: int) -> dict[str, object]:
    config = get_space_config(space)
    start = time.perf_counter()
    table = profile_space(config, batch_size=batch_size, seed=seed, progress=False)
    profiled = time.perf_counter() - start
    report = validate(CostModel(table, config, batch_size=batch_size), archs, seed=seed, progress=False)
    return {**report.summary(), "profile_s": round(profiled, 1),
            "validate_s": round(time.perf_counter() - start - profiled, 1)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--digits-archs", type=int, default=100)
    parser.add_argument("--cifar-archs", type=int, default=30)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--quick", action="store_true", help="digits at batch 1 only, 20 architectures")
    args = parser.parse_args()
    cases = [("digits", 1, args.digits_archs)]
    if args.quick:
        cases = [("digits", 1, 20)]
    else:
        cases += [("digits", 32, args.digits_archs), ("cifar10_resnet50", 1, args.cifar_archs)]
    results = {}
    for space, batch, archs in cases:
        results[f"{space}_b{batch}"] = run(space, batch, archs, args.seed)
        print(f"{space} batch {batch}: {json.dumps(results[f'{space}_b{batch}'])}", flush=True)
    print(json.dumps(results))


if __name__ == "__main__":
    main()
