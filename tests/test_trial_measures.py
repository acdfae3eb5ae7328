"""A search trial measures its own network on its machine, beside the space's reference network."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from nni_hwaware.trial.parameters import TrialParameters
from nni_hwaware.trial.run import main, trial_metrics

TABLE = Path(__file__).resolve().parents[1] / "benchmarks" / "data" / "digits_tiny_table.csv"


def test_metrics_carry_measured_and_predicted_costs() -> None:
    costs = {"latency_ms": 1.0, "memory_mb": 2.0, "flops": 10, "params": 5}
    measured = {"latency_ms": 1.5, "memory_mb": 2.5, "latency_ratio": 0.4}
    final = trial_metrics({"a": "x"}, {"val_top1": 0.9}, costs, measured)
    assert (final["latency_ms"], final["memory_mb"]) == (1.5, 2.5)  # what the chip measured wins
    assert (final["predicted_latency_ms"], final["predicted_memory_mb"]) == (1.0, 2.0)
    assert final["latency_ratio"] == 0.4 and final["flops"] == 10 and final["default"] == 0.9
    unmeasured = trial_metrics({"a": "x"}, {"val_top1": 0.9}, costs)
    assert unmeasured["latency_ms"] == unmeasured["predicted_latency_ms"] == 1.0


def test_parameters_carry_the_reference_network() -> None:
    params = TrialParameters(arch={"layer1_0": "skip"}, space="digits_tiny", reference={"layer1_0": "basic"})
    assert TrialParameters.from_dict(params.to_dict()).reference == {"layer1_0": "basic"}


@pytest.mark.slow
def test_a_trial_reports_its_measured_costs(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    arch = tmp_path / "arch.json"
    arch.write_text(json.dumps({"layer1_0": "skip", "layer2_0": "bottleneck", "layer3_0": "skip", "layer4_0": "skip"}))
    assert main(["--space", "digits_tiny", "--table", str(TABLE), "--arch", str(arch), "--epochs", "1"]) == 0
    final = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    for key in ("latency_ms", "memory_mb", "predicted_latency_ms", "predicted_memory_mb", "latency_ratio",
                "reference_latency_ms"):
        assert final[key] > 0, key
    assert final["latency_ms"] != final["predicted_latency_ms"]  # measured here, not copied from the table
    assert final["latency_ratio_ci95_low"] <= final["latency_ratio"] <= final["latency_ratio_ci95_high"]
    # mostly skip blocks: cheaper than the space's reference (plain blocks) on any chip
    assert final["latency_ratio"] < 1.0
