"""A cost model from a plain table of per-choice costs.

For tabular benchmarks and for costs measured elsewhere (nn-Meter, a vendor's
profiler): one row per (label, value) with what choosing that value costs, and
optionally rows with label ``_fixed`` for what every network costs::

    label,value,latency_ms,memory_mb,flops,params
    _fixed,,0.21,0.05,120000,2000
    edge_0,conv_3x3,0.40,0.02,400000,1200
    edge_0,skip,0.01,0.00,0,0

Costs add up over labels. ``memory_mb`` adds up too, unless an ``activation_mb``
column is given: then ``memory_mb - activation_mb`` is weight memory (adds up) and
``activation_mb`` the choice's activation working set (the network's is the
largest), as in a profiled space.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from nni_hwaware.cost_model.model import CostFactor, SpaceCostModel
from nni_hwaware.errors import HwAwareError

__all__ = ["FIXED_LABEL", "REQUIRED", "choice_cost_model", "load_choice_table"]

FIXED_LABEL = "_fixed"
REQUIRED = ("label", "value", "latency_ms", "memory_mb", "flops", "params")


def load_choice_table(path: str | os.PathLike[str]) -> pd.DataFrame:
    """Read a per-choice cost table (CSV) as data; a file that is not one says why."""
    path = Path(path)
    if not path.is_file():
        raise HwAwareError(f"per-choice cost table {str(path)!r} does not exist; fix the path")
    try:
        return pd.read_csv(path, dtype={"label": str, "value": str}, keep_default_na=False,
                           na_values={c: ["", "nan", "NaN"] for c in REQUIRED[2:]})
    except (ValueError, OSError) as err:
        raise HwAwareError(f"cannot read per-choice cost table {str(path)!r}: {err}".replace("\n", " ")) from None


def _match(value: Any, values: Sequence[Any]) -> int | None:
    for j, v in enumerate(values):
        if v == value or str(v) == str(value):
            return j
    return None


def choice_cost_model(frame: pd.DataFrame | str | os.PathLike[str], *,
                      choices: Mapping[str, Sequence[Any]] | None = None, name: str = "space",
                      chip: str = "", backend: str = "table", batch_size: int = 1,
                      peak_flops: float | None = None) -> SpaceCostModel:
    """A :class:`SpaceCostModel` from per-choice costs (see the module docstring).

    ``choices`` (``{label: values}``, e.g. from :func:`~nni_hwaware.spaces.choices.space_choices`)
    fixes the labels, their order and the values' types; every (label, value) of it needs
    a row. Without it, the table's labels and values are used in order of appearance.
    """
    if not isinstance(frame, pd.DataFrame):
        frame = load_choice_table(frame)
    missing = [c for c in REQUIRED if c not in frame.columns]
    if missing:
        raise HwAwareError(f"per-choice cost table is missing column(s) {', '.join(missing)}; "
                           f"expected {', '.join(REQUIRED)} (and optionally activation_mb)")
    frame = frame.reset_index(drop=True)
    for column in (*REQUIRED[2:], *(["activation_mb"] if "activation_mb" in frame.columns else [])):
        values = pd.to_numeric(frame[column], errors="coerce")
        bad = values.isna() | ~np.isfinite(values.astype(float)) | (values < 0)
        if bad.any():
            i = int(np.argmax(bad.to_numpy()))
            raise HwAwareError(f"per-choice cost table row {i} ({frame.label[i]}={frame.value[i]}): "
                               f"{column} is {frame[column][i]!r} but must be a number >= 0")
        frame[column] = values.astype(float)
    frame["label"] = frame["label"].astype(str)
    fixed_rows = frame[frame.label == FIXED_LABEL]
    rows = frame[frame.label != FIXED_LABEL]
    if choices is None:
        choices = {label: list(dict.fromkeys(group.value)) for label, group in rows.groupby("label", sort=False)}
    choices = {label: list(values) for label, values in choices.items()}
    has_activation = "activation_mb" in frame.columns
    factors = []
    for label, values in choices.items():
        group = rows[rows.label == label]
        costs = {m: np.full(len(values), math.nan) for m in ("latency_ms", "param_mb", "activation_mb",
                                                               "flops", "params")}
        for _, row in group.iterrows():
            j = _match(row.value, values)
            if j is None:
                raise HwAwareError(f"per-choice cost table: {label}={row.value!r} is not a value of the space; "
                                   f"its values: {values}")
            activation = float(row.activation_mb) if has_activation else 0.0
            for m, v in (("latency_ms", row.latency_ms), ("param_mb", float(row.memory_mb) - activation),
                         ("activation_mb", activation), ("flops", row.flops), ("params", row.params)):
                costs[m][j] = v
        absent = [values[j] for j in np.flatnonzero(np.isnan(costs["latency_ms"]))]
        if absent:
            raise HwAwareError(f"per-choice cost table has no row for {label}={absent[0]!r} "
                               f"({len(absent)} values of {label} missing); add them")
        factors.append(CostFactor((label,), costs))
    unknown = sorted(set(rows.label) - set(choices))
    if unknown:
        raise HwAwareError(f"per-choice cost table names labels {unknown} that the space does not have; "
                           f"its labels: {', '.join(choices)}")
    activations = fixed_rows.activation_mb if has_activation else pd.Series(0.0, index=fixed_rows.index)
    fixed = {"latency_ms": float(fixed_rows.latency_ms.sum()),
             "param_mb": float((fixed_rows.memory_mb - activations).sum()),
             "activation_mb": float(activations.max()) if len(fixed_rows) else 0.0,
             "activation_sum_mb": float(activations.sum()),
             "flops": float(fixed_rows.flops.sum()), "params": float(fixed_rows.params.sum())}
    return SpaceCostModel(choices, factors, fixed, chip=chip, backend=backend, batch_size=batch_size,
                          name=name, peak_flops=peak_flops)
