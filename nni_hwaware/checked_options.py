"""Typed option objects from plain mappings (YAML, JSON, classArgs): one checked entry point.

Configuration flows one way: a mapping from the user becomes a frozen dataclass
once, at the boundary; a misspelt key is an error that lists the allowed ones
(never swallowed by ``**kwargs``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from nni_hwaware.errors import HwAwareError

__all__ = ["from_mapping"]

T = TypeVar("T")


def from_mapping(cls: type[T], data: Mapping[str, Any] | T | None, what: str, *,
                 nested: Callable[[str], Callable[[Any], Any] | None] | None = None) -> T:
    """``cls(**data)`` after checking that every key of ``data`` is a field of ``cls``.

    ``data`` may already be a ``cls``; lists become tuples (frozen dataclasses).
    ``nested(field)`` may return a builder for a field holding a nested mapping.
    """
    if data is None:
        data = {}
    if isinstance(data, cls):
        return data
    if not isinstance(data, Mapping):
        raise HwAwareError(f"{what} must be a mapping, got {type(data).__name__}")
    kinds = {f.name: f.type for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
    allowed = list(kinds)
    stray = sorted(set(data) - set(allowed))
    if stray:
        raise HwAwareError(f"unknown {what} {stray}; allowed: {sorted(allowed)}")
    values: dict[str, Any] = {}
    for name, value in data.items():
        build = nested(name) if nested is not None else None
        if build is not None:
            value = build(value)
        elif isinstance(value, list):
            value = tuple(value)
        if kinds[name] in ("bool", bool) and not isinstance(value, bool):
            # a string such as "no" or "false" would otherwise read as True
            raise HwAwareError(f"{what}: {name} must be true or false, got {value!r}")
        values[name] = value
    try:
        return cls(**values)
    except TypeError as err:
        raise HwAwareError(f"{what} are malformed: {err}") from None
