"""Search-space pruning by hardware score ``S = k * U * P``."""

from __future__ import annotations

from nni_hwaware.pruning.mutator import MODES, PruneResult, prune_space

__all__ = ["MODES", "PruneResult", "prune_space"]
