"""Profile any NNI model space on one chip, and build its cost model from the table.

:func:`profile_model_space` measures every distinct leaf entry of the space
(:mod:`nni_hwaware.cost_model.leaves`) once: FLOPs with ``FlopCounterMode``, weights,
the peak of live activations (the leaf's input included), and latency with the one
measuring engine (:func:`nni_hwaware.profiling.measure_modules`: every leaf timed once
per round, in a shuffled order, fixed thread count, ``torch.inference_mode``, until
every leaf's figure (the 10th percentile over rounds) is known within 2 % or the time budget ends; the first leaf is the probe
whose per-round times record the machine's drift). Each row keeps its figure's 95 %
interval (``latency_low_ms`` / ``latency_high_ms``), whether it met the target
(``met_target``) and the probe's drift (``probe_drift``, p90 / p10 over rounds). In a runtime
that runs each leaf as a session of its own (ONNX Runtime, OpenVINO: ``Backend.session_per_call``),
a call with next to no work (:class:`CallCost`, one per input shape) is timed in the same rounds
and taken off each leaf (column ``call_ms``): a whole network pays that cost once, in its
per-network term, not once per leaf. Entries
a given table already holds are not measured again; a few of them are re-timed in the
same rounds as the new ones, and the new rows are rescaled by the median of
(re-timed / stored), so that a merged table keeps one scale (``merge_scale``).

What no leaf covers (a cell's sum of its edges, a residual add around a choice,
the framework's per-call overhead of a whole network, caches that a leaf timed on
its own finds warm) is the space's per-network term
(:mod:`nni_hwaware.cost_model.calibration`): networks of the space that span its sizes
(:func:`calibration_samples`), its cheapest network and its reference network are
measured end to end (in shared rounds) and fitted as a scale of the summed leaves
(column ``latency_scale``) plus an offset per (label, value) (column ``latency_terms``,
JSON) plus a constant (the row's ``latency_ms``), stored in the table's ``network`` row
of the space.

:func:`space_cost_model` turns the table's rows into a
:class:`~nni_hwaware.cost_model.model.SpaceCostModel` (no measuring).
"""

from __future__ import annotations

import datetime as dt
import hashlib
import math
import sys
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
import pandas as pd
import torch
from torch import nn
from tqdm.auto import tqdm

from nni_hwaware.cost_model.calibration import (
    CALIBRATION_MET_SHARE,
    NetworkTerm,
    calibration_count,
    fit_network_term,
)
from nni_hwaware.cost_model.leaves import SpaceLeaves, find_leaves
from nni_hwaware.cost_model.model import ADDITIVE, CostFactor, SpaceCostModel
from nni_hwaware.cost_table.table import CostTable
from nni_hwaware.errors import HwAwareError
from nni_hwaware.profiling import (
    BYTES_PER_MB,
    cache_mb,
    detect_chip,
    fixed_threads,
    get_backend,
    measure_modules,
    measure_peak_flops,
)

__all__ = ["TIMING", "calibration_samples", "measure_samples", "profile_model_space", "random_samples", "space_cost_model"]

#: Timing options of tables and of the networks they are checked against: 2 ms samples,
#: rounds until every figure is known within 2 % (or 0.25 s per item, 2 s to 2 minutes, pass).
TIMING: dict[str, float] = {"min_sample_ms": 2.0}
#: A leaf row's timing columns (a network row has its own).
_LEAF_TIMING = ("latency_low_ms", "latency_high_ms", "met_target", "timing_rounds", "probe_drift", "merge_scale",
                "call_ms")
#: Rows of a table re-timed beside the new ones when profiling into it (``--merge``).
MERGE_ANCHORS = 6
#: What the reference network and the cheapest one each count for in the per-network term's fit, as a
#: share of its calibration networks.
ANCHOR_SHARE = 0.25
#: The least share of its measured latency a leaf keeps once the runtime's per-call cost is taken off.
OWN_SHARE = 0.05


def _fingerprint(leaves: SpaceLeaves) -> str:
    text = repr(sorted((label, [repr(v) for v in values]) for label, values in leaves.choices.items()))
    text += "|" + "|".join(sorted(e.block for e in leaves.entries))
    return hashlib.sha1(text.encode()).hexdigest()[:12]


