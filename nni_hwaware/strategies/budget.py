"""Hardware budgets from the cost table, and which choices keep a network inside them.

The search must stay inside an upper bound of what a network may
use on the chip. A :class:`Budget` bounds latency and/or memory and/or FLOPs;
:class:`BudgetMask` answers, while an architecture is chosen layer by layer,
which candidates of the next layer still leave a way to finish under the budget:
it looks ahead with the cheapest completion of the remaining layers.

The mask works on any space's :class:`~nni_hwaware.cost_model.SpaceCostModel`
(labels in the space's order; a model read from a block table of an earlier version is
converted by :func:`~nni_hwaware.cost_model.as_space_model`).
Where every cost factor depends on one label (the project's spaces, NasBench201,
per-choice tables), latency and FLOPs of the cheapest completion are the sum of
per-label minima, and memory (weights plus the largest activation working set) is
found exactly by trying every activation cap ``t`` of the remaining labels:
``min_t [ sum_k min{P_kj : A_kj <= t} + max(a, t) ]``; for one budgeted metric the
mask is then exact: no sampled architecture is over budget and none that fits is
excluded. Where factors couple labels (a width choice feeding the next layer, a
``Repeat`` depth), the look-ahead is the cost model's lower bound, which never
excludes a feasible choice; so is it where the model adds the latency of the weights beyond
the core's cache (a term of the whole network): separable models bound it at a completion's
least weights, still vectorised. In both cases, and with several bounds (each checked
separately), :meth:`BudgetMask.within` checks the finished architecture, so no
proposal is ever over budget.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from nni_hwaware.checked_options import from_mapping
from nni_hwaware.cost_model import SpaceCostModel, as_space_model
from nni_hwaware.errors import HwAwareError

__all__ = ["Budget", "BudgetMask"]

_EPS = 1e-9


@dataclass(frozen=True)
class Budget:
    """Upper bounds on a network's cost on the chip; ``None`` leaves a cost free."""

    latency_ms: float | None = None
    memory_mb: float | None = None
    flops: float | None = None

    def __post_init__(self) -> None:
        for name, value in asdict(self).items():
            if value is not None and not (math.isfinite(value) and value > 0):
                raise HwAwareError(f"budget {name} must be a positive number, got {value}")
        # the mask asks for the bounds for every network it checks: computed once (not a field)
        object.__setattr__(self, "_limits", {k: v for k, v in asdict(self).items() if v is not None})

    @classmethod
    def from_dict(cls, data: Mapping[str, float] | None) -> Budget:
        return from_mapping(cls, data, "budget keys")

    def limits(self) -> dict[str, float]:
        """The bounds that are set, ``{metric: limit}`` (a copy)."""
        return dict(self._limits)  # type: ignore[attr-defined]


