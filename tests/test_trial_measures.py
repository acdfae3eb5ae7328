"""A search trial measures its own network on its machine, beside the space's reference network."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from nni_hwaware.errors import HwAwareError
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


def test_a_trial_judges_the_budget_on_the_tables_scale_as_the_search_does() -> None:
    from nni_hwaware.trial.run import over_budget

    params = TrialParameters(arch={}, space="digits_tiny", budget={"latency_ms": 5.0, "memory_mb": 3.0},
                             reference_table_latency_ms=8.0)
    # timed 2x slow on a busy machine: 9 ms raw, but half the reference (table: 8 ms) is 4 ms
    assert over_budget({"latency_ms": 9.0, "latency_ratio": 0.5, "memory_mb": 2.0}, params) == []
    assert over_budget({"latency_ms": 4.5, "latency_ratio": 0.75, "memory_mb": 2.0}, params) == ["latency_ms"]
    assert over_budget({"latency_ms": 4.5, "latency_ratio": 0.5, "memory_mb": 3.5}, params) == ["memory_mb"]
    assert over_budget({}, params) == []  # nothing measured (no reference network): nothing to judge
    assert over_budget({"latency_ms": 99.0}, TrialParameters(arch={}, space="digits_tiny")) == []  # no budget


@pytest.mark.parametrize("budget", [{"flops": 1.0}, {"latency_ms": 0.0}, {"latency_ms": "fast"}])
def test_a_malformed_budget_in_the_parameters_is_a_one_line_error(budget: dict) -> None:
    with pytest.raises(HwAwareError, match="the trial's budget is malformed") as err:
        TrialParameters(arch={}, space="digits_tiny", budget=budget)
    assert "\n" not in str(err.value)
    sent = TrialParameters(arch={"layer1_0": "skip"}, space="digits_tiny", budget={"latency_ms": 2.0},
                           reference_table_latency_ms=4.0)
    assert TrialParameters.from_dict(sent.to_dict()) == sent


def _run_as_nni_trial(monkeypatch: pytest.MonkeyPatch, params: TrialParameters, trained: list[int]) -> dict:
    import nni

    from nni_hwaware import nni_fixes, training
    from nni_hwaware.training.train import TrainResult

    reported: list[dict] = []
    monkeypatch.setattr(nni_fixes, "next_parameters", params.to_dict)
    monkeypatch.setattr(nni, "report_final_result", reported.append)

    def train_architecture(*args, **kwargs) -> TrainResult:
        trained.append(1)
        return TrainResult(val_top1=0.9, val_top3=1.0, test_top1=0.9, test_top3=1.0, best_epoch=0, train_seconds=1.0)

    monkeypatch.setattr(training, "train_architecture", train_architecture)
    assert main([]) == 0
    return reported[-1]


ARCH = {"layer1_0": "basic", "layer2_0": "basic", "layer3_0": "basic", "layer4_0": "basic"}
REFERENCE = {"layer1_0": "skip", "layer2_0": "skip", "layer3_0": "skip", "layer4_0": "skip"}


def test_a_trial_measured_over_the_budget_reports_it_without_training(monkeypatch: pytest.MonkeyPatch) -> None:
    """The search counts a network measured over the budget a failure whatever its accuracy: the trial
    measures first (for real here), and trains only a network that fits."""
    trained: list[int] = []
    # plain blocks against skip blocks: well over a budget of the reference's own latency
    tight = TrialParameters(arch=ARCH, space="digits_tiny", reference=REFERENCE, costs={"latency_ms": 1.0},
                            budget={"latency_ms": 1.0}, reference_table_latency_ms=1.0)
    final = _run_as_nni_trial(monkeypatch, tight, trained)
    assert trained == [] and final["default"] == 0.0 and final["latency_ratio"] > 1.0
    assert final["not_trained"] == "measured over the budget (latency_ms)"
    assert final["predicted_latency_ms"] == 1.0 and json.loads(final["arch"]) == ARCH
    loose = TrialParameters(arch=ARCH, space="digits_tiny", reference=REFERENCE, costs={"latency_ms": 1.0},
                            budget={"latency_ms": 1000.0}, reference_table_latency_ms=1.0)
    final = _run_as_nni_trial(monkeypatch, loose, trained)
    assert trained == [1] and final["default"] == 0.9 and "not_trained" not in final
    unbounded = TrialParameters(arch=ARCH, space="digits_tiny", reference=REFERENCE, costs={"latency_ms": 1.0})
    assert _run_as_nni_trial(monkeypatch, unbounded, trained)["default"] == 0.9 and trained == [1, 1]


def test_a_trial_run_without_the_tuner_measures_as_its_table_was_profiled(tmp_path: Path) -> None:
    import pandas as pd

    from nni_hwaware.trial.run import _parser, _standalone

    frame = pd.read_csv(TABLE)
    frame["backend"], frame["batch_size"] = "onnxruntime", 4  # a table profiled in another runtime, at batch 4
    table = tmp_path / "table.csv"
    frame.to_csv(table, index=False)
    arch = tmp_path / "arch.json"
    arch.write_text(json.dumps({"layer1_0": "skip", "layer2_0": "basic", "layer3_0": "skip", "layer4_0": "skip"}))
    args = _parser().parse_args(["--space", "digits_tiny", "--table", str(table), "--arch", str(arch),
                                 "--backend", "onnxruntime", "--batch-size", "4"])
    measuring = _standalone(args).measuring
    assert (measuring.backend, measuring.batch_size, measuring.threads, measuring.device) == ("onnxruntime", 4, 1, "cpu")
