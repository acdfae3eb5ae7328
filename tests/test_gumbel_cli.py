"""The command line end to end on the hand-made two-layer space: search gumbel, retrain, report."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from handmade import tiny_files, tiny_gumbel_config

from nni_hwaware.cli import main
from nni_hwaware.report import ModelResult

pytestmark = pytest.mark.slow


def test_search_gumbel_then_retrain_then_report(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    space, table = tiny_files(tmp_path)
    config = tiny_gumbel_config(tmp_path, space, table)
    assert main(["search", "gumbel", "--config", str(config), "--set", "retrain.epochs=1"]) == 0
    run = tmp_path / "run"
    summary = json.loads((run / "summary.json").read_text())
    assert summary["arch"] == {"layer1_0": "skip", "layer2_0": "skip"}
    assert {r["alpha"] for r in summary["sweep"]} == {0.0}
    for name in ("comparison.md", "comparison.csv", "accuracy_latency.png"):
        assert (run / "report" / name).is_file()
    markdown = (run / "report" / "comparison.md").read_text()
    assert "| top-3 accuracy (%) |" in markdown and "searched vs baseline" in markdown
    searched = ModelResult.load(run / "results" / "searched.json")
    assert searched.train_seconds > 0 and searched.predicted_latency_ms == pytest.approx(0.75 + 0.1 + 0.2)
    history = json.loads((run / "search" / "alpha_20" / "history.json").read_text())
    assert [r["stage"] for r in history["history"]] == ["upper", "lower"]

    arch = run / "search" / "alpha_20" / "arch.json"
    result = tmp_path / "retrained.json"
    assert main(["retrain", "--arch", str(arch), "--space", str(space), "--table", str(table),
                 "--epochs", "1", "--name", "retrained", "--out", str(result), "--save", str(tmp_path / "net")]) == 0
    assert ModelResult.load(result).arch == summary["arch"]
    from nni_hwaware.export import network_from_checkpoint

    _, net = network_from_checkpoint(tmp_path / "net" / "network.pt")  # the space file's network, trained
    assert (tmp_path / "net" / "network.torchscript.pt").is_file() and not net.training
    assert (run / "network" / "network.pt").is_file()  # the pipeline's retrained network too

    capsys.readouterr()
    assert main(["report", "--baseline", str(run / "results" / "baseline.json"), "--result", str(result),
                 "--out", str(tmp_path / "report"), "--no-plot"]) == 0
    out = capsys.readouterr().out
    assert "| metric | baseline | retrained | retrained vs baseline |" in out
    assert "## retrained: the trained network" in out and "[network.onnx](" in out


def test_bad_input_is_one_line_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    space, table = tiny_files(tmp_path)
    config = tiny_gumbel_config(tmp_path, space, table)
    assert main(["search", "gumbel", "--config", str(config), "--set", "penalty.alpha=-1"]) == 2
    assert "penalty alpha must be >= 0, got -1" in capsys.readouterr().err
    assert main(["search", "gumbel", "--config", str(config), "--set", "cost.chip=chipB"]) == 2
    err = capsys.readouterr().err
    assert "chip='chipB'" in err and "'chipA'" in err and err.count("\n") == 1
    bad = tmp_path / "bad_arch.json"
    bad.write_text(json.dumps({"arch": {"layer1_0": "skip", "layer2_0": "mbconv_k3_e3"}}))
    assert main(["retrain", "--arch", str(bad), "--space", str(space), "--out", str(tmp_path / "x.json")]) == 2
    assert "does not fit space 'tiny'" in capsys.readouterr().err
    assert main(["search"]) == 2
    assert "name a search strategy: gumbel" in capsys.readouterr().err
