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
from typing import Any

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


_SPACE_HELP = ("space: a registered name or JSON file, nni:<hub space> (e.g. nni:NasBench201) or "
               "module:callable returning an NNI ModelSpace")


def _add_space(parser: argparse.ArgumentParser, required: bool = True) -> None:
    parser.add_argument("--space", required=required, help=_SPACE_HELP)
    parser.add_argument("--space-args", default="{}",
                        help="keyword arguments of the space as JSON, e.g. '{\"width_mult\": 0.25}'")


def _arch_space(args: argparse.Namespace, arch_file: Any) -> Any:
    """The space of ``--space``, or the one an architecture file names (``space`` / ``space_args``)."""
    import json

    from nni_hwaware.files import read_json

    if args.space is None:
        data = read_json(arch_file, "architecture file")
        args.space = data.get("space") if isinstance(data, dict) else None
        if not args.space:
            raise HwAwareError(f"{arch_file} names no space; pass --space")
        if args.space_args == "{}" and isinstance(data.get("space_args"), dict):
            args.space_args = json.dumps(data["space_args"])
    return _named(args)


def _named(args: argparse.Namespace) -> Any:
    """The space ``--space`` / ``--space-args`` name."""
    import json

    from nni_hwaware.spaces.resolve import resolve_space

    try:
        space_args = json.loads(args.space_args)
    except json.JSONDecodeError as err:
        raise HwAwareError(f"--space-args is not valid JSON: {err}") from None
    if not isinstance(space_args, dict):
        raise HwAwareError("--space-args must be a JSON object of keyword arguments")
    return resolve_space(args.space, **space_args)


def _add_profile(parser: argparse.ArgumentParser) -> None:
    _add_space(parser)
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
    _add_time_budget(parser)


def _add_time_budget(parser: argparse.ArgumentParser,
                     default: str = "0.25 s per timed item, 2 s to 2 min") -> None:
    parser.add_argument("--time-budget", type=float, metavar="SECONDS",
                        help=f"seconds of timing rounds (default: {default}); items "
                             "whose figure is not known within 2 %% by then are reported")


def _timing(args: argparse.Namespace) -> dict[str, float]:
    if args.time_budget is None:
        return {}
    if not args.time_budget > 0:
        raise HwAwareError(f"--time-budget must be a positive number of seconds, got {args.time_budget}")
    return {"max_seconds": float(args.time_budget)}


@command("profile", "profile every distinct leaf of a space on this chip into a cost table", _add_profile)
def _cmd_profile(args: argparse.Namespace) -> int:
    from pathlib import Path

    import pandas as pd

    from nni_hwaware.cost_model import profile_space
    from nni_hwaware.cost_table import CostTable

    existing = CostTable.load(args.out) if args.merge and Path(args.out).exists() else None
    table = profile_space(_named(args), chip=args.chip, backend=args.backend, device=args.device,
                          batch_size=args.batch_size, threads=args.threads, peak_flops=args.peak_flops,
                          seed=args.seed, table=existing, **_timing(args))
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


def _model(args: argparse.Namespace, table_path: str) -> tuple[Any, Any]:
    """The named space and its cost model from ``table_path`` (chip, backend, batch size of ``args``)."""
    from nni_hwaware.cost_model import is_choice_table, load_space_model
    from nni_hwaware.cost_table import CostTable

    named = _named(args)
    if not is_choice_table(table_path):
        CostTable.load(table_path)  # a missing or malformed file: one line, before anything is profiled
    return named, load_space_model(named, table_path, chip=args.chip, backend=args.backend,
                                   batch_size=args.batch_size)


