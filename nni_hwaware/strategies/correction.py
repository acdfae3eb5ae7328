"""What the chip measured corrects what the table predicts: an online fit, and a margin that holds.

A cost table is a prior. Every trial times its own network on its chip and reports the
measured ``latency_ms`` / ``memory_mb`` beside the table's prediction, so a search holds a
growing set of (predicted, measured) pairs. :class:`CostCorrection` fits, per metric, a
model of their log ratio

.. math::

    \\log\\frac{m(a)}{p(a)} = g + \\sum_l r_{l, a_l} + \\varepsilon

by ridge regression: ``g`` is the global scale (not shrunk), ``r_{l,v}`` a residual per
(label, value), shrunk toward zero with weight ``shrinkage`` while the pairs that carry a
value are few. The corrected prediction is :math:`p(a)\\,e^{g + \\sum_l r_{l,a_l}}`.

A budget then has to hold when measured, not only when predicted: a proposal fits if
its corrected prediction times a **margin** fits, the margin being the ``1 - delta``
quantile of the measured / corrected ratios (split-free conformal prediction: each
ratio is the pair's leave-one-out residual, exact for ridge regression, so no pair is
judged by a fit that saw it). The quantile's rank is :math:`\\lceil (n+1)(1-\\delta)
\\rceil` of ``n``, the finite-sample conformal rank (Vovk et al.; Lei et al. 2018), so
with fewer than :math:`1/\\delta - 1` pairs there is none: until then the margin is the
``prior_margin`` (from the table's own fidelity figures when the caller has them,
:func:`~nni_hwaware.strategies.fidelity.fidelity_prior_margin`).

With ``local=True`` the margin is no longer one figure for the whole space. A Gaussian
process over architectures (a Hamming kernel, :class:`~nni_hwaware.strategies.gaussian_process.HammingGP`)
is fitted to the pairs' log ratios, and an architecture fits if

.. math::

    p(a)\\,\\exp\\big(\\mu(a) + z_{1-\\delta}\\, s(a)\\big) \\le B

with :math:`\\mu(a)`, :math:`s(a)` the posterior mean and predictive standard deviation
(noise included) of its log ratio: near measured networks the bound is tight, far from
them it is as wide as the ratios' spread. A table's error is rarely one figure: an
additive table misses the interactions of a few labels, and the networks a search
proposes near the budget are neighbours of ones it has measured (constrained Bayesian
optimisation's probability of feasibility, Gardner et al. 2014; Gelbart et al. 2014).

A chip that reports its measurements in steps (phone benchmarks often give whole
milliseconds) reports anything under 18.5 ms as at most 18: a budget of 18 ms holds for it.
The step is found from the measurements (:func:`~nni_hwaware.strategies.fidelity.resolution_of`), and bounds and over-budget
chances are checked against :meth:`CostCorrection.limit_as_measured`, the value a network's
unrounded cost must reach to be reported over the limit.

:meth:`CostCorrection.over_probability` gives each architecture's probability of measuring
over a limit: the Gaussian process's where it is fitted, else a kernel estimate of the
leave-one-out residuals' distribution (skewed or heavy-tailed errors stay so) pooled with a
normal of the prior margin's spread. With ``risk_floor`` the Gaussian process's probability
is at least the latter: beside measured networks the process is confident, and a search
that picks, among many candidates near the budget's edge, those it is most optimistic about
selects on that confidence, while a table's largest errors are per-network noise no
neighbour shows. The PPO search spends these probabilities from its risk allowance.

Nothing here knows NNI: the PPO core feeds it the metrics it is told.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
from scipy.special import ndtr, ndtri

from nni_hwaware.errors import HwAwareError
from nni_hwaware.measurement import MEASURED
from nni_hwaware.measurement import positive as _positive
from nni_hwaware.strategies.fidelity import resolution_of

if TYPE_CHECKING:
    from nni_hwaware.strategies.gaussian_process import HammingGP

__all__ = ["CORRECTED", "CostCorrection", "MetricCorrection"]

#: The metrics a trial measures on its chip (and the budget names).
CORRECTED = MEASURED
#: Pairs the local model conditions on at most (the newest).
_LOCAL_LIMIT = 400
#: The prior margin's weight in :meth:`CostCorrection.log_spread`, in pairs.
_PRIOR_PAIRS = 2
_Z90 = float(ndtri(0.9))


@dataclass
class _LocalFit:
    """The Gaussian process of one metric's log ratios (standardised by ``mean`` and ``std``)."""

    gp: HammingGP
    mean: float
    std: float
    #: Pairs when its length scale and noise were last chosen.
    fitted_at: int = 0

    def log_bound(self, keys: np.ndarray, z: float) -> tuple[np.ndarray, np.ndarray]:
        """Posterior mean of the log ratio and that plus ``z`` predictive standard deviations."""
        mu, sd = self.gp.predict(keys)
        mean = self.mean + self.std * mu
        return mean, mean + z * self.std * np.sqrt(sd * sd + self.gp.noise)

    def lowest_log_bound(self, z: float, lowest_ratio: float) -> float:
        """The least :meth:`log_bound` the look-ahead mask assumes: the posterior mean's lower bound
        (the kernel is at most 1) or the lowest measured log ratio less two spreads, whichever is
        higher (the mean of a GP rarely falls far below what it was fitted to; a draw is checked
        exactly after)."""
        alpha = self.gp._alpha
        reach = float(alpha.abs().sum()) if alpha is not None else 0.0
        mean = max(self.mean - self.std * reach, lowest_ratio - 2 * self.std)
        return mean + z * self.std * math.sqrt(self.gp.noise)


