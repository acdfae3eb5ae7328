"""Start an experiment's manager from a terminal, its web portal on 127.0.0.1 unless exposed.

What ``nni-hwaware create``/``resume``/``view`` run: ``nnictl`` (through
:func:`~nni_hwaware.experiment.nnictl.run_nnictl`) with its output on the user's
terminal and the manager bound to loopback (:mod:`nni_hwaware.experiment.portal`),
then a check that the manager really listens there only.
"""

from __future__ import annotations

import os
from collections.abc import Sequence

from nni_hwaware.errors import HwAwareError
from nni_hwaware.experiment.nnictl import run_nnictl
from nni_hwaware.experiment.portal import listening_addresses, portal_env, warn_exposed

__all__ = ["LOOPBACK", "check_listening", "launch"]

#: The addresses a manager kept on this machine listens on.
LOOPBACK = ("127.0.0.1", "::1")


def check_listening(port: int, expose: bool = False) -> None:
    """Raise :class:`HwAwareError` when, unless ``expose``, the manager on ``port`` listens beyond loopback."""
    where = listening_addresses(port)
    if not expose and any(ip not in LOOPBACK for ip in where):
        raise HwAwareError(f"the manager listens on {', '.join(where)}, not only 127.0.0.1; "
                           "stop it with nnictl stop <experiment id>")


def launch(action: str, target: Sequence[str], *, port: int, expose: bool = False, debug: bool = False,
           foreground: bool = False, experiment_dir: str | os.PathLike[str] | None = None) -> int:
    """Run ``nnictl <action> <target...> --port <port>`` in this terminal; its exit status.

    The manager listens on 127.0.0.1 unless ``expose`` (then :func:`warn_exposed` prints why
    that is risky). ``debug`` and ``foreground`` are nnictl's options; ``experiment_dir`` its
    ``--experiment_dir``. Once a manager started in the background, :func:`check_listening`
    checks where it listens.
    """
    if expose:
        warn_exposed(port)
    args = [action, *target, "--port", str(port)]
    args += ["--debug"] * debug + ["--foreground"] * foreground
    if experiment_dir:
        args += ["--experiment_dir", str(experiment_dir)]
    done = run_nnictl(args, env=portal_env(expose=expose), output="terminal")
    code = 1 if done.returncode is None else done.returncode  # no timeout: always a status
    if code == 0 and not foreground:
        check_listening(port, expose)
    return code
