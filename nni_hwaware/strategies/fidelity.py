"""How far a cost table's numbers can be trusted before a search measures anything, and how finely a chip
reports what it measures: the two priors of :class:`~nni_hwaware.strategies.correction.CostCorrection`.

* :func:`fidelity_prior_margin`: ``nni-hwaware validate TABLE`` saves the table's fidelity figures
  beside it (``TABLE`` + :data:`FIDELITY_SUFFIX`); how far over its prediction a network measured 9
  times in 10 then is the margin a search starts from.
* :func:`resolution_of`: the step a chip reports its measurements in (phone benchmarks often report
  whole milliseconds), so that a budget is checked against what the chip would *report*.
"""

from __future__ import annotations

import json
import logging
import math
import os
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from nni_hwaware.measurement import positive as _positive

__all__ = ["FIDELITY_SUFFIX", "fidelity_prior_margin", "resolution_of"]

_logger = logging.getLogger("nni_hwaware.ppo")

#: ``nni-hwaware validate TABLE`` saves the table's fidelity figures beside it, in ``TABLE`` + this.
FIDELITY_SUFFIX = ".fidelity.json"


def fidelity_prior_margin(table: str | os.PathLike[str]) -> float | None:
    """The prior margin from a table's own fidelity figures (None when it has none): how far over its
    prediction a network measured 9 times in 10 when the table was validated, the larger of latency
    (relative to the reference) and memory, at least 1."""
    path = Path(f"{os.fspath(table)}{FIDELITY_SUFFIX}")
    if not path.is_file():
        return None
    try:
        figures = json.loads(path.read_text())
        ratios = [figures["latency"].get("ratio_q90_vs_reference"), figures.get("memory", {}).get("ratio_q90")]
    except (OSError, ValueError, AttributeError, KeyError, TypeError):
        _logger.warning("%s is not a fidelity file of nni-hwaware validate; the prior margin stays 1", path)
        return None
    ratios = [r for r in map(_positive, ratios) if r is not None]
    return max([1.0, *ratios]) if ratios else None


#: Reports with fewer values than this get no step: a few whole numbers can be all even by chance.
_RESOLUTION_MIN_VALUES = 10


def resolution_of(values: Sequence[float]) -> float:
    """The step a chip reports its measurements in (0 when none): the largest of 1, 2 and 5 times a
    power of ten that every value is a whole multiple of, with at least :data:`_RESOLUTION_MIN_VALUES`
    values, and at most a quarter of their median (a step that coarse is no resolution but a coincidence).
    A step under a thousandth of the median changes no decision and counts as none.

    Phone benchmarks often report whole milliseconds (the Samsung A50 latencies of NAS-Bench-201
    in HW-NAS-Bench do); timings read from a clock have no such step, and ratios times a reference
    none either.
    """
    values = np.asarray([v for v in values if math.isfinite(v) and v > 0], dtype=float)
    if len(values) < _RESOLUTION_MIN_VALUES:
        return 0.0
    top = float(np.median(values)) / 4
    for exponent in range(math.floor(math.log10(top)), math.floor(math.log10(top / 250)) - 1, -1):
        for mantissa in (5, 2, 1):
            step = mantissa * 10.0 ** exponent
            if step > top or step < top / 250:
                continue
            units = values / step
            if np.all(np.abs(units - np.round(units)) <= 1e-6 + 1e-9 * units):  # float rounding only
                return step
    return 0.0
