"""An NNI trial that looks its architecture up in the tabular benchmark instead of training it.

Reads the parameters with ``nni.get_next_parameter()`` (keys starting with ``_``,
such as the PPO tuner's ``_table`` and ``_chip``, are not layers), finds the row of
``benchmarks/data/tabular_<space>.csv`` and reports the final result the real trial
(``python -m nni_hwaware.trial``) reports: ``{default: val_acc, val_top3,
latency_ms, memory_mb, flops, params, arch}``, ``arch`` echoing the architecture
as compact JSON (see ``nni_hwaware.trial.run.trial_metrics``).

NNI 3.0's local training service hands the parameters over its trial command
channel and writes no parameter file, so the trial first writes what it received
(``parameter_id`` and parameters, with its trial and sequence id) to
``received_parameters.json`` in its own folder (``$NNI_OUTPUT_DIR``).

    python benchmarks/tabular_trial.py [--space digits_tiny] [--table FILE.csv]

Used by ``soak.py``; it imports only NNI and the standard library, so a trial
costs NNI's start-up and little more.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import sys
from pathlib import Path

DATA = Path(__file__).resolve().parent / "data"
COSTS = ("latency_ms", "memory_mb", "flops", "params")


def lookup(table: Path, arch: dict[str, str]) -> dict[str, str]:
    """The row of ``table`` whose layer columns equal ``arch``."""
    with table.open(newline="", encoding="utf-8") as fh:
        for row in csv.DictReader(fh):
            if all(row.get(label) == block for label, block in arch.items()):
                return row
    raise KeyError(f"{arch} is not in {table}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--space", default="digits_tiny")
    parser.add_argument("--table", help="tabular benchmark CSV (default: data/tabular_<space>.csv)")
    args = parser.parse_args()
    import nni

    params = nni.get_next_parameter() or {}
    record = getattr(nni.trial, "_params", None) or {}  # NNI's whole record: parameter_id, parameters, ...
    out_dir = os.environ.get("NNI_OUTPUT_DIR")
    if out_dir:
        received = {"trial_id": os.environ.get("NNI_TRIAL_JOB_ID"), "sequence_id": os.environ.get("NNI_TRIAL_SEQ_ID"),
                    "parameter_id": record.get("parameter_id"), "parameters": params}
        Path(out_dir, "received_parameters.json").write_text(json.dumps(received), encoding="utf-8")
    arch = {k: str(v) for k, v in params.items() if not k.startswith("_")}
    if not arch:
        print("tabular_trial: no parameters from NNI", file=sys.stderr)
        return 2
    row = lookup(Path(args.table) if args.table else DATA / f"tabular_{args.space}.csv", arch)
    final = {"default": float(row["val_acc"]), "val_top3": float(row["val_top3"]),
             **{k: float(row[k]) for k in COSTS}, "arch": json.dumps(arch, separators=(",", ":"))}
    nni.report_final_result(final)
    print(json.dumps(final))
    return 0


if __name__ == "__main__":
    sys.exit(main())
