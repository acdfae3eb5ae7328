"""The actor-critic network of the PPO strategy (seed 000 steps 3-4).

The state after ``t`` decisions is ``[one-hot of choices so far | one-hot of the
position | share of each budget still free]``; the actor gives the probabilities
of the next layer's candidates (infeasible ones masked out), the critic the
state's value.
"""

from __future__ import annotations

import torch
from torch import nn

__all__ = ["ActorCritic"]


class ActorCritic(nn.Module):
    """A shared MLP trunk with an actor head (logits) and a critic head (value)."""

    def __init__(self, state_dim: int, n_actions: int, hidden: int = 64) -> None:
        super().__init__()
        self.trunk = nn.Sequential(nn.Linear(state_dim, hidden), nn.Tanh(), nn.Linear(hidden, hidden), nn.Tanh())
        self.actor = nn.Linear(hidden, n_actions)
        self.critic = nn.Linear(hidden, 1)
        # Small actor weights: the first policy is close to uniform over feasible choices.
        nn.init.orthogonal_(self.actor.weight, gain=0.01)
        nn.init.zeros_(self.actor.bias)

    def forward(self, state: torch.Tensor, mask: torch.Tensor) -> tuple[torch.distributions.Categorical, torch.Tensor]:
        """The masked action distribution and the value of ``state`` (batched)."""
        h = self.trunk(state)
        logits = self.actor(h).masked_fill(~mask, float("-inf"))
        return torch.distributions.Categorical(logits=logits), self.critic(h).squeeze(-1)
