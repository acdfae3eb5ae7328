"""Typed options of the hardware-penalised Gumbel-DARTS search, validated at construction.

Configuration flows one way: YAML (``nni-hwaware search gumbel --config``) or a
Python dict -> :meth:`GumbelSearchConfig.from_dict` -> these frozen dataclasses
-> the code. Unknown keys are rejected with the list of allowed ones; a bad value
raises :class:`~nni_hwaware.errors.HwAwareError` saying what to change.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from nni_hwaware import checked_options as options
from nni_hwaware.errors import HwAwareError
from nni_hwaware.strategies.job import CostConfig, PruneConfig, budget_fraction
from nni_hwaware.training import TrainConfig

__all__ = [
    "DEFAULT_TARGETS",
    "CostConfig",
    "GumbelSearchConfig",
    "PenaltyConfig",
    "PruneConfig",
    "SearchTrainingConfig",
    "StagingConfig",
    "SweepConfig",
    "TemperatureConfig",
    "from_mapping",
]

T = TypeVar("T")

#: The targets a penalty gets when it names no weight, target or budget: seed 001's
#: latency -55 % and memory -49 % against the baseline (ResNet50 on the project's spaces).
DEFAULT_TARGETS: dict[str, str] = {"latency_target": "45%", "memory_target": "51%"}


def _finite(name: str, value: float, *, positive: bool = False, nonnegative: bool = False) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise HwAwareError(f"{name} must be a finite number, got {value!r}")
    if positive and not value > 0:
        raise HwAwareError(f"{name} must be > 0, got {value}")
    if nonnegative and value < 0:
        raise HwAwareError(f"{name} must be >= 0, got {value}")


def from_mapping(cls: type[T], data: Mapping[str, Any] | None, where: str) -> T:
    """Build dataclass ``cls`` from the YAML section ``where``; nested sections recursively."""
    if cls is TrainConfig:
        return TrainConfig.from_dict(dict(data or {}))  # type: ignore[return-value]

    def nested(name: str) -> Any:
        inner = _NESTED.get((cls.__name__, name))
        if inner is None:
            return None
        return lambda value: from_mapping(inner, value, name if cls is GumbelSearchConfig else f"{where}.{name}")

    return options.from_mapping(cls, data, f"{where} options", nested=nested)


@dataclass(frozen=True)
class PenaltyConfig:
    """The hardware terms of the search loss (seed 001 step 6).

    .. math::

        L = \\mathrm{CE} + \\alpha\\,\\widehat{\\mathrm{lat}}(a)^{\\beta}
              + \\gamma\\,\\widehat{\\mathrm{mem}}(a)^{\\delta}

    with the costs normalised (``normalise``) so that ``alpha`` and ``gamma`` mean
    the same in every space: by default relative to the baseline architecture, so
    ``alpha = 1`` weighs the baseline's latency as one nat of cross entropy.

    Which form a term takes follows from what is given. Targets (``latency_target`` /
    ``memory_target``): the search sets the term's weight itself, and ``alpha`` /
    ``gamma`` are only where that weight starts. Budgets: the weight times the excess over
    the budget. Otherwise the fixed-weight form above. A penalty that names no weight, no
    target and no budget gets seed 001's targets, :data:`DEFAULT_TARGETS` (latency 45 %
    and memory 51 % of the baseline's); give ``alpha`` / ``gamma`` alone for fixed weights.
    """

    #: Weight of the latency term (>= 0; 0 switches it off); with a latency target, the
    #: weight the controller starts from. None: 1.0.
    alpha: float | None = None
    #: Exponent of the latency term (> 0; fixed-weight and budget forms only).
    beta: float = 1.0
    #: Weight of the memory term (>= 0); with a memory target, where it starts. None: 0.5.
    gamma: float | None = None
    #: Exponent of the memory term (> 0).
    delta: float = 1.0
    #: ``baseline``: cost / cost of the baseline architecture; ``none``: ms and MB as they are.
    normalise: str = "baseline"
    #: Memory model: ``table`` (weights + largest activation, as the cost table predicts)
    #: or ``sum`` (the seed's literal sum of per-block weights + activations).
    memory: str = "table"
    #: Budget mode: penalise only latency above this many ms (relative excess ``lat/T - 1``),
    #: or above ``"N%"`` of the baseline's predicted latency.
    latency_budget_ms: float | str | None = None
    #: Budget mode: penalise only memory above this many MB (or ``"N%"`` of the baseline's).
    memory_budget_mb: float | str | None = None
    #: Target mode: the search sets the latency term's weight itself, by dual ascent, so that
    #: the latency expected under the architecture distribution lands on this many ms (or
    #: ``"N%"`` of the baseline's predicted latency); ``alpha`` is the weight it starts from.
    latency_target: float | str | None = None
    #: Target mode for memory (MB or ``"N%"``); ``gamma`` is the weight it starts from.
    memory_target: float | str | None = None
    #: How a target sets its weight. ``projection``: after every architecture update the
    #: searched labels' logits are tilted by ``-w * c / T`` (the KL projection of the
    #: distribution onto ``E[c] <= T``), with the smallest ``w >= 0`` that brings the expected
    #: cost to the target, found by bisection: the multiplier is solved each step, so the
    #: distribution lands on the target at once and cannot wind past it. ``pi``: the weight
    #: moves by the PI-controlled dual ascent below and the penalty's gradient does the work.
    controller: str = "projection"
    #: Target mode: the export takes the most probable architecture whose predicted costs are
    #: within ``[1 - export_fill, 1]`` of the targets, where one is (0: the most probable within
    #: them, however far under).
    export_fill: float = 0.05
    #: Target mode: how many times the exported network is timed against the baseline on this
    #: machine (interleaved, 4 s; 16 s when the latency's interval holds the target) before it
    #: is retrained; one measured over a target is exported
    #: again with that target's limit scaled by target / measured ratio (the table is a prior:
    #: the chip's measurement wins), one measured more than ``export_fill`` under it with the
    #: limit raised halfway towards the lowest one measured over (or by target / measured);
    #: the network kept is the one within the targets that comes nearest them. 0: trust the table.
    export_checks: int = 3
    #: Integral gain of the ``pi`` controller, per architecture update:
    #: ``I <- max(0, I + dual_lr * g)`` with ``g = E[c]/T - 1``.
    dual_lr: float = 0.02
    #: Proportional gain: the weight is ``max(0, I + dual_gain * g)``; it damps the
    #: oscillation plain dual ascent has around the target (a PI-controlled Lagrangian).
    dual_gain: float = 5.0

    def __post_init__(self) -> None:
        limits = ("latency_budget_ms", "memory_budget_mb", "latency_target", "memory_target")
        if self.alpha is None and self.gamma is None and all(getattr(self, n) is None for n in limits):
            for name, value in DEFAULT_TARGETS.items():  # nothing named: seed 001's targets
                object.__setattr__(self, name, value)
        for name, value in (("alpha", 1.0), ("gamma", 0.5)):
            if getattr(self, name) is None:
                object.__setattr__(self, name, value)
        _finite("penalty alpha", self.alpha, nonnegative=True)
        _finite("penalty gamma", self.gamma, nonnegative=True)
        _finite("penalty beta", self.beta, positive=True)
        _finite("penalty delta", self.delta, positive=True)
        if self.normalise not in ("baseline", "none"):
            raise HwAwareError(f"penalty normalise must be 'baseline' or 'none', got {self.normalise!r}")
        if self.memory not in ("table", "sum"):
            raise HwAwareError(f"penalty memory must be 'table' or 'sum', got {self.memory!r}")
        for name in ("latency_budget_ms", "memory_budget_mb", "latency_target", "memory_target"):
            value = getattr(self, name)
            if isinstance(value, str):
                budget_fraction(value, f"penalty {name}")
            elif value is not None:
                _finite(f"penalty {name}", value, positive=True)
        for cost, budget in (("latency", "latency_budget_ms"), ("memory", "memory_budget_mb")):
            if getattr(self, f"{cost}_target") is not None and getattr(self, budget) is not None:
                raise HwAwareError(f"penalty {cost}_target and {budget} are two forms of one limit: give one")
        for cost, power in (("latency", "beta"), ("memory", "delta")):
            if getattr(self, f"{cost}_target") is not None and getattr(self, power) != 1.0:
                raise HwAwareError(
                    f"penalty {power} {getattr(self, power)} shapes the fixed-weight and budget forms only; with "
                    f"{cost}_target the term is weight * {cost} / target: drop {power} or set {cost}_target: null")
        if self.controller not in ("projection", "pi"):
            raise HwAwareError(f"penalty controller must be 'projection' or 'pi', got {self.controller!r}")
        _finite("penalty export_fill", self.export_fill, nonnegative=True)
        if self.export_fill >= 1:
            raise HwAwareError(f"penalty export_fill is a share of the targets, so it must be < 1, "
                               f"got {self.export_fill}")
        if isinstance(self.export_checks, bool) or not isinstance(self.export_checks, int) or self.export_checks < 0:
            raise HwAwareError(f"penalty export_checks must be an integer >= 0 (0: trust the table), "
                               f"got {self.export_checks!r}")
        _finite("penalty dual_lr", self.dual_lr, positive=True)
        _finite("penalty dual_gain", self.dual_gain, nonnegative=True)

    def budget(self, name: str, baseline: float) -> float | None:
        """Budget ``name`` (``latency_budget_ms`` / ``memory_budget_mb``) in ms or MB, given the baseline's."""
        value = getattr(self, name)
        if isinstance(value, str):
            return budget_fraction(value, f"penalty {name}") * baseline
        return value


