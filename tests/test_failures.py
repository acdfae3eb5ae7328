"""Trials that crash, are killed, run out of memory or diverge (NaN) in a real PPO search.

Each fault is injected into one trial of a real ``nnictl`` experiment
(``tests/faulty_trial.py``). The search must record each as failed (failure reward,
FAILED in the manager, ``status: failed`` in ``trials.json``), go on to its full
number of search trials, and end, with the final retraining trial not waiting for
the failed ones.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from experiments import ppo_template, trial_command

from nni_hwaware.experiment import create_experiment, write_config

pytestmark = [pytest.mark.slow, pytest.mark.nnictl]

FAULTS = {"0": "crash", "1": "kill", "2": "oom", "3": "nan"}


def _stderr(experiment_dir: Path, trial: str) -> str:
    return "\n".join(p.read_text(errors="replace") for p in experiment_dir.glob(f"environments/*/trials/{trial}/trial.stderr"))


def test_failed_trials_get_the_failure_reward_and_the_search_goes_on(tmp_path: Path) -> None:
    here = Path(__file__).parent
    template = ppo_template(tmp_path, trials=7, command=trial_command(str(here / "faulty_trial.py")),
                            search_trials=6, retrain={"epochs": 1, "threads": 1})
    path = write_config(template, tmp_path / "config.yml", tmp_path / "experiments")
    env = {"HWAWARE_TEST_FAULTS": json.dumps(FAULTS), "PYTHONPATH": os.pathsep.join(
        [str(here.parent), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep)}
    with create_experiment(path, env=env) as experiment:
        status = experiment.wait(timeout=400)
        jobs = sorted(experiment.trial_jobs(), key=lambda job: job["sequenceId"])
    assert status == "DONE", experiment.describe()
    states = {str(job["sequenceId"]): job["status"] for job in jobs}
    assert states == {**{seq: "FAILED" for seq in FAULTS}, "4": "SUCCEEDED", "5": "SUCCEEDED",
                      "6": "SUCCEEDED"}, experiment.describe()
    by_seq = {str(job["sequenceId"]): job["trialJobId"] for job in jobs}
    err = {fault: _stderr(experiment.experiment_dir, by_seq[seq]) for seq, fault in FAULTS.items()}
    assert "injected crash before training" in err["crash"]
    assert "nni_hwaware.trial: error: the training process was killed by SIGKILL" in err["kill"]
    assert "nni_hwaware.trial: error: out of memory (" in err["oom"]
    assert "nni_hwaware.trial: error: training loss became nan in epoch 0" in err["nan"]

    hwaware = experiment.experiment_dir / "hwaware"
    trials = json.loads((hwaware / "trials.json").read_text())
    failed = [t for t in trials if t.get("status") == "failed"]
    assert len(trials) == 6 and len(failed) == 4
    assert all(t["reward"] == 0.0 for t in failed)  # PPOConfig.failure_reward
    stats = json.loads((hwaware / "tuner_stats.json").read_text())
    assert stats["failed"] == 4 and stats["results"] == 6 and stats["arch_mismatches"] == 0
    assert (hwaware / "report" / "comparison.md").is_file()  # the retraining did not wait for them


def test_a_search_whose_trials_all_fail_ends_in_error_not_done(tmp_path: Path) -> None:
    """Every trial crashes: after the first 5 the experiment stops with ERROR and says why in one line."""
    here = Path(__file__).parent
    template = ppo_template(tmp_path, trials=9, command=trial_command(str(here / "faulty_trial.py")),
                            search_trials=8, retrain={"epochs": 1, "threads": 1})
    path = write_config(template, tmp_path / "config.yml", tmp_path / "experiments")
    env = {"HWAWARE_TEST_FAULTS": json.dumps({str(seq): "crash" for seq in range(9)}),
           "PYTHONPATH": os.pathsep.join([str(here.parent), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep)}
    with create_experiment(path, env=env) as experiment:
        status = experiment.wait(timeout=300)
        jobs = experiment.trial_jobs()
    assert status == "ERROR", experiment.describe()
    assert 5 <= len(jobs) < 9 and all(job["status"] == "FAILED" for job in jobs), experiment.describe()
    why = "nni-hwaware: the first 5 search trials all failed; see their trial.stderr"
    log_dir = experiment.experiment_dir / "log"
    lines = (log_dir / "dispatcher.log").read_text().splitlines()
    assert [line for line in lines if "ERROR (nni_hwaware.ppo" in line] and all(
        line.endswith(why) for line in lines if "ERROR (nni_hwaware.ppo" in line), lines[-5:]
    assert f"Dispatcher error: {why}" in (log_dir / "nnimanager.log").read_text()
