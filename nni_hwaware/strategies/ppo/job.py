"""One typed spec of a PPO search job, built and validated once, used by every entry point.

A :class:`PPOJob` says what to search (the space), against which costs (a cost table and the chip,
backend and batch size in it, or this machine profiled), under which budget, pruned how, with which
PPO options, how each trial trains and how the best network is retrained. The NNI Tuner
(``classArgs``), the NNI Strategy (Python) and ``nni-hwaware check-config`` all build it through
:meth:`PPOJob.from_dict`, so a misspelt key anywhere is one line naming the section and the allowed
keys, said before anything starts. Its sections of costs, budget and pruning are those the Gumbel
pipeline shares (:mod:`nni_hwaware.strategies.job`).

Kept free of torch at import: NNI's dispatcher builds the tuner, which builds this spec, within 10
seconds (see :mod:`nni_hwaware.nni_fixes`).
"""

from __future__ import annotations

import dataclasses
import logging
import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from nni_hwaware import checked_options as options
from nni_hwaware.errors import HwAwareError
from nni_hwaware.strategies.fidelity import fidelity_prior_margin
from nni_hwaware.strategies.job import BudgetSpec, CostConfig, PruneConfig, prune_model
from nni_hwaware.strategies.ppo import workdir
from nni_hwaware.strategies.ppo.config import PPOConfig
from nni_hwaware.training import TrainConfig

if TYPE_CHECKING:
    from nni_hwaware.cost_model import SpaceCostModel
    from nni_hwaware.spaces.resolve import NamedSpace
    from nni_hwaware.strategies.budget import Budget
    from nni_hwaware.zero_cost import ProxyScores

__all__ = ["PPOJob"]

_logger = logging.getLogger("nni_hwaware.ppo")


