"""The interleaved measuring engine on a toy with known ratios and a clock whose speed moves in phases."""

from __future__ import annotations

import math
import statistics

import numpy as np
import pytest

from nni_hwaware.errors import HwAwareError
from nni_hwaware.profiling.load import load_phases
from nni_hwaware.profiling.rounds import median_interval, quantile_interval, time_in_rounds
from nni_hwaware.profiling.timing import split_outliers

#: True per-call costs (ms) of the toy items: their ratios are what a table must get right.
COSTS = (1.2, 3.0, 7.5, 2.1, 12.0, 4.8)


class PhasedClock:
    """A deterministic fake clock: the machine's speed changes in phases of 50-500 ms (seeded).

    In each phase every call costs its item's cost times the phase's slowdown, drawn from
    1.0-2.3 (the same network took 1.7 to 4.0 ms within seconds on a shared machine).
    """

    def __init__(self, seed: int = 0) -> None:
        rng = np.random.default_rng(seed)
        lengths = rng.uniform(0.05, 0.5, 20_000)
        self.ends = np.cumsum(lengths)
        self.slowdowns = 1.0 + 1.3 * rng.uniform(size=len(lengths))
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    def slowdown(self) -> float:
        return float(self.slowdowns[min(np.searchsorted(self.ends, self.now), len(self.ends) - 1)])

    def runner(self, cost_ms: float):  # type: ignore[no-untyped-def]
        def run() -> None:
            self.now += cost_ms * self.slowdown() / 1000.0

        return run


def _sequential_median_ms(run, clock, *, min_sample_ms: float = 5.0, target_cv: float = 0.05,  # type: ignore[no-untyped-def]
                          warmup: int = 5, min_runs: int = 10, max_runs: int = 200, max_seconds: float = 5.0) -> float:
    """The sequential rule the engine is compared against: one item timed alone until its CV is small.

    Warm-up, calibration to ``min_sample_ms`` per sample, then samples until the CV of the
    samples the MAD rule keeps is at most ``target_cv`` (after ``min_runs``), or ``max_runs``,
    or ``max_seconds``; the figure is the kept samples' median.
    """
    for _ in range(warmup):
        run()

    def timed(calls: int) -> float:
        start = clock()
        for _ in range(calls):
            run()
        return clock() - start

    begin, calls = clock(), 1
    elapsed = timed(calls)
    while elapsed < min_sample_ms / 1000.0:
        calls = max(math.ceil(calls * min_sample_ms / 1000.0 * 1.1 / elapsed), calls + 1)
        elapsed = timed(calls)
    samples: list[float] = []
    while len(samples) < max_runs:
        samples.append(timed(calls) * 1000.0 / calls)
        kept, _ = split_outliers(samples)
        if len(samples) >= min_runs and len(kept) >= 2 and statistics.stdev(kept) / statistics.fmean(kept) <= target_cv:
            break
        if len(samples) >= 2 and clock() - begin >= max_seconds:
            break
    return statistics.median(split_outliers(samples)[0])


def _worst_ratio_error(estimates: list[float]) -> float:
    ratios = np.asarray(estimates) / estimates[0]
    truth = np.asarray(COSTS) / COSTS[0]
    return float(np.max(np.abs(ratios / truth - 1)))


@pytest.mark.parametrize("seed", range(3))
def test_interleaved_rounds_recover_the_true_ratios_and_the_sequential_rule_does_not(seed: int) -> None:
    clock = PhasedClock(seed)
    timing = time_in_rounds([clock.runner(c) for c in COSTS], min_sample_ms=5.0, max_rounds=3000,
                            max_seconds=600.0, target=0.02, seed=seed, clock=clock)
    assert not timing.missed, [timing[i].half_width for i in timing.missed]
    assert _worst_ratio_error([item.ms for item in timing.items]) <= 0.02

    clock = PhasedClock(seed)  # the same machine, the per-item "until CV <= 5 %" rule
    sequential = [_sequential_median_ms(clock.runner(c), clock, min_sample_ms=5.0, target_cv=0.05) for c in COSTS]
    assert _worst_ratio_error(sequential) > 0.05


