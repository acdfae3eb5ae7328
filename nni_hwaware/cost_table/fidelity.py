"""How well a cost table predicts whole networks: the fidelity check.

K random architectures of a space are built and measured end to end on the chip
exactly as the table's blocks were (same backend, batch size, threads, timing
rule); the table's predictions are compared with the measurements by rank
correlation (Spearman, Kendall), mean absolute percentage error and the share
within +-10 %. FLOPs alone are ranked against the measured latency too, which is
what a FLOPs-constrained search would rely on.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd
from scipy import stats
from tqdm.auto import tqdm

from nni_hwaware.cost_table.predict import CostModel
from nni_hwaware.profiling import BYTES_PER_MB, measure_module
from nni_hwaware.spaces.config import Architecture, SpaceConfig
from nni_hwaware.spaces.network import build_network

__all__ = ["FidelityReport", "agreement", "measure_architectures", "random_architectures", "validate"]


def random_architectures(config: SpaceConfig, k: int, seed: int = 0) -> list[Architecture]:
    """``k`` distinct random architectures (fewer if the space is smaller), seeded."""
    rng = np.random.default_rng(seed)
    specs = config.layer_specs()
    k = min(k, config.size())
    seen: dict[tuple[str, ...], Architecture] = {}
    while len(seen) < k:
        arch = {spec.label: spec.candidates[rng.integers(len(spec.candidates))] for spec in specs}
        seen.setdefault(tuple(arch.values()), arch)
    return list(seen.values())


def measure_architectures(config: SpaceConfig, archs: list[Architecture], *, backend: str = "torch",
                          device: str = "cpu", batch_size: int = 1, threads: int | None = None,
                          seed: int = 0, progress: bool = True, **timing: float) -> pd.DataFrame:
    """Measure whole networks end to end: latency_ms, memory_mb (weights + peak activations)."""
    shape = (config.in_channels, config.image_size, config.image_size)
    input_mb = 4 * batch_size * math.prod(shape) / BYTES_PER_MB
    from nni_hwaware.cost_table.profile import TIMING

    timing = {**TIMING, **timing}
    records = []
    for arch in tqdm(archs, desc="measuring networks", disable=not progress, unit="net"):
        cost = measure_module(build_network(config, arch), shape, batch_size=batch_size, backend=backend,
                              device=device, threads=threads, seed=seed, **timing)
        records.append({"latency_ms": cost.latency.median_ms, "latency_cv": cost.latency.cv,
                        "memory_mb": cost.memory_mb + input_mb, "flops": cost.flops, "params": cost.params})
    return pd.DataFrame.from_records(records)


def agreement(predicted: np.ndarray, measured: np.ndarray) -> dict[str, float]:
    """Spearman, Kendall, MAPE (%) and the share within +-10 % of ``predicted`` vs ``measured``."""
    predicted, measured = np.asarray(predicted, float), np.asarray(measured, float)
    error = np.abs(predicted - measured) / measured
    return {
        "spearman": float(stats.spearmanr(predicted, measured).statistic),
        "kendall": float(stats.kendalltau(predicted, measured).statistic),
        "mape": float(100 * error.mean()),
        "within_10pct": float((error <= 0.10).mean()),
    }


@dataclass(frozen=True)
class FidelityReport:
    """Per-architecture predictions and measurements, and their agreement."""

    frame: pd.DataFrame
    latency: dict[str, float]
    memory: dict[str, float]

    def summary(self) -> dict[str, object]:
        return {"n_archs": len(self.frame), "latency": self.latency, "memory": self.memory}


def validate(model: CostModel, k: int = 20, *, seed: int = 0, device: str = "cpu",
             threads: int | None = None, progress: bool = True, **timing: float) -> FidelityReport:
    """Measure ``k`` random architectures of ``model``'s space; compare with the table's predictions.

    ``threads`` defaults to the thread count the table was profiled with.
    """
    threads = model.threads if threads is None else threads
    archs = random_architectures(model.config, k, seed)
    measured = measure_architectures(model.config, archs, backend=model.backend, device=device,
                                     batch_size=model.batch_size, threads=threads, seed=seed,
                                     progress=progress, **timing)
    predicted = pd.DataFrame.from_records([model.predict(arch).metrics() for arch in archs])
    frame = pd.DataFrame({
        "arch": [",".join(a.values()) for a in archs],
        "predicted_latency_ms": predicted["latency_ms"], "measured_latency_ms": measured["latency_ms"],
        "predicted_memory_mb": predicted["memory_mb"], "measured_memory_mb": measured["memory_mb"],
        "flops": measured["flops"], "params": measured["params"],
    })
    latency = agreement(frame.predicted_latency_ms, frame.measured_latency_ms)
    latency["flops_spearman"] = float(stats.spearmanr(frame.flops, frame.measured_latency_ms).statistic)
    latency["flops_kendall"] = float(stats.kendalltau(frame.flops, frame.measured_latency_ms).statistic)
    memory = agreement(frame.predicted_memory_mb, frame.measured_memory_mb)
    memory["flops_spearman"] = float(stats.spearmanr(frame.flops, frame.measured_memory_mb).statistic)
    return FidelityReport(frame, latency, memory)
