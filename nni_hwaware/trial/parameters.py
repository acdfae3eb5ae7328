"""What the tuner hands a trial: typed, self-contained parameters, the same class on both sides.

A trial may run on another machine (NNI's remote, Kubernetes, AML training
services) and sees none of the tuner's files. So its NNI parameters carry all
it needs: the architecture, the space to build it from, the costs the cost table
predicts for it on the target chip, the space's reference network to time it beside,
how to train it and on which data set, and the search's budget (a network measured over
it is not trained). The
final retraining trial also carries the finished search history and the
baseline, and answers with its measured results as its final metric; the tuner
writes the report.

On the wire (NNI's parameters) the architecture's labels are top-level keys, so
NNI's web portal shows them as columns, and everything else sits under
:data:`KEY`::

    {"conv1": "conv3x3", ..., "_hwaware": {"space": "digits", "costs": {...}, "train": {...}, ...}}
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from nni_hwaware.errors import HwAwareError
from nni_hwaware.measurement import MEASURED
from nni_hwaware.training import TrainConfig

__all__ = ["KEY", "Measuring", "RetrainJob", "TrialParameters"]

#: The key of NNI's parameters under which everything but the architecture travels.
KEY = "_hwaware"
#: Cost fields a trial reports as predicted by the cost table.
COST_KEYS = ("latency_ms", "memory_mb", "flops", "params")


@dataclass(frozen=True)
class Measuring:
    """How a trial measures networks: as the cost table was profiled (its runtime backend, batch size,
    intra-op threads and device), so that what the trial measures and what the table predicts are of
    the same thing."""

    backend: str = "torch"
    batch_size: int = 1
    threads: int | None = 1
    device: str = "cpu"

    def __post_init__(self) -> None:
        if not isinstance(self.backend, str) or not self.backend:
            raise HwAwareError(f"the trial's measuring backend must be a backend name, got {self.backend!r}")
        for name, value, none_ok in (("batch_size", self.batch_size, False), ("threads", self.threads, True)):
            if (value is None and none_ok) or (isinstance(value, int) and not isinstance(value, bool) and value >= 1):
                continue
            raise HwAwareError(f"the trial's measuring {name} must be an integer >= 1, got {value!r}; "
                               "the tuner and the trial must be the same nni-hwaware version")

    def to_dict(self) -> dict[str, Any]:
        return {"backend": self.backend, "batch_size": self.batch_size, "threads": self.threads,
                "device": self.device}

    @classmethod
    def of_model(cls, model: Any, device: str = "cpu") -> Measuring:
        """As ``model`` (a :class:`~nni_hwaware.cost_model.SpaceCostModel`) was profiled, on ``device``."""
        return cls(backend=model.backend, batch_size=model.batch_size, threads=model.threads or 1, device=device)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any] | None) -> Measuring:
        try:
            return cls(**dict(data or {}))
        except TypeError as err:
            raise HwAwareError(f"the trial's measuring options are malformed: {err}; "
                               "the tuner and the trial must be the same nni-hwaware version") from None


@dataclass(frozen=True)
class RetrainJob:
    """The last trial of a search: retrain the best of ``history`` and ``baseline``, measure both."""

    #: Every finished search trial: ``{arch, default, latency_ms, memory_mb, ..., status}``.
    history: list[dict[str, Any]]
    #: The reference network the found one is compared with, and its predicted costs.
    baseline: dict[str, Any]
    baseline_costs: dict[str, float]
    #: Alternating timing rounds of the two networks (see :mod:`nni_hwaware.training.compare`).
    rounds: int = 10
    #: Timing runs per network for the measured memory and the single-network latency.
    repeats: int = 3
    #: The search's budget (``latency_ms`` / ``memory_mb`` / ``flops``): the best is chosen among the
    #: trials whose measured costs fit it.
    budget: dict[str, float] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {"history": self.history, "baseline": self.baseline, "baseline_costs": self.baseline_costs,
                "rounds": self.rounds, "repeats": self.repeats, "budget": self.budget}


@dataclass(frozen=True)
class TrialParameters:
    """Everything one trial needs (module docstring); :meth:`to_dict` / :meth:`from_dict` are the wire form."""

    #: label -> value of the network to train (empty for the retraining trial: it picks from ``retrain.history``).
    arch: dict[str, Any]
    #: The space by name (``digits``, ``nni:ProxylessNAS``, ``module:callable``, a JSON file) and its arguments.
    space: str
    space_args: dict[str, Any] = field(default_factory=dict)
    #: The data set the space trains on (``digits``, ``cifar10``); the trial checks it.
    dataset: str = ""
    #: The chip the costs are for, and the costs the cost table predicts for ``arch`` there.
    chip: str = ""
    costs: dict[str, float] = field(default_factory=dict)
    train: TrainConfig = field(default_factory=TrainConfig)
    retrain: RetrainJob | None = None
    #: The space's reference network (label -> value), timed beside ``arch`` on the trial's machine
    #: (empty: the trial reports the predicted costs only).
    reference: dict[str, Any] = field(default_factory=dict)
    #: The search's budget (``latency_ms`` / ``memory_mb``, on the cost table's scale) and the table's
    #: latency of ``reference``: a trial that measures its network over the budget, judged as the search
    #: judges it, reports the measurement and does not train (empty: it trains whatever it measures).
    budget: dict[str, float] = field(default_factory=dict)
    reference_table_latency_ms: float | None = None
    #: How the trial measures (the cost table's backend, batch size, threads and device).
    measuring: Measuring = field(default_factory=Measuring)
    #: A screening trial: the architectures to measure (beside ``reference``, in shared rounds) and
    #: report, none of them trained (``arch`` is then empty).
    screen: list[dict[str, Any]] = field(default_factory=list)
    #: What a screening trial measured of ``arch`` (its result's metrics): the trial trains it without
    #: measuring it again.
    measured: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not isinstance(self.screen, list) or not all(isinstance(a, Mapping) for a in self.screen):
            raise HwAwareError("the trial's screen must be a list of architectures; "
                               "the tuner and the trial must be the same nni-hwaware version")
        for name, limit in self.budget.items():
            if name not in MEASURED or not isinstance(limit, (int, float)) \
                    or isinstance(limit, bool) or not limit > 0:
                raise HwAwareError(f"the trial's budget is malformed ({name}: {limit!r}); it takes latency_ms / "
                                   "memory_mb > 0: the tuner and the trial must be the same nni-hwaware version")
        latency = self.reference_table_latency_ms
        if latency is not None and (isinstance(latency, bool) or not isinstance(latency, (int, float)) or not latency > 0):
            raise HwAwareError(f"the trial's reference_table_latency_ms must be a number > 0, got {latency!r}")

    def to_dict(self) -> dict[str, Any]:
        body = {"space": self.space, "space_args": dict(self.space_args), "dataset": self.dataset,
                "chip": self.chip, "costs": dict(self.costs), "train": self.train.to_dict(),
                "reference": dict(self.reference), "measuring": self.measuring.to_dict()}
        if self.screen:
            body["screen"] = [dict(a) for a in self.screen]
        if self.measured:
            body["measured"] = dict(self.measured)
        if self.budget:
            body["budget"] = dict(self.budget)
            body["reference_table_latency_ms"] = self.reference_table_latency_ms
        if self.retrain is not None:
            body["retrain"] = self.retrain.to_dict()
        return {**self.arch, KEY: body}

    @classmethod
    def from_dict(cls, params: Mapping[str, Any]) -> TrialParameters:
        """The parameters NNI handed over; a clear error when they are not a search trial's."""
        body = params.get(KEY)
        if not isinstance(body, Mapping):
            raise HwAwareError(f"the trial's parameters lack {KEY!r}: they were not sent by the nni-hwaware tuner "
                               "(run the trial under it, or pass --space and --arch)")
        known = {"space", "space_args", "dataset", "chip", "costs", "train", "retrain", "reference", "budget",
                 "reference_table_latency_ms", "measuring", "screen", "measured"}
        stray = sorted(set(body) - known)
        if stray or "space" not in body:
            raise HwAwareError(f"the trial's {KEY} parameters are malformed (unknown {stray}, needs 'space'); "
                               "the tuner and the trial must be the same nni-hwaware version")
        retrain = body.get("retrain")
        if retrain is not None:
            try:
                retrain = RetrainJob(**retrain)
            except TypeError as err:
                raise HwAwareError(f"the retraining parameters are malformed: {err}") from None
        arch = {k: v for k, v in params.items() if k != KEY and not k.startswith("_")}
        return cls(arch=arch, space=str(body["space"]), space_args=dict(body.get("space_args") or {}),
                   dataset=str(body.get("dataset", "")), chip=str(body.get("chip", "")),
                   costs={k: float(v) for k, v in (body.get("costs") or {}).items()},
                   train=TrainConfig.from_dict(body.get("train") or {}), retrain=retrain,
                   reference=dict(body.get("reference") or {}), budget=dict(body.get("budget") or {}),
                   reference_table_latency_ms=body.get("reference_table_latency_ms"),
                   measuring=Measuring.from_dict(body.get("measuring")), screen=list(body.get("screen") or []),
                   measured=dict(body.get("measured") or {}))
