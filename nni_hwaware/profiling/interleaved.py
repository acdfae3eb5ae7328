"""Compare two measured networks honestly: timed interleaved, reported as a ratio with its interval.

A shared machine's load comes in bursts; timing one network after the other lets a
burst land on one of them only. :func:`interleaved_latency` times the two networks
with the one measuring engine (:func:`~nni_hwaware.profiling.rounds.time_in_rounds`:
each round times both, in a shuffled order) and reports the ratio ``B / A`` of their
figures with a 95 % interval (:meth:`~nni_hwaware.profiling.rounds.RoundsTiming.ratio`).
"""

from __future__ import annotations

import time
from typing import Any

import torch
from torch import nn

from nni_hwaware.errors import HwAwareError
from nni_hwaware.profiling.backends import get_backend
from nni_hwaware.profiling.chips import fixed_threads
from nni_hwaware.profiling.rounds import sample_clock, time_in_rounds

__all__ = ["interleaved_latency"]


def interleaved_latency(a: nn.Module, b: nn.Module, input_shape: tuple[int, ...], *, rounds: int = 20,
                        batch_size: int = 1, threads: int | None = 1, backend: str = "torch",
                        device: str = "cpu", seed: int = 0, min_sample_ms: float = 5.0,
                        max_seconds: float = 5.0, target: float = 0.02) -> dict[str, Any]:
    """Latency of ``a`` and ``b`` timed in shared rounds; ``ratio`` is ``b / a``.

    At least ``rounds`` rounds, more until both figures are known within ``target`` or
    ``max_seconds`` pass. Returns ``{a_ms, b_ms (10th percentiles over rounds), a_ci95, b_ci95,
    ratio, ci95: [low, high], rounds, spread}``, ``spread`` being the ratio's interval as a
    share of the ratio (its larger half): how precisely the machine let the two be compared.
    """
    if rounds < 2:
        raise HwAwareError(f"interleaved timing needs at least 2 rounds, got {rounds}")
    runtime = get_backend(backend)
    with fixed_threads(threads):
        generator = torch.Generator().manual_seed(seed)
        example = torch.randn((batch_size, *input_shape), generator=generator)
        runners = [runtime.prepare(net, example, device) for net in (a, b)]
        timing = time_in_rounds(runners, min_sample_ms=min_sample_ms, min_rounds=rounds,
                                clock=sample_clock(device, torch.get_num_threads()), budget_clock=time.perf_counter,
                                max_rounds=max(rounds, 1000), target=target, max_seconds=max_seconds, seed=seed)
    ratio = timing.ratio(1, 0)
    low, high = ratio["ci95"]
    return {"a_ms": timing[0].ms, "b_ms": timing[1].ms,
            "a_ci95": [timing[0].low_ms, timing[0].high_ms], "b_ci95": [timing[1].low_ms, timing[1].high_ms],
            "ratio": ratio["ratio"], "ci95": ratio["ci95"], "rounds": timing.rounds,
            "spread": max(high / ratio["ratio"] - 1, 1 - low / ratio["ratio"])}
