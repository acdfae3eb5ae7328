"""A search space's hardware cost as a sum of small factors over its labels.

Any NNI ``ModelSpace`` is a set of labelled categorical choices
(``space.simplify()``: ``LayerChoice``\\ s, ``Repeat`` depths, the kernel, width and
expansion choices of NNI's mutable layers). The cost of a network of the space on
one chip is a sum of terms, each depending on a few labels only: a block inside a
``LayerChoice`` depends on that label, a block in a ``Repeat`` on the depth label
(and on its own choice), a layer whose input width is chosen by the layer before
it on both. :class:`SpaceCostModel` stores those terms as factors, each a dense
array over the few labels it depends on, for every metric:

.. math::

    \\mathrm{lat}(a) = \\mathrm{lat}_0 + \\sum_f L_f[a_{S_f}], \\qquad
    \\mathrm{mem}(a) = W_0 + \\sum_f W_f[a_{S_f}]
        + \\max\\big(A_0, \\max_f A_f[a_{S_f}]\\big)

with ``S_f`` the labels of factor ``f``, ``L`` latency, ``W`` weight memory and ``A``
the largest activation working set (a block's input, its output and what it holds
while it runs); FLOPs and parameters add up like latency. From the same arrays:

* :meth:`SpaceCostModel.predict`: the cost of one sample, exactly the formula above;
* :meth:`SpaceCostModel.expected`: the cost under independent per-label
  probabilities (a torch tensor per label), differentiable, for a Gumbel or
  DARTS penalty: ``E[lat] = lat_0 + sum_f sum_x L_f[x] prod_{l in S_f} p_l[x_l]``
  (exact), memory with the expected activations of each factor in the max;
* :meth:`SpaceCostModel.lower_bounds`: for a partial choice and each value of the
  next label, a lower bound of every completion's cost (each factor's minimum over
  its unchosen labels); exact for additive costs when no two factors share an
  unchosen label, e.g. when every factor has one label;
* :meth:`SpaceCostModel.expression_profiler`: an NNI ``ExpressionProfiler`` for NNI's
  ``Filter``, ``RangeProfilerFilter`` and penalties.

A profiled CPU table may add one term of the whole network to the latency, the weights beyond
the core's cache (``beyond_cache``, :mod:`nni_hwaware.cost_model.calibration`):
``e * max(0, W - cache)`` of the network's weights ``W``. :meth:`~SpaceCostModel.predict` and
the expression profiler add it exactly; :meth:`~SpaceCostModel.expected` of the expected
weights (a lower bound of its expectation); :meth:`~SpaceCostModel.lower_bounds` at the least
weights (still a lower bound, no longer exact).

A model is built by profiling a space (:mod:`nni_hwaware.cost_model.profile`) or
from a plain table of per-choice costs (:mod:`nni_hwaware.cost_model.choice_table`).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from nni_hwaware.cost_model.block_table import METRICS, ArchCost
from nni_hwaware.errors import HwAwareError

__all__ = ["ADDITIVE", "CostFactor", "SpaceCostModel"]

#: Costs that add up over factors; ``activation_mb`` combines by maximum.
ADDITIVE = ("latency_ms", "param_mb", "flops", "params")
_ALL = (*ADDITIVE, "activation_mb")


@dataclass
class CostFactor:
    """Costs that depend on ``labels`` only: one array per metric, one axis per label."""

    labels: tuple[str, ...]
    #: metric (``ADDITIVE`` and ``activation_mb``) -> array of shape (n values of each label).
    costs: dict[str, np.ndarray] = field(default_factory=dict)


def _check_finite(name: str, factor: CostFactor) -> None:
    for metric, values in factor.costs.items():
        if not np.isfinite(values).all() or (values < 0).any():
            raise HwAwareError(f"cost of {name} over labels {list(factor.labels)}: {metric} must be finite "
                               "and >= 0; re-profile the space or fix the per-choice table")


class SpaceCostModel:
    """Costs of a space's networks on one chip, as factors over its labels (module docstring)."""

    def __init__(self, choices: Mapping[str, Sequence[Any]], factors: Sequence[CostFactor],
                 fixed: Mapping[str, float], *, chip: str = "", backend: str = "torch",
                 batch_size: int = 1, name: str = "space", peak_flops: float | None = None,
                 threads: int | None = None, beyond_cache: Any = None) -> None:
        if not choices:
            raise HwAwareError(f"space {name!r} has no choices: there is nothing to search")
        self.name, self.chip, self.backend, self.batch_size = name, chip, backend, batch_size
        #: The chip's peak FLOP/s (for utilisation in pruning), if known.
        self.peak_flops = peak_flops
        #: Intra-op threads the costs were measured with (None: unknown or the runtime's default).
        self.threads = threads
        #: The latency of a network's weights beyond the core's cache, on top of the factors: a
        #: :class:`~nni_hwaware.cost_model.calibration.BeyondCache` of the network's ``param_mb``, or None.
        self.beyond_cache = beyond_cache if beyond_cache is not None and beyond_cache.ms_per_mb > 0 else None
        #: Labels in the order of the space (the order decisions are taken in).
        self.labels: list[str] = list(choices)
        #: Values of each label, in the space's order.
        self.candidates: list[list[Any]] = [list(choices[label]) for label in self.labels]
        for label, values in zip(self.labels, self.candidates, strict=True):
            if not values:
                raise HwAwareError(f"label {label!r} has no values left")
        self.position = {label: i for i, label in enumerate(self.labels)}
        self.fixed = {m: float(fixed.get(m, 0.0)) for m in _ALL}
        #: Activations of the fixed parts added up (the penalty's ``memory="sum"``: weights plus every activation), if known.
        self.fixed["activation_sum_mb"] = float(fixed.get("activation_sum_mb", self.fixed["activation_mb"]))
        merged: dict[tuple[str, ...], CostFactor] = {}
        for factor in factors:
            labels = tuple(sorted(factor.labels, key=self._position_of))
            order = [factor.labels.index(label) for label in labels]
            shape = tuple(len(self.candidates[self.position[label]]) for label in labels)
            if not labels:
                for m in ADDITIVE:
                    self.fixed[m] += float(factor.costs.get(m, 0.0))
                self.fixed["activation_mb"] = max(self.fixed["activation_mb"],
                                                  float(factor.costs.get("activation_mb", 0.0)))
                continue
            costs = {}
            given = tuple(len(self.candidates[self.position[label]]) for label in factor.labels)
            for metric in _ALL:
                values = np.asarray(factor.costs.get(metric, np.zeros(given)), dtype=float)
                values = np.transpose(values, order) if values.ndim == len(order) else values
                if values.shape != shape:
                    raise HwAwareError(f"factor over {list(labels)}: {metric} has shape {values.shape}, "
                                       f"expected {shape} (one axis per label, one entry per value)")
                costs[metric] = values
            if labels in merged:
                old = merged[labels].costs
                for metric in ADDITIVE:
                    old[metric] = old[metric] + costs[metric]
                old["activation_mb"] = np.maximum(old["activation_mb"], costs["activation_mb"])
            else:
                merged[labels] = CostFactor(labels, costs)
        self.factors: list[CostFactor] = list(merged.values())
        for factor in self.factors:
            _check_finite("a factor", factor)
        #: For each label position, the factors that involve it.
        self.factors_of: list[list[int]] = [[] for _ in self.labels]
        for f, factor in enumerate(self.factors):
            for label in factor.labels:
                self.factors_of[self.position[label]].append(f)
        self._axes = [[self.position[label] for label in f.labels] for f in self.factors]

    def _position_of(self, label: str) -> int:
        if label not in self.position:
            raise HwAwareError(f"a cost names label {label!r}, which is not a choice of space {self.name!r}; "
                               f"its labels: {', '.join(self.labels)}")
        return self.position[label]

    # -- samples -----------------------------------------------------------------
    def choices(self) -> dict[str, list[Any]]:
        """``{label: values}`` in the space's order."""
        return {label: list(values) for label, values in zip(self.labels, self.candidates, strict=True)}

    def indices(self, sample: Mapping[str, Any]) -> tuple[int, ...]:
        """Value index of every label of ``sample``; a sample that does not fit says why."""
        missing = [label for label in self.labels if label not in sample]
        if missing:
            raise HwAwareError(f"sample does not fit space {self.name!r}: it has no value for {missing}")
        out = []
        for label, values in zip(self.labels, self.candidates, strict=True):
            value = sample[label]
            try:
                out.append(values.index(value))
            except ValueError:
                raise HwAwareError(f"sample does not fit space {self.name!r}: {label}={value!r}, "
                                   f"allowed: {values}") from None
        return tuple(out)

    def sample_of(self, indices: Sequence[int]) -> dict[str, Any]:
        """The sample ``{label: value}`` of value indices in label order."""
        return {label: values[j] for label, values, j in zip(self.labels, self.candidates, indices, strict=True)}

    def check_architecture(self, sample: Mapping[str, Any]) -> dict[str, Any]:
        """``sample`` restricted to the space's labels, in order, if it fits (else a one-line error)."""
        return self.sample_of(self.indices(sample))

    def size(self) -> int:
        """Number of networks in the space."""
        return math.prod(len(values) for values in self.candidates)

    # -- prediction --------------------------------------------------------------
    def predict_indices(self, indices: Sequence[int]) -> ArchCost:
        """Cost of the sample given as value indices (the module docstring's formula)."""
        sums = {m: self.fixed[m] for m in ADDITIVE}
        activation = self.fixed["activation_mb"]
        for factor, axes in zip(self.factors, self._axes, strict=True):
            at = tuple(indices[a] for a in axes)
            for m in ADDITIVE:
                sums[m] += float(factor.costs[m][at])
            activation = max(activation, float(factor.costs["activation_mb"][at]))
        if self.beyond_cache is not None:
            sums["latency_ms"] += float(self.beyond_cache(sums["param_mb"]))
        return ArchCost(latency_ms=sums["latency_ms"], memory_mb=sums["param_mb"] + activation,
                        param_mb=sums["param_mb"], activation_mb=activation,
                        flops=round(sums["flops"]), params=round(sums["params"]))

    def predict_many(self, indices: Any) -> dict[str, np.ndarray]:
        """:meth:`predict_indices` of ``N`` architectures at once (an ``(N, labels)`` array of value
        indices): ``{latency_ms, memory_mb, flops, params}`` as arrays, the same sums vectorised."""
        keys = np.asarray(indices, dtype=np.int64).reshape(-1, len(self.labels))
        sums = {m: np.full(len(keys), float(self.fixed[m])) for m in ADDITIVE}
        activation = np.full(len(keys), float(self.fixed["activation_mb"]))
        for factor, axes in zip(self.factors, self._axes, strict=True):
            at = tuple(keys[:, a] for a in axes)
            for m in ADDITIVE:
                sums[m] += np.asarray(factor.costs[m], dtype=np.float64)[at]
            activation = np.maximum(activation, np.asarray(factor.costs["activation_mb"], dtype=np.float64)[at])
        if self.beyond_cache is not None:
            sums["latency_ms"] = sums["latency_ms"] + self.beyond_cache(sums["param_mb"])
        return {"latency_ms": sums["latency_ms"], "memory_mb": sums["param_mb"] + activation,
                "flops": np.round(sums["flops"]), "params": np.round(sums["params"])}

    def predict(self, sample: Mapping[str, Any]) -> ArchCost:
        """Predicted cost of ``sample`` (``{label: value}``) on this model's chip."""
        return self.predict_indices(self.indices(sample))

    def expected(self, probs: Mapping[str, Any]) -> dict[str, Any]:
        """Costs under independent per-label probabilities (torch tensors, one per label, in value order).

        Returns ``{latency_ms, memory_mb, param_mb, activation_mb, activation_sum_mb, flops,
        params}`` as scalar tensors with gradient to ``probs`` (``activation_sum_mb``: every
        factor's expected activation added up, for the penalty's ``memory="sum"``). Latency, FLOPs, parameters and
        weight memory are exact expectations; ``activation_mb`` is the largest of the
        factors' expected activations (what :meth:`predict` gives for one-hot ``probs``).
        """
        import torch

        missing = [label for label in self.labels if label not in probs]
        if missing:
            raise HwAwareError(f"expected() needs probabilities for every label; missing {missing}")
        p = []
        for label, values in zip(self.labels, self.candidates, strict=True):
            tensor = probs[label]
            if tuple(tensor.shape) != (len(values),):
                raise HwAwareError(f"label {label}: probabilities of shape {tuple(tensor.shape)}, "
                                   f"expected ({len(values)},)")
            p.append(tensor)
        like = p[0]
        tables = self._torch_tables(like.device, like.dtype)
        sums = {m: torch.as_tensor(self.fixed[m], dtype=like.dtype, device=like.device) for m in ADDITIVE}
        activations = [torch.as_tensor(self.fixed["activation_mb"], dtype=like.dtype, device=like.device)]
        letters = "abcdefghijklmnopqrstuvwxyz"
        for f, axes in enumerate(self._axes):
            if len(axes) > len(letters):
                raise HwAwareError("a cost factor depends on more than 26 labels; simplify the space")
            spec = letters[: len(axes)]
            equation = f"{spec}," + ",".join(spec[k] for k in range(len(axes))) + "->"
            operands = [p[a] for a in axes]
            for m in _ALL:
                value = torch.einsum(equation, tables[f][m], *operands)
                if m == "activation_mb":
                    activations.append(value)
                else:
                    sums[m] = sums[m] + value
        activation = torch.stack(activations).max()
        if self.beyond_cache is not None:  # of the expected weights: a lower bound of its expectation
            sums["latency_ms"] = sums["latency_ms"] + self.beyond_cache(sums["param_mb"])
        activation_sum = self.fixed["activation_sum_mb"] + torch.stack(activations[1:]).sum() if len(
            activations) > 1 else activations[0] * 0 + self.fixed["activation_sum_mb"]
        return {"latency_ms": sums["latency_ms"], "memory_mb": sums["param_mb"] + activation,
                "param_mb": sums["param_mb"], "activation_mb": activation, "activation_sum_mb": activation_sum,
                "flops": sums["flops"], "params": sums["params"]}

    def _torch_tables(self, device: Any, dtype: Any) -> list[dict[str, Any]]:
        import torch

        key = (str(device), str(dtype))
        cache = getattr(self, "_torch_cache", None)
        if cache is None or cache[0] != key:
            tables = [{m: torch.as_tensor(f.costs[m], dtype=dtype, device=device) for m in _ALL}
                      for f in self.factors]
            self._torch_cache = (key, tables)
        return self._torch_cache[1]

    # -- bounds ------------------------------------------------------------------
    def lower_bounds(self, prefix: Sequence[int]) -> dict[str, np.ndarray]:
        """Lower bounds of every completion's cost, for each value of the next label.

        ``prefix`` holds the value indices of the first ``len(prefix)`` labels. Returns
        ``{latency_ms, flops, params, memory_mb}``, each an array over the values of label
        ``len(prefix)`` (one entry when the prefix is complete). Each factor contributes
        its minimum over its unchosen labels; for additive costs with no unchosen label in
        two factors, the bound is the exact cheapest completion.
        """
        i = len(prefix)
        width = len(self.candidates[i]) if i < len(self.labels) else 1
        sums = {m: np.full(width, self.fixed[m]) for m in ADDITIVE}
        activation = np.full(width, self.fixed["activation_mb"])
        for factor, axes in zip(self.factors, self._axes, strict=True):
            index: list[Any] = []
            reduce_axes = []
            keep = None
            for k, a in enumerate(axes):
                if a < i:
                    index.append(prefix[a])
                elif a == i:
                    index.append(slice(None))
                    keep = k
                else:
                    index.append(slice(None))
                    reduce_axes.append(k)
            for m in _ALL:
                values = factor.costs[m]
                sub = values[tuple(index)]
                # after integer indexing, the remaining axes are keep (if any) then reduce_axes, in order
                if keep is not None:
                    sub = sub.reshape(sub.shape[0], -1).min(axis=1) if sub.ndim > 1 else sub
                else:
                    sub = np.full(width, sub.min() if np.ndim(sub) else float(sub))
                if m == "activation_mb":
                    activation = np.maximum(activation, sub)
                else:
                    sums[m] = sums[m] + sub
        if self.beyond_cache is not None:  # at the least weights: it grows with them
            sums["latency_ms"] = sums["latency_ms"] + self.beyond_cache(sums["param_mb"])
        return {"latency_ms": sums["latency_ms"], "flops": sums["flops"], "params": sums["params"],
                "memory_mb": sums["param_mb"] + activation}

    def reference(self, spec: Any = "largest") -> dict[str, Any]:
        """The reference network budgets and reports compare with.

        ``spec`` is a sample (``{label: value}``), ``"largest"`` (every label at its value
        of highest latency in :meth:`choice_table`), ``"smallest"`` (lowest) or one value that every label takes
        (e.g. ``"conv_3x3"`` for NasBench201).
        """
        if isinstance(spec, Mapping):
            return self.check_architecture(spec)
        if spec in ("largest", "smallest"):
            table, pick = self.choice_table(), (np.argmax if spec == "largest" else np.argmin)
            return {label: values[int(pick(table[table.label == label].latency_ms.to_numpy()))]
                    for label, values in zip(self.labels, self.candidates, strict=True)}
        lacking = [label for label, values in zip(self.labels, self.candidates, strict=True) if spec not in values]
        if lacking:
            raise HwAwareError(f"reference {spec!r}: labels {lacking} have no such value; give a sample "
                               "({label: value}), 'largest', 'smallest' or a value every label has")
        return dict.fromkeys(self.labels, spec)

    # -- per-choice view ---------------------------------------------------------------
    def choice_table(self) -> pd.DataFrame:
        """One row per (label, value): the costs of the factors that involve the label.

        With the label at that value and every other label uniform over its values
        (the exact per-choice costs when every factor has one label). What pruning
        scores and what :func:`~nni_hwaware.cost_model.choice_table.choice_cost_model` reads.
        """
        records = []
        for i, (label, values) in enumerate(zip(self.labels, self.candidates, strict=True)):
            totals = {m: np.zeros(len(values)) for m in _ALL}
            for f in self.factors_of[i]:
                axes = self._axes[f]
                k = axes.index(i)
                for m in _ALL:
                    moved = np.moveaxis(self.factors[f].costs[m], k, 0).reshape(len(values), -1)
                    if m == "activation_mb":
                        totals[m] = np.maximum(totals[m], moved.mean(axis=1))
                    else:
                        totals[m] = totals[m] + moved.mean(axis=1)
            for j, value in enumerate(values):
                record = {"label": label, "value": value}
                record.update({m: float(totals[m][j]) for m in _ALL})
                record["memory_mb"] = record["param_mb"] + record["activation_mb"]
                records.append(record)
        return pd.DataFrame.from_records(records)

    def restrict(self, allowed: Mapping[str, Sequence[Any]]) -> SpaceCostModel:
        """The same model over fewer values per label (e.g. a pruned space)."""
        keep: list[list[int]] = []
        choices: dict[str, list[Any]] = {}
        for label, values in zip(self.labels, self.candidates, strict=True):
            wanted = list(allowed.get(label, values))
            unknown = [v for v in wanted if v not in values]
            if unknown or not wanted:
                raise HwAwareError(f"label {label}: cannot keep {unknown or 'no values'}; its values: {values}")
            keep.append([values.index(v) for v in wanted])
            choices[label] = [values[j] for j in keep[-1]]  # the space's own values (and types)
        factors = []
        for factor, axes in zip(self.factors, self._axes, strict=True):
            index = np.ix_(*[keep[a] for a in axes])
            factors.append(CostFactor(factor.labels, {m: factor.costs[m][index] for m in _ALL}))
        return SpaceCostModel(choices, factors, self.fixed, chip=self.chip, backend=self.backend,
                              batch_size=self.batch_size, name=self.name, peak_flops=self.peak_flops,
                              threads=self.threads, beyond_cache=self.beyond_cache)

    # -- NNI -----------------------------------------------------------------------
    def expression_profiler(self, space: Any, metric: str = "latency_ms") -> Any:
        """An NNI ``ExpressionProfiler`` of ``metric`` over ``space``'s labels.

        ``metric`` is one of ``latency_ms``, ``memory_mb``, ``flops``, ``params``; it
        plugs into NNI's ``Filter``, ``RangeProfilerFilter`` and penalties.
        """
        from nni.mutable import MutableExpression
        from nni.nas.profiler import ExpressionProfiler

        if metric not in METRICS:
            raise HwAwareError(f"unknown metric {metric!r}; use one of {', '.join(METRICS)}")
        mutables = space.simplify()
        missing = [label for label in self.labels if label not in mutables]
        if missing:
            raise HwAwareError(f"the space has no choices {missing}; was the cost model built for it?")

        def term(factor: CostFactor, name: str) -> Any:
            values = factor.costs[name]
            cases = []
            for at in itertools.product(*(range(n) for n in values.shape)):
                condition = True
                for label, j in zip(factor.labels, at, strict=True):
                    value = self.candidates[self.position[label]][j]
                    condition = (mutables[label] == value) if condition is True else (condition & (mutables[label] == value))
                cases.append((condition, float(values[at])))
            return MutableExpression.case(cases)

        if metric == "memory_mb":
            expression = self.fixed["param_mb"] + sum(term(f, "param_mb") for f in self.factors)
            expression = expression + MutableExpression.max(
                self.fixed["activation_mb"], *[term(f, "activation_mb") for f in self.factors])
        else:
            expression = self.fixed[metric] + sum(term(f, metric) for f in self.factors)
        if metric == "latency_ms" and self.beyond_cache is not None:
            weights = self.fixed["param_mb"] + sum(term(f, "param_mb") for f in self.factors)
            expression = expression + self.beyond_cache.ms_per_mb * MutableExpression.max(
                0.0, weights - self.beyond_cache.cache_mb)

        class SpaceCostProfiler(ExpressionProfiler):
            def __init__(self) -> None:
                self.expression = expression

        return SpaceCostProfiler()

    def __repr__(self) -> str:
        return (f"SpaceCostModel({self.name!r}, {len(self.labels)} labels, {len(self.factors)} factors, "
                f"chip={self.chip!r}, backend={self.backend!r}, batch_size={self.batch_size})")
