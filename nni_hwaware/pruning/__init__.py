"""Search-space pruning by hardware score ``S = k * U * P``."""

from __future__ import annotations

from nni_hwaware.pruning.choices import ChoicePruneResult, narrow_space, prune_choices
from nni_hwaware.pruning.mutator import MODES, PruneResult, prune_space

__all__ = ["MODES", "ChoicePruneResult", "PruneResult", "narrow_space", "prune_choices", "prune_space"]
