"""NNI's web portal in a real browser: the trial table lists every trial with its latency.

A short PPO experiment (``digits_tiny``, 1 epoch, 3 trials) runs through ``nnictl``;
headless Chromium (Debian's ``chromium``, driven by Playwright) opens the Trials
detail page, adds the ``latency_ms`` column the way a user does (Add/Remove
columns), and the test reads the table: every trial is listed with the latency the
trial reported. A screenshot is saved next to the test's files.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import sys
from pathlib import Path

import pytest

from nni_hwaware.cost_model import profile_space
from nni_hwaware.spaces import get_space_config

pytestmark = [pytest.mark.slow, pytest.mark.nnictl]
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"


def _browser() -> object:
    reason = None
    if not Path(CHROMIUM).exists():
        reason = "Debian's chromium is not installed (apt-get install chromium)"
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        reason = "playwright is not installed (pip install -e '.[test]')"
    if reason:
        if os.environ.get("CI"):
            pytest.fail(reason)  # CI installs both; a skip there would hide a broken setup
        pytest.skip(reason)
    return sync_playwright


def test_portal_lists_trials_with_latency(tmp_path: Path) -> None:
    sync_playwright = _browser()
    from nni_hwaware.experiment import create_experiment, write_config

    config = get_space_config("digits_tiny")
    table = tmp_path / "table.csv"
    profile_space(config, progress=False, calibration_samples=0, max_seconds=0.5).save(table)
    (tmp_path / "space.json").write_text(json.dumps(
        {s.label: {"_type": "choice", "_value": list(s.candidates)} for s in config.layer_specs()}))
    template = {
        "searchSpaceFile": str(tmp_path / "space.json"),
        "trialCommand": f"{shlex.quote(sys.executable)} -m nni_hwaware.trial --space digits_tiny "
                        f"--table {shlex.quote(str(table))} --epochs 1 --threads 1",
        "trialCodeDirectory": str(tmp_path), "trialConcurrency": 2, "maxTrialNumber": 3,
        "tuner": {"codeDirectory": str(tmp_path), "className": "nni_hwaware.strategies.ppo.tuner.PPOTuner",
                  "classArgs": {"space": "digits_tiny", "table": str(table), "ppo": {"seed": 0}}},
        "trainingService": {"platform": "local"},
    }
    path = write_config(template, tmp_path / "config.yml", tmp_path / "experiments")
    with create_experiment(path) as experiment:
        assert experiment.wait(timeout=300) == "DONE", experiment.describe()
        latencies = sorted(m["latency_ms"] for m in experiment.final_metrics())
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(
                executable_path=CHROMIUM, args=["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"])
            try:
                page = browser.new_page(viewport={"width": 1400, "height": 900})
                page.goto(f"http://127.0.0.1:{experiment.port}/detail")
                page.get_by_text("Trial jobs").wait_for(timeout=60_000)
                page.get_by_role("button", name="Add/Remove columns").click()
                page.get_by_text("latency_ms (metric)", exact=True).click()
                page.get_by_role("button", name="Save").click()
                grid = page.locator("[role=grid]").first
                grid.get_by_text("latency_ms (metric)", exact=True).wait_for()
                text = grid.inner_text()
                page.screenshot(path=str(tmp_path / "portal_trials.png"), full_page=True)
            finally:
                browser.close()
    assert len(re.findall(r"SUCCEEDED", text)) == 3
    lines = [line.strip() for line in text.splitlines()]
    shown = sorted(float(lines[i + 1]) for i, line in enumerate(lines) if line.endswith("(FINAL)"))
    assert shown == pytest.approx(latencies, rel=1e-3)
    assert (tmp_path / "portal_trials.png").stat().st_size > 10_000
