"""Which chip a measurement ran on, its matmul throughput, and a fixed thread count.

A cost table is only meaningful for the chip (and, on CPUs, the number of
threads) it was measured with, so every measurement records a
:class:`ChipInfo`.  Callers that want a friendlier name ("Raspberry Pi 4")
pass their own name instead of calling :func:`detect_chip`.
"""

from __future__ import annotations

import math
import platform
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import torch

from nni_hwaware.errors import HwAwareError
from nni_hwaware.profiling._checks import check_positive_int, parse_device

__all__ = ["ChipInfo", "cache_mb", "detect_chip", "fixed_threads", "measure_peak_flops"]

_CPUINFO = Path("/proc/cpuinfo")
_CPU_CACHES = Path("/sys/devices/system/cpu")
_SIZE_UNITS = {"K": 1 / 1024, "M": 1.0, "G": 1024.0}


@dataclass(frozen=True)
class ChipInfo:
    """A chip as recorded next to its measurements.

    ``name`` is the vendor's model string (``"Intel(R) Xeon(R) CPU @ 2.20GHz"``,
    ``"NVIDIA H200"``), ``device`` the torch device string the measurements
    used (``"cpu"``, ``"cuda:0"``), and ``threads`` the intra-op thread count
    (:func:`torch.get_num_threads`) they ran with -- a property of the
    measurement on CPUs, recorded for GPUs too since host-side overhead
    depends on it.
    """

    name: str
    device: str
    threads: int


def _cpu_model_name() -> str:
    """The ``model name`` line of /proc/cpuinfo, else ``platform.processor()``, else the architecture."""
    try:
        for line in _CPUINFO.read_text(encoding="utf-8", errors="replace").splitlines():
            key, sep, value = line.partition(":")
            if sep and key.strip().lower() == "model name" and value.strip():
                return " ".join(value.split())
    except OSError:
        pass
    return platform.processor().strip() or platform.machine().strip() or "unknown CPU"


def detect_chip(device: str = "cpu", threads: int | None = None) -> ChipInfo:
    """Describe the chip behind ``device``.

    CPU: the model string from /proc/cpuinfo (falling back to
    :func:`platform.processor` / :func:`platform.machine` where that file
    does not exist or has no ``model name``, e.g. macOS, some ARM boards).
    CUDA: :func:`torch.cuda.get_device_name`.  ``threads`` defaults to the
    current :func:`torch.get_num_threads`; pass the count you will measure
    with (see :func:`fixed_threads`).
    """
    dev = parse_device(device)
    n_threads = (
        torch.get_num_threads() if threads is None else check_positive_int("threads", threads)
    )
    if dev.type == "cuda":
        index = dev.index if dev.index is not None else torch.cuda.current_device()
        return ChipInfo(
            name=torch.cuda.get_device_name(index), device=f"cuda:{index}", threads=n_threads
        )
    return ChipInfo(name=_cpu_model_name(), device="cpu", threads=n_threads)


def cache_mb(device: str = "cpu", root: Path = _CPU_CACHES) -> float | None:
    """The L2 cache of the core this process runs on, in MB (2**20 bytes); None on a GPU or where the
    system does not say (Linux's ``/sys/devices/system/cpu/cpuN/cache``)."""
    import os

    if parse_device(device).type != "cpu":
        return None
    cpus = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else [0]
    try:
        for index in sorted((root / f"cpu{cpus[0]}" / "cache").glob("index*")):
            level, kind = (index / "level").read_text().strip(), (index / "type").read_text().strip()
            size = (index / "size").read_text().strip().upper()
            if level == "2" and kind in ("Unified", "Data") and size[-1:] in _SIZE_UNITS and size[:-1].isdigit():
                return int(size[:-1]) * _SIZE_UNITS[size[-1]]
    except OSError:
        pass
    return None


@contextmanager
def fixed_threads(n: int | None) -> Iterator[int]:
    """Run the block with ``torch.set_num_threads(n)``, restoring the previous count after.

    ``None`` leaves the count unchanged.  Yields the thread count in effect.
    Intra-op parallelism changes CPU latency several-fold, so every
    measurement fixes it; note that the setting is process-wide.
    """
    previous = torch.get_num_threads()
    if n is None:
        yield previous
        return
    check_positive_int("threads", n)
    torch.set_num_threads(n)
    try:
        yield n
    finally:
        torch.set_num_threads(previous)


_FLOAT_DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64)


def measure_peak_flops(
    device: str = "cpu",
    *,
    dtype: torch.dtype = torch.float32,
    size: int = 512,
    seconds: float = 1.0,
) -> float:
    """Dense matmul throughput of ``device`` in FLOP/s: the roofline's compute ceiling.

    Times ``C = A @ B`` for ``size x size`` matrices of ``dtype``, which is
    ``2 * size**3`` FLOPs (``size**3`` multiply-adds, counted as two
    operations like :mod:`~nni_hwaware.profiling.flops`).  After one warm-up
    multiply, the number of back-to-back multiplies per timing is doubled
    until a timing lasts at least ``min(seconds / 20, 5 ms)``; timings are
    then repeated for ``seconds`` (at least three) and the **best** one is
    used, because interference only ever makes a timing slower.  The result
    is ``2 * size**3 * k / best_seconds``.  It uses the current thread count
    (wrap in :func:`fixed_threads`).  Inputs come from a private seeded
    generator, so the global random state is untouched.
    """
    dev = parse_device(device)
    check_positive_int("size", size)
    if dtype not in _FLOAT_DTYPES:
        raise HwAwareError(f"dtype must be one of float16, bfloat16, float32, float64, got {dtype}")
    if not (isinstance(seconds, int | float) and seconds > 0 and math.isfinite(seconds)):
        raise HwAwareError(f"seconds must be a finite number > 0, got {seconds!r}")

    sync = (lambda: torch.cuda.synchronize(dev)) if dev.type == "cuda" else (lambda: None)
    generator = torch.Generator(device="cpu").manual_seed(0)
    a = torch.randn(size, size, generator=generator).to(device=dev, dtype=dtype)
    b = torch.randn(size, size, generator=generator).to(device=dev, dtype=dtype)
    c = torch.empty(size, size, device=dev, dtype=dtype)

    def timed(k: int) -> float:
        sync()
        start = time.perf_counter()
        for _ in range(k):
            torch.mm(a, b, out=c)
        sync()
        return time.perf_counter() - start

    with torch.inference_mode():
        timed(1)  # warm-up: thread pool start, kernel selection
        k = 1
        min_timing = min(seconds / 20.0, 0.005)
        elapsed = timed(k)
        while elapsed < min_timing and k < 1 << 20:
            k *= 2
            elapsed = timed(k)
        best = elapsed
        deadline = time.perf_counter() + seconds
        repeats = 0
        while repeats < 3 or time.perf_counter() < deadline:
            best = min(best, timed(k))
            repeats += 1
    if best <= 0:
        raise HwAwareError("the matmul finished faster than the clock resolution; increase size")
    return 2.0 * size**3 * k / best
