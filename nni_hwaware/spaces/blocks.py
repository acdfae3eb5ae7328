"""Candidate blocks: the building blocks of classic networks a layer chooses from.

Every candidate maps a layer's ``(in_channels, out_channels, stride)`` to a module
whose output has ``out_channels`` channels and ``1/stride`` of the input's spatial
size, so any candidate can stand in any layer. Blocks reuse torchvision's own
implementations (``BasicBlock``, ``Bottleneck``, ``SqueezeExcitation``,
MobileNetV3's ``InvertedResidual``).

Widths follow ResNet50: a layer of ``out`` channels has the bottleneck width
``w = out / 4``. Candidates (a small registry in the manner of timm):

==================  =============================================================
name                block
==================  =============================================================
``skip``            the residual shortcut alone: identity, a 1x1 conv + BN
                    projection when the width changes, and in a reduction layer
                    a 2x2 average pool before it (ResNet-D's shortcut)
``basic``           ResNet basic block (two 3x3 convs at ``out`` channels)
``bottleneck``      ResNet50 bottleneck (1x1 -> 3x3 -> 1x1, width ``w``)
``bottleneck_gG``   ResNeXt-style grouped bottleneck, width ``w``, 3x3 conv in G groups
``se_bottleneck``   SENet bottleneck: squeeze-excitation before the residual add
``mbconv_kK_eE``    MobileNet inverted residual, depthwise KxK, hidden width ``E*w``
``se_mbconv_kK_eE`` the same with squeeze-excitation (MobileNetV3)
==================  =============================================================
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial

import torch
from torch import nn
from torchvision.models.mobilenetv3 import InvertedResidual, InvertedResidualConfig
from torchvision.models.resnet import BasicBlock, Bottleneck
from torchvision.ops import SqueezeExcitation

from nni_hwaware.errors import HwAwareError

__all__ = ["BLOCKS", "block_names", "build_block", "register_block"]

BlockFactory = Callable[[int, int, int], nn.Module]

#: name -> factory(in_channels, out_channels, stride)
BLOCKS: dict[str, BlockFactory] = {}


def register_block(name: str) -> Callable[[BlockFactory], BlockFactory]:
    """Register ``factory(in_channels, out_channels, stride)`` as candidate ``name``."""

    def register(factory: BlockFactory) -> BlockFactory:
        if name in BLOCKS:
            raise ValueError(f"block {name!r} is registered twice")
        BLOCKS[name] = factory
        return factory

    return register


def block_names() -> list[str]:
    """Names of all registered candidate blocks, in registration order."""
    return list(BLOCKS)


def build_block(name: str, in_channels: int, out_channels: int, stride: int) -> nn.Module:
    """Build candidate ``name`` for a layer; unknown names get the list of known ones."""
    try:
        factory = BLOCKS[name]
    except KeyError:
        raise HwAwareError(
            f"unknown block {name!r}; known blocks: {', '.join(BLOCKS)}"
        ) from None
    if stride not in (1, 2):
        raise HwAwareError(f"block {name!r}: stride must be 1 or 2, got {stride}")
    if out_channels % 4:
        raise HwAwareError(
            f"block {name!r}: out_channels must be a multiple of 4 (bottleneck width out/4), "
            f"got {out_channels}"
        )
    return factory(in_channels, out_channels, stride)


def _shortcut(in_channels: int, out_channels: int, stride: int) -> nn.Module | None:
    """ResNet's projection shortcut, or None where the identity fits."""
    if stride == 1 and in_channels == out_channels:
        return None
    return nn.Sequential(
        nn.Conv2d(in_channels, out_channels, 1, stride=stride, bias=False),
        nn.BatchNorm2d(out_channels),
    )


def _squeeze(channels: int) -> int:
    """SENet's reduction ratio 16, at least 4 channels."""
    return max(4, channels // 16)


@register_block("skip")
def _skip(in_channels: int, out_channels: int, stride: int) -> nn.Module:
    """The layer left out: what passes is the shortcut alone.

    A reduction layer averages each 2x2 window before its projection (ResNet-D, "Bag of Tricks
    for Image Classification", He et al. 2019) instead of FBNet's strided 1x1 conv, which keeps
    one position in four: a chain of such skips hands the next block one pixel of its input
    (on digits, an MBConv then three skipped reductions trained to 46 % top-1; averaged, 98 %).
    """
    if stride == 1:
        return _shortcut(in_channels, out_channels, stride) or nn.Identity()
    return nn.Sequential(
        nn.AvgPool2d(2, stride=2, ceil_mode=True, count_include_pad=False),
        nn.Conv2d(in_channels, out_channels, 1, bias=False),
        nn.BatchNorm2d(out_channels),
    )


@register_block("basic")
def _basic(in_channels: int, out_channels: int, stride: int) -> nn.Module:
    return BasicBlock(in_channels, out_channels, stride, _shortcut(in_channels, out_channels, stride))


def _bottleneck(in_channels: int, out_channels: int, stride: int, groups: int = 1) -> Bottleneck:
    width = out_channels // 4
    if width % groups:
        raise HwAwareError(
            f"bottleneck_g{groups}: width {width} (out_channels/4) is not divisible by {groups} groups"
        )
    # torchvision: width = int(planes * base_width / 64) * groups; keep it at out/4.
    return Bottleneck(
        in_channels, width, stride, _shortcut(in_channels, out_channels, stride),
        groups=groups, base_width=64 // groups,
    )


register_block("bottleneck")(_bottleneck)
for _groups in (2, 4, 8):
    register_block(f"bottleneck_g{_groups}")(partial(_bottleneck, groups=_groups))


class SEBottleneck(Bottleneck):
    """SENet's bottleneck: squeeze-excitation rescales the residual branch before the add."""

    def __init__(self, in_channels: int, out_channels: int, stride: int) -> None:
        width = out_channels // 4
        super().__init__(in_channels, width, stride, _shortcut(in_channels, out_channels, stride))
        self.se = SqueezeExcitation(out_channels, _squeeze(out_channels))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        identity = x if self.downsample is None else self.downsample(x)
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.relu(self.bn2(self.conv2(out)))
        out = self.se(self.bn3(self.conv3(out)))
        return self.relu(out + identity)


register_block("se_bottleneck")(SEBottleneck)


def _mbconv(in_channels: int, out_channels: int, stride: int, *, kernel: int, expansion: int,
            se: bool) -> nn.Module:
    hidden = expansion * (out_channels // 4)
    config = InvertedResidualConfig(in_channels, kernel, hidden, out_channels, se, "RE", stride, 1, 1.0)
    # torchvision rounds channels to multiples of 8; keep the layer's exact widths.
    config.input_channels, config.expanded_channels, config.out_channels = (
        in_channels, hidden, out_channels,
    )
    return InvertedResidual(config, norm_layer=nn.BatchNorm2d)


for _kernel in (3, 5, 7):
    for _expansion in (3, 6):
        register_block(f"mbconv_k{_kernel}_e{_expansion}")(
            partial(_mbconv, kernel=_kernel, expansion=_expansion, se=False)
        )
for _kernel, _expansion in ((3, 3), (3, 6), (5, 6)):
    register_block(f"se_mbconv_k{_kernel}_e{_expansion}")(
        partial(_mbconv, kernel=_kernel, expansion=_expansion, se=True)
    )
