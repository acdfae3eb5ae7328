"""The zero-cost proxy (SynFlow) of every NAS-Bench-201 cell, as the search would compute it.

Each of the 15,625 cells is built as NNI's ``NasBench201`` hub space builds it
(``nni:NasBench201``: 16 channels, five cells per stage, 32 x 32 inputs; its labels
``cell/<from>_<to>``, ``edge_<to>_<from>`` in the data) and scored with
:class:`nni_hwaware.zero_cost.ProxyScores`, the same call the PPO tuner makes by default. The
scores go to ``data/nb201_synflow.csv.gz`` (``arch_idx``, ``log_synflow``), which
:mod:`search_efficiency` gives the PPO core in place of computing them again in every run; its
decision times then leave the proxy out, and this script's figures say what it adds.

It also scores ``--check`` random cells on a shallow replica (8 channels, one cell per stage,
16 x 16) and says how well it stands in: the rank correlation of the two scores, and the
correlation of what each adds beside the costs (the residuals of a least-squares fit on the logs
of FLOPs, parameters and two devices' latencies), which is what the search uses. The last line is
one JSON object: milliseconds per cell (build and score; median and 90th percentile) of both.

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

DATA = Path(__file__).parent / "data"
#: Where each proxy's scores go (``--proxy``).
OUT = {"synflow": DATA / "nb201_synflow.csv.gz", "naswot": DATA / "nb201_naswot.csv.gz"}
#: The shallow replica the check compares with (PPO options ``proxy_space_args`` / ``proxy_input_shape``).
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


def _score(task: tuple[list[dict[str, str]], dict[str, Any], tuple[int, ...] | None, str]) -> tuple[list[float], list[float]]:
    archs, space_args, input_shape, proxy = task
    import torch

    torch.set_num_threads(1)
    warnings.filterwarnings("ignore")
    from nni_hwaware.spaces.resolve import resolve_space
    from nni_hwaware.zero_cost import ProxyScores

    scores = ProxyScores(resolve_space("nni:NasBench201", **space_args), proxy, input_shape=input_shape)
    values, times = [], []
    for arch in archs:
        start = time.perf_counter()
        value = scores([arch])[0]
        values.append(float(value) if np.ndim(value) == 0 else value.tolist())  # one proxy, or a row of them
        times.append(1000 * (time.perf_counter() - start))
    return values, times


def score_all(archs: list[dict[str, str]], space_args: dict[str, Any], input_shape: tuple[int, ...] | None,
              jobs: int, chunk: int = 250, proxy: str = "synflow") -> tuple[np.ndarray, np.ndarray]:
    tasks = [(archs[i:i + chunk], space_args, input_shape, proxy) for i in range(0, len(archs), chunk)]
    with Pool(jobs) as pool:
        parts = pool.map(_score, tasks)
    return (np.concatenate([np.asarray(v) for v, _ in parts]), np.concatenate([np.asarray(t) for _, t in parts]))


def _beside_costs(frame: pd.DataFrame, values: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """What ``values`` add beside the costs: residuals of least squares on the logs of the cells' costs."""
    costs = np.column_stack([np.ones(len(rows)), *(np.log(frame[c].to_numpy(float)[rows]) for c in (
        "flops_M_computed", "params_M_computed", "latency_ms_titan_rtx_1", "latency_ms_silver_4114"))])
    coef, *_ = np.linalg.lstsq(costs, values, rcond=None)
    return values - costs @ coef


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=1)
    parser.add_argument("--check", type=int, default=400, help="random cells also scored on the shallow replica")
    parser.add_argument("--limit", type=int, help="score only the first N cells (a quick look; writes nothing)")
    parser.add_argument("--proxy", choices=sorted(OUT), default="synflow", help="the proxy scored (its own file)")
    args = parser.parse_args(argv)
    frame = nb201.load()
    rows = frame[list(nb201.EDGES)].to_dict("records")
    archs = [nni_arch(r) for r in rows[: args.limit]]
    scores, scores_ms = score_all(archs, {}, None, args.jobs, proxy=args.proxy)
    if args.limit is None:
        from nni_hwaware.files import atomic_open

        table = pd.DataFrame({"arch_idx": frame.arch_idx[: len(scores)], f"log_{args.proxy}": scores})
        with atomic_open(OUT[args.proxy], "wb") as fh:
            table.to_csv(fh, index=False, compression={"method": "gzip", "mtime": 0}, float_format="%.10g")
    picks = np.random.default_rng(0).choice(len(archs), size=min(args.check, len(archs)), replace=False)
    replica, replica_ms = score_all([archs[i] for i in picks], REPLICA, REPLICA_INPUT, args.jobs, chunk=50,
                                    proxy=args.proxy)
    from scipy.stats import spearmanr

    result = {"cells": len(archs), "ms_median": round(float(np.median(scores_ms)), 2),
              "ms_p90": round(float(np.percentile(scores_ms, 90)), 2),
              "replica": {**REPLICA, "input_shape": list(REPLICA_INPUT)}, "checked_cells": len(picks),
              "replica_ms_median": round(float(np.median(replica_ms)), 2),
              "replica_spearman": round(float(spearmanr(replica, scores[picks]).statistic), 4),
              "replica_beside_costs_correlation": round(float(np.corrcoef(
                  _beside_costs(frame, replica, picks), _beside_costs(frame, scores[picks], picks))[0, 1]), 4),
              "proxy": args.proxy, "written": None if args.limit else str(OUT[args.proxy].name)}
    print(json.dumps(result))
    return result


if __name__ == "__main__":
    main()
