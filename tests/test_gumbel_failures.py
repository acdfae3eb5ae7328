"""A Gumbel search that goes wrong: divergence (NaN/inf) stops it with one line, and a
checkpoint that is more than tensors is not unpickled.

The fast tests search the hand-made two-layer space for a fraction of a second each;
the slow one runs the diverging search as a real one-trial ``nnictl`` experiment.
"""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Any

import pytest
import torch
import yaml
from experiments import gumbel_trial_template
from handmade import tiny_config, tiny_table
from pytorch_lightning import Callback

from nni_hwaware import cli
from nni_hwaware.cost_model import BlockCostModel
from nni_hwaware.errors import HwAwareError
from nni_hwaware.strategies.gumbel import GumbelSearchConfig, search
from nni_hwaware.strategies.gumbel.penalty import HardwarePenalty

#: A weight learning rate no one should use: the tiny search diverges within a few steps.
HUGE_LR = 1e4

DIVERGED = re.compile(
    r"the search diverged at stage (\w+) epoch (\d+) \(step (\d+), (architecture|weight) update\): "
    r"the (.+?) became (\S+); last finite losses \(epoch (\d+), step (\d+)\): total=(\S+), CE=(\S+), "
    r"latency penalty=(\S+), memory penalty=(\S+), weight CE=(\S+); lower the learning rates "
    r"\(search\.lr \S+, search\.arc_lr \S+\) or the penalty weights \(penalty\.alpha \S+, penalty\.gamma \S+\)")


def _search_options(tmp_path: Path, **search: Any) -> dict[str, Any]:
    """The YAML options of a tiny search (hand-made space and table written to ``tmp_path``)."""
    space, table = tmp_path / "tiny_space.json", tmp_path / "tiny_table.csv"
    space.write_text(tiny_config().to_json())
    tiny_table().save(table)
    return {
        "space": str(space), "seed": 0, "out": str(tmp_path / "out"),
        "cost": {"table": str(table), "repeats": 1},
        "penalty": {"alpha": 1.0, "gamma": 0.5},
        "temperature": {"init": 1.0, "min": 1.0, "hard": True},
        "stages": {"order": ["all"], "max_epochs": 2, "min_epochs": 2},
        "search": {"batch_size": 64, "threads": 1, "accelerator": "cpu", "checkpoint": False, **search},
        "retrain": {"epochs": 1},
    }


def _parse(message: str) -> re.Match[str]:
    assert "\n" not in message
    found = DIVERGED.search(message)
    assert found, message
    last = [float(found.group(i)) for i in range(9, 14)]
    assert all(math.isfinite(v) for v in last), message  # total, CE, latency, memory penalty, weight CE
    return found


def _search(tmp_path: Path, callbacks: list[Any], **changes: Any) -> Any:
    config = GumbelSearchConfig.from_dict(_search_options(tmp_path)).replace(**changes)
    return search(config, tiny_config(), BlockCostModel(tiny_table(), tiny_config()), tmp_path / "run",
                  report=lambda record: None, callbacks=callbacks)


