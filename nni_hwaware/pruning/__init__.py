"""Search-space pruning by hardware score ``S = k * U * P``, per (label, value) of any NNI space."""

from __future__ import annotations

from nni_hwaware.pruning.choices import MODES, ChoicePruneResult, prune_choices
from nni_hwaware.spaces.choices import narrow_space

__all__ = ["MODES", "ChoicePruneResult", "narrow_space", "prune_choices"]
