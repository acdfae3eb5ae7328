"""PPO-style actor-critic architecture search under a hardware budget (seed 000).

The core knows nothing of NNI: :meth:`PPOSearch.ask` proposes an architecture,
:meth:`PPOSearch.tell` takes its result, in any order and with any number of
architectures in flight. One architecture is one episode of ``L`` decisions
(layer by layer); its reward arrives at the end, so every step's Monte Carlo
return is that reward. Every ``update_every`` results the policy is updated
by :meth:`PPOSearch.update` (PPO's clipped objective, several epochs).

Choices that would make every completion exceed the budget are masked
(:class:`~nni_hwaware.strategies.budget.BudgetMask`), so no proposal is over
budget. An architecture already evaluated is never proposed again: its known
reward is reused as a free episode. A failed trial gets ``failure_reward``.
"""

from __future__ import annotations

import copy
import math
import time
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np
import torch

from nni_hwaware.cost_model import SpaceCostModel
from nni_hwaware.cost_table.predict import CostModel
from nni_hwaware.errors import HwAwareError
from nni_hwaware.profiling.chips import fixed_threads
from nni_hwaware.strategies.budget import Budget, BudgetMask
from nni_hwaware.strategies.ppo.config import REWARDS, PPOConfig
from nni_hwaware.strategies.ppo.policy import ActorCritic

__all__ = ["REWARDS", "PPOConfig", "PPOSearch", "reward_of"]

#: Known architectures drawn in a row before a proposal explores uniformly.
_UNIFORM_AFTER = 4
#: Feasible sets up to this size are listed when the policy keeps repeating itself.
_ENUMERATE_LIMIT = 20_000


def reward_of(metrics: Mapping[str, float], config: PPOConfig, budget: Budget) -> float:
    """The reward of a finished architecture (seed 000 step 6)."""
    if config.reward == "neg_flops":
        return -float(metrics["flops"]) / 1e6
    accuracy = float(metrics["default"])
    if config.reward == "mnas":
        target = config.mnas_target_ms or budget.latency_ms
        if target is None:
            raise HwAwareError("the 'mnas' reward needs mnas_target_ms or a latency budget")
        return accuracy * (float(metrics["latency_ms"]) / target) ** config.mnas_w
    return accuracy


@dataclass
class _Episode:
    actions: list[int]
    states: np.ndarray
    masks: np.ndarray
    logps: np.ndarray
    reward: float | None = None


@dataclass
class _History:
    rewards: dict[tuple[int, ...], float] = field(default_factory=dict)
    order: list[tuple[int, ...]] = field(default_factory=list)


