"""The hardware penalty on the hand-made two-layer table: values checked by hand, gradients, bad input."""

from __future__ import annotations

import math

import pytest
import torch
from handmade import tiny_config, tiny_table

from nni_hwaware.cost_model import BlockCostModel
from nni_hwaware.errors import HwAwareError
from nni_hwaware.strategies.gumbel import HardwarePenalty, PenaltyConfig

# tiny space: layers layer1_0, layer2_0; blocks skip, basic, bottleneck (see tests/handmade.py)
FIXED_LAT = 0.5 + 0.25
FIXED_PARAM, FIXED_ACT = 0.01 + 0.02, 0.2


def _model() -> BlockCostModel:
    return BlockCostModel(tiny_table(), tiny_config())


def _one_hot(j: int, k: int = 3) -> torch.Tensor:
    return torch.nn.functional.one_hot(torch.tensor(j), k).float()


def test_one_hot_masks_give_the_tables_prediction_for_every_architecture() -> None:
    model = _model()
    penalty = HardwarePenalty(model, PenaltyConfig())
    names = ["skip", "basic", "bottleneck"]
    for a in range(3):
        for b in range(3):
            latency, memory = penalty.expected_costs([_one_hot(a), _one_hot(b)])
            predicted = model.predict({"layer1_0": names[a], "layer2_0": names[b]})
            assert float(latency) == pytest.approx(predicted.latency_ms, rel=1e-6)
            assert float(memory) == pytest.approx(predicted.memory_mb, rel=1e-6)


def test_soft_masks_are_the_weighted_sums_by_hand() -> None:
    penalty = HardwarePenalty(_model(), PenaltyConfig(memory="table"))
    m1, m2 = torch.tensor([0.5, 0.25, 0.25]), torch.tensor([0.0, 0.5, 0.5])
    latency, memory = penalty.expected_costs([m1, m2])
    assert float(latency) == pytest.approx(FIXED_LAT + 0.5 * 0.1 + 0.25 * 2.0 + 0.25 * 1.0 + 0.5 * 4.0 + 0.5 * 1.0)
    params = FIXED_PARAM + 0.25 * 0.4 + 0.25 * 0.3 + 0.5 * 0.8 + 0.5 * 0.1
    peak = max(FIXED_ACT, 0.5 * 0.1 + 0.25 * 0.3 + 0.25 * 0.25, 0.5 * 0.15 + 0.5 * 0.12)
    assert float(memory) == pytest.approx(params + peak)


def test_the_seeds_literal_memory_sum() -> None:
    penalty = HardwarePenalty(_model(), PenaltyConfig(memory="sum"))
    _, memory = penalty.expected_costs([_one_hot(1), _one_hot(2)])
    assert float(memory) == pytest.approx(FIXED_PARAM + 0.2 + 0.05 + (0.4 + 0.3) + (0.1 + 0.12))


def test_normalised_penalty_of_the_baseline_is_alpha_plus_gamma() -> None:
    baseline = [_one_hot(2), _one_hot(2)]  # bottleneck in both layers
    for alpha, beta, gamma, delta in [(1.0, 1.0, 0.5, 1.0), (2.0, 0.5, 3.0, 2.0), (0.0, 1.0, 0.0, 1.0)]:
        penalty = HardwarePenalty(_model(), PenaltyConfig(alpha=alpha, beta=beta, gamma=gamma, delta=delta))
        value, _ = penalty(baseline)
        assert float(value) == pytest.approx(alpha + gamma)


def test_penalty_formula_and_its_gradient_by_hand() -> None:
    model = _model()
    cfg = PenaltyConfig(alpha=2.0, beta=2.0, gamma=0.0, delta=1.0)
    penalty = HardwarePenalty(model, cfg)
    base_lat = model.predict(tiny_config().baseline()).latency_ms  # 0.75 + 1 + 1
    m1 = torch.tensor([0.2, 0.3, 0.5], requires_grad=True)
    m2 = torch.tensor([0.6, 0.1, 0.3], requires_grad=True)
    value, parts = penalty([m1, m2])
    lat = FIXED_LAT + 0.2 * 0.1 + 0.3 * 2.0 + 0.5 * 1.0 + 0.6 * 0.2 + 0.1 * 4.0 + 0.3 * 1.0
    assert parts["latency_ms"] == pytest.approx(lat, rel=1e-6)
    assert float(value.detach()) == pytest.approx(2.0 * (lat / base_lat) ** 2, rel=1e-6)
    value.backward()
    scale = 2.0 * 2.0 * lat / base_lat**2  # d/dm alpha*(lat/ref)^2 = 2*alpha*lat/ref^2 * lat_ij
    assert m1.grad.tolist() == pytest.approx([scale * 0.1, scale * 2.0, scale * 1.0], rel=1e-5)
    assert m2.grad.tolist() == pytest.approx([scale * 0.2, scale * 4.0, scale * 1.0], rel=1e-5)


