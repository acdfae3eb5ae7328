"""The differentiable hardware penalty of the Gumbel search: the terms a*lat^b + g*mem^d of the loss.

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
with ``memory="sum"`` the literal per-block sum ``sum_ij m_ij (param_ij + act_ij)``.
The penalty is

.. math::

    P(a) = \\alpha\\, \\widehat{\\mathrm{lat}}(a)^{\\beta} + \\gamma\\, \\widehat{\\mathrm{mem}}(a)^{\\delta},
    \\qquad \\widehat{c}(a) = c(a) / c(\\mathrm{baseline})

so ``alpha`` and ``gamma`` mean the same in every space (the baseline is the
space's reference network: plain ResNet50 on the project's spaces). In budget mode a term is ``alpha * relu(c(a)/T - 1)^beta``
for a target ``T`` (in ms or MB, or ``"N%"`` of the baseline's cost): only the excess
over the budget is penalised.

In target mode (``latency_target`` / ``memory_target``) a term is ``w * c(a)/T``, the
Lagrangian of ``E[c] <= T`` for the cost expected under the architecture distribution
``softmax(alpha)``. By default (``controller: projection``, :meth:`HardwarePenalty.project`)
the multiplier is solved for after every architecture update: the searched labels' logits
are tilted by ``-w * c_v / T`` (each value ``v``'s cost), the KL projection of the
distribution onto the constraint, with the smallest ``w >= 0`` that brings ``E[c]`` to ``T``
(bisection). The distribution is on its target from the first update and cannot wind past
it; the terms are then the Lagrangian's value, without gradient (the tilt is the penalty's
step). A staged search gives an earlier stage its share of the way to the target
(:meth:`HardwarePenalty.set_stage`), so its layers are not all pushed to their cheapest
values to meet the whole network's target alone. With ``controller: pi`` the multiplier is
stepped instead (:meth:`HardwarePenalty.dual_step`), by a PI controller on ``g = E[c]/T - 1``:
``I <- max(0, I + dual_lr * g)`` (dual ascent; ``I`` starts at ``alpha`` / ``gamma``) and
``w = max(0, I + dual_gain * g)``. A distribution above its target raises the weight
until it comes down to the target; one below it lowers the weight to zero, so accuracy
decides. Plain dual ascent (``dual_gain = 0``) circles the target (0.86-1.23x of it on a
two-layer toy after 2,000 steps); the proportional term lands it within 0.2 %, given
a thousand steps (a digits search has about a hundred: there it stays far above its
targets, or winds past them to every layer's cheapest block). The user
gives a target, not a weight (TF-NAS, TuNAS: fixed weights land anywhere around one).

Because ``m`` are tensors of the forward pass, ``P`` carries a gradient to the
architecture parameters (NNI 3.0's own ``penalty=`` does not; see
:mod:`nni_hwaware.nni_fixes`).
"""

from __future__ import annotations

import math
from collections.abc import Collection, Mapping, Sequence
from typing import Any

import torch
from torch import nn

