"""A worker machine for NNI's remote training service, on this machine: Debian's sshd on
127.0.0.1 with a throw-away key, logging in an unprivileged user.

:func:`ssh_worker` (root only) makes sure the user :data:`WORKER` exists, installs a
client key generated for this run in a file of its own (``~/.ssh/`` :data:`KEYS_FILE`,
removed afterwards), and starts ``sshd -D`` with its own ``sshd_config`` and host key on
a free port of 127.0.0.1; the system's sshd and its config are not touched. It yields an
:class:`SshWorker`, whose :meth:`SshWorker.machine` is the ``machineList`` entry of an
NNI config. On exit it stops what the run left of the worker's processes (the trial keeper
and trials of the experiments it was told of, found by experiment id), deletes their
files under the worker's ``~/nni-experiments`` and kills sshd.

Where NNI 3.0's remote training service puts things on a worker (read in
``nni_node/training_service/remote_v3`` and ``common/trial_keeper``, and seen):
``~/nni-experiments/<experiment id>/environments/remote-worker<N>/`` holds
``trial_keeper/`` (the daemon), ``upload/trial_code/`` (``trialCodeDirectory``, packed
by the manager with its ``.nniignore`` and unpacked there; trials run in it) and
``trials/<trial id>/trial.{stdout,stderr}``. Before that NNI runs
``python -m pip install nni --upgrade`` on the worker: this sshd sets ``PIP_NO_INDEX``,
so pip checks what is installed without the network.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import shlex
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from nni_hwaware.experiment.nnictl import free_port, port_open

#: The unprivileged user trials run as.
WORKER = "nnihwworker"
#: Debian's openssh-server.
SSHD = "/usr/sbin/sshd"
#: The worker's authorized keys for this test only (sshd_config's AuthorizedKeysFile).
KEYS_FILE = ".ssh/nni_hwaware_test_keys"
#: NNI's id of the first (only) machine of a ``machineList``.
ENV_ID = "remote-worker1"


def skip_reason() -> str | None:
    """Why this machine cannot host the worker at all (None: it can, maybe after installing sshd)."""
    if not sys.platform.startswith("linux"):
        return "needs Linux (Debian's openssh-server and useradd)"
    if os.geteuid() != 0:
        return "needs root: it starts sshd and creates the unprivileged worker user"
    if not Path(SSHD).is_file() and shutil.which("apt-get") is None:
        return f"needs openssh-server ({SSHD}) and there is no apt-get to install it"
    return None


def _run(cmd: list[str], what: str, timeout: float = 60, **kwargs: Any) -> subprocess.CompletedProcess[str]:
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, **kwargs)
    except subprocess.TimeoutExpired:
        raise RuntimeError(f"{what}: {shlex.join(cmd)} did not finish in {timeout:g} s") from None
    if done.returncode != 0:
        last = (done.stderr.strip() or done.stdout.strip()).splitlines()[-1:] or ["no output"]
        raise RuntimeError(f"{what}: {shlex.join(cmd)} exited with {done.returncode}: {last[0]}")
    return done


def ensure_sshd() -> None:
    """Install Debian's openssh-server when it is missing (root with apt-get), as ``.ci/run`` does."""
    if Path(SSHD).is_file():
        return
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    _run(["apt-get", "update", "-qq"], "installing openssh-server", timeout=300, env=env)
    _run(["apt-get", "install", "-y", "-qq", "openssh-server"], "installing openssh-server", timeout=300, env=env)


def ensure_user(name: str = WORKER) -> pwd.struct_passwd:
    """The unprivileged user ``name``, created (with a home, no password) when missing.

    Its password field is ``*``: no password logs in, but the account is not locked,
    which sshd (without PAM) would refuse even for a key.
    """
    try:
        user = pwd.getpwnam(name)
    except KeyError:
        _run(["useradd", "--create-home", "--shell", "/bin/bash", "--password", "*", name], f"creating user {name}")
        user = pwd.getpwnam(name)
    else:
        _run(["usermod", "--password", "*", name], f"unlocking user {name} for key logins")
    if user.pw_uid == 0:
        raise RuntimeError(f"user {name} is root; the worker must be an unprivileged user")
    Path(user.pw_dir).mkdir(mode=0o700, exist_ok=True)
    os.chown(user.pw_dir, user.pw_uid, user.pw_gid)
    return user


def _tail(path: Path, lines: int = 15) -> str:
    with contextlib.suppress(OSError):
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    return "(missing)"


