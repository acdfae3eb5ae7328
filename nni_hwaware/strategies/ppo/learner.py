r"""The PPO update of the search's actor-critic (Schulman et al. 2017), read top to bottom in
:meth:`PPOLearner.train`: the batch of decisions, their returns and advantages, then ``epochs`` passes of

.. math::

    L = -\mathbb{E}\big[\min(\rho_t A_t, \mathrm{clip}(\rho_t, 1-\epsilon, 1+\epsilon) A_t)\big]
        + c\,\mathbb{E}\big[(V(s_t) - R_t)^2\big] - \beta\,\mathbb{E}[H(\pi(\cdot|s_t))]
        + w\,\mathbb{E}\big[\max(0,\ f \log|\mathcal{A}(s_t)| - H(\pi(\cdot|s_t)))\big]

with :math:`\rho_t = \pi_\theta(a_t|s_t) / \pi_{old}(a_t|s_t)`, the Monte Carlo return :math:`R_t` = the
episode's reward (it arrives at the end, undiscounted) normalised over all results so far
(``reward_norm``: the normal score :math:`\Phi^{-1}((\mathrm{rank}+1/2)/n)` by default), and the advantage
:math:`A_t = R_t - V(s_t)` (the critic as baseline, values taken before the update; normalised over the
batch only with raw rewards). The last term is an entropy floor: each state's policy keeps at least a
share :math:`f` of the entropy its allowed values :math:`\mathcal{A}(s_t)` permit (``entropy_floor``), so
the policy never collapses onto a few architectures (already tried or in flight). The entropy bonus
:math:`\beta` anneals linearly from ``entropy_coef`` to ``entropy_coef_final``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import torch

from nni_hwaware.strategies.gaussian_process import normalise
from nni_hwaware.strategies.ppo.config import PolicyOptions
from nni_hwaware.strategies.ppo.policy import ActorCritic, Episode

__all__ = ["PPOLearner"]

#: Weight of the entropy floor's shortfall in the loss (large: a constraint more than a bonus).
FLOOR_WEIGHT = 5.0


class PPOLearner:
    """Updates ``policy`` from finished episodes as ``options`` say (module docstring)."""

    def __init__(self, policy: ActorCritic, options: PolicyOptions) -> None:
        self.policy, self.options = policy, options
        optimizer = torch.optim.Adam if options.optimizer == "adam" else torch.optim.SGD
        self.optimizer = optimizer(policy.parameters(), lr=options.lr)
        #: Updates so far (the entropy bonus anneals over them).
        self.updates = 0
        #: What the last update measured: losses, entropy, the approximate KL divergence.
        self.last_stats: dict[str, float] = {}

    def entropy_coef(self) -> float:
        """The entropy bonus :math:`\\beta` of the next update."""
        o = self.options
        share = min(1.0, self.updates / max(1, o.entropy_decay_updates))
        return o.entropy_coef + share * (o.entropy_coef_final - o.entropy_coef)

    def returns_of(self, rewards: Mapping[tuple[int, ...], float]) -> dict[tuple[int, ...], float]:
        """What each result teaches the policy (``reward_norm``): normal scores of ranks, z-scores or rewards."""
        keys = list(rewards)
        scores = normalise(np.asarray([rewards[k] for k in keys], dtype=float), self.options.reward_norm)
        return dict(zip(keys, map(float, scores), strict=True))

    def train(self, episodes: list[Episode], rewards: Mapping[tuple[int, ...], float]) -> dict[str, float]:
        """One PPO update on ``episodes``, their returns normalised over ``rewards`` (every result so far)."""
        o = self.options
        # The rollout buffer: every decision of every episode, with the policy's probability when it was drawn.
        states = torch.from_numpy(np.concatenate([e.states for e in episodes]))
        masks = torch.from_numpy(np.concatenate([e.masks for e in episodes]))
        actions = torch.tensor([a for e in episodes for a in e.actions])
        old_logp = torch.from_numpy(np.concatenate([e.logps for e in episodes]))
        # Returns: each decision's is its episode's normalised reward (one reward, at the end).
        scores = self.returns_of(rewards)
        returns = torch.tensor([scores.get(tuple(e.actions), e.reward or 0.0) for e in episodes for _ in e.actions],
                               dtype=torch.float32)
        # Advantages: the return less the critic's value before the update.
        with torch.no_grad():
            _, values = self.policy(states, masks)
        advantages = returns - values
        if o.reward_norm == "raw" and len(advantages) > 1 and advantages.std() > 1e-8:
            advantages = (advantages - advantages.mean()) / (advantages.std() + 1e-8)
        beta = self.entropy_coef()
        # The entropy floor: a share of the most entropy each state allows (log of its allowed values).
        floor = o.entropy_floor * torch.log(masks.sum(dim=1).clamp(min=1).float())
        for _ in range(o.epochs):
            dist, value = self.policy(states, masks)
            logp = dist.log_prob(actions)
            # Episodes drawn off-policy (uniform exploration) can have a tiny old probability:
            # bound the log-ratio so exp() cannot overflow to inf (the clip does the rest).
            ratio = torch.exp(torch.clamp(logp - old_logp, -20.0, 20.0))
            clipped = torch.clamp(ratio, 1 - o.clip, 1 + o.clip)
            actor_loss = -torch.min(ratio * advantages, clipped * advantages).mean()
            critic_loss = ((value - returns) ** 2).mean()
            # H = -sum_a p log p over the allowed values (masked ones contribute 0, with a 0 gradient:
            # torch's entropy multiplies the float minimum by 0 there, which the floor's weight can turn into NaN)
            entropies = -(dist.probs * dist.logits.masked_fill(~masks, 0.0)).sum(dim=-1)
            entropy = entropies.mean()
            shortfall = torch.relu(floor - entropies).mean()
            loss = actor_loss + o.value_coef * critic_loss - beta * entropy + FLOOR_WEIGHT * shortfall
            if not torch.isfinite(loss):
                break  # never step on a non-finite loss: the policy stays usable
            self.optimizer.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(self.policy.parameters(), 1.0)
            self.optimizer.step()
        with torch.no_grad():
            approx_kl = float((old_logp - self.policy(states, masks)[0].log_prob(actions)).mean())
        self.updates += 1
        self.last_stats = {"train/actor_loss": actor_loss.item(), "train/critic_loss": critic_loss.item(),
                           "train/entropy": entropy.item(), "train/approx_kl": approx_kl,
                           "train/entropy_coef": beta, "train/updates": self.updates}
        return self.last_stats

    def state_dict(self) -> dict[str, Any]:
        return {"optimizer": self.optimizer.state_dict(), "updates": self.updates}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self.optimizer.load_state_dict(state["optimizer"])
        self.updates = int(state["updates"])
