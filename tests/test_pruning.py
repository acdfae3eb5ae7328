"""Pruning on a hand-made table keeps exactly the hand-computed sets."""

from __future__ import annotations

import json

import pytest
from handmade import tiny_config, tiny_table

from nni_hwaware.cost_table import CostModel, CostTable
from nni_hwaware.errors import HwAwareError
from nni_hwaware.pruning import prune_space
from nni_hwaware.spaces import BlockChoiceSpace, get_space_config

# S = k * U * P with U = F / (T * C), C = 1e9 FLOP/s (see handmade.COSTS):
#   layer1_0: skip 0, basic 2.0*4000 = 8000, bottleneck 1.0*3000 = 3000  (mean 3666.7)
#   layer2_0: skip 0.0025*40 = 0.1, basic 0.5*8000 = 4000, bottleneck 1.0*1000 = 1000  (mean 1666.7)
#   global mean 16000.1 / 6 = 2666.7


@pytest.fixture
def model() -> CostModel:
    return CostModel(tiny_table(), tiny_config())


@pytest.mark.parametrize(
    ("kwargs", "expected"),
    [
        ({}, {"layer1_0": ["basic"], "layer2_0": ["basic"]}),
        ({"k": 2.5}, {"layer1_0": ["basic"], "layer2_0": ["basic"]}),
        ({"mode": "global-mean"}, {"layer1_0": ["basic", "bottleneck"], "layer2_0": ["basic"]}),
        ({"mode": "value", "threshold": 1000.0},
         {"layer1_0": ["basic", "bottleneck"], "layer2_0": ["basic", "bottleneck"]}),
        ({"mode": "value", "threshold": 1e6}, {"layer1_0": ["basic"], "layer2_0": ["basic"]}),
        ({"mode": "top-k", "top": 2}, {"layer1_0": ["basic", "bottleneck"], "layer2_0": ["basic", "bottleneck"]}),
        ({"always_keep": ["skip"]}, {"layer1_0": ["skip", "basic"], "layer2_0": ["skip", "basic"]}),
    ],
)
def test_kept_sets_are_the_hand_computed_ones(model: CostModel, kwargs: dict, expected: dict) -> None:
    result = prune_space(model, **kwargs)
    assert {k: list(v) for k, v in result.config.layer_candidates.items()} == expected


def test_scores_in_the_report(model: CostModel) -> None:
    report = prune_space(model).report.set_index(["layer", "block"])
    assert report.loc[("layer1_0", "basic"), "U"] == pytest.approx(2.0)
    assert report.loc[("layer1_0", "basic"), "S"] == pytest.approx(8000)
    assert report.loc[("layer2_0", "skip"), "S"] == pytest.approx(0.1)
    assert report.loc[("layer2_0", "basic"), "threshold"] == pytest.approx(4000.1 / 3 + 1000 / 3)


def test_pruned_space_is_an_nni_space_and_saves(model: CostModel, tmp_path) -> None:
    result = prune_space(model, mode="global-mean")
    assert result.sizes() == (9, 2)
    space = BlockChoiceSpace(result.config.to_dict())
    assert space.simplify()["layer1_0"].values == ["basic", "bottleneck"]
    path = result.save(tmp_path / "pruned.json", tmp_path / "report.csv")
    data = json.loads(path.read_text())
    assert data["pruning"]["size_after"] == 2
    assert get_space_config(path) == result.config
    assert (tmp_path / "report.csv").read_text().startswith("layer,block,F,T_ms,U,P,S,threshold,kept")


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [({"k": 0}, "k must be a positive"), ({"k": -1.0}, "k must be a positive"),
     ({"mode": "median"}, "unknown pruning mode 'median'"),
     ({"mode": "value"}, "needs a finite threshold"), ({"mode": "top-k"}, "needs top >= 1")],
)
def test_bad_options_are_named(model: CostModel, kwargs: dict, message: str) -> None:
    with pytest.raises(HwAwareError, match=message):
        prune_space(model, **kwargs)


def test_all_zero_scores_are_rejected() -> None:
    frame = tiny_table().frame
    frame["params"] = 0
    with pytest.raises(HwAwareError, match="all zero"):
        prune_space(CostModel(CostTable(frame), tiny_config()))


def test_table_lacking_a_block_of_the_space_is_named() -> None:
    config = tiny_config()
    config = config.with_layer_candidates({"layer1_0": ["skip", "mbconv_k3_e6"]})
    with pytest.raises(HwAwareError, match="no row for block 'mbconv_k3_e6' with input_shape 8x8x8"):
        CostModel(tiny_table(), config)
