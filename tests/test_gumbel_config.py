"""Search config (YAML -> typed dataclasses) and the stage plan, on exact toy sequences."""

from __future__ import annotations

from pathlib import Path

import pytest

from nni_hwaware.errors import HwAwareError
from nni_hwaware.strategies.gumbel import (
    GumbelSearchConfig,
    PenaltyConfig,
    StagePlan,
    StagingConfig,
    TemperatureConfig,
)
from nni_hwaware.strategies.gumbel.strategy_config import DEFAULT_TARGETS as _DEFAULTS

DEFAULT_TARGETS = (_DEFAULTS["latency_target"], _DEFAULTS["memory_target"])

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples" / "digits"
LABELS = [f"l{i}" for i in range(6)]


def test_example_config_parses() -> None:
    config = GumbelSearchConfig.from_yaml(EXAMPLES / "gumbel.yml")
    assert config.space == "digits"
    # seed 001's targets, not weights; the sweep is over latency targets
    assert (config.penalty.latency_target, config.penalty.memory_target) == ("45%", "51%")
    assert config.sweep.targets == ("30%", "45%", "60%") and config.sweep.alphas == ()


@pytest.mark.parametrize("path", [EXAMPLES / "gumbel.yml", ROOT / "examples/cifar10_resnet50/gumbel.yml",
                                  ROOT / "examples/own_space/gumbel.yml"])
def test_every_example_aims_at_seed_001s_targets(path: Path) -> None:
    penalty = GumbelSearchConfig.from_yaml(path).penalty
    assert (penalty.latency_target, penalty.memory_target) == ("45%", "51%"), path


def test_targets_are_the_default_and_weights_alone_are_the_fixed_weight_form() -> None:
    assert (GumbelSearchConfig().penalty.latency_target, GumbelSearchConfig().penalty.memory_target) == DEFAULT_TARGETS
    assert DEFAULT_TARGETS == ("45%", "51%")
    for section in ({}, {"memory": "sum"}, {"beta": 1.0}):  # nothing that chooses a form: the targets
        penalty = GumbelSearchConfig.from_dict({"penalty": section}).penalty
        assert (penalty.latency_target, penalty.memory_target) == ("45%", "51%"), section
    fixed = GumbelSearchConfig.from_dict({"penalty": {"alpha": 2.0}}).penalty  # a weight alone: fixed weights
    assert (fixed.alpha, fixed.gamma, fixed.latency_target, fixed.memory_target) == (2.0, 0.5, None, None)
    budget = PenaltyConfig(latency_budget_ms="50%")  # a budget alone: the budget form, no targets
    assert budget.latency_target is None and budget.memory_target is None and budget.alpha == 1.0
    # a weight with a target: the weight is where the target's controller starts; the other term keeps its form
    both = PenaltyConfig(alpha=3.0, latency_target="30%")
    assert (both.alpha, both.latency_target, both.memory_target, both.gamma) == (3.0, "30%", None, 0.5)
    # the round trip keeps the form
    assert GumbelSearchConfig.from_dict(GumbelSearchConfig().to_dict()) == GumbelSearchConfig()
    assert PenaltyConfig(**GumbelSearchConfig(penalty=fixed).to_dict()["penalty"]) == fixed


def test_an_exponent_with_a_target_is_one_line() -> None:
    with pytest.raises(HwAwareError, match=r"penalty beta 2\.0 shapes the fixed-weight and budget forms only"):
        GumbelSearchConfig.from_dict({"penalty": {"latency_target": "45%", "beta": 2.0}})
    with pytest.raises(HwAwareError, match=r"penalty delta 0\.5 .*memory_target: null"):
        PenaltyConfig(delta=0.5)  # the default targets
    assert PenaltyConfig(delta=0.5, memory_target=None, latency_target="45%").delta == 0.5


def test_sweep_targets_parse_and_name_their_points() -> None:
    from nni_hwaware.strategies.gumbel.points import point_name, point_text, search_points

    config = GumbelSearchConfig.from_dict({"sweep": {"targets": ["30%", "45%", 2.5]}})
    assert config.sweep.targets == ("30%", "45%", 2.5) and config.sweep.alphas == ()
    points = search_points(config)  # the config's own (45 %) first, then the others; 45 % once
    assert [name for name, _, _ in points] == ["target_45pct", "target_30pct", "target_2p5ms"]
    assert [run.penalty.latency_target for _, run, _ in points] == ["45%", "30%", 2.5]
    assert all(run.penalty.memory_target == "51%" for _, run, _ in points)
    assert [point for _, _, point in points][1] == {"latency_target": "30%", "memory_target": "51%"}
    assert point_text(points[2][2]) == "latency target 2.5 ms, memory target 51%"
    assert point_name("latency_target", "45.0%") == "target_45pct"
    # the fixed-weight form keeps its alpha sweep
    alphas = GumbelSearchConfig.from_dict({"penalty": {"alpha": 1.5, "gamma": 1.5}, "sweep": {"alphas": [0.5, 1.5]}})
    assert [(name, point) for name, _, point in search_points(alphas)] == [
        ("alpha_1p5", {"alpha": 1.5}), ("alpha_0p5", {"alpha": 0.5})]
    assert search_points(alphas)[1][1].penalty.alpha == 0.5


@pytest.mark.parametrize(("sweep", "penalty", "message"), [
    ({"targets": ["30%"], "alphas": [1.0]}, {"alpha": 1.0}, "sweep alphas and targets are two forms"),
    ({"alphas": [1.0]}, {}, r"sweep alphas sweep the fixed latency weight, but penalty.latency_target '45%' sets it"),
    ({"targets": ["30%"]}, {"latency_budget_ms": 2.0}, "penalty.latency_budget_ms is another form"),
    ({"targets": ["30"]}, {}, "sweep target"),
    ({"targets": [0]}, {}, "sweep target must be > 0"),
    ({"targets": [True]}, {}, "sweep target must be a finite number"),
])
def test_bad_sweeps_are_one_line(sweep: dict, penalty: dict, message: str) -> None:
    with pytest.raises(HwAwareError, match=message):
        GumbelSearchConfig.from_dict({"penalty": penalty, "sweep": sweep})


def test_unknown_keys_are_rejected_with_the_allowed_ones() -> None:
    with pytest.raises(HwAwareError, match=r"unknown search config options \['alpah'\]; allowed: .*'penalty'"):
        GumbelSearchConfig.from_dict({"alpah": 1})
    with pytest.raises(HwAwareError, match=r"unknown penalty options \['alpah'\]; allowed: \['alpha', 'beta'"):
        GumbelSearchConfig.from_dict({"penalty": {"alpah": 1}})
    with pytest.raises(HwAwareError, match=r"unknown training options \['epoch'\]"):
        GumbelSearchConfig.from_dict({"retrain": {"epoch": 3}})


def test_a_switch_given_as_a_string_is_an_error_not_true() -> None:
    # YAML's `checkpoint: "false"` or `hard: no` (quoted) would otherwise read as True
    with pytest.raises(HwAwareError, match=r"search options: checkpoint must be true or false, got 'false'"):
        GumbelSearchConfig.from_dict({"search": {"checkpoint": "false"}})
    with pytest.raises(HwAwareError, match=r"baseline must be true or false, got 1"):
        GumbelSearchConfig.from_dict({"baseline": 1})
    assert GumbelSearchConfig.from_dict({"temperature": {"hard": False}}).temperature.hard is False


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
