"""Each fix in nni_hwaware.nni_fixes, shown to matter."""

from __future__ import annotations

import importlib.util
import subprocess
import sys

import pytest

from nni_hwaware import nni_fixes
from nni_hwaware.nni_fixes import IncompatibleEnvironmentError


@pytest.mark.parametrize(
    ("dist", "version", "pin"),
    [("filelock", "3.12.0", "filelock<3.12"), ("filelock", "3.20.1", "filelock<3.12"),
     ("setuptools", "81.0.0", "setuptools<81"), ("setuptools", "82.1", "setuptools<81")],
)
def test_too_new_versions_are_named_with_the_fix(dist: str, version: str, pin: str) -> None:
    with pytest.raises(IncompatibleEnvironmentError) as info:
        nni_fixes.check_versions({dist: version})
    message = str(info.value)
    assert "\n" not in message
    assert f"{dist} {version}" in message
    assert f"pip install '{pin}'" in message


@pytest.mark.parametrize(
    "installed",
    [{"filelock": "3.11.0", "setuptools": "80.10.2"}, {"filelock": "3.11.9rc1"}, {}],
)
def test_versions_in_range_pass(installed: dict[str, str]) -> None:
    nni_fixes.check_versions(installed)


def test_installed_environment_is_in_range() -> None:
    nni_fixes.check_environment()


def test_missing_pkg_resources_names_the_pin(monkeypatch: pytest.MonkeyPatch) -> None:
    real = importlib.util.find_spec

    def find_spec(name: str, *args: object) -> object:
        return None if name == "pkg_resources" else real(name, *args)

    monkeypatch.setattr(importlib.util, "find_spec", find_spec)
    with pytest.raises(IncompatibleEnvironmentError, match=r"pip install 'setuptools<81'"):
        nni_fixes.check_pkg_resources()


def _stderr_of(code: str) -> str:
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120
    )
    return result.stdout + result.stderr


def test_plain_nni_import_warns_so_the_fix_is_needed() -> None:
    # Without the fix NNI warns about torch classes; if this ever stops failing,
    # NNI or torch changed and the fix can go.
    assert "is found to be not a nn.Module" in _stderr_of("import nni.nas.nn.pytorch")


def test_import_nni_nas_is_silent() -> None:
    code = "from nni_hwaware.nni_fixes import import_nni_nas; import_nni_nas()"
    assert _stderr_of(code) == ""


def test_import_package_prints_nothing() -> None:
    assert _stderr_of("import nni_hwaware") == ""
