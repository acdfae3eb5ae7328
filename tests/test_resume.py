"""A PPO search killed mid-run and resumed with ``nnictl resume`` (real NNI experiments)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from experiments import final_archs, ppo_template

from nni_hwaware.errors import HwAwareError
from nni_hwaware.experiment import RunningExperiment, create_experiment, write_config
from nni_hwaware.strategies.ppo.records import load_state

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
    saved = load_state(str(state_file))
    learned_before = {tuple(k) for k, _ in saved["history"]}
    assert len(before) >= 3 and set(before.values()) <= {_names(k) for k in learned_before}

    with experiment.resume() as resumed:
        assert resumed.wait(timeout=400) in ("DONE", "TUNER_NO_MORE_TRIAL"), resumed.describe()
        jobs = resumed.trial_jobs()
    archs = final_archs(jobs)
    assert len(jobs) == 8 and all(job["status"] == "SUCCEEDED" for job in jobs), resumed.describe()
    assert len(archs) == 8 and len(set(archs.values())) == 8  # no architecture trained twice
    assert {archs[trial] for trial in before} == set(before.values())  # results before the kill kept
    saved = load_state(str(state_file))
    assert learned_before <= {tuple(k) for k, _ in saved["history"]}
    assert len(saved["history"]) == 8  # the trials before the kill are counted
    log = (experiment.experiment_dir / "log" / "dispatcher.log").read_text()
    assert "resumed the PPO search:" in log


def test_killed_nas_experiment_resumes_from_the_state_file(tmp_path: Path) -> None:
    import re
    import subprocess
    import sys
    import time

    script = [sys.executable, str(Path(__file__).with_name("nas_experiment_run.py")), str(tmp_path)]
    state_file = tmp_path / "ppo_state.pt"
    first = subprocess.Popen([*script, "6"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    deadline = time.monotonic() + 240
    history: list = []
    while time.monotonic() < deadline and len(history) < 2:
        time.sleep(0.5)
        if state_file.is_file():
            try:
                history = load_state(str(state_file))["history"]
            except (HwAwareError, KeyError):
                history = []
    first.kill()  # as a crash would: no checkpoint at stop
    output = first.communicate()[0]
    before = {tuple(k) for k, _ in history}
    assert len(before) >= 2, output
    experiment_id = re.search(r"experiment id: (\w+)", output).group(1)
    done = subprocess.run([*script, "6", experiment_id], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    saved = load_state(str(state_file))
    keys = [tuple(k) for k, _ in saved["history"]]
    assert before <= set(keys) and len(keys) == len(set(keys))  # kept, none trained twice
    assert len(keys) >= 6 - 1  # the run continued (the model killed mid-training is not rerun)


def _nnictl_import(experiment: RunningExperiment, results: Path, attempts: int = 3) -> None:
    """``nnictl experiment import``, again until the tuner logs the import. nnictl exits 0 when the import
    does not reach the tuner (NNI's manager refuses it until the tuner is set up; nnictl gives the REST
    server 5 seconds): on a busy machine an import right after the start once never reached it."""
    import subprocess
    import time

    from nni_hwaware.experiment import nnictl_path

    log = experiment.experiment_dir / "log" / "dispatcher.log"
    said = ""
    for _ in range(attempts):
        done = subprocess.run([nnictl_path(), "experiment", "import", experiment.id, "--filename", str(results)],
                              env=experiment.env, check=True, capture_output=True, text=True)
        said += done.stdout + done.stderr
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if log.is_file() and "imported " in log.read_text():
                return
            time.sleep(0.5)
    raise AssertionError(f"nnictl experiment import did not reach the tuner in {attempts} tries: {said}")


def test_a_search_warm_starts_from_an_earlier_experiments_results(tmp_path: Path) -> None:
    """``nnictl experiment export`` one search, ``nnictl experiment import`` it into the next."""
    import subprocess

    from nni_hwaware.experiment import nnictl_path

    first = write_config(ppo_template(tmp_path, trials=3), tmp_path / "first.yml", tmp_path / "experiments")
    with create_experiment(first) as earlier:
        assert earlier.wait(timeout=300) == "DONE", earlier.describe()
        exported = tmp_path / "results.json"
        subprocess.run([nnictl_path(), "experiment", "export", earlier.id, "--type", "json",
                        "--filename", str(exported)], env=earlier.env, check=True, capture_output=True)
        known = set(final_archs(earlier.trial_jobs()).values())
    assert len(known) == 3
    # The second search runs one trial at a time; the import lands while its first trial runs, or later
    # on a busy machine: then the results it already has count as known, not imported again.
    second = write_config(ppo_template(tmp_path, trials=3, concurrency=1), tmp_path / "second.yml",
                          tmp_path / "experiments")
    with create_experiment(second) as later:
        _nnictl_import(later, exported)
        assert later.wait(timeout=300) == "DONE", later.describe()
        jobs = sorted(later.trial_jobs(), key=lambda job: job["sequenceId"])
    archs = final_archs(jobs)
    saved = load_state(str(later.experiment_dir / "hwaware" / "ppo_state.pt"))
    assert {_names(k) for k, _ in saved["history"]} >= known  # learned the earlier results
    assert len(saved["history"]) == 3 + 3 - len(set(archs.values()) & known)
    log = (later.experiment_dir / "log" / "dispatcher.log").read_text()
    line = re.search(r"imported (\d+) results \((\d+) already known or skipped\)", log)
    assert line is not None, log
    imported, skipped = map(int, line.groups())
    assert imported + skipped == 3
    # A network of the earlier search is proposed again only before the import: finished by then (so
    # skipped as known) or the one trial running then. Every proposal after the import is new.
    assert len(set(archs.values()) & known) <= skipped + 1
