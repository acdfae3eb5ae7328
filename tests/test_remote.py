"""The main job on NNI's remote training service, for real: sshd on 127.0.0.1, trials as another user.

:func:`remote_service.ssh_worker` starts Debian's sshd with a throw-away key for the
unprivileged user ``nnihwworker``. The test copies the project's code into a directory
of its own (the manager's side: ``config.yml`` there, ``experimentWorkingDirectory:
nni-experiments`` inside ``trialCodeDirectory: .``, as in the repository, plus a few
decoys of what a manager's checkout holds: ``.venv/``, ``runs/``, ``data/``, ...),
writes the repository's ``config.yml`` shrunk for time (3 search trials, 1 epoch) with
``trainingService: {platform: remote, machineList: [that worker]}`` and
``nniManagerIp: 127.0.0.1``, makes the experiment working directory unreadable to the
worker, and starts it as a user would: ``nni-hwaware create --config ... --expose``.

It checks: NNI unpacked the code on the worker with none of the manager's files (the
repository's ``.nniignore``); every trial ran as the worker user in NNI's remote
working directory; the experiment ends DONE with every trial succeeded; the tuner saw
0 architecture mismatches; the report is on the manager's side. The experiment is
stopped by id and sshd is killed whatever happens. About 2.5 minutes on 2 cores.

The worker runs this interpreter (``pythonPath`` is its directory, e.g. the virtualenv's
``bin``): it and its base interpreter must be readable and executable by other users,
else the test fails at once with one line naming the directory closed to them.
Skipped only where it cannot run: not root, or no sshd and no apt-get to install it.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tarfile
import time
from pathlib import Path
from typing import Any

import pytest
import yaml
from remote_service import SshWorker, skip_reason, ssh_worker

from nni_hwaware.experiment import RunningExperiment, free_port, nnictl_path
from nni_hwaware.experiment.check import check_config
from nni_hwaware.strategies.ppo.job import PPOJob

ROOT = Path(__file__).resolve().parents[1]
SEARCH_TRIALS = 3
EPOCHS = 1
#: How long the experiment may run (NNI's startup, profiling the chip, 4 trials of 1 epoch).
WAIT_S = 240
#: Top-level entries of a manager's checkout that are not copied (large or private): the
#: test plants small decoys of them instead.
NOT_COPIED = {".git", ".venv", ".venv-3.10", ".venv-3.13", "nni-experiments", "runs", "outputs", "lightning_logs",
              "data", "build", "dist"}
DECOYS = [".venv/pyvenv.cfg", ".venv/bin/python", ".venv-3.10/pyvenv.cfg", ".git/HEAD", "runs/digits/events.out", "outputs/found.json",
          "lightning_logs/version_0/metrics.csv", "data/cifar-10-batches-py/data_batch_1",
          "hwaware-outputs/trials.json", "nni_hwaware/__pycache__/decoy.cpython-311.pyc", "nnimanager.log"]
#: What must not reach a worker: top-level directories, any-level directories, file names.
FORBIDDEN_TOP = NOT_COPIED | {"hwaware-outputs", ".pytest_cache", ".ruff_cache"}
FORBIDDEN_DIRS = {"__pycache__", "nni-experiments"}
FORBIDDEN_NAMES = {"nni.sqlite", "ppo_state.pt", "trials.json", "tuner_stats.json"}

_skip = skip_reason()


def _copy_code(job: Path) -> None:
    """The project's files as a manager's checkout holds them (see :data:`NOT_COPIED`, :data:`DECOYS`)."""
    shutil.copytree(ROOT, job, ignore=lambda d, names: NOT_COPIED & set(names) if Path(d) == ROOT else set(),
                    symlinks=True)
    for decoy in DECOYS:
        path = job / decoy
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("the manager's, not for workers\n")


def _with_epochs(command: str, epochs: int) -> str:
    """``command`` with ``--epochs epochs`` where it sets the epochs."""
    words = shlex.split(command)
    if "--epochs" not in words:
        return command
    words[words.index("--epochs") + 1] = str(epochs)
    return shlex.join(words)


def _remote_config(job: Path, worker: SshWorker) -> tuple[Path, dict[str, Any]]:
    """The repository's ``config.yml``, shrunk for time, on the worker; written to ``job/config.yml``."""
    config = yaml.safe_load((ROOT / "config.yml").read_text(encoding="utf-8"))
    args = config["tuner"]["classArgs"]
    args["search_trials"] = SEARCH_TRIALS
    args["profile_seconds"] = 5  # the table is profiled on the manager, in a shorter budget
    # four trainings leave the shipped 1.5 measurements a training 2 to spend on networks measured over,
    # which a busy machine's noise may use up before the last training: this run allows more
    args["ppo"] = {**(args.get("ppo") or {}), "measurements_per_training": 3}
    for key in ("train", "retrain"):  # the search trials' and the final retraining's options
        if key in args or key == "retrain":
            args[key] = {**(args.get(key) or {}), "epochs": EPOCHS}
    workdir = config.setdefault("experimentWorkingDirectory", "nni-experiments")
    assert not Path(workdir).is_absolute(), "config.yml's experimentWorkingDirectory is expected inside the code"
    config.update({
        "trialCommand": _with_epochs(config["trialCommand"], EPOCHS),
        "maxTrialNumber": PPOJob.from_dict(args).max_trials(),  # the trainings, the screens, the retraining
        "maxExperimentDuration": "8m",
        "nniManagerIp": "127.0.0.1",
        "trainingService": {"platform": "remote", "machineList": [worker.machine()]},
    })
    path = job / "config.yml"
    path.write_text(yaml.safe_dump(config, sort_keys=False), encoding="utf-8")
    return path, config


