"""The command line's subcommands: a registry, and parsers that add a subcommand's options on first use.

A subcommand is a function ``run(args) -> int`` registered with :func:`command`
together with the function that adds its arguments. The arguments are added only
when the subcommand is parsed or its help is shown (:class:`LazyParser`), so
``nni-hwaware --help`` imports nothing heavy even where an option's choices come
from a library registry (the backends, which import torch).
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Sequence
from typing import Any

__all__ = ["COMMANDS", "AddArguments", "Command", "LazyParser", "Registry", "add_subcommands", "command"]

AddArguments = Callable[[argparse.ArgumentParser], None]
Command = Callable[[argparse.Namespace], int]
#: name -> (help, add_arguments, run)
Registry = dict[str, tuple[str, AddArguments, Command]]

#: The subcommands of ``nni-hwaware``, in the order ``--help`` lists them.
COMMANDS: Registry = {}


def command(name: str, help: str, add_arguments: AddArguments,
            registry: Registry = COMMANDS) -> Callable[[Command], Command]:
    """Register ``run`` as the subcommand ``name`` (of ``nni-hwaware`` unless another ``registry``)."""

    def register(run: Command) -> Command:
        registry[name] = (help, add_arguments, run)
        return run

    return register


class LazyParser(argparse.ArgumentParser):
    """An argument parser that calls ``add_arguments(self)`` the first time it parses or formats help."""

    def __init__(self, *args: Any, add_arguments: AddArguments | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.pending = add_arguments

    def add_pending(self) -> None:
        """Add the arguments now, if not done yet."""
        if self.pending is not None:
            add_arguments, self.pending = self.pending, None
            add_arguments(self)

    def parse_known_args(self, args: Sequence[str] | None = None,
                         namespace: argparse.Namespace | None = None) -> tuple[argparse.Namespace, list[str]]:
        self.add_pending()
        return super().parse_known_args(args, namespace)

    def format_usage(self) -> str:
        self.add_pending()
        return super().format_usage()

    def format_help(self) -> str:
        self.add_pending()
        return super().format_help()


def add_subcommands(parser: argparse.ArgumentParser, registry: Registry, dest: str, metavar: str) -> None:
    """Add the subcommands of ``registry`` to ``parser``; the one chosen is stored as ``dest``."""
    sub = parser.add_subparsers(dest=dest, metavar=metavar, parser_class=LazyParser)
    for name, (help_text, add_arguments, _) in registry.items():
        sub.add_parser(name, help=help_text, description=help_text, add_arguments=add_arguments)
