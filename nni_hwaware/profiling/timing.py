"""Wall-clock latency of a callable, with a stopping rule and outlier rejection.

:func:`measure_latency` is the one timing loop every backend goes through, so
that a cost table built with the eager torch backend and one built with ONNX
Runtime differ only in what ``run`` does, never in how it is timed.

The procedure, in order:

1. **Warm-up.** ``warmup`` untimed calls, so that lazy initialisation
   (allocator pools, oneDNN/cuDNN algorithm selection, ONNX Runtime arenas)
   happens outside the samples.
2. **Calibration.** A sample must last at least ``min_sample_ms``, or the
   clock resolution and the fixed cost of reading it dominate.  Like
   :meth:`timeit.Timer.autorange`, one call is timed, the number of
   back-to-back calls per sample is scaled up until ``n`` calls take at least
   ``min_sample_ms``, and that ``n`` is then fixed for every sample.  Each
   sample is reported per call (elapsed / n).
3. **Sampling.** Samples are taken until the coefficient of variation of the
   kept samples is at most ``target_cv`` (checked once at least ``min_runs``
   samples exist), or ``max_runs`` samples exist, or ``max_seconds`` have
   passed since sampling started (whichever comes first; at least two
   samples are always taken so that a spread exists).
4. **Outlier rejection.** A sample ``x`` is kept when
   ``|x - median| <= 3 * 1.4826 * MAD`` with ``MAD = median(|x_i - median|)``.
   ``1.4826 = 1 / Phi^-1(3/4)`` makes ``1.4826 * MAD`` a consistent estimate
   of the standard deviation for normally distributed data (Rousseeuw &
   Croux, 1993), so this is the robust analogue of a 3-sigma rule: an
   interrupt, a page fault or a frequency drop inflates one sample without
   inflating the threshold, as it would a mean +- 3 std rule.  The reported
   statistics and the CV in the stopping rule use the kept samples only.

``sync`` is called right before each clock read, so that asynchronous work
(CUDA kernels) is inside the sample: ``torch.cuda.synchronize`` for CUDA,
``None`` for synchronous CPU execution.
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from nni_hwaware.errors import HwAwareError

__all__ = ["MAD_TO_SIGMA", "OUTLIER_SIGMAS", "LatencyStats", "measure_latency", "split_outliers"]

#: ``1 / Phi^-1(3/4)``: scales the median absolute deviation to a standard
#: deviation for normally distributed samples.
MAD_TO_SIGMA = 1.4826

#: Samples further than this many robust standard deviations from the median
#: are discarded.
OUTLIER_SIGMAS = 3.0

# Upper bound on calls per sample, so that a ``run`` the clock cannot see
# (zero elapsed time) cannot loop forever during calibration.
_MAX_CALLS_PER_SAMPLE = 1_000_000


@dataclass(frozen=True)
class LatencyStats:
    """Latency of one call, in milliseconds, over the kept samples.

    ``median_ms`` is the number to put in a cost table (robust to the
    remaining skew); ``mean_ms``/``std_ms`` (sample standard deviation,
    ``ddof=1``) and ``cv = std_ms / mean_ms`` say how steady the measurement
    was.  ``runs`` counts all timed samples, ``discarded`` how many of them
    the outlier rule dropped, and ``calls_per_sample`` how many back-to-back
    calls each sample timed (1 unless a call is shorter than
    ``min_sample_ms``).
    """

    median_ms: float
    mean_ms: float
    std_ms: float
    cv: float
    runs: int
    discarded: int
    calls_per_sample: int = 1


def split_outliers(samples: Sequence[float]) -> tuple[list[float], list[float]]:
    """Split ``samples`` into ``(kept, discarded)`` by the median +- 3 * 1.4826 * MAD rule.

    With ``MAD == 0`` (more than half the samples equal) only the samples
    equal to the median are kept, which is the rule taken literally.
    """
    if not samples:
        return [], []
    median = statistics.median(samples)
    mad = statistics.median(abs(x - median) for x in samples)
    limit = OUTLIER_SIGMAS * MAD_TO_SIGMA * mad
    kept = [x for x in samples if abs(x - median) <= limit]
    discarded = [x for x in samples if abs(x - median) > limit]
    return kept, discarded


def timed_calls(run: Callable[[], object], calls: int, sync: Callable[[], None] | None,
                clock: Callable[[], float]) -> float:
    """Seconds for ``calls`` back-to-back calls of ``run``, synchronised at both ends."""
    if sync is not None:
        sync()
    start = clock()
    for _ in range(calls):
        run()
    if sync is not None:
        sync()
    return clock() - start


def _summarise(samples: Sequence[float], calls_per_sample: int) -> LatencyStats:
    kept, discarded = split_outliers(samples)
    mean = statistics.fmean(kept)
    std = statistics.stdev(kept) if len(kept) >= 2 else 0.0
    cv = std / mean if mean > 0 else 0.0
    return LatencyStats(
        median_ms=statistics.median(kept),
        mean_ms=mean,
        std_ms=std,
        cv=cv,
        runs=len(samples),
        discarded=len(discarded),
        calls_per_sample=calls_per_sample,
    )


def _check_options(
    warmup: int,
    min_runs: int,
    max_runs: int,
    target_cv: float,
    max_seconds: float,
    min_sample_ms: float,
) -> None:
    if isinstance(warmup, bool) or not isinstance(warmup, int) or warmup < 0:
        raise HwAwareError(f"warmup must be an integer >= 0, got {warmup!r}")
    if isinstance(min_runs, bool) or not isinstance(min_runs, int) or min_runs < 2:
        raise HwAwareError(
            f"min_runs must be an integer >= 2 (a spread needs two samples), got {min_runs!r}"
        )
    if isinstance(max_runs, bool) or not isinstance(max_runs, int) or max_runs < min_runs:
        raise HwAwareError(
            f"max_runs must be an integer >= min_runs ({min_runs}), got {max_runs!r}"
        )
    if not (isinstance(target_cv, int | float) and target_cv >= 0 and math.isfinite(target_cv)):
        raise HwAwareError(f"target_cv must be a finite number >= 0 (e.g. 0.05), got {target_cv!r}")
    if not (isinstance(max_seconds, int | float) and max_seconds > 0):
        raise HwAwareError(f"max_seconds must be a number > 0, got {max_seconds!r}")
    if not (
        isinstance(min_sample_ms, int | float)
        and min_sample_ms >= 0
        and math.isfinite(min_sample_ms)
    ):
        raise HwAwareError(f"min_sample_ms must be a finite number >= 0, got {min_sample_ms!r}")


def measure_latency(
    run: Callable[[], object],
    *,
    warmup: int = 5,
    min_runs: int = 10,
    max_runs: int = 200,
    target_cv: float = 0.05,
    max_seconds: float = 5.0,
    sync: Callable[[], None] | None = None,
    min_sample_ms: float = 1.0,
    clock: Callable[[], float] = time.perf_counter,
) -> LatencyStats:
    """Time ``run()`` until the measurement is steady; see the module docstring.

    ``clock`` returns seconds (default :func:`time.perf_counter`); it is a
    parameter so that tests can drive the loop with a fake clock.  The
    ``max_seconds`` budget is measured with the same clock and covers
    calibration and sampling, not warm-up.
    """
    _check_options(warmup, min_runs, max_runs, target_cv, max_seconds, min_sample_ms)

    def timed(calls: int) -> float:
        return timed_calls(run, calls, sync, clock)

    for _ in range(warmup):
        run()
    if sync is not None:
        sync()

    budget_start = clock()
    min_sample_s = min_sample_ms / 1000.0
    calls = 1
    elapsed = timed(calls)
    while elapsed < min_sample_s and calls < _MAX_CALLS_PER_SAMPLE:
        if elapsed > 0:
            # Aim 10% past the target so one rescale usually suffices.
            wanted = math.ceil(calls * min_sample_s * 1.1 / elapsed)
            calls = min(max(wanted, calls + 1), _MAX_CALLS_PER_SAMPLE)
        else:
            calls = min(calls * 10, _MAX_CALLS_PER_SAMPLE)
        elapsed = timed(calls)

    samples: list[float] = []
    while len(samples) < max_runs:
        samples.append(timed(calls) * 1000.0 / calls)
        if len(samples) >= min_runs:
            kept, _ = split_outliers(samples)
            if len(kept) >= 2:
                mean = statistics.fmean(kept)
                cv = statistics.stdev(kept) / mean if mean > 0 else 0.0
                if cv <= target_cv:
                    break
        if len(samples) >= 2 and clock() - budget_start >= max_seconds:
            break
    return _summarise(samples, calls)