class PreemptingClock:
    """A deterministic fake clock of a core shared with the load harness's two workers.

    The workers follow the harness's own seeded schedules (:func:`load_phases`); while
    either is busy, each call is preempted with probability 1/2 and waits out a 3 ms time
    slice of the other process. The delay is one-sided and does not scale with the call,
    so more than half of the samples of every item are late.
    """

    def __init__(self, seed: int = 0, slice_ms: float = 3.0) -> None:
        self.workers = []
        for worker in range(2):
            phases = load_phases(seed + worker, 3000.0)
            self.workers.append((np.cumsum([length for _, length in phases]), np.array([b for b, _ in phases])))
        self.rng = np.random.default_rng(seed)
        self.slice = slice_ms / 1000.0
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    def busy(self) -> bool:
        return any(busy[min(np.searchsorted(ends, self.now), len(ends) - 1)] for ends, busy in self.workers)

    def runner(self, cost_ms: float):  # type: ignore[no-untyped-def]
        def run() -> None:
            self.now += cost_ms / 1000.0
            if self.busy() and self.rng.uniform() < 0.5:
                self.now += self.slice

        return run


@pytest.mark.parametrize("seed", range(3))
def test_a_low_quantile_holds_under_preemption_and_the_median_does_not(seed: int) -> None:
    clock = PreemptingClock(seed)
    timing = time_in_rounds([clock.runner(c) for c in COSTS], min_sample_ms=5.0, min_rounds=300,
                            max_rounds=3000, max_seconds=600.0, seed=seed, clock=clock)
    assert _worst_ratio_error([item.ms for item in timing.items]) <= 0.02
    for k, cost in enumerate(COSTS):
        low, high = timing.ratio(k, 0)["ci95"]
        assert low * (1 - 1e-9) <= cost / COSTS[0] <= high * (1 + 1e-9)
    assert _worst_ratio_error([item.median_ms for item in timing.items]) > 0.10


class CacheClock:
    """A deterministic fake clock of a machine with caches: a call right after another item's costs
    ``cold_ms`` more (its weights and code were evicted), a call after the same item's does not."""

    def __init__(self, cold_ms: float) -> None:
        self.now, self.last, self.cold = 0.0, None, cold_ms / 1000.0

    def __call__(self) -> float:
        return self.now

    def runner(self, k: int, cost_ms: float):  # type: ignore[no-untyped-def]
        def run() -> None:
            self.now += cost_ms / 1000.0 + (self.cold if self.last != k else 0.0)
            self.last = k

        return run


@pytest.mark.parametrize("seed", range(3))
def test_a_sample_times_its_item_warm_whatever_ran_before_it(seed: int) -> None:
    """Each sample's first call pays for the previous item's evictions: 1 ms on calls of 1.2-12 ms puts the
    items' ratios 8-17 % off when samples start cold; one untimed call before each sample recovers them."""
    errors = {}
    for warm in (0, 1):
        clock = CacheClock(cold_ms=1.0)
        timing = time_in_rounds([clock.runner(k, c) for k, c in enumerate(COSTS)], warm=warm, min_sample_ms=5.0,
                                min_rounds=60, max_rounds=60, max_seconds=600.0, seed=seed, clock=clock)
        errors[warm] = _worst_ratio_error([item.ms for item in timing.items])
    assert errors[1] <= 1e-9 and errors[0] > 0.05, errors


def test_every_round_times_every_item_once_in_a_seeded_shuffled_order() -> None:
    order: list[int] = []
    now = [0.0]

    def runner(k: int):  # type: ignore[no-untyped-def]
        def run() -> None:
            order.append(k)
            now[0] += 0.002  # 2 ms: one call per 1 ms sample

        return run

    def go(seed: int) -> list[int]:
        order.clear()
        time_in_rounds([runner(k) for k in range(4)], warmup=0, warm=0, min_rounds=5, max_rounds=5, seed=seed,
                       clock=lambda: now[0])
        return order[4:]  # after one calibration call each

    first = go(1)
    rounds = [first[i:i + 4] for i in range(0, 20, 4)]
    assert all(sorted(r) == [0, 1, 2, 3] for r in rounds)
    assert len({tuple(r) for r in rounds}) > 1  # shuffled
    assert go(1) == first and go(2) != first  # seeded


def test_steady_items_stop_at_min_rounds_and_a_time_budget_reports_misses() -> None:
    now = [0.0]

    def steady(cost: float):  # type: ignore[no-untyped-def]
        def run() -> None:
            now[0] += cost / 1000

        return run

    timing = time_in_rounds([steady(1.0), steady(3.0)], min_rounds=10, clock=lambda: now[0])
    assert timing.rounds == 10 and not timing.missed and timing.share_met == 1.0
    assert timing[1].ms == pytest.approx(3.0) and timing.ratio(1, 0)["ratio"] == pytest.approx(3.0)

    calls = [0]

    def noisy() -> None:
        calls[0] += 1
        now[0] += (1.0 + (calls[0] % 7) * 0.3) / 1000

    timing = time_in_rounds([steady(1.0), noisy], min_rounds=10, max_seconds=0.05, clock=lambda: now[0])
    assert timing.missed == [1] and timing.share_met == 0.5  # reported, not hidden
    assert timing.seconds >= 0.05


