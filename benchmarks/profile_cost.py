"""Wall time to profile spaces on this chip with the interleaved engine, and how many entries met its target.

Every leaf is timed once per round in a shuffled order until its figure (10th percentile) is known within
2 % (95 % interval) or the time budget (0.25 s per leaf, 2 s to 2 minutes) ends. Default
spaces: ``digits`` and ``nni:MobileNetV3Space`` (any space ``--space`` takes). Prints a
line per space and one JSON object on its last line: ``{space: {"seconds", "entries",
"rounds", "share_met_2pct", "probe_drift", "max_half_width"}}``.
"""

from __future__ import annotations

import argparse
import json
import time

from nni_hwaware.cost_model import profile_space
from nni_hwaware.spaces.resolve import resolve_space


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--spaces", nargs="*", default=["digits", "nni:MobileNetV3Space"])
    parser.add_argument("--batch-size", type=int, default=1)
    args = parser.parse_args()
    results = {}
    for name in args.spaces:
        start = time.perf_counter()
        table = profile_space(resolve_space(name), batch_size=args.batch_size, progress=False)
        seconds = time.perf_counter() - start
        leaves = table.frame[table.frame.kind != "network"]
        half = ((leaves.latency_high_ms - leaves.latency_low_ms) / 2 / leaves.latency_ms)
        results[name] = {"seconds": round(seconds, 1), "entries": len(leaves),
                         "rounds": int(leaves.timing_rounds.max()),
                         "share_met_2pct": round(float(leaves.met_target.astype(bool).mean()), 3),
                         "probe_drift": round(float(leaves.probe_drift.max()), 3),
                         "max_half_width": round(float(half.max()), 4)}
        print(name, results[name], flush=True)
    print(json.dumps(results))


if __name__ == "__main__":
    main()
