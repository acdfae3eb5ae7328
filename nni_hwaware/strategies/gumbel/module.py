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
  split, and the epoch's record (validation top-1/top-3, expected latency and
  memory under ``softmax(alpha)``, stage, temperature, loss) is reported to NNI as
  an intermediate result and kept in :attr:`history`;
* a non-finite loss (CE, a penalty term or their sum) or architecture parameter
  stops the search before the next update, with an :class:`~nni_hwaware.errors.HwAwareError`
  of one line: stage, epoch, step, the term that diverged, the last finite losses
  and what to change. Nothing is exported and no checkpoint of the diverged state
  is written (Lightning re-raises it unchanged);
* a searching stage that collapses -- an epoch whose training top-1 (the weight steps'
  batches, under the sampled masks) has fallen to near chance (below ``stages.collapse_accuracy``,
  by default 1.5 / the number of classes, after an earlier epoch above it; a network that
  has not learned yet has not collapsed) while the cost terms are more than
  ``stages.collapse_cost_share`` of the architecture loss -- stops the search with one
  warning line (logger ``nni_hwaware.gumbel``), recorded in the epoch's record, the stage
  log and :attr:`HardwareGumbelModule.collapse`; the architecture parameters go back to
  those of the last epoch that did not collapse, so the export is that distribution's
  network, not one that cannot learn.