class BudgetMask:
    """Feasible values per label under a :class:`Budget`, from a cost model."""

    def __init__(self, model: SpaceCostModel, budget: Budget) -> None:
        model = self.model = as_space_model(model)[0]
        self.budget = budget
        self.n_layers = len(model.labels)
        self.n_candidates = np.array([len(c) for c in model.candidates])
        #: Every factor depends on one label: the look-ahead is exact (see the module docstring).
        #: (The model merges factors over the same labels: a label has at most one such factor.)
        self.separable = all(len(f.labels) == 1 for f in model.factors)
        #: The latency of the weights beyond the core's cache, a term of the whole network (None: none).
        #: The look-ahead then bounds it at the least weights of a completion, and is no longer exact.
        self.beyond_cache = model.beyond_cache
        #: Whether the look-ahead is exact: no draw it lets through is over a single bound.
        self.exact = self.separable and self.beyond_cache is None
        if self.separable:
            width = int(self.n_candidates.max())
            grids = {m: np.full((self.n_layers, width), np.inf) for m in ("latency_ms", "flops", "param_mb",
                                                                          "activation_mb")}
            for i, n in enumerate(self.n_candidates):
                for m, grid in grids.items():
                    grid[i, :n] = model.factors[model.factors_of[i][0]].costs[m] if model.factors_of[i] else 0.0
            self._additive = {m: grids[m] for m in ("latency_ms", "flops")}
            self._params, self._acts = grids["param_mb"], grids["activation_mb"]
            self._rest = {m: np.append(np.cumsum(c.min(axis=1)[::-1])[::-1], 0.0) for m, c in self._additive.items()}
            #: The least weights of a completion of labels ``i..`` (the beyond-the-cache term's bound).
            self._rest_params = np.append(np.cumsum(self._params.min(axis=1)[::-1])[::-1], 0.0)
        cheapest = self.cheapest_costs()
        over = {m: (cheapest[m], limit) for m, limit in budget.limits().items() if cheapest[m] > limit + _EPS}
        if over:
            text = ", ".join(f"{m} {c:.4g} > budget {b:.4g}" for m, (c, b) in over.items())
            raise HwAwareError(
                f"no architecture of space {model.name!r} fits the budget on chip {model.chip!r}: "
                f"the cheapest achievable is {text}; raise the budget"
            )

    # -- the lookahead -------------------------------------------------------------
    def _memory_completion(self, start: int, act: float) -> float:
        """Least (remaining weights + working set) over completions of labels ``start..`` (separable).

        It depends on the prefix only through ``start`` and its largest activation ``act``,
        which take few values: each pair is computed once.
        """
        if start == self.n_layers:
            return act
        cache = self.__dict__.setdefault("_completions", {})
        key = (start, float(act))
        if key not in cache:
            cache[key] = self._memory_completion_uncached(start, act)
        return cache[key]

    def _memory_completion_uncached(self, start: int, act: float) -> float:
        params, acts = self._params[start:], self._acts[start:]
        best = math.inf
        for cap in np.unique(acts[np.isfinite(acts)]):
            allowed = np.where(acts <= cap, params, np.inf).min(axis=1)
            if np.isfinite(allowed).all():
                best = min(best, float(allowed.sum()) + max(act, float(cap)))
        return best

    def cheapest_costs(self) -> dict[str, float]:
        """The lowest achievable latency, FLOPs and memory (each on its own; bounds where not separable)."""
        fixed = self.model.fixed
        if not self.separable:
            bounds = self.model.lower_bounds([])
            return {m: float(bounds[m].min()) for m in ("latency_ms", "flops", "memory_mb")}
        out = {m: fixed[m] + float(self._rest[m][0]) for m in self._additive}
        out["latency_ms"] += self._beyond(fixed["param_mb"] + float(self._rest_params[0]))
        out["memory_mb"] = fixed["param_mb"] + self._memory_completion(0, fixed["activation_mb"])
        return out

    def _spent(self, prefix: Sequence[int]) -> tuple[float, float]:
        rows, chosen = np.arange(len(prefix)), np.asarray(prefix, dtype=int)
        spent = self.model.fixed["param_mb"] + float(self._params[rows, chosen].sum())
        act = max([self.model.fixed["activation_mb"], *self._acts[rows, chosen]])
        return spent, act

    def needs(self, prefix: Sequence[int]) -> dict[str, np.ndarray]:
        """Least cost of a completion, per budgeted metric, for each value of the next label.

        The last prefix's answer is kept: a decision asks for it twice (state and mask).
        """
        key = tuple(int(j) for j in prefix)
        if getattr(self, "_needs_of", (None,))[0] != key:
            self._needs_of = (key, self._needs(prefix))
        return self._needs_of[1]

    def _bounds(self, prefix: Sequence[int]) -> dict[str, np.ndarray]:
        """The cost model's lower bounds (:meth:`SpaceCostModel.lower_bounds`) of the budgeted metrics only.

        Each factor contributes its minimum over its unchosen labels; only the metrics
        a bound needs are reduced (memory: weights plus the largest activation).
        """
        model, i = self.model, len(prefix)
        width = len(model.candidates[i]) if i < self.n_layers else 1
        limits = self.budget.limits()
        wanted = [m for m in ("latency_ms", "flops") if m in limits]
        if "memory_mb" in limits:
            wanted += ["param_mb", "activation_mb"]
        sums = {m: np.full(width, model.fixed[m]) for m in wanted}
        for factor, axes in zip(model.factors, model._axes, strict=True):
            index: list[object] = []
            keep = False
            for a in axes:
                index.append(prefix[a] if a < i else slice(None))
                keep = keep or a == i
            for m in wanted:
                sub = factor.costs[m][tuple(index)]
                if keep:  # a factor's labels are in space order: the next label's axis comes first
                    sub = np.asarray(sub).reshape(width, -1).min(axis=1)
                else:
                    sub = np.full(width, np.min(sub))
                sums[m] = np.maximum(sums[m], sub) if m == "activation_mb" else sums[m] + sub
        out = {m: sums[m] for m in ("latency_ms", "flops") if m in limits}
        if "memory_mb" in limits:
            out["memory_mb"] = sums["param_mb"] + sums["activation_mb"]
        return out

    def _needs(self, prefix: Sequence[int]) -> dict[str, np.ndarray]:
        i = len(prefix)
        if not self.separable:
            return self._bounds(prefix)
        n = self.n_candidates[i]
        rows, chosen = np.arange(i), np.asarray(prefix, dtype=int)
        out = {}
        for metric in self.budget.limits():
            if metric == "memory_mb":
                spent, act = self._spent(prefix)
                out[metric] = np.array([
                    spent + self._params[i, j] + self._memory_completion(i + 1, max(act, self._acts[i, j]))
                    for j in range(n)])
            else:
                cost = self._additive[metric]
                spent = self.model.fixed[metric] + float(cost[rows, chosen].sum())
                out[metric] = spent + cost[i, :n] + self._rest[metric][i + 1]
                if metric == "latency_ms" and self.beyond_cache is not None:
                    weights = self.model.fixed["param_mb"] + float(self._params[rows, chosen].sum())
                    out[metric] = out[metric] + self._beyond(weights + self._params[i, :n] + self._rest_params[i + 1])
        return out

    def _beyond(self, weights_mb: Any) -> Any:
        """The beyond-the-cache latency of ``weights_mb`` (0 without the term); it grows with the weights,
        so at a completion's least weights it is a lower bound of every completion's."""
        return self.beyond_cache(weights_mb) if self.beyond_cache is not None else 0.0

    def needs_batch(self, prefixes: np.ndarray) -> dict[str, np.ndarray]:
        """:meth:`needs` of ``B`` prefixes of one length at once: ``(B, W)`` arrays per budgeted metric.

        ``W`` is the widest label's number of values; entries past the next label's values
        are ``inf``. Latency and FLOPs of a separable model are vectorised
        (``spent + c_{i,j} + sum_{k>i} min_j c_{k,j}``); other cases go prefix by prefix.
        """
        prefixes = np.asarray(prefixes, dtype=int).reshape(len(prefixes), -1)
        batch, i = prefixes.shape
        width = int(self.n_candidates.max())
        limits = self.budget.limits()
        if self.separable:
            rows = np.arange(i)
            out = {}
            for metric in limits:
                if metric == "memory_mb":
                    out[metric] = self._memory_needs_batch(prefixes, width)
                    continue
                cost = self._additive[metric]
                spent = self.model.fixed[metric] + cost[rows, prefixes].sum(axis=1)
                out[metric] = spent[:, None] + cost[i][None, :] + self._rest[metric][i + 1]
                if metric == "latency_ms" and self.beyond_cache is not None:
                    weights = self.model.fixed["param_mb"] + self._params[rows, prefixes].sum(axis=1)
                    out[metric] = out[metric] + self._beyond(weights[:, None] + self._params[i][None, :]
                                                             + self._rest_params[i + 1])
            return out
        out = {m: np.full((batch, width), np.inf) for m in limits}
        n = self.n_candidates[i]
        for b, prefix in enumerate(prefixes):
            for metric, need in self._needs(prefix).items():
                out[metric][b, :n] = need
        return out

    def _memory_needs_batch(self, prefixes: np.ndarray, width: int) -> np.ndarray:
        """The memory row of :meth:`_needs` for ``B`` prefixes at once (a separable model): the weights so
        far and the next value's, plus the least completion given the largest activation, which takes
        few values (each completion computed once, as :meth:`_memory_completion` caches it)."""
        batch, i = prefixes.shape
        rows, n = np.arange(i), self.n_candidates[i]
        spent = self.model.fixed["param_mb"] + self._params[rows, prefixes].sum(axis=1)
        act = np.maximum(self.model.fixed["activation_mb"], self._acts[rows, prefixes].max(axis=1, initial=-np.inf))
        largest = np.maximum(act[:, None], self._acts[i, :n][None, :])
        values, where = np.unique(largest, return_inverse=True)
        completion = np.asarray([self._memory_completion(i + 1, float(v)) for v in values])[where.reshape(largest.shape)]
        out = np.full((batch, width), np.inf)
        out[:, :n] = spent[:, None] + self._params[i, :n][None, :] + completion
        return out

    def allowed_batch(self, needs: Mapping[str, np.ndarray]) -> np.ndarray:
        """The boolean ``(B, W)`` mask of :meth:`needs_batch`'s answer (padding is never allowed)."""
        mask: np.ndarray | None = None
        for metric, need in needs.items():
            ok = need <= self.budget.limits()[metric] * (1 + _EPS) + _EPS
            mask = ok if mask is None else mask & ok
        return mask if mask is not None else np.ones(0, dtype=bool)

    def allowed(self, prefix: Sequence[int]) -> np.ndarray:
        """Boolean mask over the next label's values given the choices ``prefix``."""
        mask = np.ones(self.n_candidates[len(prefix)], dtype=bool)
        for metric, need in self.needs(prefix).items():
            mask &= need <= self.budget.limits()[metric] * (1 + _EPS) + _EPS
        return mask

    def enumerate(self, limit: int = 20_000) -> list[tuple[int, ...]] | None:
        """Every architecture under the budget (value indices), or None if there are more than ``limit``.

        A depth-first walk that only follows allowed choices, so its cost is
        proportional to the feasible set (and the prefixes the bounds let through).
        """
        found: list[tuple[int, ...]] = []

        def walk(prefix: list[int]) -> bool:
            if len(prefix) == self.n_layers:
                if self.within(prefix):
                    found.append(tuple(prefix))
                return len(found) <= limit
            for j in np.flatnonzero(self.allowed(prefix)):
                if not walk([*prefix, int(j)]):
                    return False
            return True

        return found if walk([]) else None

    def _dearest_completion(self, prefix: Sequence[int]) -> dict[str, float]:
        """Upper bounds of every completion's latency and memory (separable models; else inf)."""
        if not self.separable:
            return {"latency_ms": math.inf, "memory_mb": math.inf, "flops": math.inf}
        i, rows, chosen = len(prefix), np.arange(len(prefix)), np.asarray(prefix, dtype=int)
        finite = {m: np.where(np.isfinite(g), g, -np.inf) for m, g in
                  (("latency_ms", self._additive["latency_ms"]), ("flops", self._additive["flops"]),
                   ("param_mb", self._params), ("activation_mb", self._acts))}
        out = {m: self.model.fixed[m] + float(self._additive[m][rows, chosen].sum())
               + float(finite[m][i:].max(axis=1).sum()) for m in ("latency_ms", "flops")}
        spent, act = self._spent(prefix)
        rest_act = float(finite["activation_mb"][i:].max()) if i < self.n_layers else -math.inf
        out["memory_mb"] = spent + float(finite["param_mb"][i:].max(axis=1).sum()) + max(act, rest_act)
        out["latency_ms"] += self._beyond(spent + float(finite["param_mb"][i:].max(axis=1).sum()))
        return out

    def most_probable(self, log_probs: Sequence[np.ndarray], node_limit: int = 200_000, *,
                      floor: Mapping[str, float] | None = None) -> tuple[int, ...] | None:
        """The architecture (value indices) of highest ``sum_l log_probs[l][v_l]`` that fits the budget.

        Exact branch and bound: labels in order, each label's allowed values from the most
        probable down; a branch stops when even the most probable completion cannot beat
        the best fit found. ``floor`` (``{metric: least cost}``) also asks the finished
        architecture to cost at least that much (a band under the budget: an export that uses
        its budget); on a separable model a branch whose dearest completion stays under the
        floor stops. None when nothing fits; a :class:`HwAwareError` when ``node_limit``
        prefixes were visited first (a space too large for an exact answer).
        """
        floor = dict(floor or {})
        logp = [np.asarray(lp, dtype=float) for lp in log_probs]
        if [len(lp) for lp in logp] != list(self.n_candidates):
            raise HwAwareError(f"log-probabilities of {[len(lp) for lp in logp]} values per label; the space has "
                               f"{list(self.n_candidates)}")
        rest = np.append(np.cumsum([lp.max() for lp in logp][::-1])[::-1], 0.0)
        best: list[Any] = [-math.inf, None]
        visited = [0]

        def walk(prefix: list[int], score: float) -> None:
            visited[0] += 1
            if visited[0] > node_limit:
                raise HwAwareError(f"the most probable architecture within the budget was not found in {node_limit} "
                                   "steps of the exact search; tighten the distribution or prune the space")
            i = len(prefix)
            if i == self.n_layers:
                if score > best[0] and self.within(prefix) and self._reaches(prefix, floor):
                    best[0], best[1] = score, tuple(prefix)
                return
            if floor and self.separable:
                dearest = self._dearest_completion(prefix)
                if any(dearest[m] < least * (1 - _EPS) - _EPS for m, least in floor.items()):
                    return
            allowed = self.allowed(prefix)
            for j in np.argsort(-logp[i], kind="stable"):
                if score + logp[i][j] + rest[i + 1] <= best[0]:
                    break  # values come most probable first: no later one can do better
                if allowed[j]:
                    walk([*prefix, int(j)], score + float(logp[i][j]))

        walk([], 0.0)
        return best[1]

    def _reaches(self, indices: Sequence[int], floor: Mapping[str, float]) -> bool:
        if not floor:
            return True
        cost = self.model.predict_indices(indices).metrics()
        return all(cost[m] >= least * (1 - _EPS) - _EPS for m, least in floor.items())

    def within_many(self, keys: Sequence[Sequence[int]], cost: Mapping[str, np.ndarray] | None = None) -> np.ndarray:
        """:meth:`within` of many finished architectures at once (one vectorised prediction; ``cost``: the
        model's :meth:`~nni_hwaware.cost_model.SpaceCostModel.predict_many` of ``keys`` when already made)."""
        if not len(keys):
            return np.ones(0, dtype=bool)
        if cost is None:
            cost = self.model.predict_many(np.asarray(keys, dtype=np.int64))
        ok = np.ones(len(keys), dtype=bool)
        for metric, limit in self.budget.limits().items():
            ok &= cost[metric] <= limit * (1 + _EPS) + _EPS
        return ok

    def within(self, indices: Sequence[int]) -> bool:
        """Whether the finished architecture (value index per label) fits every bound."""
        cost = self.model.predict_indices(indices).metrics()
        return all(cost[m] <= limit * (1 + _EPS) + _EPS for m, limit in self.budget.limits().items())

    def budget_left(self, prefix: Sequence[int]) -> np.ndarray:
        """Share of each bound still free after ``prefix`` and its cheapest completion (state feature)."""
        if len(prefix) == self.n_layers:
            cost = self.model.predict_indices(prefix).metrics()
            used = {m: cost[m] for m in self.budget.limits()}
        elif self.separable:
            i = len(prefix)
            used = {}
            for metric in self.budget.limits():
                if metric == "memory_mb":
                    spent, act = self._spent(prefix)
                    used[metric] = spent + self._memory_completion(i, act)
                else:
                    rows, chosen = np.arange(i), np.asarray(prefix, dtype=int)
                    used[metric] = (self.model.fixed[metric] + float(self._additive[metric][rows, chosen].sum())
                                    + self._rest[metric][i])
                    if metric == "latency_ms":
                        used[metric] += self._beyond(self._spent(prefix)[0] + float(self._rest_params[i]))
        else:
            used = {m: float(v.min()) for m, v in self.needs(prefix).items()}
        return np.asarray([(limit - used[m]) / limit for m, limit in self.budget.limits().items()],
                          dtype=np.float32)
