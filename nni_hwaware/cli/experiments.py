"""NNI experiments: ``register`` the tuner, ``check-config``, ``create`` / ``resume`` / ``view`` with the web
portal on 127.0.0.1 unless ``--expose``, and ``report`` a finished one."""

from __future__ import annotations

import argparse
from pathlib import Path

from nni_hwaware.cli.registry import command
from nni_hwaware.errors import HwAwareError

__all__ = ["run_check_config", "run_create", "run_register", "run_report", "run_resume", "run_view"]


def add_register(parser: argparse.ArgumentParser) -> None:
    pass


@command("register", "register the PPO tuner with nnictl as builtin 'HardwarePPO'", add_register)
def run_register(args: argparse.Namespace) -> int:
    from nni_hwaware.experiment import register_tuner

    register_tuner()
    print("registered tuner HardwarePPO (use `tuner: {name: HardwarePPO, classArgs: ...}`)")
    return 0


def add_check_config(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("config", help="nnictl experiment config that uses the PPO tuner (e.g. config.yml)")


@command("check-config", "say what would make an experiment config fail, before launching it", add_check_config)
def run_check_config(args: argparse.Namespace) -> int:
    from nni_hwaware.experiment.check import check_config

    notes = check_config(args.config)
    for note in notes:
        print(f"note: {note}")
    print(f"{args.config}: OK")
    return 0


def add_portal_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--port", type=int, default=8080, help="port of NNI's manager and web portal (default: 8080)")
    parser.add_argument("--expose", action="store_true",
                        help="listen on every network interface (needed for remote or cluster training "
                             "services); the portal has no authentication, so only on a trusted network")


def add_manager_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--debug", action="store_true", help="NNI's debug logging")
    parser.add_argument("--foreground", action="store_true", help="keep the manager in the foreground")


def add_create(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", required=True, help="nnictl experiment config, e.g. config.yml")
    add_portal_options(parser)
    add_manager_options(parser)


def add_view(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("id", help="experiment id")
    parser.add_argument("--experiment-dir", help="its experimentWorkingDirectory (default: NNI's registry)")
    add_portal_options(parser)


def add_resume(parser: argparse.ArgumentParser) -> None:
    add_view(parser)
    add_manager_options(parser)


def start(action: str, target: list[str], args: argparse.Namespace) -> int:
    """``nnictl <action>`` with the options of ``args``, then where its web portal is."""
    from nni_hwaware.experiment.launch import launch

    foreground = getattr(args, "foreground", False)
    code = launch(action, target, port=args.port, expose=args.expose, debug=getattr(args, "debug", False),
                  foreground=foreground, experiment_dir=getattr(args, "experiment_dir", None))
    if code == 0 and not foreground:
        scope = "every interface" if args.expose else "this machine only; --expose to reach it from others"
        print(f"web portal: http://127.0.0.1:{args.port} ({scope})")
    return code


@command("create", "nnictl create, with the web portal on 127.0.0.1 unless --expose", add_create)
def run_create(args: argparse.Namespace) -> int:
    from nni_hwaware.experiment.check import remote_platforms

    if not Path(args.config).is_file():
        raise HwAwareError(f"config file {args.config} does not exist")
    remote = remote_platforms(args.config)
    if remote and not args.expose:
        raise HwAwareError(f"training service {', '.join(remote)} runs trials on other machines, which must "
                           "reach the manager: add --expose (the portal then listens on every interface)")
    return start("create", ["--config", args.config], args)


@command("resume", "nnictl resume an interrupted experiment, portal on 127.0.0.1 unless --expose", add_resume)
def run_resume(args: argparse.Namespace) -> int:
    return start("resume", [args.id], args)


@command("view", "nnictl view a stopped experiment, portal on 127.0.0.1 unless --expose", add_view)
def run_view(args: argparse.Namespace) -> int:
    return start("view", [args.id], args)


def add_report(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("experiment", nargs="?",
                        help="a finished PPO experiment: its id (looked up in ./nni-experiments and "
                             "~/nni-experiments) or directory; renders its report again")
    parser.add_argument("--baseline", help="result JSON of the baseline (nni-hwaware retrain)")
    parser.add_argument("--result", nargs="+", help="result JSON(s) of the networks to compare")
    parser.add_argument("--sweep", nargs="*", default=[], help="result JSONs plotted as sweep points")
    parser.add_argument("--no-plot", action="store_true", help="write the table only")
    parser.add_argument("--out", help="directory for the report files (default with an experiment: its report/)")


@command("report", "render a report: a finished PPO experiment's, or baseline vs result JSONs", add_report)
def run_report(args: argparse.Namespace) -> int:
    from nni_hwaware.report import ModelResult, write_report
    from nni_hwaware.report.search import render_search_report

    if args.experiment:
        from nni_hwaware.export.source import search_results

        results = search_results(args.experiment)
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
