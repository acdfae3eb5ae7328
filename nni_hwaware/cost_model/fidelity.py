"""How well a space's cost model predicts whole networks, against how well they can be measured.

``k`` random networks of the space are built and measured end to end on this chip,
twice, in two independent passes, with the table's timing rule. The prediction is
compared with the first pass (Spearman, Kendall, MAPE, share within +-10 %); the
**noise ceiling** is the Spearman of the two passes with each other: no predictor
can rank the networks by a single measurement better than a second measurement does.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd
from scipy import stats
from torch import nn

from nni_hwaware.cost_model.model import SpaceCostModel
from nni_hwaware.cost_model.profile import measure_samples, random_samples

__all__ = ["agreement", "check_fidelity"]


def agreement(predicted: Any, measured: Any) -> dict[str, float]:
    """Spearman, Kendall, MAPE (%) and the share within +-10 % of ``predicted`` vs ``measured``."""
    predicted, measured = np.asarray(predicted, float), np.asarray(measured, float)
    error = np.abs(predicted - measured) / measured
    return {"spearman": float(stats.spearmanr(predicted, measured).statistic),
            "kendall": float(stats.kendalltau(predicted, measured).statistic),
            "mape": float(100 * error.mean()), "within10": float((error <= 0.10).mean())}


def check_fidelity(space: nn.Module, model: SpaceCostModel, input_shape: tuple[int, ...], k: int = 100, *,
                   seed: int = 0, device: str = "cpu", threads: int | None = None,
                   progress: bool = False, **timing: float) -> tuple[dict[str, Any], pd.DataFrame]:
    """Agreement of ``model`` with ``k`` measured networks, the noise ceiling, and the per-network frame."""
    threads = model.threads if threads is None else threads
    samples = random_samples(model.choices(), k, seed=seed + 7)
    options = {"backend": model.backend, "device": device, "batch_size": model.batch_size,
               "threads": threads, "seed": seed, "progress": progress, **timing}
    first = measure_samples(space, samples, input_shape, **options)
    second = measure_samples(space, samples, input_shape, **options)
    predicted = [model.predict(s) for s in samples]
    frame = pd.DataFrame({
        "sample": [repr(s) for s in samples],
        "predicted_latency_ms": [c.latency_ms for c in predicted],
        "measured_latency_ms": first.latency_ms, "measured_again_ms": second.latency_ms,
        "predicted_memory_mb": [c.memory_mb for c in predicted], "measured_memory_mb": first.memory_mb,
        "flops": first.flops, "predicted_flops": [c.flops for c in predicted],
    })
    latency = agreement(frame.predicted_latency_ms, frame.measured_latency_ms)
    latency["ceiling"] = float(stats.spearmanr(frame.measured_latency_ms, frame.measured_again_ms).statistic)
    latency["n"] = len(frame)
    latency["flops_spearman"] = float(stats.spearmanr(frame.flops, frame.measured_latency_ms).statistic)
    memory = agreement(frame.predicted_memory_mb, frame.measured_memory_mb)
    return {"latency": latency, "memory": memory}, frame
