"""One typed spec of a search job, built and validated once, used by every entry point.

A :class:`SearchJob` says what to search (the space), against which costs (a cost
table and the chip, backend and batch size in it, or this machine profiled),
under which budget, pruned how, with which PPO options, how each trial trains and
how the best network is retrained. The NNI Tuner (``classArgs``), the NNI
Strategy (Python), ``nni-hwaware check-config`` and the Gumbel pipeline (its
``cost`` and ``prune`` sections) all build it through :meth:`SearchJob.from_dict`,
so a misspelt key anywhere is one line naming the section and the allowed keys,
said before anything starts.

Kept free of torch at import: NNI's dispatcher builds the tuner, which builds
this spec, within 10 seconds (see :mod:`nni_hwaware.nni_fixes`).

The work shared by the searches also lives here: :func:`load_cost_model` (a table
file, or the space profiled on this machine once) and :func:`prune_model`
(seed 001 step 4), and :meth:`BudgetSpec.resolve` (``"60%"`` of the reference
network's predicted cost).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from nni_hwaware import checked_options as options
from nni_hwaware.errors import HwAwareError
from nni_hwaware.strategies.ppo.config import PPOConfig
from nni_hwaware.training import TrainConfig

if TYPE_CHECKING:
    from nni_hwaware.cost_model import SpaceCostModel
    from nni_hwaware.pruning.choices import ChoicePruneResult
    from nni_hwaware.spaces.resolve import NamedSpace
    from nni_hwaware.strategies.budget import Budget

__all__ = ["BudgetSpec", "CostConfig", "PruneConfig", "SearchJob", "budget_fraction", "load_cost_model",
           "prune_model"]

_BUDGET_KEYS = ("latency_ms", "memory_mb", "flops")


def budget_fraction(text: str, name: str) -> float:
    """``"45%"`` -> 0.45; anything else is an error naming ``name``."""
    stripped = text.strip()
    try:
        fraction = float(stripped[:-1]) / 100 if stripped.endswith("%") else float("nan")
    except ValueError:
        fraction = float("nan")
    if not (math.isfinite(fraction) and fraction > 0):
        raise HwAwareError(f"{name} must be a positive number or a percentage of the baseline like '50%', got {text!r}")
    return fraction


@dataclass(frozen=True)
class BudgetSpec:
    """Upper bounds on latency (ms), memory (MB) and FLOPs: numbers, or ``"N%"`` of the reference
    network's predicted cost; ``None`` leaves a cost free (seed 000 step 2)."""

    latency_ms: float | str | None = None
    memory_mb: float | str | None = None
    flops: float | str | None = None

    def __post_init__(self) -> None:
        for name in _BUDGET_KEYS:
            value = getattr(self, name)
            if isinstance(value, str):
                budget_fraction(value, f"budget {name}")
            elif value is not None and (isinstance(value, bool) or not isinstance(value, (int, float))
                                        or not (math.isfinite(value) and value > 0)):
                raise HwAwareError(f"budget {name} must be a positive number or a percentage like '60%', "
                                   f"got {value!r}")

    def resolve(self, reference: Mapping[str, float]) -> Budget:
        """The :class:`~nni_hwaware.strategies.budget.Budget` in ms / MB / FLOPs, percentages taken of
        ``reference`` (the reference network's predicted costs)."""
        from nni_hwaware.strategies.budget import Budget

        values = {}
        for name in _BUDGET_KEYS:
            value = getattr(self, name)
            if isinstance(value, str):
                values[name] = budget_fraction(value, f"budget {name}") * float(reference[name])
            elif value is not None:
                values[name] = float(value)
        return Budget(**values)

    def to_dict(self) -> dict[str, float | str]:
        return {k: v for k, v in asdict(self).items() if v is not None}


