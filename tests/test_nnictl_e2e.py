"""End to end through real NNI machinery: ``nnictl create`` a tiny HPO experiment.

A Random tuner draws 3 configurations of ``tests/data/nnictl_smoke/search_space.json``;
NNI's local training service runs ``trial.py`` with this test's interpreter, 2 at a
time; each trial reports 3 intermediate results and a final dict metric. The test
reads the manager's REST API, checks every value against ``trial.py``'s own
``compute_metrics``, checks the manager listens on 127.0.0.1 only, stops the
experiment by id, checks that the port is closed and that nothing went to the
user's home. Takes about 15 s.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shlex
import socket
import sys
from pathlib import Path
from types import ModuleType

import pytest

from nni_hwaware.experiment import create_experiment, parse_metric, port_open, write_config

pytestmark = [pytest.mark.nnictl, pytest.mark.slow]

DATA = Path(__file__).parent / "data" / "nnictl_smoke"
N_TRIALS = 3
COST_KEYS = {"default", "latency_ms", "memory_mb"}


def _trial_module() -> ModuleType:
    spec = importlib.util.spec_from_file_location("nnictl_smoke_trial", DATA / "trial.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _registered_ids(home: Path) -> set[str]:
    registry = home / "nni-experiments" / ".experiment"
    return set(json.loads(registry.read_text() or "{}")) if registry.is_file() else set()


def _external_ipv4() -> list[str]:
    """This machine's IPv4 addresses other than loopback."""
    psutil = pytest.importorskip("psutil")  # an NNI dependency
    return [
        addr.address
        for addrs in psutil.net_if_addrs().values()
        for addr in addrs
        if addr.family == socket.AF_INET and not addr.address.startswith("127.")
    ]


def _accepts(host: str, port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.settimeout(1.0)
        return sock.connect_ex((host, port)) == 0


def test_nnictl_hpo_smoke(tmp_path: Path) -> None:
    trial = _trial_module()
    user_home = Path(os.path.expanduser("~"))
    user_home_had_nni = (user_home / "nni-experiments").exists()
    template = {
        "experimentName": "nni-hwaware-smoke",
        "searchSpaceFile": str(DATA / "search_space.json"),
        "trialCommand": f"{shlex.quote(sys.executable)} trial.py",
        "trialCodeDirectory": str(DATA),
        "trialConcurrency": 2,
        "maxTrialNumber": N_TRIALS,
        "maxExperimentDuration": "5m",
        "tuner": {"name": "Random", "classArgs": {"seed": 7}},
        "trainingService": {"platform": "local"},
    }
    config = write_config(template, tmp_path / "config.yml", tmp_path / "experiments")

    with create_experiment(config, timeout=60) as exp:
        port = exp.port
        assert port_open(port)
        assert exp.experiment_dir.is_dir()
        # local_only (default): the manager does not listen on other interfaces
        for host in _external_ipv4():
            assert not _accepts(host, port), f"NNI manager reachable on {host}:{port}"
        # a predicate ends the wait early ...
        exp.wait(until=lambda e: bool(e.trial_jobs()), timeout=30, poll=0.2)
        # ... and without one it lasts until the experiment is over
        assert exp.wait(timeout=60, poll=0.5) == "DONE", exp.describe()

        jobs = exp.trial_jobs()
        assert len(jobs) == N_TRIALS, exp.describe()
        assert all(job["status"] == "SUCCEEDED" for job in jobs), exp.describe()
        # NNI 3.0 can list a trial's metric next to another trial's parameters
        # (microsoft/nni#5726), so pair metrics and parameters by parameter id.
        params = {}
        for job in jobs:
            hyper = json.loads(job["hyperParameters"][-1])
            params[int(hyper["parameter_id"])] = hyper["parameters"]
        assert len(params) == N_TRIALS

        for job in jobs:
            (final,) = job["finalMetricData"]
            scores, expected = trial.compute_metrics(params[int(final["parameterId"])])
            metric = parse_metric(final["data"])
            assert json.loads(json.loads(final["data"])) == metric  # double-encoded JSON
            assert metric.keys() >= COST_KEYS
            assert metric["default"] == pytest.approx(expected["default"], abs=2e-6)
            assert {**metric, "default": None} == {**expected, "default": None}
            # the same trial's intermediate results, in the order reported
            data = exp.rest(f"metric-data/{job['trialJobId']}")
            periodical = sorted(
                (m for m in data if m["type"] == "PERIODICAL"), key=lambda m: int(m["sequence"])
            )
            reported = [parse_metric(m["data"])["default"] for m in periodical]
            assert reported == pytest.approx(scores, abs=2e-6)

        metrics = exp.final_metrics()
        assert len(metrics) == N_TRIALS
        assert all(m.keys() >= COST_KEYS for m in metrics)

        exp.stop()
        assert not port_open(port)

    # nnictl's experiment registry went to the run's own HOME, nothing to the user's
    run_home = Path(exp.env["HOME"])
    assert run_home != user_home
    assert run_home.is_relative_to(tmp_path)
    assert exp.id in _registered_ids(run_home)
    assert not (run_home / "nni-experiments" / exp.id).exists()
    assert exp.id not in _registered_ids(user_home)
    assert not (user_home / "nni-experiments" / exp.id).exists()
    if not user_home_had_nni:
        assert not (user_home / "nni-experiments").exists()
