"""NNI evaluator for the multi-trial strategies: train the sampled network, report it with its costs.

``hardware_evaluator(space)`` is a ``FunctionalEvaluator`` whose arguments
are plain values (NNI serialises them into each trial): the network NNI froze
is trained on the space's data set, timed beside the space's reference network, and
reported as :func:`nni_hwaware.trial.run.trial_metrics` (``default`` = validation top-1,
the measured latency and memory, the cost model's predictions, FLOPs, params and the
echoed ``arch``).
``space`` is anything :func:`~nni_hwaware.spaces.resolve.resolve_space` takes as a
string (a registered name, ``nni:<hub space>``, ``module:callable``), with ``space_args``.
"""

from __future__ import annotations

from typing import Any

from nni.nas.evaluator import FunctionalEvaluator

__all__ = ["SampleEvaluator", "evaluate_network", "hardware_evaluator"]


class SampleEvaluator(FunctionalEvaluator):
    """A ``FunctionalEvaluator`` whose function also gets the sample NNI froze the network from.

    NNI gives a functional evaluator only the network; a network of an arbitrary
    space does not say which choices made it, and the costs need them.
    """

    def _execute(self, model: Any) -> Any:
        sample = getattr(model, "sample", None)
        return self.function(model.executable_model(), sample=dict(sample or {}), **self.arguments)


def evaluate_network(model: Any, space: str | Any, table: str | None = None, chip: str | None = None, backend: str = "torch",
                     batch_size: int = 1, train: dict[str, Any] | None = None,
                     space_args: dict[str, Any] | None = None, sample: dict[str, Any] | None = None) -> None:
    from pathlib import Path

    import nni
    import torch

    from nni_hwaware.cost_model import load_space_model
    from nni_hwaware.errors import HwAwareError
    from nni_hwaware.spaces.resolve import resolve_space
    from nni_hwaware.training.train import TrainConfig, train_network
    from nni_hwaware.trial.parameters import KEY, TrialParameters
    from nni_hwaware.trial.run import measure_then_train

    named = resolve_space(space, **(space_args or {}))
    sample = dict(sample or getattr(model, "arch", None) or {})
    arch = named.check_architecture({k: v for k, v in sample.items() if not k.startswith("_")})
    if KEY in sample:  # proposed by the PPO strategy: the costs, the reference and the budget came with it
        carried = TrialParameters.from_dict(sample)
    elif table is None or not Path(table).is_file():
        raise HwAwareError(f"cost table {table} does not exist here: profile the space first, or search with "
                           "PPOStrategy (its samples carry their costs)")
    else:
        model = load_space_model(named, table, chip=chip, backend=backend, batch_size=batch_size)
        carried = TrialParameters(arch=arch, space=named.name, costs=model.predict(arch).metrics(),
                                  reference=dict(named.baseline(model)))
    config = TrainConfig.from_dict(train or {})

    def trained() -> dict[str, float]:
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(config.seed)
            network = named.build(arch)  # weights from the seed, not the supernet's
        result = train_network(network, named.dataset, config, input_shape=named.input_shape,
                               on_epoch=lambda epoch, r: nni.report_intermediate_result(r["val_top1"]))
        return result.metrics()

    nni.report_final_result(measure_then_train(named, arch, carried, config.seed, trained))


def hardware_evaluator(space: str | Any, table: str | None = None, **options: Any) -> Any:
    """A :class:`SampleEvaluator` running :func:`evaluate_network` with these options.

    Samples proposed by :class:`~nni_hwaware.strategies.ppo.strategy.PPOStrategy` carry
    their predicted costs (:class:`~nni_hwaware.trial.parameters.TrialParameters`), so the
    trial reads no file and ``table`` is needed only for samples of other strategies.

    ``space`` is a string :func:`~nni_hwaware.spaces.resolve.resolve_space` takes (what NNI's
    training services can send to any machine), or, on the sequential engine, a
    ``NamedSpace`` object.
    """
    return SampleEvaluator(evaluate_network, space=space, table=table, **options)
