"""Files from others (cost tables, architectures, configs, saved states) are parsed, never run.

Each test plants a pickle or YAML payload that would create a marker file if it were
executed, feeds it where the package reads that kind of file, and checks for a
one-line error and no marker.
"""

from __future__ import annotations

import pickle
import re
from pathlib import Path

import pytest

from nni_hwaware.errors import HwAwareError

PACKAGE = Path(__file__).resolve().parents[1] / "nni_hwaware"


class _Payload:
    """Unpickling this runs ``Path(marker).touch()``."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple:
        return (Path.touch, (self.marker,))


def _plant(path: Path, marker: Path) -> Path:
    path.write_bytes(pickle.dumps(_Payload(marker)))
    return path


@pytest.mark.parametrize("name", ["table.csv", "table.pkl", "table.parquet"])
def test_a_pickled_cost_table_is_refused_and_not_run(tmp_path: Path, name: str) -> None:
    from nni_hwaware.cost_table import CostTable

    marker = tmp_path / "ran"
    with pytest.raises(HwAwareError) as err:
        CostTable.load(_plant(tmp_path / name, marker))
    assert "\n" not in str(err.value) and not marker.exists()


def test_a_pickled_architecture_is_refused_and_not_run(tmp_path: Path) -> None:
    from nni_hwaware.spaces import get_space_config
    from nni_hwaware.spaces.io import load_architecture

    marker = tmp_path / "ran"
    with pytest.raises(HwAwareError, match=r"architecture file .* is not valid JSON"):
        load_architecture(_plant(tmp_path / "arch.json", marker), get_space_config("digits_tiny"))
    assert not marker.exists()


def test_a_pickled_ppo_state_is_refused_and_not_run(tmp_path: Path) -> None:
    from handmade import tiny_config, tiny_table

    from nni_hwaware.strategies.ppo.tuner import PPOTuner

    marker = tmp_path / "ran"
    tiny_table().save(tmp_path / "t.csv")
    (tmp_path / "space.json").write_text(tiny_config().to_json())
    tuner = PPOTuner(str(tmp_path / "space.json"), str(tmp_path / "t.csv"),
                     state_file=str(_plant(tmp_path / "ppo_state.pt", marker)))
    with pytest.raises(HwAwareError, match=r"cannot read the PPO state .* delete it to start the search afresh"):
        tuner.update_search_space({"layer1_0": {"_type": "choice", "_value": ["skip"]},
                                   "layer2_0": {"_type": "choice", "_value": ["skip"]}})
    assert not marker.exists()


def test_yaml_tags_that_build_objects_are_refused(tmp_path: Path) -> None:
    from nni_hwaware.experiment.check import check_config
    from nni_hwaware.strategies.gumbel.job_config import GumbelSearchConfig

    marker = tmp_path / "ran"
    path = tmp_path / "config.yml"
    path.write_text(f"search: !!python/object/apply:pathlib.Path.touch [{str(marker)!r}]\n")
    for load in (GumbelSearchConfig.from_yaml, check_config):
        with pytest.raises(HwAwareError, match="is not valid YAML") as err:
            load(path)
        assert "\n" not in str(err.value)
    assert not marker.exists()


def test_the_package_has_no_unsafe_loader() -> None:
    """No pickle, no unsafe YAML, and every torch.load with weights_only=True."""
    unsafe = re.compile(r"\bpickle\.loads?\(|\byaml\.(unsafe_)?load\(|\bread_pickle\(|allow_pickle=True|"
                        r"\bdill\b|\bmarshal\.loads?\(")
    torch_load = re.compile(r"torch\.load\((?![^)]*weights_only=True)")
    found = []
    for path in PACKAGE.rglob("*.py"):
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if unsafe.search(line) or torch_load.search(line):
                found.append(f"{path.relative_to(PACKAGE)}:{number}: {line.strip()}")
    assert found == []


def test_trials_write_only_inside_their_experiment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from nni_hwaware.trial.paths import inside_experiment

    trial_dir = tmp_path / "work" / "EXP1" / "environments" / "local-env" / "trials" / "T1"
    monkeypatch.setenv("NNI_OUTPUT_DIR", str(trial_dir))
    monkeypatch.setenv("NNI_EXP_ID", "EXP1")
    assert inside_experiment(tmp_path / "work" / "EXP1" / "hwaware" / "report", "x").name == "report"
    for escape in (tmp_path / "work" / "EXP1" / ".." / "EXP2", Path("/etc/cron.d"), trial_dir / "../../../../../x"):
        with pytest.raises(HwAwareError, match="is not inside this experiment's directory"):
            inside_experiment(escape, "parameter _output_dir")
    monkeypatch.delenv("NNI_EXP_ID")
    with pytest.raises(HwAwareError, match="not run by NNI"):
        inside_experiment(trial_dir, "--out")


def test_a_ppo_state_whose_plain_part_names_a_global_is_refused_and_not_run(tmp_path: Path) -> None:
    """The plain entries of a saved state are read by an unpickler that refuses every global."""
    import torch

    from nni_hwaware.strategies.ppo.records import PLAIN_KEY, load_state

    marker = tmp_path / "ran"
    path = tmp_path / "ppo_state.pt"
    torch.save({"policy": {"w": torch.zeros(2)}, PLAIN_KEY: {"history": pickle.dumps(_Payload(marker))}}, path)
    with pytest.raises(HwAwareError, match=r"cannot read the PPO state .* delete it to start the search afresh") as err:
        load_state(str(path))
    assert "\n" not in str(err.value) and not marker.exists()
