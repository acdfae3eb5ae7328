"""``--refit``: one more search whose targets are corrected by what the first one measured."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from nni_hwaware.errors import HwAwareError
from nni_hwaware.strategies.gumbel.job_config import GumbelSearchConfig
from nni_hwaware.strategies.gumbel.points import target_share

__all__ = ["check_refit", "refit_changes"]


def check_refit(config: GumbelSearchConfig) -> None:
    """A one-line error unless ``--refit`` has targets to correct and a baseline to measure against."""
    if config.penalty.latency_target is None and config.penalty.memory_target is None:
        raise HwAwareError("--refit corrects the penalty's targets; this config has none (set penalty.latency_target "
                           "and/or memory_target, e.g. \"45%\")")
    if not config.baseline:
        raise HwAwareError("--refit needs the found network measured against the baseline; set baseline: true")


def refit_changes(config: GumbelSearchConfig, summary: Mapping[str, Any]) -> dict[str, Any]:
    """The config changes of one more search whose targets are corrected by what the first one measured.

    Each target (as a share of the baseline) is multiplied by the found network's predicted
    ratio over its measured one: a network the table predicted at 45 % of the baseline and
    that measured 50 % gets a target of 40.5 %, so the next search lands nearer the user's
    45 % as measured. The refit reads the first run's cost table and writes to ``<out>/refit``.
    """
    check_refit(config)
    penalty = config.penalty
    comparison = ((summary.get("searched") or {}).get("extra") or {}).get("vs_baseline") or {}
    if not comparison:
        raise HwAwareError("--refit needs the found network measured against the baseline; set baseline: true")
    baseline = summary.get("baseline") or {}
    out = Path(config.out)
    changes: dict[str, Any] = {"out": str(out / "refit")}
    table = out / "cost_table.csv"
    if config.cost.table is None and table.is_file():
        changes["cost.table"] = str(table)
    for name, target, measured, predicted, reference in (
            ("latency_target", penalty.latency_target, comparison.get("latency_ratio"),
             comparison.get("predicted_latency_ratio"), baseline.get("predicted_latency_ms")),
            ("memory_target", penalty.memory_target, comparison.get("memory_ratio"),
             comparison.get("predicted_memory_ratio"), baseline.get("predicted_memory_mb"))):
        if target is None:
            continue
        if not (measured and predicted):
            raise HwAwareError(f"--refit: the first search's {name.split('_')[0]} ratio was not measured and "
                               "predicted both; nothing to correct it by")
        share = target_share(target, reference, name)
        if share is None:
            raise HwAwareError(f"--refit: the baseline's predicted cost is unknown; cannot read {name} {target!r} "
                               "as a share of it")
        changes[f"penalty.{name}"] = f"{100 * share * float(predicted) / float(measured):.4g}%"
    return changes
