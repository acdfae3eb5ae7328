"""The one measuring engine: many items timed in shuffled, interleaved rounds.

A shared machine's speed comes and goes in phases of a fraction of a second to
seconds. Timed one after another, each item lands in whichever phase it happened
to hit, and a stopping rule that waits for a small spread stops confident inside
one phase. :func:`time_in_rounds` times every item once per round instead, in a
new random order each round, so that every item sees the same mixture of phases:
its figure is then the machine's typical speed times the item's own cost, and the
ratios between items hold however the speed moves (the reason Google Benchmark
added random interleaving of repetitions).

The procedure:

1. **Warm-up.** ``warmup`` untimed calls of each item.
2. **Calibration**, once per item, as :meth:`timeit.Timer.autorange`: the number
   of back-to-back calls per sample is scaled up until a sample lasts at least
   ``min_sample_ms``; each sample is reported per call.
3. **Rounds.** Each round times every item once (one sample), in an order drawn
   from a generator seeded with ``seed``.
4. **Stopping.** After ``min_rounds`` rounds, when every item's 95 % interval of
   the median has a half-width of at most ``target`` times its median, or when
   ``max_seconds`` have passed (at least 3 rounds are always taken), or after
   ``max_rounds``. Items that miss the target are
   reported (:attr:`RoundsTiming.missed`), never hidden.

Each item's figure is the **median over rounds**, with the distribution-free 95 %
interval of a median from order statistics (the ranks
:math:`n/2 \\pm 1.96\\sqrt{n}/2`; Conover, *Practical Nonparametric Statistics*, 3.2).
A **probe** item (``probe=``: the space's reference network, or one fixed leaf)
is an item like the others; its per-round times are the machine's drift, which
tables record and ``validate`` shows. Ratios of two items
(:meth:`RoundsTiming.ratio`) are the geometric mean of their per-round ratios
with a Student-t interval on the logarithms.
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from nni_hwaware.errors import HwAwareError
from nni_hwaware.profiling.timing import timed_calls

__all__ = ["TIMING_TARGET", "ItemTiming", "RoundsTiming", "check_timing", "median_interval", "time_in_rounds"]

#: Default stopping target: the 95 % interval's half-width as a share of the median.
TIMING_TARGET = 0.02
_MAX_CALLS_PER_SAMPLE = 1_000_000
_Z95 = 1.959963984540054


def median_interval(samples: Sequence[float]) -> tuple[float, float, float]:
    """``(median, low, high)``: the sample median and its distribution-free 95 % interval.

    With fewer than 6 samples no such interval exists at 95 %: it is ``(min, max)``
    widened to infinity on both sides, so a target is never met on so few samples.
    """
    values = sorted(float(x) for x in samples)
    n = len(values)
    if n == 0:
        raise HwAwareError("no samples to summarise")
    median = statistics.median(values)
    if n < 6:
        return median, -math.inf, math.inf
    half = _Z95 * math.sqrt(n) / 2
    lo = max(0, math.floor(n / 2 - half))
    hi = min(n - 1, math.ceil(n / 2 + half) - 1)
    return median, values[lo], values[hi]


@dataclass(frozen=True)
class ItemTiming:
    """One item's per-call latency (ms) over the rounds: median and 95 % interval."""

    median_ms: float
    low_ms: float
    high_ms: float
    samples: tuple[float, ...] = field(repr=False)
    calls_per_sample: int = 1

    @property
    def half_width(self) -> float:
        """The interval's larger half as a share of the median (``inf`` on too few rounds)."""
        if self.median_ms <= 0:
            return math.inf
        return max(self.median_ms - self.low_ms, self.high_ms - self.median_ms) / self.median_ms

    @property
    def std_ms(self) -> float:
        return statistics.stdev(self.samples) if len(self.samples) >= 2 else 0.0

    @property
    def cv(self) -> float:
        mean = statistics.fmean(self.samples)
        return self.std_ms / mean if mean > 0 else 0.0

    @property
    def runs(self) -> int:
        return len(self.samples)


@dataclass(frozen=True)
class RoundsTiming:
    """What :func:`time_in_rounds` measured: one :class:`ItemTiming` per item, in the items' order."""

    items: tuple[ItemTiming, ...]
    rounds: int
    seconds: float
    target: float
    probe: int | None = None

    def __getitem__(self, index: int) -> ItemTiming:
        return self.items[index]

    def __len__(self) -> int:
        return len(self.items)

    @property
    def missed(self) -> list[int]:
        """Items whose interval is wider than the target (the time budget ran out first)."""
        return [i for i, item in enumerate(self.items) if not item.half_width <= self.target]

    @property
    def share_met(self) -> float:
        return 1.0 - len(self.missed) / max(1, len(self.items))

    @property
    def drift(self) -> dict[str, float]:
        """The probe's per-round spread: ``{probe_ms, probe_p10_ms, probe_p90_ms, probe_drift}`` (p90 / p10)."""
        if self.probe is None:
            return {}
        samples = np.asarray(self.items[self.probe].samples)
        p10, p90 = (float(np.quantile(samples, q)) for q in (0.1, 0.9))
        return {"probe_ms": float(np.median(samples)), "probe_p10_ms": p10, "probe_p90_ms": p90,
                "probe_drift": p90 / p10 if p10 > 0 else math.inf}

    def ratio(self, numerator: int, denominator: int) -> dict[str, float | list[float]]:
        """``items[numerator] / items[denominator]`` from their per-round ratios, with a 95 % interval."""
        from scipy import stats

        a = np.asarray(self.items[denominator].samples)
        b = np.asarray(self.items[numerator].samples)
        logs = np.log(b / a)
        mean = float(logs.mean())
        if len(logs) < 2:
            return {"ratio": math.exp(mean), "ci95": [-math.inf, math.inf]}
        half = float(stats.t.ppf(0.975, len(logs) - 1) * logs.std(ddof=1) / math.sqrt(len(logs)))
        return {"ratio": math.exp(mean), "ci95": [math.exp(mean - half), math.exp(mean + half)]}


