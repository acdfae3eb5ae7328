"""PPO-style actor-critic architecture search under a hardware budget: the ask/tell core.

The core knows nothing of NNI: :meth:`PPOSearch.ask` proposes an architecture, :meth:`PPOSearch.tell` takes
its result, in any order and with any number of architectures in flight. It composes

* the policy (:mod:`~nni_hwaware.strategies.ppo.policy`): one architecture is one episode of ``L`` masked
  decisions, label by label, its reward (:mod:`~nni_hwaware.strategies.ppo.rewards`) at the end;
* the learner (:class:`~nni_hwaware.strategies.ppo.learner.PPOLearner`): after every ``update_every``
  results, PPO's clipped objective on the new episodes and replays of the best architectures so far;
* the proposals (:class:`~nni_hwaware.strategies.ppo.proposals.Proposer`): masked draws screened by a
  surrogate whose trend is the table's predictions and, given a ``proxy``, a zero-cost proxy of accuracy
  (:mod:`nni_hwaware.zero_cost`, asked once per architecture, its cost counted in the decision time);
* the feasibility (:class:`~nni_hwaware.strategies.feasibility.Feasibility`): the budget, its mask, the
  table's correction by what the chip measured (``correct``) and the risk allowance each proposal's
  probability of measuring over is spent from (:meth:`PPOSearch.risk_allowance`).

A failed trial gets ``failure_reward``, as does one whose measured costs are over the budget (the network
does not fit the chip). Two resources: measurements and trainings. Measured first (``measure_first``, the
default), a result that only measured its network (``not_trained``, or no ``default``) costs a measurement:
measured over the budget, the network is a failure to the policy and never proposed again; measured to
fit, it waits for its training (:attr:`PPOSearch.cleared`). :attr:`PPOSearch.trainings` and
:attr:`PPOSearch.measurements` count the two. With a ``measure`` callback, :meth:`PPOSearch.ask` measures
its proposals itself and returns only networks measured to fit.
"""

from __future__ import annotations

import copy
import math
import time
from collections.abc import Callable, Mapping
from dataclasses import asdict
from typing import Any

import numpy as np
import torch

from nni_hwaware.cost_model import SpaceCostModel, as_space_model
from nni_hwaware.errors import HwAwareError
from nni_hwaware.measurement import Measurement
from nni_hwaware.profiling.chips import fixed_threads
from nni_hwaware.strategies.budget import Budget, BudgetMask
from nni_hwaware.strategies.correction import CostCorrection
from nni_hwaware.strategies.feasibility import Feasibility
from nni_hwaware.strategies.gaussian_process import Surrogate
from nni_hwaware.strategies.ppo.config import REWARDS, PPOConfig
from nni_hwaware.strategies.ppo.learner import PPOLearner
from nni_hwaware.strategies.ppo.policy import ActorCritic, Episode, Episodes
from nni_hwaware.strategies.ppo.proposals import History, Proposer, Screening
from nni_hwaware.strategies.ppo.rewards import reward_of

__all__ = ["MAX_SCREENED_PER_ASK", "REWARDS", "PPOConfig", "PPOSearch", "reward_of"]

#: Proposals a call of :meth:`PPOSearch.ask` measures (with a ``measure`` callback) before it gives up.
MAX_SCREENED_PER_ASK = 100

Key = tuple[int, ...]


