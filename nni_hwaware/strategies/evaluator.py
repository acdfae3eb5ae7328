"""NNI evaluator for the multi-trial strategies: train the sampled network, report it with its costs.

``hardware_evaluator(space, table)`` is a ``FunctionalEvaluator`` whose arguments
are plain values (NNI serialises them into each trial): the network NNI froze
is trained on the space's data set and reported as
:func:`nni_hwaware.trial.run.trial_metrics` (``default`` = validation top-1,
plus the cost table's latency, memory, FLOPs, params and the echoed ``arch``).
"""

from __future__ import annotations

from typing import Any

__all__ = ["evaluate_network", "hardware_evaluator"]


def evaluate_network(model: Any, space: str, table: str, chip: str | None = None, backend: str = "torch",
                     batch_size: int = 1, train: dict[str, Any] | None = None) -> None:
    import nni

    from nni_hwaware.cost_table import CostModel, CostTable
    from nni_hwaware.spaces import get_space_config
    from nni_hwaware.trial.run import trial_metrics
    from nni_hwaware.trial.train import TrainConfig, train_network

    config = get_space_config(space)
    arch = getattr(model, "arch", None)
    if arch is None:
        raise TypeError("the evaluator needs a network frozen from a BlockChoiceSpace")
    costs = CostModel(CostTable.load(table), config, chip=chip, backend=backend,
                      batch_size=batch_size).predict(arch).metrics()
    result = train_network(model, config.dataset, TrainConfig.from_dict(train or {}),
                           on_epoch=lambda epoch, r: nni.report_intermediate_result(r["val_top1"]))
    nni.report_final_result(trial_metrics(arch, result.metrics(), costs))


def hardware_evaluator(space: str, table: str, **options: Any) -> Any:
    """A ``FunctionalEvaluator`` running :func:`evaluate_network` with these options."""
    from nni.nas.evaluator import FunctionalEvaluator

    return FunctionalEvaluator(evaluate_network, space=space, table=table, **options)
