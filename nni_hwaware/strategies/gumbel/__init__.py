"""Hardware-penalised Gumbel-DARTS (seed 001): staged one-shot search, export, retrain, report.

.. math::

    L = \\mathrm{CE} + \\alpha\\,\\mathrm{lat}(a)^{\\beta} + \\gamma\\,\\mathrm{mem}(a)^{\\delta},
    \\qquad \\mathrm{lat}(a) = \\sum_{ij} m_{ij}\\,\\mathrm{lat}_{ij},\\quad
    \\mathrm{mem}(a) = \\sum_{ij} m_{ij}\\,\\mathrm{mem}_{ij}

with ``m`` the Gumbel-softmax masks of the forward pass and the costs from the
chip's cost table, normalised by the baseline's. By default the weights are set by the
search so that the expected latency and memory land on targets (seed 001's: 45 % and
51 % of the baseline's); ``alpha`` / ``gamma`` alone give the fixed-weight form. From Python::

    strategy = HardwareGumbelDARTS(cost_model, penalty={"latency_target": "45%", "memory_target": "51%"})
    NasExperiment(BlockChoiceSpace(config.to_dict()), evaluator, strategy).run()
    arch = strategy.export_architecture()

or the whole job (search, export, retrain searched and baseline, report) with
:func:`run_pipeline` / ``nni-hwaware search gumbel --config gumbel.yml``.
Importing this package imports NNI's one-shot code and Lightning.
"""

from __future__ import annotations

from nni_hwaware.strategies.gumbel.config import (
    CostConfig,
    GumbelSearchConfig,
    PenaltyConfig,
    SearchTrainingConfig,
    StagingConfig,
    SweepConfig,
    TemperatureConfig,
)
from nni_hwaware.strategies.gumbel.module import HardwareGumbelModule
from nni_hwaware.strategies.gumbel.penalty import HardwarePenalty
from nni_hwaware.strategies.gumbel.search import (
    SearchOutcome,
    load_space_cost_model,
    run_pipeline,
    search,
)
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
