"""Options several subcommands share: the space, the cost table's chip / backend / batch size, the time budget.

Each ``add_*`` function adds options to a subcommand's parser; the others read them
back from the parsed arguments, raising :class:`~nni_hwaware.errors.HwAwareError`
on bad values.
"""

from __future__ import annotations

import argparse
import json
import os
from typing import Any

from nni_hwaware.errors import HwAwareError

__all__ = [
    "SPACE_HELP", "add_space", "add_table_options", "add_time_budget", "arch_space", "named_model",
    "named_space", "space_args", "timing",
]  # fmt: skip

SPACE_HELP = ("space: a registered name or JSON file, nni:<hub space> (e.g. nni:NasBench201) or "
              "module:callable returning an NNI ModelSpace")


def add_table_options(parser: argparse.ArgumentParser) -> None:
    """``--chip``, ``--backend`` (one of the registered backends) and ``--batch-size``."""
    from nni_hwaware.profiling.backends import available_backends

    parser.add_argument("--chip", help="chip model string (default: detected from this machine)")
    parser.add_argument("--backend", default="torch", choices=available_backends(),
                        help="runtime the blocks are timed in (default: torch)")
    parser.add_argument("--batch-size", type=int, default=1, help="batch size (default: 1)")


def add_space(parser: argparse.ArgumentParser, required: bool = True) -> None:
    """``--space`` and ``--space-args``."""
    parser.add_argument("--space", required=required, help=SPACE_HELP)
    parser.add_argument("--space-args", default="{}",
                        help="keyword arguments of the space as JSON, e.g. '{\"width_mult\": 0.25}'")


def space_args(args: argparse.Namespace) -> dict[str, Any]:
    """``--space-args`` as a dict of keyword arguments."""
    try:
        parsed = json.loads(args.space_args)
    except json.JSONDecodeError as err:
        raise HwAwareError(f"--space-args is not valid JSON: {err}") from None
    if not isinstance(parsed, dict):
        raise HwAwareError("--space-args must be a JSON object of keyword arguments")
    return parsed


def named_space(args: argparse.Namespace) -> Any:
    """The space ``--space`` / ``--space-args`` name."""
    from nni_hwaware.spaces.resolve import resolve_space

    return resolve_space(args.space, **space_args(args))


def arch_space(args: argparse.Namespace, arch_file: str | os.PathLike[str]) -> Any:
    """The space of ``--space``, or the one an architecture file names (then set as ``args.space``
    and, unless given, ``args.space_args``)."""
    from nni_hwaware.export.source import architecture_spec

    if args.space is None:
        args.space, named_args = architecture_spec(arch_file)
        if args.space_args == "{}" and named_args:
            args.space_args = json.dumps(named_args)
    return named_space(args)


def named_model(args: argparse.Namespace, table_path: str) -> tuple[Any, Any]:
    """The named space and its cost model from ``table_path`` (chip, backend, batch size of ``args``)."""
    from nni_hwaware.cost_model import is_choice_table, load_space_model
    from nni_hwaware.cost_table import CostTable

    named = named_space(args)
    if not is_choice_table(table_path):
        CostTable.load(table_path)  # a missing or malformed file: one line, before anything is profiled
    return named, load_space_model(named, table_path, chip=args.chip, backend=args.backend,
                                   batch_size=args.batch_size)


def add_time_budget(parser: argparse.ArgumentParser,
                    default: str = "0.25 s per timed item, 2 s to 2 min") -> None:
    """``--time-budget``: seconds of timing rounds."""
    parser.add_argument("--time-budget", type=float, metavar="SECONDS",
                        help=f"seconds of timing rounds (default: {default}); items "
                             "whose figure is not known within 2 %% by then are reported")


def timing(args: argparse.Namespace) -> dict[str, float]:
    """The keyword arguments ``--time-budget`` gives the measuring functions."""
    if args.time_budget is None:
        return {}
    if not args.time_budget > 0:
        raise HwAwareError(f"--time-budget must be a positive number of seconds, got {args.time_budget}")
    return {"max_seconds": float(args.time_budget)}
