"""The ``nni-hwaware`` command line.

Each subcommand is a function ``_cmd_<name>(args) -> int`` registered in
:data:`COMMANDS` with the function that adds its arguments. Bad input raises
:class:`~nni_hwaware.errors.HwAwareError`; :func:`main` prints it as one line on
stderr and returns 2.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

from nni_hwaware import __version__
from nni_hwaware.errors import HwAwareError

__all__ = ["COMMANDS", "build_parser", "main"]

AddArguments = Callable[[argparse.ArgumentParser], None]
Command = Callable[[argparse.Namespace], int]

#: name -> (help, add_arguments, run)
COMMANDS: dict[str, tuple[str, AddArguments, Command]] = {}


def command(name: str, help: str, add_arguments: AddArguments) -> Callable[[Command], Command]:
    """Register ``run`` as the subcommand ``name``."""

    def register(run: Command) -> Command:
        COMMANDS[name] = (help, add_arguments, run)
        return run

    return register


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="nni-hwaware",
        description="Hardware-aware neural architecture search for Microsoft NNI.",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, (help_text, add_arguments, _) in COMMANDS.items():
        add_arguments(sub.add_parser(name, help=help_text, description=help_text))
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 0
    _, _, run = COMMANDS[args.command]
    try:
        return run(args)
    except HwAwareError as err:
        print(f"nni-hwaware {args.command}: error: {err}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"nni-hwaware {args.command}: interrupted", file=sys.stderr)
        return 130


# -- cost table ------------------------------------------------------------------


def _add_table_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--chip", help="chip model string (default: detected from this machine)")
    parser.add_argument("--backend", default="torch", choices=["torch", "onnxruntime"],
                        help="runtime the blocks are timed in (default: torch)")
    parser.add_argument("--batch-size", type=int, default=1, help="batch size (default: 1)")


def _add_profile(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--space", required=True, help="space name or JSON file")
    _add_table_options(parser)
    parser.add_argument("--device", default="cpu", help="torch device: cpu, cuda, cuda:1, ...")
    parser.add_argument("--threads", type=int, default=1,
                        help="intra-op threads (default: 1, the steadiest timings; use what your deployment uses)")
    parser.add_argument("--peak-flops", type=float,
                        help="the chip's theoretical peak C in FLOP/s (default: measured by a matmul benchmark)")
    parser.add_argument("--merge", action="store_true",
                        help="add the rows to --out when it exists (profile many chips into one table)")
    parser.add_argument("--out", required=True, help="table file to write (.csv or .parquet)")
    parser.add_argument("--seed", type=int, default=0)


@command("profile", "profile every block of a space on this chip into a cost table", _add_profile)
def _cmd_profile(args: argparse.Namespace) -> int:
    from pathlib import Path

    from nni_hwaware.cost_table import CostTable, profile_space
    from nni_hwaware.spaces import get_space_config

    config = get_space_config(args.space)
    existing = CostTable.load(args.out) if args.merge and Path(args.out).exists() else None
    table = profile_space(config, chip=args.chip, backend=args.backend, device=args.device,
                          batch_size=args.batch_size, threads=args.threads,
                          peak_flops=args.peak_flops, seed=args.seed)
    if existing is not None:
        table = existing.merge(table)
    table.save(args.out)
    frame = table.frame
    print(f"wrote {len(frame)} rows to {args.out} (chips: {', '.join(table.chips())}; "
          f"largest CV {frame.latency_cv.max():.3f})")
    return 0


def _add_validate(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("table", help="cost table file")
    parser.add_argument("--space", required=True, help="space name or JSON file")
    _add_table_options(parser)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--threads", type=int, help="intra-op threads (default: those of the table)")
    parser.add_argument("-k", "--archs", type=int, default=20, help="random architectures to measure")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", help="CSV of per-architecture predictions and measurements")


@command("validate", "measure random networks end to end and compare with the table's prediction",
         _add_validate)
def _cmd_validate(args: argparse.Namespace) -> int:
    import json

    from nni_hwaware.cost_table import CostModel, CostTable, validate
    from nni_hwaware.files import write_atomically
    from nni_hwaware.spaces import get_space_config

    config = get_space_config(args.space)
    model = CostModel(CostTable.load(args.table), config, chip=args.chip, backend=args.backend,
                      batch_size=args.batch_size)
    report = validate(model, args.archs, seed=args.seed, device=args.device, threads=args.threads)
    if args.out:
        write_atomically(args.out, report.frame.to_csv(index=False))
    for name, values in (("latency", report.latency), ("memory", report.memory)):
        print(f"{name:8s} " + "  ".join(f"{k}={v:.3f}" for k, v in values.items()))
    print(json.dumps(report.summary()))
    return 0


def _add_chips(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("table", help="cost table file with one or more chips")
    parser.add_argument("--space", help="space to compare on (default: every block in the table, summed)")
    parser.add_argument("--arch", help="architecture JSON to compare (default: the space's baseline)")
    parser.add_argument("--backend", default="torch")
    parser.add_argument("--batch-size", type=int, default=1)


@command("chips", "compare the chips of a cost table on a network: which suits it best", _add_chips)
def _cmd_chips(args: argparse.Namespace) -> int:
    from nni_hwaware.cost_table import BlockKey, CostTable
    from nni_hwaware.spaces import get_space_config
    from nni_hwaware.spaces.io import load_architecture

    table = CostTable.load(args.table)
    if args.space:
        config = get_space_config(args.space)
        arch = load_architecture(args.arch, config) if args.arch else config.baseline()
        keys = [BlockKey(p.name, p.input_shape, p.out_channels, p.stride) for p in config.fixed_parts()]
        keys += [BlockKey(arch[s.label], s.input_shape, s.out_channels, s.stride) for s in config.layer_specs()]
    else:
        frame = table.frame.drop_duplicates(["block", "input_shape", "out_channels", "stride"])
        keys = [BlockKey(r.block, BlockKey.parse_shape(r.input_shape), int(r.out_channels), int(r.stride))
                for r in frame.itertuples()]
    comparison = table.compare_chips(keys, backend=args.backend, batch_size=args.batch_size)
    print(comparison.to_string())
    return 0


# -- pruning ---------------------------------------------------------------------


def _add_prune(parser: argparse.ArgumentParser) -> None:
    from nni_hwaware.pruning import MODES

    parser.add_argument("--space", required=True, help="space name or JSON file")
    parser.add_argument("--table", required=True, help="cost table file (from `nni-hwaware profile`)")
    _add_table_options(parser)
    parser.add_argument("--mode", default="layer-mean", choices=MODES, help="threshold (default: layer-mean)")
    parser.add_argument("-k", type=float, default=1.0, help="score scale k in S = k*U*P (default: 1)")
    parser.add_argument("--threshold", type=float, help="score threshold for --mode value")
    parser.add_argument("--top", type=int, help="blocks kept per layer for --mode top-k")
    parser.add_argument("--keep", nargs="*", default=[], metavar="BLOCK",
                        help="blocks always kept (e.g. skip, whose score is 0)")
    parser.add_argument("--out", required=True, help="pruned space JSON to write (usable as --space)")
    parser.add_argument("--report", help="CSV of every block's F, T, U, P, S and kept/dropped")


@command("prune", "prune a space's candidates by hardware score S = k*U*P", _add_prune)
def _cmd_prune(args: argparse.Namespace) -> int:
    from nni_hwaware.cost_table import CostModel, CostTable
    from nni_hwaware.pruning import prune_space
    from nni_hwaware.spaces import get_space_config

    config = get_space_config(args.space)
    model = CostModel(CostTable.load(args.table), config, chip=args.chip, backend=args.backend,
                      batch_size=args.batch_size)
    result = prune_space(model, mode=args.mode, k=args.k, threshold=args.threshold, top=args.top,
                         always_keep=args.keep)
    result.save(args.out, args.report)
    print(result.summary())
    before, after = result.sizes()
    print(f"space {config.name}: {before} -> {after} architectures; wrote {args.out}")
    return 0


def _add_collect(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--port", type=int, required=True, help="port of the profiling experiment's manager")
    parser.add_argument("--out", required=True, help="merged cost table file to write")


@command("collect", "merge the cost tables reported by a profiling experiment's trials (one per board)",
         _add_collect)
def _cmd_collect(args: argparse.Namespace) -> int:
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
