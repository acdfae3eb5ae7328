"""The runtime a network ships on: int8 ONNX Runtime and OpenVINO as backends and exports, and the
retraining trial's headline in the deployment runtime with PyTorch's ratio beside it."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from torch import nn

from nni_hwaware.errors import HwAwareError
from nni_hwaware.export import calibration_images, export_network, load_exported
from nni_hwaware.profiling import measure_module, quantize_onnx
from nni_hwaware.profiling.backends import export_onnx
from nni_hwaware.profiling.int8 import seeded_calibration
from nni_hwaware.spaces.resolve import resolve_space

pytest.importorskip("onnxruntime")


def _net() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(), nn.AdaptiveAvgPool2d(1),
                         nn.Flatten(), nn.Linear(8, 4)).eval()


def _scales(path: Path) -> dict[str, np.ndarray]:
    import onnx
    from onnx import numpy_helper

    model = onnx.load(str(path))
    return {t.name: numpy_helper.to_array(t) for t in model.graph.initializer if t.name.endswith("_scale")}


def test_int8_calibration_is_deterministic_for_a_seed_and_moves_with_it(tmp_path: Path) -> None:
    fp32 = tmp_path / "m.onnx"
    export_onnx(_net(), torch.randn(1, 3, 8, 8), fp32)
    runs = {}
    for name, seed in (("a", 0), ("b", 0), ("c", 1)):
        quantize_onnx(fp32, tmp_path / f"{name}.onnx", seeded_calibration((1, 3, 8, 8), seed=seed))
        runs[name] = _scales(tmp_path / f"{name}.onnx")
    assert runs["a"] and runs["a"].keys() == runs["b"].keys() == runs["c"].keys()
    assert all(np.array_equal(runs["a"][k], runs["b"][k]) for k in runs["a"])  # same seed, same model
    assert any(not np.array_equal(runs["a"][k], runs["c"][k]) for k in runs["a"])  # activation ranges moved
    # the images a trained network is calibrated on: drawn by seed from the training split
    shape = tuple(resolve_space("digits_tiny").input_shape)
    first, again, other = (calibration_images("digits", shape, count=16, seed=s) for s in (3, 3, 4))
    assert first.shape == (16, *shape) and torch.equal(first, again) and not torch.equal(first, other)


def test_quantize_without_calibration_says_so(tmp_path: Path) -> None:
    export_onnx(_net(), torch.randn(1, 3, 8, 8), tmp_path / "m.onnx")
    with pytest.raises(HwAwareError, match="needs calibration inputs"):
        quantize_onnx(tmp_path / "m.onnx", tmp_path / "q.onnx", [])
    with pytest.raises(HwAwareError, match="needs calibration images"):
        export_network(_net(), (3, 8, 8), tmp_path / "q.onnx", "onnx-int8")


def test_the_int8_backend_times_a_quantized_model_and_its_export_keeps_the_answers(tmp_path: Path) -> None:
    cost = measure_module(_net(), (3, 8, 8), backend="onnxruntime-int8", threads=1)
    assert cost.latency.ms > 0 and cost.providers == "CPUExecutionProvider"
    from nni_hwaware.profiling import get_backend

    with pytest.raises(HwAwareError, match="runs on the CPU only"):
        get_backend("onnxruntime-int8").prepare(_net(), torch.randn(1, 3, 8, 8), "cuda")
    # a trained digits network quantized on 256 training images picks the same digits as in fp32
    from nni_hwaware.training import TrainConfig, evaluate_architecture

    named = resolve_space("digits_tiny")
    result = evaluate_architecture(named, named.baseline(), TrainConfig(epochs=3, threads=1), repeats=1,
                                   keep_weights=True)
    net = named.build(result.arch)
    net.load_state_dict(result.state_dict)
    shape = tuple(named.input_shape)
    check = export_network(net, shape, tmp_path / "network.int8.onnx", "onnx-int8",
                           calibration=calibration_images("digits", shape, seed=0))
    assert check.matches and check.format == "onnx-int8", check
    import onnx

    ops = {node.op_type for node in onnx.load(str(tmp_path / "network.int8.onnx")).graph.node}
    assert {"QuantizeLinear", "DequantizeLinear"} <= ops  # QDQ
    from nni_hwaware.export import exported_accuracy

    int8_top1 = exported_accuracy(load_exported(tmp_path / "network.int8.onnx", "onnx-int8"), "digits", shape)
    assert abs(int8_top1 - result.test_top1) <= 0.02, (int8_top1, result.test_top1)


def test_openvino_runs_the_export_as_pytorch_does(tmp_path: Path) -> None:
    pytest.importorskip("openvino")
    net = _net()
    cost = measure_module(net, (3, 8, 8), backend="openvino", threads=1)
    assert cost.latency.ms > 0 and cost.providers == "openvino:CPU"
    check = export_network(net, (3, 8, 8), tmp_path / "network.openvino.xml", "openvino")
    assert check.matches, check
    assert (tmp_path / "network.openvino.bin").is_file()  # its weights, moved in with it
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no temporary left behind
    x = torch.randn(5, 3, 8, 8)  # a batch size not exported
    with torch.inference_mode():
        expected = net(x)
    assert torch.allclose(load_exported(tmp_path / "network.openvino.xml", "openvino")(x), expected, atol=1e-4)


@pytest.mark.parametrize(("backend", "module", "extra"), [("onnxruntime-int8", "onnxruntime", "onnx"),
                                                         ("openvino", "openvino", "openvino")])
def test_a_missing_extra_gives_one_line_naming_it(backend: str, module: str, extra: str,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, module, None)  # makes the import fail
    if module == "onnxruntime":
        monkeypatch.setitem(sys.modules, "onnxruntime.quantization", None)
    with pytest.raises(HwAwareError) as info:
        measure_module(nn.Linear(3, 3), (3,), backend=backend)
    message = str(info.value)
    assert "\n" not in message and f"nni-hwaware[{extra}]" in message, message


#: What the test's deployment backend prepared (per network).
PREPARED: list[str] = []


def test_the_retraining_headline_is_the_deployment_runtimes_ratio_with_pytorchs_beside() -> None:
    from nni_hwaware.profiling import backends
    from nni_hwaware.profiling.backends import TorchBackend, register_backend
    from nni_hwaware.training import ModelResult
    from nni_hwaware.trial.parameters import Measuring
    from nni_hwaware.trial.run import compare_in_runtimes, retrain_metrics

    @register_backend("test-deploy")
    class DeployBackend(TorchBackend):
        def prepare(self, module: torch.nn.Module, example: torch.Tensor, device: str) -> Any:
            PREPARED.append(type(module).__name__)
            return super().prepare(module, example, device)

    named = resolve_space("digits_tiny")
    small = {label: "skip" for label in named.baseline()}

    def result(name: str, arch: dict) -> ModelResult:
        return ModelResult(name=name, space="digits_tiny", arch=arch, test_top1=0.9, test_top3=1.0, val_top1=0.9,
                           val_top3=1.0, latency_ms=1.0,
                           memory_mb=1.0, flops=1, params=1, predicted_latency_ms=1.0 if name == "baseline" else 0.5,
                           predicted_memory_mb=1.0)

    try:
        PREPARED.clear()
        found, baseline = compare_in_runtimes(named, {"baseline": result("baseline", named.baseline()),
                                                      "found": result("found", small)},
                                              rounds=4, seed=0, measuring=Measuring(backend="test-deploy"))
    finally:
        backends._BACKENDS.pop("test-deploy", None)  # other tests list the registered backends
    assert len(PREPARED) == 2  # both networks timed on the deployment backend
    comparison = found.extra["vs_baseline"]
    assert comparison["backend"] == "test-deploy" and comparison["latency_ratio"] < 1.0
    assert found.extra["vs_baseline_torch"]["latency_ratio"] < 1.0  # PyTorch's, timed apart
    final = retrain_metrics(baseline, found)
    assert final["deploy_backend"] == "test-deploy"
    assert final["latency_ratio"] == comparison["latency_ratio"]
    assert final["torch_latency_ratio"] == found.extra["vs_baseline_torch"]["latency_ratio"]
    from nni_hwaware.report.table import measured_markdown

    text = measured_markdown(found)
    assert "interleaved: " in text and "), in test-deploy" in text and "in PyTorch (what trains)" in text


def test_a_table_gains_the_runtimes_rows_and_keeps_each_thread_count_apart(tmp_path: Path) -> None:
    """A table profiled for PyTorch, asked for ONNX Runtime, is profiled so and the rows added to its file;
    the thread count is part of a row's key, and the model reads the rows of the count it is asked for."""
    from nni_hwaware.cost_model.for_space import load_or_profile, load_space_model

    named = resolve_space("digits_tiny")
    path = tmp_path / "t.csv"
    options = {"progress": False, "max_seconds": 0.3}
    torch_table = load_or_profile(named, path, backend="torch", **options)
    assert torch_table.backends() == ["torch"]
    both = load_or_profile(named, path, backend="onnxruntime", **options)
    assert both.backends() == ["onnxruntime", "torch"] and len(both) == 2 * len(torch_table)
    written = path.stat().st_mtime_ns
    assert len(load_or_profile(named, path, backend="onnxruntime", **options)) == len(both)
    assert path.stat().st_mtime_ns == written  # held: not profiled again
    twice = load_or_profile(named, path, backend="onnxruntime", threads=2, **options)
    ort = twice.frame[twice.frame.backend == "onnxruntime"]
    assert sorted(ort.threads.unique()) == [1, 2] and len(twice) == len(both) + len(ort) // 2
    one = load_space_model(named, path, backend="onnxruntime", threads=1)
    two = load_space_model(named, path, backend="onnxruntime", threads=2)
    assert one.threads == 1 and two.threads == 2
    arch = named.baseline(one) if callable(named.baseline) else dict(named.baseline)
    assert one.predict(arch).flops == two.predict(arch).flops  # the same networks, timed apart
    from nni_hwaware.cost_model.for_space import space_model

    with pytest.raises(HwAwareError, match=r"timed with \[1, 2\] threads; choose one"):
        space_model(named, twice, backend="onnxruntime")
    with pytest.raises(HwAwareError, match="at threads \\[1, 2\\]; pick one"):
        twice.lookup_many([], chip=twice.chips()[0], backend="onnxruntime", batch_size=1)


