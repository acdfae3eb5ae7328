"""The export of a search checked on this machine against the baseline, in the target form.

The cost table is a prior: :func:`measured_export` times the exported network in shared rounds
with the baseline and, while it measures over a target (or well under it), exports the search's
distribution again with corrected limits, keeping the network that lands nearest the targets
as measured. The pipeline runs it after every search whose penalty has targets.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from nni_hwaware.cost_model import SpaceCostModel
from nni_hwaware.errors import HwAwareError
from nni_hwaware.strategies.gumbel.evaluator import is_rank_zero
from nni_hwaware.strategies.gumbel.job_config import GumbelSearchConfig
from nni_hwaware.strategies.gumbel.outcome import SearchOutcome

__all__ = ["EXPORT_CHECK_SECONDS", "UNDECIDED_FACTOR", "UNDER_MEASURED_OVER", "measured_export"]


#: Seconds of shared timing rounds per export check (a trial's check is 1 s; the export decides
#: what is retrained, so it gets a tighter interval).
EXPORT_CHECK_SECONDS = 4.0
#: A limit lowered under a network measured over sits this share under its table cost: well outside the
#: budget mask's rounding tolerance (1e-9), which would otherwise let the same network fit again.
UNDER_MEASURED_OVER = 1e-6
#: A check whose latency interval holds the target is timed again, this many times as long, and decided by
#: that: under load a 4 s check's interval reaches +-15 %, and a point estimate under the target then
#: measures over it as often as not.
UNDECIDED_FACTOR = 4.0


def measured_export(config: GumbelSearchConfig, space: Any, cost_model: SpaceCostModel, outcome: SearchOutcome,
                    log: Callable[[str], None] = print) -> SearchOutcome:
    """The export checked on this machine: the exported network timed in shared rounds with the
    baseline (:func:`~nni_hwaware.training.compare.measure_against_reference`), its memory measured.

    While it measures over a target (as a ratio to the baseline), the search's distribution is
    exported again (:func:`~nni_hwaware.strategies.gumbel.strategy.fitting_architecture`) with that
    target's limit scaled by target / measured: the table under-predicting a region of the space by
    12 % makes the next export aim 12 % lower (and always under the table's cost of the network
    measured over, so that a small excess does not export it again). One measured within but more
    than ``penalty.export_fill`` (when > 0) under a target lands closer: that limit is raised
    halfway (geometric mean) towards the lowest table cost of a network measured over it, or by
    target / measured when none was (the table over-predicting the region), and never above the
    target itself, so that the network kept fits its targets by the table as well. A check
    whose latency interval holds the target is timed again, ``UNDECIDED_FACTOR`` times as long, and
    decided by that. An export already measured is not measured again; that ends the checks. At most
    ``penalty.export_checks`` measurements; the network kept is the one within every target as
    measured that comes nearest them (the largest mean of its measured / target ratios), else the
    one nearest them from above. Each check goes into ``outcome.history``'s last record as
    ``export_checks`` and into ``arch.json``, the kept one into ``outcome.export_check``.

    Each check also records what was expected of its network before it was timed
    (``expected_latency_ratio`` / ``expected_memory_ratio``): its table ratio times how much this
    machine measured the earlier checks over the table (:func:`_check_scale`; the first check's is the
    table's own). That is the search's prediction once the table, a prior, has met the chip: an export
    chosen after a check that measured the region 10 % over the table is expected 10 % over its table cost.
    """
    from nni_hwaware.spaces.io import save_architecture
    from nni_hwaware.strategies.gumbel.strategy import fitting_architecture
    from nni_hwaware.training.compare import measure_against_reference

    penalty = config.penalty
    reference = space.baseline(cost_model)
    base = cost_model.predict(reference)
    targets = {"latency_ms": penalty.budget("latency_target", base.latency_ms),
               "memory_mb": penalty.budget("memory_target", base.memory_mb)}
    targets = {k: v for k, v in targets.items() if v is not None}
    if not targets or penalty.export_checks <= 0:
        return outcome
    shares = {k: v / (base.latency_ms if k == "latency_ms" else base.memory_mb) for k, v in targets.items()}
    timing = {"threads": config.cost.threads, "batch_size": config.cost.batch_size, "backend": config.cost.backend,
              "device": config.cost.device, "seed": config.seed, "seconds": EXPORT_CHECK_SECONDS}
    limits, arch, checks = dict(targets), outcome.arch, []
    over_costs: dict[str, float] = {}  # per target, the lowest table cost of a network measured over it
    unfit = ""
    for _ in range(penalty.export_checks):
        measured = measure_against_reference(space, arch, reference, **timing)
        retimed = _straddles(measured, shares.get("latency_ms"))
        if retimed:  # undecided on a busy machine: time it longer
            measured = measure_against_reference(space, arch, reference,
                                                 **{**timing, "seconds": timing["seconds"] * UNDECIDED_FACTOR})
        predicted = cost_model.predict(arch)
        ratios = {"latency_ms": measured["latency_ratio"],
                  "memory_mb": measured["memory_mb"] / measured["reference_memory_mb"]}
        over = {k: ratios[k] / shares[k] for k in targets if ratios[k] > shares[k]}
        table = {"latency": predicted.latency_ms / base.latency_ms, "memory": predicted.memory_mb / base.memory_mb}
        checks.append({"arch": dict(arch), "measured_latency_ratio": ratios["latency_ms"],
                       "measured_memory_ratio": ratios["memory_mb"],
                       "predicted_latency_ratio": table["latency"], "predicted_memory_ratio": table["memory"],
                       # what the search expected of it before timing it: the table corrected by the earlier checks
                       **{f"expected_{k}_ratio": v * _check_scale(checks, k) for k, v in table.items()},
                       "limits": dict(limits), "within": not over, "retimed": retimed})
        costs = {"latency_ms": predicted.latency_ms, "memory_mb": predicted.memory_mb}
        if over:
            for k, excess in over.items():
                over_costs[k] = min(over_costs.get(k, math.inf), costs[k])
                # strictly under the network measured over, however small the excess
                limits[k] = min(limits[k] / excess, over_costs[k] * (1 - UNDER_MEASURED_OVER))
        else:
            short = {k: shares[k] / ratios[k] for k in targets
                     if penalty.export_fill > 0 and ratios[k] < shares[k] * (1 - penalty.export_fill)}
            if not short:
                break
            for k, shortfall in short.items():  # never above the target: the export fits it by the table too
                raised = math.sqrt(limits[k] * over_costs[k]) if k in over_costs else limits[k] * shortfall
                limits[k] = min(raised, targets[k])
        try:
            arch = fitting_architecture(cost_model, outcome.probabilities, limits, fill=penalty.export_fill)
        except HwAwareError as err:  # nothing fits the corrected limits: keep the nearest measured
            unfit = f"; nothing fits the corrected limits ({err})"
            break
        if any(c["arch"] == arch for c in checks):
            break
    within = [c for c in checks if c["within"]]
    nearest = max(within, key=lambda c: sum(_measured(c, k) / shares[k] for k in targets)) if within else min(
        checks, key=lambda c: max(_measured(c, k) / shares[k] for k in targets))
    if len(checks) > 1 or not nearest["within"] or unfit:
        line = ", ".join(f"{_arch_short(c['arch'])}: latency {c['measured_latency_ratio']:.3f} "
                         f"(table {c['predicted_latency_ratio']:.3f}, expected {c['expected_latency_ratio']:.3f}), "
                         f"memory {c['measured_memory_ratio']:.3f}" for c in checks)
        verdict = "within the targets" if nearest["within"] else "none within the targets as measured; kept the nearest"
        log(f"export measured against the baseline on this machine: {line}; {verdict}{unfit}")
    outcome = dataclasses.replace(outcome, arch=dict(nearest["arch"]), history=[*outcome.history],
                                  export_check=dict(nearest))
    if outcome.history:
        outcome.history[-1] = {**outcome.history[-1], "export_checks": checks}
    if is_rank_zero():
        aims = {k: getattr(penalty, k) for k in ("latency_target", "memory_target") if getattr(penalty, k) is not None}
        save_architecture(outcome.arch_path, outcome.arch, space, alpha=penalty.alpha, **aims,
                          probabilities=outcome.probabilities, search_seconds=outcome.search_seconds,
                          chip=cost_model.chip, export_checks=checks)
    return outcome


def _check_scale(checks: Sequence[Mapping[str, Any]], kind: str) -> float:
    """How much this machine measured the checked exports over the table (``kind``: latency or memory): the
    geometric mean of their measured / predicted ratios, 1 before any. The table is a prior; the export's
    expected cost is its table cost times this, as the PPO search's correction of the table
    (:class:`~nni_hwaware.strategies.correction.CostCorrection`'s global scale) from its trials."""
    logs = [math.log(c[f"measured_{kind}_ratio"] / c[f"predicted_{kind}_ratio"]) for c in checks
            if c[f"measured_{kind}_ratio"] > 0 and c[f"predicted_{kind}_ratio"] > 0]
    return math.exp(sum(logs) / len(logs)) if logs else 1.0


def _straddles(measured: Mapping[str, Any], share: float | None) -> bool:
    """Whether the measured latency ratio's 95 % interval holds ``share`` (the target as a ratio)."""
    low, high = measured.get("latency_ratio_ci95_low"), measured.get("latency_ratio_ci95_high")
    return share is not None and low is not None and high is not None and low < share < high


def _measured(check: Mapping[str, Any], target: str) -> float:
    return check[f"measured_{target.split('_')[0]}_ratio"]


def _arch_short(arch: Mapping[str, Any]) -> str:
    values = list(arch.values())
    common = max(set(values), key=values.count) if values else None
    return " ".join(f"{k}:{v}" for k, v in arch.items() if v != common) or f"all {common}"
