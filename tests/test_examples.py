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
    template["tuner"]["classArgs"].update(search_trials=4, train={"epochs": 1, "threads": 1},
                                          retrain={"epochs": 1, "threads": 1}, profile_seconds=5)
    # four trainings leave the shipped 1.5 measurements a training 2 to spend on networks measured over,
    # which a busy machine's noise may use up before the fourth training: this run allows more
    template["tuner"]["classArgs"]["ppo"] = {**template["tuner"]["classArgs"]["ppo"], "measurements_per_training": 3}
    from nni_hwaware.strategies.ppo.job import PPOJob

    # the trainings, the screening trials (at most one a measurement) and the retraining: check-config's figure
    template["maxTrialNumber"] = PPOJob.from_dict(template["tuner"]["classArgs"]).max_trials()
    config = write_config(template, tmp_path / "config.yml", tmp_path / "nni-experiments")
    env = dict(os.environ, PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}")
    with create_experiment(config, env=env) as experiment:
        assert experiment.wait(timeout=600) == "DONE", experiment.describe()
        metrics = experiment.final_metrics()
        report = experiment.experiment_dir / "hwaware" / "report"
    # screening trials measured the candidates; only those measured to fit were trained (four trainings)
    screens = [m for m in metrics if m.get("screening")]
    assert screens and all(m["measured"] >= 1 and m["default"] == 0 for m in screens)
    assert {m.get("measured_in") for m in metrics if not m.get("retrain")} == {"onnxruntime"}  # config.yml's runtime
    search = [m for m in metrics if not m.get("retrain") and not m.get("screening")]
    assert len(search) == 4 and all({"latency_ms", "memory_mb", "flops", "params", "arch"} <= set(m) for m in search)
    final = [m for m in metrics if m.get("retrain")]
    assert len(final) == 1 and 0 < final[0]["latency_ratio"] and 0 < final[0]["memory_ratio"]
    assert final[0]["latency_ratio_ci95_low"] <= final[0]["latency_ratio"] <= final[0]["latency_ratio_ci95_high"]
    for name in ("comparison.md", "comparison.csv", "pareto.png", "accuracy_latency.png", "results.json"):
        assert (report / name).stat().st_size > 0, name  # written by the tuner, on the manager's side
    comparison = (report / "comparison.md").read_text()
    assert "latency ratio, measured interleaved" in comparison
    assert "ONNX Runtime latency ratio, found vs baseline, interleaved" in comparison
    # The found network as the user takes it home: in the retraining trial's output directory.
    import torch

    from nni_hwaware.export import exported_accuracy, load_exported, network_from_checkpoint

    delivered = Path(final[0]["deliverables_dir"])
    assert delivered.is_relative_to(experiment.experiment_dir) and delivered.name != "hwaware"
    named, net = network_from_checkpoint(delivered / "network.pt")
    shape = tuple(named.input_shape)
    with torch.inference_mode():
        assert abs(exported_accuracy(net, "digits", shape) - final[0]["default"]) < 0.001
    for fmt, name in (("onnx", "network.onnx"), ("torchscript", "network.torchscript.pt")):
        assert abs(exported_accuracy(load_exported(delivered / name, fmt), "digits", shape)
                   - final[0]["default"]) < 0.001, fmt
    assert "[network.onnx](" in comparison  # on the local service the report links the files
    from nni_hwaware.cli import main

    assert main(["export", str(experiment.experiment_dir), "--format", "onnx", "--out", str(tmp_path / "x")]) == 0
    assert abs(exported_accuracy(load_exported(tmp_path / "x" / "network.onnx", "onnx"), "digits", shape)
               - final[0]["default"]) < 0.001  # the experiment's trained network, found from its id or folder
    results = json.loads((report / "results.json").read_text())
    assert len(results["trials"]) == 4
    # both costs are budgeted, like the seed's result: the found network fits both (as predicted)
    budget = results["budget"]
    assert set(budget) == {"latency_ms", "memory_mb"}
    assert results["best"]["predicted_latency_ms"] <= budget["latency_ms"] * (1 + 1e-9)
    assert results["best"]["predicted_memory_mb"] <= budget["memory_mb"] * (1 + 1e-9)
    assert (tmp_path / "nni-experiments" / "cost_table_digits.csv").exists()  # loaded next time


def test_python_api_example_quick() -> None:
    spec = importlib.util.spec_from_file_location("python_api", ROOT / "examples" / "python_api.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    out = module.main(["--quick"])
    assert out["ppo"]["trials"] == 3
    if out["ppo"]["best_arch"] is None:  # the example says so in one line; every trial was over
        assert out["ppo"]["measured_over_budget"] == 3
    else:
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


@pytest.mark.parametrize("name", ["gumbel.yml", "gumbel_nnictl.yml"])
def test_cifar_gumbel_configs_load(name: str) -> None:
    """The CIFAR-10 Gumbel configs parse into their typed configs (running them needs the data)."""
    path = ROOT / "examples/cifar10_resnet50" / name
    if name == "gumbel.yml":
        from nni_hwaware.strategies.gumbel.job_config import GumbelSearchConfig

        config = GumbelSearchConfig.from_yaml(path)
        assert config.space == "cifar10_resnet50" and config.stages.split == 8
    else:
        config = yaml.safe_load(path.read_text())
        assert config["trialCommand"] == "python -m nni_hwaware.strategies.gumbel.trial --config gumbel.yml"


@pytest.mark.parametrize(
    ("change", "message"),
    # a typo in every section of the search job, each one line before anything starts
    [({"space": "imagenet"}, "unknown space 'imagenet'"),
     ({"space_args": {"widht": 2}}, "widht"),
     ({"budjet": {}}, "unknown tuner classArgs keys ['budjet']"),
     ({"batch_size": "one"}, "cost batch_size must be an integer >= 1"),
     ({"profile_seconds": 0}, "profile_seconds must be a positive number of seconds"),
     ({"budget": {"latency_mss": "60%"}}, "unknown budget keys ['latency_mss']"),
     ({"budget": {"memory_mb": "60"}}, "budget memory_mb must be a positive number or a percentage"),
     ({"prune": {"mode": "top-k", "topp": 4}}, "unknown prune options ['topp']"),
     ({"prune": {"mode": "top-k"}}, "prune mode top-k needs top"),
     ({"ppo": {"sed": 1}}, "unknown PPO options ['sed']"),
     ({"train": {"epochz": 1}}, "unknown training options ['epochz']"),
     ({"retrain": {"epocs": 1}}, "unknown training options ['epocs']"),
     ({"search_trials": 0}, "search_trials must be an integer >= 1"),
     ({"budget": {"latency_ms": 1e-6}}, "no architecture of space 'digits' fits the budget")],
)
def test_check_config_names_what_is_wrong(tmp_path: Path, change: dict, message: str,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    from nni_hwaware.cli import main

    template = _absolute(yaml.safe_load((ROOT / "config.yml").read_text()), ROOT)
    template["experimentWorkingDirectory"] = str(tmp_path)
    template["tuner"]["classArgs"].update(change)
    if "budget" in change:  # the budget is checked against the table, when there is one
        from nni_hwaware.cost_model import profile_space
        from nni_hwaware.spaces import get_space_config

        profile_space(get_space_config("digits"), progress=False, calibration_samples=0,
                      max_seconds=0.2).save(tmp_path / "cost_table_digits.csv")
    (tmp_path / "config.yml").write_text(yaml.safe_dump(template))
    assert main(["check-config", str(tmp_path / "config.yml")]) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and len(err.splitlines()) == 1
