"""Gaussian processes over architectures: the PPO search's accuracy surrogate and the cost correction's
local margin.

An architecture is a tuple of value indices, one per label. :class:`HammingGP` regresses on them with a
Hamming kernel (categorical labels have no order) plus, where features are given, a linear kernel on
them; its length scale, noise and the linear kernel's weight are chosen by marginal likelihood, then a
weight per label (automatic relevance determination) fitted the same way.

:class:`Surrogate` screens the PPO search's masked samples before one is proposed: a :class:`HammingGP`
on the results so far whose features are what the cost table predicts of each architecture (more
compute is often more accuracy, and the best networks sit at the budget's edge), with expected
improvement (:func:`expected_improvement`) as the acquisition. The cost correction
(:mod:`~nni_hwaware.strategies.correction`) fits a :class:`HammingGP` to the measured / predicted
log ratios (:func:`refit_due` paces both).

Kept apart from the PPO package so that the correction, which both searches' feasibility uses, does
not import a strategy; torch is imported here, so the correction imports this module only when it
fits a local margin.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable

import numpy as np
import torch
from scipy.special import ndtr, ndtri

__all__ = ["REFIT_EVERY_UNTIL", "REFIT_GROWTH", "HammingGP", "Surrogate", "expected_improvement",
           "normal_scores", "normalise", "refit_due"]


def normal_scores(values: np.ndarray) -> np.ndarray:
    r"""Rank-based normalisation: :math:`z_i = \Phi^{-1}\big((\mathrm{rank}_i + 1/2) / n\big)`.

    Ties share their mean rank. The scores do not depend on the reward's scale or on
    outliers (failed trials), so one set of options serves every benchmark.
    """
    values = np.asarray(values, dtype=float)
    n = len(values)
    if n == 0:
        return values
    order = np.argsort(values, kind="stable")
    ranks = np.empty(n)
    ranks[order] = np.arange(n, dtype=float)
    for v in np.unique(values):  # ties: mean rank
        same = values == v
        if same.sum() > 1:
            ranks[same] = ranks[same].mean()
    return ndtri((ranks + 0.5) / n)


#: Results up to which a Gaussian process chooses its length scale and noise anew at every result.
REFIT_EVERY_UNTIL = 30
#: Beyond them, it chooses them anew when the results have grown by this factor since the last choice
#: (and conditions on the new results with the last choice in between): the choice settles as results
#: accumulate, and a decision stays cheap at hundreds of results.
REFIT_GROWTH = 1.1


def refit_due(n: int, last: int) -> bool:
    """Whether a Gaussian process of ``n`` results, last fitted at ``last``, chooses its hyperparameters anew."""
    return n <= REFIT_EVERY_UNTIL or last <= 0 or n >= REFIT_GROWTH * last


class HammingGP:
    r"""Gaussian process regression on architectures (value indices per label).

    Kernel :math:`k(x, y) = \exp(-\lambda\, d_H(x, y) / L) + w\, h(x)^\top h(y) / F` with :math:`d_H` the
    number of labels whose values differ and :math:`h` an architecture's ``F`` standardised features
    when given (:class:`Surrogate`: the table's predicted costs; the linear kernel is a Bayesian linear
    trend in them, Rasmussen & Williams 2006, sec. 2.7). Targets are standardised; :math:`\lambda`,
    :math:`w \in \{0, 1\}` and the
    noise variance :math:`\sigma^2` are chosen from a small grid by the log marginal
    likelihood :math:`-\tfrac12 y^\top K_\sigma^{-1} y - \tfrac12 \log|K_\sigma|` (Rasmussen &
    Williams 2006, eq. 2.30). Posterior (eq. 2.25-2.26): :math:`\mu_* = k_*^\top K_\sigma^{-1} y`,
    :math:`s_*^2 = 1 - k_*^\top K_\sigma^{-1} k_*`. The algebra runs in torch (float64), whose
    thread count the search fixes: a multi-threaded BLAS on a busy machine is ~10x slower here.

    With ``ard`` (automatic relevance determination, R&W sec. 5.1) each label gets its own weight,
    :math:`\lambda\, d_H(x, y) \to \sum_l \lambda_l [x_l \ne y_l]`: a label that barely moves the
    target stops making architectures that differ in it look unrelated. From
    :attr:`ARD_MIN_RESULTS` results on, the weights and the noise start at the grid's choice and
    maximise the marginal likelihood with a log-normal prior about it (sd :attr:`ARD_PRIOR_SD` in
    log, so a few results cannot drive a weight to 0 or infinity), by :attr:`ARD_STEPS` L-BFGS steps;
    the noise stays at least the grid's least.
    """

    SCALES = (0.5, 1.0, 2.0, 4.0, 8.0)
    NOISES = (1e-3, 1e-2, 1e-1)
    #: Weights of the linear kernel on the features tried (with features).
    TRENDS = (0.0, 1.0)
    #: Results before the labels get weights of their own (with ``ard``).
    ARD_MIN_RESULTS = 10
    #: L-BFGS iterations of the weights' fit.
    ARD_STEPS = 20
    #: The log-normal prior's spread of each weight about the grid's length scale.
    ARD_PRIOR_SD = 1.0

    def __init__(self, n_labels: int, ard: bool = False) -> None:
        self.n_labels = n_labels
        self.ard = ard
        self.x = np.zeros((0, n_labels), dtype=np.int64)
        self.h: np.ndarray | None = None
        self.scale, self.noise, self.trend = 1.0, 1e-2, 0.0
        #: Per label, the weight of a differing value (None: ``scale`` for every label).
        self.weights: np.ndarray | None = None
        self._chol: torch.Tensor | None = None
        self._alpha: torch.Tensor | None = None

    def _linear(self, a: np.ndarray | None, b: np.ndarray | None) -> torch.Tensor | None:
        if a is None or b is None or not a.shape[1]:
            return None
        return torch.from_numpy(a @ b.T / a.shape[1])

    @staticmethod
    def _differs(a: np.ndarray, b: np.ndarray) -> np.ndarray:
        """(n, m, L): whether each pair of architectures differs in each label."""
        return a[:, None, :] != b[None, :, :]

    def _distance(self, a: np.ndarray, b: np.ndarray) -> torch.Tensor:
        return torch.from_numpy(self._differs(a, b).sum(axis=2).astype(np.float64))

    def _weighted(self, a: np.ndarray, b: np.ndarray) -> torch.Tensor:
        """The kernel's exponent: the differing labels' weights (``scale`` each without ARD), over L."""
        if self.weights is None:
            return self.scale * self._distance(a, b) / self.n_labels
        return torch.from_numpy(self._differs(a, b).astype(np.float64) @ self.weights / self.n_labels)

    @staticmethod
    def _log_evidence(target: torch.Tensor, chol: torch.Tensor, alpha: torch.Tensor) -> torch.Tensor:
        """The log marginal likelihood up to a constant (eq. 2.30) from :meth:`_solve`'s factor and solution."""
        return -0.5 * (target @ alpha) - torch.log(torch.diagonal(chol)).sum()

    def _solve(self, base: torch.Tensor, noise: float | torch.Tensor,
               y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor] | None:
        chol, info = torch.linalg.cholesky_ex(base + noise * torch.eye(len(y), dtype=torch.float64))
        if int(info) != 0:
            return None
        return chol, torch.cholesky_solve(y[:, None], chol)[:, 0]

    def fit(self, x: np.ndarray, y: np.ndarray, h: np.ndarray | None = None) -> None:
        """Condition on architectures ``x`` (n, L) with standardised targets ``y`` (n,), choosing λ and σ²
        (and the linear kernel's weight on the features ``h`` (n, F), when given)."""
        self.x = np.asarray(x, dtype=np.int64)
        self.h = None if h is None else np.asarray(h, dtype=float)
        target = torch.as_tensor(np.asarray(y, dtype=float))
        distance = self._distance(self.x, self.x)
        linear = self._linear(self.h, self.h)
        best = -math.inf
        self.weights = None
        trends = self.TRENDS if linear is not None else (0.0,)
        for scale in self.SCALES:
            hamming = torch.exp(-scale * distance / self.n_labels)  # once per scale, whatever the trend
            for trend in trends:
                base = hamming + trend * linear if trend else hamming
                for noise in self.NOISES:
                    solved = self._solve(base, noise, target)
                    if solved is None:
                        continue
                    chol, alpha = solved
                    evidence = float(self._log_evidence(target, chol, alpha))
                    if evidence > best:
                        best, self.scale, self.noise, self.trend = evidence, scale, noise, trend
                        self._chol, self._alpha = chol, alpha
        if self.ard and len(target) >= self.ARD_MIN_RESULTS:
            self._fit_ard(target, linear)

    def _fit_ard(self, target: torch.Tensor, linear: torch.Tensor | None) -> None:
        """Per-label weights and the noise by the log marginal likelihood (MAP: a log-normal prior about the
        grid's scale), from the grid's choice."""
        per = torch.from_numpy(self._differs(self.x, self.x).astype(np.float64))
        centre = math.log(self.scale)
        log_w = torch.full((self.n_labels,), centre, dtype=torch.float64, requires_grad=True)
        log_noise = torch.tensor(math.log(self.noise), dtype=torch.float64, requires_grad=True)
        extra = self.trend * linear if self.trend and linear is not None else 0.0

        def loss() -> torch.Tensor:
            base = torch.exp(-(per @ torch.exp(log_w)) / self.n_labels) + extra
            solved = self._solve(base, torch.exp(log_noise).clamp(min=self.NOISES[0]), target)
            if solved is None:
                return torch.tensor(math.inf, dtype=torch.float64)
            prior = 0.5 * (((log_w - centre) / self.ARD_PRIOR_SD) ** 2).sum()
            return -self._log_evidence(target, *solved) + prior

        opt = torch.optim.LBFGS([log_w, log_noise], max_iter=self.ARD_STEPS, line_search_fn="strong_wolfe")

        def closure() -> torch.Tensor:
            opt.zero_grad()
            value = loss()
            if torch.isfinite(value):
                value.backward()
            return value

        try:
            opt.step(closure)
        except RuntimeError:
            return
        weights = np.exp(log_w.detach().numpy())
        noise = max(float(torch.exp(log_noise.detach())), self.NOISES[0])
        if not (np.all(np.isfinite(weights)) and math.isfinite(noise)):
            return
        grid_noise = self.noise
        self.weights, self.noise = weights, noise
        solved = self._solve(self._kernel(self.x, self.h, self.x, self.h), noise, target)
        if solved is None:  # the grid's choice stands
            self.weights, self.noise = None, grid_noise
            return
        self._chol, self._alpha = solved

    def _kernel(self, x: np.ndarray, h: np.ndarray | None, x2: np.ndarray, h2: np.ndarray | None) -> torch.Tensor:
        out = torch.exp(-self._weighted(x, x2))
        if self.trend and (linear := self._linear(h, h2)) is not None:
            out = out + self.trend * linear
        return out

    def condition(self, x: np.ndarray, y: np.ndarray, h: np.ndarray | None = None) -> None:
        """Condition on ``x``, ``y`` with the length scale and noise already chosen (no search)."""
        self.x = np.asarray(x, dtype=np.int64)
        self.h = None if h is None else np.asarray(h, dtype=float)
        base = self._kernel(self.x, self.h, self.x, self.h)
        solved = self._solve(base, self.noise, torch.as_tensor(np.asarray(y, dtype=float)))
        if solved is None:
            self.fit(x, y, h)
        else:
            self._chol, self._alpha = solved

    def predict(self, x: np.ndarray, h: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
        """Posterior mean and standard deviation at ``x`` (m, L) (features ``h`` (m, F) with a trend)."""
        x = np.asarray(x, dtype=np.int64)
        if self._chol is None or self._alpha is None:
            return np.zeros(len(x)), np.ones(len(x))
        cross = self._kernel(x, h, self.x, self.h)
        mean = cross @ self._alpha
        v = torch.linalg.solve_triangular(self._chol, cross.T, upper=False)
        prior = torch.ones(len(x), dtype=torch.float64)
        if self.trend and h is not None and h.shape[1]:
            prior = prior + self.trend * torch.from_numpy((h * h).sum(axis=1) / h.shape[1])
        return mean.numpy(), np.sqrt(np.clip(prior.numpy() - (v * v).sum(dim=0).numpy(), 1e-12, None))


def expected_improvement(mean: np.ndarray, std: np.ndarray, best: float) -> np.ndarray:
    r""":math:`EI = (\mu - f^*)\,\Phi(z) + s\,\varphi(z)`, :math:`z = (\mu - f^*) / s` (Jones et al. 1998)."""
    z = (mean - best) / std
    return (mean - best) * ndtr(z) + std * np.exp(-0.5 * z * z) / math.sqrt(2 * math.pi)


def normalise(rewards: np.ndarray, norm: str) -> np.ndarray:
    """Rewards as the policy learns them: ``rank`` (:func:`normal_scores`), ``zscore`` or ``raw``."""
    if norm == "rank":
        return normal_scores(rewards)
    if norm == "zscore":
        return (rewards - rewards.mean()) / (rewards.std() + 1e-8)
    return rewards


class Surrogate:
    """What screens the masked samples: a :class:`HammingGP` on the results so far.

    With ``features`` (architectures -> an (n, F) array; the PPO search gives the logs of the
    table's predicted latency, FLOPs and parameters) the kernel gets a linear trend in them,
    standardised by the results' mean and spread (a feature constant over the results is dropped).
    On NAS-Bench-201 under a measured budget (``benchmarks/search_efficiency.py``, 24 suites) the
    trend cut the regret at 100 trials from 0.59x to 0.54x that of random search over the mask
    (10 seeds; 0.65x to 0.58x over 20).

    Targets are the rewards' normal scores (``rank``) or z-scores. Beyond :attr:`LIMIT`
    results it conditions on the best half and the newest half; λ and σ² are chosen
    anew at every result up to :data:`REFIT_EVERY_UNTIL`, then whenever the results have grown by
    :data:`REFIT_GROWTH` (:func:`refit_due`). In-flight architectures count as observed at
    their predicted mean (the "kriging believer"): the mean is unchanged and the
    uncertainty near them shrinks, so concurrent proposals spread out.
    """

    LIMIT = 600

    def __init__(self, n_labels: int, features: Callable[[np.ndarray], np.ndarray] | None = None,
                 ard: bool = False) -> None:
        self.gp = HammingGP(n_labels, ard=ard)
        self.targets = np.zeros(0)
        self.features = features
        self._centre: tuple[np.ndarray, np.ndarray] | None = None
        self._fitted_at = 0  # results at the last choice of the hyperparameters

    def _h(self, keys: np.ndarray) -> np.ndarray | None:
        """The standardised features of ``keys`` (by the fitted architectures' mean and spread)."""
        if self.features is None or self._centre is None:
            return None
        mean, std = self._centre
        return (self.features(np.asarray(keys, dtype=np.int64)) - mean) / std

    @property
    def ready(self) -> bool:
        return len(self.targets) >= 2

    def update(self, order: list[tuple[int, ...]], rewards: dict[tuple[int, ...], float], rank: bool) -> None:
        """Condition on the results (``order``: architectures in the order they finished)."""
        keys = list(order)
        if len(keys) < 2:
            self.targets = np.zeros(0)
            return
        if len(keys) > self.LIMIT:
            best = sorted(keys, key=lambda k: -rewards[k])[: self.LIMIT // 2]
            keys = list(dict.fromkeys([*best, *keys[-(self.LIMIT - len(best)):]]))
        values = np.asarray([rewards[k] for k in keys], dtype=float)
        self.targets = normalise(values, "rank" if rank else "zscore")
        x = np.asarray(keys, dtype=np.int64)
        h = None
        if self.features is not None:
            raw = self.features(x)
            std = raw.std(axis=0)
            self._centre = (raw.mean(axis=0), np.where(std > 1e-12, std, np.inf))  # a constant feature drops out
            h = (raw - self._centre[0]) / self._centre[1]
        if refit_due(len(keys), self._fitted_at):
            self.gp.fit(x, self.targets, h)  # length scale and noise by marginal likelihood
            self._fitted_at = len(keys)
        else:
            self.gp.condition(x, self.targets, h)

    def acquisition(self, keys: np.ndarray, pending: list[tuple[int, ...]]) -> np.ndarray:
        """Expected improvement of each candidate, in-flight architectures believed."""
        gp = self.gp
        if pending:
            inflight = np.asarray(pending, dtype=np.int64)
            h = self._h(inflight)
            believed, _ = gp.predict(inflight, h)
            gp = copy.copy(gp)
            gp.condition(np.concatenate([self.gp.x, inflight]), np.concatenate([self.targets, believed]),
                         None if h is None else np.concatenate([self.gp.h, h]))
        mean, std = gp.predict(keys, self._h(keys))
        return expected_improvement(mean, std, float(np.max(self.targets)))
