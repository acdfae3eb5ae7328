"""Searching and retraining: ``search <strategy>`` (``search gumbel``) and ``retrain`` a found architecture.

``search`` dispatches to a strategy registered in :data:`SEARCH_STRATEGIES` with
:func:`search_strategy` (``nni-hwaware search gumbel ...``).
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Sequence
from pathlib import Path

from nni_hwaware.cli.options import (
    add_space,
    add_table_options,
    arch_space,
    named_model,
    space_args,
)
from nni_hwaware.cli.registry import AddArguments, Command, Registry, add_subcommands, command
from nni_hwaware.errors import HwAwareError

__all__ = ["SEARCH_STRATEGIES", "parse_sets", "run_retrain", "run_search", "run_search_gumbel", "search_strategy"]

#: strategy name -> (help, add_arguments, run), for ``nni-hwaware search NAME``.
SEARCH_STRATEGIES: Registry = {}


def search_strategy(name: str, help: str, add_arguments: AddArguments) -> Callable[[Command], Command]:
    """Register ``run`` as ``nni-hwaware search <name>``."""
    return command(name, help, add_arguments, registry=SEARCH_STRATEGIES)


def add_search(parser: argparse.ArgumentParser) -> None:
    add_subcommands(parser, SEARCH_STRATEGIES, dest="strategy", metavar="STRATEGY")


@command("search", "search a space with a strategy (nni-hwaware search gumbel --config FILE)", add_search)
def run_search(args: argparse.Namespace) -> int:
    if args.strategy is None:
        raise HwAwareError(f"name a search strategy: {', '.join(SEARCH_STRATEGIES)} (e.g. search gumbel --config FILE)")
    _, _, run = SEARCH_STRATEGIES[args.strategy]
    return run(args)


def parse_sets(pairs: Sequence[str]) -> dict[str, object]:
    """``key=value`` pairs (values parsed as YAML: numbers, lists, booleans) as dotted-path changes."""
    import yaml

    changes: dict[str, object] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise HwAwareError(f"--set expects key=value (e.g. penalty.alpha=2), got {pair!r}")
        changes[key.strip()] = yaml.safe_load(value)
    return changes


def add_search_gumbel(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", required=True, help="search config YAML (see examples/digits/gumbel.yml)")
    parser.add_argument("--out", help="output directory (overrides the config's out)")
    parser.add_argument("--set", nargs="*", default=[], metavar="KEY=VALUE",
                        help="override config options, e.g. --set penalty.alpha=2 stages.max_epochs=8")
    parser.add_argument("--refit", action="store_true",
                        help="then search once more with each target corrected by the found network's "
                             "predicted / measured ratio (into <out>/refit)")


@search_strategy("gumbel", "hardware-penalised Gumbel-DARTS: staged search, export, retrain, report",
                 add_search_gumbel)
def run_search_gumbel(args: argparse.Namespace) -> int:
    from nni_hwaware.strategies.gumbel import GumbelSearchConfig, run_pipeline
    from nni_hwaware.strategies.gumbel.refit import check_refit, refit_changes

    config = GumbelSearchConfig.from_yaml(args.config)
    changes = parse_sets(args.set)
    if args.out:
        changes["out"] = args.out
    config = config.replace(**changes)
    if args.refit:
        check_refit(config)  # before the first search, not after it
    summary = run_pipeline(config)
    if summary and args.refit:
        changes = refit_changes(config, summary)
        targets = ", ".join(f"{k.removeprefix('penalty.')} {v}" for k, v in changes.items() if k.startswith("penalty."))
        print(f"refit: searching again with {targets} (the measured / predicted ratios of the first network)")
        summary = run_pipeline(config.replace(**changes))
    if summary:
        print(f"architecture: {summary['arch_path']}")
        for kind, path in summary["report"].items():
            print(f"report {kind}: {path}")
    return 0


def add_retrain(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--arch", required=True, help="architecture JSON (from a search or written by hand)")
    add_space(parser, required=False)
    parser.add_argument("--table", help="cost table, to add the predicted latency and memory")
    add_table_options(parser)
    parser.add_argument("--train", default="{}", help="training options as JSON (see TrainConfig)")
    parser.add_argument("--epochs", type=int, help="training epochs (overrides --train)")
    parser.add_argument("--seed", type=int, help="seed of initialisation, data split and order (overrides --train)")
    parser.add_argument("--data-dir", help="CIFAR-10 directory, for spaces on cifar10")
    parser.add_argument("--threads", type=int, default=1, help="threads for the latency measurement (default: 1)")
    parser.add_argument("--name", help="name in reports (default: the arch file's stem)")
    parser.add_argument("--out", required=True, help="result JSON to write (input of nni-hwaware report)")
    parser.add_argument("--save", metavar="DIR", help="also save the trained network there: network.pt, "
                                                      "network.onnx, network.torchscript.pt, each checked")


@command("retrain", "retrain an architecture from scratch, test it, measure it on this chip", add_retrain)
def run_retrain(args: argparse.Namespace) -> int:
    from nni_hwaware.report import evaluate_architecture
    from nni_hwaware.spaces.io import load_architecture
    from nni_hwaware.training import TrainConfig

    named = arch_space(args, args.arch)
    arch = load_architecture(args.arch, named)
    train = TrainConfig.from_json(args.train, epochs=args.epochs, seed=args.seed, data_dir=args.data_dir)
    model = named_model(args, args.table)[1] if args.table else None
    result = evaluate_architecture(named, arch, train, cost_model=model, name=args.name or Path(args.arch).stem,
                                   threads=args.threads, batch_size=args.batch_size, backend=args.backend,
                                   keep_weights=bool(args.save))
    if args.save:
        from nni_hwaware.export import deliver

        result = deliver(named, result, space=args.space, space_args=space_args(args), train=train,
                         out=args.save, nni_dir=False, threads=args.threads)
        if "deliverables_error" in result.extra:
            raise HwAwareError(result.extra["deliverables_error"])
        print(f"saved the trained network and its exports in {result.extra['deliverables']['dir']}")
    result.save(args.out)
    print(f"{result.name}: test top-1 {result.test_top1:.4f}, top-3 {result.test_top3:.4f}, "
          f"latency {result.latency_ms:.4g} ms, memory {result.memory_mb:.4g} MB; wrote {args.out}")
    return 0
