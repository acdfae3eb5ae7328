"""Predictions from a hand-made table are the exact sums; NNI profilers agree."""

from __future__ import annotations

import pytest
from handmade import tiny_config, tiny_table

from nni_hwaware.cost_model import BlockCostModel
from nni_hwaware.cost_table import CostTable
from nni_hwaware.errors import HwAwareError
from nni_hwaware.spaces import BlockChoiceSpace


def test_prediction_is_the_exact_sum() -> None:
    model = BlockCostModel(tiny_table(), tiny_config())
    cost = model.predict({"layer1_0": "basic", "layer2_0": "skip"})
    assert cost.latency_ms == pytest.approx(0.5 + 0.25 + 2.0 + 0.2)
    assert cost.flops == 1000 + 200 + 4_000_000 + 500
    assert cost.params == 10 + 20 + 4000 + 40
    # weights summed, activations: the largest working set (basic's 0.3)
    assert cost.memory_mb == pytest.approx(0.01 + 0.02 + 0.4 + 0.001 + 0.3)


def test_fixed_activation_can_be_the_peak() -> None:
    cost = BlockCostModel(tiny_table(), tiny_config()).predict({"layer1_0": "skip", "layer2_0": "skip"})
    assert cost.activation_mb == pytest.approx(0.2)  # the stem's


def test_cheapest_by_latency() -> None:
    model = BlockCostModel(tiny_table(), tiny_config())
    assert model.cheapest("latency_ms") == {"layer1_0": "skip", "layer2_0": "skip"}
    assert model.cheapest("flops") == {"layer1_0": "skip", "layer2_0": "skip"}


@pytest.mark.parametrize("metric", ["latency_ms", "memory_mb", "flops", "params"])
def test_nni_expression_profiler_matches_predict(metric: str) -> None:
    config = tiny_config()
    model = BlockCostModel(tiny_table(), config)
    profiler = model.expression_profiler(BlockChoiceSpace(config.to_dict()), metric)
    for arch in ({"layer1_0": "basic", "layer2_0": "skip"}, {"layer1_0": "bottleneck", "layer2_0": "basic"}):
        assert profiler.profile(arch) == pytest.approx(model.predict(arch).metrics()[metric])


def test_chip_choice_is_required_for_several_chips() -> None:
    table = tiny_table("chipA").merge(tiny_table("chipB", scale=2.0))
    with pytest.raises(HwAwareError, match="choose one with chip="):
        BlockCostModel(table, tiny_config())
    slow = BlockCostModel(table, tiny_config(), chip="chipB").predict({"layer1_0": "skip", "layer2_0": "skip"})
    assert slow.latency_ms == pytest.approx(2 * (0.5 + 0.25 + 0.1 + 0.2))


def test_missing_chip_batch_and_block_are_named() -> None:
    table = tiny_table()
    with pytest.raises(HwAwareError, match="chipZ"):
        BlockCostModel(table, tiny_config(), chip="chipZ")
    with pytest.raises(HwAwareError, match="batch"):
        BlockCostModel(table, tiny_config(), batch_size=32)
    frame = table.frame
    frame = frame[~((frame.block == "basic") & (frame.input_shape == "8x8x8"))]
    with pytest.raises(HwAwareError, match="basic"):
        BlockCostModel(CostTable(frame), tiny_config())


def test_compare_chips_ranks_the_faster_chip_first() -> None:
    table = tiny_table("slow", scale=3.0).merge(tiny_table("fast"))
    from nni_hwaware.cost_table import BlockKey

    config = tiny_config()
    keys = [BlockKey(s.candidates[2], s.input_shape, s.out_channels, s.stride) for s in config.layer_specs()]
    comparison = table.compare_chips(keys, backend="torch", batch_size=1)
    assert list(comparison.index) == ["fast", "slow"]
    assert comparison.loc["fast", "latency_ms"] == pytest.approx(2.0)
