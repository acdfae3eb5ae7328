"""Spaces as files: ``prune`` a space's choices by hardware score, write it as an NNI ``search-space``."""

from __future__ import annotations

import argparse
import json

from nni_hwaware.cli.options import add_space, add_table_options, named_model, named_space
from nni_hwaware.cli.registry import command

__all__ = ["run_prune", "run_search_space"]


def add_prune(parser: argparse.ArgumentParser) -> None:
    from nni_hwaware.pruning import MODES

    add_space(parser)
    parser.add_argument("--table", required=True, help="cost table file (from `nni-hwaware profile`)")
    add_table_options(parser)
    parser.add_argument("--mode", default="layer-mean", choices=MODES, help="threshold (default: layer-mean)")
    parser.add_argument("-k", type=float, default=1.0, help="score scale k in S = k*U*P (default: 1)")
    parser.add_argument("--threshold", type=float, help="score threshold for --mode value")
    parser.add_argument("--top", type=int, help="values kept per label for --mode top-k")
    parser.add_argument("--keep", nargs="*", default=[], metavar="VALUE",
                        help="values always kept (e.g. skip, whose score is 0)")
    parser.add_argument("--out", required=True, help="pruned space JSON to write (usable as --space)")
    parser.add_argument("--report", help="CSV of every value's F, T, U, P, S and kept/dropped")


@command("prune", "prune a space's choices by hardware score S = k*U*P", add_prune)
def run_prune(args: argparse.Namespace) -> int:
    from nni_hwaware.pruning import prune_choices

    named, model = named_model(args, args.table)
    result = prune_choices(model, mode=args.mode, k=args.k, threshold=args.threshold, top=args.top,
                           always_keep=args.keep)
    result.save(args.out, named, report_csv=args.report)
    print(result.summary())
    before, after = result.sizes()
    print(f"space {named.name}: {before} -> {after} architectures; wrote {args.out}")
    return 0


def add_search_space(parser: argparse.ArgumentParser) -> None:
    add_space(parser)
    parser.add_argument("--out", help="file to write (default: print)")


@command("search-space", "write a space's layers as an NNI search space of choices (searchSpaceFile)",
         add_search_space)
def run_search_space(args: argparse.Namespace) -> int:
    from nni_hwaware.files import write_json

    space = {label: {"_type": "choice", "_value": values} for label, values in named_space(args).choices().items()}
    if args.out:
        write_json(args.out, space)
    else:
        print(json.dumps(space, indent=2))
    return 0
