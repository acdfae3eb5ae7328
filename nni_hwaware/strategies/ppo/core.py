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
budget is spent from an allowance of ``risk`` of the proposals so far (:meth:`PPOSearch.risk_allowance`).
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
from nni_hwaware.measured import measured_costs
from nni_hwaware.profiling.chips import fixed_threads
from nni_hwaware.strategies.budget import Budget, BudgetMask
from nni_hwaware.strategies.correction import CORRECTED, CostCorrection
from nni_hwaware.strategies.ppo.config import REWARDS, PPOConfig
from nni_hwaware.strategies.ppo.policy import ActorCritic, Surrogate, normalise

__all__ = ["REWARDS", "PPOConfig", "PPOSearch", "reward_of"]

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
    rewards: dict[tuple[int, ...], float] = field(default_factory=dict)
    order: list[tuple[int, ...]] = field(default_factory=list)
    #: What the results measured on the chip (``latency_ms`` / ``memory_mb``), where they did.
    measured: dict[tuple[int, ...], dict[str, float]] = field(default_factory=dict)


class PPOSearch:
    """Asynchronous PPO over layer-by-layer decisions, screened by a surrogate; see the module docstring."""

    def __init__(self, model: SpaceCostModel, budget: Budget | None = None,
                 config: PPOConfig | None = None,
                 proxy: Callable[[list[dict[str, str]]], np.ndarray] | None = None) -> None:
        # One class from here on: a model read from a block table of an earlier version is converted.
        self.model, self.budget = as_space_model(model)[0], budget or Budget()
        self.config = config or PPOConfig()
        self.mask = BudgetMask(model, self.budget)
        self.limits = self.budget.limits()
        self.labels = list(self.mask.model.labels)
        self.candidates = [list(c) for c in self.mask.model.candidates]
        c = self.config
        #: The table's predictions corrected by what the chip measured (None: the table is trusted).
        self.correction = CostCorrection([len(v) for v in self.candidates], delta=c.delta, shrinkage=c.shrinkage,
                                         prior_margin=c.prior_margin, use_margin=c.margin,
                                         local=c.margin_model == "gp", risk_floor=c.risk_floor) if c.correct else None
        self._predicted: dict[tuple[int, ...], dict[str, float]] = {}
        #: Each proposal's probability of measuring over the budget when it was proposed (the risk spent).
        self.risk: dict[tuple[int, ...], float] = {}
        #: Why no network can fit the budget as measured (None while some can): the search then stops.
        self.unreachable: str | None = None
        self._remask()
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
        self.history = _History()
        self.updates = 0
        self.decision_seconds = 0.0
        self.decisions = 0
        self.last_stats: dict[str, float] = {}

    # -- the budget as measured --------------------------------------------------
    def _corrected_limits(self) -> list[str]:
        return [m for m in CORRECTED if m in self.budget.limits()] if self.correction is not None else []

    def _remask(self) -> None:
        """The mask's budget: each corrected metric's limit as measured (:meth:`CostCorrection.limit_as_measured`)
        over the margin and the lowest correction.

        No architecture whose corrected prediction times the margin fits is masked; a finished
        draw is then checked exactly (:meth:`_fits`).
        """
        limits = self.budget.limits()
        cheapest = self.mask.cheapest_costs()
        lines = []
        for metric in self._corrected_limits():
            # a chip that reports whole milliseconds reports 18.4 as 18: the limit as measured
            measured_limit, factor = (self.correction.limit_as_measured(metric, limits[metric]),
                                      self.correction.mask_factor(metric))
            limits[metric] = measured_limit / factor
            if cheapest[metric] * factor > measured_limit * (1 + 1e-9):
                lines.append(f"no network fits the {metric} budget {self.budget.limits()[metric]:.4g} as measured: "
                             f"the cheapest is {cheapest[metric] * factor:.4g} with the correction from "
                             f"{self.correction.count(metric)} measured results and the margin")
        self.unreachable = "; ".join(lines) + "; raise the budget" if lines else None
        if self.unreachable:
            return  # the search stops (see _propose); the mask stays as it was
        budget = Budget(**limits)
        if budget != self.mask.budget:
            self.mask = BudgetMask(self.model, budget)
            self.limits = budget.limits()
            self.__dict__.pop("_feasible", None)

    def predicted(self, key: tuple[int, ...]) -> dict[str, float]:
        """The table's prediction of an architecture (its indices), cached."""
        if key not in self._predicted:
            self._predicted[key] = self.model.predict_indices(list(key)).metrics()
        return self._predicted[key]

    def corrected(self, arch: Mapping[str, str]) -> dict[str, float]:
        """The table's prediction of ``arch`` corrected by the measurements so far, and each corrected
        metric's bound (the corrected value times the margin) as ``<metric>_bound``."""
        key = self.actions_of(arch)
        out = dict(self.predicted(key))
        if self.correction is not None:
            for metric in CORRECTED:
                if self.correction.count(metric):
                    out[f"{metric}_bound"] = self.correction.bound(metric, key, out[metric])
                    out[metric] *= self.correction.factor(metric, key)
        return out

    def _fits(self, key: tuple[int, ...]) -> bool:
        """Within every bound by the table, and within each corrected metric's limit as measured with the margin."""
        return bool(self._fits_all([key])[0])

    def _fits_all(self, keys: list[tuple[int, ...]]) -> np.ndarray:
        """:meth:`_fits` of many architectures at once (one Gaussian-process call per metric)."""
        ok = np.asarray([self.mask.within(k) for k in keys], dtype=bool)
        for metric in self._corrected_limits():
            if not ok.any():
                break
            if not self.correction.count(metric) and self.correction.margin(metric) == 1.0:
                continue
            at = np.flatnonzero(ok)
            predicted = np.asarray([self.predicted(keys[i])[metric] for i in at])
            bounds = self.correction.bounds(metric, np.asarray([keys[i] for i in at], dtype=np.int64), predicted)
            limit = self.correction.limit_as_measured(metric, self.budget.limits()[metric])
            ok[at[bounds > limit * (1 + 1e-9)]] = False
        return ok

    def over_probability(self, keys: list[tuple[int, ...]]) -> np.ndarray:
        """Each architecture's probability of measuring over some corrected limit (0 without a correction)."""
        fits = np.ones(len(keys))
        for metric in self._corrected_limits():
            predicted = np.asarray([self.predicted(k)[metric] for k in keys])
            fits *= 1.0 - self.correction.over_probability(metric, np.asarray(keys, dtype=np.int64), predicted,
                                                           self.budget.limits()[metric])
        return 1.0 - fits

    def risk_allowance(self) -> float:
        """What the next proposal may risk: the allowed share of the proposals so far and this one, less
        the risk spent (the larger of the finished ones' expected risk and how many measured over) and
        the risk of those in flight."""
        if not self._corrected_limits():
            return math.inf
        share = self.config.risk
        finished = sum(p for k, p in self.risk.items() if k not in self.pending)
        spent = max(finished, float(self.measured_over_budget()))
        return share * (len(self.risk) + 1) - spent - sum(self.risk.get(k, 0.0) for k in self.pending)

    def _exact_check(self) -> bool:
        """Whether a finished draw must be checked (the mask alone is exact for one table-only bound)."""
        return len(self.limits) > 1 or not self.mask.separable or bool(self._corrected_limits())

    def measured_within(self, key: tuple[int, ...]) -> bool:
        """Whether what was measured of ``key`` (if anything) fits the budget."""
        limits = self.budget.limits()
        return all(value <= limits[m] for m, value in self.history.measured.get(key, {}).items() if m in limits)

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
        """The next architecture to train, or None when every feasible one is known or in flight."""
        # The policy is tiny: on a busy machine, torch's thread pool makes it ~100x slower.
        with fixed_threads(1):
            return self._ask()

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
                if key in fresh or key in self.history.rewards or key in self.pending:
                    continue
                fresh[key] = int(row)
            if fresh and self._exact_check():
                # lower bounds, several bounds or a correction: the look-ahead let an overrun through
                fits = self._fits_all(list(fresh))
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
                allowed = self._allowed(risk)
                if scores is not None:
                    value = scores * (1.0 - risk if self.config.weigh_feasibility else 1.0)
                    best = int(np.argmax(np.where(allowed, value, -np.inf)))
                else:  # the policy's first fresh draw (a uniform one if the policy drew none) within the allowance
                    best = int(np.argmax(allowed))
                key = keys[best]
                self.risk[key] = float(risk[best])
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
                self.risk[key] = float(self.over_probability([key])[0])
                self.pending[key] = self._replay(key)
                return key
        return None

    def _allowed(self, risk: np.ndarray) -> np.ndarray:
        """Which candidates fit the risk allowance (the least risky ones when none does)."""
        allowed = risk <= self.risk_allowance() + 1e-12
        return allowed if allowed.any() else risk <= float(risk.min()) + 1e-12

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
                    if (other in found or other in exclude or other in self.history.rewards
                            or other in self.pending):
                        continue
                    found[other] = None
        keys = list(found)
        if self.limits and keys:
            keys = [k for k, ok in zip(keys, self._fits_all(keys), strict=True) if ok]
        return keys

    def _feasible_left(self) -> list[tuple[int, ...]] | None:
        """Feasible architectures neither tried nor in flight (None: too many to list)."""
        if not hasattr(self, "_feasible"):
            feasible = self.mask.enumerate(_ENUMERATE_LIMIT)
            self._feasible = None if feasible is None else [
                k for k, ok in zip(feasible, self._fits_all(list(feasible)) if feasible else [], strict=True) if ok]
        if self._feasible is None:
            return None
        return [k for k in self._feasible if k not in self.history.rewards and k not in self.pending]

    # -- results -----------------------------------------------------------------
    def tell(self, arch: Mapping[str, str], metrics: Mapping[str, float] | None) -> float:
        """Record the result of ``arch`` (``None`` or a NaN value: failed; measured over the budget: failed
        too, whatever it reported); returns its reward."""
        with fixed_threads(1):
            return self._tell(arch, metrics)

    def _tell(self, arch: Mapping[str, str], metrics: Mapping[str, float] | None) -> float:
        key = self.actions_of(arch)
        reward = self.config.failure_reward
        if metrics is not None:
            value = reward_of(metrics, self.config, self.budget)
            if math.isfinite(value):
                reward = value
            self._learn_costs(key, metrics)
            if not self.measured_within(key):
                # Over the budget as measured: a failure, whatever accuracy it reported (else the policy
                # and the surrogate learn to chase networks that do not fit the chip).
                reward = self.config.failure_reward
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

    def _learn_costs(self, key: tuple[int, ...], metrics: Mapping[str, Any]) -> None:
        """Keep what the result measured; fit the correction to it and move the mask's budget."""
        measured = measured_costs(metrics)
        if not measured:
            return
        self.history.measured[key] = measured
        if self.correction is not None and self.correction.add(key, self.predicted(key), measured):
            self._remask()

    def _scores(self) -> dict[tuple[int, ...], float]:
        """What each result teaches (``reward_norm``): normal scores of ranks, z-scores or rewards."""
        keys = self.history.order
        scores = normalise(np.asarray([self.history.rewards[k] for k in keys], dtype=float), self.config.reward_norm)
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
        """The best architecture so far whose measured costs (where measured) fit the budget, and its reward.

        None when nothing has finished, or when every result was measured over budget.
        """
        keys = [k for k in self.history.order if self.measured_within(k)]
        if not keys:
            return None
        key = max(keys, key=lambda k: self.history.rewards[k])
        return self.arch_of(key), self.history.rewards[key]

    def measured_over_budget(self) -> int:
        """Results measured over the budget."""
        return sum(not self.measured_within(k) for k in self.history.order)

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
            "measured": [[list(k), v] for k, v in self.history.measured.items()],
            "correction": self.correction.state_dict() if self.correction is not None else None,
            "pending": [list(k) for k in self.pending],
            "risk": [[list(k), p] for k, p in self.risk.items()],
            "finished": [[e.actions, e.reward] for e in self.finished],
            "updates": self.updates,
            "decisions": self.decisions,
            "decision_seconds": self.decision_seconds,
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore :meth:`state_dict`; architectures that were in flight stay pending (not proposed again)."""
        defaults = asdict(PPOConfig())  # a state saved before an option existed: it had the option's default
        saved = {**{k: v for k, v in defaults.items() if k not in state["config"]}, **state["config"]}
        if differ := sorted(k for k, v in asdict(self.config).items() if saved[k] != v):
            said = ", ".join(f"{k}: {saved[k]!r} saved, {getattr(self.config, k)!r} now" for k in differ)
            raise HwAwareError(f"the saved PPO state was made with other options ({said}); "
                               "resume with the same config (a default that changed since: set the saved value)")
        self.policy.load_state_dict(state["policy"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.generator.set_state(state["generator"])
        self.history = _History()
        for key, reward in state["history"]:
            self.history.order.append(tuple(key))
            self.history.rewards[tuple(key)] = float(reward)
        self.history.measured = {tuple(k): {m: float(v) for m, v in values.items()}
                                 for k, values in state.get("measured", [])}
        if self.correction is not None:
            self.correction.load_state_dict(state.get("correction") or {})
            self._remask()
        self.risk = {tuple(k): float(p) for k, p in state.get("risk", [])}
        pending = [tuple(k) for k in state.get("pending", []) if tuple(k) not in self.history.rewards]
        self.pending = dict(zip(pending, self._replays(pending), strict=True)) if pending else {}
        finished = [tuple(actions) for actions, _ in state["finished"]]
        self.finished = self._replays(finished) if finished else []
        for episode, (_, reward) in zip(self.finished, state["finished"], strict=True):
            episode.reward = reward
        self.updates = int(state["updates"])
        self.decisions = int(state.get("decisions", 0))
        self.decision_seconds = float(state.get("decision_seconds", 0.0))
        self._fit_surrogate()  # the proxy's scores of the results, where not read back, count as decision time
