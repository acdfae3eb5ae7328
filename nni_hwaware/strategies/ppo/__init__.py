"""PPO-style actor-critic search under a hardware budget: core, NNI Tuner, NNI Strategy."""

from __future__ import annotations

from nni_hwaware.strategies.ppo.core import REWARDS, PPOConfig, PPOSearch, reward_of

__all__ = ["REWARDS", "PPOConfig", "PPOSearch", "reward_of"]
