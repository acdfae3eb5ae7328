"""Drive real NNI 3.0 experiments through ``nnictl``: create, poll the REST API, stop.

Every ``nnictl`` command of the package runs through :func:`run_nnictl` (the
command line's ``create``/``resume``/``view`` too, by way of
:mod:`nni_hwaware.experiment.launch`).

Where NNI 3.0 writes (found by running it on Linux):

* All files of one experiment (``log/nnimanager.log``, ``log/dispatcher.log``,
  ``log/nnictl_stderr.log``, ``db/nni.sqlite``, per trial
  ``environments/local-env/trials/<trial>/trial.{stdout,stderr,log}``) go to the
  config's ``experimentWorkingDirectory``/``<id>``, plus a ``_latest`` link there.
  Its default is ``~/nni-experiments``, so :func:`write_config` always sets it.
* Besides, a registry of experiments, ``~/nni-experiments/.experiment``, is written
  by nnictl (``nni.tools.nnictl.config_utils.Experiments``) and by the manager
  (``os.homedir()``) whatever the working directory. No option moves it, but both
  take the home from ``$HOME``: :func:`create_experiment` runs nnictl with
  ``HOME=<workdir>/home``, which keeps the user's home clean. Consequences: trials
  inherit that HOME (pass ``env={"HOME": ...}`` to keep the real one, e.g. for
  dataset caches), and later nnictl commands about the experiment (``stop``, ``top``,
  ``trial ls``) need the same HOME, which :attr:`RunningExperiment.env` carries; a
  plain ``nnictl list`` does not see the experiment.
* NNI's algorithm registry (``nnictl algo register``) is ``<sys.prefix>/nni`` in a
  virtualenv or conda, else ``~/.config/nni``; in the latter case ``NNI_CONFIG_DIR``
  is set to the real one so that registered tuners are still found.
* The manager listens on all interfaces, without authentication. With
  ``local_only=True`` (default) it listens on 127.0.0.1 only (see
  :mod:`nni_hwaware.experiment.portal`).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import yaml

from nni_hwaware.errors import HwAwareError
from nni_hwaware.experiment.portal import listeners, portal_env

__all__ = [
    "TERMINAL_STATUSES", "NnictlRun", "RunningExperiment", "create_experiment", "free_port",
    "nnictl_path", "parse_metric", "port_open", "register_tuner", "run_nnictl", "write_config",
]  # fmt: skip

#: Statuses after which nothing more happens. ``NO_MORE_TRIAL`` is *not* one: the
#: trial limit is reached but trials may still run (``DONE`` follows).
TERMINAL_STATUSES = frozenset({"DONE", "STOPPED", "ERROR"})
_IDLE_GRACE_S = 12.0
_ACTIVE_TRIAL = frozenset({"WAITING", "RUNNING", "UNKNOWN"})
_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_NO_PROXY = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # ignore $http_proxy


def free_port() -> int:
    """A TCP port that is free on 127.0.0.1 right now (the OS picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def port_open(port: int) -> bool:
    """Whether something accepts TCP connections on ``127.0.0.1:port``."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.settimeout(1.0)
        return sock.connect_ex(("127.0.0.1", port)) == 0


def nnictl_path() -> str:
    """The ``nnictl`` next to the running interpreter, else the one on PATH."""
    local = Path(sys.executable).parent / "nnictl"
    if local.is_file() and os.access(local, os.X_OK):
        return str(local)
    found = shutil.which("nnictl")
    if found is None:
        raise HwAwareError(
            f"nnictl is neither next to {sys.executable} nor on PATH; "
            "install NNI in this environment: pip install nni==3.0"
        )
    return found


def write_config(template: dict[str, Any], path: Path, workdir: Path) -> Path:
    """Write ``template`` as an NNI config at ``path``, with its files under ``workdir``.

    Sets ``experimentWorkingDirectory`` to ``workdir`` (made absolute, created) so that
    nothing goes to ``~/nni-experiments``; ``template`` itself is not changed.
    """
    workdir = Path(workdir).resolve()
    workdir.mkdir(parents=True, exist_ok=True)
    config = {**template, "experimentWorkingDirectory": str(workdir)}
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(config, sort_keys=False), encoding="utf-8")
    return path


def parse_metric(data: str) -> dict[str, Any]:
    """A metric's ``data`` field as a dict (NNI double-encodes it; a scalar -> ``default``)."""
    value: Any = json.loads(data)
    if isinstance(value, str):
        value = json.loads(value)
    return value if isinstance(value, dict) else {"default": value}


@dataclass(frozen=True)
class NnictlRun:
    """What one ``nnictl`` command did (see :func:`run_nnictl`)."""

    #: The command line run, ``nnictl``'s path first.
    command: list[str]
    #: Its exit status; None when it was stopped at the timeout.
    returncode: int | None
    #: Its stdout, with stderr merged in unless ``output="separate"``; colour codes removed.
    output: str = ""
    #: Its stderr with ``output="separate"``, colour codes removed.
    stderr: str = ""

    @property
    def ok(self) -> bool:
        """Whether it exited with status 0."""
        return self.returncode == 0


def run_nnictl(args: Sequence[str], *, env: Mapping[str, str] | None = None, timeout: float | None = None,
               output: Literal["merged", "separate", "terminal"] = "merged") -> NnictlRun:
    """Run ``nnictl <args>`` (the one of :func:`nnictl_path`): every nnictl command of the package runs here.

    ``env`` defaults to this process's environment. ``output`` says where nnictl's output goes:
    ``"merged"`` captures stdout and stderr together in :attr:`NnictlRun.output`, ``"separate"``
    captures them apart, ``"terminal"`` leaves both on this process's (for a user to watch). A
    command still running after ``timeout`` seconds is stopped: its ``returncode`` is None and its
    output ends with a line that says so.
    """
    cmd = [nnictl_path(), *args]
    env = dict(os.environ if env is None else env)
    if output == "terminal":
        try:
            return NnictlRun(cmd, subprocess.call(cmd, env=env, timeout=timeout))
        except subprocess.TimeoutExpired:
            return NnictlRun(cmd, None, f"(timed out after {timeout:g} s)")
    stderr = subprocess.STDOUT if output == "merged" else subprocess.PIPE
    try:
        done = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=stderr, text=True, timeout=timeout)
        return NnictlRun(cmd, done.returncode, _ANSI.sub("", done.stdout), _ANSI.sub("", done.stderr or ""))
    except subprocess.TimeoutExpired as exc:
        out = exc.output.decode(errors="replace") if isinstance(exc.output, bytes) else exc.output
        return NnictlRun(cmd, None, _ANSI.sub("", out or "") + f"\n(timed out after {timeout:g} s)")


