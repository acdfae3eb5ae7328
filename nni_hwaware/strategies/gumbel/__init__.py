"""Hardware-penalised Gumbel-DARTS: staged one-shot search, export, retrain, report.

.. math::

    L = \\mathrm{CE} + \\alpha\\,\\mathrm{lat}(a)^{\\beta} + \\gamma\\,\\mathrm{mem}(a)^{\\delta},
    \\qquad \\mathrm{lat}(a) = \\sum_{ij} m_{ij}\\,\\mathrm{lat}_{ij},\\quad
    \\mathrm{mem}(a) = \\sum_{ij} m_{ij}\\,\\mathrm{mem}_{ij}

with ``m`` the Gumbel-softmax masks of the forward pass and the costs from the
chip's cost table, normalised by the baseline's. By default the weights are set by the
search so that the expected latency and memory land on targets (45 % and 51 % of the
baseline's, :data:`~nni_hwaware.strategies.gumbel.strategy_config.DEFAULT_TARGETS`);
``alpha`` / ``gamma`` alone give the fixed-weight form. From Python::

    strategy = HardwareGumbelDARTS(cost_model, penalty={"latency_target": "45%", "memory_target": "51%"})
    NasExperiment(BlockChoiceSpace(config.to_dict()), evaluator, strategy).run()
    arch = strategy.export_architecture()

or the whole job (search, export, retrain searched and baseline, report) with
:func:`run_pipeline` / ``nni-hwaware search gumbel --config gumbel.yml``.
Importing this package imports NNI's one-shot code and Lightning.

The modules, from the options up to the whole job:

* ``strategy_config`` -- the strategy's options: penalty, temperature, stages;
  ``job_config`` -- the job's (:class:`GumbelSearchConfig`, read from YAML), the supernet's
  training and the sweep;
* ``supernet`` -- one shared Gumbel mask per label; ``penalty`` -- the differentiable
  hardware terms of the loss; ``staged`` -- the stage plan;
* ``module`` -- the Lightning module (the loss, freezing, checkpoints), with
  ``epoch_metrics`` (its per-epoch record and reports) and ``guards`` (divergence, collapse);
* ``strategy`` -- the NNI strategy :class:`HardwareGumbelDARTS` and the export of an architecture
  within the targets;
* ``evaluator`` -- the Lightning evaluator of a search; ``search`` -- one search;
  ``outcome`` -- what it produced;
* ``export_check`` -- the export timed against the baseline on this machine; ``points`` --
  the searches of a run and the sweep; ``refit`` -- ``--refit``; ``pipeline`` -- the whole job;
  ``trial`` -- the job as one NNI trial.
"""

from __future__ import annotations

from nni_hwaware.strategies.gumbel.job_config import (
    CostConfig,
    GumbelSearchConfig,
    PenaltyConfig,
    SearchTrainingConfig,
    StagingConfig,
    SweepConfig,
    TemperatureConfig,
)
from nni_hwaware.strategies.gumbel.module import HardwareGumbelModule
from nni_hwaware.strategies.gumbel.outcome import SearchOutcome
from nni_hwaware.strategies.gumbel.penalty import HardwarePenalty
from nni_hwaware.strategies.gumbel.pipeline import load_space_cost_model, run_pipeline
from nni_hwaware.strategies.gumbel.search import search
from nni_hwaware.strategies.gumbel.staged import Stage, StagePlan
from nni_hwaware.strategies.gumbel.strategy import HardwareGumbelDARTS
from nni_hwaware.strategies.gumbel.supernet import GumbelMixedLayer, gumbel_softmax_sample

__all__ = [
    "CostConfig",
    "GumbelMixedLayer",
    "GumbelSearchConfig",
    "HardwareGumbelDARTS",
    "HardwareGumbelModule",
    "HardwarePenalty",
    "PenaltyConfig",
    "SearchOutcome",
    "SearchTrainingConfig",
    "Stage",
    "StagePlan",
    "StagingConfig",
    "SweepConfig",
    "TemperatureConfig",
    "gumbel_softmax_sample",
    "load_space_cost_model",
    "run_pipeline",
    "search",
]
