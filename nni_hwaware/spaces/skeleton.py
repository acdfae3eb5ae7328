"""The shape of a search space: fixed stem and head, searchable layers in stages.

A :class:`SpaceConfig` is plain data (it round-trips through a dict and JSON), so
NNI can replay it in every trial and a pruned space is just a config with fewer
candidates per layer. Everything that needs the layers' shapes (the supernet,
one fixed network, profiling, pruning) derives them from here.

The network is ResNet50's skeleton: the first three layers
(conv, BN, ReLU of the stem) and the last three (global pooling, flatten, fully
connected) are fixed, and every residual-block position in between chooses a
candidate block. Filter counts are set per stage, few at the bottom, many at the top.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from torch import nn
from torchvision.ops import Conv2dNormActivation

from nni_hwaware.errors import HwAwareError
from nni_hwaware.spaces.blocks import BLOCKS

__all__ = ["Architecture", "FixedPart", "LayerSpec", "SpaceConfig", "StageConfig"]

#: An architecture: layer label -> candidate block name.
Architecture = dict[str, str]


@dataclass(frozen=True)
class StageConfig:
    """One stage: ``depth`` searchable layers of ``channels`` filters; the first has ``stride``."""

    channels: int
    depth: int
    stride: int = 1


@dataclass(frozen=True)
class LayerSpec:
    """A searchable layer: where it sits and what it may become."""

    label: str
    in_channels: int
    out_channels: int
    stride: int
    #: Per-sample input shape (C, H, W).
    input_shape: tuple[int, int, int]
    candidates: tuple[str, ...]


@dataclass(frozen=True)
class FixedPart:
    """A part of every network of the space (stem or head)."""

    name: str
    input_shape: tuple[int, int, int]
    out_channels: int
    stride: int


@dataclass(frozen=True)
class SpaceConfig:
    """Everything that defines a space; see the module docstring."""

    name: str
    in_channels: int
    image_size: int
    num_classes: int
    stem_channels: int
    stages: tuple[StageConfig, ...]
    #: The block set every layer chooses from.
    candidates: tuple[str, ...]
    #: Per-layer candidate lists that override ``candidates`` (a pruned space).
    layer_candidates: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    #: The block that makes the baseline (plain ResNet50) in every layer.
    baseline_block: str = "bottleneck"
    #: The data set the space is meant for (see :mod:`nni_hwaware.spaces.data`).
    dataset: str = "digits"

    def __post_init__(self) -> None:
        unknown = [name for name in self.candidates if name not in BLOCKS]
        for names in self.layer_candidates.values():
            unknown += [name for name in names if name not in BLOCKS]
        if unknown:
            raise HwAwareError(
                f"space {self.name!r}: unknown blocks {sorted(set(unknown))}; known: {', '.join(BLOCKS)}"
            )
        if not self.stages or any(s.depth < 1 or s.stride not in (1, 2) for s in self.stages):
            raise HwAwareError(
                f"space {self.name!r}: every stage needs depth >= 1 and stride 1 or 2"
            )
        labels = {spec.label for spec in self.layer_specs()}
        stray = sorted(set(self.layer_candidates) - labels)
        if stray:
            raise HwAwareError(
                f"space {self.name!r}: layer_candidates names unknown layers {stray}; layers: {sorted(labels)}"
            )
        empty = sorted(label for label, names in self.layer_candidates.items() if not names)
        if empty:
            raise HwAwareError(f"space {self.name!r}: layers {empty} have no candidates left")

    # -- serialisation -----------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["stages"] = [asdict(s) for s in self.stages]
        data["candidates"] = list(self.candidates)
        data["layer_candidates"] = {k: list(v) for k, v in self.layer_candidates.items()}
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> SpaceConfig:
        known = set(cls.__dataclass_fields__)
        stray = sorted(set(data) - known)
        if stray:
            raise HwAwareError(f"space config: unknown keys {stray}; allowed: {sorted(known)}")
        try:
            values = dict(data)
            values["stages"] = tuple(StageConfig(**s) for s in data["stages"])
            values["candidates"] = tuple(data["candidates"])
            values["layer_candidates"] = {
                k: tuple(v) for k, v in dict(data.get("layer_candidates") or {}).items()
            }
            return cls(**values)
        except (KeyError, TypeError) as err:
            raise HwAwareError(f"space config is incomplete or malformed: {err}") from None

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2)

    def with_layer_candidates(self, layer_candidates: Mapping[str, Sequence[str]]) -> SpaceConfig:
        """The same space with fewer candidates per layer (the result of pruning)."""
        data = self.to_dict()
        data["layer_candidates"] = {k: list(v) for k, v in layer_candidates.items()}
        return SpaceConfig.from_dict(data)

    # -- shapes ------------------------------------------------------------------
    def layer_specs(self) -> list[LayerSpec]:
        """Searchable layers in forward order, labelled ``layer{stage}_{index}``."""
        specs: list[LayerSpec] = []
        channels, size = self.stem_channels, self.image_size
        for stage_index, stage in enumerate(self.stages, start=1):
            for index in range(stage.depth):
                stride = stage.stride if index == 0 else 1
                label = f"layer{stage_index}_{index}"
                specs.append(LayerSpec(
                    label=label, in_channels=channels, out_channels=stage.channels, stride=stride,
                    input_shape=(channels, size, size),
                    candidates=tuple(self.layer_candidates.get(label, self.candidates)),
                ))
                channels, size = stage.channels, _downsampled(size, stride)
        return specs

    def fixed_parts(self) -> list[FixedPart]:
        """The stem (first three layers) and the head (last three)."""
        last = self.layer_specs()[-1]
        size = _downsampled(last.input_shape[1], last.stride)
        return [
            FixedPart("stem", (self.in_channels, self.image_size, self.image_size), self.stem_channels, 1),
            FixedPart("head", (last.out_channels, size, size), self.num_classes, 1),
        ]

    def build_fixed(self, name: str) -> nn.Module:
        """Build the stem (conv, BN, ReLU) or the head (pool, flatten, linear)."""
        if name == "stem":
            return Conv2dNormActivation(self.in_channels, self.stem_channels, kernel_size=3)
        if name == "head":
            return nn.Sequential(
                nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(self.stages[-1].channels, self.num_classes)
            )
        raise HwAwareError(f"unknown fixed part {name!r}; fixed parts are 'stem' and 'head'")

    @property
    def input_shape(self) -> tuple[int, int, int]:
        """Per-sample input shape (C, H, W)."""
        return (self.in_channels, self.image_size, self.image_size)

    def baseline(self) -> Architecture:
        """Plain ResNet50 of this skeleton: ``baseline_block`` in every layer."""
        return {spec.label: self.baseline_block for spec in self.layer_specs()}

    def check_architecture(self, arch: Mapping[str, str]) -> Architecture:
        """Return ``arch`` as a dict if it fits the space, else say what does not fit."""
        specs = {spec.label: spec for spec in self.layer_specs()}
        missing = [label for label in specs if label not in arch]
        extra = [label for label in arch if label not in specs]
        if missing or extra:
            raise HwAwareError(
                f"architecture does not fit space {self.name!r}: missing layers {missing}, unknown layers {extra}"
            )
        for label, block in arch.items():
            if block not in specs[label].candidates:
                raise HwAwareError(
                    f"architecture does not fit space {self.name!r}: layer {label} has block {block!r}, "
                    f"allowed: {', '.join(specs[label].candidates)}"
                )
        return {label: arch[label] for label in specs}

    def size(self) -> int:
        """Number of architectures in the space."""
        total = 1
        for spec in self.layer_specs():
            total *= len(spec.candidates)
        return total


def _downsampled(size: int, stride: int) -> int:
    return (size - 1) // stride + 1
