"""Search-space pruning by hardware score ``S = k * U * P``, per (label, value) of any NNI space.

:data:`MODES` is importable without torch (the tuner validates its options before
NNI's 10-second connection deadline); the rest loads on first access.
"""

from __future__ import annotations

from typing import Any

from nni_hwaware.pruning.modes import MODES

__all__ = ["MODES", "ChoicePruneResult", "narrow_space", "prune_choices"]



def __getattr__(name: str) -> Any:
    if name in ("ChoicePruneResult", "prune_choices"):
        from nni_hwaware.pruning import prune

        return getattr(prune, name)
    if name == "narrow_space":
        from nni_hwaware.spaces.choices import narrow_space

        return narrow_space
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