@dataclass
class MetricCorrection:
    """The fitted correction of one metric (see the module)."""

    scale_log: float = 0.0
    #: Per label position, the residual of each value (log space).
    residuals: list[np.ndarray] = field(default_factory=list)
    #: Leave-one-out log ratios measured / corrected of the pairs it was fitted on.
    loo: np.ndarray = field(default_factory=lambda: np.zeros(0))
    #: Log ratios measured / predicted (the table alone) of those pairs.
    raw: np.ndarray = field(default_factory=lambda: np.zeros(0))

    def log_factor(self, indices: Sequence[int]) -> float:
        if not self.residuals:
            return self.scale_log
        return self.scale_log + float(sum(r[j] for r, j in zip(self.residuals, indices, strict=True)))

    def log_factors(self, keys: np.ndarray) -> np.ndarray:
        """:meth:`log_factor` of many architectures (value indices, one row each)."""
        keys = np.asarray(keys, dtype=np.int64).reshape(len(keys), -1)
        out = np.full(len(keys), self.scale_log)
        for i, r in enumerate(self.residuals):
            out += r[keys[:, i]]
        return out

    def lowest_log_factor(self) -> float:
        """The smallest correction any architecture can get (the global scale and every label's lowest residual)."""
        return self.scale_log + float(sum(r.min() for r in self.residuals)) if self.residuals else self.scale_log


