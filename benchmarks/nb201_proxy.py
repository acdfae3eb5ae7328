"""The zero-cost proxy (SynFlow) of every NAS-Bench-201 cell, as the search would compute it.

Each of the 15,625 cells is built as NNI's ``NasBench201`` hub space builds it
(``nni:NasBench201``; its labels ``cell/<from>_<to>``, ``edge_<to>_<from>`` in the data) and
scored with :class:`nni_hwaware.zero_cost.ProxyScores`, the same call the PPO tuner makes, on
the replica ``PPOConfig.proxy_space_args`` / ``proxy_input_shape`` name (default: 8 channels,
one cell per stage, 16 x 16 inputs). The scores go to ``data/nb201_synflow.csv.gz``
(``arch_idx``, ``log_synflow``), which :mod:`search_efficiency` gives the PPO core in place of
computing them again in every run; its decision times then leave the proxy out, and this
script's figures say what it adds.

It also scores ``--check`` random cells at the space's own size (16 channels, five cells per
stage, 32 x 32) and prints the rank correlation of the two. The last line is one JSON object:
milliseconds per cell (build and score; median and 90th percentile) for both, and the Spearman
correlation.

    python benchmarks/nb201_proxy.py --jobs 2
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import warnings
from multiprocessing import Pool
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).parent))

import nb201

OUT = Path(__file__).parent / "data" / "nb201_synflow.csv.gz"
#: The replica the benchmark's scores come from (the PPO options of the same names).
REPLICA = {"stem_out_channels": 8, "num_modules_per_stack": 1}
REPLICA_INPUT = (3, 16, 16)
_OPS = {"nor_conv_1x1": "conv_1x1", "nor_conv_3x3": "conv_3x3"}


def nni_arch(row: dict[str, str]) -> dict[str, str]:
    """A data row's cell as a sample of NNI's ``NasBench201`` (``edge_<to>_<from>`` -> ``cell/<from>_<to>``)."""
    out = {}
    for edge in nb201.EDGES:
        _, to, src = edge.split("_")
        out[f"cell/{src}_{to}"] = _OPS.get(row[edge], row[edge])
    return out


def _score(task: tuple[list[dict[str, str]], dict[str, Any], tuple[int, ...] | None]) -> tuple[list[float], list[float]]:
    archs, space_args, input_shape = task
    import torch

    torch.set_num_threads(1)
    warnings.filterwarnings("ignore")
    from nni_hwaware.spaces.resolve import resolve_space
    from nni_hwaware.zero_cost import ProxyScores

    scores = ProxyScores(resolve_space("nni:NasBench201", **space_args), input_shape=input_shape)
    values, times = [], []
    for arch in archs:
        start = time.perf_counter()
        values.append(float(scores([arch])[0]))
        times.append(1000 * (time.perf_counter() - start))
    return values, times


def score_all(archs: list[dict[str, str]], space_args: dict[str, Any], input_shape: tuple[int, ...] | None,
              jobs: int, chunk: int = 250) -> tuple[np.ndarray, np.ndarray]:
    tasks = [(archs[i:i + chunk], space_args, input_shape) for i in range(0, len(archs), chunk)]
    with Pool(jobs) as pool:
        parts = pool.map(_score, tasks)
    return (np.concatenate([np.asarray(v) for v, _ in parts]), np.concatenate([np.asarray(t) for _, t in parts]))


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=1)
    parser.add_argument("--check", type=int, default=200, help="random cells also scored at full size")
    parser.add_argument("--limit", type=int, help="score only the first N cells (a quick look; writes nothing)")
    args = parser.parse_args(argv)
    frame = nb201.load()
    rows = frame[list(nb201.EDGES)].to_dict("records")
    archs = [nni_arch(r) for r in rows[: args.limit]]
    replica, replica_ms = score_all(archs, REPLICA, REPLICA_INPUT, args.jobs)
    if args.limit is None:
        from nni_hwaware.files import atomic_open

        table = pd.DataFrame({"arch_idx": frame.arch_idx[: len(replica)], "log_synflow": replica})
        with atomic_open(OUT, "wb") as fh:
            table.to_csv(fh, index=False, compression={"method": "gzip", "mtime": 0}, float_format="%.10g")
    picks = np.random.default_rng(0).choice(len(archs), size=min(args.check, len(archs)), replace=False)
    full, full_ms = score_all([archs[i] for i in picks], {}, None, args.jobs, chunk=25)
    from scipy.stats import spearmanr

    result = {"cells": len(archs), "replica": {**REPLICA, "input_shape": list(REPLICA_INPUT)},
              "replica_ms_median": round(float(np.median(replica_ms)), 2),
              "replica_ms_p90": round(float(np.percentile(replica_ms, 90)), 2),
              "full_ms_median": round(float(np.median(full_ms)), 2),
              "full_ms_p90": round(float(np.percentile(full_ms, 90)), 2),
              "spearman_replica_vs_full": round(float(spearmanr(replica[picks], full).statistic), 4),
              "checked_cells": len(picks), "written": None if args.limit else str(OUT.name)}
    print(json.dumps(result))
    return result


if __name__ == "__main__":
    main()