@dataclass(frozen=True)
class TemperatureConfig:
    """Gumbel-softmax temperature, annealed from ``init`` to ``min`` within each stage."""

    init: float = 5.0
    min: float = 0.5
    #: ``exponential`` (geometric) or ``linear`` interpolation over the stage's epochs.
    schedule: str = "exponential"
    #: Straight-through (hard) Gumbel: one-hot masks forward, soft gradients backward;
    #: only the sampled block of each layer runs. ``False``: every block runs, weighted.
    hard: bool = True
    #: Soft mode only: mask weights below this are set to 0 (in the forward pass and the
    #: penalty alike) and their blocks are not run; 0 runs every block.
    min_weight: float = 0.0

    def __post_init__(self) -> None:
        _finite("temperature init", self.init, positive=True)
        _finite("temperature min_weight", self.min_weight, nonnegative=True)
        if self.min_weight >= 0.5:
            raise HwAwareError(f"temperature min_weight must be < 0.5, got {self.min_weight}")
        _finite("temperature min", self.min, positive=True)
        if self.min > self.init:
            raise HwAwareError(f"temperature min ({self.min}) must not exceed init ({self.init})")
        if self.schedule not in ("exponential", "linear"):
            raise HwAwareError(f"temperature schedule must be 'exponential' or 'linear', got {self.schedule!r}")

    def at(self, step: int, steps: int) -> float:
        """Temperature at epoch ``step`` (0-based) of a stage of ``steps`` epochs."""
        fraction = min(step, steps - 1) / max(steps - 1, 1)
        if self.schedule == "linear":
            return self.init + (self.min - self.init) * fraction
        return self.init * (self.min / self.init) ** fraction


