"""The found network against the baseline, measured the way a report can be trusted with.

Both networks are timed in shared, shuffled rounds in one process
(:func:`~nni_hwaware.profiling.interleaved_latency`, at least ``rounds`` rounds), so a
burst of load on a shared machine lands on both. The latency ratio ``found / baseline``
is the geometric mean of the per-round ratios with a 95 % Student-t interval. A
warning line is added when the measured ratio differs from the cost table's predicted
ratio by more than :data:`RATIO_TOLERANCE`, or when the ratio's interval is wider than
:data:`SPREAD_LIMIT` of it (its larger half).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

from nni_hwaware.training.results import ModelResult

__all__ = ["RATIO_TOLERANCE", "SPREAD_LIMIT", "TRIAL_TIMING_SECONDS", "compare_with_baseline",
           "comparison_warnings", "measure_against_reference"]

#: Measured and predicted latency ratios further apart than this (relative) get a warning.
RATIO_TOLERANCE = 0.10
#: Seconds a search trial spends timing its network against the reference network.
TRIAL_TIMING_SECONDS = 1.0
#: A ratio whose 95 % interval's larger half exceeds this share of it gets a warning.
SPREAD_LIMIT = 0.05


def comparison_warnings(comparison: Mapping[str, Any]) -> list[str]:
    """The warning lines of one comparison (see the module docstring); empty when it can be trusted."""
    lines = []
    measured, predicted = comparison.get("latency_ratio"), comparison.get("predicted_latency_ratio")
    if measured and predicted and abs(measured / predicted - 1) > RATIO_TOLERANCE:
        lines.append(f"warning: the measured latency ratio {measured:.3f} differs from the predicted "
                     f"{predicted:.3f} by {100 * (measured / predicted - 1):+.0f} % (more than "
                     f"{100 * RATIO_TOLERANCE:.0f} %): the cost table may not fit this machine; re-profile it")
    spread = comparison.get("spread")
    if spread is not None and spread > SPREAD_LIMIT:
        lines.append(f"warning: the latency ratio is known only within {100 * spread:.1f} % (over "
                     f"{100 * SPREAD_LIMIT:.0f} %): the machine was busy while measuring; re-run the comparison")
    return lines


def compare_with_baseline(space: Any, baseline: ModelResult, found: ModelResult, *, rounds: int = 20,
                          batch_size: int = 1, backend: str = "torch", device: str = "cpu",
                          threads: int | None = 1, seed: int = 0) -> tuple[ModelResult, ModelResult]:
    """``baseline`` and ``found`` with their latencies timed interleaved; ``found.extra["vs_baseline"]``
    holds the ratios, the interval, the spread and the warnings.

    ``space`` is the searched space (anything :func:`~nni_hwaware.spaces.resolve.resolve_space`
    takes); the networks are rebuilt from their architectures (timing does not depend
    on the trained weights).
    """
    import torch

    from nni_hwaware.profiling import interleaved_latency
    from nni_hwaware.spaces.resolve import resolve_space

    named = resolve_space(space)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        nets = [named.build(result.arch).eval() for result in (baseline, found)]
    timing = interleaved_latency(nets[0], nets[1], tuple(named.input_shape), rounds=rounds, batch_size=batch_size,
                                 threads=threads, backend=backend, device=device, seed=seed)
    predicted = None
    if baseline.predicted_latency_ms and found.predicted_latency_ms is not None:
        predicted = found.predicted_latency_ms / baseline.predicted_latency_ms
    predicted_memory = None
    if baseline.predicted_memory_mb and found.predicted_memory_mb is not None:
        predicted_memory = found.predicted_memory_mb / baseline.predicted_memory_mb
    comparison: dict[str, Any] = {
        "latency_ratio": timing["ratio"], "latency_ratio_ci95": timing["ci95"], "rounds": timing["rounds"],
        "spread": timing["spread"], "predicted_latency_ratio": predicted,
        "memory_ratio": found.memory_mb / baseline.memory_mb if baseline.memory_mb else None,
        "predicted_memory_ratio": predicted_memory,
    }
    comparison["warnings"] = comparison_warnings(comparison)
    baseline = dataclasses.replace(baseline, latency_ms=timing["a_ms"])
    found = dataclasses.replace(found, latency_ms=timing["b_ms"],
                                extra={**found.extra, "vs_baseline": comparison})
    return baseline, found


def measure_against_reference(space: Any, arch: Mapping[str, Any], reference: Mapping[str, Any], *,
                              seconds: float = TRIAL_TIMING_SECONDS, batch_size: int = 1, backend: str = "torch",
                              device: str = "cpu", threads: int | None = 1, seed: int = 0) -> dict[str, Any]:
    """What a search trial measures on its own machine: the network of ``arch`` timed in shared rounds
    with the space's ``reference`` architecture (at most ``seconds``), and its memory
    (:func:`measure_against_reference_many` of one architecture)."""
    return measure_against_reference_many(space, [arch], reference, seconds=seconds, batch_size=batch_size,
                                          backend=backend, device=device, threads=threads, seed=seed)[0]


def measure_against_reference_many(space: Any, archs: Sequence[Mapping[str, Any]], reference: Mapping[str, Any], *,
                                   seconds: float = TRIAL_TIMING_SECONDS, batch_size: int = 1,
                                   backend: str = "torch", device: str = "cpu", threads: int | None = 1,
                                   seed: int = 0) -> list[dict[str, Any]]:
    """The networks of ``archs`` timed in shared rounds with the space's ``reference`` architecture (each
    round times every one of them, in a shuffled order: at most ``seconds``), on ``backend`` at
    ``batch_size`` with ``threads`` on ``device`` (as the cost table was profiled), and their memory.
    All are built from ``seed`` (timing does not depend on the trained weights).

    Returns, per architecture, ``{latency_ms, memory_mb, reference_latency_ms, reference_memory_mb,
    latency_ratio, latency_ratio_ci95_low, latency_ratio_ci95_high, timing_rounds}``: the latency over
    rounds (10th percentile), weights plus the peak of live activations plus the input (as the cost
    tables count it), and the per-round ratio to the reference (which holds when the machine's speed moves).
    """
    import math

    import torch

    from nni_hwaware.profiling import BYTES_PER_MB, measure_modules
    from nni_hwaware.spaces.resolve import resolve_space

    named = resolve_space(space)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        networks = [named.build(dict(arch)) for arch in archs]
        ref = named.build(dict(reference))
    shape = tuple(named.input_shape)
    n = len(networks)
    costs, timing = measure_modules([*networks, ref], [shape] * (n + 1), batch_size=batch_size, backend=backend,
                                    device=device, threads=threads, seed=seed, probe=n, min_rounds=5,
                                    max_seconds=seconds, min_sample_ms=2.0)
    input_mb = 4 * batch_size * math.prod(shape) / BYTES_PER_MB
    out = []
    for i in range(n):
        ratio = timing.ratio(i, n)
        out.append({"latency_ms": costs[i].latency.ms, "memory_mb": costs[i].memory_mb + input_mb,
                    "reference_latency_ms": costs[n].latency.ms, "reference_memory_mb": costs[n].memory_mb + input_mb,
                    "latency_ratio": ratio["ratio"],
                    "latency_ratio_ci95_low": ratio["ci95"][0], "latency_ratio_ci95_high": ratio["ci95"][1],
                    "timing_rounds": timing.rounds})
    return out
