"""A bounded, reproducible background load: how "holds on a busy machine" is measured.

A user's machine is rarely quiet (a CI runner, a laptop on battery, a phone that
throttles), and a quiet minute proves nothing about a busy one. :class:`BackgroundLoad`
starts two worker processes per CPU the measuring process may run on (the same CPU
affinity, so the load competes with the measurement for the same cores: as many workers
are busy as there are cores on average, between none and twice as many at a time). Each worker
switches between busy (array arithmetic over a few MB, so caches and memory bandwidth
are contended too) and idle in random phases of 50-500 ms, drawn from a generator
seeded with ``seed`` plus the worker's index, and stops by itself after ``seconds``.
It opens no socket and writes no file.

    with BackgroundLoad(seed=0, seconds=120):
        ...  # measure here
"""

from __future__ import annotations

import contextlib
import multiprocessing as mp
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from nni_hwaware.errors import HwAwareError

__all__ = ["BackgroundLoad", "load_phases", "run_under_load"]


def run_under_load(run: Callable[[], dict[str, Any]], *, enabled: bool, seed: int = 0,
                   seconds: float = 4 * 3600.0) -> dict[str, Any]:
    """``run()``'s figures, run under a :class:`BackgroundLoad` when ``enabled``, with ``load``
    (``{seed, seconds, workers}`` or None) and ``wall_s`` added: what a benchmark's ``--load`` does."""
    harness = BackgroundLoad(seed=seed, seconds=seconds) if enabled else contextlib.nullcontext()
    start = time.perf_counter()
    with harness as running:
        result = run()
        result["load"] = {"seed": seed, "seconds": seconds, "workers": len(running.pids)} if enabled else None
    result["wall_s"] = time.perf_counter() - start
    return result


def load_phases(seed: int, seconds: float, shortest: float = 0.05, longest: float = 0.5) -> list[tuple[bool, float]]:
    """The schedule of one worker: ``(busy, length in seconds)`` phases covering ``seconds``, seeded."""
    rng = np.random.default_rng(seed)
    phases, total = [], 0.0
    busy = bool(rng.integers(2))
    while total < seconds:
        length = float(rng.uniform(shortest, longest))
        phases.append((busy, length))
        total += length
        busy = not busy
    return phases


def _work(seed: int, seconds: float, deadline: float, cpus: list[int] | None) -> None:
    """One worker: follow the seeded schedule, spinning in busy phases and sleeping in idle ones."""
    if cpus is not None and hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, cpus)
    buffer = np.ones(1 << 19)  # 4 MB of float64: more than a core's share of the last-level cache
    for busy, length in load_phases(seed, seconds):
        end = min(time.monotonic() + length, deadline)
        if busy:
            while time.monotonic() < end:
                buffer *= 1.0000001
                buffer.sum()
        else:
            time.sleep(max(0.0, end - time.monotonic()))
        if time.monotonic() >= deadline:
            return


@dataclass
class BackgroundLoad:
    """Worker processes loading this process's CPUs in seeded busy/idle phases, for at most ``seconds``."""

    seed: int = 0
    """Seeds every worker's phases (worker ``i`` uses ``seed + i``)."""
    seconds: float = 600.0
    """Each worker stops by itself after this long, even if :meth:`stop` is never called."""
    workers: int | None = None
    """Worker processes (default: two per CPU this process may run on)."""
    _processes: list[mp.process.BaseProcess] = field(default_factory=list, init=False, repr=False)

    def __post_init__(self) -> None:
        if not self.seconds > 0:
            raise HwAwareError(f"the load's seconds must be > 0, got {self.seconds}")
        if self.workers is not None and self.workers < 1:
            raise HwAwareError(f"the load needs at least 1 worker, got {self.workers}")

    @staticmethod
    def cpus() -> list[int] | None:
        """The CPUs this process may run on (None where the platform cannot say)."""
        return sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None

    def start(self) -> BackgroundLoad:
        if self._processes:
            raise HwAwareError("the background load is already running; stop it first")
        cpus = self.cpus()
        count = self.workers or 2 * (len(cpus) if cpus else (os.cpu_count() or 1))
        # fork where there is one: the worker starts at once (a spawned one would import torch first)
        context = mp.get_context("fork" if "fork" in mp.get_all_start_methods() else "spawn")
        deadline = time.monotonic() + self.seconds  # the machine's monotonic clock, shared by the workers
        for i in range(count):
            process = context.Process(target=_work, args=(self.seed + i, self.seconds, deadline, cpus),
                                      daemon=True)
            process.start()
            self._processes.append(process)
        return self

    @property
    def pids(self) -> list[int]:
        """Process ids of the workers started (empty before :meth:`start` and after :meth:`stop`)."""
        return [p.pid for p in self._processes if p.pid is not None]

    @property
    def running(self) -> bool:
        return any(p.is_alive() for p in self._processes)

    def stop(self) -> None:
        for process in self._processes:
            if process.is_alive():
                process.terminate()
        for process in self._processes:
            process.join(timeout=5)
        self._processes = []

    def __enter__(self) -> BackgroundLoad:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