class PPOSearch:
    """Asynchronous PPO over layer-by-layer decisions; see the module docstring."""

    def __init__(self, model: SpaceCostModel | CostModel, budget: Budget | None = None,
                 config: PPOConfig | None = None) -> None:
        self.model, self.budget = model, budget or Budget()
        self.config = config or PPOConfig()
        self.mask = BudgetMask(model, self.budget)
        self.labels = list(model.labels)
        self.candidates = [list(c) for c in model.candidates]
        self.n_layers = len(self.labels)
        self.n_actions = max(map(len, self.candidates))
        self.state_dim = self.n_layers * self.n_actions + self.n_layers + len(self.budget.limits())
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(self.config.seed)
            self.policy = ActorCritic(self.state_dim, self.n_actions, self.config.hidden)
        self.optimizer = (torch.optim.Adam if self.config.optimizer == "adam" else torch.optim.SGD)(
            self.policy.parameters(), lr=self.config.lr)
        self.generator = torch.Generator().manual_seed(self.config.seed)
        self.pending: dict[tuple[int, ...], _Episode] = {}
        self.finished: list[_Episode] = []
        self.history = _History()
        self.updates = 0
        self.decision_seconds = 0.0
        self.decisions = 0
        self.last_stats: dict[str, float] = {}

    # -- encoding -----------------------------------------------------------------
    def _state(self, prefix: list[int]) -> np.ndarray:
        state = np.zeros(self.state_dim, dtype=np.float32)
        for i, j in enumerate(prefix):
            state[i * self.n_actions + j] = 1.0
        if len(prefix) < self.n_layers:
            state[self.n_layers * self.n_actions + len(prefix)] = 1.0
            if self.budget.limits():
                state[self.n_layers * (self.n_actions + 1):] = self.mask.budget_left(prefix)
        return state

    def _mask(self, prefix: list[int]) -> np.ndarray:
        mask = np.zeros(self.n_actions, dtype=bool)
        mask[: len(self.candidates[len(prefix)])] = self.mask.allowed(prefix)
        return mask

    def arch_of(self, actions: tuple[int, ...] | list[int]) -> dict[str, str]:
        return {label: names[j] for label, names, j in zip(self.labels, self.candidates, actions, strict=True)}

    def actions_of(self, arch: Mapping[str, str]) -> tuple[int, ...]:
        arch = self.mask.model.check_architecture(arch)
        return tuple(names.index(arch[label]) for label, names in zip(self.labels, self.candidates, strict=True))

    # -- proposing ----------------------------------------------------------------
    @torch.no_grad()
    def _sample(self, uniform: bool = False) -> _Episode:
        """Draw one architecture from the policy (or uniformly over feasible choices)."""
        prefix: list[int] = []
        states, masks, logps = [], [], []
        for _ in range(self.n_layers):
            state, mask = self._state(prefix), self._mask(prefix)
            dist, _ = self.policy(torch.from_numpy(state)[None], torch.from_numpy(mask)[None])
            weights = torch.from_numpy(mask.astype(np.float32)) if uniform else dist.probs[0]
            action = int(torch.multinomial(weights, 1, generator=self.generator))
            states.append(state)
            masks.append(mask)
            logps.append(float(dist.log_prob(torch.tensor([action]))[0]))
            prefix.append(action)
        return _Episode(prefix, np.stack(states), np.stack(masks), np.array(logps, dtype=np.float32))

    def ask(self) -> dict[str, str] | None:
        """The next architecture to train, or None when every feasible one is known or in flight."""
        # The policy is tiny: on a busy machine, torch's thread pool makes it ~100x slower.
        with fixed_threads(1):
            return self._ask()

    def _ask(self) -> dict[str, str] | None:
        start = time.perf_counter()
        known = 0
        try:
            for _ in range(self.config.max_resample):
                if known >= _UNIFORM_AFTER and self._feasible_left() is not None:
                    # The policy keeps drawing known architectures and the feasible set is
                    # small enough to list: propose an untried one uniformly, or stop.
                    left = self._feasible_left()
                    if not left:
                        return None
                    key = left[int(torch.randint(len(left), (1,), generator=self.generator))]
                    self.pending[key] = self._replay(key)
                    return self.arch_of(key)
                # A policy that keeps drawing known architectures has converged on them:
                # explore uniformly over the feasible choices instead.
                episode = self._sample(uniform=known >= _UNIFORM_AFTER)
                key = tuple(episode.actions)
                if not self.mask.within(key):
                    continue  # several bounds: the per-metric lookahead let an overrun through
                if key in self.history.rewards:
                    known += 1
                    if known <= _UNIFORM_AFTER and all(e.actions != episode.actions for e in self.finished):
                        episode.reward = self.history.rewards[key]  # known: a free episode
                        self._finish(episode)
                    continue
                if key in self.pending:
                    continue
                self.pending[key] = episode
                return self.arch_of(key)
            return None
        finally:
            self.decision_seconds += time.perf_counter() - start
            self.decisions += 1

    def _feasible_left(self) -> list[tuple[int, ...]] | None:
        """Feasible architectures neither tried nor in flight (None: too many to list)."""
        if not hasattr(self, "_feasible"):
            self._feasible = self.mask.enumerate(_ENUMERATE_LIMIT)
        if self._feasible is None:
            return None
        return [k for k in self._feasible if k not in self.history.rewards and k not in self.pending]

    # -- results -----------------------------------------------------------------
    def tell(self, arch: Mapping[str, str], metrics: Mapping[str, float] | None) -> float:
        """Record the result of ``arch`` (``None`` or a NaN value: failed); returns its reward."""
        with fixed_threads(1):
            return self._tell(arch, metrics)

    def _tell(self, arch: Mapping[str, str], metrics: Mapping[str, float] | None) -> float:
        key = self.actions_of(arch)
        reward = self.config.failure_reward
        if metrics is not None:
            value = reward_of(metrics, self.config, self.budget)
            if math.isfinite(value):
                reward = value
        episode = self.pending.pop(key, None)
        if episode is None:  # a result we did not propose (resume, warm start): replay it
            episode = self._replay(key)
        episode.reward = reward
        if key not in self.history.rewards:
            self.history.order.append(key)
        self.history.rewards[key] = reward
        self._finish(episode)
        return reward

    @torch.no_grad()
    def _replay(self, key: tuple[int, ...]) -> _Episode:
        states, masks, logps, prefix = [], [], [], []
        for action in key:
            state, mask = self._state(prefix), self._mask(prefix)
            mask[action] = True
            dist, _ = self.policy(torch.from_numpy(state)[None], torch.from_numpy(mask)[None])
            states.append(state)
            masks.append(mask)
            logps.append(float(dist.log_prob(torch.tensor([action]))[0]))
            prefix.append(action)
        return _Episode(list(key), np.stack(states), np.stack(masks), np.array(logps, dtype=np.float32))

    def _finish(self, episode: _Episode) -> None:
        self.finished.append(episode)
        if len(self.finished) >= self.config.update_every:
            self.update(self.finished)
            self.finished = []

    # -- learning -----------------------------------------------------------------
    def entropy_coef(self) -> float:
        c = self.config
        share = min(1.0, self.updates / max(1, c.entropy_decay_updates))
        return c.entropy_coef + share * (c.entropy_coef_final - c.entropy_coef)

    def update(self, episodes: list[_Episode]) -> dict[str, float]:
        r"""One PPO update on finished episodes (seed 000 step 5, Schulman et al. 2017).

        .. math::

            L = -\mathbb{E}\big[\min(\rho_t A_t, \mathrm{clip}(\rho_t, 1-\epsilon, 1+\epsilon) A_t)\big]
                + c\,\mathbb{E}\big[(V(s_t) - R_t)^2\big] - \beta\,\mathbb{E}[H(\pi(\cdot|s_t))]

        with :math:`\rho_t = \pi_\theta(a_t|s_t) / \pi_{old}(a_t|s_t)`, the Monte Carlo
        return :math:`R_t` = the episode's reward (it arrives at the end, undiscounted),
        and the advantage :math:`A_t = R_t - V(s_t)` (the critic as baseline, values
        taken before the update), normalised over the batch.
        """
        states = torch.from_numpy(np.concatenate([e.states for e in episodes]))
        masks = torch.from_numpy(np.concatenate([e.masks for e in episodes]))
        actions = torch.tensor([a for e in episodes for a in e.actions])
        old_logp = torch.from_numpy(np.concatenate([e.logps for e in episodes]))
        returns = torch.tensor([e.reward for e in episodes for _ in e.actions], dtype=torch.float32)
        with torch.no_grad():
            _, values = self.policy(states, masks)
        advantages = returns - values
        if len(advantages) > 1 and advantages.std() > 1e-8:
            advantages = (advantages - advantages.mean()) / (advantages.std() + 1e-8)
        beta = self.entropy_coef()
        for _ in range(self.config.epochs):
            dist, value = self.policy(states, masks)
            logp = dist.log_prob(actions)
            # Episodes drawn off-policy (uniform exploration) can have a tiny old probability:
            # bound the log-ratio so exp() cannot overflow to inf (the clip does the rest).
            ratio = torch.exp(torch.clamp(logp - old_logp, -20.0, 20.0))
            clipped = torch.clamp(ratio, 1 - self.config.clip, 1 + self.config.clip)
            actor_loss = -torch.min(ratio * advantages, clipped * advantages).mean()
            critic_loss = ((value - returns) ** 2).mean()
            entropy = dist.entropy().mean()
            loss = actor_loss + self.config.value_coef * critic_loss - beta * entropy
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

    # -- results and state ---------------------------------------------------------
    def best(self) -> tuple[dict[str, str], float] | None:
        """The best architecture so far and its reward."""
        if not self.history.rewards:
            return None
        key = max(self.history.order, key=lambda k: self.history.rewards[k])
        return self.arch_of(key), self.history.rewards[key]

    def mean_decision_ms(self) -> float:
        return 1000 * self.decision_seconds / max(1, self.decisions)

    def state_dict(self) -> dict[str, Any]:
        """Everything to continue the search later: policy, optimiser, history, random state."""
        return {
            "config": asdict(self.config),
            "policy": copy.deepcopy(self.policy.state_dict()),
            "optimizer": copy.deepcopy(self.optimizer.state_dict()),
            "generator": self.generator.get_state(),
            "history": [[list(k), self.history.rewards[k]] for k in self.history.order],
            "pending": [list(k) for k in self.pending],
            "finished": [[e.actions, e.reward] for e in self.finished],
            "updates": self.updates,
            "decisions": self.decisions,
            "decision_seconds": self.decision_seconds,
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore :meth:`state_dict`; architectures that were in flight stay pending (not proposed again)."""
        if state["config"] != asdict(self.config):
            raise HwAwareError("the saved PPO state was made with other options; resume with the same config")
        self.policy.load_state_dict(state["policy"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.generator.set_state(state["generator"])
        self.history = _History()
        for key, reward in state["history"]:
            self.history.order.append(tuple(key))
            self.history.rewards[tuple(key)] = float(reward)
        self.pending = {tuple(k): self._replay(tuple(k)) for k in state.get("pending", [])
                        if tuple(k) not in self.history.rewards}
        self.finished = []
        for actions, reward in state["finished"]:
            episode = self._replay(tuple(actions))
            episode.reward = reward
            self.finished.append(episode)
        self.updates = int(state["updates"])
        self.decisions = int(state.get("decisions", 0))
        self.decision_seconds = float(state.get("decision_seconds", 0.0))
