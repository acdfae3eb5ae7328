"""Profile a search space on one chip into a :class:`CostTable` (seed 000 step 1).

Every candidate block at every layer position of the space, with its real input
shape, and the fixed parts (stem, head) are measured with preset test cases
(:func:`nni_hwaware.profiling.measure_module`: warm-up, timed runs until the
coefficient of variation is at most 5 %, median, outliers dropped, fixed thread
count, ``torch.inference_mode``). Identical blocks at identical shapes (the
layers after the first of a stage) are profiled once.

A plain sum of isolated blocks underestimates a whole network: a block timed in
a loop on its own finds its weights and code in cache, in a network it does not
(on a 2-core CPU the gap was 8-13 % at batch 1). So after the blocks, a few
random networks of the space are measured end to end and the median gap between
measured and summed latency is stored as the ``network`` row, which every
prediction adds (``calibration_archs=0`` skips it).

``activation_mb`` in the table is the peak of bytes alive while the block runs,
**its input included** (the input stays alive until the block returns), so the
peak activation of a whole network is the largest of its blocks' values.
"""

from __future__ import annotations

import datetime as dt
import math
from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn
from tqdm.auto import tqdm

from nni_hwaware.cost_table.table import BlockKey, CostTable
from nni_hwaware.errors import HwAwareError
from nni_hwaware.profiling import (
    BYTES_PER_MB,
    detect_chip,
    fixed_threads,
    measure_module,
    measure_peak_flops,
)
from nni_hwaware.spaces.blocks import build_block
from nni_hwaware.spaces.config import SpaceConfig

__all__ = ["TIMING", "ProfileEntry", "profile_entries", "profile_space"]

#: Timing options for tables and for the networks they are checked against: a
#: sample lasts at least 5 ms (many calls of a fast block), which keeps the
#: scheduler's millisecond hiccups from dominating the spread.
TIMING: dict[str, float] = {"min_sample_ms": 5.0}
#: An entry whose spread stays above ``target_cv`` is measured again, at most this often.
RETRIES = 2


@dataclass(frozen=True)
class ProfileEntry:
    """One thing to measure: a block (candidate or fixed part) at one shape."""

    key: BlockKey
    kind: str

    def build(self, config: SpaceConfig) -> nn.Module:
        if self.kind == "fixed":
            return config.build_fixed(self.key.block)
        return build_block(self.key.block, self.key.input_shape[0], self.key.out_channels, self.key.stride)


def profile_entries(config: SpaceConfig) -> list[ProfileEntry]:
    """The distinct (block, shape) pairs of a space, fixed parts first, in forward order."""
    entries = [
        ProfileEntry(BlockKey(part.name, part.input_shape, part.out_channels, part.stride), "fixed")
        for part in config.fixed_parts()
    ]
    for spec in config.layer_specs():
        for name in spec.candidates:
            entries.append(ProfileEntry(
                BlockKey(name, spec.input_shape, spec.out_channels, spec.stride), "candidate"))
    return list(dict.fromkeys(entries))


