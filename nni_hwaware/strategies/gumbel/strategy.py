"""The NNI strategy: ``NasExperiment(space, evaluator, HardwareGumbelDARTS(cost_model, ...))``.

:class:`HardwareGumbelDARTS` subclasses NNI's ``GumbelDARTS`` and runs on any NNI
model space whose labels are categorical: every ``LayerChoice`` becomes a
:class:`~nni_hwaware.strategies.gumbel.supernet.GumbelMixedLayer`, a ``Repeat`` with a
depth choice NNI's differentiable repeat, and NNI's mutable layers (``MutableConv2d``,
``MutableLinear``, ``MutableBatchNorm2d``, ...) NNI's differentiable mixed operations,
all weighted by one shared Gumbel mask per label
(:class:`~nni_hwaware.strategies.gumbel.supernet.LabelMasks`). The evaluator's Lightning module is wrapped in a
:class:`~nni_hwaware.strategies.gumbel.module.HardwareGumbelModule`, and the
training data loader pairs training and validation batches (architecture steps
use validation batches, as in NNI's DARTS). Unlike NNI's DARTS, the validation
loader is also run after each epoch, on the currently most probable architecture.

It runs on NNI's sequential engine like every one-shot strategy, inside a
``NasExperiment`` or directly as ``strategy(RawFormatModelSpace(space, evaluator),
SequentialExecutionEngine())``. Afterwards :meth:`HardwareGumbelDARTS.export_architecture`
(also ``experiment.export_top_models(formatter="dict")``) gives the value with the
largest probability of each label.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import Any

import torch
from nni.mutable import Categorical
from nni.nas.oneshot.pytorch.strategy import GumbelDARTS, OneShotStrategy, no_default_hook
from nni.nas.oneshot.pytorch.supermodule.differentiable import (
    DifferentiableMixedInput,
    DifferentiableMixedRepeat,
    MixedOpDifferentiablePolicy,
)
from nni.nas.oneshot.pytorch.supermodule.operation import NATIVE_MIXED_OPERATIONS
from torch import nn

from nni_hwaware.cost_model import SpaceCostModel, as_space_model
from nni_hwaware.errors import HwAwareError, TargetUnreachable
from nni_hwaware.strategies.gumbel.job_config import from_mapping
from nni_hwaware.strategies.gumbel.module import HardwareGumbelModule
from nni_hwaware.strategies.gumbel.penalty import HardwarePenalty
from nni_hwaware.strategies.gumbel.strategy_config import (
    PenaltyConfig,
    StagingConfig,
    TemperatureConfig,
)
from nni_hwaware.strategies.gumbel.supernet import GumbelMixedLayer, LabelMasks

__all__ = ["HardwareGumbelDARTS", "fitting_architecture"]

_logger = logging.getLogger("nni_hwaware.gumbel")


class HardwareGumbelDARTS(GumbelDARTS):
    """Gumbel-DARTS with ``L = CE + alpha*lat^beta + gamma*mem^delta`` and staged search.

    Parameters
    ----------
    cost_model
        Costs of the searched space on the target chip: a
        :class:`~nni_hwaware.cost_model.SpaceCostModel` of any space (a model read from a block
        table of an earlier version is converted by :func:`~nni_hwaware.cost_model.as_space_model`).
    penalty, temperature, staging
        :class:`PenaltyConfig`, :class:`TemperatureConfig`, :class:`StagingConfig`
        (or mappings of their fields, e.g. from YAML).
    arc_learning_rate, arc_weight_decay
        Adam on the architecture parameters (betas (0.5, 0.999), as NNI's DARTS).
    gradient_clip_val
        Clip the weights' gradients (None: no clipping).
    arc_every
        Architecture step on every k-th training batch only.
    baseline_bias
        Initial architecture logit of the reference network's value of every label; the
        others start near 0.
    reference
        The network costs are normalised by (a sample, ``"largest"`` or a value every label
        takes); default: the ResNet-skeleton space's baseline, else ``"largest"``.
    seed
        Seeds the architecture parameters' initial values and every layer's Gumbel noise.
    report
        Called with each epoch's record (default: ``nni.report_intermediate_result``).
    """

    def __init__(self, cost_model: SpaceCostModel, *,
                 penalty: PenaltyConfig | Mapping[str, Any] | None = None,
                 temperature: TemperatureConfig | Mapping[str, Any] | None = None,
                 staging: StagingConfig | Mapping[str, Any] | None = None,
                 arc_learning_rate: float = 0.01, arc_weight_decay: float = 0.0,
                 gradient_clip_val: float | None = None, arc_every: int = 1, baseline_bias: float = 0.0,
                 seed: int = 0, reference: Any = None,
                 report: Callable[[dict[str, Any]], None] | None = None) -> None:
        self.penalty_config = from_mapping(PenaltyConfig, penalty, "penalty")
        self.temperature_config = from_mapping(TemperatureConfig, temperature, "temperature")
        self.staging = from_mapping(StagingConfig, staging, "stages")
        if not (arc_learning_rate > 0):
            raise HwAwareError(f"arc_learning_rate must be > 0, got {arc_learning_rate}")
        super().__init__(temperature=(self.temperature_config.init, self.temperature_config.min),
                         arc_learning_rate=arc_learning_rate, gradient_clip_val=gradient_clip_val,
                         warmup_epochs=0, penalty=None)
        self.cost_model: SpaceCostModel
        #: The reference network (a sample of the space).
        self.reference: dict[str, Any]
        self.cost_model, self.reference = as_space_model(cost_model, reference)
        self.masks: LabelMasks | None = None
        self.arc_weight_decay = arc_weight_decay
        self.arc_every = arc_every
        self.baseline_bias = baseline_bias
        self.seed = seed
        self.report = report
        self.hardware_penalty: HardwarePenalty | None = None

    def extra_repr(self) -> str:
        p, t, s = self.penalty_config, self.temperature_config, self.staging
        return (f"chip={self.cost_model.chip!r}, alpha={p.alpha}, beta={p.beta}, gamma={p.gamma}, "
                f"delta={p.delta}, temperature={t.init}->{t.min} ({t.schedule}, hard={t.hard}), "
                f"stages={list(s.order)}, split={s.split}, seed={self.seed}")

    # -- supernet ----------------------------------------------------------------
    def default_mutation_hooks(self) -> list[Any]:
        return [GumbelMixedLayer.mutate, DifferentiableMixedRepeat.mutate, DifferentiableMixedInput.mutate,
                *[operation.mutate for operation in NATIVE_MIXED_OPERATIONS], no_default_hook]

    def mutate_model(self, model: Any) -> Any:
        # NNI's DARTS draws the initial alphas from the global generator; draw them
        # from this strategy's seed instead.
        generator = torch.Generator().manual_seed(self.seed)
        self._arch_parameters = {}
        values_of: dict[str, list[Any]] = {}
        for label, mutable in model.simplify().items():
            if not isinstance(mutable, Categorical):
                raise HwAwareError(f"HardwareGumbelDARTS searches categorical choices only; {label!r} is a "
                                   f"{type(mutable).__name__}")
            values = torch.randn(len(mutable.values), generator=generator) * 1e-3
            reference = self.reference.get(label)
            if self.baseline_bias and reference in mutable.values:
                values[list(mutable.values).index(reference)] += self.baseline_bias
            self._arch_parameters[label] = nn.Parameter(values)
            values_of[label] = list(mutable.values)
        t = self.temperature_config
        self.masks = LabelMasks(self._arch_parameters, values_of, seed=self.seed, tau=t.init, hard=t.hard,
                                min_weight=t.min_weight)
        model = OneShotStrategy.mutate_model(self, model)
        self.masks.attach(model)
        self.hardware_penalty = HardwarePenalty(self.cost_model, self.penalty_config, values_of,
                                                reference=self.reference)
        limits = _limits(self.hardware_penalty)
        if limits:  # a target no network of the space reaches: one line now, not after the search
            from nni_hwaware.strategies.budget import Budget, BudgetMask

            try:
                BudgetMask(self.hardware_penalty.model, Budget(**limits))
            except HwAwareError as err:
                raise TargetUnreachable(f"the penalty's targets cannot be met: {err} (penalty.latency_target / "
                                   "memory_target, or keep cheaper values in prune.keep)") from None
        return model

    def run_hook(self, hook: Any, name: str, module: nn.Module, memo: dict[str, Any]) -> Any:
        if not memo.get("_validated"):
            memo.update(self._arch_parameters)
            memo["_validated"] = True
        kwargs = {"masks": self.masks, "softmax": self.masks, "mixed_op_sampling": MixedOpDifferentiablePolicy}
        return hook(module, name, memo, kwargs)

    def configure_oneshot_module(self, training_module: Any) -> HardwareGumbelModule:
        if self.hardware_penalty is None or self.masks is None:
            raise RuntimeError("mutate_model must run before configure_oneshot_module")
        return HardwareGumbelModule(
            training_module, penalty=self.hardware_penalty, masks=self.masks, temperature=self.temperature_config,
            staging=self.staging, arc_learning_rate=self.arc_learning_rate,
            arc_weight_decay=self.arc_weight_decay, gradient_clip_val=self.gradient_clip_val,
            arc_every=self.arc_every, report=self.report)

    def val_dataloader(self, train_dataloader_fn: Callable[[], Any], val_dataloader_fn: Callable[[], Any]) -> Any:
        return val_dataloader_fn()

    # -- results -----------------------------------------------------------------
    @property
    def module(self) -> HardwareGumbelModule:
        return self.oneshot_module  # type: ignore[return-value]

    def export_architecture(self) -> dict[str, Any]:
        """The most probable architecture whose predicted costs fit the penalty's targets and budgets
        (:meth:`~nni_hwaware.strategies.budget.BudgetMask.most_probable`); without any, the most
        probable value of every label. No architecture fitting them is one clear error."""
        penalty = self.module.hardware_penalty
        limits = _limits(penalty)
        if not limits:
            return self.module.architecture()
        fill = penalty.config.export_fill if penalty.has_targets else 0.0
        return fitting_architecture(penalty.model, self.probabilities(), limits, fill=fill)

    def probabilities(self) -> dict[str, dict[Any, float]]:
        """Every label's distribution the export reads: value -> probability. ``softmax(alpha)``; with
        targets met by projection, ``softmax`` of the logits less the projections' tilts (what the
        loss learned, :meth:`HardwarePenalty.learned`; the targets are then the export's hard limits)."""
        masks, penalty = self.module.masks, self.module.hardware_penalty
        if penalty.has_targets and penalty.config.controller == "projection":
            logits = penalty.learned({str(label): masks.alphas[label] for label in masks.labels})
            rows = {str(label): logits[str(label)].softmax(-1) for label in masks.labels}
        else:
            rows = {str(label): masks.probabilities(label).detach().cpu() for label in masks.labels}
        return {str(label): dict(zip(masks.values[label], rows[str(label)].tolist(), strict=True))
                for label in masks.labels}

    @property
    def history(self) -> list[dict[str, Any]]:
        """One record per search epoch (stage, loss, expected costs, validation accuracy)."""
        return self.module.history


def _limits(penalty: HardwarePenalty) -> dict[str, float]:
    """The penalty's targets (or budgets) in ms and MB, the export's limits; empty in the fixed-weight form."""
    limits = {"latency_ms": penalty.latency_target or penalty.latency_budget,
              "memory_mb": penalty.memory_target or penalty.memory_budget}
    return {k: v for k, v in limits.items() if v is not None}


def fitting_architecture(model: Any, probabilities: Mapping[str, Mapping[Any, float]],
                         limits: Mapping[str, float], *, fill: float = 0.0) -> dict[str, Any]:
    """The most probable architecture under ``probabilities`` (label -> value -> probability)
    whose predicted costs on ``model`` are within ``limits`` (``latency_ms`` / ``memory_mb``).

    ``fill > 0``: the most probable one whose costs are also at least ``(1 - fill)`` of every
    limit (one that lands on its targets, like TF-NAS's elasticity step: the mode of a
    distribution whose expected cost is on its target is often well under it); where none
    is, at least that share of the latency limit, then of the memory limit, then no floor
    (logged in one line)."""
    import math

    from nni_hwaware.strategies.budget import Budget, BudgetMask

    mask = BudgetMask(model, Budget(**limits))  # nothing fits at all: one line naming the cheapest
    labels, candidates = list(mask.model.labels), [list(c) for c in mask.model.candidates]
    logp = [[math.log(max(float(probabilities[label].get(v, 0.0)), 1e-300)) for v in values]
            for label, values in zip(labels, candidates, strict=True)]
    floors: list[dict[str, float]] = []
    if fill > 0:
        band = {m: (1 - fill) * v for m, v in limits.items()}
        floors = [band, *([{m: band[m]} for m in ("latency_ms", "memory_mb") if m in band] if len(band) > 1 else [])]
    found = None
    for floor in floors:
        try:
            found = mask.most_probable(logp, floor=floor)
        except HwAwareError:  # the exact search ran out of steps: try a looser floor
            found = None
        if found is not None:
            break
    if floors and found is None:
        _logger.warning("no architecture within %.0f %% under the targets (%s); exporting the most probable one "
                        "within them", 100 * fill, ", ".join(f"{k} {v:.4g}" for k, v in limits.items()))
    if found is None:
        found = mask.most_probable(logp)
    if found is None:
        text = ", ".join(f"{k} {v:.4g}" for k, v in limits.items())
        raise HwAwareError(f"no architecture of the space fits {text} as the table predicts; raise the target")
    return {label: candidates[i][j] for i, (label, j) in enumerate(zip(labels, found, strict=True))}
