"""The differentiable hardware penalty of the Gumbel search (seed 001 step 6).

For the Gumbel-softmax masks ``m_ij`` of layer ``i``, candidate ``j`` -- the very
masks the forward pass multiplied the blocks' outputs by -- and the cost table's
per-block costs on the chosen chip:

.. math::

    \\mathrm{lat}(a) = \\mathrm{lat}_{\\mathrm{fixed}} + \\sum_i \\sum_j m_{ij}\\,\\mathrm{lat}_{ij}

    \\mathrm{mem}(a) = \\mathrm{param}_{\\mathrm{fixed}} + \\sum_i \\sum_j m_{ij}\\,\\mathrm{param}_{ij}
        + \\max\\Big(\\mathrm{act}_{\\mathrm{fixed}}, \\max_i \\sum_j m_{ij}\\,\\mathrm{act}_{ij}\\Big)

(``memory="table"``: weights plus the largest activation working set, what
:meth:`~nni_hwaware.cost_table.CostModel.predict` gives for a one-hot ``m``), or
with ``memory="sum"`` the seed's literal ``sum_ij m_ij (param_ij + act_ij)``.
The penalty is

.. math::

    P(a) = \\alpha\\, \\widehat{\\mathrm{lat}}(a)^{\\beta} + \\gamma\\, \\widehat{\\mathrm{mem}}(a)^{\\delta},
    \\qquad \\widehat{c}(a) = c(a) / c(\\mathrm{baseline})

so ``alpha`` and ``gamma`` mean the same in every space (the baseline is the
space's plain ResNet50). In budget mode a term is ``alpha * relu(c(a)/T - 1)^beta``
for a target ``T`` (in ms or MB, or ``"N%"`` of the baseline's cost): only the excess
over the budget is penalised.

Because ``m`` are tensors of the forward pass, ``P`` carries a gradient to the
architecture parameters (NNI 3.0's own ``penalty=`` does not; see
:mod:`nni_hwaware.nni_fixes`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import torch
from torch import nn

from nni_hwaware.cost_table.predict import CostModel
from nni_hwaware.errors import HwAwareError
from nni_hwaware.strategies.gumbel.config import PenaltyConfig

__all__ = ["HardwarePenalty"]

_TINY = 1e-12


def _reference(budget: float | None, baseline: float, normalise: str) -> float:
    if budget is not None:
        return budget
    return baseline if normalise == "baseline" else 1.0


class HardwarePenalty(nn.Module):
    """``alpha * lat^beta + gamma * mem^delta`` over per-layer masks, from a cost model.

    ``layer_names`` fixes the order of the candidates in each layer's mask (the
    order of the supernet's ``LayerChoice``); by default the cost model's order.
    """

    def __init__(self, cost_model: CostModel, config: PenaltyConfig,
                 layer_names: Mapping[str, Sequence[str]] | None = None) -> None:
        super().__init__()
        self.config = config
        self.labels = list(cost_model.labels)
        names = {label: list(c) for label, c in zip(cost_model.labels, cost_model.candidates, strict=True)}
        if layer_names is not None:
            missing = sorted(set(layer_names) ^ set(names))
            if missing:
                raise HwAwareError(
                    f"the cost table's space and the searched space differ in layers {missing}; "
                    "profile the space you search (nni-hwaware profile --space ...)")
            for label, wanted in layer_names.items():
                unknown = [n for n in wanted if n not in names[label]]
                if unknown:
                    raise HwAwareError(f"layer {label}: blocks {unknown} are not in the cost table; "
                                       f"it has {names[label]}")
            names = {label: list(layer_names[label]) for label in self.labels}
        self.names = names
        width = max(len(n) for n in names.values())

        def grid(metric: str) -> torch.Tensor:
            values = np.zeros((len(self.labels), width))
            for i, (label, src) in enumerate(zip(cost_model.labels, cost_model.candidates, strict=True)):
                for j, name in enumerate(names[label]):
                    values[i, j] = cost_model.layer_costs[metric][i, src.index(name)]
            return torch.tensor(values, dtype=torch.float32)

        self.register_buffer("latency", grid("latency_ms"))
        self.register_buffer("param", grid("param_mb"))
        self.register_buffer("activation", grid("activation_mb"))
        self.fixed_latency = cost_model.fixed_costs["latency_ms"]
        self.fixed_param = cost_model.fixed_costs["param_mb"]
        self.fixed_activation = cost_model.fixed_activation_mb
        self.fixed_activation_sum = cost_model.fixed_costs["activation_mb"]
        self.width = width

        baseline = cost_model.predict(cost_model.config.baseline())
        base_mem = float(self.expected_costs(self._one_hot(cost_model.config.baseline()))[1])
        #: What costs are divided by: the budget in budget mode, else the baseline's cost (or 1).
        self.latency_budget = config.budget("latency_budget_ms", baseline.latency_ms)
        self.memory_budget = config.budget("memory_budget_mb", base_mem)
        self.latency_ref = _reference(self.latency_budget, baseline.latency_ms, config.normalise)
        self.memory_ref = _reference(self.memory_budget, base_mem, config.normalise)
        #: The baseline's predicted latency (ms) and memory (MB) under this memory model.
        self.baseline_costs = (baseline.latency_ms, base_mem)

    def _one_hot(self, arch: Mapping[str, str]) -> list[torch.Tensor]:
        masks = []
        for label in self.labels:
            mask = torch.zeros(len(self.names[label]))
            mask[self.names[label].index(arch[label])] = 1.0
            masks.append(mask)
        return masks

    def _stack(self, masks: Sequence[torch.Tensor]) -> torch.Tensor:
        if len(masks) != len(self.labels):
            raise HwAwareError(f"expected masks for {len(self.labels)} layers, got {len(masks)}")
        rows = []
        for label, mask in zip(self.labels, masks, strict=True):
            if mask.shape != (len(self.names[label]),):
                raise HwAwareError(f"layer {label}: mask of shape {tuple(mask.shape)}, "
                                   f"expected ({len(self.names[label])},)")
            rows.append(nn.functional.pad(mask, (0, self.width - len(mask))))
        return torch.stack(rows).to(self.latency.device, self.latency.dtype)

    def expected_costs(self, masks: Sequence[torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
        """``(lat(a) in ms, mem(a) in MB)`` under ``masks`` (one mask per layer, in layer order)."""
        m = self._stack(masks)
        latency = self.fixed_latency + (m * self.latency).sum()
        if self.config.memory == "sum":
            memory = self.fixed_param + self.fixed_activation_sum + (m * (self.param + self.activation)).sum()
        else:
            peak = (m * self.activation).sum(dim=1).max()
            memory = self.fixed_param + (m * self.param).sum() + torch.clamp(peak, min=self.fixed_activation)
        return latency, memory

    def _term(self, value: torch.Tensor, ref: float, weight: float, power: float, budget: bool) -> torch.Tensor:
        ratio = value / ref
        if budget:
            excess = ratio - 1.0
            # relu(x)^p with a finite gradient at 0 for p < 1
            return weight * torch.where(excess > 0, excess.clamp_min(_TINY) ** power, torch.zeros_like(excess))
        return weight * ratio.clamp_min(_TINY) ** power

    def terms(self, masks: Sequence[torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """``(latency term, memory term, lat(a) in ms, mem(a) in MB)`` as scalar tensors (no host sync)."""
        c = self.config
        latency, memory = self.expected_costs(masks)
        lat_term = self._term(latency, self.latency_ref, c.alpha, c.beta, self.latency_budget is not None)
        mem_term = self._term(memory, self.memory_ref, c.gamma, c.delta, self.memory_budget is not None)
        return lat_term, mem_term, latency, memory

    def forward(self, masks: Sequence[torch.Tensor]) -> tuple[torch.Tensor, dict[str, float]]:
        """The penalty (a scalar tensor with gradient to ``masks``) and its parts as floats."""
        lat_term, mem_term, latency, memory = self.terms(masks)
        return lat_term + mem_term, {"latency_ms": float(latency.detach()), "memory_mb": float(memory.detach()),
                                     "latency_term": float(lat_term.detach()),
                                     "memory_term": float(mem_term.detach())}

    def extra_repr(self) -> str:
        c = self.config
        return (f"alpha={c.alpha}, beta={c.beta}, gamma={c.gamma}, delta={c.delta}, "
                f"latency_ref={self.latency_ref:.4g} ms, memory_ref={self.memory_ref:.4g} MB, memory={c.memory}")