def register_tuner() -> None:
    """Register the PPO tuner with ``nnictl algo register`` as the builtin ``HardwarePPO``.

    Raises :class:`HwAwareError` with the last line nnictl wrote on stderr when it fails.
    """
    from importlib import resources

    meta = resources.files("nni_hwaware.strategies.ppo") / "nni_algo_meta.yml"
    with resources.as_file(meta) as path:
        done = run_nnictl(["algo", "register", "--meta_path", str(path)], output="separate")
    if not done.ok:
        raise HwAwareError(f"nnictl algo register failed: {done.stderr.strip().splitlines()[-1:]}")


def _tail(path: Path, lines: int = 10) -> str:
    with contextlib.suppress(OSError):
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    return "(missing)"


@dataclass
class RunningExperiment:
    """An experiment started by :func:`create_experiment`; as a context manager, stopped on exit."""

    id: str
    port: int
    #: The ``experimentWorkingDirectory``; the experiment's files are in ``workdir/id``.
    workdir: Path
    #: Environment for nnictl commands about this experiment (it holds the HOME used).
    env: dict[str, str] = field(default_factory=lambda: dict(os.environ), repr=False)
    _stopped: bool = field(default=False, init=False, repr=False)

    @property
    def experiment_dir(self) -> Path:
        """``workdir/id``: logs, database and trial outputs."""
        return self.workdir / self.id

    def rest(self, path: str) -> Any:
        """GET ``http://127.0.0.1:<port>/api/v1/nni/<path>`` and decode the JSON answer."""
        url = f"http://127.0.0.1:{self.port}/api/v1/nni/{path.lstrip('/')}"
        with _NO_PROXY.open(url, timeout=10) as response:
            return json.loads(response.read().decode("utf-8"))

    def status(self) -> str:
        """The experiment status from ``check-status`` (``RUNNING``, ``DONE``, ...)."""
        return str(self.rest("check-status")["status"])

    def trial_jobs(self) -> list[dict[str, Any]]:
        """The manager's trial records, as ``trial-jobs`` returns them."""
        return list(self.rest("trial-jobs"))

    def final_metrics(self) -> list[dict[str, Any]]:
        """Each trial's last final metric as a dict, in trial order (trials without one skipped).

        With ``trialConcurrency > 1`` NNI 3.0 may list a metric next to another trial's
        parameters (microsoft/nni#5726): pair them by the metric's ``parameterId``
        (see ``trial_jobs()``) or echo the parameters inside the metric.
        """
        jobs = sorted(self.trial_jobs(), key=lambda job: job.get("sequenceId", 0))
        return [
            parse_metric(j["finalMetricData"][-1]["data"]) for j in jobs if j.get("finalMetricData")
        ]

    def describe(self) -> str:
        """Status, trial states and log tails, for error messages."""
        parts = [f"experiment {self.id} on port {self.port}, files in {self.experiment_dir}"]
        try:
            parts.append(f"status: {self.rest('check-status')}")
            states = (f"{job['trialJobId']}={job['status']}" for job in self.trial_jobs())
            parts.append("trials: " + ", ".join(states))
        except OSError as exc:
            parts.append(f"manager unreachable ({exc})")
        for log in ("nnimanager.log", "dispatcher.log"):
            parts.append(f"--- {log}\n{_tail(self.experiment_dir / 'log' / log)}")
        for err in sorted(self.experiment_dir.glob("environments/*/trials/*/trial.stderr")):
            if err.stat().st_size:
                parts.append(f"--- trial {err.parent.name} stderr\n{_tail(err)}")
        return "\n".join(parts)

    def wait(
        self,
        until: Callable[[RunningExperiment], bool] | None = None,
        *,
        timeout: float = 300.0,
        poll: float = 1.0,
    ) -> str:
        """Wait until the experiment ends or ``until(self)`` is true; return the last status.

        It ends at a status in :data:`TERMINAL_STATUSES` (``DONE``, ``STOPPED``,
        ``ERROR``; ``ERROR`` is returned, not raised: a tuner that fails to start gives
        ``ERROR`` after 10 s), or at ``TUNER_NO_MORE_TRIAL`` (the tuner is exhausted;
        NNI then never says ``DONE``) once no trial is active. ``NO_MORE_TRIAL`` is no
        end: trials may still run. Raises ``TimeoutError`` with the last status, trial
        states and log tails after ``timeout`` s; ``RuntimeError`` if the manager is gone.
        """
        deadline = time.monotonic() + timeout
        idle_since: float | None = None
        while True:
            try:
                status = self.status()
                if (until is not None and until(self)) or status in TERMINAL_STATUSES:
                    return status
                idle = status == "TUNER_NO_MORE_TRIAL" and not any(
                    job["status"] in _ACTIVE_TRIAL for job in self.trial_jobs())
                if not idle:
                    idle_since = None
                elif idle_since is None:
                    idle_since = time.monotonic()
                elif time.monotonic() - idle_since >= _IDLE_GRACE_S:
                    # The manager submits queued trials on its next poll (every 5 s), so a
                    # trial the tuner sent just before "no more" may not be listed yet.
                    return status
            except OSError as exc:
                raise RuntimeError(f"NNI manager not answering ({exc}); {self.describe()}") from exc
            if time.monotonic() >= deadline:
                raise TimeoutError(f"still {status} after {timeout:g} s; {self.describe()}")
            time.sleep(poll)

    def stop(self, timeout: float = 60.0) -> None:
        """Run ``nnictl stop <id>`` (never ``--all``), then wait until the port is closed."""
        output = ""
        if not self._stopped:
            self._stopped = True
            done = run_nnictl(["stop", self.id], env=self.env, timeout=timeout)
            output = done.output
            if not done.ok:
                raise RuntimeError(f"nnictl stop {self.id} failed:\n{output}")
        deadline = time.monotonic() + timeout
        while port_open(self.port):
            if time.monotonic() >= deadline:
                raise TimeoutError(f"port {self.port} still open after nnictl stop:\n{output}")
            time.sleep(0.2)

    def manager_pid(self) -> int:
        """The pid of the NNI manager (the Node process listening on :attr:`port`)."""
        for conn in listeners(self.port):
            if conn.pid:
                return int(conn.pid)
        raise RuntimeError(f"no process listens on port {self.port}; {self.describe()}")

    def kill(self, timeout: float = 30.0) -> None:
        """Kill the manager, the tuner and the running trials at once (SIGKILL), as a crash would.

        ``nnictl`` starts the manager in a process group of its own, which the dispatcher
        and local trials share. NNI's database keeps the experiment, so it can be resumed
        (:meth:`resume`).
        """
        pgid = os.getpgid(self.manager_pid())
        if pgid == os.getpgid(0):
            raise RuntimeError("the NNI manager runs in this process's group; refusing to kill it")
        os.killpg(pgid, signal.SIGKILL)
        self._stopped = True
        deadline = time.monotonic() + timeout
        while port_open(self.port):
            if time.monotonic() >= deadline:
                raise TimeoutError(f"port {self.port} still open after killing the manager")
            time.sleep(0.2)

    def resume(self, *, port: int | None = None, timeout: float = 120, local_only: bool = True) -> RunningExperiment:
        """``nnictl resume <id>`` a stopped or killed experiment; returns the new handle."""
        port = free_port() if port is None else port
        env = portal_env(self.env, expose=not local_only)
        done = run_nnictl(["resume", self.id, "--port", str(port), "--experiment_dir", str(self.workdir)],
                          env=env, timeout=timeout)
        if not done.ok or not port_open(port):
            tail = "\n".join(done.output.strip().splitlines()[-30:])
            raise RuntimeError(f"{' '.join(done.command)} failed; its output ends with:\n{tail}")
        return RunningExperiment(self.id, port, self.workdir, env)

    def __enter__(self) -> RunningExperiment:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()


