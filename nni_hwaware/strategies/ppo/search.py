"""PPO-style actor-critic architecture search under a hardware budget (seed 000).

The core knows nothing of NNI: :meth:`PPOSearch.ask` proposes an architecture,
:meth:`PPOSearch.tell` takes its result, in any order and with any number of
architectures in flight. One architecture is one episode of ``L`` decisions
(layer by layer); its reward arrives at the end, so every step's Monte Carlo
return is that reward. After every ``update_every`` results the policy is
updated by :meth:`PPOSearch.update` (PPO's clipped objective plus the critic's
squared error and an entropy bonus, several epochs), on the new episodes and
replays of the best architectures so far, with rank-normalised rewards.

Choices that would make every completion exceed the budget are masked
(:class:`~nni_hwaware.strategies.budget.BudgetMask`), so no proposal is over
budget. Each proposal draws ``screen`` masked samples at once (most from the
policy, a share uniformly over the feasible values) and a surrogate (a Gaussian
process over architectures, :class:`~nni_hwaware.strategies.ppo.policy.Surrogate`)
picks the one of highest expected improvement among those neither tried nor in
flight; in-flight architectures count as observed at their predicted value
(the "kriging believer"), so concurrent proposals spread out. When no draw
promises an improvement (expected improvement below ``local_ei``: the policy has
settled and the best may be one label away, where its draws rarely land), the
neighbours of the best architectures join the pool. When no fresh
sample turns up, the draws become uniform, and a feasible set small enough to
list is searched directly: a proposal is refused only when every feasible
architecture is tried or in flight. A failed trial gets ``failure_reward``, as does one whose
measured costs are over the budget (its accuracy is no reward: the network does not fit the chip).

The surrogate's trend is what the table predicts of each architecture (the logs of its latency,
FLOPs and parameters) and, where the search is given one (``proxy``), a zero-cost proxy of its
accuracy (:mod:`nni_hwaware.zero_cost`: each network scored at initialisation, asked once per
architecture, its cost counted in the decision time, also where a result or a resume asks it).

With ``correct`` (the default) the table is a prior: the costs each result measured fit a
correction (:mod:`~nni_hwaware.strategies.correction`), a draw must fit the budget by its
corrected prediction times a margin, and each proposal's probability of measuring over the
budget is spent from an allowance (:meth:`PPOSearch.risk_allowance`). All of it is one object's,
:class:`~nni_hwaware.strategies.feasibility.Feasibility`.

Two resources: measurements and trainings. Measured first (``measure_first``, the default), a
network is measured on the chip before it is trained, and a result that only measured its network
(``not_trained``, or no ``default``) costs a measurement: measured over the budget, the network is a
failure to the policy and never proposed again; measured to fit, it waits for its training
(:attr:`PPOSearch.cleared`). The allowance is then ``1 - 1 / measurements_per_training`` of the
proposals, so the search goes to the budget's edge; :attr:`PPOSearch.trainings` and
:attr:`PPOSearch.measurements` count the two. With a ``measure`` callback, :meth:`PPOSearch.ask`
measures its proposals itself and returns only networks measured to fit.
"""

from __future__ import annotations

import copy
import math
import time
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field
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
from nni_hwaware.strategies.ppo.config import REWARDS, PPOConfig
from nni_hwaware.strategies.ppo.policy import ActorCritic, Surrogate, normalise

__all__ = ["MAX_SCREENED_PER_ASK", "REWARDS", "PPOConfig", "PPOSearch", "reward_of"]

