"""Predict any architecture's hardware cost from a cost table: the sum of its blocks' entries.

For an architecture ``a`` (layer -> block) of a space, on one chip, backend and
batch size:

.. math::

    \\mathrm{lat}(a) = \\sum_{f \\in \\mathrm{fixed}} \\mathrm{lat}_f + \\sum_i \\mathrm{lat}_{i, a_i}

and the same sum for FLOPs and parameters. Memory is what a runtime holds: all
weights plus the largest working set of activations, since a block's activations
are freed when the next block has its output:

.. math::

    \\mathrm{mem}(a) = \\sum_{f} \\mathrm{param}_f + \\sum_i \\mathrm{param}_{i, a_i}
        + \\max\\big(\\max_f \\mathrm{act}_f, \\max_i \\mathrm{act}_{i, a_i}\\big)

:class:`BlockCostModel` reads the block tables that earlier versions wrote for the
project's ResNet-skeleton spaces (one row per candidate block and layer shape) and
hand-made tables of that form, holding the per-layer costs as dense ``layers x
candidates`` arrays; it builds NNI ``ExpressionProfiler``\\ s over the space's
choices. The strategies and the budget mask never use it directly: they see one
class, :class:`~nni_hwaware.cost_model.SpaceCostModel`, into which
:func:`~nni_hwaware.cost_model.as_space_model` converts it at their boundary
(``nni-hwaware profile`` writes leaf tables for every space, the project's included).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
import pandas as pd

from nni_hwaware.cost_table.table import BlockKey, CostTable
from nni_hwaware.errors import HwAwareError
from nni_hwaware.spaces.skeleton import SpaceConfig

__all__ = ["METRICS", "ArchCost", "BlockCostModel"]

#: The costs reported with every trial.
METRICS = ("latency_ms", "memory_mb", "flops", "params")
_SUMMED = ("latency_ms", "param_mb", "activation_mb", "flops", "params", "utilisation")


@dataclass(frozen=True)
class ArchCost:
    """Predicted cost of one architecture on one chip."""

    latency_ms: float
    memory_mb: float
    param_mb: float
    activation_mb: float
    flops: int
    params: int

    def metrics(self) -> dict[str, float]:
        """``{latency_ms, memory_mb, flops, params}``: what every trial reports."""
        return {"latency_ms": self.latency_ms, "memory_mb": self.memory_mb,
                "flops": self.flops, "params": self.params}


def _network_overhead(table: CostTable, config: SpaceConfig) -> float:
    frame = table.frame
    shape = BlockKey("network", (config.in_channels, config.image_size, config.image_size), 1, 1).shape_str
    rows = frame[(frame.kind == "network") & (frame.input_shape == shape)]
    return float(rows.latency_ms.iloc[0]) if len(rows) else 0.0


class BlockCostModel:
    """Per-layer costs of a space on one chip, read once from a cost table."""

    def __init__(self, table: CostTable, config: SpaceConfig, *, chip: str | None = None,
                 backend: str = "torch", batch_size: int = 1) -> None:
        if chip is None:
            chips = table.chips()
            if len(chips) != 1:
                raise HwAwareError(f"the cost table has chips {chips}; choose one with chip=...")
            chip = chips[0]
        self.config, self.chip, self.backend, self.batch_size = config, chip, backend, batch_size
        selected = table.select(chip=chip, backend=backend, batch_size=batch_size)
        self.specs = config.layer_specs()
        self.labels = [spec.label for spec in self.specs]
        #: Candidate names per layer, in the order of the space.
        self.candidates = [list(spec.candidates) for spec in self.specs]
        keys = [BlockKey(part.name, part.input_shape, part.out_channels, part.stride)
                for part in config.fixed_parts()]
        keys += [BlockKey(name, spec.input_shape, spec.out_channels, spec.stride)
                 for spec in self.specs for name in spec.candidates]
        rows = selected.lookup_many(keys, chip=chip, backend=backend, batch_size=batch_size)
        n_fixed = len(config.fixed_parts())
        self.fixed = rows.iloc[:n_fixed].reset_index(drop=True)
        width = max(map(len, self.candidates))
        #: metric -> array (layers, max candidates), NaN where a layer has fewer candidates.
        self.layer_costs: dict[str, np.ndarray] = {}
        offsets = np.cumsum([0] + [len(c) for c in self.candidates])
        for metric in _SUMMED:
            grid = np.full((len(self.specs), width), np.nan)
            values = rows[metric].to_numpy(dtype=float)[n_fixed:]
            for i in range(len(self.specs)):
                grid[i, : offsets[i + 1] - offsets[i]] = values[offsets[i]: offsets[i + 1]]
            self.layer_costs[metric] = grid
        self.fixed_costs = {metric: float(self.fixed[metric].sum()) for metric in _SUMMED}
        #: Intra-op threads the table was profiled with (0 or None: the runtime's default).
        self.threads: int | None = int(self.fixed["threads"].iloc[0]) or None
        #: What a whole network costs beyond its blocks (the table's ``network`` row, if any).
        self.network_overhead_ms = _network_overhead(selected, config)
        self.fixed_costs["latency_ms"] += self.network_overhead_ms
        self.fixed_activation_mb = float(self.fixed["activation_mb"].max())

    # -- lookups -------------------------------------------------------------------
    def indices(self, arch: Mapping[str, str]) -> np.ndarray:
        """Candidate index of every layer of ``arch``."""
        arch = self.config.check_architecture(arch)
        return np.array([names.index(arch[label]) for label, names in zip(self.labels, self.candidates, strict=True)])

    def predict(self, arch: Mapping[str, str]) -> ArchCost:
        """Predicted cost of ``arch`` (see the module docstring for the formulas)."""
        index = self.indices(arch)
        rows = np.arange(len(index))
        chosen = {metric: grid[rows, index] for metric, grid in self.layer_costs.items()}
        param_mb = self.fixed_costs["param_mb"] + float(chosen["param_mb"].sum())
        activation_mb = max(self.fixed_activation_mb, float(chosen["activation_mb"].max()))
        return ArchCost(
            latency_ms=self.fixed_costs["latency_ms"] + float(chosen["latency_ms"].sum()),
            memory_mb=param_mb + activation_mb, param_mb=param_mb, activation_mb=activation_mb,
            flops=round(float(self.fixed_costs["flops"] + chosen["flops"].sum())),
            params=round(float(self.fixed_costs["params"] + chosen["params"].sum())),
        )

    def cheapest(self, metric: str = "latency_ms") -> dict[str, str]:
        """The architecture with the lowest summed ``metric`` (latency, flops, params, param_mb)."""
        grid = np.where(np.isnan(self.layer_costs[metric]), np.inf, self.layer_costs[metric])
        return {label: names[int(j)] for label, names, j in
                zip(self.labels, self.candidates, grid.argmin(axis=1), strict=True)}

    def block_table(self) -> pd.DataFrame:
        """One row per (layer, candidate) with its costs: what pruning and reports read."""
        records = []
        for i, (label, names) in enumerate(zip(self.labels, self.candidates, strict=True)):
            for j, name in enumerate(names):
                record = {"layer": label, "block": name}
                record.update({metric: grid[i, j] for metric, grid in self.layer_costs.items()})
                records.append(record)
        return pd.DataFrame.from_records(records)

    # -- NNI -------------------------------------------------------------------------
    def expression_profiler(self, space: object, metric: str = "latency_ms") -> object:
        """An NNI ``ExpressionProfiler`` of ``metric`` over ``space``'s layer choices.

        ``metric`` is one of ``latency_ms``, ``memory_mb``, ``flops``, ``params``; it
        plugs into NNI's ``Filter``, ``RangeProfilerFilter`` and penalties.
        """
        from nni.mutable import MutableExpression
        from nni.nas.profiler import ExpressionProfiler

        if metric not in METRICS:
            raise HwAwareError(f"unknown metric {metric!r}; use one of {', '.join(METRICS)}")
        choices = space.simplify()  # type: ignore[attr-defined]
        missing = [label for label in self.labels if label not in choices]
        if missing:
            raise HwAwareError(f"the space has no choices {missing}; was the cost model built for it?")

        def per_layer(name: str) -> list[object]:
            return [
                MutableExpression.switch_case(choices[label], {
                    block: float(self.layer_costs[name][i, j]) for j, block in enumerate(names)})
                for i, (label, names) in enumerate(zip(self.labels, self.candidates, strict=True))
            ]

        if metric == "memory_mb":
            params = self.fixed_costs["param_mb"] + sum(per_layer("param_mb"))
            expression = params + MutableExpression.max(self.fixed_activation_mb, *per_layer("activation_mb"))
        else:
            expression = self.fixed_costs[metric] + sum(per_layer(metric))

        class CostTableProfiler(ExpressionProfiler):
            def __init__(self) -> None:
                self.expression = expression

        return CostTableProfiler()
