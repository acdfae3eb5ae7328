"""What whole networks cost beyond the sum of their leaves: the per-network term of a space.

A leaf timed on its own is not the same leaf inside a network: the network adds what
no leaf covers (a cell's sum of its edges, a residual add around a choice, the
framework's per-call overhead, caches a leaf alone finds warm), and that depends on
which blocks the network holds. When a space is profiled, ``k`` networks of it (half
uniformly random, half leaning toward each label's cheapest value, so that they span the
space's sizes), its cheapest network and its reference network are measured end to end (in
shared rounds), and their latencies are fitted as

.. math::

    m(a) = s \\sum_f L_f[a_{S_f}] + c + \\sum_l b_{l, a_l}

a scale ``s`` of the summed leaves, a constant ``c`` (a network's fixed overhead, >= 0) and
an offset ``b`` per (label, value), in ms, by ridge regression on relative errors: each
network's row is divided by its measured latency, the offsets are shrunk toward 0 with
weight ``shrinkage`` (in units of the median network's latency), the scale and the
constant are not (a negative constant is refitted as 0). The reference network (the one
every comparison and every "percent of the reference" budget is taken against) and the
cheapest one (where a tight budget's search ends) each count as a quarter of the
calibration networks. Fitted to uniform networks alone, which all sit near a space's median
size, the term extrapolated badly to small ones: on digits, networks of 0.26-0.6x the
reference were predicted 20-68 % low (one below zero); fitted to networks that span the
sizes, 4 % on average (uniform ones 3 %).

Offsets are additive in the space's labels, so they are single-label factors of the
:class:`~nni_hwaware.cost_model.model.SpaceCostModel`: its expectations, lower bounds and
the budget mask stay exact. Measured on 60 random networks per space, the ratio alone (the term of earlier
versions) put 78 % (own-space example), 52 % (NAS-Bench-201) and 98-100 % (digits) of them
within +-10 % of their measured ratio to the reference; this term, fitted on 24 of them and
the reference, 99-100 % in every space (30 random splits, quiet and with the load
harness). NAS-Bench-201 needs the constant (small cells pay the same overhead as large
ones), the own-space example the offsets.

**Weights beyond the cache.** A leaf timed on its own runs with its weights in the core's cache;
a network whose weights do not fit in it (its L2, ``cache_mb``, recorded by the profile) streams
the rest from further out on every call. Where at least :data:`MIN_BEYOND_CACHE` calibration
networks' weights ``W(a)`` exceed the cache, the fit adds ``e * max(0, W(a) - cache_mb)``
(``e`` >= 0 ms a MB, not shrunk, dropped when negative): a term of the whole network, not of any label, which
:class:`~nni_hwaware.cost_model.model.SpaceCostModel` adds on top of its factors
(:class:`BeyondCache`).
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from nni_hwaware.errors import HwAwareError

__all__ = ["BEYOND_CACHE_KEY", "CALIBRATION_MET_SHARE", "CALIBRATION_PER_VALUE", "CALIBRATION_SAMPLES", "SHRINKAGE",
           "BeyondCache", "NetworkTerm", "calibration_count", "fit_network_term"]

#: The least networks measured end to end (besides the cheapest and the reference) to fit a space's per-network term.
CALIBRATION_SAMPLES = 24
#: Calibration networks a value of the space's widest label: with ``v`` values, half the networks uniform,
#: each value is then in about 8 of them (:func:`calibration_count`).
CALIBRATION_PER_VALUE = 16
#: The share of the calibration networks whose latency must be within the timing target before their rounds
#: stop: the term is fitted to all of them together, so a few less precise ones average out, and waiting for
#: the last of 257 networks ran the rounds to their time budget on a quiet machine.
CALIBRATION_MET_SHARE = 0.9
#: Ridge weight of the per-(label, value) offsets, in units of the median network's latency.
SHRINKAGE = 1.0
#: Calibration networks whose weights must exceed the cache for the fit to add the term: with fewer, its
#: coefficient would be carried by a few networks (digits has two or three past a 2 MB L2).
MIN_BEYOND_CACHE = 6
#: Where the network row's ``latency_terms`` keeps the weights-beyond-the-cache term (no label is named so).
BEYOND_CACHE_KEY = "__weights_beyond_cache__"


def calibration_count(choices: Mapping[str, Sequence[Any]]) -> int:
    """How many calibration networks fit a space's term: :data:`CALIBRATION_SAMPLES`, or
    :data:`CALIBRATION_PER_VALUE` times the values of its widest label where that is more.

    Each (label, value) has an offset, and an offset is only as good as the networks that hold
    its value. With a fixed 24, a label of 16 values (digits' blocks) had each value in one or
    two of the networks; its offsets were shrunk to near 0, and the term ranked digits networks
    at 0.95 against a noise ceiling of 0.996. Refitted to 24, 48, 96, 128 and 160 of the same 160
    measured networks (10 random subsets each), the Spearman over 60 held-out networks went
    0.943, 0.950, 0.969, 0.975, 0.979 (``benchmarks/lut_fidelity.md``). The gain had not flattened
    at 8 a value (128 on digits): on two more profiles of digits (quiet, 129 calibration networks and
    120 held out each), subsets of 64, 96 and 128 of them ranked the held-out networks at
    0.958 / 0.964 / 0.971 and 0.975 / 0.980 / 0.981, and the 129 with four fifths of the held-out
    networks added (225) at 0.983 and 0.989 over the fifth left out (5-fold), with the same model (a
    term per pair of neighbouring layers' values did no better). Hence 16 a value (256 on digits),
    which ranked held-out digits networks at 0.975-0.990 in six runs. The count grows
    with the widest label, not with the number of labels: a label's values share its networks.
    """
    widest = max((len(values) for values in choices.values()), default=0)
    return max(CALIBRATION_SAMPLES, CALIBRATION_PER_VALUE * widest)


class BeyondCache:
    """A network's latency for weights beyond the core's cache: ``ms_per_mb * max(0, weights_mb - cache_mb)``."""

    def __init__(self, cache_mb: float, ms_per_mb: float) -> None:
        if not (math.isfinite(cache_mb) and cache_mb > 0 and math.isfinite(ms_per_mb) and ms_per_mb >= 0):
            raise HwAwareError(f"a network term's weights-beyond-the-cache term needs a cache > 0 MB and ms a MB "
                               f">= 0, got {cache_mb!r} and {ms_per_mb!r}; re-profile the space")
        self.cache_mb, self.ms_per_mb = float(cache_mb), float(ms_per_mb)

    def __call__(self, weights_mb: Any) -> Any:
        """The term for ``weights_mb`` (a number, a numpy array or a torch tensor)."""
        over = weights_mb - self.cache_mb
        return self.ms_per_mb * (over.clip(min=0) if hasattr(over, "clip") else max(0.0, over))

    def to_dict(self) -> dict[str, float]:
        return {"cache_mb": self.cache_mb, "ms_per_mb": self.ms_per_mb}


class NetworkTerm:
    """A space's per-network latency term: ``scale`` times the summed leaves, plus ``constant`` and
    per-(label, value) ``offsets`` (ms)."""

    def __init__(self, scale: float, offsets: Mapping[str, Mapping[str, float]] | None = None,
                 constant: float = 0.0, beyond_cache: BeyondCache | None = None) -> None:
        if not (math.isfinite(scale) and scale > 0):
            raise HwAwareError(f"a network term's latency_scale must be a positive number, got {scale!r}; "
                               "re-profile the space")
        if not math.isfinite(constant):
            raise HwAwareError(f"a network term's constant must be a number of ms, got {constant!r}; "
                               "re-profile the space")
        self.scale, self.constant = float(scale), float(constant)
        #: ``{label: {repr(value): ms}}``.
        self.offsets = {str(label): {str(v): float(ms) for v, ms in values.items()}
                        for label, values in (offsets or {}).items() if label != BEYOND_CACHE_KEY}
        #: The whole network's weights beyond the cache (None: no calibration network's exceeded it).
        self.beyond_cache = beyond_cache

    def offset(self, label: str, value: Any) -> float:
        """The offset of ``label = value`` in ms (0 for what the calibration did not see)."""
        return self.offsets.get(label, {}).get(repr(value), 0.0)

    def predict(self, summed_ms: float, sample: Mapping[str, Any], weights_mb: float = 0.0) -> float:
        extra = self.beyond_cache(weights_mb) if self.beyond_cache is not None else 0.0
        return (self.scale * summed_ms + self.constant + extra
                + sum(self.offset(label, value) for label, value in sample.items()))

    def to_json(self) -> str:
        """The offsets (and the weights-beyond-the-cache term) as the table's ``latency_terms`` column holds them."""
        extra = {BEYOND_CACHE_KEY: self.beyond_cache.to_dict()} if self.beyond_cache is not None else {}
        return json.dumps({**self.offsets, **extra}, sort_keys=True)

    @classmethod
    def from_row(cls, scale: Any, terms: Any, constant: Any = 0.0) -> NetworkTerm:
        """A term from a network row's ``latency_scale``, ``latency_terms`` and ``latency_ms`` (the
        constant; rows of earlier versions have no terms, and their ``latency_ms`` is not added)."""
        offsets: dict[str, dict[str, float]] = {}
        if isinstance(terms, str) and terms.strip():
            try:
                offsets = json.loads(terms)
            except json.JSONDecodeError:
                raise HwAwareError(f"the cost table's network row has latency_terms {terms[:40]!r}...: not JSON "
                                   "(re-profile the space)") from None
            if not isinstance(offsets, dict) or not all(isinstance(v, dict) for v in offsets.values()):
                raise HwAwareError("the cost table's network row has latency_terms that are not "
                                   "{label: {value: ms}}; re-profile the space")
        else:
            constant = 0.0
        beyond = offsets.pop(BEYOND_CACHE_KEY, None)
        try:
            beyond_cache = BeyondCache(float(beyond["cache_mb"]), float(beyond["ms_per_mb"])) if beyond else None
        except (KeyError, TypeError, ValueError):
            raise HwAwareError(f"the cost table's network row has a malformed {BEYOND_CACHE_KEY} "
                               f"({str(beyond)[:60]}); re-profile the space") from None
        try:
            number = float(scale)
        except (TypeError, ValueError):
            number = math.nan
        try:
            constant = float(constant)
        except (TypeError, ValueError):
            constant = math.nan
        return cls(number, offsets, constant, beyond_cache)


def fit_network_term(samples: Sequence[Mapping[str, Any]], summed_ms: Sequence[float],
                     measured_ms: Sequence[float], choices: Mapping[str, Sequence[Any]], *,
                     shrinkage: float = SHRINKAGE, weights: Sequence[float] | None = None,
                     weights_mb: Sequence[float] | None = None, cache_mb: float | None = None) -> NetworkTerm:
    """The term that best maps each sample's summed leaves to its measured latency (module docstring).

    ``weights`` (default 1) multiply each network's relative error, e.g. to count the reference more.
    ``weights_mb`` (each network's weights) and ``cache_mb`` (the core's cache) add the weights beyond
    the cache where some network's exceed it.
    """
    summed, measured = np.asarray(summed_ms, float), np.asarray(measured_ms, float)
    if not (len(samples) == len(summed) == len(measured)) or not len(samples):
        raise HwAwareError("the network term needs one summed and one measured latency per calibration network")
    if not (np.isfinite(summed).all() and np.isfinite(measured).all() and (summed > 0).all() and (measured > 0).all()):
        raise HwAwareError("the calibration networks' latencies must be finite and positive; re-profile the space")
    columns = [(label, repr(value)) for label, values in choices.items() for value in values]
    at = {key: j for j, key in enumerate(columns)}
    unit = float(np.median(measured))
    design = np.zeros((len(samples), 1 + len(columns)))
    design[:, 0] = summed / unit
    for row, sample in enumerate(samples):
        for label, value in sample.items():
            if (label, repr(value)) in at:
                design[row, 1 + at[(label, repr(value))]] = 1.0
    target = measured / unit
    rows = (1.0 / target) * (np.ones(len(target)) if weights is None else np.asarray(weights, float))
    over = (np.maximum(0.0, np.asarray(weights_mb, float) - cache_mb)
            if weights_mb is not None and cache_mb is not None else np.zeros(len(target)))
    if over.shape != target.shape or not np.isfinite(over).all():
        raise HwAwareError("the network term needs one finite weights_mb per calibration network")
    solution, constant, beyond = _solve(design, target, rows, over, float(shrinkage))
    scale = float(solution[0])
    if not (math.isfinite(scale) and scale > 0):  # degenerate calibration: fall back to the ratio alone
        return NetworkTerm(float(np.median(measured / summed)))
    free = 1 + constant + beyond
    offsets: dict[str, dict[str, float]] = {}
    for (label, value), w in zip(columns, solution[free:], strict=True):
        offsets.setdefault(label, {})[value] = float(w * unit)
    return NetworkTerm(scale, offsets, float(solution[1] * unit) if constant else 0.0,
                       BeyondCache(float(cache_mb), float(solution[free - 1] * unit)) if beyond else None)  # type: ignore[arg-type]


def _solve(design: np.ndarray, target: np.ndarray, rows: np.ndarray, over: np.ndarray,
           shrinkage: float) -> tuple[np.ndarray, bool, bool]:
    """Ridge on relative errors: (solution, with the constant, with the weights beyond the cache); a free
    coefficient that comes out negative (the constant, the ms a MB beyond the cache) is refitted without."""
    constant, beyond = True, int((over > 0).sum()) >= MIN_BEYOND_CACHE
    while True:
        free = [design[:, :1]] + ([np.ones((len(target), 1))] if constant else []) + (
            [over[:, None]] if beyond else [])
        full = np.column_stack([*free, design[:, 1:]])
        a, y = full * rows[:, None], target * rows
        penalty = np.full(full.shape[1], shrinkage)
        penalty[:len(free)] = 1e-9
        solution = np.linalg.solve(a.T @ a + np.diag(penalty), a.T @ y)
        if beyond and solution[len(free) - 1] < 0:
            beyond = False
        elif constant and solution[1] < 0:
            constant = False
        else:
            return solution, constant, beyond
