"""Named search spaces: a decorator puts a config factory in a dict; look up by name.

``nni-hwaware ... --space NAME`` and ``space: NAME`` in YAML resolve here; a path
to a JSON file (e.g. a pruned space written by ``nni-hwaware prune``) works too.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

from nni_hwaware.errors import HwAwareError
from nni_hwaware.spaces.blocks import block_names
from nni_hwaware.spaces.skeleton import SpaceConfig, StageConfig

__all__ = ["SPACES", "get_space_config", "register_space", "space_names"]

SPACES: dict[str, Callable[[], SpaceConfig]] = {}


def register_space(name: str) -> Callable[[Callable[[], SpaceConfig]], Callable[[], SpaceConfig]]:
    def register(factory: Callable[[], SpaceConfig]) -> Callable[[], SpaceConfig]:
        if name in SPACES:
            raise ValueError(f"space {name!r} is registered twice")
        SPACES[name] = factory
        return factory

    return register


def space_names() -> list[str]:
    return list(SPACES)


def get_space_config(name_or_path: str | Path) -> SpaceConfig:
    """A registered space by name, or a space config saved as JSON."""
    key = str(name_or_path)
    if key in SPACES:
        return SPACES[key]()
    path = Path(key)
    if path.suffix == ".json" or path.exists():
        if not path.is_file():
            raise HwAwareError(f"space file {path} does not exist; give a space name ({', '.join(SPACES)}) or a JSON file")
        try:
            data = json.loads(path.read_text())
        except json.JSONDecodeError as err:
            raise HwAwareError(f"space file {path} is not valid JSON: {err}") from None
        # A pruning result stores the space under "space".
        return SpaceConfig.from_dict(data.get("space", data) if isinstance(data, dict) else data)
    raise HwAwareError(f"unknown space {key!r}; known spaces: {', '.join(SPACES)} (or a JSON file)")


@register_space("digits")
def digits() -> SpaceConfig:
    """ResNet50's skeleton scaled to sklearn's 8x8 digits: 8 searchable layers, trains in seconds."""
    return SpaceConfig(
        name="digits", in_channels=1, image_size=8, num_classes=10, stem_channels=16,
        stages=(StageConfig(32, 2, 1), StageConfig(64, 2, 2), StageConfig(96, 2, 2), StageConfig(128, 2, 2)),
        candidates=tuple(block_names()), dataset="digits",
    )


@register_space("digits_tiny")
def digits_tiny() -> SpaceConfig:
    """Four layers, four candidates: small enough to train every architecture (256)."""
    return SpaceConfig(
        name="digits_tiny", in_channels=1, image_size=8, num_classes=10, stem_channels=16,
        stages=(StageConfig(32, 1, 1), StageConfig(64, 1, 2), StageConfig(96, 1, 2), StageConfig(128, 1, 2)),
        candidates=("skip", "basic", "bottleneck", "mbconv_k3_e6"), dataset="digits",
    )


@register_space("cifar10_resnet50")
def cifar10_resnet50() -> SpaceConfig:
    """The ResNet50 space: ResNet50 (3-4-6-3 blocks, 256-2048 filters) at 32x32 CIFAR-10."""
    return SpaceConfig(
        name="cifar10_resnet50", in_channels=3, image_size=32, num_classes=10, stem_channels=64,
        stages=(StageConfig(256, 3, 1), StageConfig(512, 4, 2), StageConfig(1024, 6, 2), StageConfig(2048, 3, 2)),
        candidates=tuple(block_names()), dataset="cifar10",
    )