class _SessionRunner:
    """A runner that pays a fixed per-call cost (a spin of ``CALL_S``) before the module's own work."""

    CALL_S = 0.0004

    def __init__(self, inner: Any) -> None:
        self.inner, self.sync, self.providers = inner, inner.sync, "test"

    def __call__(self) -> object:
        import time

        end = time.perf_counter() + self.CALL_S
        while time.perf_counter() < end:
            pass
        return self.inner()


def test_a_runtime_that_runs_each_leaf_as_a_session_pays_its_call_cost_once_not_per_leaf() -> None:
    """A known answer: every call of the test runtime costs 0.4 ms on top of the work. Profiled per
    leaf, that cost is taken off each leaf (column call_ms) and the whole network pays it once, in its
    per-network term; without it, a network of n leaves is predicted n calls."""
    from nni_hwaware.cost_model import find_leaves, profile_model_space, space_cost_model
    from nni_hwaware.profiling import backends
    from nni_hwaware.profiling.backends import TorchBackend, register_backend

    @register_backend("test-session")
    class SessionBackend(TorchBackend):
        session_per_call = True

        def prepare(self, module: torch.nn.Module, example: torch.Tensor, device: str) -> Any:
            return _SessionRunner(super().prepare(module, example, device))

    try:
        named = resolve_space("digits_tiny")
        leaves = find_leaves(named.space, named.dummy_input())
        table = profile_model_space(named.space, named.dummy_input(), leaves=leaves, backend="test-session",
                                    progress=False, max_seconds=1.0, calibration_samples=6,
                                    reference=named.baseline)
    finally:
        backends._BACKENDS.pop("test-session", None)  # other tests list the registered backends
    rows = table.frame[table.frame.kind == "leaf"]
    call = rows.call_ms.astype(float)
    assert (call > 0.3).all() and (call < 4.0).all()  # the spin, timed beside the leaves (a busy CPU stretches it)
    assert (rows.latency_ms.astype(float) < call).all()  # what is left of a leaf is its own work, under a call
    from nni_hwaware.cost_table import CostTable

    model = space_cost_model(leaves, table, backend="test-session", name="t")
    reference = named.baseline(model)
    per_leaf = table.frame.copy()  # every leaf with its call, as a sum of per-leaf sessions would have it
    is_leaf = per_leaf.kind == "leaf"
    per_leaf.loc[is_leaf, "latency_ms"] += per_leaf.loc[is_leaf, "call_ms"]
    own, with_calls = (space_cost_model(leaves, t, backend="test-session", name="t", with_network_term=False)
                       .predict(reference).latency_ms for t in (table, CostTable(per_leaf)))
    assert (with_calls - own) / float(call.median()) > 4  # the reference network's leaves, a call each
    # the whole network, one session, pays one call: the table predicts about that, not a call per leaf
    predicted = model.predict(reference).latency_ms
    assert own < predicted < own + 2.5 * float(call.median()), (own, predicted, with_calls)
