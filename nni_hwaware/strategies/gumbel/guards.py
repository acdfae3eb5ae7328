"""The search's two guards, mixed into :class:`~nni_hwaware.strategies.gumbel.module.HardwareGumbelModule`.

* divergence: a non-finite loss (CE, a penalty term or their sum) or architecture parameter
  stops the search before the next update, with an :class:`~nni_hwaware.errors.HwAwareError`
  of one line: stage, epoch, step, the term that diverged, the last finite losses
  and what to change. Nothing is exported and no checkpoint of the diverged state
  is written (Lightning re-raises it unchanged);
* collapse: a searching stage that collapses -- an epoch whose training top-1 (the weight steps'
  batches, under the sampled masks) has fallen to near chance (below ``stages.collapse_accuracy``,
  by default 1.5 / the number of classes, after an earlier epoch above it; a network that
  has not learned yet has not collapsed) while the cost terms are more than
  ``stages.collapse_cost_share`` of the architecture loss -- stops the search with one
  warning line (logger ``nni_hwaware.gumbel``), recorded in the epoch's record, the stage
  log and :attr:`HardwareGumbelModule.collapse`; the architecture parameters go back to
  those of the last epoch that did not collapse, so the export is that distribution's
  network, not one that cannot learn.

:class:`SearchGuards` holds no state of its own: it reads and writes the module's
(``plan``, ``masks``, ``hardware_penalty``, ``staging``, the last finite losses, the last good
architecture parameters, the best training top-1, ``collapse``), set up in its ``__init__``.
"""

from __future__ import annotations

import logging
import math
from typing import Any

import torch

from nni_hwaware.errors import HwAwareError
from nni_hwaware.strategies.gumbel.epoch_metrics import arch_text

__all__ = ["SearchGuards"]

_logger = logging.getLogger("nni_hwaware.gumbel")


class SearchGuards:
    """The divergence and collapse guards of :class:`~nni_hwaware.strategies.gumbel.module.HardwareGumbelModule`."""

    # -- divergence ------------------------------------------------------------------
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

    # -- collapse ----------------------------------------------------------------------
    def _logits(self) -> dict[str, torch.Tensor]:
        """A copy of every label's architecture parameters (what a collapse restores)."""
        return {str(label): alpha.detach().clone() for label, alpha in self.masks.alphas.items()}

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
                f"{100 * cost_share:.0f} % of the loss; stopped, exporting {since}: {arch_text(restored)}; "
                f"{lower} or warm the weights up first (stages.warmup_epochs)")
        self.collapse = {"stage": stage, "epoch": self.current_epoch, "train_top1": train_top1,
                         "best_train_top1": best, "best_epoch": best_epoch,
                         "threshold": threshold, "cost_share": cost_share, "restored_epoch": good["epoch"],
                         "collapsed_arch": record["arch"], "arch": restored, "line": line}
        record["collapse"] = line
        if self.trainer.is_global_zero:
            _logger.warning("%s", line)
