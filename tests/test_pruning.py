"""Pruning on a hand-made table keeps exactly the hand-computed sets."""

from __future__ import annotations

import json

import pytest
from handmade import tiny_config, tiny_table

from nni_hwaware.cost_model import BlockCostModel, SpaceCostModel, space_model
from nni_hwaware.cost_table import CostTable
from nni_hwaware.errors import HwAwareError
from nni_hwaware.pruning import prune_choices
from nni_hwaware.spaces import BlockChoiceSpace, get_space_config
from nni_hwaware.spaces.resolve import resolve_space

# S = k * U * P with U = F / (T * C), C = 1e9 FLOP/s (see handmade.COSTS):
#   layer1_0: skip 0, basic 2.0*4000 = 8000, bottleneck 1.0*3000 = 3000  (mean 3666.7)
#   layer2_0: skip 0.0025*40 = 0.1, basic 0.5*8000 = 4000, bottleneck 1.0*1000 = 1000  (mean 1666.7)
#   global mean 16000.1 / 6 = 2666.7


@pytest.fixture
def model() -> SpaceCostModel:
    return space_model(resolve_space(tiny_config()), tiny_table())


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
def test_kept_sets_are_the_hand_computed_ones(model: SpaceCostModel, kwargs: dict, expected: dict) -> None:
    result = prune_choices(model, **kwargs)
    assert result.allowed == expected
    assert result.model.choices() == expected


def test_scores_in_the_report(model: SpaceCostModel) -> None:
    report = prune_choices(model).report.set_index(["label", "value"])
    assert report.loc[("layer1_0", "basic"), "U"] == pytest.approx(2.0)
    assert report.loc[("layer1_0", "basic"), "S"] == pytest.approx(8000)
    assert report.loc[("layer2_0", "skip"), "S"] == pytest.approx(0.1)
    assert report.loc[("layer2_0", "basic"), "threshold"] == pytest.approx(4000.1 / 3 + 1000 / 3)


def test_pruned_project_space_is_an_nni_space_and_saves(model: SpaceCostModel, tmp_path) -> None:
    result = prune_choices(model, mode="global-mean")
    assert result.sizes() == (9, 2)
    path = result.save(tmp_path / "pruned.json", resolve_space(tiny_config()), report_csv=tmp_path / "report.csv")
    data = json.loads(path.read_text())
    assert data["pruning"]["size_after"] == 2
    config = get_space_config(path)
    assert {s.label: list(s.candidates) for s in config.layer_specs()} == result.allowed
    assert BlockChoiceSpace(config.to_dict()).simplify()["layer1_0"].values == ["basic", "bottleneck"]
    assert (tmp_path / "report.csv").read_text().startswith("label,value,F,T_ms,U,P,S,threshold,kept")


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [({"k": 0}, "k must be a positive"), ({"k": -1.0}, "k must be a positive"),
     ({"mode": "median"}, "unknown pruning mode 'median'"),
     ({"mode": "value"}, "needs a finite threshold"), ({"mode": "top-k"}, "needs top >= 1")],
)
def test_bad_options_are_named(model: SpaceCostModel, kwargs: dict, message: str) -> None:
    with pytest.raises(HwAwareError, match=message):
        prune_choices(model, **kwargs)


def test_all_zero_scores_are_rejected() -> None:
    frame = tiny_table().frame
    frame["params"] = 0
    with pytest.raises(HwAwareError, match="all zero"):
        prune_choices(space_model(resolve_space(tiny_config()), CostTable(frame)))


def test_table_lacking_a_block_of_the_space_is_named() -> None:
    config = tiny_config()
    config = config.with_layer_candidates({"layer1_0": ["skip", "mbconv_k3_e6"]})
    with pytest.raises(HwAwareError, match="no row for block 'mbconv_k3_e6' with input_shape 8x8x8"):
        BlockCostModel(tiny_table(), config)


def test_a_pruned_hub_space_saves_as_a_space_every_command_takes(tmp_path) -> None:
    """Any NNI space: the JSON names the space and the kept values; --space reads it back narrowed."""
    import pandas as pd

    from nni_hwaware.cost_model import choice_cost_model

    named = resolve_space("nni:NasBench201", num_modules_per_stack=1, stem_out_channels=8)
    choices = named.choices()
    costs = {"none": (0.01, 0), "skip_connect": (0.02, 0), "conv_1x1": (1.0, 100), "conv_3x3": (2.0, 900),
             "avg_pool_3x3": (0.5, 0)}
    frame = pd.DataFrame([{"label": label, "value": v, "latency_ms": costs[v][0], "memory_mb": 0.0,
                           "flops": 1e6 * costs[v][0], "params": costs[v][1]}
                          for label, values in choices.items() for v in values])
    model = choice_cost_model(frame, choices=choices, peak_flops=1e9)
    result = prune_choices(model, mode="top-k", top=2, always_keep=["skip_connect"])
    path = result.save(tmp_path / "pruned.json", named)
    narrowed = resolve_space(str(path))
    assert narrowed.choices() == result.allowed
    assert all(values == ["skip_connect", "conv_1x1", "conv_3x3"] for values in narrowed.choices().values())
    sample = {label: "conv_3x3" for label in narrowed.choices()}
    assert narrowed.build(sample)(narrowed.dummy_input()).shape == (1, 10)