@dataclass
class SshWorker:
    """The running worker: ``ssh`` commands as the user, NNI's files on its side."""

    user: pwd.struct_passwd
    port: int
    key: Path
    #: The directory of the Python that NNI and the trials use on the worker (``pythonPath``).
    python_dir: Path
    log: Path
    experiments: list[str] = field(default_factory=list)

    @property
    def name(self) -> str:
        return self.user.pw_name

    @property
    def home(self) -> Path:
        return Path(self.user.pw_dir)

    def machine(self) -> dict[str, Any]:
        """This worker as an entry of a remote training service's ``machineList``."""
        return {"host": "127.0.0.1", "port": self.port, "user": self.name, "sshKeyFile": str(self.key),
                "pythonPath": str(self.python_dir)}

    def ssh(self, command: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
        """Run ``command`` on the worker through this sshd (never raises on a non-zero exit)."""
        cmd = ["ssh", "-i", str(self.key), "-p", str(self.port), "-o", "BatchMode=yes",
               "-o", "StrictHostKeyChecking=no", "-o", "UserKnownHostsFile=/dev/null", "-o", "LogLevel=ERROR",
               "-o", "ConnectTimeout=10", f"{self.name}@127.0.0.1", command]
        try:
            return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL)
        except subprocess.TimeoutExpired:
            return subprocess.CompletedProcess(cmd, 124, "", f"timed out after {timeout:g} s")

    def check_python(self, timeout: float = 120) -> None:
        """Raise a one-line ``RuntimeError`` unless the worker logs in and can run the shared Python."""
        login = self.ssh("true", timeout=30)
        if login.returncode != 0:
            raise RuntimeError(f"ssh {self.name}@127.0.0.1 -p {self.port} with the test key failed "
                               f"({login.stderr.strip() or login.returncode}); sshd log:\n{_tail(self.log)}")
        python = self.python_dir / "python"
        done = self.ssh(f"{shlex.quote(str(python))} -c 'import nni, torch, sklearn'", timeout=timeout)
        if done.returncode != 0:
            last = (done.stderr.strip() or f"exit status {done.returncode}").splitlines()[-1]
            closed = _closed_dirs(python)
            where = f": {', '.join(closed)} not open to other users" if closed else ""
            raise RuntimeError(
                f"user {self.name} cannot run {python} with nni and torch ({last}){where}; the worker uses "
                "the tests' virtualenv, so it and its base interpreter must be readable and executable by "
                "other users (e.g. a venv made from /usr/bin/python3 in a directory others can enter)")

    def readable(self, path: Path) -> bool:
        """Whether the worker user can list or read ``path``."""
        quoted = shlex.quote(str(path))
        return self.ssh(f"test -r {quoted} && ls {quoted} >/dev/null 2>&1", timeout=30).returncode == 0

    def env_dir(self, experiment_id: str) -> Path:
        """``~/nni-experiments/<id>/environments/remote-worker1`` on the worker."""
        return self.home / "nni-experiments" / experiment_id / "environments" / ENV_ID

    def upload_dir(self, experiment_id: str) -> Path:
        """Where the worker unpacked ``trialCodeDirectory`` (the trials' working directory)."""
        return self.env_dir(experiment_id) / "upload" / "trial_code"

    def trial_dir(self, experiment_id: str, trial_id: str) -> Path:
        return self.env_dir(experiment_id) / "trials" / trial_id

    def trial_logs(self, experiment_id: str, lines: int = 15) -> str:
        """The tail of every trial's stderr on the worker, for error messages."""
        parts = []
        for err in sorted(self.env_dir(experiment_id).glob("trials/*/trial.stderr")):
            text = _tail(err, lines) if err.stat().st_size else "(empty)"
            parts.append(f"--- trial {err.parent.name} stderr (worker)\n{text}")
        return "\n".join(parts) or "(no trial logs on the worker)"

    def processes(self, experiment_id: str) -> list[Any]:
        """The worker user's processes of this experiment: its trial keeper and trials."""
        import psutil

        found = []
        for proc in psutil.process_iter(["uids", "cmdline"]):
            with contextlib.suppress(psutil.Error):
                if proc.info["uids"] is None or proc.info["uids"].real != self.user.pw_uid:
                    continue
                if experiment_id in " ".join(proc.info["cmdline"] or ()) or \
                        proc.environ().get("NNI_EXP_ID") == experiment_id:
                    found.append(proc)
        return found

    def cleanup(self, experiment_id: str) -> None:
        """Kill what is left of the experiment on the worker (by pid) and delete its files there."""
        import psutil

        procs = self.processes(experiment_id)
        for proc in procs:
            with contextlib.suppress(psutil.Error):
                proc.send_signal(signal.SIGKILL)
        psutil.wait_procs(procs, timeout=10)
        shutil.rmtree(self.home / "nni-experiments" / experiment_id, ignore_errors=True)


def _closed_dirs(path: Path) -> list[str]:
    """Directories on the way to ``path`` (and to the interpreter it links to) that others cannot enter."""
    closed = []
    for target in dict.fromkeys((Path(path).absolute(), Path(path).resolve())):
        for parent in reversed(target.parents):
            with contextlib.suppress(OSError):
                mode = parent.stat().st_mode
                if not mode & 0o001 and f"{parent} (mode {mode & 0o777:o})" not in closed:
                    closed.append(f"{parent} (mode {mode & 0o777:o})")
    return closed


