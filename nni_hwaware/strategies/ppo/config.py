"""Options of the PPO search: a documented dataclass, validated at construction.

Kept free of torch so that NNI's dispatcher can build the tuner quickly (see
:mod:`nni_hwaware.nni_fixes`, the tuner must connect within 10 seconds).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from nni_hwaware.errors import HwAwareError
from nni_hwaware.options import from_mapping

__all__ = ["REWARDS", "PPOConfig"]

REWARDS = ("accuracy", "neg_flops", "mnas")


@dataclass(frozen=True)
class PPOConfig:
    """Options of the PPO search (CleanRL-style: one documented field each)."""

    seed: int = 0
    """Seeds the policy's initial weights and every sampled decision."""
    update_every: int = 4
    """Results (finished trials or reused duplicates) per policy update."""
    epochs: int = 16
    """Passes over each batch of episodes per update."""
    lr: float = 0.03
    """Adam learning rate."""
    optimizer: str = "adam"
    """'adam' or 'sgd' (seed 000 step 5: stochastic gradient descent)."""
    clip: float = 0.2
    """PPO's clipping range of the probability ratio."""
    value_coef: float = 0.5
    """c in L = L_actor + c * L_critic - beta * entropy."""
    entropy_coef: float = 0.02
    """beta at the start (seed 000 step 7: entropy keeps the search exploring)."""
    entropy_coef_final: float = 0.002
    """beta after ``entropy_decay_updates`` updates (linear annealing)."""
    entropy_decay_updates: int = 20
    hidden: int = 64
    """Width of the actor-critic MLP."""
    reward: str = "accuracy"
    """'accuracy' (validation accuracy), 'neg_flops' (seed 000 step 6) or 'mnas' (ACC * (LAT/T)^w)."""
    mnas_target_ms: float | None = None
    """T of the MnasNet reward (default: the latency budget)."""
    mnas_w: float = -0.07
    failure_reward: float = 0.0
    """Reward of a trial that failed or reported NaN."""
    max_resample: int = 1000
    """Draws per proposal before giving up when every draw is a known architecture."""

    def __post_init__(self) -> None:
        if self.reward not in REWARDS:
            raise HwAwareError(f"unknown reward {self.reward!r}; use one of {', '.join(REWARDS)}")
        if self.optimizer not in ("adam", "sgd"):
            raise HwAwareError(f"optimizer must be 'adam' or 'sgd', got {self.optimizer!r}")
        for name in ("update_every", "epochs", "hidden", "max_resample"):
            if getattr(self, name) < 1:
                raise HwAwareError(f"PPO option {name} must be >= 1, got {getattr(self, name)}")
        for name in ("lr", "clip"):
            if not getattr(self, name) > 0:
                raise HwAwareError(f"PPO option {name} must be > 0, got {getattr(self, name)}")

    @classmethod
    def from_dict(cls, data: Mapping[str, Any] | None) -> PPOConfig:
        return from_mapping(cls, data, "PPO options")
