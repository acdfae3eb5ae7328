"""Writing files atomically and reading JSON safely: every file the package writes goes here.

A file is written to a temporary file next to its target, flushed to disk, then
renamed over the target, so a reader never sees a half-written file and a
failure leaves the target untouched. JSON is parsed, never unpickled.
"""

from __future__ import annotations

import contextlib
import json
import os
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

from nni_hwaware.errors import HwAwareError

__all__ = ["atomic_open", "read_json", "write_atomically", "write_json"]


@contextlib.contextmanager
def atomic_open(path: str | os.PathLike[str], mode: str = "w") -> Iterator[IO[Any]]:
    """Open a temporary file that replaces ``path`` when the block ends without error."""
    if mode not in ("w", "wb"):
        raise ValueError(f"atomic_open writes only ('w' or 'wb'), got {mode!r}")
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(f".{target.name}.{uuid.uuid4().hex[:12]}.tmp")
    try:
        with open(tmp, mode.replace("w", "x"), **({} if "b" in mode else {"encoding": "utf-8"})) as fh:
            yield fh
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def write_atomically(path: str | os.PathLike[str], data: str | bytes) -> Path:
    """Write ``data`` to ``path`` atomically; returns the path."""
    with atomic_open(path, "wb" if isinstance(data, bytes) else "w") as fh:
        fh.write(data)
    return Path(path)


def write_json(path: str | os.PathLike[str], data: Any) -> Path:
    return write_atomically(path, json.dumps(data, indent=2, sort_keys=False) + "\n")


def read_json(path: str | os.PathLike[str], what: str = "file") -> Any:
    """Parse a JSON file; a missing or malformed file is a one-line error naming it."""
    path = Path(path)
    if not path.is_file():
        raise HwAwareError(f"{what} {path} does not exist; check the path")
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise HwAwareError(f"{what} {path} is not valid JSON: {err}") from None