def profile_space(
    config: SpaceConfig,
    *,
    chip: str | None = None,
    backend: str = "torch",
    device: str = "cpu",
    batch_size: int = 1,
    threads: int | None = 1,
    peak_flops: float | None = None,
    seed: int = 0,
    progress: bool = True,
    entries: Iterable[ProfileEntry] | None = None,
    calibration_archs: int = 8,
    **timing: float,
) -> CostTable:
    """Measure every block of ``config`` on this machine's chip; one row per block and shape.

    ``chip`` overrides the detected model string (name a board the way your
    team does); ``threads`` is the intra-op thread count, 1 by default because
    it gives the steadiest timings on a shared CPU (profile with the count your
    deployment uses; ``None`` keeps torch's current); ``peak_flops`` is the chip's theoretical peak ``C`` in FLOP/s,
    measured by a short matrix-multiply benchmark when not given. ``timing``
    passes options to :func:`nni_hwaware.profiling.measure_latency` (e.g.
    ``target_cv``, ``max_seconds``).
    """
    if peak_flops is not None and not (math.isfinite(peak_flops) and peak_flops > 0):
        raise HwAwareError(f"peak_flops must be a positive number of FLOP/s, got {peak_flops}")
    todo = list(profile_entries(config) if entries is None else entries)
    timing = {**TIMING, **timing}
    target_cv = float(timing.get("target_cv", 0.05))
    with fixed_threads(threads) as n_threads:
        info = detect_chip(device, n_threads)
        peak = peak_flops if peak_flops is not None else measure_peak_flops(device)
        records = []
        for entry in tqdm(todo, desc=f"profiling {config.name} on {chip or info.name}",
                          disable=not progress, unit="block"):
            module = entry.build(config)
            cost = measure_module(
                module, entry.key.input_shape, batch_size=batch_size, backend=backend,
                device=device, threads=n_threads, seed=seed, **timing,
            )
            for _ in range(RETRIES):
                if cost.latency.cv <= target_cv:
                    break
                again = measure_module(module, entry.key.input_shape, batch_size=batch_size,
                                       backend=backend, device=device, threads=n_threads, seed=seed, **timing)
                cost = min(cost, again, key=lambda c: c.latency.cv)
            input_mb = 4 * batch_size * math.prod(entry.key.input_shape) / BYTES_PER_MB
            activation_mb = cost.activation_mb + input_mb
            latency = cost.latency
            records.append({
                "block": entry.key.block, "kind": entry.kind, "input_shape": entry.key.shape_str,
                "out_channels": entry.key.out_channels, "stride": entry.key.stride,
                "chip": chip or info.name, "backend": backend, "batch_size": batch_size,
                "latency_ms": latency.median_ms, "latency_std_ms": latency.std_ms,
                "latency_cv": latency.cv, "runs": latency.runs,
                "param_mb": cost.param_mb, "activation_mb": activation_mb,
                "memory_mb": cost.param_mb + activation_mb,
                "flops": cost.flops, "params": cost.params, "peak_flops": peak,
                "utilisation": cost.flops / (latency.median_ms / 1000 * peak),
                "torch_version": torch.__version__, "threads": n_threads,
                "profiled_at": dt.date.today().isoformat(), "device": info.device,
                "providers": cost.providers,
            })
        table = CostTable.from_records(records)
        if calibration_archs > 0:
            table = table.merge(_network_overhead(
                table, config, calibration_archs, chip=chip or info.name, backend=backend,
                device=device, batch_size=batch_size, threads=n_threads, seed=seed,
                progress=progress, template=records[0], **timing))
    return table


def _network_overhead(table: CostTable, config: SpaceConfig, k: int, *, chip: str, backend: str,
                      device: str, batch_size: int, threads: int, seed: int, progress: bool,
                      template: dict[str, object], **timing: float) -> CostTable:
    """The ``network`` row: median of (measured - summed) latency over ``k`` random networks."""
    from nni_hwaware.cost_table.fidelity import measure_architectures, random_architectures
    from nni_hwaware.cost_table.predict import CostModel

    model = CostModel(table, config, chip=chip, backend=backend, batch_size=batch_size)
    archs = random_architectures(config, k, seed=seed + 1_000_003)
    measured = measure_architectures(config, archs, backend=backend, device=device, batch_size=batch_size,
                                     threads=threads, seed=seed, progress=progress, **timing)
    gaps = measured["latency_ms"].to_numpy() - [model.predict(a).latency_ms for a in archs]
    overhead = max(float(np.median(gaps)), 1e-6)
    shape = (config.in_channels, config.image_size, config.image_size)
    row = {**template, "block": "network", "kind": "network",
           "input_shape": BlockKey("network", shape, config.num_classes, 1).shape_str,
           "out_channels": config.num_classes, "stride": 1, "latency_ms": overhead,
           # the gap's spread relative to the networks' latency (the gap itself may be ~0)
           "latency_std_ms": float(np.std(gaps)),
           "latency_cv": float(np.std(gaps)) / float(measured["latency_ms"].mean()),
           "runs": len(archs), "param_mb": 0.0, "activation_mb": 0.0, "memory_mb": 0.0,
           "flops": 0, "params": 0, "utilisation": 0.0}
    return CostTable.from_records([row])
