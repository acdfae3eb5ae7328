"""Hardware budgets from the cost table, and which choices keep a network inside them.

Seed 000 step 2: the search must stay inside an upper bound of what a network may
use on the chip. A :class:`Budget` bounds latency and/or memory and/or FLOPs;
:class:`BudgetMask` answers, while an architecture is chosen layer by layer,
which candidates of the next layer still leave a way to finish under the budget:
it looks ahead with the cheapest completion of the remaining layers.

Latency and FLOPs add up over layers, so the cheapest completion is the sum of
per-layer minima. Memory is weights plus the largest activation working set
(:mod:`nni_hwaware.cost_table.predict`); its cheapest completion is found
exactly by trying every activation cap ``t`` of the remaining layers:
``min_t [ sum_k min{P_kj : A_kj <= t} + max(a, t) ]``. For one budgeted metric the
mask is exact: no sampled architecture is over budget and none that fits is
excluded. With several, each is checked separately, which is necessary but not
sufficient, so :meth:`BudgetMask.within` is checked on the finished architecture.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass

import numpy as np

from nni_hwaware.cost_table.predict import CostModel
from nni_hwaware.errors import HwAwareError
from nni_hwaware.options import from_mapping

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

    @classmethod
    def from_dict(cls, data: Mapping[str, float] | None) -> Budget:
        return from_mapping(cls, data, "budget keys")

    def limits(self) -> dict[str, float]:
        return {k: v for k, v in asdict(self).items() if v is not None}


class BudgetMask:
    """Feasible candidates per layer under a :class:`Budget`, from a :class:`CostModel`."""

    def __init__(self, model: CostModel, budget: Budget) -> None:
        self.model, self.budget = model, budget
        self.n_layers = len(model.labels)
        self.n_candidates = np.array([len(c) for c in model.candidates])
        costs = model.layer_costs
        self._additive = {m: np.nan_to_num(costs[m], nan=np.inf) for m in ("latency_ms", "flops")}
        self._params = np.nan_to_num(costs["param_mb"], nan=np.inf)
        self._acts = np.nan_to_num(costs["activation_mb"], nan=np.inf)
        # suffix minima: cheapest cost of layers i..L-1
        self._rest = {m: np.append(np.cumsum(c.min(axis=1)[::-1])[::-1], 0.0) for m, c in self._additive.items()}
        self._fixed = {m: model.fixed_costs[m] for m in ("latency_ms", "flops")}
        cheapest = self.cheapest_costs()
        over = {m: (cheapest[m], limit) for m, limit in budget.limits().items() if cheapest[m] > limit + _EPS}
        if over:
            text = ", ".join(f"{m} {c:.4g} > budget {b:.4g}" for m, (c, b) in over.items())
            raise HwAwareError(
                f"no architecture of space {model.config.name!r} fits the budget on chip {model.chip!r}: "
                f"the cheapest achievable is {text}; raise the budget"
            )

    # -- the lookahead -------------------------------------------------------------
    def _memory_completion(self, start: int, act: float) -> float:
        """Least (remaining weights + working set) over completions of layers ``start..``."""
        if start == self.n_layers:
            return act
        params, acts = self._params[start:], self._acts[start:]
        best = math.inf
        for cap in np.unique(acts[np.isfinite(acts)]):
            allowed = np.where(acts <= cap, params, np.inf).min(axis=1)
            if np.isfinite(allowed).all():
                best = min(best, float(allowed.sum()) + max(act, float(cap)))
        return best

    def cheapest_costs(self) -> dict[str, float]:
        """The lowest achievable latency, FLOPs and memory (each on its own)."""
        out = {m: self._fixed[m] + float(self._rest[m][0]) for m in self._additive}
        out["memory_mb"] = self.model.fixed_costs["param_mb"] + self._memory_completion(
            0, self.model.fixed_activation_mb)
        return out

    def allowed(self, prefix: Sequence[int]) -> np.ndarray:
        """Boolean mask over the next layer's candidates given the choices ``prefix``."""
        i = len(prefix)
        n = self.n_candidates[i]
        mask = np.ones(n, dtype=bool)
        rows = np.arange(i)
        chosen = np.asarray(prefix, dtype=int)
        for metric, limit in self.budget.limits().items():
            if metric == "memory_mb":
                spent = self.model.fixed_costs["param_mb"] + float(self._params[rows, chosen].sum())
                act = max([self.model.fixed_activation_mb, *self._acts[rows, chosen]])
                need = np.array([
                    spent + self._params[i, j] + self._memory_completion(i + 1, max(act, self._acts[i, j]))
                    for j in range(n)
                ])
            else:
                cost = self._additive[metric]
                spent = self._fixed[metric] + float(cost[rows, chosen].sum())
                need = spent + cost[i, :n] + self._rest[metric][i + 1]
            mask &= need <= limit * (1 + _EPS) + _EPS
        return mask

    def enumerate(self, limit: int = 20_000) -> list[tuple[int, ...]] | None:
        """Every architecture under the budget (candidate indices), or None if there are more than ``limit``.

        A depth-first walk that only follows allowed choices, so its cost is
        proportional to the feasible set, not to the space.
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

    def within(self, indices: Sequence[int]) -> bool:
        """Whether the finished architecture (candidate index per layer) fits every bound."""
        arch = {label: names[j] for label, names, j in zip(self.model.labels, self.model.candidates, indices, strict=True)}
        cost = self.model.predict(arch).metrics()
        return all(cost[m] <= limit * (1 + _EPS) + _EPS for m, limit in self.budget.limits().items())

    def budget_left(self, prefix: Sequence[int]) -> np.ndarray:
        """Share of each bound still free after ``prefix`` and the cheapest completion (state feature)."""
        i = len(prefix)
        rows, chosen = np.arange(i), np.asarray(prefix, dtype=int)
        out = []
        for metric, limit in self.budget.limits().items():
            if metric == "memory_mb":
                spent = self.model.fixed_costs["param_mb"] + float(self._params[rows, chosen].sum())
                act = max([self.model.fixed_activation_mb, *self._acts[rows, chosen]])
                used = spent + self._memory_completion(i, act)
            else:
                used = self._fixed[metric] + float(self._additive[metric][rows, chosen].sum()) + self._rest[metric][i]
            out.append((limit - used) / limit)
        return np.asarray(out, dtype=np.float32)
