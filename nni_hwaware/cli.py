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
