"""The PPO adapters in real NNI experiments: NasExperiment (Strategy) and nnictl (Tuner)."""

from __future__ import annotations

import json
import shlex
import sys
from pathlib import Path

import pytest

from nni_hwaware.cost_model import profile_space
from nni_hwaware.experiment import free_port
from nni_hwaware.spaces import get_space_config

pytestmark = pytest.mark.slow
TRAIN = {"epochs": 1, "threads": 1}


@pytest.fixture(scope="module")
def table(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("ppo") / "digits_tiny.csv"
    profile_space(get_space_config("digits_tiny"), progress=False, calibration_samples=0,
                  max_seconds=0.5).save(path)
    return path


def test_strategy_under_nas_experiment(table: Path, tmp_path: Path) -> None:
    from nni.nas.experiment import NasExperiment, NasExperimentConfig

    from nni_hwaware.spaces import BlockChoiceSpace
    from nni_hwaware.strategies.evaluator import hardware_evaluator
    from nni_hwaware.strategies.ppo.strategy import PPOStrategy

    config = get_space_config("digits_tiny")
    strategy = PPOStrategy("digits_tiny", str(table), budget={"latency_ms": "100%"},
                           ppo={"seed": 0, "update_every": 2})
    experiment = NasExperiment(BlockChoiceSpace(config.to_dict()),
                               hardware_evaluator("digits_tiny", train=TRAIN), strategy,  # no table: the
                               NasExperimentConfig("sequential", "raw"))                 # samples carry costs
    experiment.config.max_trial_number = 4
    experiment.config.experiment_working_directory = str(tmp_path)
    try:
        experiment.run(port=free_port())  # not 8080: tests run two at a time
    finally:
        experiment.stop()
    search = strategy.tuner.search
    # four results: trainings, and networks measured over the budget first (a measurement, not a training)
    assert len(search.history.order) + len(search.history.screened) == 4 == search.measurements
    assert search.trainings == len(search.history.order)
    for record in strategy.tuner.records.results:  # the predicted costs are the table's, sent with the sample
        assert record["predicted_latency_ms"] == pytest.approx(strategy.tuner.model.predict(record["arch"]).latency_ms)
        assert record["latency_ms"] > 0 and record["latency_ms"] != record["predicted_latency_ms"]  # measured here
        assert record["latency_ratio"] > 0  # against the space's reference network, in the same rounds
    for key, reward in {**search.history.rewards, **search.history.screened}.items():
        # its accuracy, or the failure reward where it measured over the budget (at 100 % of the
        # reference, a network timed a little slower than the table says is over)
        assert 0.0 < reward <= 1.0 if search.measured_within(key) else reward == search.config.failure_reward
    assert any(reward > 0.0 for reward in search.history.rewards.values())
    state = strategy.state_dict()
    assert len(state["ppo"]["history"]) + len(state["ppo"]["screened"]) == 4
    assert "PPOStrategy(space='digits_tiny'" in repr(strategy)

    resumed = PPOStrategy("digits_tiny", str(table), budget={"latency_ms": "100%"},
                          ppo={"seed": 0, "update_every": 2})
    resumed.load_state_dict(state)
    assert resumed.tuner.initial_state is state["ppo"]


@pytest.mark.nnictl
def test_tuner_under_nnictl_with_concurrency_2(table: Path, tmp_path: Path) -> None:
    from nni_hwaware.experiment import create_experiment, write_config

    config = get_space_config("digits_tiny")
    search_space = {s.label: {"_type": "choice", "_value": list(s.candidates)} for s in config.layer_specs()}
    (tmp_path / "search_space.json").write_text(json.dumps(search_space))
    state = tmp_path / "experiments" / "ppo_state.pt"  # the tuner writes only inside the working directory
    template = {
        "searchSpaceFile": str(tmp_path / "search_space.json"),
        "trialCommand": f"{shlex.quote(sys.executable)} -m nni_hwaware.trial --space digits_tiny "
                        f"--table {shlex.quote(str(table))} --train '{json.dumps(TRAIN)}'",
        "trialCodeDirectory": str(tmp_path),
        "trialConcurrency": 2,
        "maxTrialNumber": 4,
        "tuner": {"codeDirectory": str(tmp_path), "className": "nni_hwaware.strategies.ppo.tuner.PPOTuner",
                  "classArgs": {"space": "digits_tiny", "table": str(table),
                                "budget": {"latency_ms": "100%"}, "ppo": {"seed": 0, "update_every": 2},
                                "state_file": "ppo_state.pt"}},
        "trainingService": {"platform": "local"},
    }
    path = write_config(template, tmp_path / "config.yml", tmp_path / "experiments")
    with create_experiment(path) as experiment:
        assert experiment.wait(timeout=300) == "DONE", experiment.describe()
        jobs = experiment.trial_jobs()
        metrics = experiment.final_metrics()
    assert len(jobs) == 4 and all(job["status"] == "SUCCEEDED" for job in jobs)
    archs = [json.loads(m["arch"]) for m in metrics]
    assert len({tuple(a.values()) for a in archs}) == 4  # no architecture trained twice
    assert all({"latency_ms", "memory_mb", "flops", "params", "latency_ratio"} <= set(m) for m in metrics)
    # a trial trains its network, or measured it over the budget and reports that without training
    assert all(("val_top3" in m) != bool(m.get("not_trained")) for m in metrics)
    assert all(m["default"] == 0.0 for m in metrics if m.get("not_trained"))
    from nni_hwaware.strategies.ppo.records import load_state

    saved = load_state(str(state))  # the trainings and the networks measured over the budget
    assert sorted(tuple(k) for k, _ in [*saved["history"], *saved["screened"]]) == sorted(
        tuple(config.layer_specs()[i].candidates.index(a[s.label]) for i, s in enumerate(config.layer_specs()))
        for a in archs)
