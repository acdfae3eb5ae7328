"""Small real NNI experiments of the PPO tuner on ``digits_tiny`` (a few seconds per trial)."""

from __future__ import annotations

import json
import shlex
import sys
from pathlib import Path
from typing import Any

from nni_hwaware.spaces import get_space_config

ROOT = Path(__file__).resolve().parents[1]
#: The cost table of digits_tiny shipped with the benchmarks (any chip name works: trials use it too).
TABLE = ROOT / "benchmarks" / "data" / "digits_tiny_table.csv"
TRAIN = {"epochs": 1, "threads": 1}


def trial_command(script: str = "-m nni_hwaware.trial") -> str:
    return (f"{shlex.quote(sys.executable)} {script} --space digits_tiny --table {shlex.quote(str(TABLE))} "
            f"--train '{json.dumps(TRAIN)}'")


def ppo_template(tmp_path: Path, *, trials: int, concurrency: int = 2, command: str | None = None,
                 **class_args: Any) -> dict[str, Any]:
    """An nnictl config (before :func:`write_config`) of a PPO search over digits_tiny."""
    config = get_space_config("digits_tiny")
    space = {s.label: {"_type": "choice", "_value": list(s.candidates)} for s in config.layer_specs()}
    (tmp_path / "search_space.json").write_text(json.dumps(space))
    args = {"space": "digits_tiny", "table": str(TABLE), "ppo": {"seed": 0, "update_every": 2}, **class_args}
    return {
        "searchSpaceFile": str(tmp_path / "search_space.json"),
        "trialCommand": command or trial_command(),
        "trialCodeDirectory": str(ROOT),
        "trialConcurrency": concurrency,
        "maxTrialNumber": trials,
        "tuner": {"codeDirectory": str(tmp_path), "className": "nni_hwaware.strategies.ppo.tuner.PPOTuner",
                  "classArgs": args},
        "trainingService": {"platform": "local"},
    }


def final_archs(jobs: list[dict[str, Any]]) -> dict[str, tuple[str, ...]]:
    """trial job id -> the architecture its final metric echoes (search trials that reported)."""
    from nni_hwaware.experiment import parse_metric

    found = {}
    for job in jobs:
        for metric in job.get("finalMetricData") or []:
            value = parse_metric(metric["data"])
            if "arch" in value and not value.get("retrain"):
                found[job["trialJobId"]] = tuple(sorted(json.loads(value["arch"]).items()))
    return found


def gumbel_trial_template(tmp_path: Path, name: str, alpha: float) -> dict[str, Any]:
    """A one-trial nnictl config running ``gumbel.yml`` (written by the caller into ``tmp_path``)."""
    return {
        "experimentName": name,
        "searchSpace": {"alpha": {"_type": "choice", "_value": [alpha]}},
        "trialCommand": f"{shlex.quote(sys.executable)} -m nni_hwaware.strategies.gumbel.trial --config gumbel.yml",
        "trialCodeDirectory": str(tmp_path),
        "trialConcurrency": 1,
        "maxTrialNumber": 1,
        "maxExperimentDuration": "5m",
        "tuner": {"name": "GridSearch"},
        "trainingService": {"platform": "local"},
    }
