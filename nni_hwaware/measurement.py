"""What a trial measured, on the cost table's scale, and whether it fits a budget.

A search trial times its network on its machine in shared rounds with the space's reference
network and reports ``latency_ms``, ``memory_mb`` and ``latency_ratio`` (to the reference).
A busy machine times everything slow; the ratio does not move. So "over the budget as
measured" is judged on the table's scale: the measured ratio times the table's latency of the
reference (:data:`RATIO_LATENCY`, added by :func:`on_table_scale`), and memory as measured.

A network fits the budget as measured when the upper end of its measured 95 % interval does
(:attr:`Measurement.latency_high_ms`: the ratio's interval times the table's latency of the
reference): a measurement costs seconds and a training minutes to hours, so only networks measured
to fit are trained. A result that only measured its network (a screening measurement, or a search
trial that measured its network over the budget: ``not_trained``) is a :class:`Measurement` with
``trained`` False; it costs the search a measurement, not a training.

The search (its feasibility, :mod:`nni_hwaware.strategies.feasibility`, and ``best()``), a trial
deciding whether to train a network it measured, and the report all judge with :class:`Measurement`,
so they never disagree.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

__all__ = ["MEASURED", "NOT_TRAINED", "RATIO_LATENCY", "RATIO_LATENCY_HIGH", "Measurement", "measured_cost", "measured_costs",
           "measured_within", "on_table_scale", "positive"]

#: The metrics a trial measures on its chip (and the budget names they are judged against).
MEASURED = ("latency_ms", "memory_mb")

#: A result's measured latency on the cost table's scale: the ratio to the reference network
#: that the trial measured (both timed in the same rounds) times the table's latency of the reference.
RATIO_LATENCY = "ratio_latency_ms"
#: The upper end of that latency's 95 % interval (the ratio's interval times the table's reference latency).
RATIO_LATENCY_HIGH = "ratio_latency_high_ms"
#: A result's key that says it measured its network and did not train it.
NOT_TRAINED = "not_trained"


def positive(value: Any) -> float | None:
    """``value`` as a finite positive float, else None."""
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return number if math.isfinite(number) and number > 0 else None


def on_table_scale(metrics: Mapping[str, Any], reference_latency_ms: float | None) -> dict[str, Any]:
    """``metrics`` with :data:`RATIO_LATENCY` added where the result carries its ``latency_ratio``.

    A trial's ``latency_ms`` moves with its machine's speed (a busy CI runner, a laptop on battery
    measure everything 1.5-2x slow); its ratio to the reference, timed in the same rounds, does not.
    On the table's scale, a measured network is over a budget because the table mispredicted it, not
    because the machine was busy while it was timed.
    """
    ratio, reference = positive(metrics.get("latency_ratio")), positive(reference_latency_ms)
    if ratio is None or reference is None:
        return dict(metrics)
    out = {**metrics, RATIO_LATENCY: ratio * reference}
    if (high := positive(metrics.get("latency_ratio_ci95_high"))) is not None:
        out[RATIO_LATENCY_HIGH] = max(high, ratio) * reference
    return out


def measured_costs(metrics: Mapping[str, Any]) -> dict[str, float]:
    """The costs a result measured (:data:`MEASURED` metrics that are finite and positive); the latency
    on the table's scale (:data:`RATIO_LATENCY`) where the result has it."""
    costs = {m: value for m in MEASURED if (value := positive(metrics.get(m))) is not None}
    if (scaled := positive(metrics.get(RATIO_LATENCY))) is not None:
        costs["latency_ms"] = scaled
    return costs


def measured_cost(trial: Mapping[str, Any], metric: str) -> Any:
    """What a trial measured of ``metric`` (as it reported it); latency on the table's scale where it has it."""
    return trial.get(RATIO_LATENCY, trial.get(metric)) if metric == "latency_ms" else trial.get(metric)


def measured_within(trial: Mapping[str, Any], budget: Mapping[str, Any] | None) -> bool:
    """Whether a trial's measured ``latency_ms`` / ``memory_mb`` (where it reports them) fit ``budget``;
    the latency on the table's scale where it has it (:func:`measured_cost`): a busy machine that timed
    everything slow puts no network over the budget."""
    for metric, limit in (budget or {}).items():
        value = measured_cost(trial, metric)
        if metric in MEASURED and limit is not None and isinstance(value, (int, float)) \
                and float(value) > float(limit):
            return False
    return True


@dataclass(frozen=True)
class Measurement:
    """What one result measured of its network on the chip, on the cost table's scale.

    ``latency_ms`` is the point figure (:func:`measured_costs`), ``latency_high_ms`` the upper end of its
    95 % interval where the result has one; ``trained`` is False for a measurement alone (a screening
    measurement, or a trial that measured its network over the budget and did not train it).
    """

    latency_ms: float | None = None
    memory_mb: float | None = None
    latency_high_ms: float | None = None
    trained: bool = True

    @classmethod
    def of(cls, metrics: Mapping[str, Any]) -> Measurement:
        """The measurement a result's metrics carry (:func:`on_table_scale` applied first, where it can be)."""
        costs = measured_costs(metrics)
        high = positive(metrics.get(RATIO_LATENCY_HIGH))
        trained = not metrics.get(NOT_TRAINED) and metrics.get("default") is not None
        return cls(latency_ms=costs.get("latency_ms"), memory_mb=costs.get("memory_mb"),
                   latency_high_ms=high if high is not None and "latency_ms" in costs else None, trained=trained)

    @property
    def measured(self) -> bool:
        return self.latency_ms is not None or self.memory_mb is not None

    def costs(self) -> dict[str, float]:
        """The point figures measured (what a correction of the table learns from)."""
        return {m: v for m, v in (("latency_ms", self.latency_ms), ("memory_mb", self.memory_mb)) if v is not None}

    def upper(self, metric: str) -> float | None:
        """What must fit a limit of ``metric``: the interval's upper end where measured, else the point figure."""
        if metric == "latency_ms" and self.latency_high_ms is not None:
            return self.latency_high_ms
        return self.costs().get(metric)

    def over(self, budget: Mapping[str, Any] | None) -> list[str]:
        """The budget's metrics this measurement does not fit (judged on the interval's upper end)."""
        out = []
        for metric, limit in (budget or {}).items():
            value = self.upper(metric) if metric in MEASURED else None
            if value is not None and limit is not None and value > float(limit) * (1 + 1e-9):  # a tie fits
                out.append(metric)
        return out

    def fits(self, budget: Mapping[str, Any] | None) -> bool:
        return not self.over(budget)

