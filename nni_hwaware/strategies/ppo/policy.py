"""The policy of the PPO search: the actor-critic, and the masked episodes it plays.

One architecture is one episode of ``L`` decisions, label by label. The state after ``t`` decisions is
``[one-hot of choices so far | one-hot of the position | share of each budget still free | for each
value of the next label, the least share of each budget a completion through it needs]``; the actor
gives the probabilities of the next label's values (those that leave no way to finish under the
budget masked out, :class:`~nni_hwaware.strategies.budget.BudgetMask`), the critic the state's value.
:class:`Episodes` encodes the states, draws masked episodes and replays given architectures; the
update is :class:`~nni_hwaware.strategies.ppo.learner.PPOLearner`'s.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from nni_hwaware.strategies.feasibility import Feasibility

__all__ = ["ActorCritic", "Episode", "Episodes"]

#: Share of a budget a value's feature is capped at (infeasible values read as this).
FEATURE_CAP = 2.0


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

    @classmethod
    def seeded(cls, state_dim: int, n_actions: int, hidden: int, seed: int) -> ActorCritic:
        """Initial weights from ``seed`` (torch's global random state untouched)."""
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            return cls(state_dim, n_actions, hidden)


@dataclass
class Episode:
    """One architecture's decisions: its actions (L), states (L, D), masks (L, A), the policy's
    log-probabilities when it was drawn (L), and its reward once known."""

    actions: list[int]
    states: np.ndarray
    masks: np.ndarray
    logps: np.ndarray
    reward: float | None = None


@dataclass
class Draws:
    """``B`` masked draws: actions (B, L), states (B, L, D), masks (B, L, A), the policy's log-probabilities
    (B, L) and which draws are complete (a lower bound can leave a prefix without a value)."""

    actions: np.ndarray
    states: np.ndarray
    masks: np.ndarray
    logps: np.ndarray
    alive: np.ndarray

    def episode(self, row: int) -> Episode:
        """The episode of draw ``row``."""
        return Episode([int(j) for j in self.actions[row]], self.states[row], self.masks[row], self.logps[row])


class Episodes:
    """The episodes of ``policy`` over ``candidates`` (the values of each label) under the budget mask of
    ``feasibility`` (read at every draw: the mask moves as measurements correct the table)."""

    def __init__(self, candidates: list[list[str]], feasibility: Feasibility, *, cost_features: bool) -> None:
        self.feasibility, self.cost_features = feasibility, cost_features
        self.n_layers = len(candidates)
        self.n_actions = max(map(len, candidates))
        self.valid = np.zeros((self.n_layers, self.n_actions), dtype=bool)
        for i, values in enumerate(candidates):
            self.valid[i, : len(values)] = True
        limits = len(feasibility.limits)
        self.state_dim = self.n_layers * (self.n_actions + 1) + limits + (self.n_actions * limits if cost_features else 0)

    def states(self, prefixes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """States and masks of ``B`` prefixes of one length ``i < L`` (module docstring)."""
        batch, i = prefixes.shape
        n, a = self.n_layers, self.n_actions
        states = np.zeros((batch, self.state_dim), dtype=np.float32)
        if i:
            states[np.arange(batch)[:, None], np.arange(i) * a + prefixes] = 1.0
        states[:, n * a + i] = 1.0
        masks = np.broadcast_to(self.valid[i], (batch, a)).copy()
        limits, mask = self.feasibility.limits, self.feasibility.draw_mask
        if limits:
            needs = mask.needs_batch(prefixes)
            masks &= mask.allowed_batch(needs)
            base = n * (a + 1)
            for k, (metric, limit) in enumerate(limits.items()):
                share = needs[metric] / limit
                states[:, base + k] = 1.0 - np.min(share, axis=1)  # budget left after the cheapest completion
                if self.cost_features:
                    start = base + len(limits) + k * a
                    states[:, start:start + a] = np.minimum(share, FEATURE_CAP)
        return states, masks

    @torch.no_grad()
    def sample(self, policy: ActorCritic, size: int, uniform: int, generator: torch.Generator) -> Draws:
        """``size`` masked draws, the last ``uniform`` of them uniform over the feasible values."""
        prefixes = np.zeros((size, 0), dtype=int)
        states, masks, logps = [], [], []
        alive = np.ones(size, dtype=bool)
        uniform_rows = torch.arange(size) >= size - uniform
        for _ in range(self.n_layers):
            state, mask = self.states(prefixes)
            dead = ~mask.any(axis=1)
            alive &= ~dead
            mask[dead, 0] = True  # keeps the row drawable; the draw is dropped
            dist, _ = policy(torch.from_numpy(state), torch.from_numpy(mask))
            weights = torch.where(uniform_rows[:, None], torch.from_numpy(mask).float(), dist.probs)
            action = torch.multinomial(weights, 1, generator=generator)[:, 0]
            states.append(state)
            masks.append(mask)
            logps.append(dist.log_prob(action).numpy())
            prefixes = np.concatenate([prefixes, action.numpy()[:, None]], axis=1)
        return Draws(prefixes, np.stack(states, 1), np.stack(masks, 1), np.stack(logps, 1).astype(np.float32), alive)

    @torch.no_grad()
    def replay(self, policy: ActorCritic, keys: list[tuple[int, ...]]) -> list[Episode]:
        """Episodes of given architectures under ``policy`` (its log-probabilities as the old ones)."""
        actions = np.asarray(keys, dtype=int).reshape(len(keys), self.n_layers)
        states, masks, logps = [], [], []
        for i in range(self.n_layers):
            state, mask = self.states(actions[:, :i])
            mask[np.arange(len(keys)), actions[:, i]] = True
            dist, _ = policy(torch.from_numpy(state), torch.from_numpy(mask))
            states.append(state)
            masks.append(mask)
            logps.append(dist.log_prob(torch.from_numpy(actions[:, i])).numpy())
        states_, masks_, logps_ = np.stack(states, 1), np.stack(masks, 1), np.stack(logps, 1).astype(np.float32)
        return [Episode(list(k), states_[b], masks_[b], logps_[b]) for b, k in enumerate(keys)]