def network_block(leaves: SpaceLeaves) -> str:
    """The ``block`` of a space's per-network row: one per distinct space."""
    return f"network-{_fingerprint(leaves)}"


def random_samples(choices: Mapping[str, list[Any]], k: int, seed: int = 0) -> list[dict[str, Any]]:
    """``k`` distinct random samples of a space (fewer if the space is smaller), seeded."""
    rng = np.random.default_rng(seed)
    size = math.prod(len(v) for v in choices.values())
    seen: dict[tuple[int, ...], dict[str, Any]] = {}
    while len(seen) < min(k, size):
        at = tuple(int(rng.integers(len(v))) for v in choices.values())
        seen.setdefault(at, {label: values[j] for (label, values), j in zip(choices.items(), at, strict=True)})
    return list(seen.values())


def calibration_samples(choices: Mapping[str, list[Any]], cheapest: Mapping[str, Any], k: int,
                        seed: int = 0) -> list[dict[str, Any]]:
    """``k`` distinct networks that span a space's range of sizes, seeded: half of them uniformly
    random, the other half leaning toward the ``cheapest`` values (network ``i`` of ``n`` takes
    each label's cheapest value with probability ``(i + 1) / (n + 1)``, else a random one).

    Uniform samples of a space of many labels all sit near its median size, and a term fitted
    to them alone extrapolates badly to the small networks a budgeted search ends at (on digits
    it put networks of 0.26-0.6x the reference 20-68 % low)."""
    rng = np.random.default_rng(seed)
    size = math.prod(len(v) for v in choices.values())
    uniform = random_samples(choices, k - k // 2, seed=seed)
    seen = {tuple(repr(s[label]) for label in choices): s for s in uniform}
    leaning = k // 2
    for i in range(leaning):
        p = (i + 1) / (leaning + 1)
        for _ in range(100):  # a few draws repeat an earlier network in small spaces
            if len(seen) >= min(k, size):
                break
            sample = {label: (cheapest[label] if rng.random() < p else values[int(rng.integers(len(values)))])
                      for label, values in choices.items()}
            key = tuple(repr(sample[label]) for label in choices)
            if key not in seen:
                seen[key] = sample
                break
    return list(seen.values())


def measure_samples(space: nn.Module, samples: list[dict[str, Any]], input_shape: tuple[int, ...], *,
                    backend: str = "torch", device: str = "cpu", batch_size: int = 1,
                    threads: int | None = 1, seed: int = 0, progress: bool = True,
                    reference: Mapping[str, Any] | None = None, **timing: float) -> pd.DataFrame:
    """Measure whole networks of ``space`` end to end, timed in shared rounds.

    Columns: latency_ms (10th percentile over rounds), latency_low_ms / latency_high_ms (its 95 %
    interval), latency_cv, memory_mb, flops, params; with a ``reference`` architecture
    (timed in every round, the probe) also ``latency_vs_reference``, each network's
    per-round ratio to it (geometric mean), which cancels the machine's drift between
    this measurement and another. ``frame.attrs["timing"]`` holds the rounds, the share
    of networks that met the target and the probe's drift.
    """
    timing = {**TIMING, **timing}
    input_mb = 4 * batch_size * math.prod(input_shape) / BYTES_PER_MB
    networks = [space.freeze(sample) for sample in tqdm(samples, desc="building networks", disable=not progress,
                                                        unit="net")]
    probe = None
    if reference is not None:
        networks.append(space.freeze(dict(reference)))
        probe = len(networks) - 1
    costs, rounds = measure_modules(networks, [input_shape] * len(networks), batch_size=batch_size,
                                    backend=backend, device=device, threads=threads, seed=seed, probe=probe,
                                    **timing)
    records = []
    for i, cost in enumerate(costs[: len(samples)]):
        record = {"latency_ms": cost.latency.ms, "latency_low_ms": cost.latency.low_ms,
                  "latency_high_ms": cost.latency.high_ms, "latency_cv": cost.latency.cv,
                  "memory_mb": cost.memory_mb + input_mb, "flops": cost.flops, "params": cost.params}
        if probe is not None:
            record["latency_vs_reference"] = float(rounds.ratio(i, probe)["ratio"])
        records.append(record)
    frame = pd.DataFrame.from_records(records)
    frame.attrs["timing"] = {"rounds": rounds.rounds, "share_met": rounds.share_met, "seconds": rounds.seconds,
                             **rounds.drift}
    return frame


def profile_model_space(space: nn.Module, dummy_input: torch.Tensor, *, chip: str | None = None,
                        backend: str = "torch", device: str = "cpu", batch_size: int = 1,
                        threads: int | None = 1, peak_flops: float | None = None, seed: int = 0,
                        progress: bool = True, table: CostTable | None = None,
                        calibration_samples: int | None = None, leaves: SpaceLeaves | None = None,
                        reference: Mapping[str, Any] | Callable[[SpaceCostModel], Mapping[str, Any]] | None = None,
                        **timing: float) -> CostTable:
    """Measure every distinct leaf of ``space`` on this machine's chip; returns the whole table.

    ``dummy_input`` is one input of the space (batch 1). Rows already in ``table`` (same
    block, shape, chip, backend and batch size) are kept and not measured again;
    the result holds them and the new rows. ``threads`` is the intra-op thread count (1
    by default: the steadiest on a shared CPU); ``peak_flops`` the chip's peak ``C``
    (measured by a short matrix-multiply benchmark when not given);
    ``calibration_samples`` whole networks set the per-network term (0: none; None:
    :func:`~nni_hwaware.cost_model.calibration.calibration_count` of the space), with the
    space's ``reference`` network (a sample, or a function of the leaves' cost model that
    gives it, e.g. ``NamedSpace.baseline``; None: none) measured beside them; ``timing``
    takes the options of :func:`~nni_hwaware.profiling.rounds.time_in_rounds` (``max_seconds``:
    the budget of all rounds, :func:`~nni_hwaware.profiling.measure.time_budget` by default).
    """
    if peak_flops is not None and not (math.isfinite(peak_flops) and peak_flops > 0):
        raise HwAwareError(f"peak_flops must be a positive number of FLOP/s, got {peak_flops}")
    leaves = leaves or find_leaves(space, dummy_input)
    if calibration_samples is None:
        calibration_samples = calibration_count(leaves.choices)
    timing = {**TIMING, **timing}
    with fixed_threads(threads) as n_threads:
        info = detect_chip(device, n_threads)
        chip = chip or info.name
        have: set[tuple[str, str]] = set()
        if table is not None and len(table):
            frame = table.frame
            frame = frame[(frame.chip == chip) & (frame.backend == backend) & (frame.batch_size == batch_size)
                      & (frame.threads == n_threads)]
            have = set(zip(frame.block, frame.input_shape, strict=True))
        todo = [i for i, e in enumerate(leaves.entries) if (e.block, e.shape_str) not in have]
        peak = peak_flops if peak_flops is not None else (
            _table_peak(table, chip) or measure_peak_flops(device))
        anchors = [i for i, e in enumerate(leaves.entries) if (e.block, e.shape_str) in have][:MERGE_ANCHORS]
        records = []
        if todo:
            timed = todo + anchors  # no anchors without a table
            if progress:
                print(f"profiling {len(todo)} leaves on {chip} in shared rounds"
                      + (f" (re-timing {len(anchors)} of the table's rows for its scale)" if anchors else ""),
                      file=sys.stderr)
            shapes = [leaves.entries[i].input_shapes[0] for i in timed]
            calls = sorted(set(shapes)) if get_backend(backend).session_per_call else []
            costs, rounds = measure_modules([leaves.modules[i] for i in timed] + [CallCost() for _ in calls],
                                            shapes + calls, batch_size=batch_size, backend=backend, device=device,
                                            threads=n_threads, seed=seed, probe=0, **timing)
            call_ms = {shape: c.latency.ms for shape, c in zip(calls, costs[len(timed):], strict=True)}
            minus = [call_ms.get(shape, 0.0) for shape in shapes]
            scale = _merge_scale(table, [leaves.entries[i] for i in anchors],
                                 [_own_ms(c, m) for c, m in zip(costs[len(todo):len(timed)], minus[len(todo):],
                                                                strict=True)],
                                 chip=chip, backend=backend, batch_size=batch_size, threads=n_threads)
            drift = rounds.drift.get("probe_drift", math.nan)
            for i, cost, call in zip(todo, costs[: len(todo)], minus[: len(todo)], strict=True):
                records.append(_leaf_row(leaves.entries[i], cost, scale, call, chip=chip, backend=backend,
                                         batch_size=batch_size, peak=peak, n_threads=n_threads, info=info,
                                         rounds=rounds.rounds, drift=drift, target=rounds.target))
        new = CostTable.from_records(records) if records else None
        result = table.merge(new) if (table is not None and new is not None) else (new or table)
        if result is None:
            raise HwAwareError("the space has no leaves to profile")
        block = network_block(leaves)
        frame = result.frame
        calibrated = ((frame.block == block) & (frame.chip == chip) & (frame.backend == backend)
                      & (frame.batch_size == batch_size)
                      & (frame.threads == n_threads)).any()
        if calibration_samples > 0 and not calibrated:
            same = frame[(frame.chip == chip) & (frame.backend == backend) & (frame.batch_size == batch_size)
                      & (frame.threads == n_threads)]
            template = records[0] if records else same.iloc[0].to_dict()  # this chip's columns
            result = result.merge(_network_row(
                space, leaves, result, calibration_samples, chip=chip, backend=backend, device=device,
                batch_size=batch_size, threads=n_threads, seed=seed, progress=progress,
                template=template, reference=reference, **timing))
    return result


def _table_peak(table: CostTable | None, chip: str) -> float | None:
    if table is None or not len(table):
        return None
    frame = table.frame
    rows = frame[frame.chip == chip]
    return float(rows.peak_flops.iloc[0]) if len(rows) else None


class CallCost(nn.Module):
    """What a call of a runtime costs with next to no work: one elementwise node over the input."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(x)


def _own_ms(cost: Any, call_ms: float) -> float:
    """A leaf's latency less the runtime's per-call cost (at least :data:`OWN_SHARE` of what it measured)."""
    return max(cost.latency.ms - call_ms, OWN_SHARE * cost.latency.ms)


def _merge_scale(table: CostTable | None, entries: list[Any], costs: list[float], *, chip: str, backend: str,
                 batch_size: int, threads: int) -> float:
    """Median of (re-timed / stored) latency over the anchor rows: what puts new rows on the table's scale."""
    if table is None or not entries:
        return 1.0
    frame = table.frame
    frame = frame[(frame.chip == chip) & (frame.backend == backend) & (frame.batch_size == batch_size)
                  & (frame.threads == threads)]
    stored: dict[tuple[str, str], float] = {}
    for block, shape, ms in zip(frame.block, frame.input_shape, frame.latency_ms, strict=True):
        stored.setdefault((block, shape), float(ms))
    ratios = [ms / stored[(e.block, e.shape_str)] for e, ms in zip(entries, costs, strict=True)]
    return float(np.median(ratios))


def _leaf_row(entry: Any, cost: Any, scale: float, call_ms: float, *, chip: str, backend: str, batch_size: int,
              peak: float, n_threads: int, info: Any, rounds: int, drift: float, target: float) -> dict[str, Any]:
    """One table row of a measured leaf; its latency less the runtime's per-call cost ``call_ms``, divided
    by the merge ``scale``."""
    input_mb = 4 * batch_size * sum(math.prod(s) for s in entry.input_shapes) / BYTES_PER_MB
    activation_mb = cost.activation_mb + input_mb
    latency = cost.latency
    own = _own_ms(cost, call_ms) / latency.ms  # the share of the leaf's figures that is its own work
    median = own * latency.ms / scale
    return {
        "block": entry.block, "kind": "leaf", "input_shape": entry.shape_str,
        "out_channels": max(1, entry.output_shape[0] if entry.output_shape else 1), "stride": 1,
        "chip": chip, "backend": backend, "batch_size": batch_size,
        "latency_ms": median, "latency_std_ms": own * latency.std_ms / scale,
        "latency_cv": latency.cv, "runs": latency.runs,
        "param_mb": cost.param_mb, "activation_mb": activation_mb,
        "memory_mb": cost.param_mb + activation_mb,
        "flops": cost.flops, "params": cost.params, "peak_flops": peak,
        "utilisation": cost.flops / (median / 1000 * peak),
        "torch_version": torch.__version__, "threads": n_threads,
        "profiled_at": dt.date.today().isoformat(), "device": info.device,
        "providers": cost.providers,
        "spec": entry.spec, "output_shape": "x".join(map(str, entry.output_shape)),
        "latency_low_ms": own * latency.low_ms / scale, "latency_high_ms": own * latency.high_ms / scale,
        "met_target": bool(latency.half_width <= target), "timing_rounds": rounds,
        "probe_drift": drift, "merge_scale": scale, "call_ms": call_ms,
    }


def _network_row(space: nn.Module, leaves: SpaceLeaves, table: CostTable, k: int, *, chip: str,
                 backend: str, device: str, batch_size: int, threads: int, seed: int, progress: bool,
                 template: dict[str, Any], reference: Any = None, **timing: float) -> CostTable:
    """The per-network row: the term fitted to ``k`` calibration networks, the cheapest network and the
    reference, measured end to end."""
    model = space_cost_model(leaves, table, chip=chip, backend=backend, batch_size=batch_size,
                             with_network_term=False)
    cheapest = model.reference("smallest")
    samples = calibration_samples(leaves.choices, cheapest, k, seed=seed + 1_000_003)
    weights = [1.0] * len(samples)
    if callable(reference):
        reference = reference(model)
    # the two ends of the range: the reference (every comparison is taken against it) and the
    # cheapest network (where a tight budget's search ends) each count as a quarter of the networks
    for anchor in (model.check_architecture(reference) if reference is not None else None, cheapest):
        if anchor is not None and anchor not in samples:
            samples.append(anchor)
            weights.append(math.sqrt(max(1.0, k * ANCHOR_SHARE)))
    measured = measure_samples(space, samples, leaves.input_shape, backend=backend, device=device,
                               batch_size=batch_size, threads=threads, seed=seed, progress=progress,
                               **{"met_share": CALIBRATION_MET_SHARE, **timing})
    summed = np.array([model.predict(s).latency_ms for s in samples])
    latencies = measured["latency_ms"].to_numpy()
    term = fit_network_term(samples, summed, latencies, leaves.choices, weights=weights,
                            weights_mb=[model.predict(s).param_mb for s in samples], cache_mb=cache_mb(device))
    gaps = latencies - summed
    keep = {c: template[c] for c in template if c not in ("spec", "output_shape", *_LEAF_TIMING)}
    row = {**keep, "block": network_block(leaves), "kind": "network",
           "input_shape": "x".join(map(str, leaves.input_shape)), "out_channels": 1, "stride": 1,
           "latency_ms": max(term.constant, 1e-6),  # a table's latency is > 0
           "latency_std_ms": float(np.std(gaps)),
           "latency_cv": float(np.std(gaps)) / float(latencies.mean()),
           "runs": len(samples), "param_mb": 0.0, "activation_mb": 0.0, "memory_mb": 0.0,
           "flops": 0, "params": 0, "utilisation": 0.0, "latency_scale": term.scale,
           "latency_terms": term.to_json()}
    return CostTable.from_records([row])


def _network_term(frame: pd.DataFrame, leaves: SpaceLeaves) -> tuple[float, NetworkTerm]:
    """The space's per-network latency ``(offset, term)``: its own row, else that of the space it was narrowed from.

    A pruned or narrowed space has other leaves than the space the table was profiled
    for (so another fingerprint); the rows of the same input shape stand in for it
    (their median scale, if the table holds several spaces of that input, and the
    offsets of the (label, value) pairs it still has). A row of an earlier version
    without ``latency_scale`` is a constant ``offset``.
    """
    rows = frame[frame.kind == "network"]
    own = rows[rows.block == network_block(leaves)]
    if not len(own):
        own = rows[rows.input_shape == "x".join(map(str, leaves.input_shape))]
    if not len(own):
        return 0.0, NetworkTerm(1.0)
    if "latency_scale" in own.columns and own.latency_scale.notna().all():
        scale = float(pd.to_numeric(own.latency_scale, errors="coerce").median())
        if not (math.isfinite(scale) and scale > 0):
            raise HwAwareError(f"the cost table's network row {own.block.iloc[0]!r} has latency_scale "
                               f"{own.latency_scale.iloc[0]!r}; it must be a positive number (re-profile the space)")
        terms = own.latency_terms.iloc[0] if "latency_terms" in own.columns and len(own) == 1 else None
        return 0.0, NetworkTerm.from_row(scale, terms, own.latency_ms.iloc[0])
    return float(own.latency_ms.median()), NetworkTerm(1.0)


def _version_hint(frame: pd.DataFrame) -> str:
    """Why leaves can be missing from a table of another torch: a leaf is named by its module's
    printout, which torch and torchvision releases change."""
    versions = sorted({str(v) for v in frame.get("torch_version", pd.Series(dtype=str)).dropna()})
    if not versions or torch.__version__ in versions:
        return ""
    return (f" (the table was profiled under torch {', '.join(versions)}, this is torch {torch.__version__}; "
            "a leaf is named by its module's printout, which releases change)")


def space_cost_model(leaves: SpaceLeaves, table: CostTable, *, chip: str | None = None,
                     backend: str = "torch", batch_size: int = 1, name: str = "space",
                     with_network_term: bool = True) -> SpaceCostModel:
    """The cost model of a space from its leaves and a table that holds every leaf's row."""
    if chip is None:
        chips = table.chips()
        if len(chips) != 1:
            raise HwAwareError(f"the cost table has chips {chips}; choose one with chip=...")
        chip = chips[0]
    frame = table.select(chip=chip, backend=backend, batch_size=batch_size).frame
    rows = frame.set_index(["block", "input_shape"])
    rows = rows[~rows.index.duplicated()]
    wanted = pd.MultiIndex.from_tuples([(e.block, e.shape_str) for e in leaves.entries])
    missing = ~wanted.isin(rows.index)
    if missing.any():
        first = leaves.entries[int(np.argmax(missing))]
        raise HwAwareError(
            f"the cost table has no row for {int(missing.sum())} of the space's {len(wanted)} leaves on chip "
            f"{chip!r} (backend {backend!r}, batch size {batch_size}), e.g. {first.block} at {first.shape_str}"
            f"{_version_hint(frame)}; profile the space on that chip (nni-hwaware profile --space ...)")
    found = rows.loc[wanted]
    metrics = {m: found[m].to_numpy(dtype=float) for m in (*ADDITIVE, "activation_mb")}
    offset, network = _network_term(frame, leaves) if with_network_term else (0.0, NetworkTerm(1.0))
    metrics["latency_ms"] = metrics["latency_ms"] * network.scale
    factors = []
    for term in leaves.terms:
        shape = tuple(len(leaves.choices[label]) for label in term.labels)
        costs = {m: np.zeros(shape) for m in metrics}
        for at, index in term.entries.items():
            for m, values in metrics.items():
                costs[m][at] = values[index]
        factors.append(CostFactor(term.labels, costs))
    offset += network.constant
    for label, values in leaves.choices.items():  # the term's per-(label, value) offsets: one factor per label
        if label in network.offsets:
            ms = np.array([network.offset(label, v) for v in values])
            offset += float(ms.min())
            costs = {m: np.zeros(len(values)) for m in metrics}
            costs["latency_ms"] = ms - ms.min()
            factors.append(CostFactor((label,), costs))
    fixed = {m: 0.0 for m in metrics}
    fixed["latency_ms"] = offset
    threads = int(found["threads"].iloc[0]) if len(found) else 0
    return SpaceCostModel(leaves.choices, factors, fixed, chip=chip, backend=backend, batch_size=batch_size,
                          beyond_cache=network.beyond_cache,
                          name=name, peak_flops=float(found["peak_flops"].iloc[0]), threads=threads or None)
