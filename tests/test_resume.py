"""A PPO search killed mid-run and resumed with ``nnictl resume`` (real NNI experiments)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from experiments import final_archs, ppo_template

from nni_hwaware.experiment import RunningExperiment, create_experiment, write_config

pytestmark = [pytest.mark.slow, pytest.mark.nnictl]


def _succeeded(experiment: RunningExperiment) -> int:
    return sum(job["status"] == "SUCCEEDED" for job in experiment.trial_jobs())


def _names(key: list[int] | tuple[int, ...]) -> tuple[tuple[str, str], ...]:
    from nni_hwaware.spaces import get_space_config

    specs = get_space_config("digits_tiny").layer_specs()
    return tuple(sorted((s.label, s.candidates[i]) for s, i in zip(specs, key, strict=True)))


def test_killed_search_resumes_without_proposing_finished_trials_again(tmp_path: Path) -> None:
    template = ppo_template(tmp_path, trials=8)
    path = write_config(template, tmp_path / "config.yml", tmp_path / "experiments")
    with create_experiment(path) as experiment:
        experiment.wait(lambda e: _succeeded(e) >= 3, timeout=300)
        before = final_archs(experiment.trial_jobs())
        experiment.kill()  # manager, tuner and running trials, at once
    state_file = experiment.experiment_dir / "hwaware" / "ppo_state.pt"
    saved = torch.load(state_file, weights_only=True)
    learned_before = {tuple(k) for k, _ in saved["history"]}
    assert len(before) >= 3 and set(before.values()) <= {_names(k) for k in learned_before}

    with experiment.resume() as resumed:
        assert resumed.wait(timeout=400) in ("DONE", "TUNER_NO_MORE_TRIAL"), resumed.describe()
        jobs = resumed.trial_jobs()
    archs = final_archs(jobs)
    assert len(jobs) == 8 and all(job["status"] == "SUCCEEDED" for job in jobs), resumed.describe()
    assert len(archs) == 8 and len(set(archs.values())) == 8  # no architecture trained twice
    assert {archs[trial] for trial in before} == set(before.values())  # results before the kill kept
    saved = torch.load(state_file, weights_only=True)
    assert learned_before <= {tuple(k) for k, _ in saved["history"]}
    assert len(saved["history"]) == 8  # the trials before the kill are counted
    log = (experiment.experiment_dir / "log" / "dispatcher.log").read_text()
    assert "resumed the PPO search:" in log
