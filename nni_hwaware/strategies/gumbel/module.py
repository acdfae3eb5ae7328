"""The Lightning module of the search: NNI's Gumbel-DARTS module with the hardware penalty and stages.

:class:`HardwareGumbelModule` subclasses NNI's ``GumbelDartsLightningModule``
and keeps its shape: each training step is an architecture step on a validation
batch, then a weight step on a training batch (first-order DARTS). What changes:

* the architecture step's loss is ``CE + P(m)``, ``P`` the
  :class:`~nni_hwaware.strategies.gumbel.penalty.HardwarePenalty` of the masks
  ``m`` the forward pass just used (one per label, shared by every mixed op of the
  label: :class:`~nni_hwaware.strategies.gumbel.supernet.LabelMasks`), so the
  penalty's gradient reaches the architecture parameters;
* a :class:`~nni_hwaware.strategies.gumbel.staged.StagePlan` freezes, per epoch,
  the labels outside the current stage (the weights of their mixed ops and their architecture
  parameters: ``requires_grad`` off and gradients dropped before every optimiser
  step, so neither momentum nor weight decay moves them) and sets the stage's
  temperature; a stage ends on patience or its epoch limit;
* after each epoch the most probable architecture is evaluated on the validation
  split, and the epoch's record is reported to NNI as an intermediate result and kept
  in :attr:`history` (:class:`~nni_hwaware.strategies.gumbel.epoch_metrics.EpochMetrics`);
* a non-finite loss or architecture parameter stops the search with one line, and a
  searching stage that collapses (training accuracy near chance while the cost terms
  dominate the loss) stops it and exports the architecture of the last epoch before the
  collapse (:class:`~nni_hwaware.strategies.gumbel.guards.SearchGuards`);
* the search's state goes into Lightning's checkpoints as plain types and tensors, so an
  interrupted search resumes with ``torch.load(weights_only=True)``.

BatchNorm layers of frozen blocks keep normalising with batch statistics (their
running averages are not parameters and are not used by the retrained network).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import torch
from nni.nas.oneshot.pytorch.base_lightning import BaseOneShotLightningModule
from nni.nas.oneshot.pytorch.differentiable import (
    GumbelDartsLightningModule,
    LinearTemperatureScheduler,
)
from torch import nn

from nni_hwaware.errors import HwAwareError
from nni_hwaware.strategies.gumbel.epoch_metrics import EpochMetrics, report_to_nni
from nni_hwaware.strategies.gumbel.guards import SearchGuards
from nni_hwaware.strategies.gumbel.penalty import HardwarePenalty
from nni_hwaware.strategies.gumbel.staged import StagePlan
from nni_hwaware.strategies.gumbel.strategy_config import StagingConfig, TemperatureConfig
from nni_hwaware.strategies.gumbel.supernet import LabelMasks

__all__ = ["HardwareGumbelModule"]

Reporter = Callable[[dict[str, Any]], None]


def _loss_of(output: Any) -> torch.Tensor:
    return output["loss"] if isinstance(output, dict) else output


class HardwareGumbelModule(EpochMetrics, SearchGuards, GumbelDartsLightningModule):
    """See the module docstring. Built by :class:`~nni_hwaware.strategies.gumbel.HardwareGumbelDARTS`."""

    def __init__(self, training_module: Any, *, penalty: HardwarePenalty, masks: LabelMasks,
                 temperature: TemperatureConfig,
                 staging: StagingConfig, arc_learning_rate: float, arc_weight_decay: float = 0.0,
                 gradient_clip_val: float | None = None, arc_every: int = 1,
                 report: Reporter | None = None) -> None:
        super().__init__(training_module, LinearTemperatureScheduler(temperature.init, temperature.min),
                         arc_learning_rate=arc_learning_rate, gradient_clip_val=gradient_clip_val,
                         warmup_epochs=0, penalty=None)
        self.hardware_penalty = penalty
        object.__setattr__(self, "masks", masks)  # shared with the supernet, not a submodule
        self.temperature = temperature
        self.staging = staging
        self.arc_weight_decay = arc_weight_decay
        self.arc_every = arc_every
        self.report = report or report_to_nni
        self.plan: StagePlan | None = None
        #: One record per finished epoch (what is reported to NNI).
        self.history: list[dict[str, Any]] = []
        self._sums: dict[str, tuple[float, int]] = {}
        self._val = torch.zeros(3)
        #: The losses of the last finite updates, and the (epoch, step) of the latest.
        self._last_finite: dict[str, float] = {}
        self._last_finite_at = (0, 0)
        self._epoch_closed = -1
        #: Training top-1 of the epoch's weight steps: (correct, seen) on the device, and the classes.
        self._train_counts = torch.zeros(2)
        self._classes: int | None = None
        self._capture = False
        self._captured: torch.Tensor | None = None
        self._logits_hook: Any = None
        #: The architecture parameters at the end of the last epoch that did not collapse
        #: (epoch -1: the starting ones), what a collapse restores.
        self._last_good: dict[str, Any] | None = None
        #: What the collapse guard found (None: the search did not collapse).
        self.collapse: dict[str, Any] | None = None
        #: The best training top-1 of a finished epoch and that epoch (what a collapse fell from).
        self._best_train: tuple[float, int] = (float("-inf"), -1)

    # -- structure -------------------------------------------------------------
    @property
    def labels(self) -> list[str]:
        """The searched labels, in the space's order."""
        return [str(label) for label in self.masks.labels]

    def _alphas(self) -> list[nn.Parameter]:
        return list(self.masks.alphas.values())

    def _parameter_groups(self) -> Iterator[tuple[str, nn.Parameter]]:
        """Each weight of the supernet with its owner: a label, ``stem`` or ``head``.

        A weight inside a mixed module (a ``LayerChoice``, a ``Repeat`` with a depth
        choice, a mixed operation) belongs to the innermost one's label (a mixed
        operation's first label); the others are ``stem`` before the first owned weight
        (in registration order) and ``head`` after it.
        """
        owner: dict[int, str] = {}
        for module in self.training_module.model.modules():  # parents before children: innermost wins
            label = _label_of(module)
            if label is not None:
                for p in module.parameters():
                    owner[id(p)] = label
        arch = {id(p) for p in self._alphas()}
        seen_layer = False
        for _, p in self.training_module.model.named_parameters():
            if id(p) in arch:
                continue
            label = owner.get(id(p))
            seen_layer = seen_layer or label is not None
            yield (label if label is not None else ("head" if seen_layer else "stem")), p

    def setup(self, stage: str | None = None) -> Any:
        if not self.labels:
            raise HwAwareError("the supernet has no choices: was the space mutated by HardwareGumbelDARTS?")
        if self.plan is None:
            self.plan = StagePlan(self.labels, self.staging, self.temperature)
        if self._logits_hook is None:  # the weight steps' logits, for the training accuracy
            self._logits_hook = self.training_module.register_forward_hook(self._keep_logits)
        return super().setup(stage)

    def configure_architecture_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.Adam(self.arch_parameters(), self.arc_learning_rate, betas=(0.5, 0.999),
                                weight_decay=self.arc_weight_decay)

    # -- freezing and temperature -----------------------------------------------
    def _trainable(self) -> set[str]:
        stage = self.plan.current  # type: ignore[union-attr]
        owners = set(stage.layers)
        if stage.trains_stem:
            owners.add("stem")
        if stage.trains_head:
            owners.add("head")
        return owners

    def apply_stage(self) -> None:
        """Freeze what the current stage does not train; set the stage's temperature."""
        stage, trainable = self.plan.current, self._trainable()  # type: ignore[union-attr]
        for owner, p in self._parameter_groups():
            p.requires_grad_(owner in trainable)
        for label, alpha in self.masks.alphas.items():
            alpha.requires_grad_(stage.searches and str(label) in stage.layers)
        self.masks.tau, self.masks.hard = self.plan.temperature_now(), self.temperature.hard  # type: ignore[union-attr]
        if stage.searches and self.plan.epoch_in_stage == 0 and self.hardware_penalty.has_targets:  # type: ignore[union-attr]
            # a stage's targets: the network's, or its share when a later stage searches more layers
            self.hardware_penalty.set_stage(self._probabilities(), stage.layers, self.plan.later_layers())  # type: ignore[union-attr]

    def _probabilities(self) -> dict[str, torch.Tensor]:
        return {str(label): self.masks.probabilities(label).detach() for label in self.masks.labels}

    def frozen_parameters(self) -> list[nn.Parameter]:
        """The weights and architecture parameters the current stage must not change."""
        trainable, stage = self._trainable(), self.plan.current  # type: ignore[union-attr]
        frozen = [p for owner, p in self._parameter_groups() if owner not in trainable]
        frozen += [alpha for label, alpha in self.masks.alphas.items()
                   if not (stage.searches and str(label) in stage.layers)]
        return frozen

    def on_train_start(self) -> Any:
        if self.plan is not None and self.plan.done:  # resumed from the checkpoint of a finished search
            self.trainer.should_stop = True
        if self._last_good is None:
            self._last_good = {"epoch": -1, "logits": self._logits()}
        return super().on_train_start()

    def on_train_epoch_start(self) -> Any:
        if self.plan is None or self.plan.done:
            raise RuntimeError("the stage plan is finished; nothing left to train")
        self.apply_stage()
        self._sums = {}
        self._train_counts = torch.zeros(2, device=self.device)
        self.log("gumbel_temperature", self.plan.temperature_now())
        # NNI's Darts/GumbelDarts hooks would unfreeze every architecture parameter and
        # set the temperature of GumbelSoftmax modules: the stage plan does both here.
        return BaseOneShotLightningModule.on_train_epoch_start(self)

    def on_before_optimizer_step(self, optimizer: torch.optim.Optimizer) -> None:
        for p in self.frozen_parameters():
            p.grad = None

    # -- steps -----------------------------------------------------------------------
    def _architecture_backward(self, loss: torch.Tensor) -> list[nn.Parameter]:
        """Gradients of ``loss`` for the architecture parameters being searched (returned).

        On one device in full precision only these gradients are computed (the
        weights' are not needed in an architecture step); otherwise Lightning's
        ``manual_backward`` (DDP gradient sync, loss scaling) computes them all.
        """
        params = [alpha for alpha in self._alphas() if alpha.requires_grad]
        if self.trainer.world_size == 1 and str(self.trainer.precision) in ("32-true", "32"):
            for p, grad in zip(params, torch.autograd.grad(loss, params), strict=True):
                p.grad = grad
        else:
            self.manual_backward(loss)
        return params

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        # Each update copies its losses (and whether the architecture parameters are
        # still finite) to the host once, and checks them before anything else moves.
        stage = self.plan.current  # type: ignore[union-attr]
        alphas_finite: torch.Tensor | None = None
        if stage.searches and batch_idx % self.arc_every == 0:
            arc_optim = self.architecture_optimizers()
            arc_optim.zero_grad()
            ce = _loss_of(self.training_module.training_step(batch["val"], 2 * batch_idx))
            lat_term, mem_term, latency, memory = self.hardware_penalty.terms(self.masks.current())
            penalty = lat_term + mem_term
            loss = ce + penalty
            total, ce_value, lat_value, mem_value, penalty_value, latency_ms, memory_mb = torch.stack(
                [t.detach().float() for t in (loss, ce, lat_term, mem_term, penalty, latency, memory)]).tolist()
            self._check_finite(batch_idx, "architecture update", {
                "total": total, "CE": ce_value, "latency penalty": lat_value, "memory penalty": mem_value})
            params = self._architecture_backward(loss)
            arc_optim.step()
            if self.hardware_penalty.has_targets:  # the weights follow the distribution to its targets
                if self.hardware_penalty.config.controller == "projection":
                    self.hardware_penalty.project(self.masks.alphas, stage.layers)
                else:
                    self.hardware_penalty.dual_step(self._probabilities())
            if params:
                alphas_finite = torch.isfinite(torch.cat([p.detach().flatten() for p in params])).all()
            self._accumulate(loss=total, ce=ce_value, penalty=penalty_value,
                             sampled_latency_ms=latency_ms, sampled_memory_mb=memory_mb)
        self._capture, self._captured = True, None
        try:
            w_loss = _loss_of(self.training_module.training_step(batch["train"], 2 * batch_idx + 1))
        finally:
            self._capture = False
        self._count_correct(batch["train"])
        if alphas_finite is None:
            w_value = float(w_loss.detach())
        else:
            w_value, alphas_ok = torch.stack([w_loss.detach().float(), alphas_finite.float()]).tolist()
            if not alphas_ok:
                raise self._diverged(batch_idx, "architecture update", "the architecture parameters became NaN/inf")
        self._check_finite(batch_idx, "weight update", {"weight CE": w_value})
        self.advance_optimization(w_loss, batch_idx, self.gradient_clip_val)
        self.advance_lr_schedulers(batch_idx)
        if not stage.searches:
            self._accumulate(loss=w_value, ce=w_value)
        self._accumulate(weight_loss=w_value)
        return w_loss

    def on_fit_end(self) -> None:
        # The evaluator's own final report reads metrics this module does not log.
        return None

    # -- checkpoints ---------------------------------------------------------------
    # Only plain types and tensors go in (labels as ``str``, not NNI's ``label``), so
    # the search resumes with ``torch.load(weights_only=True)``, which unpickles nothing else.
    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        checkpoint["hardware_gumbel"] = {
            "plan": self.plan.state_dict() if self.plan else None,
            "history": self.history,
            "collapse": self.collapse,
            "last_good": self._last_good,
            "best_train": list(self._best_train),
            "generators": {str(label): g.get_state() for label, g in self.masks.generators.items()},
        }

    def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        state = checkpoint.get("hardware_gumbel")
        if state is None:
            raise HwAwareError("the checkpoint was not written by a hardware Gumbel search")
        if self.plan is None:
            self.plan = StagePlan(self.labels, self.staging, self.temperature)
        if state["plan"] is not None:
            self.plan.load_state_dict(state["plan"])
        self.history = list(state["history"])
        self.collapse = state.get("collapse")
        self._last_good = state.get("last_good")
        best = state.get("best_train")
        self._best_train = (float(best[0]), int(best[1])) if best else (float("-inf"), -1)
        for label, generator in self.masks.generators.items():
            generator.set_state(state["generators"][str(label)])


def _label_of(module: nn.Module) -> str | None:
    """The label a mixed module of the supernet searches (None for other modules)."""
    label = getattr(module, "label", None)
    if getattr(module, "_arch_alpha", None) is not None and label is not None:
        return str(label)  # a LayerChoice
    alphas = getattr(module, "_arch_alpha", None)
    if isinstance(alphas, (dict, nn.ParameterDict)) and len(alphas):
        return str(next(iter(alphas)))  # a Repeat's depth or a mixed operation
    return None
