"""Search-space pruning by hardware score (seed 001 steps 3-4).

For block ``j`` in layer ``i``, from the cost table of the target chip:

.. math::

    U_{ij} = \\frac{F_{ij}}{T_{ij} \\cdot C}, \\qquad S_{ij} = k \\cdot U_{ij} \\cdot P_{ij}

with ``F`` the block's operations (multiplies + adds), ``T`` its latency on the
chip, ``C`` the chip's theoretical peak and ``P`` its parameter (kernel) count. A
block is kept when ``S_ij >= threshold``; the threshold is the mean score of its
layer (``layer-mean``, the default), the mean over all layers (``global-mean``),
a given value (``value``), or the ``top`` best of each layer (``top-k``). A layer
never loses all its candidates: its best-scoring block always stays. Blocks named
in ``always_keep`` stay too (e.g. ``skip``, whose score is 0 since it has no
parameters).

The result is the same space with fewer candidates per layer (a new
:class:`~nni_hwaware.spaces.SpaceConfig`), which every strategy accepts, and a
report of every block's F, T, U, P, S and whether it was kept.
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from nni_hwaware.cost_table.predict import CostModel
from nni_hwaware.errors import HwAwareError
from nni_hwaware.files import write_atomically, write_json
from nni_hwaware.spaces.config import SpaceConfig

__all__ = ["MODES", "PruneResult", "prune_space"]

MODES = ("layer-mean", "global-mean", "value", "top-k")


@dataclass(frozen=True)
class PruneResult:
    """The pruned space and the per-block report that explains it."""

    config: SpaceConfig
    report: pd.DataFrame
    settings: dict[str, object]

    def sizes(self) -> tuple[int, int]:
        """Number of architectures before and after pruning."""
        kept = self.report.groupby("layer", sort=False)["kept"]
        return math.prod(kept.size()), math.prod(kept.sum())

    def save(self, path: str | os.PathLike[str], report_csv: str | os.PathLike[str] | None = None) -> Path:
        """Write the pruned space as JSON (what ``--space`` accepts) and the report as CSV."""
        before, after = self.sizes()
        data = {"space": self.config.to_dict(), "pruning": {**self.settings, "size_before": before,
                                                             "size_after": after}}
        if report_csv is not None:
            write_atomically(report_csv, self.report.to_csv(index=False))
        return write_json(path, data)

    def summary(self) -> str:
        """The report as readable text, one block a line, grouped by layer."""
        shown = self.report.assign(kept=self.report.kept.map({True: "kept", False: "dropped"}))
        return shown.to_string(index=False, float_format=lambda v: f"{v:.4g}")


def prune_space(model: CostModel, *, mode: str = "layer-mean", k: float = 1.0,
                threshold: float | None = None, top: int | None = None,
                always_keep: Sequence[str] = ()) -> PruneResult:
    """Prune ``model``'s space by the score ``S = k * U * P`` on ``model``'s chip."""
    if mode not in MODES:
        raise HwAwareError(f"unknown pruning mode {mode!r}; use one of {', '.join(MODES)}")
    if not (math.isfinite(k) and k > 0):
        raise HwAwareError(f"k must be a positive number, got {k}")
    if mode == "value" and (threshold is None or not math.isfinite(threshold)):
        raise HwAwareError("mode 'value' needs a finite threshold (--threshold)")
    if mode == "top-k" and (top is None or top < 1):
        raise HwAwareError("mode 'top-k' needs top >= 1 (--top)")
    report = model.block_table()[["layer", "block", "flops", "latency_ms", "utilisation", "params"]]
    peak = model.fixed["peak_flops"].iloc[0]
    report = report.rename(columns={"flops": "F", "latency_ms": "T_ms", "utilisation": "U", "params": "P"})
    report["U"] = report["F"] / (report["T_ms"] / 1000 * peak)
    report["S"] = k * report["U"] * report["P"]
    if not np.isfinite(report["S"]).all() or not (report["S"] > 0).any():
        raise HwAwareError(
            f"pruning scores on chip {model.chip!r} are all zero or not finite; check the table's "
            "flops, latency_ms and params columns (re-profile the space)"
        )
    by_layer = report.groupby("layer", sort=False)["S"]
    if mode == "layer-mean":
        report["threshold"] = by_layer.transform("mean")
    elif mode == "global-mean":
        report["threshold"] = report["S"].mean()
    elif mode == "value":
        report["threshold"] = float(threshold)  # type: ignore[arg-type]
    else:
        report["threshold"] = by_layer.transform(lambda s: s.nlargest(top).min())  # type: ignore[arg-type]
    best = report["S"] == by_layer.transform("max")
    report["kept"] = (report["S"] >= report["threshold"]) | report["block"].isin(list(always_keep))
    # A layer never loses every candidate: its best-scoring block stays.
    report["kept"] |= best & ~report.groupby("layer", sort=False)["kept"].transform("any")
    layer_candidates = {
        layer: list(group.loc[group.kept, "block"]) for layer, group in report.groupby("layer", sort=False)
    }
    pruned = model.config.with_layer_candidates(layer_candidates)
    settings = {"mode": mode, "k": k, "threshold": threshold, "top": top, "always_keep": list(always_keep),
                "chip": model.chip, "backend": model.backend, "batch_size": model.batch_size}
    return PruneResult(pruned, report, settings)
