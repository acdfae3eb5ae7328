"""Architecture files: ``{"space": ..., "arch": {label: value}}`` JSON, checked against a space."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from nni_hwaware.errors import HwAwareError
from nni_hwaware.files import read_json, write_json
from nni_hwaware.spaces.skeleton import Architecture, SpaceConfig

__all__ = ["load_architecture", "save_architecture"]


def save_architecture(path: str | os.PathLike[str], arch: Mapping[str, Any], config: SpaceConfig | Any,
                      **extra: object) -> Path:
    """Write ``arch`` with the space it belongs to (and any ``extra`` fields) atomically."""
    space_args = dict(getattr(config, "kwargs", None) or {})
    return write_json(path, {"space": config.name, **({"space_args": space_args} if space_args else {}),
                             "arch": config.check_architecture(arch), **extra})


def load_architecture(path: str | os.PathLike[str], config: SpaceConfig | Any) -> Architecture:
    """Read an architecture JSON (``{"arch": {...}}`` or a plain label -> value dict) for a space.

    ``config`` is a :class:`SpaceConfig` or a :class:`~nni_hwaware.spaces.resolve.NamedSpace`.
    """
    data = read_json(path, "architecture file")
    arch = data.get("arch", data) if isinstance(data, dict) else None
    if not isinstance(arch, dict) or not all(isinstance(v, str | int | float) and not isinstance(v, bool)
                                             for v in arch.values()):
        raise HwAwareError(f"architecture file {path} must hold a label -> value mapping")
    try:
        return config.check_architecture(arch)
    except HwAwareError as err:
        raise HwAwareError(f"{path}: {err}") from None