class PPOSearch:
    """Asynchronous PPO over layer-by-layer decisions, screened by a surrogate; see the module docstring."""

    def __init__(self, model: SpaceCostModel, budget: Budget | None = None,
                 config: PPOConfig | None = None,
                 proxy: Callable[[list[dict[str, str]]], np.ndarray] | None = None,
                 measure: Callable[[list[dict[str, str]]], list[Mapping[str, Any]]] | None = None) -> None:
        # One class from here on: a model read from a block table of an earlier version is converted.
        self.model, self.budget = as_space_model(model)[0], budget or Budget()
        self.config = c = config or PPOConfig()
        self.labels = list(self.model.labels)
        self.candidates = [list(v) for v in self.model.candidates]
        #: The budget, its mask, the table's correction and the chance constraint (one owner).
        self.feasibility = Feasibility(self.model, self.budget, c.feasibility_options)
        #: Measures architectures on the chip (a list in, a result dict each out): :meth:`ask` then
        #: proposes only networks measured to fit (see :meth:`ask`).
        self.measure = measure
        #: Proposals in flight measured to fit the budget: the next trainings.
        self.cleared: dict[Key, None] = {}
        #: Results that measured a network (each a measurement) and results of a training.
        self.measurements = 0
        self.trainings = 0
        self.episodes = Episodes(self.candidates, self.feasibility, cost_features=c.cost_features)
        self.n_layers, self.n_actions = self.episodes.n_layers, self.episodes.n_actions
        self.state_dim = self.episodes.state_dim
        self.policy = ActorCritic.seeded(self.state_dim, self.n_actions, c.hidden, c.seed)
        self.learner = PPOLearner(self.policy, c.policy_options)
        self.generator = torch.Generator().manual_seed(c.seed)
        self._asking = False
        self.screening = Screening(c, self.n_layers, self.predicted, self.arch_of, proxy, self._charge)
        self.proposer = Proposer(c, self.candidates, self.episodes, self.policy, self.generator, self.feasibility,
                                 self.screening)
        self.pending: dict[Key, Episode] = {}
        self.finished: list[Episode] = []
        self.history = History(measured=self.feasibility.measured)
        self.decision_seconds, self.decisions = 0.0, 0
        #: Seconds spent in :meth:`tell` (a decision is an ask and a tell).
        self.tell_seconds = 0.0

    # -- the parts' state, as attributes of the search ------------------------------------
    @property
    def proxy(self) -> Callable[[list[dict[str, str]]], np.ndarray] | None:
        """The zero-cost proxy (``config.proxy``): architectures in, scores out (e.g. :class:`ProxyScores`)."""
        return self.screening.proxy

    @property
    def surrogate(self) -> Surrogate:
        return self.screening.surrogate

    @property
    def _proxy_scores(self) -> dict[Key, float | tuple[float, ...]]:
        return self.screening.scores

    @property
    def optimizer(self) -> torch.optim.Optimizer:
        return self.learner.optimizer

    @property
    def updates(self) -> int:
        return self.learner.updates

    @property
    def last_stats(self) -> dict[str, float]:
        return self.learner.last_stats

    def _charge(self, seconds: float) -> None:
        """A proxy's scoring for a result (warm-up, resume) counts as decision time too (an ask's is in it)."""
        if not self._asking:
            self.decision_seconds += seconds

    # -- the budget as measured (owned by self.feasibility) ------------------------------
    @property
    def mask(self) -> BudgetMask:
        return self.feasibility.mask

    @property
    def correction(self) -> CostCorrection | None:
        """The table's predictions corrected by what the chip measured (None: the table is trusted)."""
        return self.feasibility.correction

    @property
    def limits(self) -> dict[str, float]:
        return self.feasibility.limits

    @property
    def unreachable(self) -> str | None:
        """Why no network can fit the budget as measured (None while some can): the search then stops."""
        return self.feasibility.unreachable

    @property
    def risk(self) -> dict[Key, float]:
        """Each proposal's probability of measuring over the budget when it was proposed (the risk spent)."""
        return self.feasibility.risk

    def predicted(self, key: Key) -> dict[str, float]:
        """The table's prediction of an architecture (its indices), cached."""
        return self.feasibility.predicted(key)

    def corrected(self, arch: Mapping[str, str]) -> dict[str, float]:
        """The table's prediction of ``arch`` corrected by the measurements so far, and each corrected
        metric's bound (the corrected value times the margin) as ``<metric>_bound``."""
        return self.feasibility.corrected(self.actions_of(arch))

    def over_probability(self, keys: list[Key]) -> np.ndarray:
        """Each architecture's probability of measuring over some corrected limit (0 without a correction)."""
        return self.feasibility.over_probability(keys)

    def unresolved(self) -> list[Key]:
        """Proposals in flight whose measurement has not come back."""
        return [k for k in self.pending if k not in self.cleared]

    def risk_allowance(self) -> float:
        """What the next proposal may risk (:meth:`Feasibility.allowance`)."""
        return self.feasibility.allowance(self.unresolved())

    def measured_within(self, key: Key) -> bool:
        """Whether what was measured of ``key`` (if anything) fits the budget."""
        return self.feasibility.measured_within(key)

    # -- encoding (the episodes') ---------------------------------------------------------
    def _state(self, prefix: list[int]) -> np.ndarray:
        return self.episodes.states(np.asarray([prefix], dtype=int).reshape(1, -1))[0][0]

    def _sample(self, size: int, uniform: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """``size`` masked draws, the last ``uniform`` uniform: actions, states, masks, log-probabilities, alive."""
        draws = self.episodes.sample(self.policy, size, uniform, self.generator)
        return draws.actions, draws.states, draws.masks, draws.logps, draws.alive

    def _replays(self, keys: list[Key]) -> list[Episode]:
        """Episodes of given architectures under the current policy (its log-probabilities as the old ones)."""
        return self.episodes.replay(self.policy, keys)

    def arch_of(self, actions: Key | list[int]) -> dict[str, str]:
        return {label: names[j] for label, names, j in zip(self.labels, self.candidates, actions, strict=True)}

    def actions_of(self, arch: Mapping[str, str]) -> Key:
        arch = self.mask.model.check_architecture(arch)
        return tuple(names.index(arch[label]) for label, names in zip(self.labels, self.candidates, strict=True))

    # -- proposing ----------------------------------------------------------------
    def ask(self) -> dict[str, str] | None:
        """The next architecture to measure and train, or None when every feasible one is known or in flight.

        With a ``measure`` callback the search measures its proposals itself: it returns only a network
        measured to fit the budget (its training is next); one measured over is told as a measurement and
        the next proposal is measured, at most :data:`MAX_SCREENED_PER_ASK` a call. Without one, the caller
        measures (a screening trial, or a trial that measures before it trains) and tells the result.
        """
        for _ in range(MAX_SCREENED_PER_ASK if self.measure is not None else 1):
            # The policy is tiny: on a busy machine, torch's thread pool makes it ~100x slower.
            with fixed_threads(1):
                arch = self._ask()
            if arch is None or self.measure is None:
                return arch
            (result,) = self.measure([arch])  # on the measurement's own threads
            self.tell(arch, {k: v for k, v in dict(result).items() if k != "default"})
            if self.actions_of(arch) in self.cleared:
                return arch
        return None

    def _ask(self) -> dict[str, str] | None:
        start = time.perf_counter()
        self._asking = True
        try:
            proposal = self.proposer.propose(self.history, self.pending, self.unresolved())
            if proposal is None:
                return None
            key, episode = proposal
            self.pending[key] = episode
            return self.arch_of(key)
        finally:
            self._asking = False
            self.decision_seconds += time.perf_counter() - start
            self.decisions += 1

    # -- results -----------------------------------------------------------------
    def tell(self, arch: Mapping[str, str], metrics: Mapping[str, Any] | None) -> float | None:
        """Record the result of ``arch`` and return its reward.

        * A training's result (``default``: its accuracy) costs a training; ``None`` or a NaN value is a
          failed one, and one measured over the budget is a failure too, whatever it reported.
        * A measurement alone (no ``default``, or ``not_trained``: a screening measurement, or a trial
          that measured its network over the budget and did not train it) costs a measurement. Measured
          over the budget, the network is a failure to the policy (returns ``failure_reward``) and is
          never proposed again; measured to fit, it waits for its training (:attr:`cleared`; returns None).
        """
        with fixed_threads(1):
            return self._tell(arch, metrics)

    def _tell(self, arch: Mapping[str, str], metrics: Mapping[str, Any] | None) -> float | None:
        start = time.perf_counter()
        try:
            key = self.actions_of(arch)
            measurement = Measurement.of(metrics) if metrics is not None else None
            if measurement is not None and not measurement.trained:
                return self._tell_measurement(key, measurement)
            return self._tell_training(key, metrics, measurement)
        finally:
            self.tell_seconds += time.perf_counter() - start

    def _tell_measurement(self, key: Key, measurement: Measurement) -> float | None:
        self.measurements += measurement.measured
        if key not in self.feasibility.measured:
            self.feasibility.learn(key, measurement)
        if self.measured_within(key):
            if key not in self.pending:  # measured without our proposal (a resume): it waits for its training
                self.pending[key] = self._replays([key])[0]
            self.cleared[key] = None
            return None
        # Over the budget as measured: never trained, never proposed again. The policy learns it as a
        # failure; the accuracy surrogate does not see it (it knows nothing of its accuracy).
        episode = self.pending.pop(key, None) or self._replays([key])[0]
        self.cleared.pop(key, None)
        episode.reward = self.config.failure_reward
        self.history.screened[key] = episode.reward
        self._finish(episode)
        return episode.reward

    def _tell_training(self, key: Key, metrics: Mapping[str, Any] | None, measurement: Measurement | None) -> float:
        reward = self.config.failure_reward
        self.trainings += 1
        measured_before = key in self.feasibility.measured
        if measurement is not None and measurement.measured and key not in self.cleared:
            self.measurements += 1  # its trial measured it before training it
        if metrics is not None:
            value = reward_of(metrics, self.config, self.budget)
            if math.isfinite(value):
                reward = value
            if measurement is not None and not measured_before:
                self.feasibility.learn(key, measurement)
            if not self.measured_within(key):
                # Over the budget as measured: a failure, whatever accuracy it reported (else the policy
                # and the surrogate learn to chase networks that do not fit the chip).
                reward = self.config.failure_reward
        self.cleared.pop(key, None)
        episode = self.pending.pop(key, None)
        if episode is None:  # a result we did not propose (resume, warm start): replay it
            episode = self._replays([key])[0]
        episode.reward = reward
        if key not in self.history.rewards:
            self.history.order.append(key)
        self.history.rewards[key] = reward
        self.screening.fit(self.history)
        self._finish(episode)
        return reward

    def _trend_features(self, keys: np.ndarray) -> np.ndarray:
        """The surrogate's trend features of ``keys`` (:meth:`Screening.trend_features`)."""
        return self.screening.trend_features(keys)

    def proxy_scores(self, keys: list[Key]) -> np.ndarray:
        """The zero-cost proxy's score of each architecture, asked once each (:meth:`Screening.proxy_scores`)."""
        return self.screening.proxy_scores(keys)

    def _finish(self, episode: Episode) -> None:
        self.finished.append(episode)
        if len(self.finished) >= self.config.update_every:
            self.update(self.finished)
            self.finished = []

    # -- learning -----------------------------------------------------------------
    def entropy_coef(self) -> float:
        """The entropy bonus of the next update (:meth:`PPOLearner.entropy_coef`)."""
        return self.learner.entropy_coef()

    def update(self, episodes: list[Episode]) -> dict[str, float]:
        """One PPO update (:meth:`PPOLearner.train`) on finished episodes and replays of the ``replay_best``
        best architectures so far; networks measured over the budget count as failures."""
        batch = list(episodes)
        if self.config.replay_best:
            inside = {tuple(e.actions) for e in batch}
            replays = [k for k in self.history.ranked() if k not in inside][: self.config.replay_best]
            batch.extend(self._replays(replays) if replays else [])
        return self.learner.train(batch, {**self.history.screened, **self.history.rewards})

    # -- results and state ---------------------------------------------------------
    def best(self) -> tuple[dict[str, str], float] | None:
        """The best trained architecture so far whose measured costs (where measured) fit the budget, and its
        reward; None when nothing has finished, or when every result was measured over budget."""
        keys = [k for k in self.history.order if self.measured_within(k)]
        if not keys:
            return None
        key = max(keys, key=lambda k: self.history.rewards[k])
        return self.arch_of(key), self.history.rewards[key]

    def measured_over_budget(self) -> int:
        """Trained results measured over the budget (a network measured over it first is not trained)."""
        return self.feasibility.measured_over(self.history.order)

    def mean_decision_ms(self) -> float:
        """Milliseconds a decision: an :meth:`ask` and a :meth:`tell`."""
        return 1000 * (self.decision_seconds + self.tell_seconds) / max(1, self.decisions)

    def state_dict(self, *, copy_tensors: bool = True) -> dict[str, Any]:
        """Everything to continue the search later: policy, optimiser, history, random state.

        ``copy_tensors=False`` leaves the policy's and the optimiser's tensors shared with the search (for a
        state written out at once, as the tuner writes one after every event); by default they are copies.
        """
        keep = copy.deepcopy if copy_tensors else (lambda state: state)
        return {
            "config": asdict(self.config),
            "policy": keep(self.policy.state_dict()),
            "optimizer": keep(self.optimizer.state_dict()),
            "generator": self.generator.get_state(),
            "history": [[list(k), self.history.rewards[k]] for k in self.history.order],
            "screened": [[list(k), r] for k, r in self.history.screened.items()],
            **self.feasibility.state_dict(),
            "pending": [list(k) for k in self.pending], "cleared": [list(k) for k in self.cleared],
            "finished": [[e.actions, e.reward] for e in self.finished],
            "updates": self.updates, "decisions": self.decisions, "decision_seconds": self.decision_seconds,
            "tell_seconds": self.tell_seconds, "measurements": self.measurements, "trainings": self.trainings,
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore :meth:`state_dict`; architectures that were in flight stay pending (not proposed again),
        those measured to fit stay cleared for their training."""
        defaults = asdict(PPOConfig())  # a state saved before an option existed: it had the option's default
        saved = {**{k: v for k, v in defaults.items() if k not in state["config"]}, **state["config"]}
        if differ := sorted(k for k, v in asdict(self.config).items() if saved[k] != v):
            said = ", ".join(f"{k}: {saved[k]!r} saved, {getattr(self.config, k)!r} now" for k in differ)
            raise HwAwareError(f"the saved PPO state was made with other options ({said}); "
                               "resume with the same config (a default that changed since: set the saved value)")
        self.policy.load_state_dict(state["policy"])
        self.learner.load_state_dict(state)
        self.generator.set_state(state["generator"])
        self.history = History(measured=self.feasibility.measured)
        for key, reward in state["history"]:
            self.history.order.append(tuple(key))
            self.history.rewards[tuple(key)] = float(reward)
        self.history.screened = {tuple(k): float(r) for k, r in state.get("screened", [])}
        self.feasibility.load_state_dict(state)
        known = set(self.history.rewards) | set(self.history.screened)
        pending = [tuple(k) for k in state.get("pending", []) if tuple(k) not in known]
        self.pending = dict(zip(pending, self._replays(pending), strict=True)) if pending else {}
        self.cleared = {tuple(k): None for k in state.get("cleared", []) if tuple(k) in self.pending}
        finished = [tuple(actions) for actions, _ in state["finished"]]
        self.finished = self._replays(finished) if finished else []
        for episode, (_, reward) in zip(self.finished, state["finished"], strict=True):
            episode.reward = reward
        self.decisions = int(state.get("decisions", 0))
        self.decision_seconds = float(state.get("decision_seconds", 0.0))
        self.tell_seconds = float(state.get("tell_seconds", 0.0))
        self.measurements = int(state.get("measurements", 0))
        self.trainings = int(state.get("trainings", len(self.history.order)))
        self.screening.fit(self.history)  # the proxy's scores of the results, where not read back, count as decision time
