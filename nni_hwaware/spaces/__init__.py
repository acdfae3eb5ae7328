"""Search spaces: any NNI model space by name (:mod:`~nni_hwaware.spaces.resolve`), and the project's
ResNet50-skeleton spaces of ResNet, MobileNet and SENet blocks."""

from __future__ import annotations

from nni_hwaware.spaces.blocks import BLOCKS, block_names, build_block, register_block
from nni_hwaware.spaces.network import BlockChoiceSpace, Network, build_network
from nni_hwaware.spaces.registry import SPACES, get_space_config, register_space, space_names
from nni_hwaware.spaces.skeleton import Architecture, FixedPart, LayerSpec, SpaceConfig, StageConfig

__all__ = [
    "BLOCKS",
    "SPACES",
    "Architecture",
    "BlockChoiceSpace",
    "FixedPart",
    "LayerSpec",
    "Network",
    "SpaceConfig",
    "StageConfig",
    "block_names",
    "build_block",
    "build_network",
    "get_space_config",
    "register_block",
    "register_space",
    "space_names",
]
