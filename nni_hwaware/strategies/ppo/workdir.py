"""Where the tuner reads and writes: the experiment's working directory under NNI, else the current one.

Relative paths in ``classArgs`` are resolved against the experiment working
directory (the folder that holds ``<experiment id>/``); the search's own files go
to ``<experiment dir>/hwaware/``. Under NNI the tuner writes only inside the
experiment working directory, so a config cannot make it overwrite other files.
"""

from __future__ import annotations

import os
from pathlib import Path

from nni_hwaware.errors import HwAwareError

__all__ = ["PROXY_SCORES", "experiment_root", "output_dir", "resolve", "writable"]

#: The zero-cost proxy's scores a search writes beside its report (PPO option ``proxy_scores`` reads one back).
PROXY_SCORES = "proxy_scores.csv"


def experiment_root() -> Path | None:
    """The experiment working directory when running as NNI's tuner (its log dir is ``<root>/<id>/log``)."""
    log_dir = os.environ.get("NNI_LOG_DIRECTORY")
    return Path(log_dir).resolve().parent.parent if log_dir else None


def resolve(path: str) -> Path:
    candidate = Path(path).expanduser()
    if candidate.is_absolute():
        return candidate
    return (experiment_root() or Path.cwd()) / candidate


def writable(path: Path, what: str) -> Path:
    """``path``, if the tuner may write it: under NNI, inside the experiment working directory."""
    root = experiment_root()
    if root is not None and not path.resolve().is_relative_to(root):
        raise HwAwareError(f"{what} {path} is outside the experiment working directory {root}; the tuner "
                           "writes only inside it: use a relative path (or create the file beforehand)")
    return path


def output_dir() -> Path:
    """``<experiment dir>/hwaware`` under NNI, ``./hwaware-outputs`` otherwise."""
    log_dir = os.environ.get("NNI_LOG_DIRECTORY")
    return Path(log_dir).resolve().parent / "hwaware" if log_dir else Path.cwd() / "hwaware-outputs"


def tuner_files(space: str, table: str | None, state_file: str | None) -> tuple[str, str, str | None, Path]:
    """The space (a JSON file resolved), the cost table, the state file and the output directory of a
    tuner; a file the tuner would write outside the experiment working directory is an error."""
    out = output_dir()
    if space.endswith(".json"):
        space = str(resolve(space))
    table = str(resolve(table)) if table else str(out / "cost_table.csv")
    if not Path(table).exists():  # profiled at start and written there
        writable(Path(table), "cost table")
    if state_file:
        state_file = str(writable(resolve(state_file), "state_file"))
    elif experiment_root() is not None:
        state_file = str(out / "ppo_state.pt")
    return space, table, state_file, out