@dataclass(frozen=True)
class CostConfig:
    """Where the costs come from: a cost table file and the chip, backend and batch size in it."""

    #: Cost table file (``nni-hwaware profile``, or a per-choice table); None profiles the
    #: space on this machine first (written to the job's output directory).
    table: str | None = None
    chip: str | None = None
    backend: str = "torch"
    batch_size: int = 1
    #: Where a missing table is profiled: ``cpu``, ``cuda``, ...
    device: str = "cpu"
    #: Threads for profiling (when ``table`` is None) and for measuring the retrained networks.
    threads: int | None = 1
    #: Timing runs per retrained network (its latency is their median).
    repeats: int = 3
    #: Alternating timing rounds of a found network and the baseline (A B, B A, ...): their
    #: latency ratio and its 95 % interval (:func:`nni_hwaware.training.compare_with_baseline`).
    rounds: int = 10
    #: Seconds of timing rounds when a missing table is profiled, like ``nni-hwaware profile
    #: --time-budget`` (None: 0.25 s per leaf, within 2 s to 2 minutes).
    profile_seconds: float | None = None

    def __post_init__(self) -> None:
        if isinstance(self.repeats, bool) or not isinstance(self.repeats, int) or self.repeats < 1:
            raise HwAwareError(f"cost repeats must be an integer >= 1, got {self.repeats!r}")
        if isinstance(self.rounds, bool) or not isinstance(self.rounds, int) or self.rounds < 2:
            raise HwAwareError(f"cost rounds must be an integer >= 2, got {self.rounds!r}")
        if self.threads is not None and (not isinstance(self.threads, int) or self.threads < 1):
            raise HwAwareError(f"cost threads must be an integer >= 1 (or null), got {self.threads!r}")
        if isinstance(self.batch_size, bool) or not isinstance(self.batch_size, int) or self.batch_size < 1:
            raise HwAwareError(f"cost batch_size must be an integer >= 1, got {self.batch_size!r}")
        if self.table is not None and not isinstance(self.table, str):
            raise HwAwareError(f"cost table must be a file name, got {self.table!r}")
        if self.profile_seconds is not None and (isinstance(self.profile_seconds, bool)
                                                 or not isinstance(self.profile_seconds, (int, float))
                                                 or not math.isfinite(self.profile_seconds)
                                                 or self.profile_seconds <= 0):
            raise HwAwareError(f"profile_seconds must be a positive number of seconds (or null), "
                               f"got {self.profile_seconds!r}")


@dataclass(frozen=True)
class PruneConfig:
    """Seed 001 step 4 before the search: keep the (label, value) choices scoring ``S = k*U*P``
    above a threshold.

    ``mode`` is one of :data:`nni_hwaware.pruning.MODES` (None: search the whole
    space). The values in ``keep`` and the reference network's values always stay.
    """

    mode: str | None = None
    k: float = 1.0
    threshold: float | None = None
    top: int | None = None
    keep: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        from nni_hwaware.pruning import MODES

        if self.mode is not None and self.mode not in MODES:
            raise HwAwareError(f"prune mode must be one of {', '.join(MODES)} (or null), got {self.mode!r}")
        if isinstance(self.keep, str):
            object.__setattr__(self, "keep", (self.keep,))
        if self.mode == "top-k" and (not isinstance(self.top, int) or self.top < 1):
            raise HwAwareError(f"prune mode top-k needs top: an integer >= 1, got {self.top!r}")
        if self.mode == "value" and not isinstance(self.threshold, (int, float)):
            raise HwAwareError("prune mode value needs threshold: a number")
        if not (isinstance(self.k, (int, float)) and math.isfinite(self.k) and self.k > 0):
            raise HwAwareError(f"prune k must be a positive number, got {self.k!r}")


def load_cost_model(named: NamedSpace, cost: CostConfig, default_table: str | Path, *,
                    seed: int = 0) -> SpaceCostModel:
    """The whole space's cost model: from ``cost.table`` (a cost table or a per-choice table), or the
    space profiled on this machine into ``default_table`` when there is none (once; later runs load it)."""
    from nni_hwaware.cost_model import load_space_model

    table = Path(cost.table) if cost.table else Path(default_table)
    return load_space_model(named, table, chip=cost.chip, backend=cost.backend, batch_size=cost.batch_size,
                            device=cost.device, threads=cost.threads, seed=seed, max_seconds=cost.profile_seconds)


def prune_model(model: SpaceCostModel, prune: PruneConfig, reference: Mapping[str, Any]
                ) -> ChoicePruneResult | None:
    """``model`` pruned by ``S = k*U*P`` as ``prune`` says (None when ``prune.mode`` is None); the
    reference network's values and ``prune.keep`` always stay."""
    if prune.mode is None:
        return None
    from nni_hwaware.pruning import prune_choices

    return prune_choices(model, mode=prune.mode, k=prune.k, threshold=prune.threshold, top=prune.top,
                         always_keep=(*prune.keep, *reference.values()))


@dataclass(frozen=True)
class SearchJob:
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
    def from_dict(cls, data: Mapping[str, Any] | SearchJob | None, where: str = "search job") -> SearchJob:
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
