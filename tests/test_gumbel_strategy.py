"""The strategy on a toy problem: the hand-made two-layer space (skip is the cheapest block in both
layers) searched on the digits data. Each search takes a few seconds on a CPU."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from handmade import tiny_config, tiny_table
from pytorch_lightning import Callback

from nni_hwaware.cost_model import BlockCostModel
from nni_hwaware.errors import HwAwareError
from nni_hwaware.experiment import free_port
from nni_hwaware.nni_fixes import forward_masks
from nni_hwaware.spaces import BlockChoiceSpace
from nni_hwaware.spaces.io import load_architecture
from nni_hwaware.strategies.gumbel import (
    GumbelMixedLayer,
    GumbelSearchConfig,
    HardwareGumbelDARTS,
    search,
)

LABELS = ("layer1_0", "layer2_0")


def _config(tmp_path: Path, **changes: Any) -> GumbelSearchConfig:
    base = GumbelSearchConfig.from_dict({
        "out": str(tmp_path), "seed": 0,
        "penalty": {"alpha": 0.0, "gamma": 0.0},
        "temperature": {"init": 1.0, "min": 1.0, "hard": True},
        "stages": {"order": ["all"], "max_epochs": 2, "min_epochs": 2},
        "search": {"batch_size": 64, "lr": 0.05, "arc_lr": 0.1, "threads": 1, "checkpoint": False,
                   "accelerator": "cpu"},
    })
    return base.replace(**changes)


def _search(tmp_path: Path, name: str = "run", **changes: Any) -> Any:
    records: list[dict[str, Any]] = []
    callbacks = changes.pop("callbacks", ())
    config = _config(tmp_path, **changes)
    outcome = search(config, tiny_config(), BlockCostModel(tiny_table(), tiny_config()), tmp_path / name,
                     report=records.append, callbacks=callbacks)
    return outcome, records


def _p_skip(outcome: Any) -> list[float]:
    return [outcome.probabilities[label]["skip"] for label in LABELS]


@pytest.mark.slow
def test_penalty_moves_the_architecture_to_cheaper_blocks_and_zero_alpha_does_not(tmp_path: Path) -> None:
    """Over 5 seeds (another CPU takes another path): every seed exports the cheapest network under the
    penalty; without it, the loss alone may also like skip in a seed, but not at the median."""
    cheap_skip, free_skip, ratios = [], [], []
    for seed in range(5):
        cheap, _ = _search(tmp_path, f"cheap{seed}", **{"penalty.alpha": 20.0, "seed": seed})
        free, _ = _search(tmp_path, f"free{seed}", **{"penalty.alpha": 0.0, "seed": seed})
        assert cheap.arch == {"layer1_0": "skip", "layer2_0": "skip"}, (seed, cheap.probabilities)
        cheap_skip.append(min(_p_skip(cheap)))
        free_skip.append(min(_p_skip(free)))
        ratios.append(cheap.history[-1]["expected_latency_ms"] / free.history[-1]["expected_latency_ms"])
    # Uniform start: P(skip) = 1/3 in each layer (alphas ~ 1e-3).
    assert min(cheap_skip) > 0.8 and float(np.median(cheap_skip)) > 0.9, cheap_skip
    assert float(np.median(free_skip)) < 0.5, free_skip
    assert max(ratios) < 1.1 and float(np.median(ratios)) < 0.5, ratios


def test_the_penalty_gradient_reaches_the_architecture_parameters() -> None:
    config = tiny_config()
    model = BlockCostModel(tiny_table(), config)
    with torch.random.fork_rng():
        torch.manual_seed(0)
        space = BlockChoiceSpace(config.to_dict())
    strategy = HardwareGumbelDARTS(model, penalty={"alpha": 1.0, "gamma": 1.0})
    supernet = strategy.mutate_model(space).train()
    supernet(torch.randn(4, 1, 8, 8))
    masks = forward_masks(supernet)
    assert list(masks) == list(LABELS)
    penalty, _ = strategy.hardware_penalty([masks[label] for label in LABELS])
    penalty.backward()
    for layer in supernet.modules():
        if isinstance(layer, GumbelMixedLayer):
            grad = layer._arch_alpha.grad
            assert grad is not None and grad.abs().sum() > 0
            assert abs(float(grad.sum())) < 1e-6  # softmax: gradients sum to zero
            # the penalty pushes away from the dearest block (basic in both layers)
            assert int(grad.argmax()) == layer.names.index("basic")


class _Snapshots(Callback):
    """Parameters and architecture parameters at the start and end of each epoch."""

    def __init__(self) -> None:
        self.epochs: list[tuple[dict[str, torch.Tensor], dict[str, torch.Tensor]]] = []

    @staticmethod
    def _state(pl_module: Any) -> dict[str, torch.Tensor]:
        return {name: p.detach().clone() for name, p in pl_module.training_module.model.named_parameters()}

    def on_train_epoch_start(self, trainer: Any, pl_module: Any) -> None:
        self._start = self._state(pl_module)

    def on_train_epoch_end(self, trainer: Any, pl_module: Any) -> None:
        self.epochs.append((self._start, self._state(pl_module)))


def _owner(name: str) -> str:
    for label in LABELS:
        if f".{label}." in f".{name}":
            return label
    return "stem" if name.startswith("stem") else "head"


def test_staged_search_leaves_frozen_layers_unchanged_in_their_stage(tmp_path: Path) -> None:
    snapshots = _Snapshots()
    outcome, _ = _search(tmp_path, **{"penalty.alpha": 1.0, "stages.order": ["upper", "lower"],
                                      "stages.split": 1, "stages.max_epochs": 2, "callbacks": [snapshots]})
    stages = [record["stage"] for record in outcome.history]
    assert stages == ["upper", "upper", "lower", "lower"]
    searched = {"upper": {"layer2_0", "head"}, "lower": {"layer1_0", "stem"}}
    for stage, (start, end) in zip(stages, snapshots.epochs, strict=True):
        changed = {name for name in start if not torch.equal(start[name], end[name])}
        frozen = [name for name in start if _owner(name) not in searched[stage]]
        assert frozen and not changed.intersection(frozen), (stage, sorted(changed.intersection(frozen)))
        for owner in searched[stage]:  # the searched part trains (its alpha too)
            assert any(_owner(name) == owner for name in changed), (stage, owner)
        alphas = {name for name in changed if "_arch_alpha" in name}
        assert {_owner(name) for name in alphas} == searched[stage] - {"stem", "head"}


def test_same_seed_same_search_other_seed_other_search(tmp_path: Path) -> None:
    first, records_a = _search(tmp_path, "a", **{"penalty.alpha": 1.0})
    second, records_b = _search(tmp_path, "b", **{"penalty.alpha": 1.0})
    third, _ = _search(tmp_path, "c", **{"penalty.alpha": 1.0, "seed": 1})
    assert first.probabilities == second.probabilities
    assert [r["loss"] for r in records_a] == [r["loss"] for r in records_b]
    assert first.probabilities != third.probabilities


def test_epoch_records_are_reported_and_the_export_is_the_most_probable_block(tmp_path: Path) -> None:
    outcome, records = _search(tmp_path, **{"penalty.alpha": 2.0})
    assert len(records) == 2
    for record in records:
        assert {"default", "val_top1", "val_top3", "expected_latency_ms", "expected_memory_mb", "stage",
                "epoch", "temperature", "loss", "ce", "penalty"} <= set(record)
        assert record["default"] == record["val_top1"] and 0 <= record["val_top1"] <= 1
        assert isinstance(record["arch"], str) and json.loads(record["arch"])
    assert outcome.arch == {label: max(p, key=p.get) for label, p in outcome.probabilities.items()}
    assert load_architecture(outcome.arch_path, tiny_config()) == outcome.arch


def test_an_architecture_file_that_does_not_fit_the_space_is_a_clear_error(tmp_path: Path) -> None:
    path = tmp_path / "arch.json"
    path.write_text(json.dumps({"arch": {"layer1_0": "skip", "layer2_0": "mbconv_k3_e3"}}))
    with pytest.raises(HwAwareError, match=r"layer layer2_0 has block 'mbconv_k3_e3', allowed: skip"):
        load_architecture(path, tiny_config())
    path.write_text(json.dumps({"arch": {"layer1_0": "skip"}}))
    with pytest.raises(HwAwareError, match=r"missing layers \['layer2_0'\]"):
        load_architecture(path, tiny_config())


class _Poison(Callback):
    """Makes the stem's weights NaN at the start of epoch ``epoch``."""

    def __init__(self, epoch: int) -> None:
        self.epoch = epoch

    def on_train_epoch_start(self, trainer: Any, pl_module: Any) -> None:
        if trainer.current_epoch == self.epoch:
            with torch.no_grad():
                next(pl_module.training_module.model.stem.parameters()).fill_(float("nan"))