def test_budget_mode_penalises_only_the_excess() -> None:
    cfg = PenaltyConfig(alpha=3.0, beta=0.5, gamma=0.0, latency_budget_ms=2.0)
    penalty = HardwarePenalty(_model(), cfg)
    under = [_one_hot(0).requires_grad_(), _one_hot(0).requires_grad_()]  # 0.75 + 0.1 + 0.2 = 1.05 ms
    value, _ = penalty(under)
    assert float(value) == 0.0
    value.backward()
    assert all(m.grad is not None and torch.all(m.grad == 0) for m in under)
    over = [_one_hot(1), _one_hot(1)]  # 0.75 + 2 + 4 = 6.75 ms
    value, _ = penalty(over)
    assert float(value) == pytest.approx(3.0 * (6.75 / 2.0 - 1.0) ** 0.5)


def test_unnormalised_costs_are_plain_ms_and_mb() -> None:
    penalty = HardwarePenalty(_model(), PenaltyConfig(alpha=1.0, gamma=1.0, normalise="none"))
    value, parts = penalty([_one_hot(0), _one_hot(0)])
    assert float(value) == pytest.approx(parts["latency_ms"] + parts["memory_mb"])


@pytest.mark.parametrize(("field", "value"), [
    ("alpha", -0.1), ("gamma", -1.0), ("beta", 0.0), ("beta", -2.0), ("delta", 0.0),
    ("alpha", math.nan), ("latency_budget_ms", 0.0), ("memory_budget_mb", -1.0),
])
def test_bad_penalty_values_are_clear_errors(field: str, value: float) -> None:
    with pytest.raises(HwAwareError, match=field) as info:
        PenaltyConfig(**{field: value})
    assert "\n" not in str(info.value)


def test_a_table_without_the_chip_names_the_chips_it_has() -> None:
    with pytest.raises(HwAwareError, match=r"chip='chipB'.*'chipA'"):
        BlockCostModel(tiny_table("chipA"), tiny_config(), chip="chipB")


def test_masks_must_match_the_layers() -> None:
    penalty = HardwarePenalty(_model(), PenaltyConfig())
    with pytest.raises(HwAwareError, match="masks for 2 labels"):
        penalty([_one_hot(0)])
    with pytest.raises(HwAwareError, match="label layer2_0: mask of shape"):
        penalty([_one_hot(0), torch.ones(4)])


def test_candidate_order_follows_the_supernet() -> None:
    model = _model()
    order = {"layer1_0": ["bottleneck", "skip", "basic"], "layer2_0": ["basic", "bottleneck", "skip"]}
    penalty = HardwarePenalty(model, PenaltyConfig(), layer_names=order)
    latency, _ = penalty.expected_costs([_one_hot(1), _one_hot(2)])  # skip, skip
    assert float(latency) == pytest.approx(model.predict({"layer1_0": "skip", "layer2_0": "skip"}).latency_ms)
    with pytest.raises(HwAwareError, match="not in the cost model"):
        HardwarePenalty(model, PenaltyConfig(), layer_names={**order, "layer2_0": ["mbconv_k3_e3"]})


def test_budgets_in_percent_of_the_baseline() -> None:
    model = _model()
    base = model.predict(tiny_config().baseline())  # 2.75 ms
    penalty = HardwarePenalty(model, PenaltyConfig(alpha=1.0, gamma=1.0, latency_budget_ms="50%",
                                                   memory_budget_mb="200%"))
    assert penalty.latency_ref == pytest.approx(0.5 * base.latency_ms)
    assert penalty.memory_ref == pytest.approx(2.0 * base.memory_mb)
    value, _ = penalty([_one_hot(2), _one_hot(2)])  # the baseline: 2x the latency budget, under memory's
    assert float(value) == pytest.approx(1.0)
    for bad in ("50", "-5%", "abc%", "0%"):
        with pytest.raises(HwAwareError, match="percentage of the baseline"):
            PenaltyConfig(latency_budget_ms=bad)
