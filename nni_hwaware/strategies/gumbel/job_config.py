"""Typed options of a hardware-penalised Gumbel-DARTS search job, validated at construction.

Configuration flows one way: YAML (``nni-hwaware search gumbel --config``) or a
Python dict -> :meth:`GumbelSearchConfig.from_dict` -> these frozen dataclasses
-> the code. Unknown keys are rejected with the list of allowed ones; a bad value
raises :class:`~nni_hwaware.errors.HwAwareError` saying what to change.

Here: the job's file (:class:`GumbelSearchConfig`), how the supernet trains
(:class:`SearchTrainingConfig`) and the sweep (:class:`SweepConfig`). The sections the
strategy itself takes (penalty, temperature, stages) are in
:mod:`nni_hwaware.strategies.gumbel.strategy_config` and importable from here too.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from nni_hwaware import checked_options as options
from nni_hwaware.errors import HwAwareError
from nni_hwaware.strategies.gumbel.strategy_config import (
    DEFAULT_TARGETS,
    PenaltyConfig,
    StagingConfig,
    TemperatureConfig,
    check_finite,
)
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
        check_finite("search lr", self.lr, positive=True)
        check_finite("search arc_lr", self.arc_lr, positive=True)
        check_finite("search momentum", self.momentum, nonnegative=True)
        check_finite("search weight_decay", self.weight_decay, nonnegative=True)
        check_finite("search arc_weight_decay", self.arc_weight_decay, nonnegative=True)
        check_finite("search baseline_bias", self.baseline_bias)
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
            check_finite("sweep alpha", value, nonnegative=True)
        for value in self.targets:
            if isinstance(value, str):
                budget_fraction(value, "sweep target")
            else:
                check_finite("sweep target", value, positive=True)
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
