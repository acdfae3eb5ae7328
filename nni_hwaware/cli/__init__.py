"""The ``nni-hwaware`` command line.

Each subcommand is a function ``run(args) -> int`` registered with :func:`command`
together with the function that adds its arguments (see
:mod:`~nni_hwaware.cli.registry`); one module per group of subcommands:

* :mod:`~nni_hwaware.cli.tables`: ``profile``, ``validate``, ``chips``, ``collect``;
* :mod:`~nni_hwaware.cli.spaces`: ``prune``, ``search-space``;
* :mod:`~nni_hwaware.cli.proxy`: ``proxy``;
* :mod:`~nni_hwaware.cli.search`: ``search gumbel``, ``retrain``;
* :mod:`~nni_hwaware.cli.export`: ``export``;
* :mod:`~nni_hwaware.cli.experiments`: ``register``, ``check-config``, ``create``, ``resume``,
  ``view``, ``report``.

Bad input raises :class:`~nni_hwaware.errors.HwAwareError`; :func:`main` prints it as
one line on stderr and returns 2. Importing this package imports no torch: the
subcommands import the library when they run.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from nni_hwaware import __version__
from nni_hwaware.cli import experiments, export, proxy, search, spaces, tables
from nni_hwaware.cli.registry import COMMANDS, Registry, add_subcommands, command
from nni_hwaware.errors import HwAwareError

__all__ = ["COMMANDS", "COMMAND_MODULES", "build_parser", "command", "listed_commands", "main"]

#: The modules whose subcommands register on import, in the order ``--help`` lists them.
COMMAND_MODULES = (tables, spaces, proxy, search, export, experiments)


def listed_commands() -> Registry:
    """:data:`COMMANDS` in the order ``--help`` lists them: by module as in :data:`COMMAND_MODULES`
    (others last), then as registered."""
    rank = {module.__name__: i for i, module in enumerate(COMMAND_MODULES)}
    return dict(sorted(COMMANDS.items(), key=lambda item: rank.get(item[1][2].__module__, len(rank))))


def build_parser() -> argparse.ArgumentParser:
    """The parser of ``nni-hwaware``; a subcommand's options are added when it is parsed."""
    parser = argparse.ArgumentParser(
        prog="nni-hwaware",
        description="Hardware-aware neural architecture search for Microsoft NNI.",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    add_subcommands(parser, listed_commands(), dest="command", metavar="COMMAND")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``nni-hwaware`` with ``argv`` (default: the command line); the exit status."""
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
