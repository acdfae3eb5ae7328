"""Cost tables: ``profile`` a space on this chip, ``validate`` the table end to end, compare ``chips``,
``collect`` the tables of a profiling experiment."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from nni_hwaware.cli.options import (
    add_space,
    add_table_options,
    add_time_budget,
    named_model,
    named_space,
    timing,
)
from nni_hwaware.cli.registry import command
from nni_hwaware.errors import HwAwareError

__all__ = ["run_chips", "run_collect", "run_profile", "run_validate"]


def add_profile(parser: argparse.ArgumentParser) -> None:
    add_space(parser)
    add_table_options(parser)
    parser.add_argument("--device", default="cpu", help="torch device: cpu, cuda, cuda:1, ...")
    parser.add_argument("--threads", type=int, default=1,
                        help="intra-op threads (default: 1, the steadiest timings; use what your deployment uses)")
    parser.add_argument("--peak-flops", type=float,
                        help="the chip's theoretical peak C in FLOP/s (default: measured by a matmul benchmark)")
    parser.add_argument("--merge", action="store_true",
                        help="add the rows to --out when it exists (profile many chips into one table)")
    parser.add_argument("--out", required=True, help="table file to write (.csv or .parquet)")
    parser.add_argument("--seed", type=int, default=0)
    add_time_budget(parser)


@command("profile", "profile every distinct leaf of a space on this chip into a cost table", add_profile)
def run_profile(args: argparse.Namespace) -> int:
    import pandas as pd

    from nni_hwaware.cost_model import profile_space
    from nni_hwaware.cost_table import CostTable

    existing = CostTable.load(args.out) if args.merge and Path(args.out).exists() else None
    table = profile_space(named_space(args), chip=args.chip, backend=args.backend, device=args.device,
                          batch_size=args.batch_size, threads=args.threads, peak_flops=args.peak_flops,
                          seed=args.seed, table=existing, **timing(args))
    table.save(args.out)
    frame = table.frame
    leaves = frame[frame.kind != "network"]
    met = ""
    if existing is not None:
        key = ["block", "input_shape", "chip"]  # only the rows this run measured
        old = pd.MultiIndex.from_frame(existing.frame[key])
        leaves = leaves[~pd.MultiIndex.from_frame(leaves[key]).isin(old)]
    if "met_target" in leaves.columns and leaves.met_target.notna().any():
        measured = leaves[leaves.met_target.notna()]
        met = (f"; {int(measured.met_target.astype(bool).sum())} of {len(measured)} new entries known within 2 %, "
               f"the machine's speed drifted {float(measured.probe_drift.max()):.2f}x (p90/p10)")
    print(f"wrote {len(frame)} rows to {args.out} (chips: {', '.join(table.chips())}{met})")
    return 0


def add_validate(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("table", help="cost table file")
    add_space(parser)
    add_table_options(parser)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--threads", type=int, help="intra-op threads (default: those of the table)")
    parser.add_argument("-k", "--archs", type=int, default=20, help="random architectures to measure")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", help="CSV of per-architecture predictions and measurements")
    add_time_budget(parser, "1 s per network timed: both passes of every architecture and the reference, "
                            "in the same rounds")


@command("validate", "measure random networks end to end (twice) and compare with the table's prediction",
         add_validate)
def run_validate(args: argparse.Namespace) -> int:
    from nni_hwaware.cost_model.fidelity import check_fidelity
    from nni_hwaware.cost_table import CostTable
    from nni_hwaware.files import write_atomically
    from nni_hwaware.strategies.fidelity import FIDELITY_SUFFIX

    named, model = named_model(args, args.table)
    figures, frame = check_fidelity(named.space, model, named.input_shape, args.archs, seed=args.seed,
                                    device=args.device, threads=args.threads, reference=named.baseline(model),
                                    **timing(args))
    if args.out:
        write_atomically(args.out, frame.to_csv(index=False))
    table = CostTable.load(args.table).frame
    if "probe_drift" in table.columns and table.probe_drift.notna().any():
        figures["table"] = {"probe_drift": float(table.probe_drift.max()),
                            "share_met": float(table.met_target.fillna(False).astype(bool).mean())}
    summary = {"n_archs": len(frame), **figures}
    # the table's own fidelity figures, beside it: a search's prior margin until trials have measured
    saved = f"{args.table}{FIDELITY_SUFFIX}"
    try:
        write_atomically(saved, json.dumps(summary, indent=1))
        where = f"fidelity figures saved to {saved} (a search's prior margin until its trials have measured)"
    except OSError as err:  # a table in a read-only place: the figures are still printed
        where = f"fidelity figures not saved beside the table ({err.strerror}: {saved})"
    for name, values in figures.items():
        print(f"{name:8s} " + "  ".join(f"{k}={v:.3f}" for k, v in values.items()))
    print(where)
    print(json.dumps(summary))
    return 0


def add_chips(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("table", help="cost table file with one or more chips")
    add_space(parser)
    parser.add_argument("--arch", help="architecture JSON to compare (default: the space's reference network)")
    parser.add_argument("--backend", default="torch")
    parser.add_argument("--batch-size", type=int, default=1)


@command("chips", "compare the chips of a cost table on a network: which suits it best", add_chips)
def run_chips(args: argparse.Namespace) -> int:
    import pandas as pd

    from nni_hwaware.cost_model import space_model
    from nni_hwaware.cost_table import CostTable
    from nni_hwaware.spaces.io import load_architecture

    table = CostTable.load(args.table)
    named = named_space(args)
    models = {chip: space_model(named, table, chip=chip, backend=args.backend, batch_size=args.batch_size)
              for chip in table.chips()}
    if args.arch:
        arch = load_architecture(args.arch, named)
    else:  # the same network on every chip: the reference, by the first chip's costs where it is "largest"
        first = next(iter(models.values()))
        try:
            arch = named.baseline(first)
        except HwAwareError:  # a pruned space without its reference network: its largest
            arch = first.reference("largest")
    rows = []
    for chip, model in models.items():
        cost = model.predict(arch)
        peak = model.peak_flops or float("nan")
        rows.append({"chip": chip, "latency_ms": cost.latency_ms, "memory_mb": cost.memory_mb,
                     "flops": cost.flops, "params": cost.params,
                     "utilisation": cost.flops / (cost.latency_ms / 1000 * peak)})
    comparison = pd.DataFrame(rows).sort_values(["latency_ms", "chip"]).set_index("chip")
    print(comparison.to_string())
    return 0


def add_collect(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--port", type=int, required=True, help="port of the profiling experiment's manager")
    parser.add_argument("--out", required=True, help="merged cost table file to write")


@command("collect", "merge the cost tables reported by a profiling experiment's trials (one per board)",
         add_collect)
def run_collect(args: argparse.Namespace) -> int:
    from nni_hwaware.cost_table.transport import collect_tables
    from nni_hwaware.experiment.nnictl import RunningExperiment

    experiment = RunningExperiment(id="", port=args.port, workdir=Path("."))
    try:
        metrics = experiment.final_metrics()
    except OSError as err:
        raise HwAwareError(f"no NNI manager answers on port {args.port} ({err}); is the experiment running?") from None
    table = collect_tables(metrics)
    table.save(args.out)
    print(f"wrote {len(table)} rows for chips {', '.join(table.chips())} to {args.out}")
    return 0
