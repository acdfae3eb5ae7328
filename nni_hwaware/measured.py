"""What a trial measured, on the cost table's scale, and whether it fits a budget.

A search trial times its network on its machine in shared rounds with the space's reference
network and reports ``latency_ms``, ``memory_mb`` and ``latency_ratio`` (to the reference).
A busy machine times everything slow; the ratio does not move. So "over the budget as
measured" is judged on the table's scale: the measured ratio times the table's latency of the
reference (:data:`RATIO_LATENCY`, added by :func:`on_table_scale`), and memory as measured.

The search (its correction and ``best()``), a trial deciding whether to train a network it
measured over the budget, and the report all judge with these functions, so they never disagree.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

__all__ = ["MEASURED", "RATIO_LATENCY", "measured_cost", "measured_costs", "measured_within", "on_table_scale",
           "positive"]

#: The metrics a trial measures on its chip (and the budget names they are judged against).
MEASURED = ("latency_ms", "memory_mb")

#: A result's measured latency on the cost table's scale: the ratio to the reference network
#: that the trial measured (both timed in the same rounds) times the table's latency of the reference.
RATIO_LATENCY = "ratio_latency_ms"


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
    return {**metrics, RATIO_LATENCY: ratio * reference}


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
