"""The cost-table CLI end to end on a real profile, and profiling many boards through NNI."""

from __future__ import annotations

import json
import shlex
import sys
from pathlib import Path

import pytest
import torch
import yaml

from nni_hwaware.cli import main
from nni_hwaware.cost_model import find_leaves, profile_space, space_model
from nni_hwaware.cost_table import CostTable
from nni_hwaware.cost_table.transport import collect_tables, table_from_text, table_to_text
from nni_hwaware.spaces import get_space_config
from nni_hwaware.spaces.resolve import resolve_space


def _leaves(name: str):
    named = resolve_space(name)
    return find_leaves(named.space, named.dummy_input())

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def tiny_profile(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("profile") / "table.csv"
    assert main(["profile", "--space", "digits_tiny", "--chip", "test-board", "--threads", "1",
                 "--peak-flops", "1e10", "--time-budget", "3", "--out", str(out)]) == 0
    return out


def test_profile_writes_every_distinct_block_once_plus_network_row(tiny_profile: Path) -> None:
    table = CostTable.load(tiny_profile)
    config = get_space_config("digits_tiny")
    frame = table.frame
    # the leaves of a project space are its candidate blocks and its stem and head
    assert len(frame[frame.kind == "leaf"]) == len(_leaves("digits_tiny").entries) == 2 + 4 * 4
    assert set(frame.chip) == {"test-board"} and set(frame.peak_flops) == {1e10}
    assert (frame[frame.kind == "network"].latency_ms > 0).all()
    cost = space_model(resolve_space("digits_tiny"), table).predict(config.baseline())
    assert cost.params == sum(p.numel() for p in resolve_space("digits_tiny").build(config.baseline()).parameters())


def test_identical_layers_are_profiled_once(monkeypatch: pytest.MonkeyPatch) -> None:
    # Only shapes matter here: skip the random initialisation of cifar10_resnet50's ~860 convolutions
    # (more than half of this test's time).
    monkeypatch.setattr(torch.nn.init, "kaiming_uniform_", lambda tensor, *args, **kwargs: tensor)
    config = get_space_config("digits")
    # layer*_1 repeat nothing: the first layer of a stage differs (stride/channels), the second does not
    assert len(_leaves("digits").entries) == 2 + 8 * len(config.candidates)
    config2 = get_space_config("cifar10_resnet50")
    assert len(_leaves("cifar10_resnet50").entries) == 2 + 8 * len(config2.candidates)


def test_merge_puts_new_rows_on_the_tables_scale(tiny_profile: Path, tmp_path: Path) -> None:
    """A table profiled when the machine was four times as slow: rows added by --merge take its scale.

    The factor is large so that the machine's own drift between the two profiles (2.3x seen on a
    busy runner; up to 3x allowed) cannot hide it: without the rescale the new rows would sit near
    1x the old.
    """
    full = CostTable.load(tiny_profile).frame
    leaves = full[full.kind == "leaf"]
    kept = leaves.iloc[: len(leaves) // 2].copy()
    kept["latency_ms"] *= 4.0
    old = tmp_path / "old.csv"
    CostTable(kept).save(old)
    assert main(["profile", "--space", "digits_tiny", "--chip", "test-board", "--threads", "1",
                 "--peak-flops", "1e10", "--time-budget", "3", "--merge", "--out", str(old)]) == 0
    merged = CostTable.load(old).frame
    new = merged[merged.kind.eq("leaf") & ~merged.block.isin(kept.block)]
    assert len(new) == len(leaves) - len(kept)
    scale = float(new.merge_scale.iloc[0])
    assert 0.25 / 3 < scale < 0.25 * 3, scale  # re-timed rows measure about a quarter of what the table holds
    ratio = (new.set_index(["block", "input_shape"]).latency_ms
             / leaves.set_index(["block", "input_shape"]).latency_ms).dropna()
    assert 2.0 < float(ratio.median()) < 8.0, ratio.describe()  # the new rows are on the old scale


def test_prune_and_chips_on_a_profiled_table(tiny_profile: Path, tmp_path: Path, capsys) -> None:
    out = tmp_path / "pruned.json"
    assert main(["prune", "--space", "digits_tiny", "--table", str(tiny_profile), "--mode", "top-k",
                 "--top", "2", "--out", str(out), "--report", str(tmp_path / "r.csv")]) == 0
    pruned = get_space_config(out)
    assert all(len(s.candidates) == 2 for s in pruned.layer_specs())
    assert main(["chips", str(tiny_profile), "--space", str(out)]) == 0
    assert "test-board" in capsys.readouterr().out


def test_validate_prints_agreement(tiny_profile: Path, tmp_path: Path, capsys) -> None:
    import shutil

    from nni_hwaware.strategies.fidelity import FIDELITY_SUFFIX, fidelity_prior_margin

    table = tmp_path / "table.csv"  # the fidelity figures are saved beside it: not beside the shared one
    shutil.copy(tiny_profile, table)
    assert main(["validate", str(table), "--space", "digits_tiny", "--threads", "1", "-k", "5",
                 "--time-budget", "2", "--out", str(tmp_path / "v.csv")]) == 0
    text = capsys.readouterr().out
    # the table's own fidelity figures, beside it: a search's prior margin before its trials measure
    saved = json.loads((tmp_path / f"table.csv{FIDELITY_SUFFIX}").read_text())
    assert saved["n_archs"] == 5 and saved["latency"]["ratio_q90_vs_reference"] > 0
    assert "ratio_q90_vs_reference=" in text and "saved to" in text
    assert fidelity_prior_margin(table) == max(1.0, saved["latency"]["ratio_q90_vs_reference"],
                                               saved["memory"]["ratio_q90"])
    assert "spearman=" in text and "mape=" in text and "within10=" in text and "ceiling=" in text
    # relative to the reference network timed in the same rounds; the machine's drift, then and now
    assert "within10_vs_reference=" in text and "probe_drift=" in text and "share_met=" in text
    assert len((tmp_path / "v.csv").read_text().splitlines()) == 6


@pytest.mark.parametrize(
    ("argv", "message"),
    [(["profile", "--space", "nope", "--out", "x.csv"], "unknown space 'nope'"),
     (["chips", "missing.csv", "--space", "digits_tiny"], "does not exist"),
     (["prune", "--space", "digits", "--table", "TABLE", "--out", "p.json"], "has no row for"),
     (["prune", "--space", "digits_tiny", "--table", "TABLE", "--chip", "other", "--out", "p.json"],
      "chip='other'")],
)
def test_bad_input_is_one_line_and_writes_nothing(argv: list[str], message: str, tiny_profile: Path,
                                                  tmp_path: Path, capsys, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    argv = [str(tiny_profile) if a == "TABLE" else a for a in argv]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and len(err.splitlines()) == 1
    assert not list(tmp_path.iterdir())


def test_table_survives_the_metric_transport(tiny_profile: Path) -> None:
    table = CostTable.load(tiny_profile)
    text = table_to_text(table)
    assert len(text) < 16_000
    assert table_from_text(text).frame.equals(table.frame)
    merged = collect_tables([{"cost_table": text}, {"cost_table": text}, {"default": 1.0}])
    assert len(merged) == len(table)


def test_onnxruntime_backend_profiles_a_table() -> None:
    pytest.importorskip("onnxruntime")
    table = profile_space("nni:NasBench201", space_args={"num_modules_per_stack": 1, "stem_out_channels": 8},
                          backend="onnxruntime", threads=1, peak_flops=1e10, progress=False,
                          calibration_samples=0, max_seconds=0.5)
    frame = table.frame
    assert len(frame) == 21  # every distinct leaf of the space, each exported and timed in ONNX Runtime
    assert set(frame.backend) == {"onnxruntime"} and frame.providers.str.contains("CPUExecutionProvider").all()


@pytest.mark.nnictl
@pytest.mark.slow
def test_profiling_many_boards_through_nni(tmp_path: Path) -> None:
    from nni_hwaware.experiment import create_experiment, write_config

    template = yaml.safe_load((ROOT / "examples/profile_chips/config_local.yml").read_text())
    template["trialCommand"] = template["trialCommand"].replace("python", shlex.quote(sys.executable), 1)
    template["trialCodeDirectory"] = str(tmp_path)
    config = write_config(template, tmp_path / "config.yml", tmp_path / "experiments")
    with create_experiment(config) as experiment:
        status = experiment.wait(timeout=240)
        assert status == "DONE", experiment.describe()
        out = tmp_path / "tables.csv"
        assert main(["collect", "--port", str(experiment.port), "--out", str(out)]) == 0
    table = CostTable.load(out)
    assert table.chips() == ["board-a", "board-b"]
    assert len(table) == 2 * (len(_leaves("digits_tiny").entries) + 1)


def test_every_profiled_block_counts_match_torch(tiny_profile: Path) -> None:
    """FLOPs and params of each row are torch's own counts (FlopCounterMode, numel) of that block."""
    import torch
    from torch.utils.flop_counter import FlopCounterMode

    leaves = _leaves("digits_tiny")
    frame = CostTable.load(tiny_profile).frame.set_index(["block", "input_shape"])
    for entry, module in zip(leaves.entries, leaves.modules, strict=True):
        module = module.eval()
        counter = FlopCounterMode(display=False)
        with counter, torch.no_grad():
            module(torch.randn(1, *entry.input_shapes[0]))
        row = frame.loc[(entry.block, entry.shape_str)]
        assert row.flops == counter.get_total_flops(), entry
        assert row.params == sum(p.numel() for p in module.parameters()), entry


def test_fidelity_passes_share_the_rounds(tiny_profile: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The machine's phases slow networks unevenly: passes timed one after the other would disagree.

    A fake engine gives every call its own phase, in which each network's cost is scaled by a
    factor of its own; within one call (the same rounds), both instances of a network agree.
    """
    import numpy as np
    import pandas as pd

    from nni_hwaware.cost_model import fidelity

    calls: list[int] = []

    def fake_measure(space, samples, input_shape, **options):
        calls.append(len(samples))
        keys = [repr(sorted(s.items())) for s in samples]
        index = {key: i for i, key in enumerate(dict.fromkeys(keys))}
        base = np.linspace(1.0, 1.2, len(index))  # the networks' own costs: 20 % apart at most
        phase = np.random.default_rng(len(calls)).uniform(0.7, 1.4, size=len(index))  # this run's uneven slowdown
        ms = [float(base[index[key]] * phase[index[key]]) for key in keys]
        frame = pd.DataFrame({"latency_ms": ms, "memory_mb": 1.0, "flops": 1, "latency_vs_reference": ms})
        frame.attrs["timing"] = {"rounds": 10, "share_met": 1.0, "probe_drift": 1.0}
        return frame

    monkeypatch.setattr(fidelity, "measure_samples", fake_measure)
    named = resolve_space("digits_tiny")
    model = space_model(named, CostTable.load(tiny_profile))
    figures, frame = fidelity.check_fidelity(named.space, model, named.input_shape, 12, seed=0)
    assert calls == [24]  # both passes (two instances of each network) in one run of shared rounds
    assert figures["latency"]["ceiling"] > 0.999
    assert (frame.measured_latency_ms == frame.measured_again_ms).all()
