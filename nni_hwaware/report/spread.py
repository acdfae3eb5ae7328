"""Figures over seeds: each seed's, their median and their spread (min / max).

A stochastic search is reported over several seeds, never one: another seed (or another
CPU's float kernels) takes another path. :func:`over_seeds` gives, for each figure, the
median and the range of the seeds that have it.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

__all__ = ["over_seeds", "spread"]


def spread(values: Iterable[float | None]) -> dict[str, float | int | None]:
    """``{"median", "min", "max", "n"}`` of the finite values (all None when there are none)."""
    finite = [float(v) for v in values if v is not None and not isinstance(v, bool) and math.isfinite(float(v))]
    if not finite:
        return {"median": None, "min": None, "max": None, "n": 0}
    return {"median": statistics.median(finite), "min": min(finite), "max": max(finite), "n": len(finite)}


def over_seeds(per_seed: Sequence[Mapping[str, Any]], keys: Sequence[str]) -> dict[str, dict[str, Any]]:
    """For each of ``keys``, the :func:`spread` of ``record[key]`` over the seeds' records."""
    return {key: spread(record.get(key) for record in per_seed) for key in keys}