def test_a_nan_loss_stops_the_search_naming_the_epoch_and_the_last_finite_values(tmp_path: Path) -> None:
    with pytest.raises(HwAwareError) as info:
        _search(tmp_path, **{"penalty.alpha": 1.0, "callbacks": [_Poison(1)]})
    message = str(info.value)
    assert "diverged at stage all epoch 1 (step 0, architecture update): the CE became nan" in message
    assert "last finite losses (epoch 0, step " in message and "nan" not in message.split("last finite")[1]


def test_hard_mode_runs_only_the_sampled_block_soft_mode_runs_all() -> None:
    config = tiny_config()
    for hard, expected in ((True, 1), (False, 3)):
        with torch.random.fork_rng():
            torch.manual_seed(0)
            space = BlockChoiceSpace(config.to_dict())
        strategy = HardwareGumbelDARTS(BlockCostModel(tiny_table(), config), temperature={"hard": hard})
        supernet = strategy.mutate_model(space).train()
        calls: dict[str, int] = {}

        def count(key: str, calls: dict[str, int] = calls) -> Any:
            return lambda *_: calls.__setitem__(key, calls.get(key, 0) + 1)

        for layer in supernet.modules():
            if isinstance(layer, GumbelMixedLayer):
                for name in layer.names:
                    layer[name].register_forward_hook(count(f"{layer.label}/{name}"))
        for _ in range(5):
            calls.clear()
            supernet(torch.randn(2, 1, 8, 8))
            for label in LABELS:
                assert sum(v for k, v in calls.items() if k.startswith(label)) == expected
        supernet.eval()
        calls.clear()
        supernet(torch.randn(2, 1, 8, 8))
        assert len(calls) == 2  # evaluation: the most probable block of each layer


