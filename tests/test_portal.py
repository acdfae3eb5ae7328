"""NNI's manager listens on 127.0.0.1 only, unless the user opts in (real experiments)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from nni_hwaware.experiment import RunningExperiment, free_port, write_config
from nni_hwaware.experiment.portal import listening_addresses, local_portal, portal_env

CLI = [str(Path(sys.executable).parent / "nni-hwaware")]  # the installed console script
LOOPBACK = {"127.0.0.1", "::1"}


def _tiny_hpo(tmp_path: Path) -> dict:
    """An experiment that starts quickly and stays up: one trial that sleeps."""
    return {"searchSpace": {"x": {"_type": "choice", "_value": [1]}},
            "trialCommand": f"{sys.executable} -c 'import time; time.sleep(600)'",
            "trialCodeDirectory": str(tmp_path), "trialConcurrency": 1, "maxTrialNumber": 1,
            "tuner": {"name": "Random"}, "trainingService": {"platform": "local"}}


def _cli_create(tmp_path: Path, *extra: str) -> tuple[subprocess.CompletedProcess, RunningExperiment]:
    workdir = tmp_path / "experiments"
    path = write_config(_tiny_hpo(tmp_path), tmp_path / "config.yml", workdir)
    port = free_port()
    env = {**os.environ, "HOME": str(workdir / "home")}
    Path(env["HOME"]).mkdir(parents=True, exist_ok=True)
    done = subprocess.run([*CLI, "create", "--config", str(path), "--port", str(port), *extra],
                          env=env, capture_output=True, text=True, timeout=180)
    found = re.search(r"Experiment ID:\s*\x1b?\[?[0-9;]*m?(\w+)", done.stdout)
    assert done.returncode == 0 and found, done.stdout + done.stderr
    return done, RunningExperiment(found.group(1), port, workdir, env)


@pytest.mark.slow
@pytest.mark.nnictl
def test_cli_create_keeps_the_portal_on_loopback(tmp_path: Path) -> None:
    done, experiment = _cli_create(tmp_path)
    with experiment:
        assert set(listening_addresses(experiment.port)) <= LOOPBACK
        assert listening_addresses(experiment.port)
        assert experiment.status() in ("RUNNING", "NO_MORE_TRIAL")  # the REST API answers on 127.0.0.1
    assert f"web portal: http://127.0.0.1:{experiment.port} (this machine only" in done.stdout
    assert "web portal will listen on every network interface" not in done.stderr


@pytest.mark.slow
@pytest.mark.nnictl
def test_cli_create_expose_listens_everywhere_with_a_warning(tmp_path: Path) -> None:
    done, experiment = _cli_create(tmp_path, "--expose")
    with experiment:
        addresses = set(listening_addresses(experiment.port))
    assert addresses & {"0.0.0.0", "::"}, addresses
    assert "warning: the NNI web portal will listen on every network interface" in done.stderr
    assert "no authentication" in done.stderr


@pytest.mark.slow
@pytest.mark.nnictl
def test_python_api_experiments_keep_the_portal_on_loopback(tmp_path: Path) -> None:
    from nni.experiment import Experiment, ExperimentConfig

    template = _tiny_hpo(tmp_path)
    config = ExperimentConfig(**{k: v for k, v in template.items() if k != "tuner"},
                              tuner={"name": "Random"}, experimentWorkingDirectory=str(tmp_path / "exp"))
    experiment = Experiment(config)
    port = free_port()
    with local_portal():
        experiment.start(port)
    try:
        assert listening_addresses(port) and set(listening_addresses(port)) <= LOOPBACK
    finally:
        experiment.stop()
    assert "NODE_OPTIONS" not in os.environ or "bind_local" not in os.environ["NODE_OPTIONS"]


def test_create_refuses_remote_training_services_unless_exposed(tmp_path: Path) -> None:
    template = {**_tiny_hpo(tmp_path), "trainingService": {"platform": "remote", "machineList": []}}
    path = tmp_path / "remote.yml"
    path.write_text(yaml.safe_dump(template))
    done = subprocess.run([*CLI, "create", "--config", str(path)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        "nni-hwaware create: error: training service remote runs trials on other machines, which must reach "
        "the manager: add --expose (the portal then listens on every interface)"]


def test_portal_env_adds_and_removes_only_its_own_preload() -> None:
    env = portal_env({"NODE_OPTIONS": "--max-old-space-size=100"})
    assert env["NODE_OPTIONS"].startswith("--max-old-space-size=100 --require ")
    assert "bind_local.js" in env["NODE_OPTIONS"]
    assert portal_env(portal_env(env))["NODE_OPTIONS"] == env["NODE_OPTIONS"]  # idempotent
    assert portal_env(env, expose=True)["NODE_OPTIONS"] == "--max-old-space-size=100"
    assert "NODE_OPTIONS" not in portal_env({}, expose=True)


def test_the_preload_binds_a_port_only_server_to_loopback(tmp_path: Path) -> None:
    import nni_node

    node = Path(nni_node.__path__[0]) / "node"
    script = ("const s=require('net').createServer();"
              "s.listen(0,()=>{console.log(s.address().address);s.close();});")
    for expose, expected in ((False, "127.0.0.1"), (True, None)):
        out = subprocess.run([str(node), "-e", script], env=portal_env(expose=expose),
                             capture_output=True, text=True, timeout=30).stdout.strip()
        assert (out == expected) if expected else out in ("::", "0.0.0.0")
