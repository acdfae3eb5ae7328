"""Search config (YAML -> typed dataclasses) and the stage plan, on exact toy sequences."""

from __future__ import annotations

from pathlib import Path

import pytest

from nni_hwaware.errors import HwAwareError
from nni_hwaware.strategies.gumbel import (
    GumbelSearchConfig,
    StagePlan,
    StagingConfig,
    TemperatureConfig,
)

EXAMPLES = Path(__file__).resolve().parents[1] / "examples" / "digits"
LABELS = [f"l{i}" for i in range(6)]


def test_example_config_parses() -> None:
    config = GumbelSearchConfig.from_yaml(EXAMPLES / "gumbel.yml")
    assert config.space == "digits"
    assert len(config.sweep.alphas) >= 4


def test_unknown_keys_are_rejected_with_the_allowed_ones() -> None:
    with pytest.raises(HwAwareError, match=r"unknown search config options \['alpah'\]; allowed: .*'penalty'"):
        GumbelSearchConfig.from_dict({"alpah": 1})
    with pytest.raises(HwAwareError, match=r"unknown penalty options \['alpah'\]; allowed: \['alpha', 'beta'"):
        GumbelSearchConfig.from_dict({"penalty": {"alpah": 1}})
    with pytest.raises(HwAwareError, match=r"unknown training options \['epoch'\]"):
        GumbelSearchConfig.from_dict({"retrain": {"epoch": 3}})


def test_nested_values_are_validated_at_construction() -> None:
    with pytest.raises(HwAwareError, match="penalty beta must be > 0"):
        GumbelSearchConfig.from_dict({"penalty": {"beta": 0}})
    with pytest.raises(HwAwareError, match=r"temperature min \(1.0\) must not exceed init"):
        GumbelSearchConfig.from_dict({"temperature": {"init": 0.5, "min": 1.0}})
    with pytest.raises(HwAwareError, match="stages order"):
        GumbelSearchConfig.from_dict({"stages": {"order": ["middle"]}})


def test_dotted_replace_and_round_trip() -> None:
    config = GumbelSearchConfig().replace(**{"penalty.alpha": 2.5, "stages.order": ["all"], "seed": 3})
    assert config.penalty.alpha == 2.5 and config.stages.order == ("all",) and config.seed == 3
    assert GumbelSearchConfig.from_dict(config.to_dict()) == config
    with pytest.raises(HwAwareError, match=r"unknown option 'penalty\.alpah'"):
        config.replace(**{"penalty.alpah": 1.0})
    assert config.train_config().seed == 3


def test_temperature_schedules() -> None:
    exp = TemperatureConfig(init=4.0, min=1.0, schedule="exponential")
    assert [exp.at(e, 3) for e in range(3)] == pytest.approx([4.0, 2.0, 1.0])
    lin = TemperatureConfig(init=4.0, min=1.0, schedule="linear")
    assert [lin.at(e, 4) for e in range(5)] == pytest.approx([4.0, 3.0, 2.0, 1.0, 1.0])
    assert exp.at(0, 1) == 4.0


def test_stage_split_and_order() -> None:
    plan = StagePlan(LABELS, StagingConfig(split=2, order=("upper", "lower"), warmup_epochs=1), TemperatureConfig())
    assert [(s.name, s.layers, s.searches, s.trains_stem, s.trains_head) for s in plan.stages] == [
        ("warmup", tuple(LABELS), False, True, True),
        ("upper", ("l2", "l3", "l4", "l5"), True, False, True),
        ("lower", ("l0", "l1"), True, True, False),
    ]
    single = StagePlan(LABELS, StagingConfig(order=("all",)), TemperatureConfig())
    assert [s.layers for s in single.stages] == [tuple(LABELS)]
    assert StagePlan(LABELS, StagingConfig(), TemperatureConfig()).split == 3


def test_a_stage_ends_when_the_loss_stops_falling() -> None:
    staging = StagingConfig(split=3, max_epochs=10, min_epochs=2, patience=2, min_delta=0.1)
    plan = StagePlan(LABELS, staging, TemperatureConfig())
    # upper: 5.0 (best), 4.95 (not by 0.1: bad 1), 4.8 (best), 4.75 (bad 1), 4.8 (bad 2) -> next
    decisions = [plan.end_epoch(loss) for loss in (5.0, 4.95, 4.8, 4.75, 4.8)]
    assert decisions == ["continue"] * 4 + ["next"]
    assert plan.current.name == "lower" and plan.epoch_in_stage == 0
    # lower: never improves after the first epoch; min_epochs 2 and patience 2 -> ends after 3
    assert [plan.end_epoch(loss) for loss in (3.0, 3.0, 3.0)] == ["continue", "continue", "done"]
    assert plan.done
    assert [r["reason"] for r in plan.log if r["decision"] != "continue"] == ["patience", "patience"]


def test_a_stage_ends_at_its_epoch_limit_and_state_round_trips() -> None:
    plan = StagePlan(LABELS, StagingConfig(max_epochs=2, min_epochs=1), TemperatureConfig())
    assert [plan.end_epoch(loss) for loss in (3.0, 2.0)] == ["continue", "next"]
    state = plan.state_dict()
    other = StagePlan(LABELS, StagingConfig(max_epochs=2, min_epochs=1), TemperatureConfig())
    other.load_state_dict(state)
    assert other.state_dict() == state and other.current.name == "lower"
    changed = StagePlan(LABELS, StagingConfig(max_epochs=3, min_epochs=1), TemperatureConfig())
    with pytest.raises(HwAwareError, match="other stages"):
        changed.load_state_dict(state)


def test_split_must_leave_layers_on_both_sides() -> None:
    with pytest.raises(HwAwareError, match="split"):
        StagingConfig(split=0)
    for split in (6, 7):
        with pytest.raises(HwAwareError, match=r"split m=\d+ must leave layers on both sides"):
            StagePlan(LABELS, StagingConfig(split=split), TemperatureConfig())