@contextlib.contextmanager
def traversable(path: Path) -> Iterator[list[Path]]:
    """Open the directories on the way to ``path`` (and to what it links to) for traversal by other
    users (``o+x``: enter, not list) while the context lasts, then restore their modes.

    The worker runs the tests' Python; where it lives under a private home (a pyenv under
    ``/root``, mode 700), the worker could not reach it.
    """
    opened: list[tuple[Path, int]] = []
    try:
        for target in dict.fromkeys((Path(path).absolute(), Path(path).resolve())):
            for parent in reversed(target.parents):
                mode = parent.stat().st_mode & 0o7777
                if not mode & 0o001 and parent not in [p for p, _ in opened]:
                    parent.chmod(mode | 0o001)
                    opened.append((parent, mode))
        yield [p for p, _ in opened]
    finally:
        for parent, mode in reversed(opened):
            with contextlib.suppress(OSError):
                parent.chmod(mode)


def _sshd_config(path: Path, port: int, host_key: Path, user: str) -> None:
    path.write_text("\n".join([
        f"Port {port}",
        "ListenAddress 127.0.0.1",
        f"HostKey {host_key}",
        f"PidFile {path.parent / 'sshd.pid'}",
        f"AuthorizedKeysFile {KEYS_FILE}",
        f"AllowUsers {user}",
        "PubkeyAuthentication yes",
        "PasswordAuthentication no",
        "KbdInteractiveAuthentication no",
        "PermitRootLogin no",
        "UsePAM no",
        "StrictModes yes",
        "X11Forwarding no",
        "AllowTcpForwarding no",
        "PrintMotd no",
        "Subsystem sftp internal-sftp",  # NNI uploads the code and writes files through SFTP
        "SetEnv PIP_NO_INDEX=1 PIP_DISABLE_PIP_VERSION_CHECK=1",
        "LogLevel VERBOSE",
        "",
    ]))


@contextlib.contextmanager
def ssh_worker(tmp: Path, *, python_dir: Path | None = None, user: str = WORKER,
               timeout: float = 20) -> Iterator[SshWorker]:
    """sshd on a free port of 127.0.0.1 for ``user``, with a key made for this run (root only).

    ``python_dir`` (default: this interpreter's directory, e.g. a virtualenv's ``bin``)
    is the worker's ``pythonPath``. Files go to ``tmp/ssh``.
    """
    ensure_sshd()
    account = ensure_user(user)
    ssh_dir = Path(tmp) / "ssh"
    ssh_dir.mkdir(parents=True, mode=0o700)
    key, host_key = ssh_dir / "client_key", ssh_dir / "host_key"
    for path, comment in ((key, "nni-hwaware test worker"), (host_key, "nni-hwaware test sshd")):
        _run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", comment, "-f", str(path)], "ssh-keygen")
    user_ssh = Path(account.pw_dir) / ".ssh"
    user_ssh.mkdir(mode=0o700, exist_ok=True)
    os.chown(user_ssh, account.pw_uid, account.pw_gid)
    keys = Path(account.pw_dir) / KEYS_FILE
    keys.write_text(key.with_suffix(".pub").read_text())
    os.chown(keys, account.pw_uid, account.pw_gid)
    keys.chmod(0o600)
    privsep = Path("/run/sshd")  # Debian's sshd refuses to start without it
    made_privsep = not privsep.exists()
    privsep.mkdir(mode=0o755, exist_ok=True)

    port = free_port()
    config, log = ssh_dir / "sshd_config", ssh_dir / "sshd.log"
    _sshd_config(config, port, host_key, user)
    _run([SSHD, "-t", "-f", str(config)], "checking the test's sshd_config")
    with log.open("wb") as out:
        proc = subprocess.Popen([SSHD, "-D", "-e", "-f", str(config)], stdout=out, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL)
    worker = SshWorker(account, port, key, Path(python_dir or Path(sys.executable).parent), log)
    opened = contextlib.ExitStack()
    try:
        opened.enter_context(traversable(worker.python_dir / "python"))
        deadline = time.monotonic() + timeout
        while not port_open(port):
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"sshd did not listen on 127.0.0.1:{port} within {timeout:g} s; "
                                   f"its log:\n{_tail(log)}")
            time.sleep(0.1)
        yield worker
    finally:
        for experiment_id in worker.experiments:
            worker.cleanup(experiment_id)
        _stop(proc)
        opened.close()
        keys.unlink(missing_ok=True)
        if made_privsep:
            with contextlib.suppress(OSError):
                privsep.rmdir()


def _stop(proc: subprocess.Popen[bytes]) -> None:
    """Stop sshd and the session processes it forked (by pid)."""
    import psutil

    try:
        children = psutil.Process(proc.pid).children(recursive=True)
    except psutil.Error:
        children = []
    proc.terminate()
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=10)
    for child in children:
        with contextlib.suppress(psutil.Error):
            child.kill()
    psutil.wait_procs(children, timeout=10)
