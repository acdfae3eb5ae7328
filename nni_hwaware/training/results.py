"""One evaluated network: what a report compares (accuracy, measured and predicted cost).

:func:`evaluate_architecture` is the retraining and evaluation of a found network: the
architecture is built from random initialisation, trained with cross entropy,
the epoch best on validation is kept and evaluated on the held-out test split;
then the network is measured on this machine (latency, weights + peak
activation memory, FLOPs, parameters) and, given a cost model, its cost is also
predicted from the table. The result is a :class:`ModelResult`, saved as JSON.
Every search (Gumbel, PPO, ...) reports through it, so one report fits all.
"""

from __future__ import annotations

import dataclasses
import os
import statistics
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from nni_hwaware.errors import HwAwareError
from nni_hwaware.files import read_json, write_json

__all__ = ["ModelResult", "evaluate_architecture", "measure_architecture"]


@dataclass(frozen=True)
class ModelResult:
    """A retrained, tested and measured network. Accuracies in [0, 1]; MB means MiB."""

    name: str
    space: str
    arch: dict[str, Any]
    test_top1: float
    test_top3: float
    val_top1: float
    val_top3: float
    #: Measured on ``chip`` (median of the timing repeats), batch ``batch_size``.
    latency_ms: float
    #: Measured: weights plus peak activations.
    memory_mb: float
    params: int
    flops: int
    chip: str = ""
    batch_size: int = 1
    predicted_latency_ms: float | None = None
    predicted_memory_mb: float | None = None
    best_epoch: int = -1
    train_seconds: float = 0.0
    #: Penalty weight of the search that found it (None: not searched, e.g. the baseline).
    alpha: float | None = None
    search_seconds: float | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    #: The trained weights (best epoch on validation), when asked for (``keep_weights``);
    #: never written to JSON.
    state_dict: dict[str, Any] | None = field(default=None, repr=False, compare=False)

    def to_dict(self) -> dict[str, Any]:
        data = asdict(dataclasses.replace(self, state_dict=None))
        del data["state_dict"]
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ModelResult:
        known = {f.name for f in dataclasses.fields(cls)}
        stray = sorted(set(data) - known)
        if stray:
            raise HwAwareError(f"result: unknown fields {stray}; allowed: {sorted(known)}")
        try:
            return cls(**data)
        except TypeError as err:
            raise HwAwareError(f"result is incomplete: {err}") from None

    def save(self, path: str | os.PathLike[str]) -> Path:
        return write_json(path, self.to_dict())

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> ModelResult:
        data = read_json(path, "result file")
        if not isinstance(data, dict):
            raise HwAwareError(f"result file {path} must hold a JSON object (written by nni-hwaware retrain)")
        try:
            return cls.from_dict(data)
        except HwAwareError as err:
            raise HwAwareError(f"{path}: {err}") from None

    def renamed(self, name: str) -> ModelResult:
        return dataclasses.replace(self, name=name)


def measure_architecture(config: Any, arch: Mapping[str, str], *, batch_size: int = 1, backend: str = "torch",
                         device: str = "cpu", threads: int | None = 1, repeats: int = 3,
                         seed: int = 0) -> dict[str, float]:
    """Latency (median of ``repeats`` timing runs), memory, FLOPs and params of ``arch``, measured.

    Timing follows the cost tables' settings (:data:`nni_hwaware.cost_model.profile.TIMING`).
    """
    import torch

    from nni_hwaware.cost_model.profile import TIMING
    from nni_hwaware.profiling import measure_module
    from nni_hwaware.spaces.resolve import resolve_space

    config = resolve_space(config)  # the project's spaces are ModelSpaces like any other
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        net = config.build(arch)
    shape = tuple(config.input_shape)
    costs = [measure_module(net, shape, batch_size=batch_size, backend=backend, device=device, threads=threads,
                            seed=seed, **TIMING) for _ in range(max(1, repeats))]
    first = costs[0]
    return {"latency_ms": statistics.median(c.latency.ms for c in costs),
            "memory_mb": first.memory_mb, "param_mb": first.param_mb, "activation_mb": first.activation_mb,
            "flops": first.flops, "params": first.params}


def evaluate_architecture(config: Any, arch: Mapping[str, str], train: Any, *, cost_model: Any = None,
                          name: str = "network", threads: int | None = 1, batch_size: int = 1,
                          backend: str = "torch", device: str = "cpu", repeats: int = 3,
                          alpha: float | None = None, search_seconds: float | None = None,
                          on_epoch: Callable[[int, dict[str, float]], None] | None = None,
                          keep_weights: bool = False) -> ModelResult:
    """Retrain ``arch`` from scratch with ``train`` (a ``TrainConfig``), test it, measure it, predict it.

    ``keep_weights`` keeps the trained weights in the result's ``state_dict`` (to save or export it).
    """
    from nni_hwaware.profiling import detect_chip
    from nni_hwaware.training.train import train_architecture

    arch = config.check_architecture(arch)
    trained = train_architecture(config, arch, train, on_epoch, keep_weights=keep_weights)
    measured = measure_architecture(config, arch, batch_size=batch_size, backend=backend, device=device,
                                    threads=threads, repeats=repeats, seed=train.seed)
    predicted = cost_model.predict(arch) if cost_model is not None else None
    return ModelResult(
        name=name, space=config.name, arch=dict(arch),
        test_top1=trained.test_top1, test_top3=trained.test_top3,
        val_top1=trained.val_top1, val_top3=trained.val_top3,
        latency_ms=measured["latency_ms"], memory_mb=measured["memory_mb"],
        params=int(measured["params"]), flops=int(measured["flops"]),
        chip=detect_chip(device).name,
        batch_size=batch_size,
        predicted_latency_ms=predicted.latency_ms if predicted else None,
        predicted_memory_mb=predicted.memory_mb if predicted else None,
        best_epoch=trained.best_epoch, train_seconds=trained.train_seconds,
        alpha=alpha, search_seconds=search_seconds,
        extra={"param_mb": measured["param_mb"], "activation_mb": measured["activation_mb"]},
        state_dict=trained.state_dict,
    )