def test_export_probs_is_the_softmax_without_a_new_gumbel_sample() -> None:
    config = tiny_config()
    strategy = HardwareGumbelDARTS(BlockCostModel(tiny_table(), config))
    supernet = strategy.mutate_model(BlockChoiceSpace(config.to_dict()))
    layer = next(m for m in supernet.modules() if isinstance(m, GumbelMixedLayer))
    with torch.no_grad():
        layer._arch_alpha.copy_(torch.tensor([0.0, 1.0, 2.0]))
    probs = layer.export_probs({})[layer.label]
    assert list(probs.values()) == pytest.approx(torch.softmax(torch.tensor([0.0, 1.0, 2.0]), 0).tolist())
    assert layer.export_probs({}) == layer.export_probs({})


@pytest.mark.slow
def test_nas_experiment_runs_the_strategy(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from nni.nas.evaluator.pytorch import Classification, DataLoader
    from nni.nas.experiment import NasExperiment

    from nni_hwaware.spaces.data import Digits

    # NNI registers every experiment in ~/nni-experiments/.experiment (a path fixed at import):
    # keep this one out of the user's home.
    monkeypatch.setattr(NasExperiment, "_start_without_nni_manager", lambda self: None)
    monkeypatch.setattr(NasExperiment, "_stop_without_nni_manager", lambda self: None)
    config = tiny_config()
    evaluator = Classification(
        train_dataloaders=DataLoader(Digits("train"), batch_size=64), val_dataloaders=DataLoader(Digits("val"), batch_size=64),
        num_classes=10, learning_rate=0.01, max_epochs=2, accelerator="cpu", logger=False,
        enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False, num_sanity_val_steps=0)
    records: list[dict[str, Any]] = []
    strategy = HardwareGumbelDARTS(BlockCostModel(tiny_table(), config), penalty={"alpha": 20.0, "gamma": 0.0},
                                   staging={"order": ["all"], "max_epochs": 2, "min_epochs": 2},
                                   arc_learning_rate=0.1, report=records.append)
    experiment = NasExperiment(BlockChoiceSpace(config.to_dict()), evaluator, strategy)
    experiment.config.experiment_working_directory = str(tmp_path / "nni-experiments")
    try:
        experiment.run(port=free_port())  # not 8080: tests run two at a time
    finally:
        experiment.stop()
    assert experiment.export_top_models(formatter="dict") == [strategy.export_architecture()]
    assert strategy.export_architecture() == {"layer1_0": "skip", "layer2_0": "skip"}
    assert [r["epoch"] for r in records] == [0, 1]
    assert "HardwareGumbelDARTS(chip='chipA', alpha=20.0" in repr(strategy)


class _StopAfter(Callback):
    def __init__(self, epoch: int) -> None:
        self.epoch = epoch

    def on_train_epoch_end(self, trainer: Any, pl_module: Any) -> None:
        if trainer.current_epoch == self.epoch:
            trainer.should_stop = True


@pytest.mark.slow
def test_an_interrupted_search_resumes_from_its_checkpoint_to_the_same_result(tmp_path: Path) -> None:
    changes = {"penalty.alpha": 2.0, "stages.order": ["upper", "lower"], "stages.split": 1,
               "stages.max_epochs": 2, "search.checkpoint": True}
    whole, _ = _search(tmp_path, "whole", **changes)
    _search(tmp_path, "parts", **changes, callbacks=[_StopAfter(1)])
    assert (tmp_path / "parts" / "checkpoints" / "last.ckpt").is_file()
    resumed, records = _search(tmp_path, "parts", **changes)
    assert [r["epoch"] for r in records] == [2, 3]  # it went on from the checkpoint
    assert [r["stage"] for r in resumed.history] == ["upper", "upper", "lower", "lower"]
    assert resumed.probabilities == whole.probabilities
    assert [r["loss"] for r in resumed.history] == [r["loss"] for r in whole.history]


def test_soft_mode_min_weight_skips_light_blocks_in_the_forward_pass_and_the_penalty_alike() -> None:
    config = tiny_config()
    with torch.random.fork_rng():
        torch.manual_seed(0)
        space = BlockChoiceSpace(config.to_dict())
    strategy = HardwareGumbelDARTS(BlockCostModel(tiny_table(), config),
                                   temperature={"hard": False, "init": 1.0, "min_weight": 0.2})
    supernet = strategy.mutate_model(space).train()
    ran: list[str] = []
    for layer in supernet.modules():
        if isinstance(layer, GumbelMixedLayer):
            with torch.no_grad():
                layer._arch_alpha.copy_(torch.tensor([8.0, 0.0, 0.0]))  # skip dominates
            for name in layer.names:
                layer[name].register_forward_hook(lambda *_, key=name: ran.append(key))
    supernet(torch.randn(2, 1, 8, 8))
    masks = forward_masks(supernet)
    for label in LABELS:
        mask = masks[label]
        assert float(mask[0]) > 0.5 and set(torch.nonzero(mask).flatten().tolist()) <= {0, 1, 2}
    kept = sum(int(torch.count_nonzero(m)) for m in masks.values())
    assert len(ran) == kept < 6  # exactly the blocks with a non-zero weight ran
