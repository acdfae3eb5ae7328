"""Pieces of timing shared by the measuring engine: one timed sample, the MAD outlier rule.

:func:`timed_calls` times one sample (``calls`` back-to-back calls of a runner,
synchronised at both ends); :func:`~nni_hwaware.profiling.rounds.time_in_rounds`,
the one measuring engine, takes every sample through it.  ``sync`` is called
right before each clock read, so that asynchronous work (CUDA kernels) is inside
the sample: ``torch.cuda.synchronize`` for CUDA, ``None`` for synchronous CPU
execution.

:func:`split_outliers` is the robust analogue of a 3-sigma rule: a sample ``x``
is kept when ``|x - median| <= 3 * 1.4826 * MAD`` with
``MAD = median(|x_i - median|)``.  ``1.4826 = 1 / Phi^-1(3/4)`` makes
``1.4826 * MAD`` a consistent estimate of the standard deviation for normally
distributed data (Rousseeuw & Croux, 1993), so an interrupt, a page fault or a
frequency drop inflates one sample without inflating the threshold, as it would
a mean +- 3 std rule.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Sequence

__all__ = ["MAD_TO_SIGMA", "OUTLIER_SIGMAS", "split_outliers", "timed_calls"]

#: ``1 / Phi^-1(3/4)``: scales the median absolute deviation to a standard
#: deviation for normally distributed samples.
MAD_TO_SIGMA = 1.4826

#: Samples further than this many robust standard deviations from the median
#: are discarded.
OUTLIER_SIGMAS = 3.0


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
