"""Whether a network fits the chip's budget: one object owns the budget, the mask, the table's
correction by what the chip measured and the chance constraint on what a search proposes.

The table is a prior; what a trial measures on the chip wins. :class:`Feasibility` holds

* the :class:`~nni_hwaware.strategies.budget.Budget` and its
  :class:`~nni_hwaware.strategies.budget.BudgetMask` (which values leave a way to finish under
  the budget), the mask's limits moved to the budget *as measured* once a correction is fitted;
* the :class:`~nni_hwaware.strategies.correction.CostCorrection` of the table's predictions from
  the measured costs (on the table's scale, :mod:`nni_hwaware.measurement`), and each candidate's
  probability of measuring over the budget;
* what every result measured (:class:`~nni_hwaware.measurement.Measurement`) and whether it fits
  (the upper end of its measured interval must);
* the allowance each proposal's probability of measuring over is spent from.

Two accountings of that allowance. **Measured first** (``measure_first``, the default): a network
is measured (seconds) before it is trained (minutes to hours), and one measured over the budget is
not trained, so a proposal over the budget costs a measurement, not a training; the search may
spend ``1 - 1 / measurements_per_training`` of its measurements on networks that measure over
(1.5 measurements per training: a third), which lets it propose at the budget's edge, where the
best networks are. **Trained as proposed** (``measure_first`` False): every proposal is trained,
and only ``risk`` of them may be expected over the budget as measured.

The search (:class:`~nni_hwaware.strategies.ppo.search.PPOSearch`), the trial that decides whether
to train the network it measured (:mod:`nni_hwaware.trial.run`) and the report judge a
measurement with the same :meth:`~nni_hwaware.measurement.Measurement.fits`.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np

from nni_hwaware.cost_model import SpaceCostModel
from nni_hwaware.measurement import Measurement
from nni_hwaware.strategies.budget import Budget, BudgetMask
from nni_hwaware.strategies.correction import CORRECTED, CostCorrection
from nni_hwaware.strategies.feasibility_options import FeasibilityOptions

__all__ = ["Feasibility", "FeasibilityOptions"]

#: The feasible set is walked under limits this many times the mask's, then filtered as the mask moves.
WALK_SLACK = 1.25
#: The walk under the looser limits stops past this many times the list's limit (then the mask walks).
WALK_LIMIT = 4


class Feasibility:
    """The budget as measured, for one search over ``model`` (see the module docstring), as ``options`` say
    (:class:`~nni_hwaware.strategies.feasibility_options.FeasibilityOptions`; ``correct`` False: the table
    is trusted, no correction).

    Architectures are keys: tuples of value indices in the model's label order.
    """

    def __init__(self, model: SpaceCostModel, budget: Budget, options: FeasibilityOptions | None = None) -> None:
        self.options = options = options or FeasibilityOptions()
        self.model, self.budget = model, budget
        #: The table's predictions corrected by what the chip measured (None: the table is trusted).
        self.correction = CostCorrection(
            [len(v) for v in model.candidates], delta=options.delta, shrinkage=options.shrinkage,
            prior_margin=options.prior_margin, use_margin=options.margin, local=options.margin_model == "gp",
            risk_floor=options.risk_floor) if options.correct else None
        self.mask = BudgetMask(model, budget)
        self.limits = budget.limits()
        self.measure_first = bool(options.measure_first)
        #: The share of proposals that may be expected (or found) over the budget as measured.
        self.share = (1.0 - 1.0 / options.measurements_per_training if options.measure_first
                      else float(options.risk))
        self._predicted: dict[tuple[int, ...], dict[str, float]] = {}
        #: What each result measured on the chip.
        self.measured: dict[tuple[int, ...], Measurement] = {}
        #: Each proposal's probability of measuring over the budget when it was proposed (the risk spent).
        self.risk: dict[tuple[int, ...], float] = {}
        #: Why no network can fit the budget as measured (None while some can): the search then stops.
        self.unreachable: str | None = None
        #: The draws' mask is the mask with its limits divided by this (>= 1) during one proposal: :meth:`tighten`.
        self.squeeze = 1.0
        self._draw_mask: BudgetMask | None = None
        self.remask()

    # -- the table's predictions ---------------------------------------------------------
    def predicted(self, key: tuple[int, ...]) -> dict[str, float]:
        """The table's prediction of an architecture, cached."""
        if key not in self._predicted:
            self._predicted[key] = self.model.predict_indices(list(key)).metrics()
        return self._predicted[key]

    def corrected(self, key: tuple[int, ...]) -> dict[str, float]:
        """The table's prediction corrected by the measurements so far, and each corrected metric's bound
        (the corrected value times the margin) as ``<metric>_bound``."""
        out = dict(self.predicted(key))
        if self.correction is not None:
            for metric in CORRECTED:
                if self.correction.count(metric):
                    out[f"{metric}_bound"] = self.correction.bound(metric, key, out[metric])
                    out[metric] *= self.correction.factor(metric, key)
        return out

    def corrected_limits(self) -> list[str]:
        """The budgeted metrics the chip's measurements correct."""
        return [m for m in CORRECTED if m in self.budget.limits()] if self.correction is not None else []

    # -- what was measured -----------------------------------------------------------------
    def learn(self, key: tuple[int, ...], measurement: Measurement) -> None:
        """Keep what a result measured; fit the correction to it and move the mask's budget."""
        if not measurement.measured:
            return
        self.measured[key] = measurement
        if self.correction is not None and self.correction.add(key, self.predicted(key), measurement.costs()):
            self.remask()

    def measured_within(self, key: tuple[int, ...]) -> bool:
        """Whether what was measured of ``key`` (if anything) fits the budget."""
        measurement = self.measured.get(key)
        return measurement is None or measurement.fits(self.budget.limits())

    def measured_over(self, keys: Iterable[tuple[int, ...]]) -> int:
        """How many of ``keys`` measured over the budget."""
        return sum(not self.measured_within(k) for k in keys)

    # -- the mask and the checks -------------------------------------------------------------
    def remask(self) -> None:
        """The mask's budget: each corrected metric's limit as measured
        (:meth:`CostCorrection.limit_as_measured`) over the margin and the lowest correction.

        No architecture whose corrected prediction times the margin fits is masked; a finished
        draw is then checked exactly (:meth:`fits_all`).
        """
        limits = self.budget.limits()
        cheapest = self.mask.cheapest_costs()
        lines = []
        for metric in self.corrected_limits():
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
            return  # the search stops; the mask stays as it was
        budget = Budget(**limits)
        if budget != self.mask.budget:
            self.mask = BudgetMask(self.model, budget)
            self.limits = budget.limits()
            self._listed = False

    def feasible_list(self, limit: int) -> list[tuple[int, ...]] | None:
        """Every architecture that fits (:meth:`fits_all`), listed once per mask; None when more than ``limit``."""
        if not getattr(self, "_listed", False):
            feasible = self._enumerate(limit)
            self._feasible = None if feasible is None else [
                k for k, ok in zip(feasible, self.fits_all(list(feasible)) if feasible else [], strict=True) if ok]
            self._listed = True
        return self._feasible

    def _enumerate(self, limit: int) -> list[tuple[int, ...]] | None:
        """``self.mask.enumerate(limit)``, the same list in the same order, at a fraction of its cost.

        The mask moves with every measurement (the correction moves the limits as measured), and the mask's
        walk costs in proportion to the prefixes its bounds let through. So the space is walked once under
        limits :data:`WALK_SLACK` times the mask's, and each later mask within those limits filters that
        walk with one vectorised prediction (:meth:`BudgetMask.within_many`: exactly the networks the
        mask's own walk finds, since its look-ahead never cuts a network that fits).
        """
        limits = self.mask.budget.limits()
        walked = getattr(self, "_walked", None)
        if walked is None or set(walked[0]) != set(limits) or any(limits[m] > walked[0][m] for m in limits):
            loose = {m: v * WALK_SLACK for m, v in limits.items()}
            walked = self._walked = (loose, BudgetMask(self.model, Budget(**loose)).enumerate(WALK_LIMIT * limit))
        keys = walked[1]
        if keys is None:  # too many under the looser limits: the mask's own walk
            return self.mask.enumerate(limit)
        found = [k for k, ok in zip(keys, self.mask.within_many(keys), strict=True) if ok]
        return found if len(found) <= limit else None

    @property
    def draw_mask(self) -> BudgetMask:
        """The mask a search draws under: :attr:`mask`, its limits divided by :attr:`squeeze`."""
        if self.squeeze == 1.0:
            return self.mask
        if self._draw_mask is None:
            limits = {m: v / self.squeeze for m, v in self.mask.budget.limits().items()}
            self._draw_mask = BudgetMask(self.model, Budget(**limits))
        return self._draw_mask

    def tighten(self, rejected: list[tuple[int, ...]]) -> bool:
        """Draw under a tighter mask after a round of draws that :meth:`fits_all` all rejected.

        The mask's limits are as loose as the lowest correction (it cuts no network that fits), and a
        draw tends to fill them; where the measurements disagree, each network's own corrected bound is
        much tighter, and draws that fill the mask's limits almost never fit. The draws' limits are then
        divided by the median excess of ``rejected`` (a network's largest ratio of a bound to its limit;
        by 2 % to 4x a round) until :meth:`untighten`. False, and the draws' mask unchanged, where that
        would leave not even the cheapest network within them.
        """
        ratio = float(np.clip(np.median(self.excess(rejected)), 1.02, 4.0)) if rejected else 1.02
        squeeze = self.squeeze * ratio
        cheapest = self.mask.cheapest_costs()
        if any(cheapest[m] > v / squeeze * (1 - 1e-6) for m, v in self.mask.budget.limits().items()):
            return False
        self.squeeze, self._draw_mask = squeeze, None
        return True

    def untighten(self) -> None:
        """Draw under the mask again (a proposal's :meth:`tighten` ends with it)."""
        self.squeeze, self._draw_mask = 1.0, None

    def excess(self, keys: list[tuple[int, ...]]) -> np.ndarray:
        """Each architecture's largest ratio of a cost to its limit (at most 1: it fits, as :meth:`fits_all`
        judges): the table's prediction to the mask's limit, and each corrected metric's bound to its
        limit as measured."""
        if not len(keys):
            return np.ones(0)
        array = np.asarray(keys, dtype=np.int64)
        predicted_all = self.mask.model.predict_many(array)
        out = np.max([np.asarray(predicted_all[m], dtype=float) / v for m, v in self.mask.budget.limits().items()],
                     axis=0)
        for metric in self.corrected_limits():
            if not self.correction.count(metric) and self.correction.margin(metric) == 1.0:
                continue
            bounds = self.correction.bounds(metric, array, predicted_all[metric])
            out = np.maximum(out, bounds / self.correction.limit_as_measured(metric, self.budget.limits()[metric]))
        return out

    def exact_check(self) -> bool:
        """Whether a finished draw must be checked (the mask alone is exact for one table-only bound)."""
        return len(self.limits) > 1 or not self.mask.exact or bool(self.corrected_limits())

    def fits_all(self, keys: list[tuple[int, ...]]) -> np.ndarray:
        """Within every bound by the table, and within each corrected metric's limit as measured with the
        margin (one Gaussian-process call per metric)."""
        if not len(keys):
            return np.ones(0, dtype=bool)
        predicted_all = self.mask.model.predict_many(np.asarray(keys, dtype=np.int64))
        ok = self.mask.within_many(keys, predicted_all)
        for metric in self.corrected_limits():
            if not ok.any():
                break
            if not self.correction.count(metric) and self.correction.margin(metric) == 1.0:
                continue
            at = np.flatnonzero(ok)
            predicted = predicted_all[metric][at]
            bounds = self.correction.bounds(metric, np.asarray([keys[i] for i in at], dtype=np.int64), predicted)
            limit = self.correction.limit_as_measured(metric, self.budget.limits()[metric])
            ok[at[bounds > limit * (1 + 1e-9)]] = False
        return ok

    def over_probability(self, keys: list[tuple[int, ...]]) -> np.ndarray:
        """Each architecture's probability of measuring over some corrected limit (0 without a correction)."""
        fits = np.ones(len(keys))
        if not len(keys) or not self.corrected_limits():
            return 1.0 - fits
        predicted_all = self.mask.model.predict_many(np.asarray(keys, dtype=np.int64))
        for metric in self.corrected_limits():
            predicted = predicted_all[metric]
            fits *= 1.0 - self.correction.over_probability(metric, np.asarray(keys, dtype=np.int64), predicted,
                                                           self.budget.limits()[metric])
        return 1.0 - fits

    # -- the chance constraint -------------------------------------------------------------
    def propose(self, key: tuple[int, ...], probability: float) -> None:
        """Record a proposal and the probability it had of measuring over."""
        self.risk[key] = float(probability)

    def allowance(self, unresolved: Iterable[tuple[int, ...]]) -> float:
        """What the next proposal may risk: the allowed share of the proposals so far and this one, less the
        risk spent and the risk of the proposals not measured yet (``unresolved``).

        Measured first, the risk spent is how many proposals measured over; trained as proposed, it is the
        larger of the finished ones' expected risk and how many measured over (a lucky run does not
        earn more risk).
        """
        if not self.corrected_limits():
            return math.inf
        unresolved = set(unresolved)
        over = float(self.measured_over(self.risk))
        if self.measure_first:
            spent = over
        else:
            spent = max(sum(p for k, p in self.risk.items() if k not in unresolved), over)
        return self.share * (len(self.risk) + 1) - spent - sum(self.risk.get(k, 0.0) for k in unresolved)

    def allowed(self, risk: np.ndarray, unresolved: Iterable[tuple[int, ...]]) -> np.ndarray:
        """Which candidates fit the allowance (the least risky ones when none does)."""
        allowed = risk <= self.allowance(unresolved) + 1e-12
        return allowed if allowed.any() else risk <= float(risk.min()) + 1e-12

    # -- state ---------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        return {"measured": [[list(k), {**m.costs(), **({"latency_high_ms": m.latency_high_ms}
                                                           if m.latency_high_ms is not None else {}),
                                          "trained": m.trained}]
                             for k, m in self.measured.items()],
                "correction": self.correction.state_dict() if self.correction is not None else None,
                "risk": [[list(k), p] for k, p in self.risk.items()]}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self.measured.clear()
        self.measured.update({tuple(k): Measurement(latency_ms=_maybe(v.get("latency_ms")),
                                               memory_mb=_maybe(v.get("memory_mb")),
                                               latency_high_ms=_maybe(v.get("latency_high_ms")),
                                               trained=bool(v.get("trained", True)))
                              for k, v in state.get("measured", [])})
        if self.correction is not None:
            self.correction.load_state_dict(state.get("correction") or {})
            self.remask()
        self.risk = {tuple(k): float(p) for k, p in state.get("risk", [])}


def _maybe(value: Any) -> float | None:
    return None if value is None else float(value)