_STAGE_NAMES = ("upper", "lower", "all")


@dataclass(frozen=True)
class StagingConfig:
    """Staged search (seed 001 step 7): which layers are searched when, and when a stage ends.

    The ``n`` searchable layers split into the lower ``split`` (``m``) and the upper
    ``n - m``. Each stage in ``order`` searches one part (``upper``, ``lower`` or
    ``all``) and freezes the rest (weights and architecture parameters); the stem
    goes with the lower part, the head with the upper one. A stage ends when its
    mean search loss has not fallen by ``min_delta`` for ``patience`` epochs (after
    at least ``min_epochs``), or after ``max_epochs``. ``order: [all]`` is a
    single-stage search. A stage that collapses (training accuracy near chance while the
    cost terms dominate the loss) ends the search (``collapse_accuracy``).
    """

    #: ``m``, the number of lower layers (None: half of the layers, rounded down).
    split: int | None = None
    order: tuple[str, ...] = ("upper", "lower")
    max_epochs: int = 6
    min_epochs: int = 2
    patience: int = 2
    min_delta: float = 1e-3
    #: Epochs that train all weights with fixed architecture parameters before the stages.
    warmup_epochs: int = 0
    #: The collapse guard: an epoch whose training top-1 (the weight steps' batches) falls below
    #: this share, after an earlier epoch above it, while the cost terms are more than
    #: ``collapse_cost_share`` of the architecture loss stops the search, and the architecture
    #: distribution of the last epoch before it is exported. None: 1.5 / the number of classes
    #: (near chance); 0 switches the guard off.
    collapse_accuracy: float | None = None
    #: The cost terms' share of the architecture loss, ``penalty / (CE + penalty)``, above which
    #: they dominate it (the guard's second condition).
    collapse_cost_share: float = 0.5

    def __post_init__(self) -> None:
        if isinstance(self.order, str):
            object.__setattr__(self, "order", (self.order,))
        if not self.order or any(part not in _STAGE_NAMES for part in self.order):
            raise HwAwareError(f"stages order must list parts among {_STAGE_NAMES}, got {list(self.order)}")
        for name in ("max_epochs", "min_epochs", "patience"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise HwAwareError(f"stages {name} must be an integer >= 1, got {value!r}")
        if self.min_epochs > self.max_epochs:
            raise HwAwareError(f"stages min_epochs ({self.min_epochs}) exceeds max_epochs ({self.max_epochs})")
        if not isinstance(self.warmup_epochs, int) or self.warmup_epochs < 0:
            raise HwAwareError(f"stages warmup_epochs must be an integer >= 0, got {self.warmup_epochs!r}")
        _finite("stages min_delta", self.min_delta, nonnegative=True)
        if self.collapse_accuracy is not None:
            _finite("stages collapse_accuracy", self.collapse_accuracy, nonnegative=True)
            if self.collapse_accuracy >= 1:
                raise HwAwareError(f"stages collapse_accuracy is a share of the batches (0 switches the guard "
                                   f"off), so it must be < 1, got {self.collapse_accuracy}")
        _finite("stages collapse_cost_share", self.collapse_cost_share, nonnegative=True)
        if self.collapse_cost_share >= 1:
            raise HwAwareError(f"stages collapse_cost_share must be < 1, got {self.collapse_cost_share}")
        if self.split is not None and (not isinstance(self.split, int) or self.split < 1):
            raise HwAwareError(f"stages split (m) must be an integer >= 1, got {self.split!r}")


@dataclass(frozen=True)
class SearchTrainingConfig:
    """How the supernet is trained during the search (weights: SGD; architecture: Adam)."""

    batch_size: int = 64
    lr: float = 0.05
    momentum: float = 0.9
    weight_decay: float = 5e-4
    #: Learning rate of the architecture parameters (Adam, betas (0.5, 0.999), as NNI's DARTS).
    arc_lr: float = 0.01
    arc_weight_decay: float = 0.0
    #: Architecture step on every k-th batch only (1: every batch, as NNI's DARTS).
    arc_every: int = 1
    #: Initial logit of the baseline block in every layer, the others start at 0: the
    #: search starts near the baseline (ResNet50) and leaves it where the penalty pays.
    baseline_bias: float = 0.0
    gradient_clip: float | None = None
    #: Lightning accelerator: ``auto`` (GPU when present), ``cpu``, ``gpu``.
    accelerator: str = "auto"
    #: Devices for Lightning; more than one runs DDP.
    devices: int = 1
    #: Intra-op threads on the CPU (None: torch's current).
    threads: int | None = None
    workers: int = 0
    #: Keep Lightning checkpoints (``last.ckpt``) so an interrupted search can resume.
    checkpoint: bool = True
    #: Resume from ``<out>/checkpoints/last.ckpt`` when it exists.
    resume: bool = True

    def __post_init__(self) -> None:
        for name in ("batch_size", "devices", "arc_every"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise HwAwareError(f"search {name} must be an integer >= 1, got {value!r}")
        _finite("search lr", self.lr, positive=True)
        _finite("search arc_lr", self.arc_lr, positive=True)
        _finite("search momentum", self.momentum, nonnegative=True)
        _finite("search weight_decay", self.weight_decay, nonnegative=True)
        _finite("search arc_weight_decay", self.arc_weight_decay, nonnegative=True)
        _finite("search baseline_bias", self.baseline_bias)
        if self.accelerator not in ("auto", "cpu", "gpu", "cuda", "mps"):
            raise HwAwareError(f"search accelerator must be auto, cpu, gpu, cuda or mps, got {self.accelerator!r}")


@dataclass(frozen=True)
class SweepConfig:
    """Extra searches, each retrained, reported and plotted: one per latency target (``targets``,
    ms or ``"N%"`` of the baseline's predicted latency, as ``penalty.latency_target``) or, in the
    fixed-weight form, one per latency weight (``alphas``). Empty: none."""

    alphas: tuple[float, ...] = ()
    targets: tuple[float | str, ...] = ()

    def __post_init__(self) -> None:
        for name in ("alphas", "targets"):
            if isinstance(getattr(self, name), (str, int, float)):
                object.__setattr__(self, name, (getattr(self, name),))
        for value in self.alphas:
            _finite("sweep alpha", value, nonnegative=True)
        for value in self.targets:
            if isinstance(value, str):
                budget_fraction(value, "sweep target")
            else:
                _finite("sweep target", value, positive=True)
        if self.alphas and self.targets:
            raise HwAwareError("sweep alphas and targets are two forms of one sweep: give one")

    @property
    def points(self) -> tuple[tuple[str, float | str], ...]:
        """``(option, value)`` of each sweep point: ``("alpha", 1.5)`` or ``("latency_target", "30%")``."""
        if self.targets:
            return tuple(("latency_target", value) for value in self.targets)
        return tuple(("alpha", value) for value in self.alphas)


@dataclass(frozen=True)
class GumbelSearchConfig:
    """Everything ``nni-hwaware search gumbel --config`` reads (see ``examples/digits/gumbel.yml``)."""

    #: A registered space or JSON file, ``nni:<hub space>`` or ``module:callable``.
    space: str = "digits"
    #: Keyword arguments of the space (e.g. ``{width_mult: 0.25}`` for ``nni:ProxylessNAS``).
    space_args: dict[str, Any] = field(default_factory=dict)
    seed: int = 0
    #: Output directory: architecture, results, report, checkpoints.
    out: str = "runs/gumbel"
    #: Directory of CIFAR-10 (torchvision's layout), for spaces whose data set is cifar10.
    data_dir: str | None = None
    cost: CostConfig = field(default_factory=CostConfig)
    prune: PruneConfig = field(default_factory=PruneConfig)
    penalty: PenaltyConfig = field(default_factory=PenaltyConfig)
    temperature: TemperatureConfig = field(default_factory=TemperatureConfig)
    stages: StagingConfig = field(default_factory=StagingConfig)
    search: SearchTrainingConfig = field(default_factory=SearchTrainingConfig)
    #: How the found network and the baseline are retrained (``seed`` and ``data_dir`` are taken from here).
    retrain: TrainConfig = field(default_factory=TrainConfig)
    #: Retrain and report the baseline (plain ResNet50 of the space) as well.
    baseline: bool = True
    sweep: SweepConfig = field(default_factory=SweepConfig)

    def __post_init__(self) -> None:
        if isinstance(self.seed, bool) or not isinstance(self.seed, int):
            raise HwAwareError(f"seed must be an integer, got {self.seed!r}")
        if self.sweep.alphas and self.penalty.latency_target is not None:
            raise HwAwareError(
                f"sweep alphas sweep the fixed latency weight, but penalty.latency_target "
                f"{self.penalty.latency_target!r} sets it: sweep targets instead (sweep.targets: [\"30%\", ...]) "
                "or set penalty.latency_target: null")
        if self.sweep.targets and self.penalty.latency_budget_ms is not None:
            raise HwAwareError("sweep targets set penalty.latency_target, and penalty.latency_budget_ms is another "
                               "form of that limit: set it to null")

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> GumbelSearchConfig:
        return from_mapping(cls, data, "search config")

    @classmethod
    def from_yaml(cls, path: str | Path) -> GumbelSearchConfig:
        import yaml

        path = Path(path)
        if not path.is_file():
            raise HwAwareError(f"config file {path} does not exist; check the path")
        try:
            data = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
        except yaml.YAMLError as err:
            raise HwAwareError(f"config file {path} is not valid YAML: {' '.join(str(err).split())}") from None
        return cls.from_dict(data)

    def to_dict(self) -> dict[str, Any]:
        return _plain(asdict(self))

    def replace(self, **changes: Any) -> GumbelSearchConfig:
        """A copy with dotted-path changes, e.g. ``replace(**{"penalty.alpha": 2.0})``."""
        data = self.to_dict()
        for path, value in changes.items():
            *parents, leaf = path.split(".")
            node = data
            for part in parents:
                if not isinstance(node.get(part), dict):
                    raise HwAwareError(f"unknown option {path!r}")
                node = node[part]
            if leaf not in node:
                raise HwAwareError(f"unknown option {path!r}; allowed here: {sorted(node)}")
            node[leaf] = value
        return GumbelSearchConfig.from_dict(data)

    def train_config(self) -> TrainConfig:
        """The retraining options with this run's seed and data directory."""
        return dataclasses.replace(self.retrain, seed=self.seed, data_dir=self.data_dir or self.retrain.data_dir)


def _plain(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


#: (dataclass name, field) -> nested dataclass, for :func:`from_mapping`.
_NESTED: dict[tuple[str, str], type] = {
    ("GumbelSearchConfig", "cost"): CostConfig,
    ("GumbelSearchConfig", "prune"): PruneConfig,
    ("GumbelSearchConfig", "penalty"): PenaltyConfig,
    ("GumbelSearchConfig", "temperature"): TemperatureConfig,
    ("GumbelSearchConfig", "stages"): StagingConfig,
    ("GumbelSearchConfig", "search"): SearchTrainingConfig,
    ("GumbelSearchConfig", "retrain"): TrainConfig,
    ("GumbelSearchConfig", "sweep"): SweepConfig,
}