def _create(config: Path, port: int, env: dict[str, str], timeout: float = 180) -> tuple[str | None, str]:
    """``nni-hwaware create --config config --expose`` as a user runs it: (experiment id or None, output)."""
    cmd = [sys.executable, "-m", "nni_hwaware", "create", "--config", str(config), "--port", str(port), "--expose"]
    try:
        done = subprocess.run(cmd, cwd=config.parent, env=env, capture_output=True, text=True, timeout=timeout)
        output, ok = done.stdout + done.stderr, done.returncode == 0
    except subprocess.TimeoutExpired as exc:
        output, ok = f"{exc.stdout or ''}{exc.stderr or ''}\n(timed out after {timeout:g} s)", False
    output = output if isinstance(output, str) else output.decode(errors="replace")
    found = re.search(r"Experiment ID:\s*(\w+)", output) or re.search(r"nnictl stop (\w+)", output)
    return (found.group(1) if found and ok else None), output


def _uploaded(tarball: Path) -> list[Path]:
    """The files of the code NNI sent to the worker (its tarball: trials add ``__pycache__`` to the unpacked copy)."""
    with tarfile.open(tarball) as tar:
        return sorted(Path(member.name) for member in tar.getmembers() if not member.isdir())


def _managers_files(files: list[Path], table_name: str) -> list[str]:
    bad = []
    for rel in files:
        parts = rel.parts
        if (parts[0] in FORBIDDEN_TOP or FORBIDDEN_DIRS & set(parts) or any(p.endswith(".egg-info") for p in parts)
                or rel.name in FORBIDDEN_NAMES | {table_name} or rel.suffix in {".log", ".pyc", ".sqlite"}):
            bad.append(str(rel))
    return bad


def test_remote_example_mirrors_the_main_job() -> None:
    """examples/remote/config.yml is config.yml with its trials on remote machines."""
    main = yaml.safe_load((ROOT / "config.yml").read_text(encoding="utf-8"))
    remote = yaml.safe_load((ROOT / "examples" / "remote" / "config.yml").read_text(encoding="utf-8"))
    assert remote["tuner"]["className"] == main["tuner"]["className"]
    assert remote["tuner"]["classArgs"].keys() == main["tuner"]["classArgs"].keys()
    assert remote["trialCommand"].split("#")[0].split() == main["trialCommand"].split()
    # every training, the screening trials in the worst case (one candidate each), the retraining
    assert remote["maxTrialNumber"] == PPOJob.from_dict(remote["tuner"]["classArgs"]).max_trials()
    base = ROOT / "examples" / "remote"
    assert (base / remote["trialCodeDirectory"]).resolve() == ROOT  # uploaded with the root's .nniignore
    assert (base / remote["searchSpaceFile"]).resolve() == (ROOT / main["searchSpaceFile"]).resolve()
    assert (base / remote["experimentWorkingDirectory"]).resolve() == (ROOT / main["experimentWorkingDirectory"]).resolve()
    assert remote["nniManagerIp"] and remote["trainingService"]["platform"] == "remote"
    for machine in remote["trainingService"]["machineList"]:
        assert machine.keys() >= {"host", "user", "sshKeyFile", "pythonPath"}
    check_config(base / "config.yml")  # the tuner's classArgs, search space and trial command


@pytest.mark.slow
@pytest.mark.nnictl
@pytest.mark.skipif(_skip is not None, reason=_skip or "")
def test_main_job_on_remote_training_service(tmp_path: Path) -> None:
    started = time.monotonic()
    job = tmp_path / "job"
    _copy_code(job)
    home = tmp_path / "home"  # the manager's HOME: NNI's experiment registry goes there
    home.mkdir()
    env = {**os.environ, "HOME": str(home)}
    with ssh_worker(tmp_path) as worker:
        try:
            worker.check_python()
            problem = None
        except RuntimeError as err:
            problem = str(err)
        if problem:
            pytest.fail(problem, pytrace=False)
        config_path, config = _remote_config(job, worker)
        workdir = (job / config["experimentWorkingDirectory"]).resolve()
        workdir.mkdir(parents=True, exist_ok=True)
        workdir.chmod(0o700)
        assert not worker.readable(workdir), f"user {worker.name} can read the manager's {workdir}"

        port = free_port()
        experiment_id, output = _create(config_path, port, env)
        if experiment_id is None:
            found = re.search(r"Experiment ID:\s*(\w+)", output)
            if found:  # the manager started but the command failed: stop it by id
                worker.experiments.append(found.group(1))
                subprocess.run([nnictl_path(), "stop", found.group(1)],
                               env=env, capture_output=True, timeout=60, check=False)
            pytest.fail("nni-hwaware create --expose failed:\n" + "\n".join(output.splitlines()[-30:]),
                        pytrace=False)
        worker.experiments.append(experiment_id)
        exp = RunningExperiment(experiment_id, port, workdir, env)
        with exp:
            _check_run(exp, worker, config, job)
    print(f"remote main job: {time.monotonic() - started:.0f} s")