@dataclass(frozen=True)
class PPOJob:
    """A multi-trial search: the Tuner's ``classArgs``, the Strategy's arguments, ``check-config``'s view.

    Field by field (each section is validated by its own dataclass):
    """

    #: The space: a registered name or JSON file, ``nni:<hub space>`` or ``module:callable``;
    #: from Python also a ``ModelSpace`` or ``NamedSpace`` object.
    space: Any = "digits"
    #: Keyword arguments of the space (e.g. ``{width_mult: 0.25}`` for ``nni:ProxylessNAS``).
    space_args: dict[str, Any] = field(default_factory=dict)
    #: Cost table file (relative paths: the experiment's working directory); profiled when missing.
    table: str | None = None
    chip: str | None = None
    backend: str = "torch"
    batch_size: int = 1
    #: Where a missing table is profiled (``cpu``, ``cuda``, ...).
    device: str = "cpu"
    #: Seconds of timing rounds when a missing table is profiled (None: 0.25 s per leaf, 2 s to 2 min).
    profile_seconds: float | None = None
    #: e.g. ``{latency_ms: "60%", memory_mb: "60%"}`` of the reference network's predicted cost.
    budget: BudgetSpec = field(default_factory=BudgetSpec)
    #: Pruning before the search (``{mode: top-k, top: 4}``); ``mode: null`` searches everything.
    prune: PruneConfig = field(default_factory=PruneConfig)
    ppo: PPOConfig = field(default_factory=PPOConfig)
    #: How each search trial trains its network.
    train: TrainConfig = field(default_factory=lambda: TrainConfig(epochs=10, threads=1))
    #: Train networks a trial measures over the budget (False: the trial reports the measurement and
    #: stops, since the search counts such a network a failure whatever its accuracy).
    train_over_budget: bool = False
    #: Trainings of the search before the final retraining trial (None: search until NNI stops). Screening
    #: trials come on top of them, at most ``ppo.measurements_per_training`` measurements per training.
    search_trials: int | None = None
    #: Candidates a screening trial measures at once, in shared rounds with the reference network, before
    #: any is trained: only those measured to fit the budget get a training trial (``config.yml``: 8). 1 (the
    #: default, which a trial command of your own expects): no screening trials; each search trial measures
    #: its own network and trains it only if it fits. Either way a network measured over the budget costs
    #: a measurement, not a training.
    screen: int = 1
    #: How the final trial retrains the best network and the baseline (None: no retraining).
    retrain: TrainConfig | None = None
    #: Where the search state is saved after every event, for resuming (relative: the
    #: experiment's working directory); default ``<experiment dir>/hwaware/ppo_state.pt`` under NNI.
    state_file: str | None = None

    def __post_init__(self) -> None:
        if self.space is None:
            raise HwAwareError("the search job needs a space")
        if not isinstance(self.space_args, Mapping):
            raise HwAwareError(f"space_args must be a mapping of keyword arguments, got {self.space_args!r}")
        if self.search_trials is not None and (isinstance(self.search_trials, bool)
                                               or not isinstance(self.search_trials, int) or self.search_trials < 1):
            raise HwAwareError(f"search_trials must be an integer >= 1, got {self.search_trials!r}")
        if isinstance(self.screen, bool) or not isinstance(self.screen, int) or self.screen < 1:
            raise HwAwareError(f"screen must be an integer >= 1 (candidates a screening trial measures), "
                               f"got {self.screen!r}")
        if not isinstance(self.train_over_budget, bool):
            raise HwAwareError(f"train_over_budget must be true or false, got {self.train_over_budget!r}")
        if self.retrain is not None and self.search_trials is None:
            raise HwAwareError("retrain needs search_trials: the number of search trials before the final retraining")
        _ = self.cost  # validates table, batch_size, ...

    def max_measurements(self) -> int | None:
        """The most networks the search measures (``measurements_per_training`` a training; None: unbounded)."""
        if self.search_trials is None or not self.ppo.measure_first or self.train_over_budget:
            return None
        return math.floor(self.ppo.measurements_per_training * self.search_trials)

    def max_trials(self) -> int | None:
        """The most trials the experiment can need (``maxTrialNumber``), the retraining included: with
        screening trials, every training and every screening trial (at one candidate each, the worst
        case); else one trial per measurement (a network measured over the budget ends its trial
        untrained). None without ``search_trials``."""
        if self.search_trials is None:
            return None
        measurements = self.max_measurements() or self.search_trials
        searching = self.search_trials + measurements if self.screens else measurements
        return searching + (self.retrain is not None)

    @property
    def screens(self) -> bool:
        """Whether candidates are measured by screening trials (else each trial measures its own network)."""
        return self.screen > 1 and not self.train_over_budget and self.ppo.measure_first

    @property
    def cost(self) -> CostConfig:
        return CostConfig(table=self.table, chip=self.chip, backend=self.backend, batch_size=self.batch_size,
                          device=self.device, profile_seconds=self.profile_seconds)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any] | PPOJob | None, where: str = "search job") -> PPOJob:
        """The job from ``classArgs`` / YAML / keyword arguments; one line per mistake, naming the section."""
        sections: dict[str, Any] = {
            "budget": lambda v: options.from_mapping(BudgetSpec, v, "budget keys"),
            "prune": lambda v: options.from_mapping(PruneConfig, v, "prune options"),
            "ppo": PPOConfig.from_dict,
            "train": lambda v: TrainConfig.from_dict({"epochs": 10, "threads": 1, **(v or {})}),
            "retrain": lambda v: None if v is None else TrainConfig.from_dict(v),
        }
        return options.from_mapping(cls, data, f"{where} keys", nested=sections.get)

    def to_dict(self) -> dict[str, Any]:
        """Plain data (the space must be named by a string)."""
        data = asdict(self)
        data["budget"] = self.budget.to_dict()
        data["prune"] = {**asdict(self.prune), "keep": list(self.prune.keep)}
        return data

    # -- what the search needs ------------------------------------------------------
    def named(self) -> NamedSpace:
        """The space, resolved (building spaces needs torch)."""
        from nni_hwaware.spaces.resolve import resolve_space

        return resolve_space(self.space, **self.space_args)

    def search_model(self, named: NamedSpace, full: SpaceCostModel,
                     allowed: Mapping[str, Sequence[Any]] | None = None
                     ) -> tuple[SpaceCostModel, Budget, dict[str, Any]]:
        """The cost model the search masks with (restricted to ``allowed`` values, pruned as asked),
        the budget, and the reference network (percentages of the budget are of its cost under ``full``)."""
        model = full.restrict(allowed) if allowed is not None else full
        reference = named.baseline(full)
        pruned = prune_model(model, self.prune, reference)
        if pruned is not None:
            model = pruned.model
        budget = self.budget.resolve(full.predict(reference).metrics())
        return model, budget, reference

    def search_config(self, output_dir: Path) -> PPOConfig:
        """The job's PPO options; without a prior margin of the user's, the one of the table's own
        fidelity figures (``nni-hwaware validate`` saved them beside it)."""
        config = self.ppo
        if config.correct and config.prior_margin == 1.0:
            table = self.cost.table or output_dir / "cost_table.csv"
            margin = fidelity_prior_margin(table)
            if margin is not None:
                _logger.info("prior margin %.3f from the fidelity figures of %s", margin, table)
                config = dataclasses.replace(config, prior_margin=margin)
        return config

    def proxy_scores(self, config: PPOConfig, named: NamedSpace, reference: Mapping[str, Any],
                     own: Path | None) -> ProxyScores | None:
        """The zero-cost proxy's scores of the space's networks, on the replica ``proxy_space_args`` names
        (None with ``proxy: none``, or where no surrogate trend would use them), with the scores read from
        ``proxy_scores`` and from ``own`` (this search's file, before a resume) where it exists."""
        if config.proxy == "none" or not config.trend or config.surrogate != "gp":
            return None
        from nni_hwaware.zero_cost import ProxyScores

        replica = named
        if config.proxy_space_args:
            from nni_hwaware.spaces.resolve import resolve_space

            if named.factory is None or named.config is not None:
                raise HwAwareError(f"PPO option proxy_space_args needs a space built from its name with arguments "
                                   f"(nni:<hub space> or module:callable); {named.name!r} is not")
            replica = resolve_space(named.name, **{**named.kwargs, **dict(config.proxy_space_args)},
                                    input_shape=named.input_shape)
            if (missing := [label for label, values in named.choices().items()
                            if [str(v) for v in replica.choices().get(label, [])] != [str(v) for v in values]]):
                raise HwAwareError(f"PPO option proxy_space_args: the replica does not offer the space's choices "
                                   f"{missing[:3]}; give arguments that keep every label and value")
        proxy = ProxyScores(replica, config.proxy, input_shape=config.proxy_input_shape)
        proxy.prepare(reference)  # the proxies this space's networks can feed, before reading any scores
        if config.proxy_scores:  # scored before, by another search
            path = workdir.resolve(config.proxy_scores)
            if not path.is_file():
                raise HwAwareError(f"PPO option proxy_scores: no file {path}; give a {workdir.PROXY_SCORES} "
                                   "a search wrote")
            _logger.info("read %d zero-cost proxy scores from %s", proxy.load(path), path)
        if own is not None and own.is_file():  # this search's own, before a resume
            try:
                _logger.info("read %d zero-cost proxy scores from %s", proxy.load(own), own)
            except HwAwareError as err:  # an earlier search's, of another replica: scored afresh
                _logger.warning("%s", err)
        proxy.check(reference)  # a replica that cannot score fails here, in one line, not mid-search
        return proxy
