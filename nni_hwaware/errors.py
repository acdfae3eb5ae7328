"""The one exception type for bad user input.

The CLI prints its message as a single line and exits non-zero; from Python it
is a ``ValueError`` whose message says what is wrong and what to do.
"""

from __future__ import annotations

__all__ = ["HwAwareError"]


class HwAwareError(ValueError):
    """Bad input: a table, space, architecture or option the user must change."""
