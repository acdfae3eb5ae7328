"""How a candidate network is trained: a documented dataclass, validated at construction.

Kept free of torch: NNI's dispatcher builds the tuner, which validates these
options, within 10 seconds (see :mod:`nni_hwaware.nni_fixes`).
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

from nni_hwaware.checked_options import from_mapping
from nni_hwaware.errors import HwAwareError

__all__ = ["TrainConfig"]


@dataclass(frozen=True)
class TrainConfig:
    """How a candidate is trained; the defaults train a digits network in seconds on a CPU."""

    epochs: int = 15
    batch_size: int = 64
    lr: float = 0.05
    momentum: float = 0.9
    weight_decay: float = 5e-4
    seed: int = 0
    device: str = "cpu"
    #: Intra-op threads while training (None: torch's current).
    threads: int | None = None
    #: Directory of CIFAR-10 (torchvision's layout), for spaces whose data set is cifar10.
    data_dir: str | None = None
    #: DataLoader worker processes (0 loads in the training process).
    workers: int = 0

    def __post_init__(self) -> None:
        for name in ("epochs", "batch_size"):
            if getattr(self, name) < 1:
                raise HwAwareError(f"training option {name} must be >= 1, got {getattr(self, name)}")
        if not (self.lr > 0 and math.isfinite(self.lr)):
            raise HwAwareError(f"training option lr must be a positive number, got {self.lr}")

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> TrainConfig:
        return from_mapping(cls, data, "training options")

    @classmethod
    def from_json(cls, text: str, **overrides: Any) -> TrainConfig:
        """Options given on a command line as JSON (``--train``), then ``overrides`` that are not None."""
        try:
            options = json.loads(text)
        except json.JSONDecodeError as err:
            raise HwAwareError(f"--train is not valid JSON: {err}") from None
        if not isinstance(options, dict):
            raise HwAwareError("--train must be a JSON object of training options")
        options.update({k: v for k, v in overrides.items() if v is not None})
        return cls.from_dict(options)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)
