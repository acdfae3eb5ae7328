"""Every shipped example and the top-level config.yml, run the way a user runs them (smaller)."""

from __future__ import annotations

import importlib.util
import json
import os
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.slow


def _absolute(template: dict, base: Path) -> dict:
    template["searchSpaceFile"] = str(base / template["searchSpaceFile"])
    template["trialCodeDirectory"] = str(base / template.get("trialCodeDirectory", "."))
    template["tuner"]["codeDirectory"] = str(base / template["tuner"].get("codeDirectory", "."))
    return template


@pytest.mark.nnictl
def test_main_job_config_runs_to_the_report(tmp_path: Path) -> None:
    """config.yml as shipped, with fewer and shorter trials: table, pruning, PPO, retrain, report."""
    from nni_hwaware.experiment import create_experiment, write_config
    from nni_hwaware.experiment.check import check_config

    assert check_config(ROOT / "config.yml")  # the shipped file passes its own check
    template = _absolute(yaml.safe_load((ROOT / "config.yml").read_text()), ROOT)
    template["trialCommand"] = template["trialCommand"].replace("--epochs 10", "--epochs 1")
    template["maxTrialNumber"] = 5
    template["tuner"]["classArgs"].update(search_trials=4, retrain={"epochs": 1, "threads": 1})
    config = write_config(template, tmp_path / "config.yml", tmp_path / "nni-experiments")
    env = dict(os.environ, PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}")
    with create_experiment(config, env=env) as experiment:
        assert experiment.wait(timeout=600) == "DONE", experiment.describe()
        metrics = experiment.final_metrics()
        report = experiment.experiment_dir / "hwaware" / "report"
    search = [m for m in metrics if not m.get("retrain")]
    assert len(search) == 4 and all({"latency_ms", "memory_mb", "flops", "params", "arch"} <= set(m) for m in search)
    final = [m for m in metrics if m.get("retrain")]
    assert len(final) == 1 and final[0]["report"] == str(report / "comparison.md")
    for name in ("comparison.md", "comparison.csv", "pareto.png", "accuracy_latency.png", "results.json"):
        assert (report / name).stat().st_size > 0, name
    results = json.loads((report / "results.json").read_text())
    assert len(results["trials"]) == 4
    assert (tmp_path / "nni-experiments" / "cost_table_digits.csv").exists()  # loaded next time


def test_python_api_example_quick() -> None:
    spec = importlib.util.spec_from_file_location("python_api", ROOT / "examples" / "python_api.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    out = module.main(["--quick"])
    assert out["ppo"]["trials"] == 3
    assert 0 < out["ppo"]["best_val_top1"] <= 1
    if "gumbel" in out:
        assert set(out["gumbel"]["arch"]) == {f"layer{s}_{i}" for s in range(1, 5) for i in range(2)}


def test_profile_chips_remote_config_names_the_profiling_trial() -> None:
    """The remote config needs real boards; check what it runs and how it is laid out."""
    config = yaml.safe_load((ROOT / "examples/profile_chips/config.yml").read_text())
    assert config["trainingService"]["platform"] == "remote"
    assert len(config["trainingService"]["machineList"]) == config["trialConcurrency"] == config["maxTrialNumber"]
    assert config["trialCommand"].startswith("python -m nni_hwaware.trial.profile_chip --space ")
    assert importlib.util.find_spec("nni_hwaware.trial.profile_chip") is not None


def test_cifar_example_config_checks_and_runs_when_the_data_is_there() -> None:
    from nni_hwaware.experiment.check import check_config

    notes = check_config(ROOT / "examples/cifar10_resnet50/ppo.yml")
    assert any("no cost table yet" in note for note in notes)
    data = ROOT / "examples/cifar10_resnet50/data/cifar10"
    if not (data / "cifar-10-batches-py").is_dir():
        pytest.skip(f"CIFAR-10 is not in {data} (nothing is downloaded); running it needs the data and a GPU")
    from nni_hwaware.spaces.data import make_dataset

    assert len(make_dataset("cifar10", "train", data_dir=str(data))) == 40_000