BatchNorm layers of frozen blocks keep normalising with batch statistics (their
running averages are not parameters and are not used by the retrained network).
"""

from __future__ import annotations

import logging
import math
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
from nni_hwaware.strategies.gumbel.config import StagingConfig, TemperatureConfig
from nni_hwaware.strategies.gumbel.penalty import HardwarePenalty
from nni_hwaware.strategies.gumbel.staged import StagePlan
from nni_hwaware.strategies.gumbel.supernet import LabelMasks

__all__ = ["HardwareGumbelModule"]

Reporter = Callable[[dict[str, Any]], None]

_logger = logging.getLogger("nni_hwaware.gumbel")


def _report_to_nni(metric: dict[str, Any]) -> None:
    import nni

    nni.report_intermediate_result(metric)


def _loss_of(output: Any) -> torch.Tensor:
    return output["loss"] if isinstance(output, dict) else output


class HardwareGumbelModule(GumbelDartsLightningModule):
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
        self.report = report or _report_to_nni
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

    def _keep_logits(self, module: nn.Module, inputs: Any, output: Any) -> None:
        if self._capture and isinstance(output, torch.Tensor):
            self._captured = output.detach()

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

    def _logits(self) -> dict[str, torch.Tensor]:
        return {str(label): alpha.detach().clone() for label, alpha in self.masks.alphas.items()}

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
    def _diverged(self, batch_idx: int, update: str, what: str) -> HwAwareError:
        """The one-line error of a search whose loss or architecture parameters stopped being finite."""
        stage = self.plan.current.name if self.plan is not None and not self.plan.done else "?"
        if self._last_finite:
            epoch, step = self._last_finite_at
            last = (f"last finite losses (epoch {epoch}, step {step}): "
                    + ", ".join(f"{k}={v:.4g}" for k, v in self._last_finite.items()))
        else:
            last = "no finite loss before it"
        hparams = getattr(self.training_module, "hparams", {})
        lr = hparams.get("learning_rate") if hasattr(hparams, "get") else None
        c = self.hardware_penalty.config
        if self.hardware_penalty.has_targets and c.controller == "pi":  # the controller's gains move the weights
            weights = f"the targets' controller gains (penalty.dual_lr {c.dual_lr:g}, penalty.dual_gain {c.dual_gain:g})"
        elif self.hardware_penalty.has_targets:  # the projection solves the weights: the targets set them
            weights = (f"raise the targets (penalty.latency_target {c.latency_target}, "
                       f"memory_target {c.memory_target})")
        else:
            weights = f"the penalty weights (penalty.alpha {c.alpha:g}, penalty.gamma {c.gamma:g})"
        return HwAwareError(
            f"the search diverged at stage {stage} epoch {self.current_epoch} (step {batch_idx}, {update}): "
            f"{what}; {last}; lower the learning rates (search.lr{f' {lr:g}' if lr is not None else ''}, "
            f"search.arc_lr {self.arc_learning_rate:g}) or {weights}, or set search.gradient_clip, and start afresh "
            "(search.resume: false; a resumed search keeps its checkpoint's learning rates)")

    def _check_finite(self, batch_idx: int, update: str, values: dict[str, float]) -> None:
        """Raise :meth:`_diverged` if a value is NaN/inf, else remember them as the last finite losses."""
        bad = {k: v for k, v in values.items() if not math.isfinite(v)}
        if bad:
            terms = [k for k in bad if k != "total"] or ["total"]
            what = (f"the {terms[0]} became {bad[terms[0]]}" if len(terms) == 1
                    else "the " + " and ".join(f"{k} ({bad[k]})" for k in terms) + " became non-finite")
            raise self._diverged(batch_idx, update, what)
        self._last_finite.update(values)
        self._last_finite_at = (self.current_epoch, batch_idx)

    def _accumulate(self, **values: float) -> None:
        """Add to the epoch's running sums; each key is averaged over the steps that gave it."""
        for key, value in values.items():
            total, count = self._sums.get(key, (0.0, 0))
            self._sums[key] = (total + value, count + 1)

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

    def _count_correct(self, batch: Any) -> None:
        """Add the weight step's correct predictions to the epoch's training top-1 (no host sync); a batch
        that is not ``(inputs, class indices)`` or logits that are not ``(batch, classes)`` count nothing."""
        logits, self._captured = self._captured, None
        target = batch[1] if isinstance(batch, (list, tuple)) and len(batch) == 2 else None
        if (logits is None or not isinstance(target, torch.Tensor) or logits.dim() != 2 or target.dim() != 1
                or len(target) != len(logits) or target.is_floating_point()):
            return
        self._classes = int(logits.shape[1])
        correct = (logits.argmax(dim=1) == target).sum()
        self._train_counts += torch.stack([correct, torch.tensor(len(target), device=correct.device)]).to(
            self._train_counts)

    # -- per-epoch evaluation and reporting ----------------------------------------
    def on_validation_epoch_start(self) -> None:
        self._val = torch.zeros(3, device=self.device)

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        x, y = batch
        logits = self.training_module(x)
        top = logits.topk(min(3, logits.shape[1]), dim=1).indices
        self._val += torch.stack([(top[:, 0] == y).sum(), (top == y[:, None]).any(dim=1).sum(),
                                  torch.tensor(len(y), device=y.device)]).to(self._val)

    def on_validation_epoch_end(self) -> None:
        if self.trainer.sanity_checking:
            return
        self._end_epoch()

    def on_train_epoch_end(self) -> Any:
        if self._epoch_closed != self.current_epoch:  # no validation ran this epoch
            self._end_epoch()
        return super().on_train_epoch_end()

    def architecture(self) -> dict[str, Any]:
        """The most probable value of every label (what the search exports now)."""
        return self.masks.architecture()

    @torch.no_grad()
    def expected_costs(self) -> dict[str, float]:
        """Latency and memory expected under ``softmax(alpha)``, and predicted for the current argmax."""
        penalty = self.hardware_penalty
        latency, memory = penalty.expected_costs({label: self.masks.probabilities(label) for label in self.masks.labels})
        arch_latency, arch_memory = penalty.expected_costs(penalty._one_hot(self.architecture()))
        return {"expected_latency_ms": float(latency), "expected_memory_mb": float(memory),
                "arch_latency_ms": float(arch_latency), "arch_memory_mb": float(arch_memory)}

    def _end_epoch(self) -> None:
        plan = self.plan
        if plan is None or plan.done:
            return
        self._epoch_closed = self.current_epoch
        counts = self.trainer.strategy.reduce(self._val.clone(), reduce_op="sum")
        total = float(counts[2])
        val_top1 = float(counts[0]) / total if total else float("nan")
        val_top3 = float(counts[1]) / total if total else float("nan")
        means = {key: total / count for key, (total, count) in self._sums.items()}
        stage, stage_epoch, temperature = plan.current.name, plan.epoch_in_stage, plan.temperature_now()
        train = self.trainer.strategy.reduce(self._train_counts.clone(), reduce_op="sum")
        train_top1 = float(train[0]) / float(train[1]) if float(train[1]) else float("nan")
        penalty, ce = means.get("penalty"), means.get("ce")
        cost_share = (penalty / (penalty + ce) if plan.current.searches and penalty is not None and ce is not None
                      and penalty + ce > 0 else 0.0)
        cost_share = float(self.trainer.strategy.reduce(torch.tensor(cost_share, device=self.device),
                                                        reduce_op="mean"))
        collapsed = self._collapsed(train_top1, cost_share)
        loss = means.get("loss", float("nan"))
        decision = plan.stop(loss, "collapse") if collapsed else plan.end_epoch(loss)
        record: dict[str, Any] = {
            "default": val_top1, "val_top1": val_top1, "val_top3": val_top3,
            **self.expected_costs(), "stage": stage, "stage_epoch": stage_epoch, "epoch": self.current_epoch,
            "temperature": temperature, **means, "train_top1": train_top1, "cost_share": cost_share,
            "decision": decision, "arch": self.architecture(),
        }
        if collapsed:
            record["collapsed"] = True
            self._restore_last_good(stage, record, train_top1, cost_share)
        else:
            self._last_good = {"epoch": self.current_epoch, "logits": self._logits()}
            if math.isfinite(train_top1) and train_top1 > self._best_train[0]:
                self._best_train = (train_top1, self.current_epoch)
        if self.hardware_penalty.has_targets:  # the weights the targets set, this epoch's end
            latency_weight, memory_weight = self.hardware_penalty.weights.tolist()
            stage_latency, stage_memory = self.hardware_penalty.stage_targets.tolist()
            record.update(latency_weight=latency_weight, memory_weight=memory_weight,
                          stage_latency_target_ms=stage_latency, stage_memory_target_mb=stage_memory)
        self.history.append(record)
        numeric = {f"search/{k}": float(v) for k, v in record.items()
                   if isinstance(v, (int, float)) and not isinstance(v, bool) and k != "default"}
        self.log_dict(numeric)
        if self.trainer.is_global_zero:
            self.report({k: (v if not isinstance(v, dict) else _arch_text(v)) for k, v in record.items()})
        if decision in ("done", "stopped"):
            self.trainer.should_stop = True

    def collapse_threshold(self) -> float | None:
        """The training top-1 below which an epoch is near chance (None: unknown classes, or the guard is off)."""
        share = self.staging.collapse_accuracy
        if share is None:
            return 1.5 / self._classes if self._classes else None
        return share or None

    def _collapsed(self, train_top1: float, cost_share: float) -> bool:
        """Near chance now, above it in an earlier epoch, and the cost terms dominate the loss."""
        threshold = self.collapse_threshold()
        return (threshold is not None and math.isfinite(train_top1) and train_top1 < threshold
                and self._best_train[0] >= threshold and cost_share > self.staging.collapse_cost_share)

    @torch.no_grad()
    def _restore_last_good(self, stage: str, record: dict[str, Any], train_top1: float, cost_share: float) -> None:
        """Put back the architecture parameters of the last epoch that did not collapse; say so in one line."""
        good = self._last_good or {"epoch": -1, "logits": self._logits()}
        for label, alpha in self.masks.alphas.items():
            alpha.copy_(good["logits"][str(label)].to(alpha))
        restored = self.architecture()
        threshold = self.collapse_threshold()
        since = (f"the architecture of epoch {good['epoch']}, the last before it" if good["epoch"] >= 0
                 else "the starting architecture distribution (no epoch before it)")
        c = self.hardware_penalty.config
        lower = (f"raise the targets (penalty.latency_target {c.latency_target}, memory_target {c.memory_target})"
                 if self.hardware_penalty.has_targets else
                 f"lower the penalty weights (penalty.alpha {c.alpha:g}, penalty.gamma {c.gamma:g})")
        best, best_epoch = self._best_train
        line = (f"the search collapsed at stage {stage} epoch {self.current_epoch}: training top-1 fell to "
                f"{100 * train_top1:.1f} % (epoch {best_epoch}: {100 * best:.1f} %), near chance (below "
                f"{100 * threshold:.1f} %), while the cost terms are "
                f"{100 * cost_share:.0f} % of the loss; stopped, exporting {since}: {_arch_text(restored)}; "
                f"{lower} or warm the weights up first (stages.warmup_epochs)")
        self.collapse = {"stage": stage, "epoch": self.current_epoch, "train_top1": train_top1,
                         "best_train_top1": best, "best_epoch": best_epoch,
                         "threshold": threshold, "cost_share": cost_share, "restored_epoch": good["epoch"],
                         "collapsed_arch": record["arch"], "arch": restored, "line": line}
        record["collapse"] = line
        if self.trainer.is_global_zero:
            _logger.warning("%s", line)

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


def _arch_text(arch: dict[str, Any]) -> str:
    import json

    return json.dumps(arch, separators=(",", ":"))