def _add_validate(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("table", help="cost table file")
    _add_space(parser)
    _add_table_options(parser)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--threads", type=int, help="intra-op threads (default: those of the table)")
    parser.add_argument("-k", "--archs", type=int, default=20, help="random architectures to measure")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", help="CSV of per-architecture predictions and measurements")
    _add_time_budget(parser, "1 s per network timed: both passes of every architecture and the reference, "
                             "in the same rounds")


@command("validate", "measure random networks end to end (twice) and compare with the table's prediction",
         _add_validate)
def _cmd_validate(args: argparse.Namespace) -> int:
    import json

    from nni_hwaware.cost_model.fidelity import check_fidelity
    from nni_hwaware.cost_table import CostTable
    from nni_hwaware.files import write_atomically
    from nni_hwaware.strategies.correction import FIDELITY_SUFFIX

    named, model = _model(args, args.table)
    figures, frame = check_fidelity(named.space, model, named.input_shape, args.archs, seed=args.seed,
                                    device=args.device, threads=args.threads, reference=named.baseline(model),
                                    **_timing(args))
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


def _add_chips(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("table", help="cost table file with one or more chips")
    _add_space(parser)
    parser.add_argument("--arch", help="architecture JSON to compare (default: the space's reference network)")
    parser.add_argument("--backend", default="torch")
    parser.add_argument("--batch-size", type=int, default=1)


@command("chips", "compare the chips of a cost table on a network: which suits it best", _add_chips)
def _cmd_chips(args: argparse.Namespace) -> int:
    import pandas as pd

    from nni_hwaware.cost_model import space_model
    from nni_hwaware.cost_table import CostTable
    from nni_hwaware.spaces.io import load_architecture

    table = CostTable.load(args.table)
    named = _named(args)
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


# -- pruning ---------------------------------------------------------------------


def _add_prune(parser: argparse.ArgumentParser) -> None:
    from nni_hwaware.pruning import MODES

    _add_space(parser)
    parser.add_argument("--table", required=True, help="cost table file (from `nni-hwaware profile`)")
    _add_table_options(parser)
    parser.add_argument("--mode", default="layer-mean", choices=MODES, help="threshold (default: layer-mean)")
    parser.add_argument("-k", type=float, default=1.0, help="score scale k in S = k*U*P (default: 1)")
    parser.add_argument("--threshold", type=float, help="score threshold for --mode value")
    parser.add_argument("--top", type=int, help="values kept per label for --mode top-k")
    parser.add_argument("--keep", nargs="*", default=[], metavar="VALUE",
                        help="values always kept (e.g. skip, whose score is 0)")
    parser.add_argument("--out", required=True, help="pruned space JSON to write (usable as --space)")
    parser.add_argument("--report", help="CSV of every value's F, T, U, P, S and kept/dropped")


@command("prune", "prune a space's choices by hardware score S = k*U*P", _add_prune)
def _cmd_prune(args: argparse.Namespace) -> int:
    from nni_hwaware.pruning import prune_choices

    named, model = _model(args, args.table)
    result = prune_choices(model, mode=args.mode, k=args.k, threshold=args.threshold, top=args.top,
                           always_keep=args.keep)
    result.save(args.out, named, report_csv=args.report)
    print(result.summary())
    before, after = result.sizes()
    print(f"space {named.name}: {before} -> {after} architectures; wrote {args.out}")
    return 0


def _add_proxy(parser: argparse.ArgumentParser) -> None:
    _add_space(parser)
    parser.add_argument("--input-shape", help="per-sample input shape the proxy scores with, e.g. 3x16x16 "
                                              "(default: the space's; the PPO option proxy_input_shape)")
    parser.add_argument("--samples", type=int, help="score this many random networks (default: every network, "
                                                    "where the space has at most --limit)")
    parser.add_argument("--limit", type=int, default=20_000, help="the most networks scored when listing them all")
    parser.add_argument("--seed", type=int, default=0, help="the random networks' seed (with --samples)")
    parser.add_argument("--out", required=True, help="CSV to write: give it to a search as the PPO option proxy_scores")
    parser.add_argument("--merge", action="store_true", help="keep the scores --out already holds")
    from nni_hwaware.strategies.ppo.config import PROXIES, PPOConfig

    parser.add_argument("--proxy", default=PPOConfig.proxy, choices=[p for p in PROXIES if p != "none"],
                        help=f"the proxies scored (the PPO option proxy; default {PPOConfig.proxy})")


@command("proxy", "score a space's networks by the zero-cost proxy ahead of a search (PPO option proxy_scores)",
         _add_proxy)
def _cmd_proxy(args: argparse.Namespace) -> int:
    import itertools
    import math
    import random
    import time
    from pathlib import Path

    from nni_hwaware.zero_cost import ProxyScores

    named = _named(args)
    shape = None
    if args.input_shape:
        try:
            shape = tuple(int(v) for v in args.input_shape.lower().split("x"))
        except ValueError:
            shape = ()
        if not shape or min(shape) < 1:
            raise HwAwareError(f"--input-shape must be sizes such as 3x16x16, got {args.input_shape!r}")
    scores = ProxyScores(named, args.proxy, input_shape=shape)
    choices = named.choices()
    size = math.prod(len(v) for v in choices.values())
    if args.samples is None and size > args.limit:
        raise HwAwareError(f"space {named.name} has {size:.3g} networks, more than --limit {args.limit}; "
                           "give --samples N to score N random ones")
    if args.samples is not None and args.samples < 1:
        raise HwAwareError(f"--samples must be at least 1, got {args.samples}")
    if args.samples is None:
        archs = [dict(zip(choices, values, strict=True)) for values in itertools.product(*choices.values())]
    else:
        rng = random.Random(args.seed)
        archs = [{label: rng.choice(values) for label, values in choices.items()} for _ in range(args.samples)]
    scores.prepare(archs[0])  # the proxies the space's networks can feed (naswot needs ReLU-like modules)
    if args.merge and Path(args.out).is_file():
        scores.load(args.out)
    start = time.perf_counter()
    scores.check(archs[0])  # a network that cannot be scored: one line before the rest
    scores(archs)
    scores.save(args.out)
    print(f"scored {scores.computed} networks of {named.name} in {time.perf_counter() - start:.1f} s "
          f"({scores.mean_ms():.1f} ms each); {len(scores.cache)} scores in {args.out}")
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


# -- NNI glue ----------------------------------------------------------------------


def _add_search_space(parser: argparse.ArgumentParser) -> None:
    _add_space(parser)
    parser.add_argument("--out", help="file to write (default: print)")


@command("search-space", "write a space's layers as an NNI search space of choices (searchSpaceFile)",
         _add_search_space)
def _cmd_search_space(args: argparse.Namespace) -> int:
    import json

    from nni_hwaware.files import write_json

    space = {label: {"_type": "choice", "_value": values} for label, values in _named(args).choices().items()}
    if args.out:
        write_json(args.out, space)
    else:
        print(json.dumps(space, indent=2))
    return 0


def _add_register(parser: argparse.ArgumentParser) -> None:
    pass


@command("register", "register the PPO tuner with nnictl as builtin 'HardwarePPO'", _add_register)
def _cmd_register(args: argparse.Namespace) -> int:
    import subprocess
    from importlib import resources

    from nni_hwaware.experiment import nnictl_path

    meta = resources.files("nni_hwaware.strategies.ppo") / "nni_algo_meta.yml"
    with resources.as_file(meta) as path:
        done = subprocess.run([nnictl_path(), "algo", "register", "--meta_path", str(path)],
                              capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise HwAwareError(f"nnictl algo register failed: {done.stderr.strip().splitlines()[-1:]}")
    print("registered tuner HardwarePPO (use `tuner: {name: HardwarePPO, classArgs: ...}`)")
    return 0


# =====================================================================================
# -- Gumbel search, retraining and reports (seed 001) ----------------------------------
#
# ``search`` dispatches to a search strategy registered in SEARCH_STRATEGIES with
# ``search_strategy(name, help, add_arguments)`` (``nni-hwaware search gumbel ...``).


#: strategy name -> (help, add_arguments, run), for ``nni-hwaware search NAME``.
SEARCH_STRATEGIES: dict[str, tuple[str, AddArguments, Command]] = {}


def search_strategy(name: str, help: str, add_arguments: AddArguments) -> Callable[[Command], Command]:
    """Register ``run`` as ``nni-hwaware search <name>``."""

    def register(run: Command) -> Command:
        SEARCH_STRATEGIES[name] = (help, add_arguments, run)
        return run

    return register


def _add_search(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="strategy", metavar="STRATEGY")
    for name, (help_text, add_arguments, _) in SEARCH_STRATEGIES.items():
        add_arguments(sub.add_parser(name, help=help_text, description=help_text))


@command("search", "search a space with a strategy (nni-hwaware search gumbel --config FILE)", _add_search)
def _cmd_search(args: argparse.Namespace) -> int:
    if args.strategy is None:
        raise HwAwareError(f"name a search strategy: {', '.join(SEARCH_STRATEGIES)} (e.g. search gumbel --config FILE)")
    _, _, run = SEARCH_STRATEGIES[args.strategy]
    return run(args)


def _parse_sets(pairs: Sequence[str]) -> dict[str, object]:
    """``key=value`` pairs (values parsed as YAML: numbers, lists, booleans) as dotted-path changes."""
    import yaml

    changes: dict[str, object] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise HwAwareError(f"--set expects key=value (e.g. penalty.alpha=2), got {pair!r}")
        changes[key.strip()] = yaml.safe_load(value)
    return changes


def _add_search_gumbel(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", required=True, help="search config YAML (see examples/digits/gumbel.yml)")
    parser.add_argument("--out", help="output directory (overrides the config's out)")
    parser.add_argument("--set", nargs="*", default=[], metavar="KEY=VALUE",
                        help="override config options, e.g. --set penalty.alpha=2 stages.max_epochs=8")
    parser.add_argument("--refit", action="store_true",
                        help="then search once more with each target corrected by the found network's "
                             "predicted / measured ratio (into <out>/refit)")


@search_strategy("gumbel", "hardware-penalised Gumbel-DARTS: staged search, export, retrain, report",
                 _add_search_gumbel)
def _cmd_search_gumbel(args: argparse.Namespace) -> int:
    from nni_hwaware.strategies.gumbel import GumbelSearchConfig, run_pipeline
    from nni_hwaware.strategies.gumbel.search import check_refit, refit_changes

    config = GumbelSearchConfig.from_yaml(args.config)
    changes = _parse_sets(args.set)
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


def _add_retrain(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--arch", required=True, help="architecture JSON (from a search or written by hand)")
    _add_space(parser, required=False)
    parser.add_argument("--table", help="cost table, to add the predicted latency and memory")
    _add_table_options(parser)
    parser.add_argument("--train", default="{}", help="training options as JSON (see TrainConfig)")
    parser.add_argument("--epochs", type=int, help="training epochs (overrides --train)")
    parser.add_argument("--seed", type=int, help="seed of initialisation, data split and order (overrides --train)")
    parser.add_argument("--data-dir", help="CIFAR-10 directory, for spaces on cifar10")
    parser.add_argument("--threads", type=int, default=1, help="threads for the latency measurement (default: 1)")
    parser.add_argument("--name", help="name in reports (default: the arch file's stem)")
    parser.add_argument("--out", required=True, help="result JSON to write (input of nni-hwaware report)")
    parser.add_argument("--save", metavar="DIR", help="also save the trained network there: network.pt, "
                                                      "network.onnx, network.torchscript.pt, each checked")


@command("retrain", "retrain an architecture from scratch, test it, measure it on this chip", _add_retrain)
def _cmd_retrain(args: argparse.Namespace) -> int:
    import json

    from nni_hwaware.report import evaluate_architecture
    from nni_hwaware.spaces.io import load_architecture
    from nni_hwaware.training import TrainConfig

    named = _arch_space(args, args.arch)
    arch = load_architecture(args.arch, named)
    train = TrainConfig.from_json(args.train, epochs=args.epochs, seed=args.seed, data_dir=args.data_dir)
    model = _model(args, args.table)[1] if args.table else None
    result = evaluate_architecture(named, arch, train, cost_model=model, name=args.name or Path(args.arch).stem,
                                   threads=args.threads, batch_size=args.batch_size, backend=args.backend,
                                   keep_weights=bool(args.save))
    if args.save:
        from nni_hwaware.export import deliver

        result = deliver(named, result, space=args.space, space_args=json.loads(args.space_args), train=train,
                         out=args.save, nni_dir=False, threads=args.threads)
        if "deliverables_error" in result.extra:
            raise HwAwareError(result.extra["deliverables_error"])
        print(f"saved the trained network and its exports in {result.extra['deliverables']['dir']}")
    result.save(args.out)
    print(f"{result.name}: test top-1 {result.test_top1:.4f}, top-3 {result.test_top3:.4f}, "
          f"latency {result.latency_ms:.4g} ms, memory {result.memory_mb:.4g} MB; wrote {args.out}")
    return 0


def _add_export(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("source", nargs="?",
                        help="a finished PPO experiment (id or directory: its found network) or an architecture "
                             "JSON; optional with --weights")
    parser.add_argument("--weights", help="network.pt a search wrote (the trained network: its space, "
                                          "architecture and weights)")
    _add_space(parser, required=False)
    parser.add_argument("--format", action="append", choices=["onnx", "torchscript"],
                        help="export format, repeatable (default: onnx and torchscript)")
    parser.add_argument("--seed", type=int, default=0, help="initialisation of an untrained network (default: 0)")
    parser.add_argument("--out", required=True, help="directory for network.onnx / network.torchscript.pt")


def _export_source(args: argparse.Namespace) -> tuple[Any, Any, str]:
    """(named space, network, what it is) from ``--weights``, an experiment or an architecture JSON."""
    import json

    import torch

    from nni_hwaware.export import load_checkpoint, network_from_checkpoint
    from nni_hwaware.files import read_json
    from nni_hwaware.spaces.io import load_architecture

    weights = args.weights
    arch_file = None
    if args.source and weights:
        raise HwAwareError("give either an experiment / architecture JSON or --weights, not both")
    if args.source and not weights:
        source = Path(args.source)
        data = read_json(source, "architecture file") if source.suffix == ".json" else None
        if isinstance(data, dict) and "best" not in data:
            arch_file = source
        else:
            if data is not None and not isinstance(data, dict):
                raise HwAwareError(f"{source} holds no architecture (a label -> value mapping) nor search results")
            results = data if data is not None else read_json(_search_results(args.source), "search results")
            best, space = results["best"], results.get("space") or {}
            summary = best.get("extra", {}).get("deliverables") or {}
            saved = Path(summary.get("dir", "")) / "network.pt" if summary else None
            if saved is not None and saved.is_file():
                weights = str(saved)
            else:
                if args.space is None:
                    args.space = space.get("space")
                    if args.space_args == "{}" and space.get("space_args"):
                        args.space_args = json.dumps(space["space_args"])
                if args.space is None:
                    raise HwAwareError("the experiment's report names no space; pass --space (and --space-args)")
                named = _named(args)
                if summary:
                    print(f"warning: the trained network is on {summary['host']} in {summary['dir']}; exporting the "
                          "architecture untrained (copy its network.pt here and pass --weights)", file=sys.stderr)
                with torch.random.fork_rng(devices=[]):
                    torch.manual_seed(args.seed)
                    net = named.build(named.check_architecture(best["arch"]))
                return named, net, "the experiment's found network, untrained"
    if weights:
        checkpoint = load_checkpoint(weights)
        named, net = network_from_checkpoint(checkpoint)
        return named, net, f"trained network {checkpoint.arch} of {checkpoint.space} from {weights}"
    if arch_file is None:
        raise HwAwareError("give an experiment id or directory, an architecture JSON, or --weights network.pt")
    named = _arch_space(args, arch_file)
    arch = load_architecture(arch_file, named)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(args.seed)
        net = named.build(arch)
    return named, net, f"untrained network {arch} of {named.name} (seed {args.seed})"


@command("export", "export a network of any space to ONNX / TorchScript, checked against PyTorch", _add_export)
def _cmd_export(args: argparse.Namespace) -> int:
    from nni_hwaware.export import FORMATS, export_network, file_name, onnx_available

    named, net, what = _export_source(args)
    formats = list(dict.fromkeys(args.format or FORMATS))
    if "onnx" in formats and not onnx_available():
        if args.format:
            raise HwAwareError("ONNX export needs the onnx extra: pip install 'nni-hwaware[onnx]'")
        formats.remove("onnx")
        print("no ONNX export: install the onnx extra (pip install 'nni-hwaware[onnx]')")
    print(f"exporting {what}")
    out = Path(args.out)
    bad = []
    for fmt in formats:
        check = export_network(net, tuple(named.input_shape), out / file_name(fmt), fmt, seed=args.seed)
        state = "matches PyTorch" if check.matches else "DIFFERS from PyTorch"
        print(f"{check.path}: {state} on a batch of {check.batch} (largest difference {check.max_abs_diff:.2g})")
        if not check.matches:
            bad.append(fmt)
    if bad:
        raise HwAwareError(f"the {', '.join(bad)} export does not reproduce the network; report this with the "
                           "architecture")
    return 0


def _add_report(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("experiment", nargs="?",
                        help="a finished PPO experiment: its id (looked up in ./nni-experiments and "
                             "~/nni-experiments) or directory; renders its report again")
    parser.add_argument("--baseline", help="result JSON of the baseline (nni-hwaware retrain)")
    parser.add_argument("--result", nargs="+", help="result JSON(s) of the networks to compare")
    parser.add_argument("--sweep", nargs="*", default=[], help="result JSONs plotted as sweep points")
    parser.add_argument("--no-plot", action="store_true", help="write the table only")
    parser.add_argument("--out", help="directory for the report files (default with an experiment: its report/)")


def _search_results(experiment: str) -> Path:
    """``results.json`` of a finished search, from an experiment id or directory."""
    candidates = [Path(experiment)] + [Path(root).expanduser() / experiment
                                       for root in ("nni-experiments", "~/nni-experiments")]
    for base in candidates:
        for path in (base / "hwaware" / "report" / "results.json", base / "results.json"):
            if path.is_file():
                return path
    raise HwAwareError(f"no finished search report for {experiment!r}: looked for hwaware/report/results.json "
                       "under it, ./nni-experiments/<id> and ~/nni-experiments/<id>")


@command("report", "render a report: a finished PPO experiment's, or baseline vs result JSONs", _add_report)
def _cmd_report(args: argparse.Namespace) -> int:
    from nni_hwaware.report import ModelResult, write_report
    from nni_hwaware.report.search import render_search_report

    if args.experiment:
        results = _search_results(args.experiment)
        paths = render_search_report(results, args.out or results.parent)
    else:
        if not (args.baseline and args.result):
            raise HwAwareError("give an experiment id or directory, or --baseline and --result JSON files")
        if not args.out:
            raise HwAwareError("--out is required with --baseline/--result")
        baseline = ModelResult.load(args.baseline)
        others = [ModelResult.load(path) for path in args.result]
        sweep = [ModelResult.load(path) for path in args.sweep]
        paths = write_report(args.out, baseline, others, sweep=sweep, plot=not args.no_plot)
    print(paths["markdown"].read_text(encoding="utf-8"))
    for kind, path in paths.items():
        print(f"{kind}: {path}")
    return 0


def _add_check_config(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("config", help="nnictl experiment config that uses the PPO tuner (e.g. config.yml)")


@command("check-config", "say what would make an experiment config fail, before launching it", _add_check_config)
def _cmd_check_config(args: argparse.Namespace) -> int:
    from nni_hwaware.experiment.check import check_config

    notes = check_config(args.config)
    for note in notes:
        print(f"note: {note}")
    print(f"{args.config}: OK")
    return 0


# -- experiments ---------------------------------------------------------------------


def _add_portal_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--port", type=int, default=8080, help="port of NNI's manager and web portal (default: 8080)")
    parser.add_argument("--expose", action="store_true",
                        help="listen on every network interface (needed for remote or cluster training "
                             "services); the portal has no authentication, so only on a trusted network")



def _add_run_options(parser: argparse.ArgumentParser) -> None:
    _add_portal_options(parser)
    parser.add_argument("--debug", action="store_true", help="NNI's debug logging")
    parser.add_argument("--foreground", action="store_true", help="keep the manager in the foreground")


def _add_create(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", required=True, help="nnictl experiment config, e.g. config.yml")
    _add_run_options(parser)


def _add_view(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("id", help="experiment id")
    parser.add_argument("--experiment-dir", help="its experimentWorkingDirectory (default: NNI's registry)")
    _add_portal_options(parser)


def _add_resume(parser: argparse.ArgumentParser) -> None:
    _add_view(parser)
    parser.add_argument("--debug", action="store_true", help="NNI's debug logging")
    parser.add_argument("--foreground", action="store_true", help="keep the manager in the foreground")


def _remote_platforms(config_file: str) -> list[str]:
    """Training services of a config whose trials run on other machines."""
    from nni_hwaware.experiment.check import _load

    services = _load(Path(config_file).resolve()).get("trainingService") or {}
    services = services if isinstance(services, list) else [services]
    return [str(s.get("platform")) for s in services if isinstance(s, dict) and s.get("platform") != "local"]


def _launch(action: str, target: list[str], args: argparse.Namespace) -> int:
    """Run ``nnictl <action>`` with the manager bound to 127.0.0.1 unless ``--expose``."""
    import subprocess

    from nni_hwaware.experiment.nnictl import nnictl_path
    from nni_hwaware.experiment.portal import listening_addresses, portal_env, warn_exposed

    if args.expose:
        warn_exposed(args.port)
    cmd = [nnictl_path(), action, *target, "--port", str(args.port)]
    foreground = getattr(args, "foreground", False)
    cmd += ["--debug"] * getattr(args, "debug", False) + ["--foreground"] * foreground
    if getattr(args, "experiment_dir", None):
        cmd += ["--experiment_dir", args.experiment_dir]
    code = subprocess.call(cmd, env=portal_env(expose=args.expose))
    if code == 0 and not foreground:
        where = listening_addresses(args.port)
        if not args.expose and any(ip not in ("127.0.0.1", "::1") for ip in where):
            raise HwAwareError(f"the manager listens on {', '.join(where)}, not only 127.0.0.1; "
                               "stop it with nnictl stop <experiment id>")
        scope = "every interface" if args.expose else "this machine only; --expose to reach it from others"
        print(f"web portal: http://127.0.0.1:{args.port} ({scope})")
    return code


@command("create", "nnictl create, with the web portal on 127.0.0.1 unless --expose", _add_create)
def _cmd_create(args: argparse.Namespace) -> int:
    if not Path(args.config).is_file():
        raise HwAwareError(f"config file {args.config} does not exist")
    remote = _remote_platforms(args.config)
    if remote and not args.expose:
        raise HwAwareError(f"training service {', '.join(remote)} runs trials on other machines, which must "
                           "reach the manager: add --expose (the portal then listens on every interface)")
    return _launch("create", ["--config", args.config], args)


@command("resume", "nnictl resume an interrupted experiment, portal on 127.0.0.1 unless --expose", _add_resume)
def _cmd_resume(args: argparse.Namespace) -> int:
    return _launch("resume", [args.id], args)


@command("view", "nnictl view a stopped experiment, portal on 127.0.0.1 unless --expose", _add_view)
def _cmd_view(args: argparse.Namespace) -> int:
    return _launch("view", [args.id], args)
