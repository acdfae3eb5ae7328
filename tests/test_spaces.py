"""Spaces: every registered space and block builds, runs and freezes; data splits."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
import torchvision
from nni.nas.space import model_context
from torch.utils.flop_counter import FlopCounterMode

from nni_hwaware.errors import HwAwareError
from nni_hwaware.spaces import (
    BlockChoiceSpace,
    SpaceConfig,
    block_names,
    build_block,
    build_network,
    get_space_config,
    space_names,
)
from nni_hwaware.spaces.data import Digits, make_dataset


@pytest.mark.parametrize("name", space_names())
def test_every_space_builds_runs_and_its_baseline_freezes(name: str) -> None:
    config = get_space_config(name)
    x = torch.randn(2, config.in_channels, config.image_size, config.image_size)
    with model_context(config.baseline()):
        frozen = BlockChoiceSpace(config.to_dict())
    direct = build_network(config, config.baseline())
    assert frozen(x).shape == (2, config.num_classes)
    assert sum(p.numel() for p in frozen.parameters()) == sum(p.numel() for p in direct.parameters())
    assert all(block == "bottleneck" for block in config.baseline().values())


def test_plain_resnet50_is_the_cifar_baseline() -> None:
    config = get_space_config("cifar10_resnet50")
    assert [s.depth for s in config.stages] == [3, 4, 6, 3]
    assert len(config.layer_specs()) == 16
    net = build_network(config, config.baseline())
    # The searchable body is exactly torchvision's ResNet50 body (its stem and head differ).
    reference = torchvision.models.resnet50()
    stages = [reference.layer1, reference.layer2, reference.layer3, reference.layer4]
    assert sum(p.numel() for p in net.blocks.parameters()) == sum(
        p.numel() for stage in stages for p in stage.parameters())
    firsts = [spec for spec in config.layer_specs() if spec.label.endswith("_0")]
    assert [(s.input_shape, s.stride) for s in firsts] == [
        ((64, 32, 32), 1), ((256, 32, 32), 2), ((512, 16, 16), 2), ((1024, 8, 8), 2)]


@pytest.mark.parametrize("name", block_names())
@pytest.mark.parametrize(("cin", "cout", "stride"), [(16, 32, 1), (32, 32, 1), (32, 64, 2)])
def test_every_block_maps_in_to_out(name: str, cin: int, cout: int, stride: int) -> None:
    block = build_block(name, cin, cout, stride).eval()
    with torch.no_grad():
        y = block(torch.randn(1, cin, 8, 8))
    assert y.shape == (1, cout, 8 // stride, 8 // stride)


def _flops(module: torch.nn.Module, x: torch.Tensor) -> int:
    counter = FlopCounterMode(display=False)
    with counter, torch.no_grad():
        module(x)
    return counter.get_total_flops()


def test_bottleneck_flops_and_params_by_hand() -> None:
    # in=out=64, width 16, 8x8, stride 1: three convs, no projection.
    block = build_block("bottleneck", 64, 64, 1).eval()
    macs = 64 * 16 * 64 + 16 * 16 * 9 * 64 + 16 * 64 * 64
    assert _flops(block, torch.randn(1, 64, 8, 8)) == 2 * macs
    bn = 2 * (16 + 16 + 64)
    assert sum(p.numel() for p in block.parameters()) == 64 * 16 + 16 * 16 * 9 + 16 * 64 + bn


def test_grouped_bottleneck_divides_the_3x3_cost() -> None:
    x = torch.randn(1, 64, 8, 8)
    plain, grouped = build_block("bottleneck", 64, 64, 1), build_block("bottleneck_g4", 64, 64, 1)
    assert _flops(plain, x) - _flops(grouped, x) == 2 * 64 * (16 * 16 * 9 - 16 * 4 * 9)


def test_skip_is_identity_or_projection() -> None:
    assert isinstance(build_block("skip", 32, 32, 1), torch.nn.Identity)
    for stride in (1, 2):
        projection = build_block("skip", 32, 64, stride)
        assert sum(p.numel() for p in projection.parameters()) == 32 * 64 + 2 * 64


@pytest.mark.parametrize("size", [8, 7])
def test_a_skipped_reduction_passes_every_input_position_on(size: int) -> None:
    """A strided 1x1 shortcut drops three positions in four: three skipped reductions in a row
    leave one pixel of the first block's output, and the network cannot learn (digits: 46 % top-1)."""
    skip = build_block("skip", 8, 16, 2).eval()
    x = torch.randn(1, 8, size, size, requires_grad=True)
    out = skip(x)
    assert out.shape[-2:] == ((size + 1) // 2, (size + 1) // 2)
    out.sum().backward()
    assert bool((x.grad.abs().sum(dim=1) > 0).all()), "some input positions never reach the output"


def test_supernet_is_an_nni_space_that_samples_and_freezes() -> None:
    config = get_space_config("digits_tiny")
    space = BlockChoiceSpace(config.to_dict())
    assert set(space.simplify()) == {s.label for s in config.layer_specs()}
    sample: dict = {}
    space.random(memo=sample, random_state=np.random.RandomState(0))
    assert config.check_architecture(sample) == sample
    net = space.freeze(sample)
    assert net(torch.randn(3, 1, 8, 8)).shape == (3, 10)
    assert net.blocks.layer1_0.__class__ is build_block(sample["layer1_0"], 16, 32, 1).__class__


def test_pruned_config_round_trips_and_shrinks_the_space() -> None:
    config = get_space_config("digits_tiny")
    pruned = config.with_layer_candidates({"layer1_0": ["skip", "basic"], "layer2_0": ["bottleneck"]})
    again = SpaceConfig.from_dict(json.loads(pruned.to_json()))
    assert again == pruned
    assert pruned.size() == 2 * 1 * 4 * 4
    space = BlockChoiceSpace(pruned.to_dict())
    assert space.simplify()["layer1_0"].values == ["skip", "basic"]


@pytest.mark.parametrize(
    ("change", "message"),
    [({"layer1_0": "nope"}, "layer layer1_0 has block 'nope'"),
     ({"layer9_9": "skip"}, "unknown layers ['layer9_9']")],
)
def test_architecture_that_does_not_fit_is_named(change: dict[str, str], message: str) -> None:
    config = get_space_config("digits")
    with pytest.raises(HwAwareError, match=message.replace("[", r"\[").replace("]", r"\]")):
        config.check_architecture({**config.baseline(), **change})


def test_unknown_space_and_block_errors() -> None:
    with pytest.raises(HwAwareError, match="known spaces: digits"):
        get_space_config("imagenet_vit")
    with pytest.raises(HwAwareError, match="known blocks: skip"):
        build_block("transformer", 8, 8, 1)
    with pytest.raises(HwAwareError, match="no candidates left"):
        get_space_config("digits").with_layer_candidates({"layer1_0": []})


def test_digits_split_is_60_20_20_disjoint_and_seeded() -> None:
    splits = {s: Digits(s, seed=0) for s in ("train", "val", "test")}
    assert [len(d) for d in splits.values()] == [1078, 359, 360]
    seen = [set(map(bytes, (d.images.numpy()[i].tobytes() for i in range(len(d))))) for d in splits.values()]
    assert sum(map(len, seen)) >= 1797 - 60  # a few digits images are exact duplicates
    assert torch.equal(Digits("val", seed=0).labels, splits["val"].labels)
    assert not torch.equal(Digits("val", seed=1).labels, splits["val"].labels)


def test_missing_cifar_names_the_directory(tmp_path) -> None:
    with pytest.raises(HwAwareError, match=str(tmp_path)):
        make_dataset("cifar10", "train", data_dir=str(tmp_path))


def test_one_training_step_lowers_the_loss_on_digits() -> None:
    torch.manual_seed(0)
    config = get_space_config("digits")
    net = build_network(config, config.baseline())
    data = Digits("train")
    x, y = data.images[:256], data.labels[:256]
    optimiser = torch.optim.SGD(net.parameters(), lr=0.1, momentum=0.9)
    losses = []
    for _ in range(5):
        loss = torch.nn.functional.cross_entropy(net(x), y)
        optimiser.zero_grad()
        loss.backward()
        optimiser.step()
        losses.append(loss.item())
    assert losses[-1] < losses[0]
