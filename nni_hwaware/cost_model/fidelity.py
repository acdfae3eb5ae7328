"""How well a space's cost model predicts whole networks, against how well they can be measured.

``k`` random networks of the space are built twice (two independent instances of each)
and measured end to end on this chip as two passes **interleaved in the same shuffled
rounds**, with the space's reference network as the probe
(:func:`~nni_hwaware.cost_model.profile.measure_samples`). One pass after the other would
put each pass in whichever phase of the machine's speed it happened to hit, and on a
shared machine the phases do not slow every network alike; interleaved, both passes see
the same mixture of phases, as every comparison of two measured things here does.
(Two 60 s passes over 60 digits networks under the load harness, one after the other,
ranked them alike at 0.85 when the machine's speed shifted between them.) The rounds'
budget is :data:`SECONDS_PER_NETWORK` per network instance unless ``max_seconds`` is
given: 15 s per pass, the same check missed ±10 % of the reference for 12-15 % of the
networks; 60 s per pass, for 2 %.
The prediction is compared with the first pass (Spearman, Kendall, MAPE, share within
+-10 %); the share within +-10 % is also given **relative to the reference network**
(predicted ratio to the reference against the measured per-round ratio), which cancels
a drift of the machine's speed between profiling and checking. The **noise ceiling** is
the Spearman of the two passes with each other: no predictor can rank the networks by a
single measurement better than a second measurement does. ``probe_drift`` is the
reference's p90 / p10 over the rounds: how much the machine's speed moved meanwhile.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import pandas as pd
from scipy import stats
from torch import nn

from nni_hwaware.cost_model.model import SpaceCostModel
from nni_hwaware.cost_model.profile import measure_samples, random_samples

__all__ = ["SECONDS_PER_NETWORK", "agreement", "check_fidelity"]

#: Default seconds of shared rounds per network instance timed by a check (both passes and the reference).
SECONDS_PER_NETWORK = 1.0


def agreement(predicted: Any, measured: Any) -> dict[str, float]:
    """Spearman, Kendall, MAPE (%) and the share within +-10 % of ``predicted`` vs ``measured``."""
    predicted, measured = np.asarray(predicted, float), np.asarray(measured, float)
    error = np.abs(predicted - measured) / measured
    return {"spearman": float(stats.spearmanr(predicted, measured).statistic),
            "kendall": float(stats.kendalltau(predicted, measured).statistic),
            "mape": float(100 * error.mean()), "within10": float((error <= 0.10).mean())}


def check_fidelity(space: nn.Module, model: SpaceCostModel, input_shape: tuple[int, ...], k: int = 100, *,
                   seed: int = 0, device: str = "cpu", threads: int | None = None,
                   reference: Mapping[str, Any] | None = None, progress: bool = False,
                   **timing: float) -> tuple[dict[str, Any], pd.DataFrame]:
    """Agreement of ``model`` with ``k`` measured networks, the noise ceiling, and the per-network frame.

    ``reference`` is the architecture timed in every round (default: each label's first value).
    """
    threads = model.threads if threads is None else threads
    samples = random_samples(model.choices(), k, seed=seed + 7)
    reference = dict(reference) if reference is not None else {
        label: values[0] for label, values in model.choices().items()}
    timing.setdefault("max_seconds", SECONDS_PER_NETWORK * (2 * len(samples) + 1))
    both = measure_samples(space, samples + samples, input_shape, backend=model.backend, device=device,
                           batch_size=model.batch_size, threads=threads, seed=seed, progress=progress,
                           reference=reference, **timing)
    first = both.iloc[: len(samples)].reset_index(drop=True)
    second = both.iloc[len(samples):].reset_index(drop=True)
    predicted = [model.predict(s) for s in samples]
    frame = pd.DataFrame({
        "sample": [repr(s) for s in samples],
        "predicted_latency_ms": [c.latency_ms for c in predicted],
        "measured_latency_ms": first.latency_ms, "measured_again_ms": second.latency_ms,
        "predicted_memory_mb": [c.memory_mb for c in predicted], "measured_memory_mb": first.memory_mb,
        "flops": first.flops, "predicted_flops": [c.flops for c in predicted],
    })
    frame["predicted_vs_reference"] = frame.predicted_latency_ms / model.predict(reference).latency_ms
    frame["measured_vs_reference"] = first.latency_vs_reference
    latency = agreement(frame.predicted_latency_ms, frame.measured_latency_ms)
    relative = agreement(frame.predicted_vs_reference, frame.measured_vs_reference)
    latency["within10_vs_reference"] = relative["within10"]
    # how far over its prediction a network measures, 9 times in 10 (relative to the reference, as a
    # search judges a trial): the prior margin of a search that learns from measurements
    latency["ratio_q90_vs_reference"] = float(np.quantile(frame.measured_vs_reference / frame.predicted_vs_reference,
                                                          0.9))
    latency["mape_vs_reference"] = relative["mape"]
    latency["ceiling"] = float(stats.spearmanr(frame.measured_latency_ms, frame.measured_again_ms).statistic)
    latency["probe_drift"] = float(both.attrs["timing"].get("probe_drift", float("nan")))
    latency["share_met"] = float(both.attrs["timing"]["share_met"])
    latency["rounds"] = int(both.attrs["timing"]["rounds"])
    latency["n"] = len(frame)
    latency["flops_spearman"] = float(stats.spearmanr(frame.flops, frame.measured_latency_ms).statistic)
    memory = agreement(frame.predicted_memory_mb, frame.measured_memory_mb)
    memory["ratio_q90"] = float(np.quantile(frame.measured_memory_mb / frame.predicted_memory_mb, 0.9))
    return {"latency": latency, "memory": memory}, frame
