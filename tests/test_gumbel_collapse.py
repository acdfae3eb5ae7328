"""The collapse guard: a stage whose training accuracy falls to chance while the cost terms dominate
the loss stops with one line, and the export is the architecture from before the collapse.

The toy: digits through one label, a hidden ``Linear`` (learns) or ``Zero`` (nothing reaches the
head: the network predicts one class, chance). ``Zero`` costs a twentieth of ``Linear``, and a
fixed latency weight of 1000 drives the architecture onto it within a few steps of the first
searching epoch; a warm-up epoch before it trains the weights under the starting distribution,
which leans to ``Linear`` (the reference, ``search.baseline_bias``).
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any, ClassVar

import pandas as pd
import pytest
import torch
from torch import nn

from nni_hwaware.cost_model import choice_cost_model
from nni_hwaware.errors import HwAwareError
from nni_hwaware.nni_fixes import import_nni_nas
from nni_hwaware.strategies.gumbel import (
    GumbelSearchConfig,
    StagePlan,
    StagingConfig,
    TemperatureConfig,
)

_nas = import_nni_nas()


class Zero(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * 0.0


class CollapseSpace(_nas.ModelSpace):
    """Flattened 8x8 digits -> LayerChoice(linear 64->64 | zero) -> ReLU -> linear head."""

    input_shape = (1, 8, 8)
    num_classes = 10
    dataset = "digits"
    reference: ClassVar[dict[str, str]] = {"layer": "linear"}

    def __init__(self) -> None:
        super().__init__()
        self.layer = _nas.LayerChoice({"linear": nn.Linear(64, 64), "zero": Zero()}, label="layer")
        self.head = nn.Linear(64, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(torch.relu(self.layer(x.flatten(1))))


COSTS = pd.DataFrame([{"label": "layer", "value": value, "latency_ms": cost, "memory_mb": 0.1, "flops": 1000 * cost,
                       "params": 100} for value, cost in (("linear", 1.0), ("zero", 0.05))])
CONFIG = {
    "seed": 0, "penalty": {"alpha": 1000.0, "gamma": 0.0},
    "temperature": {"init": 1.0, "min": 1.0, "hard": True},
    "stages": {"order": ["all"], "warmup_epochs": 1, "max_epochs": 3, "min_epochs": 3},
    "search": {"batch_size": 32, "lr": 0.05, "arc_lr": 1.0, "baseline_bias": 2.0, "threads": 1,
               "checkpoint": False, "accelerator": "cpu"}}


def _search(tmp_path: Path, name: str, **changes: Any) -> tuple[Any, list[dict[str, Any]]]:
    from nni_hwaware.spaces.resolve import resolve_space
    from nni_hwaware.strategies.gumbel import search

    named = resolve_space(CollapseSpace())
    model = choice_cost_model(COSTS, choices={"layer": ["linear", "zero"]}, name="collapse")
    config = GumbelSearchConfig.from_dict({**CONFIG, "out": str(tmp_path)}).replace(**changes)
    records: list[dict[str, Any]] = []
    return search(config, named, model, tmp_path / name, report=records.append), records


def test_a_collapsing_stage_stops_with_one_line_and_exports_the_architecture_from_before(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="nni_hwaware.gumbel"):
        outcome, records = _search(tmp_path, "guarded")
    lines = [r.getMessage() for r in caplog.records if r.name == "nni_hwaware.gumbel"]
    assert len(lines) == 1, lines
    line = lines[0]
    assert "\n" not in line and line.startswith("the search collapsed at stage all epoch 1: training top-1 fell to ")
    assert "(epoch 0: " in line
    assert "exporting the architecture of epoch 0, the last before it: {\"layer\":\"linear\"}" in line
    # stopped at the first searching epoch, which collapsed onto zero; the warm-up epoch was good
    assert [r["stage"] for r in outcome.history] == ["warmup", "all"]
    good, bad = outcome.history
    assert good["arch"] == {"layer": "linear"} and good["train_top1"] > 0.4 and "collapsed" not in good
    assert bad["arch"] == {"layer": "zero"} and bad["collapsed"] and bad["decision"] == "stopped"
    # at chance (0.1 on ten classes; 0.08-0.14 over seeds), far below the good epoch
    assert bad["train_top1"] < 0.2 and bad["cost_share"] > 0.5 and bad["collapse"] == line
    assert outcome.stage_log[-1] == {"stage": "all", "loss": bad["loss"], "decision": "stopped", "reason": "collapse"}
    # what is exported (and saved) is the pre-collapse distribution, not the collapsed one
    assert outcome.arch == {"layer": "linear"}
    assert outcome.probabilities["layer"]["linear"] == pytest.approx(torch.tensor([2.0, 0.0]).softmax(0)[0].item(),
                                                                     abs=0.01)
    assert outcome.collapse["line"] == line and outcome.collapse["restored_epoch"] == 0
    assert outcome.collapse["collapsed_arch"] == {"layer": "zero"} and outcome.collapse["arch"] == {"layer": "linear"}
    saved = json.loads((tmp_path / "guarded" / "arch.json").read_text())
    history = json.loads((tmp_path / "guarded" / "history.json").read_text())
    assert saved["arch"] == {"layer": "linear"} and history["collapse"]["line"] == line
    assert records[-1]["collapsed"] is True  # the intermediate result NNI gets says so too

    # without the guard the same search runs on and exports the network that cannot learn
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="nni_hwaware.gumbel"):
        free, _ = _search(tmp_path, "unguarded", **{"stages.collapse_accuracy": 0.0})
    assert not [r for r in caplog.records if r.name == "nni_hwaware.gumbel"]
    assert free.collapse is None and len(free.history) == 4 and free.arch == {"layer": "zero"}
    assert max(r["train_top1"] for r in free.history[1:]) < 0.2  # at chance: it had collapsed, and nothing said so


def test_the_pipeline_retrains_the_pre_collapse_network_and_its_summary_says_why(tmp_path: Path) -> None:
    from nni_hwaware.strategies.gumbel import run_pipeline

    COSTS.to_csv(tmp_path / "costs.csv", index=False)
    config = GumbelSearchConfig.from_dict({
        **CONFIG, "space": "test_gumbel_collapse:CollapseSpace", "out": str(tmp_path / "run"),
        "cost": {"table": str(tmp_path / "costs.csv"), "repeats": 1}, "prune": {"mode": None},
        "retrain": {"epochs": 1}, "baseline": False})
    summary = run_pipeline(config, log=lambda line: None)
    assert summary["arch"] == {"layer": "linear"} and summary["collapse"]["arch"] == {"layer": "linear"}
    assert summary["collapse"]["line"].startswith("the search collapsed at stage all epoch 1")
    assert summary["searched"]["extra"]["search_collapse"]["collapsed_arch"] == {"layer": "zero"}


def test_the_trials_final_result_names_the_form_and_the_collapse() -> None:
    from nni_hwaware.strategies.gumbel.trial import final_metrics

    searched = {"val_top1": 0.9, "test_top1": 0.9, "test_top3": 1.0, "val_top3": 1.0, "latency_ms": 1.0,
                "memory_mb": 1.0, "predicted_latency_ms": 1.0, "predicted_memory_mb": 1.0, "params": 1, "flops": 1}
    summary = {"searched": searched, "baseline": None, "search_seconds": 3.0, "arch": {"layer": "linear"},
               "alpha": None, "latency_target": "45%", "memory_target": "51%",
               "collapse": {"line": "the search collapsed at stage all epoch 1: ..."}}
    final = final_metrics(summary)
    assert (final["latency_target"], final["memory_target"]) == ("45%", "51%") and "alpha" not in final
    assert final["collapse"] == "the search collapsed at stage all epoch 1: ..."
    fixed = final_metrics({**summary, "alpha": 1.5, "latency_target": None, "memory_target": None, "collapse": None})
    assert fixed["alpha"] == 1.5 and "latency_target" not in fixed and "collapse" not in fixed


def test_a_costly_loss_that_still_learns_is_not_a_collapse(tmp_path: Path) -> None:
    """The cost terms dominate (weight 1000) but the accuracy share is set below what the network
    reaches: no collapse, the search runs every epoch."""
    outcome, _ = _search(tmp_path, "fine", **{"stages.collapse_accuracy": 0.01, "stages.max_epochs": 1,
                                              "stages.min_epochs": 1})
    assert outcome.collapse is None and [r["stage"] for r in outcome.history] == ["warmup", "all"]
    assert outcome.history[-1]["cost_share"] > 0.5 and outcome.history[-1]["decision"] == "done"


def test_a_network_that_has_not_learned_yet_has_not_collapsed(tmp_path: Path) -> None:
    """Without the warm-up the first epoch is already on zero: chance, but never above it, so the
    accuracy did not fall; the search runs on (a short search's first epoch is often near chance)."""
    outcome, _ = _search(tmp_path, "cold", **{"stages.warmup_epochs": 0, "stages.max_epochs": 2,
                                              "stages.min_epochs": 2})
    assert outcome.history[0]["train_top1"] < 0.15 and outcome.history[0]["cost_share"] > 0.5
    assert outcome.collapse is None and len(outcome.history) == 2


def test_the_stage_plan_stops_in_the_middle_of_a_stage() -> None:
    plan = StagePlan(["a", "b"], StagingConfig(order=("upper", "lower"), split=1), TemperatureConfig())
    assert plan.end_epoch(2.0) == "continue"
    assert plan.stop(1.5, "collapse") == "stopped" and plan.done
    assert plan.log[-1] == {"stage": "upper", "loss": 1.5, "decision": "stopped", "reason": "collapse"}
    restored = StagePlan(["a", "b"], StagingConfig(order=("upper", "lower"), split=1), TemperatureConfig())
    restored.load_state_dict(plan.state_dict())
    assert restored.done  # a resumed search that had collapsed stays stopped


@pytest.mark.parametrize(("change", "message"), [
    ({"collapse_accuracy": 1.0}, "collapse_accuracy is a share of the batches"),
    ({"collapse_accuracy": -0.1}, "collapse_accuracy must be >= 0"),
    ({"collapse_cost_share": 1.5}, "collapse_cost_share must be < 1"),
])
def test_bad_collapse_options_are_one_line(change: dict, message: str) -> None:
    with pytest.raises(HwAwareError, match=message):
        GumbelSearchConfig.from_dict({"stages": change})
