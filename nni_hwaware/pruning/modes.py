"""The pruning thresholds, importable without torch (the tuner checks its options before NNI's deadline)."""

from __future__ import annotations

__all__ = ["MODES"]

#: Thresholds: above the label's mean score, above the global mean, above a value, the top k per label.
MODES = ("layer-mean", "global-mean", "value", "top-k")