def test_a_huge_learning_rate_stops_the_cli_search_with_one_line_and_exports_nothing(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "gumbel.yml"
    path.write_text(yaml.safe_dump(_search_options(tmp_path, lr=HUGE_LR)))
    assert cli.main(["search", "gumbel", "--config", str(path)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("nni-hwaware search: error: the search diverged at stage all epoch 0 (step "), err
    found = _parse(err)
    assert found.group(6) in ("nan", "inf", "NaN/inf") and found.group(7) == "0"
    assert int(found.group(8)) <= int(found.group(3))
    out = tmp_path / "out"
    assert not [p for p in out.rglob("*") if p.name in ("arch.json", "history.json", "summary.json", "report")]


class _Poison(Callback):
    """At (epoch, step): run ``poison(pl_module)``; keeps the parameters of that moment and at the error."""

    def __init__(self, epoch: int, step: int, poison: Any) -> None:
        self.at, self.poison = (epoch, step), poison
        self.before: dict[str, torch.Tensor] = {}
        self.after: dict[str, torch.Tensor] = {}

    @staticmethod
    def _state(pl_module: Any) -> dict[str, torch.Tensor]:
        return {k: p.detach().clone() for k, p in pl_module.training_module.model.named_parameters()}

    def on_train_batch_start(self, trainer: Any, pl_module: Any, batch: Any, batch_idx: int) -> None:
        if (trainer.current_epoch, batch_idx) == self.at:
            self.before = self._state(pl_module)
            self.poison(pl_module)

    def on_exception(self, trainer: Any, pl_module: Any, exception: BaseException) -> None:
        self.after = self._state(pl_module)


def test_a_nan_penalty_term_stops_the_search_before_any_update_naming_it_and_the_epoch(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    terms = HardwarePenalty.terms

    def nan_latency(self: HardwarePenalty, masks: Any) -> Any:
        lat, mem, latency, memory = terms(self, masks)
        return (lat * float("nan") if getattr(self, "poisoned", False) else lat), mem, latency, memory

    monkeypatch.setattr(HardwarePenalty, "terms", nan_latency)
    poison = _Poison(1, 2, lambda module: setattr(module.hardware_penalty, "poisoned", True))
    with pytest.raises(HwAwareError) as info:
        _search(tmp_path, [poison])
    found = _parse(str(info.value))
    assert found.group(1, 2, 3, 4, 5, 6) == ("all", "1", "2", "architecture", "latency penalty", "nan")
    assert found.group(7, 8) == ("1", "1")  # the step before
    # stopped before the update: no weight or architecture parameter moved
    assert poison.before.keys() == poison.after.keys()
    assert all(torch.equal(poison.before[k], poison.after[k]) for k in poison.before)
    assert not (tmp_path / "run" / "arch.json").exists() and not (tmp_path / "run" / "history.json").exists()


class _NanArchGradient(Callback):
    """From (epoch, step) on, the architecture gradients are NaN (as an overflow would make them)."""

    def __init__(self, epoch: int, step: int) -> None:
        self.at, self.now = (epoch, step), (0, 0)

    def on_train_batch_start(self, trainer: Any, pl_module: Any, batch: Any, batch_idx: int) -> None:
        self.now = (trainer.current_epoch, batch_idx)

    def on_before_optimizer_step(self, trainer: Any, pl_module: Any, optimizer: Any) -> None:
        if self.now < self.at:
            return
        alphas = {id(alpha) for alpha in pl_module.masks.alphas.values()}
        for group in optimizer.param_groups:
            for p in group["params"]:
                if id(p) in alphas and p.grad is not None:
                    p.grad.fill_(float("nan"))


def test_non_finite_architecture_parameters_after_an_update_stop_the_search(tmp_path: Path) -> None:
    with pytest.raises(HwAwareError) as info:
        _search(tmp_path, [_NanArchGradient(1, 3)])
    message = str(info.value)
    assert ("the search diverged at stage all epoch 1 (step 3, architecture update): "
            "the architecture parameters became NaN/inf; last finite losses (epoch 1, step 3): total=") in message


def test_checkpoints_load_with_weights_only_and_a_planted_pickle_is_not_run(tmp_path: Path) -> None:
    _search(tmp_path, [], **{"stages.max_epochs": 1, "stages.min_epochs": 1, "search.checkpoint": True})
    checkpoint = tmp_path / "run" / "checkpoints" / "last.ckpt"
    state = torch.load(checkpoint, weights_only=True)  # tensors and plain values only
    assert set(state["hardware_gumbel"]["generators"]) == {"layer1_0", "layer2_0"}
    marker = tmp_path / "pwned"

    class Payload:
        def __reduce__(self) -> Any:
            return open, (str(marker), "w")

    torch.save({**state, "extra": Payload()}, checkpoint)
    with pytest.raises(HwAwareError, match=r"last\.ckpt holds more than tensors and plain values, so it is not "
                                           r"loaded .*delete it or set search\.resume: false"):
        _search(tmp_path, [], **{"stages.max_epochs": 2, "search.checkpoint": True})
    assert not marker.exists()


@pytest.mark.nnictl
@pytest.mark.slow
def test_a_diverging_one_trial_experiment_fails_its_trial_with_the_line_and_ends(tmp_path: Path) -> None:
    from nni_hwaware.experiment import create_experiment, write_config

    options = _search_options(tmp_path, lr=HUGE_LR)
    options.pop("out")  # the trial's folder
    (tmp_path / "gumbel.yml").write_text(yaml.safe_dump(options))
    template = gumbel_trial_template(tmp_path, "nni-hwaware-gumbel-diverges", 1.0)
    config = write_config(template, tmp_path / "config.yml", tmp_path / "experiments")
    with create_experiment(config, timeout=60) as exp:
        status = exp.wait(timeout=120, poll=1.0)
        assert status in ("DONE", "TUNER_NO_MORE_TRIAL"), exp.describe()
        (job,) = exp.trial_jobs()
        assert job["status"] == "FAILED", exp.describe()
        assert not job.get("finalMetricData")
        (stderr,) = exp.experiment_dir.glob(f"environments/*/trials/{job['trialJobId']}/trial.stderr")
        lines = [line for line in stderr.read_text().splitlines() if "error:" in line]
        assert len(lines) == 1, stderr.read_text()
        assert lines[0].startswith("nni_hwaware.strategies.gumbel.trial: error: the search diverged at stage all "
                                   "epoch 0 (step "), lines[0]
        _parse(lines[0])
        assert not list(exp.experiment_dir.rglob("arch.json"))
