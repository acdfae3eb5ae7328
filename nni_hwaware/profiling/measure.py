"""Everything a cost table stores about one module on one chip, in one call.

:func:`measure_module` combines the primitives: FLOPs
(:mod:`~nni_hwaware.profiling.flops`), parameter and activation memory
(:mod:`~nni_hwaware.profiling.memory`), both taken from the eager torch
module, and latency (:mod:`~nni_hwaware.profiling.timing`) through the chosen
:mod:`~nni_hwaware.profiling.backends` backend, all with one fixed thread
count and one seeded input.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import nn

from nni_hwaware.errors import HwAwareError
from nni_hwaware.profiling._checks import check_module, check_positive_int, parse_device
from nni_hwaware.profiling.backends import get_backend
from nni_hwaware.profiling.chips import fixed_threads
from nni_hwaware.profiling.flops import count_flops, count_params
from nni_hwaware.profiling.memory import param_bytes, peak_activation_bytes
from nni_hwaware.profiling.timing import LatencyStats, _check_options, measure_latency

__all__ = ["BYTES_PER_MB", "ModuleCost", "measure_module"]

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

    latency: LatencyStats
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


def measure_module(
    module: nn.Module,
    input_shape: tuple[int, ...],
    *,
    batch_size: int = 1,
    backend: str = "torch",
    device: str = "cpu",
    threads: int | None = None,
    seed: int = 0,
    warmup: int = 5,
    min_runs: int = 10,
    max_runs: int = 200,
    target_cv: float = 0.05,
    max_seconds: float = 5.0,
    min_sample_ms: float = 1.0,
) -> ModuleCost:
    """Measure latency, FLOPs, parameters and memory of ``module`` on ``device``.

    The input is ``torch.randn(batch_size, *input_shape)`` drawn on the CPU
    from a ``torch.Generator`` seeded with ``seed`` (the global random state
    is untouched; the values are the same on every device), then moved to
    ``device``.  Under :func:`~nni_hwaware.profiling.chips.fixed_threads`
    (``threads=None`` keeps the current count):

    1. the backend is prepared first, so a missing optional dependency fails
       before any work is done;
    2. FLOPs, parameters, parameter bytes and peak activation bytes are
       measured on the eager torch module (FLOPs and activations for the
       whole batch);
    3. latency is measured through the backend's runner with
       :func:`~nni_hwaware.profiling.timing.measure_latency` and the timing
       options given here.

    ``module`` is left on ``device`` (``nn.Module.to`` moves it in place)
    with its original train/eval mode restored.  Nothing touches CUDA when
    ``device`` is ``"cpu"``.
    """
    check_module(module)
    shape = _check_shape(input_shape)
    check_positive_int("batch_size", batch_size)
    dev = parse_device(device)
    if threads is not None:
        check_positive_int("threads", threads)
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise HwAwareError(f"seed must be an integer, got {seed!r}")
    _check_options(warmup, min_runs, max_runs, target_cv, max_seconds, min_sample_ms)
    runtime = get_backend(backend)

    was_training = module.training
    try:
        with fixed_threads(threads):
            generator = torch.Generator(device="cpu").manual_seed(seed)
            example = torch.randn((batch_size, *shape), generator=generator).to(dev)
            runner = runtime.prepare(module, example, str(dev))
            module.eval().to(dev)

            flops = count_flops(module, example)
            params = count_params(module)
            weights = param_bytes(module)
            activations = peak_activation_bytes(module, example, dev)

            latency = measure_latency(
                runner,
                warmup=warmup,
                min_runs=min_runs,
                max_runs=max_runs,
                target_cv=target_cv,
                max_seconds=max_seconds,
                sync=runner.sync,
                min_sample_ms=min_sample_ms,
            )
    finally:
        module.train(was_training)

    return ModuleCost(
        latency=latency,
        flops=flops,
        params=params,
        param_mb=weights / BYTES_PER_MB,
        activation_mb=activations / BYTES_PER_MB,
        providers=runner.providers,
    )
