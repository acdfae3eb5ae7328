"""Typed option objects from plain mappings (YAML, JSON, classArgs): one checked entry point.

Configuration flows one way: a mapping from the user becomes a frozen dataclass
once, at the boundary; a misspelt key is an error that lists the allowed ones
(never swallowed by ``**kwargs``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any, TypeVar

from nni_hwaware.errors import HwAwareError

__all__ = ["from_mapping"]

T = TypeVar("T")


def from_mapping(cls: type[T], data: Mapping[str, Any] | None, what: str) -> T:
    """``cls(**data)`` after checking that every key of ``data`` is a field of ``cls``."""
    values = dict(data or {})
    allowed = [f.name for f in dataclasses.fields(cls)]  # type: ignore[arg-type]
    stray = sorted(set(values) - set(allowed))
    if stray:
        raise HwAwareError(f"unknown {what} {stray}; allowed: {sorted(allowed)}")
    try:
        return cls(**values)
    except TypeError as err:
        raise HwAwareError(f"{what}: {err}") from None
