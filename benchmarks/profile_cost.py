"""Wall time to profile each shipped space on this chip, and the largest CV of its entries.

Target: the CIFAR-10 ResNet50 space in under 2 minutes with every entry's CV <= 5 %.
Prints one JSON object on its last line: ``{space: {"seconds", "entries",
"max_cv", "share_cv_le_5pct"}}``.
"""

from __future__ import annotations

import argparse
import json
import time

from nni_hwaware.cost_model import profile_space
from nni_hwaware.spaces import get_space_config, space_names


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--spaces", nargs="*", default=space_names())
    parser.add_argument("--batch-size", type=int, default=1)
    args = parser.parse_args()
    results = {}
    for name in args.spaces:
        start = time.perf_counter()
        table = profile_space(get_space_config(name), batch_size=args.batch_size, progress=False)
        seconds = time.perf_counter() - start
        blocks = table.frame[table.frame.kind != "network"]
        results[name] = {"seconds": round(seconds, 1), "entries": len(blocks),
                         "max_cv": round(float(blocks.latency_cv.max()), 4),
                         "share_cv_le_5pct": round(float((blocks.latency_cv <= 0.05).mean()), 3)}
        print(name, results[name], flush=True)
    print(json.dumps(results))


if __name__ == "__main__":
    main()
