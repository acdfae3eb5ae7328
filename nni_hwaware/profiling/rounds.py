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
   from a generator seeded with ``seed``. Before each sample, ``warm`` untimed calls of
   the item (default 1): a sample then times the item warm, as a deployed network runs
   call after call, whatever the round ran before it. Without them, a sample's first call
   pays for the caches the previous item took, a cost that depends on the neighbour: on a
   quiet 2-core CPU, with 2 ms samples, digits networks' ratios to the reference differed by
   up to 10 % between rounds of two networks and rounds of twelve, and two instances of one
   network by 4 %.
4. **Stopping.** After ``min_rounds`` rounds, when every item's 95 % interval of
   its quantile (or, with ``met_share`` below 1, that share of the items') has a
   half-width of at most ``target`` times that quantile, or when
   ``max_seconds`` have passed (at least 3 rounds are always taken), or after
   ``max_rounds``. Items that miss the target are
   reported (:attr:`RoundsTiming.missed`), never hidden.

Each item's figure is its **10th percentile over rounds** (``quantile``, 0.1 by default),
with the distribution-free 95 % interval of that quantile from order statistics (the
ranks :math:`nq \\pm 1.96\\sqrt{nq(1-q)}`; Conover, *Practical Nonparametric Statistics*,
3.2). Not the median: another process on the same core delays a sample, it never speeds
one up, so the noise of a busy machine is one-sided and heavy-tailed. A low quantile is
the intrinsic cost that the undisturbed samples share (Chen and Revels, *Robust
benchmarking in noisy environments*, 2016, argue for the minimum, which follows single
outliers; a low quantile of many rounds does not). Timing 30 digits networks twice
under the load harness with a test suite beside it, the two passes ranked the networks
alike at Spearman 0.73 by their medians, 0.98 by their lower quartiles and 0.98 by
their 10th percentiles over 80 rounds; over 25 rounds 0.46, 0.84 and 0.95. On the quiet
machine all three agreed (0.98-0.995), and the 10th percentile under load was within
1 % of the quiet one.
**The clock.** On a CPU with one intra-op thread (the default of every table, check
and trial), a sample is the measuring thread's **CPU time** over its calls
(:func:`sample_clock`: ``time.thread_time``; PyTorch and ONNX Runtime both run the
network on the calling thread then), not the wall time: the time another process held
the core is not the network's, and a network longer than the scheduler's time slice
(a few ms) is preempted in every sample on a busy core, so no quantile of wall times
finds it undisturbed. Timing 20 ProxylessNAS networks twice under the load harness, the
two passes ranked them alike at Spearman 0.36-0.60 by wall time and 0.94-0.95 by CPU
time (10th percentiles over 20-74 rounds; a sample's wall time ranged over 4.5-24 ms
for 2.9-3.9 ms of CPU). Cache and memory-bandwidth contention still show in CPU time,
which the low quantile handles. With several threads, or on CUDA (synchronised), the
clock is the wall clock. Budgets (``max_seconds``) are always wall time.

A **probe** item (``probe=``: the space's reference network, or one fixed leaf)
is an item like the others; its per-round times are the machine's drift, which
tables record and ``validate`` shows. The ratio of two items
(:meth:`RoundsTiming.ratio`) is the ratio of their figures, its interval joined from
theirs.
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

__all__ = ["QUANTILE", "TIMING_TARGET", "ItemTiming", "RoundsTiming", "check_timing", "median_interval",
           "quantile_interval", "sample_clock", "time_in_rounds"]

#: Default stopping target: the 95 % interval's half-width as a share of the median.
TIMING_TARGET = 0.02
#: Default quantile of an item's per-round samples that is its figure: the 10th percentile.
QUANTILE = 0.1
_MAX_CALLS_PER_SAMPLE = 1_000_000
_Z95 = 1.959963984540054


def quantile_interval(samples: Sequence[float], quantile: float = 0.5,
                      confidence: float = 0.95) -> tuple[float, float, float]:
    """``(value, low, high)``: the samples' ``quantile`` and its distribution-free ``confidence`` interval.

    The interval's ends are the order statistics at ranks :math:`nq \\pm z\\sqrt{nq(1-q)}`
    (:math:`z` = 1.96 at 95 %). With fewer than 6 samples no such interval exists: it is
    infinite on both sides, so a target is never met on so few samples.
    """
    if not 0 < quantile < 1:
        raise HwAwareError(f"quantile must be between 0 and 1 (e.g. 0.1), got {quantile!r}")
    values = np.sort(np.asarray([float(x) for x in samples]))
    n = len(values)
    if n == 0:
        raise HwAwareError("no samples to summarise")
    value = float(np.quantile(values, quantile))
    if n < 6:
        return value, -math.inf, math.inf
    z = _Z95 if confidence == 0.95 else statistics.NormalDist().inv_cdf((1 + confidence) / 2)
    half = z * math.sqrt(n * quantile * (1 - quantile))
    lo = max(0, math.floor(n * quantile - half))
    hi = min(n - 1, math.ceil(n * quantile + half) - 1)
    return value, float(values[lo]), float(values[hi])


def sample_clock(device: str, threads: int) -> Callable[[], float]:
    """The clock a sample is read with: the thread's CPU time on a CPU with one thread, else the wall clock."""
    if str(device).split(":")[0] == "cpu" and threads == 1 and hasattr(time, "thread_time"):
        return time.thread_time
    return time.perf_counter


def median_interval(samples: Sequence[float]) -> tuple[float, float, float]:
    """``(median, low, high)``: :func:`quantile_interval` at 0.5."""
    return quantile_interval(samples, 0.5)


@dataclass(frozen=True)
class ItemTiming:
    """One item's per-call latency (ms) over the rounds: its ``quantile`` (``ms``) and 95 % interval."""

    ms: float
    low_ms: float
    high_ms: float
    samples: tuple[float, ...] = field(repr=False)
    calls_per_sample: int = 1
    quantile: float = QUANTILE

    @property
    def half_width(self) -> float:
        """The interval's larger half as a share of ``ms`` (``inf`` on too few rounds)."""
        if self.ms <= 0:
            return math.inf
        return max(self.ms - self.low_ms, self.high_ms - self.ms) / self.ms

    @property
    def median_ms(self) -> float:
        """The plain median of the samples (``ms`` is the ``quantile``)."""
        return statistics.median(self.samples)

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
        """``items[numerator] / items[denominator]``: the ratio of their figures, with a 95 % interval.

        The interval joins the two figures' 97.5 % intervals (high over low and low over
        high), so it holds at 95 % at least. Not the median of the per-round ratios: when
        more than half of the rounds caught one item preempted, that median is biased too.
        """
        a, b = self.items[denominator], self.items[numerator]
        _, a_low, a_high = quantile_interval(a.samples, a.quantile, confidence=0.975)
        _, b_low, b_high = quantile_interval(b.samples, b.quantile, confidence=0.975)
        ratio = b.ms / a.ms if a.ms > 0 else math.inf
        low = b_low / a_high if a_high > 0 and math.isfinite(b_low) else 0.0
        high = b_high / a_low if a_low > 0 and math.isfinite(b_high) else math.inf
        return {"ratio": ratio, "ci95": [low, high]}


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
                   warm: int = 1, min_sample_ms: float = 1.0, min_rounds: int = 10, max_rounds: int = 1000,
                   target: float = TIMING_TARGET, max_seconds: float = 60.0, seed: int = 0,
                   quantile: float = QUANTILE, met_share: float = 1.0,
                   clock: Callable[[], float] = time.perf_counter,
                   budget_clock: Callable[[], float] | None = None) -> RoundsTiming:
    """Time every runner in shuffled rounds until each one's ``quantile`` is known within ``target``; see the module.

    ``met_share`` below 1 stops the rounds once that share of the runners meets the target (for items whose
    figures are fitted together, as a space's calibration networks are, where a few imprecise ones average out).

    A runner may carry ``sync`` (called before each clock read, e.g. ``torch.cuda.synchronize``),
    as a :class:`~nni_hwaware.profiling.backends.Runner` does. ``clock`` returns seconds; it
    is a parameter so that tests can drive the engine with a fake clock (:func:`sample_clock`
    picks it for a device). ``budget_clock`` reads ``max_seconds`` (default: ``clock``; the
    wall clock when ``clock`` is a CPU-time clock). ``max_seconds`` covers calibration and
    rounds, not the warm-up.
    """
    check_timing(warmup, min_rounds, max_rounds, target, max_seconds, min_sample_ms)
    if isinstance(warm, bool) or not isinstance(warm, int) or warm < 0:
        raise HwAwareError(f"warm must be an integer >= 0 (untimed calls before each sample), got {warm!r}")
    if isinstance(quantile, bool) or not isinstance(quantile, int | float) or not 0 < quantile < 1:
        raise HwAwareError(f"quantile must be between 0 and 1 (e.g. 0.1), got {quantile!r}")
    if isinstance(met_share, bool) or not isinstance(met_share, int | float) or not 0 < met_share <= 1:
        raise HwAwareError(f"met_share must be a share in (0, 1] of the runners that meet the target, got {met_share!r}")
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
    deadline_clock = budget_clock or clock
    begin = deadline_clock()
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
    needed = math.ceil(met_share * len(runners) - 1e-9)  # items that must meet the target (no float off-by-one)
    samples: list[list[float]] = [[] for _ in runners]
    rounds = 0
    while rounds < max_rounds:
        for k in rng.permutation(len(runners)):
            for _ in range(warm):  # untimed: the sample times the item warm (module docstring)
                runners[k]()
            samples[k].append(timed(int(k), calls[k]) * 1000.0 / calls[k])
        rounds += 1
        if rounds >= min_rounds and sum(_half_width(s, quantile) <= target for s in samples) >= needed:
            break
        if rounds >= min(3, min_rounds) and deadline_clock() - begin >= max_seconds:
            break
    items = tuple(ItemTiming(*quantile_interval(s, quantile), samples=tuple(s), calls_per_sample=c,
                             quantile=float(quantile))
                  for s, c in zip(samples, calls, strict=True))
    return RoundsTiming(items, rounds, deadline_clock() - begin, float(target), probe)


def _half_width(samples: Sequence[float], quantile: float) -> float:
    value, low, high = quantile_interval(samples, quantile)
    return max(value - low, high - value) / value if value > 0 else math.inf
