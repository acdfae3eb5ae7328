"""Keep NNI's manager and web portal on this machine unless the user opts in.

NNI 3.0's manager listens on every network interface and its web portal has no
authentication: anyone who can reach the port can read the experiment, stop it or
add trials. There is no NNI option against it. Node reads ``NODE_OPTIONS`` from the
environment, and :data:`BIND_LOCAL_JS` (loaded with ``--require``) makes every
server that is given only a port listen on 127.0.0.1. The manager inherits the
variable from the process that starts it (``nnictl create``/``resume``/``view``,
``Experiment.run``, ``NasExperiment.run``/``resume``); trials only ignore it.

Exposing the portal (``nni-hwaware create --expose``, ``local_portal(expose=True)``)
is needed when trials run on other machines (NNI's remote and cluster training
services connect back to the manager) or to watch from another computer; it prints
:data:`EXPOSE_WARNING`.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
from collections.abc import Iterator, Mapping
from pathlib import Path

__all__ = [
    "BIND_LOCAL_JS", "EXPOSE_WARNING", "listeners", "listening_addresses", "local_portal", "portal_env", "warn_exposed",
]  # fmt: skip

#: The Node preload that binds servers to 127.0.0.1.
BIND_LOCAL_JS = Path(__file__).with_name("bind_local.js")

EXPOSE_WARNING = (
    "warning: the NNI web portal will listen on every network interface (port {port}) and has no "
    "authentication: anyone who can reach this machine can read, stop or change the experiment; "
    "expose it only on a trusted network"
)


def _require_option() -> str:
    return f"--require {json.dumps(str(BIND_LOCAL_JS))}"


def portal_env(env: Mapping[str, str] | None = None, *, expose: bool = False) -> dict[str, str]:
    """``env`` (default: this process's) with ``NODE_OPTIONS`` set to bind NNI's manager to 127.0.0.1.

    With ``expose=True`` the preload is removed instead, so the manager listens on
    every interface (NNI's own behaviour).
    """
    result = dict(os.environ if env is None else env)
    options = result.get("NODE_OPTIONS", "").replace(_require_option(), "").strip()
    if not expose:
        options = f"{options} {_require_option()}".strip()
    if options:
        result["NODE_OPTIONS"] = options
    else:
        result.pop("NODE_OPTIONS", None)
    return result


def warn_exposed(port: int | str = "of the experiment") -> None:
    """Print :data:`EXPOSE_WARNING` on stderr."""
    print(EXPOSE_WARNING.format(port=port), file=sys.stderr)


@contextlib.contextmanager
def local_portal(expose: bool = False, port: int | str = "of the experiment") -> Iterator[None]:
    """Experiments started from Python inside the block keep their portal on 127.0.0.1.

    ::

        with local_portal():
            experiment.run(port=8081)      # or NasExperiment(...).resume(port=8081)

    ``expose=True`` prints :data:`EXPOSE_WARNING` and leaves NNI's behaviour (every interface).
    """
    if expose:
        warn_exposed(port)
    saved = os.environ.get("NODE_OPTIONS")
    options = portal_env(expose=expose).get("NODE_OPTIONS")
    if options is None:
        os.environ.pop("NODE_OPTIONS", None)
    else:
        os.environ["NODE_OPTIONS"] = options
    try:
        yield
    finally:
        if saved is None:
            os.environ.pop("NODE_OPTIONS", None)
        else:
            os.environ["NODE_OPTIONS"] = saved


def listeners(port: int) -> list:
    """psutil's records of the sockets listening on TCP ``port`` (``.laddr.ip``, ``.pid``)."""
    import psutil

    return [conn for conn in psutil.net_connections(kind="tcp")
            if conn.status == psutil.CONN_LISTEN and conn.laddr and conn.laddr.port == port]


def listening_addresses(port: int) -> list[str]:
    """The local addresses on which some process listens on TCP ``port`` (e.g. ``['127.0.0.1']``)."""
    return sorted({conn.laddr.ip for conn in listeners(port)})
