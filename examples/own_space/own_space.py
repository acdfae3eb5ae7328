"""A user's own NNI model space, as a user would write it for nni-hwaware.

Two stages on sklearn's 8x8 digits. Each stage has a width choice (a
``MutableConv2d`` whose output channels are ``nni.choice``), a ``LayerChoice`` of
blocks at that width, and a ``Repeat`` of residual blocks whose depth is chosen.
The attributes ``input_shape``, ``num_classes`` and ``dataset`` tell nni-hwaware
what the space takes; ``reference`` names the network budgets compare with.

    nni-hwaware profile --space own_space:OwnSpace --out table.csv   # PYTHONPATH=examples/own_space
"""

from __future__ import annotations

from typing import ClassVar

import nni
import torch
from nni.nas.nn.pytorch import LayerChoice, ModelSpace, MutableBatchNorm2d, MutableConv2d, Repeat
from torch import nn


def conv_bn(in_channels, out_channels, kernel_size: int, stride: int = 1, groups: int = 1) -> nn.Sequential:
    return nn.Sequential(
        MutableConv2d(in_channels, out_channels, kernel_size, stride=stride, padding=kernel_size // 2,
                      groups=groups, bias=False),
        MutableBatchNorm2d(out_channels), nn.ReLU())


class Residual(nn.Module):
    """``x + f(x)`` with a 3x3 conv-BN-ReLU ``f``, at a fixed width."""

    def __init__(self, channels: int) -> None:
        super().__init__()
        self.body = nn.Sequential(nn.Conv2d(channels, channels, 3, padding=1, bias=False),
                                  nn.BatchNorm2d(channels), nn.ReLU())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.body(x)


class OwnSpace(ModelSpace):
    """Two stages of (width choice, block choice, repeated residual blocks)."""

    input_shape = (1, 8, 8)
    num_classes = 10
    dataset = "digits"
    reference: ClassVar[dict] = {"width1": 64, "op1": "conv5x5", "depth1": 3, "width2": 96, "op2": "conv5x5",
                                 "depth2": 3}

    def __init__(self) -> None:
        super().__init__()
        layers: list[nn.Module] = [conv_bn(1, 16, 3)]
        in_channels = 16
        for stage, (widths, stride, fixed) in enumerate((([32, 48, 64], 1, 48), ([48, 72, 96], 2, 96)), start=1):
            width = nni.choice(f"width{stage}", widths)
            layers.append(conv_bn(in_channels, width, 1, stride=stride))
            layers.append(LayerChoice({
                "conv3x3": conv_bn(width, width, 3),
                "conv5x5": conv_bn(width, width, 5),
                "dwconv3x3": conv_bn(width, width, 3, groups=width),
                "skip": nn.Identity(),
            }, label=f"op{stage}"))
            layers.append(conv_bn(width, fixed, 1))
            layers.append(Repeat(lambda index, c=fixed: Residual(c), nni.choice(f"depth{stage}", [1, 2, 3]),
                                 label=f"repeat{stage}"))
            in_channels = fixed
        self.features = nn.Sequential(*layers)
        self.head = nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(in_channels, 10))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.features(x))