#: Proposals a call of :meth:`PPOSearch.ask` measures (with a ``measure`` callback) before it gives up.
MAX_SCREENED_PER_ASK = 100
#: Feasible sets up to this size are listed when the draws keep hitting known architectures.
_ENUMERATE_LIMIT = 20_000
#: Weight of the entropy floor's shortfall in the loss (large: a constraint more than a bonus).
_FLOOR_WEIGHT = 5.0
#: Share of a budget a value's feature is capped at (infeasible values read as this).
_FEATURE_CAP = 2.0


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
    #: Trained (or failed) architectures: their rewards, in the order they came.
    rewards: dict[tuple[int, ...], float] = field(default_factory=dict)
    order: list[tuple[int, ...]] = field(default_factory=list)
    #: Architectures measured over the budget and not trained: the reward the policy learns from.
    screened: dict[tuple[int, ...], float] = field(default_factory=dict)
    #: What the results measured on the chip (the feasibility's record, shared).
    measured: dict[tuple[int, ...], Measurement] = field(default_factory=dict)


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
        correction = CostCorrection([len(v) for v in self.candidates], delta=c.delta, shrinkage=c.shrinkage,
                                    prior_margin=c.prior_margin, use_margin=c.margin,
                                    local=c.margin_model == "gp", risk_floor=c.risk_floor) if c.correct else None
        #: The budget, its mask, the table's correction and the chance constraint (one owner).
        self.feasibility = Feasibility(self.model, self.budget, correction, risk=c.risk,
                                       measure_first=c.measure_first,
                                       measurements_per_training=c.measurements_per_training)
        #: Measures architectures on the chip (a list in, a result dict each out): :meth:`ask` then
        #: proposes only networks measured to fit (see :meth:`ask`).
        self.measure = measure
        #: Proposals in flight measured to fit the budget: the next trainings.
        self.cleared: dict[tuple[int, ...], None] = {}
        #: Results that measured a network (each a measurement) and results of a training.
        self.measurements = 0
        self.trainings = 0
        self.n_layers = len(self.labels)
        self.n_actions = max(map(len, self.candidates))
        self.valid = np.zeros((self.n_layers, self.n_actions), dtype=bool)
        for i, values in enumerate(self.candidates):
            self.valid[i, : len(values)] = True
        n_features = self.n_actions * len(self.limits) if self.config.cost_features else 0
        self.state_dim = self.n_layers * (self.n_actions + 1) + len(self.limits) + n_features
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(self.config.seed)
            self.policy = ActorCritic(self.state_dim, self.n_actions, self.config.hidden)
        self.optimizer = (torch.optim.Adam if self.config.optimizer == "adam" else torch.optim.SGD)(
            self.policy.parameters(), lr=self.config.lr)
        self.generator = torch.Generator().manual_seed(self.config.seed)
        #: The zero-cost proxy (``config.proxy``): architectures in, scores out (e.g. :class:`ProxyScores`).
        self.proxy = proxy if c.proxy != "none" else None
        self._proxy_scores: dict[tuple[int, ...], float | tuple[float, ...]] = {}
        self._asking = False
        self.surrogate = Surrogate(self.n_layers, self._trend_features if c.trend else None, ard=c.ard)
        self.pending: dict[tuple[int, ...], _Episode] = {}
        self.finished: list[_Episode] = []
        self.history = _History(measured=self.feasibility.measured)
        self.updates = 0
        self.decision_seconds = 0.0
        self.decisions = 0
        #: Seconds spent in :meth:`tell` (a decision is an ask and a tell).
        self.tell_seconds = 0.0
        self.last_stats: dict[str, float] = {}

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
    def risk(self) -> dict[tuple[int, ...], float]:
        """Each proposal's probability of measuring over the budget when it was proposed (the risk spent)."""
        return self.feasibility.risk

    def predicted(self, key: tuple[int, ...]) -> dict[str, float]:
        """The table's prediction of an architecture (its indices), cached."""
        return self.feasibility.predicted(key)

    def corrected(self, arch: Mapping[str, str]) -> dict[str, float]:
        """The table's prediction of ``arch`` corrected by the measurements so far, and each corrected
        metric's bound (the corrected value times the margin) as ``<metric>_bound``."""
        return self.feasibility.corrected(self.actions_of(arch))

    def over_probability(self, keys: list[tuple[int, ...]]) -> np.ndarray:
        """Each architecture's probability of measuring over some corrected limit (0 without a correction)."""
        return self.feasibility.over_probability(keys)

    def unresolved(self) -> list[tuple[int, ...]]:
        """Proposals in flight whose measurement has not come back."""
        return [k for k in self.pending if k not in self.cleared]

    def risk_allowance(self) -> float:
        """What the next proposal may risk (:meth:`Feasibility.allowance`)."""
        return self.feasibility.allowance(self.unresolved())

    def measured_within(self, key: tuple[int, ...]) -> bool:
        """Whether what was measured of ``key`` (if anything) fits the budget."""
        return self.feasibility.measured_within(key)

    def _known(self, key: tuple[int, ...]) -> bool:
        """Tried (trained, failed or measured over the budget) or in flight."""
        return key in self.history.rewards or key in self.history.screened or key in self.pending

    # -- encoding -----------------------------------------------------------------
    def _states(self, prefixes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """States and masks of ``B`` prefixes of one length ``i < L`` (see :mod:`.policy`)."""
        batch, i = prefixes.shape
        n, a = self.n_layers, self.n_actions
        states = np.zeros((batch, self.state_dim), dtype=np.float32)
        if i:
            states[np.arange(batch)[:, None], np.arange(i) * a + prefixes] = 1.0
        states[:, n * a + i] = 1.0
        masks = np.broadcast_to(self.valid[i], (batch, a)).copy()
        if self.limits:
            needs = self.mask.needs_batch(prefixes)
            masks &= self.mask.allowed_batch(needs)
            base = n * (a + 1)
            for k, (metric, limit) in enumerate(self.limits.items()):
                share = needs[metric] / limit
                states[:, base + k] = 1.0 - np.min(share, axis=1)  # budget left after the cheapest completion
                if self.config.cost_features:
                    start = base + len(self.limits) + k * a
                    states[:, start:start + a] = np.minimum(share, _FEATURE_CAP)
        return states, masks

    def _state(self, prefix: list[int]) -> np.ndarray:
        return self._states(np.asarray([prefix], dtype=int).reshape(1, -1))[0][0]

    def _mask(self, prefix: list[int]) -> np.ndarray:
        return self._states(np.asarray([prefix], dtype=int).reshape(1, -1))[1][0]

    def arch_of(self, actions: tuple[int, ...] | list[int]) -> dict[str, str]:
        return {label: names[j] for label, names, j in zip(self.labels, self.candidates, actions, strict=True)}

    def actions_of(self, arch: Mapping[str, str]) -> tuple[int, ...]:
        arch = self.mask.model.check_architecture(arch)
        return tuple(names.index(arch[label]) for label, names in zip(self.labels, self.candidates, strict=True))

    # -- proposing ----------------------------------------------------------------
    @torch.no_grad()
    def _sample(self, size: int, uniform: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """``size`` masked draws, the last ``uniform`` of them uniform over the feasible values.

        Returns actions (B, L), states (B, L, D), masks (B, L, A), the policy's log-probabilities
        (B, L) and which draws are complete (a lower bound can leave a prefix without a value).
        """
        prefixes = np.zeros((size, 0), dtype=int)
        states, masks, logps = [], [], []
        alive = np.ones(size, dtype=bool)
        uniform_rows = torch.arange(size) >= size - uniform
        for _ in range(self.n_layers):
            state, mask = self._states(prefixes)
            dead = ~mask.any(axis=1)
            alive &= ~dead
            mask[dead, 0] = True  # keeps the row drawable; the draw is dropped
            dist, _ = self.policy(torch.from_numpy(state), torch.from_numpy(mask))
            weights = torch.where(uniform_rows[:, None], torch.from_numpy(mask).float(), dist.probs)
            action = torch.multinomial(weights, 1, generator=self.generator)[:, 0]
            states.append(state)
            masks.append(mask)
            logps.append(dist.log_prob(action).numpy())
            prefixes = np.concatenate([prefixes, action.numpy()[:, None]], axis=1)
        return (prefixes, np.stack(states, 1), np.stack(masks, 1), np.stack(logps, 1).astype(np.float32), alive)

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
            key = self._propose()
            return None if key is None else self.arch_of(key)
        finally:
            self._asking = False
            self.decision_seconds += time.perf_counter() - start
            self.decisions += 1

    def _screening(self) -> bool:
        c = self.config
        return c.surrogate == "gp" and c.screen > 1 and self.surrogate.ready and len(self.history.order) >= c.warmup

    def _propose(self) -> tuple[int, ...] | None:
        c = self.config
        if self.unreachable:
            return None
        drawn, rounds = 0, 0
        while drawn < c.max_resample:
            uniform = round(c.screen * c.explore) if rounds == 0 else c.screen
            actions, states, masks, logps, alive = self._sample(c.screen, uniform)
            drawn += c.screen
            fresh: dict[tuple[int, ...], int] = {}
            for row in np.flatnonzero(alive):
                key = tuple(int(j) for j in actions[row])
                if key in fresh or self._known(key):
                    continue
                fresh[key] = int(row)
            if fresh and self.feasibility.exact_check():
                # lower bounds, several bounds or a correction: the look-ahead let an overrun through
                fits = self.feasibility.fits_all(list(fresh))
                fresh = {key: row for (key, row), ok in zip(fresh.items(), fits, strict=True) if ok}
            if fresh:
                keys = list(fresh)
                scores = None
                if self._screening():
                    scores = self.surrogate.acquisition(np.asarray(keys), list(self.pending))
                    if float(np.max(scores)) < c.local_ei and (local := self._neighbours(fresh)):
                        # No draw promises an improvement: try the incumbents' neighbourhoods too.
                        keys.extend(local)
                        scores = np.concatenate(
                            [scores, self.surrogate.acquisition(np.asarray(local), list(self.pending))])
                risk = self.over_probability(keys)
                allowed = self.feasibility.allowed(risk, self.unresolved())
                if scores is not None:
                    value = scores * (1.0 - risk if self.config.weigh_feasibility else 1.0)
                    best = int(np.argmax(np.where(allowed, value, -np.inf)))
                else:  # the policy's first fresh draw (a uniform one if the policy drew none) within the allowance
                    best = int(np.argmax(allowed))
                key = keys[best]
                self.feasibility.propose(key, float(risk[best]))
                if key in fresh:
                    row = fresh[key]
                    self.pending[key] = _Episode(list(key), states[row], masks[row], logps[row])
                else:  # a neighbour of one of the best: its episode as the policy would have drawn it
                    self.pending[key] = self._replay(key)
                return key
            rounds += 1
            if rounds >= 2 and (left := self._feasible_left()) is not None:
                # The feasible set is small enough to list: propose an untried one uniformly, or stop.
                if not left:
                    return None
                key = left[int(torch.randint(len(left), (1,), generator=self.generator))]
                self.feasibility.propose(key, float(self.over_probability([key])[0]))
                self.pending[key] = self._replay(key)
                return key
        return None

    def _neighbours(self, exclude: Mapping[tuple[int, ...], int]) -> list[tuple[int, ...]]:
        """Feasible, untried architectures one label away from the ``local_best`` best so far.

        The acquisition's local search (SMAC's, Hutter et al. 2011): the screened pool gets the
        incumbents' neighbourhoods, which random draws reach with a tiny probability once
        the policy has settled on a region; without them the search can stall one label away
        from the best.
        """
        c = self.config
        if not c.local_best:
            return []
        ranked = sorted(self.history.order, key=lambda k: -self.history.rewards[k])[: c.local_best]
        found: dict[tuple[int, ...], None] = {}
        for key in ranked:
            for i, values in enumerate(self.candidates):
                for j in range(len(values)):
                    if j == key[i]:
                        continue
                    other = (*key[:i], j, *key[i + 1:])
                    if other in found or other in exclude or self._known(other):
                        continue
                    found[other] = None
        keys = list(found)
        if self.limits and keys:
            keys = [k for k, ok in zip(keys, self.feasibility.fits_all(keys), strict=True) if ok]
        return keys

    def _feasible_left(self) -> list[tuple[int, ...]] | None:
        """Feasible architectures neither tried nor in flight (None: too many to list)."""
        feasible = self.feasibility.feasible_list(_ENUMERATE_LIMIT)
        if feasible is None:
            return None
        return [k for k in feasible if not self._known(k)]

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

    def _tell_measurement(self, key: tuple[int, ...], measurement: Measurement) -> float | None:
        self.measurements += measurement.measured
        if key not in self.feasibility.measured:
            self.feasibility.learn(key, measurement)
        if self.measured_within(key):
            if key not in self.pending:  # measured without our proposal (a resume): it waits for its training
                self.pending[key] = self._replay(key)
            self.cleared[key] = None
            return None
        # Over the budget as measured: never trained, never proposed again. The policy learns it as a
        # failure; the accuracy surrogate does not see it (it knows nothing of its accuracy).
        episode = self.pending.pop(key, None) or self._replay(key)
        self.cleared.pop(key, None)
        episode.reward = self.config.failure_reward
        self.history.screened[key] = episode.reward
        self._finish(episode)
        return episode.reward

    def _tell_training(self, key: tuple[int, ...], metrics: Mapping[str, Any] | None,
                       measurement: Measurement | None) -> float:
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
            episode = self._replay(key)
        episode.reward = reward
        if key not in self.history.rewards:
            self.history.order.append(key)
        self.history.rewards[key] = reward
        self._fit_surrogate()
        self._finish(episode)
        return reward

    def _scores(self) -> dict[tuple[int, ...], float]:
        """What each result teaches the policy (``reward_norm``): normal scores of ranks, z-scores or rewards;
        networks measured over the budget count as failures."""
        rewards = {**self.history.screened, **self.history.rewards}
        keys = list(rewards)
        scores = normalise(np.asarray([rewards[k] for k in keys], dtype=float), self.config.reward_norm)
        return dict(zip(keys, map(float, scores), strict=True))

    def _trend_features(self, keys: np.ndarray) -> np.ndarray:
        """What the table predicts of each architecture, as the accuracy surrogate's linear features:
        the logs of its latency, FLOPs and parameters, and its zero-cost proxy's score where there is one."""
        keys = [tuple(int(j) for j in k) for k in keys]
        rows = [self.predicted(k) for k in keys]
        features = np.log(np.asarray([[r["latency_ms"], r["flops"] + 1.0, r["params"] + 1.0] for r in rows],
                                     dtype=float).clip(min=1e-12))
        if self.proxy is None:
            return features
        return np.hstack([features, self.proxy_scores(keys).reshape(len(keys), -1)])

    def proxy_scores(self, keys: list[tuple[int, ...]]) -> np.ndarray:
        """The zero-cost proxy's score of each architecture (its indices), asked once per architecture: one
        row each, of one score or of several (``synflow+naswot``)."""
        missing = list(dict.fromkeys(k for k in keys if k not in self._proxy_scores))
        if missing:
            start = time.perf_counter()
            scores = np.asarray(self.proxy([self.arch_of(k) for k in missing]), dtype=float)
            if not self._asking:  # scored for a result (warm-up, resume): counted as decision time too
                self.decision_seconds += time.perf_counter() - start
            if scores.ndim not in (1, 2) or len(scores) != len(missing) or not np.isfinite(scores).all():
                raise HwAwareError(f"the zero-cost proxy must give one finite score per architecture (or a row of scores each); "
                                   f"it gave {len(scores) if scores.ndim else 0} for {len(missing)} "
                                   f"(non-finite: {int((~np.isfinite(scores)).sum())})")
            self._proxy_scores.update(zip(missing, (float(v) if scores.ndim == 1 else tuple(map(float, v))
                                                    for v in scores), strict=True))
        return np.asarray([self._proxy_scores[k] for k in keys], dtype=float)

    def _fit_surrogate(self) -> None:
        if self.config.surrogate == "gp":
            self.surrogate.update(self.history.order, self.history.rewards, rank=self.config.reward_norm == "rank")

    def _replay(self, key: tuple[int, ...]) -> _Episode:
        return self._replays([key])[0]

    @torch.no_grad()
    def _replays(self, keys: list[tuple[int, ...]]) -> list[_Episode]:
        """Episodes of given architectures under the current policy (its log-probabilities as the old ones)."""
        actions = np.asarray(keys, dtype=int).reshape(len(keys), self.n_layers)
        states, masks, logps = [], [], []
        for i in range(self.n_layers):
            state, mask = self._states(actions[:, :i])
            mask[np.arange(len(keys)), actions[:, i]] = True
            dist, _ = self.policy(torch.from_numpy(state), torch.from_numpy(mask))
            states.append(state)
            masks.append(mask)
            logps.append(dist.log_prob(torch.from_numpy(actions[:, i])).numpy())
        states_, masks_, logps_ = np.stack(states, 1), np.stack(masks, 1), np.stack(logps, 1).astype(np.float32)
        return [_Episode(list(k), states_[b], masks_[b], logps_[b]) for b, k in enumerate(keys)]

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
                + w\,\mathbb{E}\big[\max(0,\ f \log|\mathcal{A}(s_t)| - H(\pi(\cdot|s_t)))\big]

        with :math:`\rho_t = \pi_\theta(a_t|s_t) / \pi_{old}(a_t|s_t)`, the Monte Carlo
        return :math:`R_t` = the episode's reward (it arrives at the end, undiscounted)
        normalised over all results so far (``reward_norm``: the normal score
        :math:`\Phi^{-1}((\mathrm{rank}+1/2)/n)` by default), and the advantage
        :math:`A_t = R_t - V(s_t)` (the critic as baseline, values taken before the
        update; normalised over the batch only with raw rewards). The batch also
        replays the ``replay_best`` best architectures so far. The last term is an
        entropy floor: each state's policy keeps at least a share :math:`f` of the
        entropy its allowed values :math:`\mathcal{A}(s_t)` permit (``entropy_floor``), so the
        policy never collapses onto a few architectures (already tried or in flight).
        """
        scores = self._scores()
        batch = list(episodes)
        if self.config.replay_best:
            inside = {tuple(e.actions) for e in batch}
            ranked = sorted(self.history.order, key=lambda k: -self.history.rewards[k])
            replays = [k for k in ranked if k not in inside][: self.config.replay_best]
            batch.extend(self._replays(replays) if replays else [])
        states = torch.from_numpy(np.concatenate([e.states for e in batch]))
        masks = torch.from_numpy(np.concatenate([e.masks for e in batch]))
        actions = torch.tensor([a for e in batch for a in e.actions])
        old_logp = torch.from_numpy(np.concatenate([e.logps for e in batch]))
        returns = torch.tensor([scores.get(tuple(e.actions), e.reward or 0.0) for e in batch for _ in e.actions],
                               dtype=torch.float32)
        with torch.no_grad():
            _, values = self.policy(states, masks)
        advantages = returns - values
        if self.config.reward_norm == "raw" and len(advantages) > 1 and advantages.std() > 1e-8:
            advantages = (advantages - advantages.mean()) / (advantages.std() + 1e-8)
        beta = self.entropy_coef()
        # The entropy floor: a share of the most entropy each state allows (log of its allowed values).
        floor = self.config.entropy_floor * torch.log(masks.sum(dim=1).clamp(min=1).float())
        for _ in range(self.config.epochs):
            dist, value = self.policy(states, masks)
            logp = dist.log_prob(actions)
            # Episodes drawn off-policy (uniform exploration) can have a tiny old probability:
            # bound the log-ratio so exp() cannot overflow to inf (the clip does the rest).
            ratio = torch.exp(torch.clamp(logp - old_logp, -20.0, 20.0))
            clipped = torch.clamp(ratio, 1 - self.config.clip, 1 + self.config.clip)
            actor_loss = -torch.min(ratio * advantages, clipped * advantages).mean()
            critic_loss = ((value - returns) ** 2).mean()
            # H = -sum_a p log p over the allowed values (masked ones contribute 0, with a 0 gradient:
            # torch's entropy multiplies the float minimum by 0 there, which the floor's weight can turn into NaN)
            entropies = -(dist.probs * dist.logits.masked_fill(~masks, 0.0)).sum(dim=-1)
            entropy = entropies.mean()
            shortfall = torch.relu(floor - entropies).mean()
            loss = actor_loss + self.config.value_coef * critic_loss - beta * entropy + _FLOOR_WEIGHT * shortfall
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
        """The best trained architecture so far whose measured costs (where measured) fit the budget, and its
        reward.

        None when nothing has finished, or when every result was measured over budget.
        """
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

    def state_dict(self) -> dict[str, Any]:
        """Everything to continue the search later: policy, optimiser, history, random state."""
        return {
            "config": asdict(self.config),
            "policy": copy.deepcopy(self.policy.state_dict()),
            "optimizer": copy.deepcopy(self.optimizer.state_dict()),
            "generator": self.generator.get_state(),
            "history": [[list(k), self.history.rewards[k]] for k in self.history.order],
            "screened": [[list(k), r] for k, r in self.history.screened.items()],
            **self.feasibility.state_dict(),
            "pending": [list(k) for k in self.pending],
            "cleared": [list(k) for k in self.cleared],
            "finished": [[e.actions, e.reward] for e in self.finished],
            "updates": self.updates,
            "decisions": self.decisions,
            "decision_seconds": self.decision_seconds,
            "tell_seconds": self.tell_seconds,
            "measurements": self.measurements,
            "trainings": self.trainings,
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
        self.optimizer.load_state_dict(state["optimizer"])
        self.generator.set_state(state["generator"])
        self.history = _History(measured=self.feasibility.measured)
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
        self.updates = int(state["updates"])
        self.decisions = int(state.get("decisions", 0))
        self.decision_seconds = float(state.get("decision_seconds", 0.0))
        self.tell_seconds = float(state.get("tell_seconds", 0.0))
        self.measurements = int(state.get("measurements", 0))
        self.trainings = int(state.get("trainings", len(self.history.order)))
        self._fit_surrogate()  # the proxy's scores of the results, where not read back, count as decision time