def _check_run(exp: RunningExperiment, worker: SshWorker, config: dict[str, Any], job: Path) -> None:
    def describe() -> str:
        return f"{exp.describe()}\n{worker.trial_logs(exp.id)}"

    try:
        status, problem = exp.wait(timeout=WAIT_S, poll=1.0), None
    except (TimeoutError, RuntimeError) as err:
        status, problem = "", str(err)
    if problem:
        pytest.fail(f"{problem}\n{worker.trial_logs(exp.id)}", pytrace=False)
    jobs = exp.trial_jobs()
    assert exp.experiment_dir.is_relative_to(job), "the experiment is expected inside trialCodeDirectory"

    # Nothing of the manager's reached the worker (the repository's .nniignore).
    upload = worker.upload_dir(exp.id)
    tarball = upload.with_suffix(".tgz")
    assert tarball.is_file() and (upload / "nni_hwaware" / "__init__.py").is_file(), \
        f"NNI uploaded no code to the worker at {upload}\n{describe()}"
    files = _uploaded(tarball)
    assert Path("nni_hwaware/__init__.py") in files and Path(config["searchSpaceFile"]) in files, files[:20]
    table_name = Path(str(config["tuner"]["classArgs"].get("table", "cost_table.csv"))).name
    leaked = _managers_files(files, table_name)
    assert not leaked, (f"{len(leaked)} of the manager's files were uploaded to the worker, under "
                        f"{sorted({Path(p).parts[0] for p in leaked})}: {leaked[:10]}")

    # Every trial ran as the worker user, in NNI's remote working directory.
    assert jobs, f"no trial started\n{describe()}"
    for job_record in jobs:
        trial_dir = worker.trial_dir(exp.id, job_record["trialJobId"])
        assert (trial_dir / "trial.stdout").is_file(), f"trial {job_record['trialJobId']} not in {trial_dir}"
        owners = {p.stat().st_uid for p in (trial_dir, trial_dir / "trial.stdout", trial_dir / "trial.stderr")}
        assert owners == {worker.user.pw_uid}, f"{trial_dir} is not {worker.name}'s"
    assert upload.stat().st_uid == worker.user.pw_uid

    # The main job's own results.
    assert status == "DONE", describe()
    # the search's trainings, its screening trials (ran on the worker like any trial) and the retraining
    screens = [m for m in exp.final_metrics() if m.get("screening")]
    assert screens and all(m["measured"] >= 1 for m in screens), describe()
    # measured on the worker in the deployment runtime of config.yml, as the table was profiled
    assert {m.get("measured_in") for m in exp.final_metrics() if not m.get("retrain")} == \
        {config["tuner"]["classArgs"]["backend"]}, describe()
    assert len(jobs) == SEARCH_TRIALS + len(screens) + 1, describe()
    states = {job_record["trialJobId"]: job_record["status"] for job_record in jobs}
    assert set(states.values()) == {"SUCCEEDED"}, f"trial states {states}\n{describe()}"
    hwaware = exp.experiment_dir / "hwaware"
    stats = json.loads((hwaware / "tuner_stats.json").read_text())
    assert stats["arch_mismatches"] == 0, stats
    assert stats["trainings"] == SEARCH_TRIALS and stats["measurements"] == sum(m["measured"] for m in screens), stats
    report = hwaware / "report"
    assert report.is_dir() and any(report.iterdir()), f"no report in {report}\n{describe()}"
    # The retraining trial left the trained network on the worker, in its own trial directory.
    retrained = [m for m in exp.final_metrics() if m.get("retrain")]
    assert len(retrained) == 1, describe()
    delivered = Path(retrained[0]["deliverables_dir"])
    retrain_job = max(jobs, key=lambda job_record: job_record["sequenceId"])
    assert delivered.resolve() == worker.trial_dir(exp.id, retrain_job["trialJobId"]).resolve(), delivered
    for name in ("network.pt", "network.onnx", "network.torchscript.pt", "deliverables.json"):
        assert (delivered / name).is_file() and (delivered / name).stat().st_uid == worker.user.pw_uid, name
    on_worker = {p.name for p in worker.env_dir(exp.id).glob("trials/**/*") if p.is_file()}
    assert not on_worker & {p.name for p in report.iterdir()}, f"report files on the worker: {sorted(on_worker)}"
