"""Search-space pruning of any NNI model space by hardware score, per (label, value).

The hardware score S = k * U * P, for every value ``v`` of every label ``l`` of the space:

.. math::

    U_{lv} = \\frac{F_{lv}}{T_{lv} \\cdot C}, \\qquad S_{lv} = k \\cdot U_{lv} \\cdot P_{lv}

with ``F``, ``T``, ``P`` the FLOPs, latency and parameters of what choosing ``v``
costs (:meth:`~nni_hwaware.cost_model.SpaceCostModel.choice_table`: the factors
that involve ``l`` with the other labels uniform), ``C`` the chip's peak. Kept:
``S >= threshold``, the threshold being the label's mean (``layer-mean``), the
mean over all labels (``global-mean``), a value (``value``) or the ``top`` best per
label (``top-k``). A label always keeps its best value, and values in
``always_keep`` stay. The result is the narrowed cost model and, with
:func:`~nni_hwaware.spaces.choices.narrow_space`, the narrowed NNI space: every strategy of NNI's accepts it.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from nni_hwaware.cost_model import SpaceCostModel
from nni_hwaware.errors import HwAwareError
from nni_hwaware.files import write_atomically, write_json
from nni_hwaware.pruning.modes import MODES

__all__ = ["ChoicePruneResult", "prune_choices"]



@dataclass(frozen=True)
class ChoicePruneResult:
    """The kept values per label, the narrowed cost model and the per-value report."""

    allowed: dict[str, list[Any]]
    model: SpaceCostModel
    report: pd.DataFrame

    def sizes(self) -> tuple[int, int]:
        """Number of networks before and after pruning."""
        kept = self.report.groupby("label", sort=False)["kept"]
        return math.prod(kept.size()), math.prod(kept.sum())

    def summary(self) -> str:
        """The report as readable text, one value a line, grouped by label."""
        shown = self.report.assign(kept=self.report.kept.map({True: "kept", False: "dropped"}))
        return shown.to_string(index=False, float_format=lambda v: f"{v:.4g}")

    def save(self, path: str | os.PathLike[str], named: Any, *, report_csv: str | os.PathLike[str] | None = None,
             settings: Mapping[str, Any] | None = None) -> Path:
        """Write the pruned space as JSON that ``--space`` accepts, and the report as CSV.

        For the project's spaces it is their config with fewer candidates per layer;
        for any other space ``{"space", "space_args", "allowed"}``: the space narrowed to
        the kept values (:meth:`~nni_hwaware.spaces.resolve.NamedSpace.narrowed`).
        """
        before, after = self.sizes()
        pruning = {**dict(settings or {}), "size_before": before, "size_after": after}
        if report_csv is not None:
            write_atomically(report_csv, self.report.to_csv(index=False))
        if getattr(named, "config", None) is not None:
            config = named.config.with_layer_candidates({k: list(v) for k, v in self.allowed.items()})
            return write_json(path, {"space": config.to_dict(), "pruning": pruning})
        return write_json(path, {"space": named.name, "space_args": dict(named.kwargs),
                                 "allowed": self.allowed, "pruning": pruning})


def prune_choices(model: SpaceCostModel, *, mode: str = "layer-mean", k: float = 1.0,
                  threshold: float | None = None, top: int | None = None,
                  always_keep: Sequence[Any] = (), peak_flops: float | None = None) -> ChoicePruneResult:
    """Prune ``model``'s space by ``S = k * U * P`` per (label, value); see the module docstring."""
    if mode not in MODES:
        raise HwAwareError(f"unknown pruning mode {mode!r}; use one of {', '.join(MODES)}")
    if not (math.isfinite(k) and k > 0):
        raise HwAwareError(f"k must be a positive number, got {k}")
    if mode == "value" and (threshold is None or not math.isfinite(threshold)):
        raise HwAwareError("mode 'value' needs a finite threshold (--threshold)")
    if mode == "top-k" and (top is None or top < 1):
        raise HwAwareError("mode 'top-k' needs top >= 1 (--top)")
    peak = peak_flops or model.peak_flops
    if not peak or not math.isfinite(peak) or peak <= 0:
        raise HwAwareError("pruning needs the chip's peak FLOP/s (profile the space, or give peak_flops)")
    table = model.choice_table()
    report = pd.DataFrame({"label": table.label, "value": table.value, "F": table.flops,
                           "T_ms": table.latency_ms, "P": table.params})
    with np.errstate(divide="ignore", invalid="ignore"):
        report["U"] = np.where(report["T_ms"] > 0, report["F"] / (report["T_ms"] / 1000 * peak), 0.0)
    report["S"] = k * report["U"] * report["P"]
    report = report[["label", "value", "F", "T_ms", "U", "P", "S"]]
    if not np.isfinite(report["S"]).all() or not (report["S"] > 0).any():
        raise HwAwareError(f"pruning scores on chip {model.chip!r} are all zero or not finite; check the "
                           "table's flops, latency_ms and params (re-profile the space)")
    by_label = report.groupby("label", sort=False)["S"]
    if mode == "layer-mean":
        report["threshold"] = by_label.transform("mean")
    elif mode == "global-mean":
        report["threshold"] = report["S"].mean()
    elif mode == "value":
        report["threshold"] = float(threshold)  # type: ignore[arg-type]
    else:
        report["threshold"] = by_label.transform(lambda s: s.nlargest(top).min())  # type: ignore[arg-type]
    best = report["S"] == by_label.transform("max")
    keep_values = {str(v) for v in always_keep}
    report["kept"] = (report["S"] >= report["threshold"]) | report["value"].map(lambda v: str(v) in keep_values)
    report["kept"] |= best & ~report.groupby("label", sort=False)["kept"].transform("any")
    kept = report["kept"].to_numpy()
    allowed: dict[str, list[Any]] = {}
    row = 0
    for label, values in zip(model.labels, model.candidates, strict=True):  # the report's row order
        allowed[label] = [v for j, v in enumerate(values) if kept[row + j]]
        row += len(values)
    return ChoicePruneResult(allowed, model.restrict(allowed), report)
