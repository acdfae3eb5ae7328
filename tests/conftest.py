from __future__ import annotations

import atexit
import os
import shutil
import sys
import tempfile
from pathlib import Path

import pytest

# Test helpers (hand-made tables, ...) live next to the tests.
sys.path.insert(0, str(Path(__file__).parent))

# NNI writes a registry of experiments to ~/nni-experiments (its path is fixed when nni
# is imported, and NasExperiment always writes it): give the test session its own home
# so that running the tests leaves the user's home untouched.
os.environ["HOME"] = tempfile.mkdtemp(prefix="nni-hwaware-tests-home-")
atexit.register(shutil.rmtree, os.environ["HOME"], ignore_errors=True)  # and leave nothing behind

ROOT = Path(__file__).resolve().parents[1]
#: What the checkout may gain while the tests run (caches, the virtualenv, build metadata).
_ALLOWED_NEW = {".pytest_cache", ".ruff_cache", "__pycache__", ".venv", "nni_hwaware.egg-info"}


def _top_level() -> set[str]:
    return {p.name for p in ROOT.iterdir()}


def pytest_sessionstart(session: pytest.Session) -> None:
    session.config._hwaware_top_level = _top_level()


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """Fail the run when a test, a tuner or a trial left a file in the checkout (they write only
    into their experiment's or the test's own directory)."""
    before = getattr(session.config, "_hwaware_top_level", None)
    if before is None:
        return
    stray = sorted(_top_level() - before - _ALLOWED_NEW)
    if stray:
        print(f"\nerror: the tests left files in the checkout: {stray}", file=sys.stderr)
        session.exitstatus = 1


@pytest.fixture
def background_load():  # type: ignore[no-untyped-def]
    """A seeded busy/idle load on this process's CPUs for the test's duration (at most 10 minutes)."""
    from nni_hwaware.profiling.load import BackgroundLoad

    with BackgroundLoad(seed=0, seconds=600) as load:
        yield load
