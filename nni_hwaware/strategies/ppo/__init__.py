"""PPO-style actor-critic search under a hardware budget: the search, NNI Tuner, NNI Strategy.

``PPOSearch`` loads torch on first access, so that importing the tuner stays fast (NNI gives its
dispatcher 10 seconds to connect).
"""

from __future__ import annotations

from typing import Any

from nni_hwaware.strategies.ppo.config import REWARDS, PPOConfig
from nni_hwaware.strategies.ppo.rewards import reward_of

__all__ = ["REWARDS", "PPOConfig", "PPOSearch", "reward_of"]


def __getattr__(name: str) -> Any:
    if name == "PPOSearch":
        from nni_hwaware.strategies.ppo.search import PPOSearch

        return PPOSearch
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