from nni_hwaware.cost_model import SpaceCostModel, as_space_model
from nni_hwaware.errors import HwAwareError
from nni_hwaware.strategies.gumbel.strategy_config import PenaltyConfig

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
        base_mem = float(self.expected_costs(self.one_hot(reference))[1])
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
        #: The targets of the current stage (ms, MB; NaN: no target): the whole network's targets,
        #: or in a stage that leaves layers to a later one, its share (:meth:`set_stage`).
        self.register_buffer("stage_targets", torch.tensor([
            math.nan if t is None else float(t) for t in (self.latency_target, self.memory_target)]))
        #: The projections' tilts added up, every label's values in a row (saved with the state):
        #: the logits less these are what the loss alone taught (:meth:`learned`).
        self._offsets: dict[str, slice] = {}
        start = 0
        for label in self.labels:
            self._offsets[label] = slice(start, start + len(self.names[label]))
            start += len(self.names[label])
        self.register_buffer("tilts", torch.zeros(start))
        table = cost_model.choice_table()
        #: Per label, each value's latency and memory (rows 0 and 1), what a projection tilts by.
        self._value_costs = {}
        for label in self.labels:
            rows = table[table.label == label].set_index("value")
            self._value_costs[label] = torch.tensor(
                [[float(rows.latency_ms.iloc[j]), float(rows.memory_mb.iloc[j])]
                 for j in range(len(self.names[label]))], dtype=torch.float32).T.contiguous()

    def one_hot(self, arch: Mapping[str, Any]) -> dict[str, torch.Tensor]:
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
        targets = self.stage_targets.to(latency.device)
        if self.latency_target is not None:
            lat_term = weights[0] * latency / targets[0]
        else:
            lat_term = self._term(latency, self.latency_ref, c.alpha, c.beta, self.latency_budget is not None)
        if self.memory_target is not None:
            mem_term = weights[1] * memory / targets[1]
        else:
            mem_term = self._term(memory, self.memory_ref, c.gamma, c.delta, self.memory_budget is not None)
        if self.has_targets and c.controller == "projection":  # the projection moves the logits: the
            # terms are the Lagrangian's value (what the loss and the collapse guard read), no gradient
            lat_term, mem_term = lat_term.detach(), mem_term.detach()
        return lat_term, mem_term, latency, memory

    def _targets_now(self) -> list[float | None]:
        return [None if math.isnan(t) else t for t in self.stage_targets.tolist()]

    @torch.no_grad()
    def set_stage(self, probabilities: Mapping[str, torch.Tensor], searched: Collection[str],
                  later: Collection[str]) -> None:
        """Set the targets of a stage that searches ``searched`` while ``later`` labels wait for a later
        stage (their distribution, like every frozen label's, stays as ``probabilities`` say).

        The last searching stage (no ``later``) aims at the network's targets. An earlier one aims at
        its share of the way there: with ``E`` the cost expected now and ``T`` the target, the stage's
        target is ``E - (E - T) * r_S / (r_S + r_L)``, where ``r_S`` (``r_L``) is how much ``E`` falls
        with the searched (later) labels at their cheapest values. Without shares, a first stage
        would have to meet the whole network's target with half of its layers, pushing them all to
        their cheapest values (and the controller's weight past what the next stage needs).
        """
        probabilities = {label: probabilities[label].detach().float().cpu() for label in self.labels}
        now = [float(v) for v in self.expected_costs(probabilities)]
        for k, target in enumerate((self.latency_target, self.memory_target)):
            if target is None or not later or now[k] <= target:
                self.stage_targets[k] = math.nan if target is None else target
                continue
            falls = []
            for part in (searched, later):
                cheapest = dict(probabilities)
                for label in part:
                    one = torch.zeros(len(self.names[label]))
                    one[int(self._value_costs[label][k].argmin())] = 1.0
                    cheapest[label] = one
                falls.append(max(0.0, now[k] - float(self.expected_costs(cheapest)[k])))
            share = falls[0] / (falls[0] + falls[1]) if falls[0] + falls[1] > 0 else 1.0
            self.stage_targets[k] = now[k] - (now[k] - target) * share

    @torch.no_grad()
    def project(self, alphas: Mapping[str, torch.Tensor], searched: Collection[str], *,
                tolerance: float = 1e-3, max_weight: float = 64.0) -> list[float]:
        """Tilt the logits of the ``searched`` labels in place so the expected costs fit the stage's
        targets: ``alpha_l <- alpha_l - w_lat * lat_l / T_lat - w_mem * mem_l / T_mem`` (``lat_l``,
        ``mem_l``: each value's costs), with the smallest weights ``w >= 0`` that bring every expected
        cost to its target (bisection, one cost at a time until neither moves). A distribution already
        within its targets is left alone (``w = 0``). The weights are the constraints' multipliers
        (the KL projection of ``softmax(alpha)`` onto ``E[c] <= T`` is this exponential tilt); they
        are kept in :attr:`weights` and returned. At ``max_weight`` the searched labels sit on their
        cheapest values: the stage cannot reach its target (the export says so)."""
        targets = self._targets_now()
        active = [k for k in (0, 1) if targets[k] is not None]
        moving = [label for label in self.labels if label in {str(s) for s in searched}]
        if not active or not moving:
            return [0.0, 0.0]
        base = {label: alphas[label].detach().float().cpu() for label in self.labels}
        tilt = {label: self._value_costs[label] / torch.tensor([[targets[0] or 1.0], [targets[1] or 1.0]])
                for label in moving}

        def costs(weights: Sequence[float]) -> list[float]:
            shift = torch.tensor([[weights[0]], [weights[1]]])
            probabilities = {label: (base[label] - (shift * tilt[label]).sum(0) if label in tilt
                                     else base[label]).softmax(-1) for label in self.labels}
            return [float(v) for v in self.expected_costs(probabilities)]

        weights = [0.0, 0.0]
        for _ in range(8):
            moved = False
            for k in active:
                limit = targets[k] * (1 + tolerance)
                trial = list(weights)
                trial[k] = 0.0
                if costs(trial)[k] <= limit:
                    found = 0.0
                else:
                    low, high = 0.0, 1.0
                    while high < max_weight and costs([high if j == k else weights[j] for j in (0, 1)])[k] > limit:
                        low, high = high, min(2 * high, max_weight)
                    for _ in range(30):
                        if high - low <= 1e-4 * high:
                            break
                        mid = (low + high) / 2
                        if costs([mid if j == k else weights[j] for j in (0, 1)])[k] > limit:
                            low = mid
                        else:
                            high = mid
                    found = high
                moved = moved or abs(found - weights[k]) > 1e-4 * (1 + found)
                weights[k] = found
            if not moved:
                break
        if any(weights):
            shift = torch.tensor([[weights[0]], [weights[1]]])
            for label in moving:
                step = (shift * tilt[label]).sum(0)
                alphas[label].sub_(step.to(alphas[label]))
                self.tilts[self._offsets[label]] -= step.to(self.tilts)
        self.weights.copy_(torch.tensor(weights, dtype=self.weights.dtype))
        return weights

    @torch.no_grad()
    def learned(self, logits: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """The logits less every projection's tilt: what the loss alone made of each label's values.

        The tilted logits sample the networks the supernet trains (their expected cost on the
        targets); their mode is much cheaper than their mean (the tilt moves mass onto every
        label's cheapest value alike, so most labels' mode is their cheapest). The export reads
        these instead, with the targets as hard limits: the loss's preferences, under the budget."""
        return {label: logits[label].detach().float().cpu() - self.tilts[self._offsets[label]].cpu()
                for label in self.labels}

    @torch.no_grad()
    def dual_step(self, probabilities: Mapping[str, torch.Tensor] | Sequence[torch.Tensor]) -> None:
        """One controller step of the targeted weights from the costs expected under ``probabilities``
        (the architecture distribution, no noise; no host sync). A no-op without targets."""
        if self.has_targets:
            latency, memory = self.expected_costs(probabilities)
            c = self.config
            for k, (value, target) in enumerate(((latency, self.latency_target), (memory, self.memory_target))):
                if target is not None:
                    gap = value.to(self.weights) / self.stage_targets[k] - 1.0
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
