"""The keys of a block table: every (block, shape) of a ResNet-skeleton space, fixed parts first.

Block tables (one row per candidate block and layer shape, ``kind`` ``candidate`` or
``fixed``) are what earlier versions of ``nni-hwaware profile`` wrote for the project's
spaces, and what hand-made tables use; :class:`~nni_hwaware.cost_model.BlockCostModel` reads
them. Profiling any space, the project's included, is :mod:`nni_hwaware.cost_model`'s
(every distinct leaf once, ``kind`` ``leaf``).
"""

from __future__ import annotations

from dataclasses import dataclass

from torch import nn

from nni_hwaware.cost_table.table import BlockKey
from nni_hwaware.spaces.blocks import build_block
from nni_hwaware.spaces.skeleton import SpaceConfig

__all__ = ["ProfileEntry", "profile_entries"]


@dataclass(frozen=True)
class ProfileEntry:
    """One row of a block table: a block (candidate or fixed part) at one shape."""

    key: BlockKey
    kind: str

    def build(self, config: SpaceConfig) -> nn.Module:
        if self.kind == "fixed":
            return config.build_fixed(self.key.block)
        return build_block(self.key.block, self.key.input_shape[0], self.key.out_channels, self.key.stride)


def profile_entries(config: SpaceConfig) -> list[ProfileEntry]:
    """The distinct (block, shape) pairs of a space, fixed parts first, in forward order."""
    entries = [
        ProfileEntry(BlockKey(part.name, part.input_shape, part.out_channels, part.stride), "fixed")
        for part in config.fixed_parts()
    ]
    for spec in config.layer_specs():
        for name in spec.candidates:
            entries.append(ProfileEntry(
                BlockKey(name, spec.input_shape, spec.out_channels, spec.stride), "candidate"))
    return list(dict.fromkeys(entries))