def test_a_met_share_stops_when_enough_items_meet_the_target_and_is_checked() -> None:
    """Calibration networks are fitted together: the rounds stop once a share of them is precise."""
    now = [0.0]
    calls = [0]

    def steady(cost: float):  # type: ignore[no-untyped-def]
        def run() -> None:
            now[0] += cost / 1000

        return run

    def noisy() -> None:
        calls[0] += 1
        now[0] += (1.0 + (calls[0] % 7) * 0.3) / 1000

    runners = [steady(1.0 + 0.1 * k) for k in range(9)] + [noisy]
    every = time_in_rounds(runners, min_rounds=10, max_seconds=1.0, clock=lambda: now[0])
    assert every.missed == [9] and every.rounds > 10 and every.seconds >= 1.0  # waits out the budget
    most = time_in_rounds(runners, min_rounds=10, max_seconds=1.0, met_share=0.9, clock=lambda: now[0])
    assert most.rounds == 10 and most.missed == [9] and most.share_met == 0.9  # the one left is still reported
    for bad in (0, 1.5, True):
        with pytest.raises(HwAwareError, match="met_share must be a share in"):
            time_in_rounds(runners, met_share=bad, clock=lambda: now[0])


def test_probe_drift_and_median_interval() -> None:
    median, low, high = median_interval(range(1, 101))
    assert median == 50.5 and low < median < high and (low, high) == (41, 60)
    assert median_interval([1.0, 2.0])[1] == -math.inf  # too few samples for a 95 % interval
    quartile, low, high = quantile_interval(range(1, 101), 0.25)
    assert quartile == pytest.approx(25.75) and (low, high) == (17, 34)  # ranks 25 -+ 1.96 * sqrt(18.75)
    assert quantile_interval(range(1, 101), 0.25, confidence=0.99)[1] < low
    with pytest.raises(HwAwareError, match="quantile must be between 0 and 1"):
        quantile_interval([1.0] * 10, 1.5)
    clock = PhasedClock(0)
    timing = time_in_rounds([clock.runner(1.0), clock.runner(2.0)], probe=0, min_rounds=400, max_rounds=400,
                            clock=clock)
    drift = timing.drift
    assert drift["probe_drift"] > 1.2 and drift["probe_p10_ms"] < drift["probe_ms"] < drift["probe_p90_ms"]


@pytest.mark.parametrize(("options", "message"), [
    ({"min_rounds": 1}, "min_rounds must be"), ({"target": -0.1}, "target must be"),
    ({"max_seconds": 0}, "max_seconds must be"), ({"probe": 3}, "probe must index"),
    ({"quantile": 0}, "quantile must be"), ({"warm": -1}, "warm must be an integer")])
def test_bad_options_are_one_line_errors(options: dict, message: str) -> None:
    with pytest.raises(HwAwareError, match=message):
        time_in_rounds([lambda: None], **options)


def test_samples_read_the_threads_cpu_time_on_one_cpu_thread_and_the_budget_reads_its_own_clock() -> None:
    import time

    from nni_hwaware.profiling.rounds import sample_clock

    assert sample_clock("cpu", 1) is time.thread_time  # preempted time is not the network's
    assert sample_clock("cpu", 4) is time.perf_counter and sample_clock("cuda:0", 1) is time.perf_counter
    # a sample clock that barely moves cannot stretch the budget: it is read on the budget's clock
    ticks, wall = [0.0], [0.0]

    calls = [0]

    def run() -> None:
        calls[0] += 1
        ticks[0] += 1e-3 * (1 + calls[0] % 2)  # 1 or 2 ms of CPU: never within a 0 % target
        wall[0] += 0.5  # half a second of wall time per call (the core is shared)

    timing = time_in_rounds([run], min_rounds=3, max_rounds=1000, max_seconds=5.0, target=0.0,
                            clock=lambda: ticks[0], budget_clock=lambda: wall[0])
    assert timing.rounds < 20 and timing.seconds >= 5.0
    assert timing[0].ms == pytest.approx(1.0)  # its 10th percentile, in CPU ms
