"""Run a command under the load harness: a seeded busy/idle background load on this process's CPUs.

    python benchmarks/load.py --seed 0 -- python benchmarks/main_job.py

The load (:class:`nni_hwaware.profiling.load.BackgroundLoad`: two workers per CPU of this
process's affinity, busy and idle in random phases of 50-500 ms) runs for as long as the
command, at most ``--seconds``. The command's output passes through; the last line is
one JSON object: ``{"seed", "workers", "returncode", "wall_s"}``.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time

from nni_hwaware.profiling.load import BackgroundLoad


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--seconds", type=float, default=3600.0, help="the load's bound (default: 1 hour)")
    parser.add_argument("--workers", type=int, help="worker processes (default: two per CPU)")
    parser.add_argument("command", nargs=argparse.REMAINDER, help="the command to run, after --")
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("give the command to run after --")
    start = time.perf_counter()
    with BackgroundLoad(seed=args.seed, seconds=args.seconds, workers=args.workers) as load:
        workers = len(load.pids)
        returncode = subprocess.call(command)
    print(json.dumps({"seed": args.seed, "workers": workers, "returncode": returncode,
                      "wall_s": round(time.perf_counter() - start, 1)}))
    return returncode


if __name__ == "__main__":
    sys.exit(main())
