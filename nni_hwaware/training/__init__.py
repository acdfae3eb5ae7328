"""Training, retraining and evaluating one network of a space: what every trial and report runs.

* :class:`TrainConfig` / :func:`train_architecture` / :func:`train_network`: the
  seeded training loop (best-on-validation epoch, tested on the held-out split);
* :func:`evaluate_architecture` -> :class:`ModelResult`: retrained from scratch,
  tested, measured and predicted;
* :func:`compare_with_baseline`: the found network and the baseline timed
  interleaved, the latency ratio with its 95 % interval and warning lines.

This package sits below the strategies, the trials and the reports, which all use it.
Only :class:`TrainConfig` is imported eagerly; the rest loads torch on first access,
so that the tuner, which validates training options, starts fast.
"""

from __future__ import annotations

from typing import Any

from nni_hwaware.training.train_config import TrainConfig

__all__ = [
    "ModelResult",
    "TrainConfig",
    "TrainResult",
    "compare_with_baseline",
    "comparison_warnings",
    "evaluate",
    "evaluate_architecture",
    "measure_architecture",
    "train_architecture",
    "train_network",
]

_LAZY = {"ModelResult": "results", "evaluate_architecture": "results", "measure_architecture": "results",
         "compare_with_baseline": "compare", "comparison_warnings": "compare", "TrainResult": "train",
         "evaluate": "train", "train_architecture": "train", "train_network": "train"}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(f"nni_hwaware.training.{_LAZY[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
