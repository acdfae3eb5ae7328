"""What the PPO search proposes next: masked draws, screened by a surrogate, and the neighbours of the best.

Each proposal draws ``screen`` masked samples at once (most from the policy, a share ``explore``
uniformly over the feasible values); the surrogate (:class:`Screening`: a Gaussian process over
architectures whose trend is what the table predicts of each, and the zero-cost proxies' scores) picks
the one of highest expected improvement among those neither tried nor in flight, in-flight
architectures counted as observed at their predicted value (the "kriging believer"), so concurrent
proposals spread out. When no draw promises an improvement (expected improvement below ``local_ei``:
the policy has settled and the best may be one label away, where its draws rarely land), the
neighbours of the best architectures join the pool. Every candidate must fit the budget exactly
(:class:`~nni_hwaware.strategies.feasibility.Feasibility`) and stay within the risk allowance. When no
fresh sample turns up the draws become uniform, and a feasible set small enough to list is searched
directly: :meth:`Proposer.propose` gives up only when every feasible architecture is tried or in flight.
Where the exact check rejects a whole round (the measurements disagree, and each network's corrected
bound is tighter than the mask), the next rounds draw under a tighter mask
(:meth:`~nni_hwaware.strategies.feasibility.Feasibility.tighten`), for the rest of that proposal.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

import numpy as np
import torch

from nni_hwaware.errors import HwAwareError
from nni_hwaware.measurement import Measurement
from nni_hwaware.strategies.feasibility import Feasibility
from nni_hwaware.strategies.gaussian_process import Surrogate
from nni_hwaware.strategies.ppo.config import PPOConfig
from nni_hwaware.strategies.ppo.policy import ActorCritic, Episode, Episodes

__all__ = ["ENUMERATE_LIMIT", "History", "Proposer", "Screening"]

#: Feasible sets up to this size are listed when the draws keep hitting known architectures.
ENUMERATE_LIMIT = 20_000

Key = tuple[int, ...]


@dataclass
class History:
    """What the search learned, by architecture (its value indices)."""

    #: Trained (or failed) architectures: their rewards, in the order they came.
    rewards: dict[Key, float] = field(default_factory=dict)
    order: list[Key] = field(default_factory=list)
    #: Architectures measured over the budget and not trained: the reward the policy learns from.
    screened: dict[Key, float] = field(default_factory=dict)
    #: What the results measured on the chip (the feasibility's record, shared).
    measured: dict[Key, Measurement] = field(default_factory=dict)

    def tried(self, key: Key) -> bool:
        """Trained, failed or measured over the budget."""
        return key in self.rewards or key in self.screened

    def ranked(self) -> list[Key]:
        """The trained architectures, best first."""
        return sorted(self.order, key=lambda k: -self.rewards[k])


class Screening:
    """The surrogate that screens the draws, and its trend features: the logs of what the table predicts of
    each architecture (latency, FLOPs, parameters) and, with a ``proxy``, its zero-cost proxy's scores
    (asked once per architecture; ``charge`` is told the seconds each call took)."""

    def __init__(self, config: PPOConfig, n_labels: int, predicted: Callable[[Key], dict[str, float]],
                 arch_of: Callable[[Key], dict[str, str]],
                 proxy: Callable[[list[dict[str, str]]], np.ndarray] | None, charge: Callable[[float], None]) -> None:
        self.config, self.predicted, self.arch_of, self.charge = config, predicted, arch_of, charge
        #: The zero-cost proxy (``config.proxy``): architectures in, scores out (e.g. :class:`ProxyScores`).
        self.proxy = proxy if config.proxy != "none" else None
        self.scores: dict[Key, float | tuple[float, ...]] = {}
        self.surrogate = Surrogate(n_labels, self.trend_features if config.trend else None, ard=config.ard)

    def active(self, history: History) -> bool:
        """Whether the surrogate screens the next draws (else the policy's first fresh draw is proposed)."""
        c = self.config
        return c.surrogate == "gp" and c.screen > 1 and self.surrogate.ready and len(history.order) >= c.warmup

    def fit(self, history: History) -> None:
        if self.config.surrogate == "gp":
            self.surrogate.update(history.order, history.rewards, rank=self.config.reward_norm == "rank")

    def acquisition(self, keys: list[Key], pending: list[Key]) -> np.ndarray:
        """Expected improvement of each of ``keys``, those in flight (``pending``) believed."""
        return self.surrogate.acquisition(np.asarray(keys), pending)

    def trend_features(self, keys: np.ndarray) -> np.ndarray:
        """What the table predicts of each architecture, as the accuracy surrogate's linear features:
        the logs of its latency, FLOPs and parameters, and its zero-cost proxy's score where there is one."""
        keys = [tuple(int(j) for j in k) for k in keys]
        rows = [self.predicted(k) for k in keys]
        features = np.log(np.asarray([[r["latency_ms"], r["flops"] + 1.0, r["params"] + 1.0] for r in rows],
                                     dtype=float).clip(min=1e-12))
        if self.proxy is None:
            return features
        return np.hstack([features, self.proxy_scores(keys).reshape(len(keys), -1)])

    def proxy_scores(self, keys: list[Key]) -> np.ndarray:
        """The zero-cost proxy's score of each architecture (its indices), asked once per architecture: one
        row each, of one score or of several (``synflow+naswot``)."""
        missing = list(dict.fromkeys(k for k in keys if k not in self.scores))
        if missing:
            start = time.perf_counter()
            scores = np.asarray(self.proxy([self.arch_of(k) for k in missing]), dtype=float)
            self.charge(time.perf_counter() - start)
            if scores.ndim not in (1, 2) or len(scores) != len(missing) or not np.isfinite(scores).all():
                raise HwAwareError(f"the zero-cost proxy must give one finite score per architecture (or a row of scores each); "
                                   f"it gave {len(scores) if scores.ndim else 0} for {len(missing)} "
                                   f"(non-finite: {int((~np.isfinite(scores)).sum())})")
            self.scores.update(zip(missing, (float(v) if scores.ndim == 1 else tuple(map(float, v))
                                             for v in scores), strict=True))
        return np.asarray([self.scores[k] for k in keys], dtype=float)


class Proposer:
    """Picks the next architecture (module docstring) from the draws of ``policy`` over ``episodes``, with
    ``generator`` as every random choice's source."""

    def __init__(self, config: PPOConfig, candidates: list[list[str]], episodes: Episodes, policy: ActorCritic,
                 generator: torch.Generator, feasibility: Feasibility, screening: Screening) -> None:
        self.config, self.candidates, self.episodes, self.policy = config, candidates, episodes, policy
        self.generator, self.feasibility, self.screening = generator, feasibility, screening
        #: Why the last :meth:`propose` gave None (None while it proposes).
        self.gave_up: str | None = None

    def propose(self, history: History, pending: Mapping[Key, Episode],
                unresolved: list[Key]) -> tuple[Key, Episode] | None:
        """The next proposal and its episode (recorded with its risk by the feasibility), or None when there is
        none: the budget is out of reach, or every feasible architecture is tried or in flight (``pending``;
        ``unresolved``: those whose measurement has not come back)."""
        self.gave_up = None
        if self.feasibility.unreachable:
            self.gave_up = self.feasibility.unreachable
            return None
        try:
            return self._propose(history, pending, unresolved)
        finally:
            self.feasibility.untighten()  # the next proposal, and every other draw, starts at the mask

    def _propose(self, history: History, pending: Mapping[Key, Episode],
                 unresolved: list[Key]) -> tuple[Key, Episode] | None:
        c, feasibility = self.config, self.feasibility
        drawn, rounds = 0, 0
        while drawn < c.max_resample:
            uniform = round(c.screen * c.explore) if rounds == 0 else c.screen
            draws = self.episodes.sample(self.policy, c.screen, uniform, self.generator)
            drawn += c.screen
            fresh: dict[Key, int] = {}
            for row in np.flatnonzero(draws.alive):
                key = tuple(int(j) for j in draws.actions[row])
                if key in fresh or history.tried(key) or key in pending:
                    continue
                fresh[key] = int(row)
            if fresh and feasibility.exact_check():
                # lower bounds, several bounds or a correction: the look-ahead let an overrun through
                fits = feasibility.fits_all(list(fresh))
                if not fits.any():  # the draws fill a mask the exact check is tighter than: draw tighter
                    feasibility.tighten(list(fresh))
                fresh = {key: row for (key, row), ok in zip(fresh.items(), fits, strict=True) if ok}
            if fresh:
                keys = list(fresh)
                scores = None
                if self.screening.active(history):
                    scores = self.screening.acquisition(keys, list(pending))
                    if float(np.max(scores)) < c.local_ei and (local := self.neighbours(history, pending, fresh)):
                        # No draw promises an improvement: try the incumbents' neighbourhoods too.
                        keys.extend(local)
                        scores = np.concatenate([scores, self.screening.acquisition(local, list(pending))])
                risk = feasibility.over_probability(keys)
                allowed = feasibility.allowed(risk, unresolved)
                if scores is not None:
                    value = scores * (1.0 - risk if c.weigh_feasibility else 1.0)
                    best = int(np.argmax(np.where(allowed, value, -np.inf)))
                else:  # the policy's first fresh draw (a uniform one if the policy drew none) within the allowance
                    best = int(np.argmax(allowed))
                key = keys[best]
                feasibility.propose(key, float(risk[best]))
                if key in fresh:
                    return key, draws.episode(fresh[key])
                # a neighbour of one of the best: its episode as the policy would have drawn it
                return key, self.episodes.replay(self.policy, [key])[0]
            rounds += 1
            if rounds >= 2 and (left := self.feasible_left(history, pending)) is not None:
                # The feasible set is small enough to list: propose an untried one uniformly, or stop.
                if not left:
                    self.gave_up = "every architecture under the budget has been tried"
                    return None
                key = left[int(torch.randint(len(left), (1,), generator=self.generator))]
                feasibility.propose(key, float(feasibility.over_probability([key])[0]))
                return key, self.episodes.replay(self.policy, [key])[0]
        self.gave_up = f"no untried network under the budget in {drawn} draws (too many fit to list them)"
        return None

    def neighbours(self, history: History, pending: Mapping[Key, Episode], exclude: Mapping[Key, int]) -> list[Key]:
        """Feasible, untried architectures one label away from the ``local_best`` best so far.

        The acquisition's local search (SMAC's, Hutter et al. 2011): the screened pool gets the
        incumbents' neighbourhoods, which random draws reach with a tiny probability once
        the policy has settled on a region; without them the search can stall one label away
        from the best.
        """
        if not self.config.local_best:
            return []
        found: dict[Key, None] = {}
        for key in history.ranked()[: self.config.local_best]:
            for i, values in enumerate(self.candidates):
                for j in range(len(values)):
                    if j == key[i]:
                        continue
                    other = (*key[:i], j, *key[i + 1:])
                    if other in found or other in exclude or history.tried(other) or other in pending:
                        continue
                    found[other] = None
        keys = list(found)
        if self.feasibility.limits and keys:
            keys = [k for k, ok in zip(keys, self.feasibility.fits_all(keys), strict=True) if ok]
        return keys

    def feasible_left(self, history: History, pending: Mapping[Key, Episode]) -> list[Key] | None:
        """Feasible architectures neither tried nor in flight (None: too many to list)."""
        feasible = self.feasibility.feasible_list(ENUMERATE_LIMIT)
        if feasible is None:
            return None
        return [k for k in feasible if not (history.tried(k) or k in pending)]