class CostCorrection:
    """Online correction of a cost model's predictions from measured pairs, with a conformal margin."""

    def __init__(self, n_values: Sequence[int], *, delta: float = 0.1, shrinkage: float = 4.0,
                 prior_margin: float = 1.0, metrics: Sequence[str] = CORRECTED, use_margin: bool = True,
                 local: bool = False, risk_floor: bool = False) -> None:
        if not 0 < delta < 1:
            raise HwAwareError(f"delta must be between 0 and 1 (e.g. 0.1), got {delta!r}")
        if not (math.isfinite(shrinkage) and shrinkage > 0):
            raise HwAwareError(f"shrinkage must be a positive number, got {shrinkage!r}")
        if not (math.isfinite(prior_margin) and prior_margin > 0):
            raise HwAwareError(f"prior_margin must be a positive number, got {prior_margin!r}")
        self.n_values = [int(n) for n in n_values]
        self.delta, self.shrinkage, self.prior_margin = float(delta), float(shrinkage), float(prior_margin)
        self.metrics = tuple(metrics)
        #: False: the margin is 1 (the corrected prediction alone must fit).
        self.use_margin = bool(use_margin)
        #: True: the margin of each architecture from a Gaussian process of the ratios (module docstring).
        self.local = bool(local)
        #: True: a local probability of measuring over is at least the global one (module docstring).
        self.risk_floor = bool(risk_floor)
        self.z = float(ndtri(1.0 - self.delta))
        self.locals: dict[str, _LocalFit] = {}
        self.pairs: dict[str, list[tuple[tuple[int, ...], float, float]]] = {m: [] for m in self.metrics}
        self.fits: dict[str, MetricCorrection] = {m: MetricCorrection() for m in self.metrics}
        #: Per metric, the step the chip reports its measurements in (0: none found; see :func:`resolution_of`).
        self.resolutions: dict[str, float] = {m: 0.0 for m in self.metrics}

    # -- data -----------------------------------------------------------------------
    def add(self, indices: Sequence[int], predicted: Mapping[str, float], measured: Mapping[str, Any]) -> list[str]:
        """Record one network's measured costs against the prediction; refits what changed; returns those metrics."""
        key = tuple(int(j) for j in indices)
        if len(key) != len(self.n_values):
            raise HwAwareError(f"an architecture of {len(self.n_values)} labels was expected, got {len(key)}")
        changed = []
        for metric in self.metrics:
            value = _positive(measured.get(metric))
            guess = _positive(predicted.get(metric))
            if value is None or guess is None:
                continue
            self.pairs[metric].append((key, guess, value))
            changed.append(metric)
        for metric in changed:
            self._fit(metric)
        return changed

    def limit_as_measured(self, metric: str, limit: float) -> float:
        """The value the metric's unrounded cost must reach to be *reported* over ``limit``.

        A chip that reports whole milliseconds reports 18 for anything under 18.5: a budget of
        18 ms holds for it. With the reports' step ``r`` (:func:`resolution_of`), a network is
        reported over ``limit`` when its cost reaches ``r * (floor(limit / r) + 1/2)``; without a
        step the limit itself.
        """
        step = self.resolutions.get(metric, 0.0)
        if step <= 0:
            return limit
        return step * (math.floor(limit / step * (1 + 1e-9)) + 0.5)

    def _design(self, keys: Sequence[tuple[int, ...]]) -> np.ndarray:
        offsets = np.concatenate([[1], 1 + np.cumsum(self.n_values)[:-1]]).astype(int)
        design = np.zeros((len(keys), 1 + sum(self.n_values)))
        design[:, 0] = 1.0
        for row, key in enumerate(keys):
            design[row, offsets + np.asarray(key)] = 1.0
        return design

    def _fit(self, metric: str) -> None:
        pairs = self.pairs[metric]
        self.resolutions[metric] = resolution_of([m for _, _, m in pairs])
        keys = [k for k, _, _ in pairs]
        y = np.log(np.asarray([m / p for _, p, m in pairs]))
        x = self._design(keys)
        penalty = np.full(x.shape[1], self.shrinkage)
        penalty[0] = 1e-6  # the global scale is barely shrunk
        gram = x.T @ x + np.diag(penalty)
        inverse = np.linalg.inv(gram)
        weights = inverse @ x.T @ y
        fitted = x @ weights
        leverage = np.einsum("ij,jk,ik->i", x, inverse, x)
        loo = (y - fitted) / np.maximum(1.0 - leverage, 1e-6)
        residuals, at = [], 1
        for n in self.n_values:
            residuals.append(weights[at:at + n].copy())
            at += n
        self.fits[metric] = MetricCorrection(float(weights[0]), residuals, loo, y)
        if self.local:
            previous = self.locals.pop(metric, None)
            if self._local_ready(len(keys)):
                # the GP imports torch: not when the tuner is built
                from nni_hwaware.strategies.gaussian_process import HammingGP, refit_due

                keep = slice(-_LOCAL_LIMIT, None)
                ys, at = y[keep], np.asarray(keys[keep], dtype=np.int64)
                # a chip the table predicts exactly has no spread: no margin either (1e-9: a tie at the limit fits)
                mean, std = float(ys.mean()), max(float(ys.std()), 1e-9)
                if previous is None or refit_due(len(ys), previous.fitted_at):
                    gp, fitted_at = HammingGP(len(self.n_values)), len(ys)
                    gp.fit(at, (ys - mean) / std)
                else:  # the last choice of length scale and noise, conditioned on the new pairs
                    gp, fitted_at = previous.gp, previous.fitted_at
                    gp.condition(at, (ys - mean) / std)
                self.locals[metric] = _LocalFit(gp, mean, std, fitted_at)

    def _local_ready(self, n: int) -> bool:
        """Whether ``n`` pairs are enough for a data-driven margin (the conformal rank exists)."""
        return math.ceil((n + 1) * (1 - self.delta)) <= n

    # -- use ------------------------------------------------------------------------
    def count(self, metric: str) -> int:
        return len(self.pairs.get(metric, ()))

    def factor(self, metric: str, indices: Sequence[int]) -> float:
        """measured / predicted as the fit expects it for this architecture (1 without pairs)."""
        if metric in self.locals:
            return float(math.exp(self.locals[metric].log_bound(np.asarray([indices]), self.z)[0][0]))
        return math.exp(self.fits[metric].log_factor(indices)) if metric in self.fits else 1.0

    def lowest_factor(self, metric: str) -> float:
        return math.exp(self.fits[metric].lowest_log_factor()) if metric in self.fits else 1.0

    def mask_factor(self, metric: str) -> float:
        """At most :meth:`bound` / prediction of any architecture: what the look-ahead mask divides the budget by."""
        if metric in self.locals:
            lowest = float(self.fits[metric].raw.min())
            return math.exp(self.locals[metric].lowest_log_bound(self.z if self.use_margin else 0.0, lowest))
        return self.lowest_factor(metric) * self.margin(metric)

    def margin(self, metric: str) -> float:
        """The ``1 - delta`` conformal quantile of measured / corrected (the prior margin until enough pairs);
        locally, the median over the measured networks of their bound / corrected prediction."""
        if not self.use_margin:
            return 1.0
        if metric in self.locals:
            fit = self.locals[metric]
            mean, upper = fit.log_bound(fit.gp.x, self.z)
            return float(math.exp(np.median(upper - mean)))
        loo = self.fits[metric].loo if metric in self.fits else np.zeros(0)
        n = len(loo)
        rank = math.ceil((n + 1) * (1 - self.delta))
        if rank > n:
            return self.prior_margin
        return float(math.exp(np.sort(loo)[rank - 1]))

    def bound(self, metric: str, indices: Sequence[int], predicted: float) -> float:
        """The corrected prediction times the margin: what must fit the budget."""
        return float(self.bounds(metric, np.asarray([indices]), np.asarray([predicted]))[0])

    def bounds(self, metric: str, keys: np.ndarray, predicted: np.ndarray) -> np.ndarray:
        """:meth:`bound` of many architectures at once (``keys``: value indices, one row each)."""
        predicted = np.asarray(predicted, dtype=float)
        if metric in self.locals:
            mean, upper = self.locals[metric].log_bound(np.asarray(keys, dtype=np.int64), self.z)
            return predicted * np.exp(upper if self.use_margin else mean)
        factors = np.asarray([self.factor(metric, k) for k in keys]) if metric in self.fits else 1.0
        return predicted * factors * self.margin(metric)

    def feasibility(self, metric: str, keys: np.ndarray, predicted: np.ndarray, limit: float) -> np.ndarray:
        """The probability that each architecture measures within ``limit`` (1 where nothing local is known)."""
        if metric not in self.locals:
            return np.ones(len(keys))
        fit = self.locals[metric]
        mu, sd = fit.gp.predict(np.asarray(keys, dtype=np.int64))
        mean = fit.mean + fit.std * mu
        spread = fit.std * np.sqrt(sd * sd + fit.gp.noise)
        return ndtr((math.log(limit) - np.log(np.asarray(predicted, dtype=float)) - mean) / spread)

    def log_spread(self, metric: str) -> float:
        """The standard deviation of log(measured / corrected) by the global fit: the root mean square of the
        leave-one-out residuals, pooled with the prior margin's (read as the 90th percentile of measured /
        predicted) as :data:`_PRIOR_PAIRS` pairs."""
        prior = math.log(self.prior_margin) / _Z90 if self.prior_margin > 1 else 0.0
        loo = self.fits[metric].loo if metric in self.fits else np.zeros(0)
        return math.sqrt((_PRIOR_PAIRS * prior ** 2 + float(np.sum(loo ** 2))) / (_PRIOR_PAIRS + len(loo)))

    def over_probability(self, metric: str, keys: np.ndarray, predicted: np.ndarray, limit: float) -> np.ndarray:
        """The probability that each architecture measures over ``limit``: the local model's where it is
        fitted, else that of its log ratio about the global fit's mean, distributed as the leave-one-out
        residuals (a kernel estimate) pooled with a normal of :meth:`log_spread`; with ``risk_floor``, the
        larger of the two."""
        keys = np.asarray(keys, dtype=np.int64).reshape(len(keys), -1)
        predicted = np.asarray(predicted, dtype=float)
        limit = self.limit_as_measured(metric, limit) * (1 + 1e-9)  # a network measured at the limit fits
        if metric not in self.locals:
            return self._global_over_probability(metric, keys, predicted, limit)
        local = 1.0 - self.feasibility(metric, keys, predicted, limit)
        if self.risk_floor:
            return np.maximum(local, self._global_over_probability(metric, keys, predicted, limit))
        return local

    def _global_over_probability(self, metric: str, keys: np.ndarray, predicted: np.ndarray,
                                 limit: float) -> np.ndarray:
        mean = self.fits[metric].log_factors(keys) if metric in self.fits else np.zeros(len(keys))
        gap = math.log(limit) - np.log(predicted) - mean
        spread = self.log_spread(metric)
        if spread <= 0:
            return (gap < 0).astype(float)
        loo = self.fits[metric].loo if metric in self.fits else np.zeros(0)
        prior = ndtr(-gap / spread)
        if not len(loo):
            return prior
        # the leave-one-out residuals' own distribution (a kernel estimate: skewed, heavy-tailed errors
        # stay so), pooled with the normal of the pooled spread as _PRIOR_PAIRS pairs
        # no absolute floor: a chip the table predicts up to float rounding has no spread, and a network
        # at the budget fits (a floor of 1e-3 put a risk of 0.5 on every network at the limit)
        width = max(spread * len(loo) ** -0.2, 1e-12)
        empirical = ndtr((loo[None, :] - gap[:, None]) / width).mean(axis=1)
        return (_PRIOR_PAIRS * prior + len(loo) * empirical) / (_PRIOR_PAIRS + len(loo))

    def summary(self) -> dict[str, dict[str, float]]:
        """Per metric with pairs: their count, the global scale, the margin and the spread of
        log(measured / predicted) before (the table alone) and after the correction (leave-one-out).

        The global scale is what a value never measured gets: the residuals are shrunk toward it, so it
        holds what a label's values share, their average in log. A chip 1.3x the table with one of four
        values 1.6x more has a scale of about 1.3 x 1.6 ** (1/4), and that value's residual the rest."""
        out = {}
        for metric, fit in self.fits.items():
            if not len(fit.raw):
                continue
            out[metric] = {"pairs": len(fit.raw), "scale": math.exp(fit.scale_log), "margin": self.margin(metric),
                           "spread_before": float(np.std(fit.raw)), "spread_after": float(np.std(fit.loo)),
                           "median_ratio_before": float(math.exp(np.median(fit.raw))),
                           "median_ratio_after": float(math.exp(np.median(fit.loo))),
                           "local": metric in self.locals, "resolution": self.resolutions.get(metric, 0.0)}
        return out

    def state_dict(self) -> dict[str, Any]:
        return {"pairs": {m: [[list(k), p, v] for k, p, v in pairs] for m, pairs in self.pairs.items()}}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self.pairs = {m: [] for m in self.metrics}
        for metric, pairs in (state.get("pairs") or {}).items():
            if metric not in self.pairs:
                continue
            self.pairs[metric] = [(tuple(int(j) for j in k), float(p), float(v)) for k, p, v in pairs]
            if self.pairs[metric]:
                self._fit(metric)