def check_timing(warmup: int, min_rounds: int, max_rounds: int, target: float, max_seconds: float,
           min_sample_ms: float) -> None:
    for name, value, least in (("warmup", warmup, 0), ("min_rounds", min_rounds, 2), ("max_rounds", max_rounds, 2)):
        if isinstance(value, bool) or not isinstance(value, int) or value < least:
            raise HwAwareError(f"{name} must be an integer >= {least}, got {value!r}")
    if max_rounds < min_rounds:
        raise HwAwareError(f"max_rounds must be >= min_rounds ({min_rounds}), got {max_rounds}")
    if not (isinstance(target, int | float) and math.isfinite(target) and target >= 0):
        raise HwAwareError(f"target must be a finite share >= 0 (e.g. 0.02), got {target!r}")
    if not (isinstance(max_seconds, int | float) and max_seconds > 0):
        raise HwAwareError(f"max_seconds must be a number > 0, got {max_seconds!r}")
    if not (isinstance(min_sample_ms, int | float) and math.isfinite(min_sample_ms) and min_sample_ms >= 0):
        raise HwAwareError(f"min_sample_ms must be a finite number >= 0, got {min_sample_ms!r}")


def time_in_rounds(runners: Sequence[Callable[[], object]], *, probe: int | None = None, warmup: int = 3,
                   min_sample_ms: float = 1.0, min_rounds: int = 10, max_rounds: int = 1000,
                   target: float = TIMING_TARGET, max_seconds: float = 60.0, seed: int = 0,
                   clock: Callable[[], float] = time.perf_counter) -> RoundsTiming:
    """Time every runner in shuffled rounds until each median is known within ``target``; see the module.

    A runner may carry ``sync`` (called before each clock read, e.g. ``torch.cuda.synchronize``),
    as a :class:`~nni_hwaware.profiling.backends.Runner` does. ``clock`` returns seconds; it
    is a parameter so that tests can drive the engine with a fake clock. ``max_seconds``
    covers calibration and rounds, not the warm-up.
    """
    check_timing(warmup, min_rounds, max_rounds, target, max_seconds, min_sample_ms)
    if not runners:
        raise HwAwareError("nothing to time: give at least one runner")
    if probe is not None and not 0 <= probe < len(runners):
        raise HwAwareError(f"probe must index one of the {len(runners)} runners, got {probe}")
    syncs = [getattr(run, "sync", None) for run in runners]

    def timed(k: int, calls: int) -> float:
        return timed_calls(runners[k], calls, syncs[k], clock)

    for k, run in enumerate(runners):
        for _ in range(warmup):
            run()
        if syncs[k] is not None:
            syncs[k]()
    begin = clock()
    min_sample_s = min_sample_ms / 1000.0
    calls = []
    for k in range(len(runners)):
        n, elapsed = 1, timed(k, 1)
        while elapsed < min_sample_s and n < _MAX_CALLS_PER_SAMPLE:
            n = min(max(math.ceil(n * min_sample_s * 1.1 / elapsed), n + 1) if elapsed > 0 else n * 10,
                    _MAX_CALLS_PER_SAMPLE)
            elapsed = timed(k, n)
        calls.append(n)

    rng = np.random.default_rng(seed)
    samples: list[list[float]] = [[] for _ in runners]
    rounds = 0
    while rounds < max_rounds:
        for k in rng.permutation(len(runners)):
            samples[k].append(timed(int(k), calls[k]) * 1000.0 / calls[k])
        rounds += 1
        if rounds >= min_rounds and all(_half_width(s) <= target for s in samples):
            break
        if rounds >= min(3, min_rounds) and clock() - begin >= max_seconds:
            break
    items = tuple(ItemTiming(*median_interval(s), samples=tuple(s), calls_per_sample=c)
                  for s, c in zip(samples, calls, strict=True))
    return RoundsTiming(items, rounds, clock() - begin, float(target), probe)


def _half_width(samples: Sequence[float]) -> float:
    median, low, high = median_interval(samples)
    return max(median - low, high - median) / median if median > 0 else math.inf
