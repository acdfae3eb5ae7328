"""Compare two measured networks honestly: timed interleaved, reported as a ratio with its interval.

A shared machine's load comes in bursts; timing one network after the other lets a
burst land on one of them only. :func:`interleaved_latency` times the two networks
in alternating rounds (A B, B A, A B, ...) in one process, each round with the cost
tables' timing rule, and reports the ratio ``B / A`` as the geometric mean of the
per-round ratios with a 95 % Student-t interval on their logarithms.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch
from torch import nn

from nni_hwaware.errors import HwAwareError
from nni_hwaware.profiling.backends import get_backend
from nni_hwaware.profiling.chips import fixed_threads
from nni_hwaware.profiling.timing import measure_latency

__all__ = ["interleaved_latency"]


def interleaved_latency(a: nn.Module, b: nn.Module, input_shape: tuple[int, ...], *, rounds: int = 10,
                        batch_size: int = 1, threads: int | None = 1, backend: str = "torch",
                        device: str = "cpu", seed: int = 0, min_sample_ms: float = 5.0,
                        max_seconds: float = 2.0) -> dict[str, Any]:
    """Latency of ``a`` and ``b`` timed in alternating rounds; ``ratio`` is ``b / a``.

    Returns ``{a_ms, b_ms (medians over rounds), ratio, ci95: [low, high], rounds, spread}``,
    ``spread`` being the largest relative spread (std / median) of either network over rounds.
    """
    from scipy import stats

    if rounds < 2:
        raise HwAwareError(f"interleaved timing needs at least 2 rounds, got {rounds}")
    runtime = get_backend(backend)
    with fixed_threads(threads):
        generator = torch.Generator().manual_seed(seed)
        example = torch.randn((batch_size, *input_shape), generator=generator)
        runners = [runtime.prepare(net, example, device) for net in (a, b)]
        times: list[list[float]] = [[], []]
        for r in range(rounds):
            for which in ((0, 1) if r % 2 == 0 else (1, 0)):
                runner = runners[which]
                latency = measure_latency(runner, min_sample_ms=min_sample_ms, max_seconds=max_seconds,
                                          sync=runner.sync)
                times[which].append(latency.median_ms)
    a_ms, b_ms = np.asarray(times[0]), np.asarray(times[1])
    logs = np.log(b_ms / a_ms)
    half = float(stats.t.ppf(0.975, len(logs) - 1) * logs.std(ddof=1) / math.sqrt(len(logs)))
    spread = max(float(x.std(ddof=1) / np.median(x)) for x in (a_ms, b_ms))
    return {"a_ms": float(np.median(a_ms)), "b_ms": float(np.median(b_ms)),
            "ratio": float(math.exp(logs.mean())),
            "ci95": [float(math.exp(logs.mean() - half)), float(math.exp(logs.mean() + half))],
            "rounds": rounds, "spread": spread}
