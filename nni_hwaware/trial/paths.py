"""Where a trial may write: inside its experiment's directory, whatever a config or parameter says."""

from __future__ import annotations

import os
from pathlib import Path

from nni_hwaware.errors import HwAwareError

__all__ = ["experiment_dir", "inside_experiment"]


def experiment_dir() -> Path | None:
    """``<experimentWorkingDirectory>/<id>`` of this trial, from NNI's environment (None outside NNI)."""
    output, experiment = os.environ.get("NNI_OUTPUT_DIR"), os.environ.get("NNI_EXP_ID")
    if not output or not experiment:
        return None
    for parent in Path(output).resolve().parents:
        if parent.name == experiment:
            return parent
    return None


def inside_experiment(path: str | os.PathLike[str], what: str) -> Path:
    """``path`` resolved, if it lies inside this trial's experiment directory; else a one-line error."""
    root = experiment_dir()
    resolved = Path(path).resolve()
    if root is None or not resolved.is_relative_to(root):
        raise HwAwareError(f"{what} {path} is not inside this experiment's directory "
                           f"({root or 'unknown: not run by NNI'}); trials write only there")
    return resolved
