"""check-config reads the training service as nnictl will: each bad one is one line and exit 2."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import yaml

from nni_hwaware.cli import main

ROOT = Path(__file__).resolve().parents[1]


def _config(tmp_path: Path, service: object) -> Path:
    config = yaml.safe_load((ROOT / "config.yml").read_text())
    config["searchSpaceFile"] = str(ROOT / config["searchSpaceFile"])
    config["experimentWorkingDirectory"] = str(tmp_path / "experiments")
    config["trainingService"] = service
    path = tmp_path / "config.yml"
    path.write_text(yaml.safe_dump(config))
    return path


@pytest.mark.parametrize(("service", "message"), [
    ({"platform": "remote"}, "trainingService remote needs a machineList"),
    ({"platform": "remote", "machineList": [{"user": "me", "sshKeyFile": "~/.ssh/id"}]}, "machineList[0] lacks host"),
    ({"platform": "remote", "machineList": [{"host": "10.0.0.2", "sshKeyFile": "k"}]}, "machineList[0] lacks user"),
    ({"platform": "remote", "machineList": [{"host": "10.0.0.2", "user": "me"}]}, "lacks sshKeyFile or password"),
    ({"platform": "local", "pythonPath": "/no/such/python"}, "pythonPath /no/such/python does not exist"),
    ({"platform": "kubernetes"}, "unknown trainingService platform 'kubernetes'"),
    ({"useActiveGpu": False}, "trainingService needs a platform"),
])
def test_a_training_service_that_cannot_run_is_one_line_and_exit_2(
        tmp_path: Path, service: object, message: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["check-config", str(_config(tmp_path, service))]) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and len(err.splitlines()) == 1, err
    if service.get("platform") == "remote":  # type: ignore[union-attr]
        assert "--expose" in err  # what else the user will need, in the same line


def test_a_good_remote_service_passes_with_the_expose_note(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    key = tmp_path / "id_ed25519"
    key.write_text("not a real key")
    service = {"platform": "remote", "machineList": [{"host": "10.0.0.2", "user": "me", "sshKeyFile": str(key)}]}
    assert main(["check-config", str(_config(tmp_path, service))]) == 0
    assert "--expose" in capsys.readouterr().out
    local = {"platform": "local", "pythonPath": str(Path(sys.executable).parent)}
    assert main(["check-config", str(_config(tmp_path, local))]) == 0
    assert "--expose" not in capsys.readouterr().out
