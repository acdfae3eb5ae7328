"""The one exception type for bad user input.

The CLI prints its message as a single line and exits non-zero; from Python it
is a ``ValueError`` whose message says what is wrong and what to do.
"""

from __future__ import annotations

__all__ = ["HwAwareError", "TargetUnreachable", "one_line"]


class HwAwareError(ValueError):
    """Bad input: a table, space, architecture or option the user must change."""


class TargetUnreachable(HwAwareError):
    """A latency or memory target that no network of the space meets on the chip (its cheapest is over it)."""


def one_line(err: BaseException, limit: int = 200) -> str:
    """``Type: message`` of an exception from a library, on one line (whitespace folded, cut at ``limit``)."""
    return f"{type(err).__name__}: {' '.join(str(err).split())[:limit]}"
