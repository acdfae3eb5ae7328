"""The NNI model space (a supernet of labelled ``LayerChoice``s) and single networks.

:class:`BlockChoiceSpace` is an NNI ``ModelSpace``: every NNI strategy (Random,
Evolution, TPE, DARTS, ...) runs on it, and its only constructor argument is the
space's config as a plain dict, so NNI can replay it in each trial.
:func:`build_network` builds one architecture directly, without instantiating the
other candidates (what trials, retraining and latency measurement use).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
from nni.nas.space.frozen import current_model, model_context
from torch import nn

from nni_hwaware.nni_fixes import import_nni_nas
from nni_hwaware.spaces.blocks import build_block
from nni_hwaware.spaces.skeleton import SpaceConfig

__all__ = ["BlockChoiceSpace", "Network", "build_network"]

_nas = import_nni_nas()


class Network(nn.Module):
    """One network of a space: stem, the chosen blocks, head."""

    def __init__(self, config: SpaceConfig, blocks: Mapping[str, nn.Module]) -> None:
        super().__init__()
        self.stem = config.build_fixed("stem")
        self.blocks = nn.Sequential()
        for label, block in blocks.items():
            self.blocks.add_module(label, block)
        self.head = config.build_fixed("head")

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.blocks(self.stem(x)))


def build_network(config: SpaceConfig, arch: Mapping[str, str]) -> Network:
    """Build architecture ``arch`` (layer label -> block) of ``config``'s space."""
    arch = config.check_architecture(arch)
    blocks = {
        spec.label: build_block(arch[spec.label], spec.in_channels, spec.out_channels, spec.stride)
        for spec in config.layer_specs()
    }
    return Network(config, blocks)


class BlockChoiceSpace(_nas.ModelSpace):
    """ResNet50-skeleton space: one labelled ``LayerChoice`` over named blocks per layer.

    Under NNI's ``model_context(sample)`` (what ``space.freeze(sample)`` and NNI's
    trials use) only the sampled candidate of each layer is built, so freezing the
    large CIFAR space costs one network, not the whole supernet.
    """

    def __init__(self, config: dict[str, Any]) -> None:
        super().__init__()
        self.config = SpaceConfig.from_dict(config)
        sample = current_model()
        #: The architecture, when built frozen (NNI's trials); None for the supernet.
        self.arch = None if sample is None else self.config.check_architecture({
            label: value for label, value in sample.items() if not label.startswith("_")
        })
        self.stem = self.config.build_fixed("stem")
        self.blocks = nn.Sequential()
        for spec in self.config.layer_specs():
            names = spec.candidates if sample is None else (sample[spec.label],)
            candidates = {
                name: build_block(name, spec.in_channels, spec.out_channels, spec.stride)
                for name in names
            }
            self.blocks.add_module(spec.label, _nas.LayerChoice(candidates, label=spec.label))
        self.head = self.config.build_fixed("head")

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.blocks(self.stem(x)))

    def freeze(self, sample: dict[str, Any]) -> BlockChoiceSpace:
        """The network of ``sample``, built afresh with only its blocks (not a copy of the supernet)."""
        with model_context(sample):
            return BlockChoiceSpace(self.config.to_dict())
