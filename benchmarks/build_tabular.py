"""Build the tabular benchmark: every architecture of ``digits_tiny`` trained on digits.

Writes ``benchmarks/data/tabular_digits_tiny.csv`` (one row per architecture: its
blocks, validation and test accuracy, the cost table's latency / memory / FLOPs)
and ``benchmarks/data/digits_tiny_table.csv`` (the cost table used). Strategies
are then compared in seconds by looking results up instead of training
(``benchmarks/search_efficiency.py``). Rebuild: ``python benchmarks/build_tabular.py``
(about 10-15 minutes on 2 cores).
"""

from __future__ import annotations

import argparse
import itertools
import json
import time
from pathlib import Path

import pandas as pd

from nni_hwaware.cost_model import load_or_profile, space_model
from nni_hwaware.files import write_atomically
from nni_hwaware.spaces import get_space_config
from nni_hwaware.spaces.resolve import resolve_space
from nni_hwaware.training.train import TrainConfig, train_architecture

DATA = Path(__file__).parent / "data"
SPACE = "digits_tiny"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=15)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--limit", type=int, help="train only the first N architectures (a quick check)")
    args = parser.parse_args()
    config = get_space_config(SPACE)
    named = resolve_space(SPACE)
    model = space_model(named, load_or_profile(named, DATA / f"{SPACE}_table.csv"))
    specs = config.layer_specs()
    archs = [dict(zip([s.label for s in specs], blocks, strict=True))
             for blocks in itertools.product(*[s.candidates for s in specs])]
    archs = archs[: args.limit] if args.limit else archs
    train = TrainConfig(epochs=args.epochs, seed=args.seed, threads=1)
    records = []
    start = time.perf_counter()
    for i, arch in enumerate(archs):
        result = train_architecture(config, arch, train)
        records.append({**arch, "val_acc": result.val_top1, "val_top3": result.val_top3,
                        "test_acc": result.test_top1, "test_top3": result.test_top3,
                        **model.predict(arch).metrics(), "train_seconds": result.train_seconds})
        if i % 16 == 0:
            print(f"{i + 1}/{len(archs)} {time.perf_counter() - start:.0f}s", flush=True)
    frame = pd.DataFrame.from_records(records)
    write_atomically(DATA / f"tabular_{SPACE}.csv", frame.to_csv(index=False))
    print(json.dumps({"archs": len(frame), "seconds": round(time.perf_counter() - start, 1),
                      "val_acc_max": frame.val_acc.max(), "val_acc_min": frame.val_acc.min()}))


if __name__ == "__main__":
    main()