def create_experiment(
    config_path: Path,
    *,
    port: int | None = None,
    workdir: Path | None = None,
    env: dict[str, str] | None = None,
    timeout: float = 120,
    local_only: bool = True,
) -> RunningExperiment:
    """Start the experiment of ``config_path`` with ``nnictl create``; return its handle.

    The config must set ``experimentWorkingDirectory`` (see :func:`write_config`);
    ``workdir``, if given, must be that directory. ``port`` defaults to a free one.
    ``env`` overrides variables of this process's environment for nnictl, the manager
    and the trials; ``HOME`` defaults to ``<workdir>/home`` (see the module docstring).
    Returns once the manager answers and has the config (trials start after that).
    Raises ``RuntimeError`` with the tail of nnictl's output if the start fails.
    """
    config_path = Path(config_path).resolve()
    config = yaml.safe_load(config_path.read_text(encoding="utf-8")) or {}
    if not config.get("experimentWorkingDirectory"):
        raise HwAwareError(
            f"{config_path} has no experimentWorkingDirectory, so NNI would write to "
            "~/nni-experiments; write the config with write_config(template, path, workdir)"
        )
    base = (config_path.parent / Path(config["experimentWorkingDirectory"]).expanduser()).resolve()
    if workdir is not None and Path(workdir).resolve() != base:
        raise HwAwareError(
            f"workdir {workdir} is not the config's experimentWorkingDirectory {base}"
        )
    port = free_port() if port is None else port
    full_env = {**os.environ, "HOME": str(base / "home"), **(env or {})}
    Path(full_env["HOME"]).mkdir(parents=True, exist_ok=True)
    in_env = sys.prefix != sys.base_prefix or Path(sys.prefix, "conda-meta").is_dir()
    if not in_env and "NNI_CONFIG_DIR" not in full_env:
        full_env["NNI_CONFIG_DIR"] = str(Path.home() / ".config" / "nni")
    full_env = portal_env(full_env, expose=not local_only)
    done = run_nnictl(["create", "--config", str(config_path), "--port", str(port)], env=full_env, timeout=timeout)
    ok, output = done.ok, done.output
    found = re.search(r"Experiment ID:\s*(\w+)", output) or re.search(r"nnictl stop (\w+)", output)
    experiment = RunningExperiment(found.group(1), port, base, full_env) if found else None
    if not ok or experiment is None or not port_open(port):
        if experiment is not None and port_open(port):
            with contextlib.suppress(Exception):
                experiment.stop()
        tail = "\n".join(output.strip().splitlines()[-30:])
        raise RuntimeError(f"{' '.join(done.command)} failed; its output ends with:\n{tail}")
    return experiment
