"""Everything a cost table stores about one module on one chip, in one call.

:func:`measure_modules` combines the primitives: FLOPs
(:mod:`~nni_hwaware.profiling.flops`), parameter and activation memory
(:mod:`~nni_hwaware.profiling.memory`), both taken from the eager torch
module, and latency (:mod:`~nni_hwaware.profiling.rounds`, the one measuring engine) through the chosen
:mod:`~nni_hwaware.profiling.backends` backend, all with one fixed thread
count and one seeded input.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from nni_hwaware.errors import HwAwareError
from nni_hwaware.profiling._checks import check_module, check_positive_int, parse_device
from nni_hwaware.profiling.backends import get_backend
from nni_hwaware.profiling.chips import fixed_threads
from nni_hwaware.profiling.flops import count_flops, count_params
from nni_hwaware.profiling.memory import param_bytes, peak_activation_bytes
from nni_hwaware.profiling.rounds import (
    TIMING_TARGET,
    ItemTiming,
    RoundsTiming,
    check_timing,
    sample_clock,
    time_in_rounds,
)

__all__ = ["BYTES_PER_MB", "ModuleCost", "measure_module", "measure_modules", "time_budget"]

#: "MB" in this package means MiB: ``2**20`` bytes.
BYTES_PER_MB = 2**20


@dataclass(frozen=True)
class ModuleCost:
    """Cost of one module for one input shape and batch size on one chip.

    ``flops`` (= 2 x MACs) and ``activation_mb`` are for the whole batch;
    ``params`` counts parameter elements; ``param_mb`` is the bytes of
    parameters and buffers; ``providers`` names the ONNX Runtime execution
    providers (``""`` for the torch backend).  MB means MiB (2**20 bytes).
    """

    latency: ItemTiming
    flops: int
    params: int
    param_mb: float
    activation_mb: float
    providers: str

    @property
    def memory_mb(self) -> float:
        """Inference memory footprint: weights plus peak activations (MiB)."""
        return self.param_mb + self.activation_mb


def _check_shape(input_shape: Sequence[int]) -> tuple[int, ...]:
    if isinstance(input_shape, int) or not isinstance(input_shape, Sequence):
        raise HwAwareError(
            f"input_shape must be a tuple of sizes per sample, without the batch (e.g. (3, 32, 32)), got {input_shape!r}"
        )
    shape = tuple(input_shape)
    if not shape or any(isinstance(d, bool) or not isinstance(d, int) or d < 1 for d in shape):
        raise HwAwareError(
            f"input_shape must be a non-empty tuple of positive ints without the batch (e.g. (3, 32, 32)), got {input_shape!r}"
        )
    return shape


def time_budget(items: int) -> float:
    """The default seconds of timing rounds for ``items`` items: 0.25 s each, at least 2 s, at most 2 minutes
    (a space of 1,743 distinct leaves, MobileNetV3Space's, would otherwise wait out 7 minutes)."""
    return min(120.0, max(2.0, 0.25 * items))


def measure_modules(
    modules: Sequence[nn.Module],
    input_shapes: Sequence[tuple[int, ...]],
    *,
    batch_size: int = 1,
    backend: str = "torch",
    device: str = "cpu",
    threads: int | None = None,
    seed: int = 0,
    probe: int | None = None,
    warmup: int = 3,
    min_rounds: int = 10,
    max_rounds: int = 1000,
    target: float = TIMING_TARGET,
    max_seconds: float | None = None,
    min_sample_ms: float = 1.0,
    met_share: float = 1.0,
) -> tuple[list[ModuleCost], RoundsTiming]:
    """Measure latency, FLOPs, parameters and memory of every module, their latencies in shared rounds.

    Each module's input is ``torch.randn(batch_size, *input_shape)`` drawn on the CPU from
    a ``torch.Generator`` seeded with ``seed`` (the global random state is untouched; the
    values are the same on every device), then moved to ``device``. Under
    :func:`~nni_hwaware.profiling.chips.fixed_threads` (``threads=None`` keeps the count):

    1. the backend is prepared first, so a missing optional dependency fails before
       any work is done;
    2. FLOPs, parameters, parameter bytes and peak activation bytes are measured on
       the eager torch module (FLOPs and activations for the whole batch);
    3. every module's runner is timed by the one measuring engine,
       :func:`~nni_hwaware.profiling.rounds.time_in_rounds` (each round times every
       module once, in a shuffled order, until each module's latency, or ``met_share`` of them, is within
       ``target``; ``max_seconds`` is the budget of all rounds,
       :func:`time_budget` of the modules by default; ``probe`` indexes the module whose per-round times record the machine's drift).

    Modules are left on ``device`` with their train/eval mode restored. Nothing touches
    CUDA when ``device`` is ``"cpu"``.
    """
    if len(modules) != len(input_shapes):
        raise HwAwareError(f"got {len(modules)} modules but {len(input_shapes)} input shapes")
    for module in modules:
        check_module(module)
    shapes = [_check_shape(shape) for shape in input_shapes]
    check_positive_int("batch_size", batch_size)
    dev = parse_device(device)
    if threads is not None:
        check_positive_int("threads", threads)
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise HwAwareError(f"seed must be an integer, got {seed!r}")
    max_seconds = time_budget(len(modules)) if max_seconds is None else max_seconds
    check_timing(warmup, min_rounds, max_rounds, target, max_seconds, min_sample_ms)
    runtime = get_backend(backend)

    modes = [module.training for module in modules]
    try:
        with fixed_threads(threads):
            facts, runners = [], []
            for module, shape in zip(modules, shapes, strict=True):
                generator = torch.Generator(device="cpu").manual_seed(seed)
                example = torch.randn((batch_size, *shape), generator=generator).to(dev)
                runner = runtime.prepare(module, example, str(dev))
                module.eval().to(dev)
                facts.append((count_flops(module, example), count_params(module), param_bytes(module),
                              peak_activation_bytes(module, example, dev), runner.providers))
                runners.append(runner)
            timing = time_in_rounds(runners, probe=probe, warmup=warmup, min_sample_ms=min_sample_ms,
                                    min_rounds=min_rounds, max_rounds=max_rounds, target=target,
                                    max_seconds=max_seconds, seed=seed, met_share=met_share,
                                    clock=sample_clock(str(dev), torch.get_num_threads()),
                                    budget_clock=time.perf_counter)
    finally:
        for module, mode in zip(modules, modes, strict=True):
            module.train(mode)
    costs = [ModuleCost(latency=item, flops=flops, params=params, param_mb=weights / BYTES_PER_MB,
                        activation_mb=activations / BYTES_PER_MB, providers=providers)
             for item, (flops, params, weights, activations, providers) in zip(timing.items, facts, strict=True)]
    return costs, timing


def measure_module(module: nn.Module, input_shape: tuple[int, ...], **options: Any) -> ModuleCost:
    """:func:`measure_modules` of one module (its rounds time only it)."""
    return measure_modules([module], [input_shape], **options)[0][0]
