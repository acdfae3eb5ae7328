"""NNI's own RL searchers on the search-efficiency suites, where their extra packages are installed.

* ``policy_based_rl``: :class:`nni.nas.strategy.PolicyBasedRL` (tianshou 0.4.11 and
  gym 0.26.2: ``pip install 'nni-hwaware[baselines]'``), through NasExperiment on
  NNI's sequential engine over a space of one ``LayerChoice`` per label.
* ``nni_ppo``: NNI's built-in HPO :class:`nni.algorithms.hpo.ppo_tuner.PPOTuner`
  (TensorFlow's v1 compatibility API with Keras 2, and gym: ``pip install
  tensorflow-cpu tf-keras gym==0.26.2``), on ``layer_choice`` search spaces, through the Tuner calls.

Both need packages that conflict with each other (and pull their own torch or
TensorFlow), so each is best run from an environment of its own, with
``search_efficiency.py --strategies <name> --out FILE`` and the figures merged
into the full run with ``--merge FILE``.
"""

from __future__ import annotations

import importlib.util
import tempfile
import time
from collections.abc import Callable
from typing import Any

import nni
import numpy as np

__all__ = ["missing", "nni_ppo_tuner", "run_policy_based_rl"]

INSTALL = {
    "policy_based_rl": ("tianshou", "pip install 'tianshou==0.4.11' 'gym==0.26.2' (an environment of its own)"),
    "nni_ppo": ("tf_keras", "pip install tensorflow-cpu tf-keras 'gym==0.26.2' (an environment of its own)"),
}


def missing(name: str) -> str | None:
    """Why strategy ``name`` cannot run in this environment, or None."""
    if name not in INSTALL:
        return None
    needed = [INSTALL[name][0], "gym"]
    absent = [m for m in needed if importlib.util.find_spec(m) is None]
    return f"{', '.join(absent)} not installed: {INSTALL[name][1]}" if absent else None


def nni_ppo_tuner(seed: int) -> Any:
    """NNI's HPO PPOTuner with its defaults (20 trials per update), seeded."""
    import os
    import random

    os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")  # tf.layers of TF 1 need Keras 2 (tf-keras)
    import tensorflow.compat.v1 as tf
    from nni.algorithms.hpo.ppo_tuner import PPOTuner

    random.seed(seed)
    np.random.seed(seed)
    tf.set_random_seed(seed)
    return PPOTuner(optimize_mode="maximize")


def run_policy_based_rl(suite: Any, seed: int, max_trials: int, summarise: Callable[..., dict[str, Any]],
                        judge: str = "measured") -> dict[str, Any]:
    """PolicyBasedRL through NasExperiment (sequential engine), each trial a table look-up
    (``judge``: feasible as measured or by the model)."""
    feasible = suite.feasible_measured if judge == "measured" else suite.feasible
    import torch
    from nni.nas.evaluator import FunctionalEvaluator
    from nni.nas.experiment import NasExperiment, NasExperimentConfig
    from nni.nas.nn.pytorch import LayerChoice, ModelSpace
    from nni.nas.space.frozen import current_model, model_context
    from nni.nas.strategy import PolicyBasedRL

    class ChoiceSpace(ModelSpace):
        """One labelled LayerChoice per label of the suite (the network itself is never run)."""

        def __init__(self, choices: dict[str, list[str]]) -> None:
            super().__init__()
            self.choices = choices
            sample = current_model()
            self.arch = None if sample is None else {k: sample[k] for k in choices}
            for label, values in choices.items():
                names = values if sample is None else [sample[label]]
                setattr(self, f"m_{label}", LayerChoice({v: torch.nn.Identity() for v in names}, label=label))

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x

        def freeze(self, sample: dict[str, Any]) -> ChoiceSpace:
            with model_context(sample):
                return ChoiceSpace(self.choices)

    sequence: list[int] = []
    labels = suite.labels

    def evaluate(model: Any) -> None:
        row = suite.rows[tuple(str(model.arch[k]) for k in labels)]
        sequence.append(row)
        nni.report_final_result(float(suite.accuracy[row]) if feasible[row] else 0.0)

    import nni.nas.strategy.base as strategy_base

    # The strategy polls for a free worker once a second; a table look-up needs no wait (no decision changes).
    strategy_base.time = _FastClock()  # type: ignore[attr-defined]
    torch.manual_seed(seed)  # PolicyBasedRL draws from the global generators
    np.random.seed(seed)
    experiment = NasExperiment(ChoiceSpace(suite.choices), FunctionalEvaluator(evaluate),
                               PolicyBasedRL(max_collect=max_trials, trial_per_collect=4),
                               NasExperimentConfig("sequential", "raw"))
    experiment.config.max_trial_number = max_trials
    with tempfile.TemporaryDirectory() as tmp:
        experiment.config.experiment_working_directory = tmp
        start = time.perf_counter()
        try:
            experiment.run()
        finally:
            experiment.stop()
    return summarise(sequence, suite, max_trials, time.perf_counter() - start, 0.0)


class _FastClock:
    """``time`` for NNI's strategy loop with its one-second poll shortened to 10 ms."""

    def __getattr__(self, name: str) -> Any:
        return getattr(time, name)

    @staticmethod
    def sleep(seconds: float) -> None:
        time.sleep(min(seconds, 0.01))
