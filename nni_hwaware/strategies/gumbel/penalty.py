"""The differentiable hardware penalty of the Gumbel search (seed 001 step 6).

For the Gumbel-softmax masks ``m_l`` of every label ``l`` of the space -- the very
masks the forward pass weighted the candidates, depths and widths with, one per
label -- the penalty uses the cost model's expectation under them
(:meth:`~nni_hwaware.cost_model.SpaceCostModel.expected`). On a ResNet-skeleton
space (one label per layer ``i``, candidate ``j``) this is:

.. math::

    \\mathrm{lat}(a) = \\mathrm{lat}_{\\mathrm{fixed}} + \\sum_i \\sum_j m_{ij}\\,\\mathrm{lat}_{ij}

    \\mathrm{mem}(a) = \\mathrm{param}_{\\mathrm{fixed}} + \\sum_i \\sum_j m_{ij}\\,\\mathrm{param}_{ij}
        + \\max\\Big(\\mathrm{act}_{\\mathrm{fixed}}, \\max_i \\sum_j m_{ij}\\,\\mathrm{act}_{ij}\\Big)

(``memory="table"``: weights plus the largest activation working set, what
:meth:`~nni_hwaware.cost_model.SpaceCostModel.predict` gives for a one-hot ``m``), or
with ``memory="sum"`` the seed's literal ``sum_ij m_ij (param_ij + act_ij)``.
The penalty is

.. math::

    P(a) = \\alpha\\, \\widehat{\\mathrm{lat}}(a)^{\\beta} + \\gamma\\, \\widehat{\\mathrm{mem}}(a)^{\\delta},
    \\qquad \\widehat{c}(a) = c(a) / c(\\mathrm{baseline})

so ``alpha`` and ``gamma`` mean the same in every space (the baseline is the
space's reference network: plain ResNet50 on the project's spaces). In budget mode a term is ``alpha * relu(c(a)/T - 1)^beta``
for a target ``T`` (in ms or MB, or ``"N%"`` of the baseline's cost): only the excess
over the budget is penalised.

In target mode (``latency_target`` / ``memory_target``) a term is ``w * c(a)/T``, the
Lagrangian of ``E[c] <= T``, and the multiplier ``w`` is set after every architecture
update from the cost expected under the architecture distribution ``softmax(alpha)``
(:meth:`HardwarePenalty.dual_step`), by a PI controller on ``g = E[c]/T - 1``:
``I <- max(0, I + dual_lr * g)`` (dual ascent; ``I`` starts at ``alpha`` / ``gamma``) and
``w = max(0, I + dual_gain * g)``. A distribution above its target raises the weight
until it comes down to the target; one below it lowers the weight to zero, so accuracy
decides. Plain dual ascent (``dual_gain = 0``) circles the target (0.86-1.23x of it on a
two-layer toy after 2,000 steps); the proportional term lands it within 0.2 %. The user
gives a target, not a weight (TF-NAS, TuNAS: fixed weights land anywhere around one).

Because ``m`` are tensors of the forward pass, ``P`` carries a gradient to the
architecture parameters (NNI 3.0's own ``penalty=`` does not; see
:mod:`nni_hwaware.nni_fixes`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import torch
from torch import nn

from nni_hwaware.cost_model import SpaceCostModel, as_space_model
from nni_hwaware.errors import HwAwareError
from nni_hwaware.strategies.gumbel.config import PenaltyConfig

__all__ = ["HardwarePenalty"]

_TINY = 1e-12


def _reference(budget: float | None, baseline: float, normalise: str) -> float:
    if budget is not None:
        return budget
    return baseline if normalise == "baseline" else 1.0


class HardwarePenalty(nn.Module):
    """``alpha * lat^beta + gamma * mem^delta`` over per-label masks, from a cost model.

    ``layer_names`` fixes the order of the values in each label's mask (the order of
    the supernet's choices); by default the cost model's order. ``reference`` is the
    network costs are normalised by (a sample, ``"largest"`` or a value every label
    takes); by default the baseline of a ResNet-skeleton space, else ``"largest"``.
    """

    def __init__(self, cost_model: SpaceCostModel, config: PenaltyConfig,
                 layer_names: Mapping[str, Sequence[Any]] | None = None, *,
                 reference: Any = None) -> None:
        super().__init__()
        cost_model, reference = as_space_model(cost_model, reference)
        self.config = config
        if layer_names is not None:
            differ = sorted(set(layer_names) ^ set(cost_model.labels))
            if differ:
                raise HwAwareError(
                    f"the cost model's space and the searched space differ in labels {differ}; "
                    "profile the space you search (nni-hwaware profile --space ...)")
            choices = cost_model.choices()
            for label, wanted in layer_names.items():
                unknown = [n for n in wanted if n not in choices[label]]
                if unknown:
                    raise HwAwareError(f"label {label}: values {unknown} are not in the cost model; "
                                       f"it has {choices[label]}")
            cost_model = cost_model.restrict(layer_names)
        self.model = cost_model
        self.labels = list(cost_model.labels)
        self.names = cost_model.choices()
        baseline = cost_model.predict(reference)
        base_mem = float(self.expected_costs(self._one_hot(reference))[1])
        #: What costs are divided by: the budget in budget mode, else the reference's cost (or 1).
        self.latency_budget = config.budget("latency_budget_ms", baseline.latency_ms)
        self.memory_budget = config.budget("memory_budget_mb", base_mem)
        self.latency_ref = _reference(self.latency_budget, baseline.latency_ms, config.normalise)
        self.memory_ref = _reference(self.memory_budget, base_mem, config.normalise)
        #: The reference's predicted latency (ms) and memory (MB) under this memory model.
        self.baseline_costs = (baseline.latency_ms, base_mem)
        #: Target mode: the targets in ms / MB (None: that cost has a fixed weight or a budget).
        self.latency_target = config.budget("latency_target", baseline.latency_ms)
        self.memory_target = config.budget("memory_target", base_mem)
        #: The weights of the two terms; in target mode the dual ascent moves them (saved with
        #: the module's state, so a resumed search goes on from them).
        self.register_buffer("weights", torch.tensor([float(config.alpha), float(config.gamma)]))
        #: The controller's integral terms (the weights without the proportional part).
        self.register_buffer("integral", torch.tensor([float(config.alpha), float(config.gamma)]))

    def _one_hot(self, arch: Mapping[str, Any]) -> dict[str, torch.Tensor]:
        masks = {}
        for label in self.labels:
            mask = torch.zeros(len(self.names[label]))
            mask[self.names[label].index(arch[label])] = 1.0
            masks[label] = mask
        return masks

    def _by_label(self, masks: Mapping[str, torch.Tensor] | Sequence[torch.Tensor]) -> dict[str, torch.Tensor]:
        if not isinstance(masks, Mapping):
            if len(masks) != len(self.labels):
                raise HwAwareError(f"expected masks for {len(self.labels)} labels, got {len(masks)}")
            masks = dict(zip(self.labels, masks, strict=True))
        out = {}
        for label in self.labels:
            if label not in masks or masks[label] is None:
                raise HwAwareError(f"no mask for label {label!r}")
            mask = masks[label]
            if tuple(mask.shape) != (len(self.names[label]),):
                raise HwAwareError(f"label {label}: mask of shape {tuple(mask.shape)}, "
                                   f"expected ({len(self.names[label])},)")
            out[label] = mask.float()
        return out

    def expected_costs(self, masks: Mapping[str, torch.Tensor] | Sequence[torch.Tensor]
                       ) -> tuple[torch.Tensor, torch.Tensor]:
        """``(lat(a) in ms, mem(a) in MB)`` under ``masks`` (by label, or a list in label order)."""
        costs = self.model.expected(self._by_label(masks))
        if self.config.memory == "sum":
            return costs["latency_ms"], costs["param_mb"] + costs["activation_sum_mb"]
        return costs["latency_ms"], costs["memory_mb"]

    def _term(self, value: torch.Tensor, ref: float, weight: float, power: float, budget: bool) -> torch.Tensor:
        ratio = value / ref
        if budget:
            excess = ratio - 1.0
            # relu(x)^p with a finite gradient at 0 for p < 1
            return weight * torch.where(excess > 0, excess.clamp_min(_TINY) ** power, torch.zeros_like(excess))
        return weight * ratio.clamp_min(_TINY) ** power

    @property
    def has_targets(self) -> bool:
        return self.latency_target is not None or self.memory_target is not None

    def terms(self, masks: Mapping[str, torch.Tensor] | Sequence[torch.Tensor]
              ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """``(latency term, memory term, lat(a) in ms, mem(a) in MB)`` as scalar tensors (no host sync)."""
        c = self.config
        latency, memory = self.expected_costs(masks)
        weights = self.weights.to(latency.device)
        if self.latency_target is not None:
            lat_term = weights[0] * latency / self.latency_target
        else:
            lat_term = self._term(latency, self.latency_ref, c.alpha, c.beta, self.latency_budget is not None)
        if self.memory_target is not None:
            mem_term = weights[1] * memory / self.memory_target
        else:
            mem_term = self._term(memory, self.memory_ref, c.gamma, c.delta, self.memory_budget is not None)
        return lat_term, mem_term, latency, memory

    @torch.no_grad()
    def dual_step(self, probabilities: Mapping[str, torch.Tensor] | Sequence[torch.Tensor]) -> None:
        """One controller step of the targeted weights from the costs expected under ``probabilities``
        (the architecture distribution, no noise; no host sync). A no-op without targets."""
        if self.has_targets:
            latency, memory = self.expected_costs(probabilities)
            c = self.config
            for k, (value, target) in enumerate(((latency, self.latency_target), (memory, self.memory_target))):
                if target is not None:
                    gap = value.to(self.weights) / target - 1.0
                    self.integral[k] = (self.integral[k] + c.dual_lr * gap).clamp_min(0.0)
                    self.weights[k] = (self.integral[k] + c.dual_gain * gap).clamp_min(0.0)

    def forward(self, masks: Mapping[str, torch.Tensor] | Sequence[torch.Tensor]
                ) -> tuple[torch.Tensor, dict[str, float]]:
        """The penalty (a scalar tensor with gradient to ``masks``) and its parts as floats."""
        lat_term, mem_term, latency, memory = self.terms(masks)
        return lat_term + mem_term, {"latency_ms": float(latency.detach()), "memory_mb": float(memory.detach()),
                                     "latency_term": float(lat_term.detach()),
                                     "memory_term": float(mem_term.detach())}

    def extra_repr(self) -> str:
        c = self.config
        if self.has_targets:
            return (f"latency_target={self.latency_target}, memory_target={self.memory_target}, "
                    f"dual_lr={c.dual_lr}, dual_gain={c.dual_gain}, memory={c.memory}")
        return (f"alpha={c.alpha}, beta={c.beta}, gamma={c.gamma}, delta={c.delta}, "
                f"latency_ref={self.latency_ref:.4g} ms, memory_ref={self.memory_ref:.4g} MB, memory={c.memory}")
