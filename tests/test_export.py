"""What a search hands over: the trained network saved, exported to ONNX and TorchScript, and checked."""

from __future__ import annotations

import json
import random
import sys
from pathlib import Path

import pytest
import torch

from nni_hwaware.cli import main
from nni_hwaware.export import (
    FORMATS,
    deliver,
    export_network,
    exported_accuracy,
    load_checkpoint,
    load_exported,
    network_from_checkpoint,
)
from nni_hwaware.spaces.resolve import resolve_space

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "examples" / "own_space"))
SPACES = ["digits", "nni:NasBench201", "nni:ProxylessNAS", "own_space:OwnSpace"]


def _random_arch(named, seed: int) -> dict:
    rng = random.Random(seed)
    return named.check_architecture({label: rng.choice(values) for label, values in named.choices().items()})


@pytest.mark.parametrize("spec", SPACES)
def test_export_cli_writes_files_that_compute_what_the_network_computes(spec: str, tmp_path: Path,
                                                                        capsys: pytest.CaptureFixture[str]) -> None:
    named = resolve_space(spec)
    arch = _random_arch(named, 1)
    (tmp_path / "arch.json").write_text(json.dumps({"arch": arch}))
    out = tmp_path / "out"
    assert main(["export", str(tmp_path / "arch.json"), "--space", spec, "--seed", "3", "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert printed.count("matches PyTorch") == 2, printed
    with torch.random.fork_rng(devices=[]):  # the untrained network the command built: same seed
        torch.manual_seed(3)
        net = named.build(arch).eval()
    x = torch.randn(5, *named.input_shape, generator=torch.Generator().manual_seed(11))  # a batch size not exported
    with torch.inference_mode():
        expected = net(x)
    for fmt, name in (("onnx", "network.onnx"), ("torchscript", "network.torchscript.pt")):
        got = load_exported(out / name, fmt)(x)
        assert torch.allclose(got, expected, atol=1e-4, rtol=1e-3), (fmt, float((got - expected).abs().max()))
    assert not [p for p in out.iterdir() if p.name.startswith(".")]  # no temporary left behind


def test_export_cli_says_in_one_line_what_is_wrong(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    arch = tmp_path / "arch.json"
    arch.write_text(json.dumps({**resolve_space("digits").baseline(), "layer1_0": "no_such_block"}))
    assert main(["export", str(arch), "--space", "digits", "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "layer1_0" in err and "no_such_block" in err, err
    assert not (tmp_path / "out").exists()
    assert main(["export", "--weights", str(arch), "--out", str(tmp_path / "out")]) == 2
    assert "is not a network checkpoint" in capsys.readouterr().err
    assert main(["export", "--out", str(tmp_path / "out")]) == 2
    assert "give an experiment id or directory, an architecture JSON, or --weights" in capsys.readouterr().err


def test_export_refuses_an_unknown_format(tmp_path: Path) -> None:
    from nni_hwaware.errors import HwAwareError

    named = resolve_space("digits_tiny")
    with pytest.raises(HwAwareError, match="unknown export format 'tflite'"):
        export_network(named.build(named.baseline()), tuple(named.input_shape), tmp_path / "m", "tflite")


@pytest.fixture(scope="module")
def delivered(tmp_path_factory: pytest.TempPathFactory) -> tuple:
    """digits_tiny's reference network and another, trained 2 epochs, delivered with the first as baseline."""
    from nni_hwaware.training import TrainConfig, evaluate_architecture

    named = resolve_space("digits_tiny")
    train = TrainConfig(epochs=2, threads=1)
    found = evaluate_architecture(named, _random_arch(named, 0), train, repeats=1, keep_weights=True, name="searched")
    baseline = evaluate_architecture(named, named.baseline(), train, repeats=1, keep_weights=True, name="baseline")
    out = tmp_path_factory.mktemp("deliverables")
    found = deliver(named, found, baseline, space="digits_tiny", train=train, out=out)
    return named, found, baseline, out


def test_deliverables_load_and_reproduce_the_test_accuracy(delivered: tuple) -> None:
    _, found, _, out = delivered
    summary = found.extra["deliverables"]
    assert set(summary["files"].values()) == {"network.pt", "network.onnx", "network.torchscript.pt"}
    assert json.loads((out / "deliverables.json").read_text()) == summary
    raw = torch.load(out / "network.pt", weights_only=True)  # plain data: safe to load
    assert raw["arch"] == found.arch and raw["space"] == "digits_tiny" and raw["train"]["epochs"] == 2
    rebuilt_space, net = network_from_checkpoint(out / "network.pt")
    shape = tuple(rebuilt_space.input_shape)
    with torch.inference_mode():
        top1 = exported_accuracy(net, "digits", shape)
    assert abs(top1 - found.test_top1) < 0.001  # the best epoch's weights, not the last one's
    assert 0.3 < found.test_top1  # trained, not chance
    for fmt in FORMATS:
        entry = summary["exports"][fmt]
        assert entry["matches"] and abs(entry["test_top1_vs_torch"]) < 0.001, entry
        assert abs(exported_accuracy(load_exported(out / entry["path"], fmt), "digits", shape) - found.test_top1) < 0.001


def test_deliverables_time_the_onnx_exports_against_the_baseline_and_the_report_links_them(
        delivered: tuple, tmp_path: Path) -> None:
    from nni_hwaware.report import write_report

    _, found, baseline, out = delivered
    timing = found.extra["deliverables"]["timing"]
    assert timing["format"] == "onnx"  # the default deployment runtime: ONNX Runtime
    low, high = timing["latency_ratio_ci95"]
    assert low <= timing["latency_ratio"] <= high and high / low < 1.5 and timing["rounds"] >= 20
    assert timing["latency_ratio"] == pytest.approx(timing["found_ms"] / timing["baseline_ms"], rel=0.25)
    markdown = write_report(tmp_path / "report", baseline, [found], plot=False)["markdown"].read_text()
    assert "ONNX Runtime latency ratio, found vs baseline, interleaved" in markdown
    link = markdown.split("[network.onnx](")[1].split(")")[0]
    assert (tmp_path / "report" / link).resolve() == (out / "network.onnx").resolve()


def test_the_report_says_where_deliverables_on_another_machine_are(delivered: tuple, tmp_path: Path) -> None:
    import dataclasses

    from nni_hwaware.report import write_report

    _, found, baseline, _ = delivered
    summary = found.extra["deliverables"]
    elsewhere = {**summary, "host": "board-7"}  # the same directory exists here: the host decides
    remote = dataclasses.replace(found, extra={**found.extra, "deliverables": elsewhere})
    markdown = write_report(tmp_path, baseline, [remote], plot=False)["markdown"].read_text()
    assert f"On machine board-7, in {summary['dir']}" in markdown and "](" not in markdown.split("board-7")[1]


def test_export_cli_takes_a_trained_checkpoint(delivered: tuple, tmp_path: Path) -> None:
    _, found, _, out = delivered
    assert main(["export", "--weights", str(out / "network.pt"), "--format", "onnx", "--out", str(tmp_path)]) == 0
    assert (tmp_path / "network.onnx").is_file() and not (tmp_path / "network.torchscript.pt").exists()
    shape = tuple(resolve_space("digits_tiny").input_shape)
    assert abs(exported_accuracy(load_exported(tmp_path / "network.onnx", "onnx"), "digits", shape)
               - found.test_top1) < 0.001


def test_a_checkpoint_of_another_format_is_one_clear_error(tmp_path: Path) -> None:
    from nni_hwaware.errors import HwAwareError

    torch.save({"format": "something-else/9", "state_dict": {}}, tmp_path / "other.pt")
    with pytest.raises(HwAwareError, match="not a network checkpoint of this version"):
        load_checkpoint(tmp_path / "other.pt")
    with pytest.raises(HwAwareError, match="no checkpoint at"):
        load_checkpoint(tmp_path / "missing.pt")


def test_where_deliverables_go(delivered: tuple, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Nowhere outside NNI without a directory; NNI's trial directory under NNI; a directory the user names."""
    import dataclasses

    named, found, _, _ = delivered
    bare = dataclasses.replace(found, extra={})
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("NNI_OUTPUT_DIR", raising=False)
    assert deliver(named, bare, space="digits_tiny") == bare and not list(tmp_path.iterdir())
    monkeypatch.setenv("NNI_OUTPUT_DIR", str(tmp_path / "trial"))
    got = deliver(named, bare, space="digits_tiny", out=tmp_path / "mine")
    assert got.extra["deliverables"]["dir"] == str((tmp_path / "trial").resolve())  # the trial's directory
    got = deliver(named, bare, space="digits_tiny", out=tmp_path / "mine", nni_dir=False)
    assert (tmp_path / "mine" / "network.pt").is_file() and got.extra["deliverables"]["dir"].endswith("mine")


def test_a_failing_export_costs_neither_the_other_files_nor_the_result(delivered: tuple, tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    import nni_hwaware.export.deliverables as deliverables
    from nni_hwaware.errors import HwAwareError

    named, found, _, _ = delivered
    real = deliverables.export_network

    def fails_for_torchscript(net, shape, path, fmt, **options):
        if fmt == "torchscript":
            raise HwAwareError("could not trace Network to TorchScript (injected)")
        return real(net, shape, path, fmt, **options)

    monkeypatch.setattr(deliverables, "export_network", fails_for_torchscript)
    got = deliver(named, found, space="digits_tiny", out=tmp_path)
    summary = got.extra["deliverables"]
    assert set(summary["exports"]) == {"onnx"} and (tmp_path / "network.onnx").is_file()
    assert any("no torchscript export: could not trace" in note for note in summary["notes"])
    monkeypatch.setattr(deliverables, "save_checkpoint", lambda *a, **k: (_ for _ in ()).throw(OSError("disk full")))
    got = deliver(named, found, space="digits_tiny", out=tmp_path / "again")
    assert "was not saved" in got.extra["deliverables_error"] and got.test_top1 == found.test_top1
