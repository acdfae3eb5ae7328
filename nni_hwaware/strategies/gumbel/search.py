"""One search: the supernet of a space trained by the hardware Gumbel-DARTS strategy, its architecture exported.

:func:`search` trains the supernet with
:class:`~nni_hwaware.strategies.gumbel.strategy.HardwareGumbelDARTS` on NNI's sequential
engine with a Lightning ``Classification`` evaluator
(:func:`~nni_hwaware.strategies.gumbel.evaluator.gumbel_evaluator`: training batches for the
weights, validation batches for the architecture), Lightning checkpoints in
``<out>/checkpoints`` (an interrupted search resumes there, loading them with
``torch.load(weights_only=True)``), the exported architecture in ``<out>/arch.json`` and the
epochs' records in ``<out>/history.json``; a search that diverges (NaN/inf loss) stops with an
error and exports nothing; one that collapses (training accuracy near chance while the cost
terms dominate the loss) stops with one line and exports the last architecture before the
collapse (``SearchOutcome.collapse``).

The whole job around it (cost model, export check, retraining, sweep, report) is
:func:`~nni_hwaware.strategies.gumbel.pipeline.run_pipeline`.
"""

from __future__ import annotations

import pickle
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch

from nni_hwaware.cost_model import SpaceCostModel
from nni_hwaware.errors import HwAwareError
from nni_hwaware.files import write_json
from nni_hwaware.profiling import fixed_threads
from nni_hwaware.spaces.skeleton import SpaceConfig
from nni_hwaware.strategies.gumbel.evaluator import gumbel_evaluator
from nni_hwaware.strategies.gumbel.job_config import GumbelSearchConfig
from nni_hwaware.strategies.gumbel.outcome import SearchOutcome

__all__ = ["search"]


def search(config: GumbelSearchConfig, space: SpaceConfig | Any, cost_model: SpaceCostModel, out: Path, *,
           report: Callable[[dict[str, Any]], None] | None = None, callbacks: Sequence[Any] = ()) -> SearchOutcome:
    """Run one search into ``out`` and export its architecture to ``out/arch.json``.

    ``space`` is a :class:`SpaceConfig` or a :class:`~nni_hwaware.spaces.resolve.NamedSpace`
    (any NNI model space) and ``cost_model`` its cost model. ``report`` receives each
    epoch's record (default: NNI's intermediate result); ``callbacks`` are extra
    Lightning callbacks.
    """
    from nni.nas.execution import SequentialExecutionEngine
    from nni.nas.space import RawFormatModelSpace

    from nni_hwaware.spaces.io import save_architecture
    from nni_hwaware.spaces.resolve import resolve_space
    from nni_hwaware.strategies.gumbel.staged import StagePlan
    from nni_hwaware.strategies.gumbel.strategy import HardwareGumbelDARTS

    out.mkdir(parents=True, exist_ok=True)
    if isinstance(space, SpaceConfig):
        space = resolve_space(space)  # the project's spaces are ModelSpaces like any other
    labels = list(cost_model.labels)
    max_epochs = StagePlan(labels, config.stages, config.temperature).max_total_epochs()
    start = time.perf_counter()
    # The whole search draws from torch's global generators seeded here, and gives the caller's back after
    # (the CPU's and each GPU's): the same seed takes the same path whatever ran before in the process.
    gpus = list(range(torch.cuda.device_count())) if torch.cuda.is_available() else []
    with fixed_threads(config.search.threads), torch.random.fork_rng(devices=gpus):
        torch.manual_seed(config.seed)  # the supernet's initial weights, then what training draws
        supernet = space.supernet()
        evaluator = gumbel_evaluator(config, space, max_epochs, out, callbacks)
        checkpoint = out / "checkpoints" / "last.ckpt"
        resume = config.search.checkpoint and config.search.resume and checkpoint.is_file()
        if resume:
            # Tensors and plain types only: a file planted there cannot run code when loaded.
            evaluator.fit_kwargs.update(ckpt_path=str(checkpoint), weights_only=True)
        strategy = HardwareGumbelDARTS(
            cost_model, penalty=config.penalty, temperature=config.temperature, staging=config.stages,
            arc_learning_rate=config.search.arc_lr, arc_weight_decay=config.search.arc_weight_decay,
            gradient_clip_val=config.search.gradient_clip, arc_every=config.search.arc_every,
            baseline_bias=config.search.baseline_bias,
            seed=config.seed, report=report,
            reference=space.baseline(cost_model))
        try:
            strategy(RawFormatModelSpace(supernet, evaluator), SequentialExecutionEngine())
        except pickle.UnpicklingError as err:
            if not resume:
                raise
            why = next((line.strip() for line in str(err).splitlines() if "Unsupported" in line), "refused")
            raise HwAwareError(
                f"{checkpoint} holds more than tensors and plain values, so it is not loaded "
                f"(torch.load weights_only=True: {why.split(' Please use')[0][:160]}); a search of this "
                "version did not write it: delete it or set search.resume: false") from None
    seconds = time.perf_counter() - start
    arch = strategy.export_architecture()
    module = strategy.module
    outcome = SearchOutcome(arch=arch, probabilities=strategy.probabilities(), history=module.history,
                            search_seconds=seconds, alpha=config.penalty.alpha, arch_path=out / "arch.json",
                            stage_log=list(module.plan.log) if module.plan else [], collapse=module.collapse)
    if module.trainer.is_global_zero:
        aims = {k: getattr(config.penalty, k) for k in ("latency_target", "memory_target")
                if getattr(config.penalty, k) is not None}
        save_architecture(outcome.arch_path, arch, space, alpha=config.penalty.alpha, **aims,
                          probabilities=outcome.probabilities, search_seconds=seconds, chip=cost_model.chip)
        write_json(out / "history.json", {"history": module.history, "stages": outcome.stage_log,
                                          "collapse": outcome.collapse})
    return outcome
