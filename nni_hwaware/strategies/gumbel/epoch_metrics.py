"""What the search measures and reports, mixed into :class:`~nni_hwaware.strategies.gumbel.module.HardwareGumbelModule`.

* during an epoch: the running means of the steps' losses (``loss``, ``ce``, ``penalty``,
  the sampled network's latency and memory, ``weight_loss``) and the training top-1 of the
  weight steps' batches (under the sampled masks), counted on the device without a host sync;
* after each epoch the most probable architecture is evaluated on the validation
  split, and the epoch's record (validation top-1/top-3, expected latency and
  memory under ``softmax(alpha)``, stage, temperature, loss, training top-1, the cost
  terms' share of the loss, the stage plan's decision) is reported to NNI as
  an intermediate result, logged to Lightning (``search/<key>``) and kept in ``history``.
  The record is also where the collapse guard
  (:class:`~nni_hwaware.strategies.gumbel.guards.SearchGuards`) is asked.

:class:`EpochMetrics` holds no state of its own: it reads and writes the module's
(``plan``, ``masks``, ``hardware_penalty``, ``report``, ``history``, the epoch's sums and
counts), set up in its ``__init__``.
"""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import nn

__all__ = ["EpochMetrics", "arch_text", "report_to_nni"]


def report_to_nni(metric: dict[str, Any]) -> None:
    """The default reporter of the epoch's record: NNI's intermediate result."""
    import nni

    nni.report_intermediate_result(metric)


def arch_text(arch: dict[str, Any]) -> str:
    """An architecture as compact JSON (how a record's ``arch`` is reported)."""
    import json

    return json.dumps(arch, separators=(",", ":"))


class EpochMetrics:
    """The per-step sums and the per-epoch record of :class:`~nni_hwaware.strategies.gumbel.module.HardwareGumbelModule`."""

    # -- during the epoch --------------------------------------------------------------
    def _keep_logits(self, module: nn.Module, inputs: Any, output: Any) -> None:
        """Forward hook of the training module: keep the weight step's logits, for the training top-1."""
        if self._capture and isinstance(output, torch.Tensor):
            self._captured = output.detach()

    def _accumulate(self, **values: float) -> None:
        """Add to the epoch's running sums; each key is averaged over the steps that gave it."""
        for key, value in values.items():
            total, count = self._sums.get(key, (0.0, 0))
            self._sums[key] = (total + value, count + 1)

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
        arch_latency, arch_memory = penalty.expected_costs(penalty.one_hot(self.architecture()))
        return {"expected_latency_ms": float(latency), "expected_memory_mb": float(memory),
                "arch_latency_ms": float(arch_latency), "arch_memory_mb": float(arch_memory)}

    def _end_epoch(self) -> None:
        """Close the epoch once: its record (asking the collapse guard), the stage plan's decision, the reports."""
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
            self.report({k: (v if not isinstance(v, dict) else arch_text(v)) for k, v in record.items()})
        if decision in ("done", "stopped"):
            self.trainer.should_stop = True
