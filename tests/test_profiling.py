"""Tests for nni_hwaware.profiling: exact memory/FLOP counts, the outlier rule, backends."""

from __future__ import annotations

import sys

import pytest
import torch
from torch import nn

from nni_hwaware.errors import HwAwareError
from nni_hwaware.profiling import (
    BYTES_PER_MB,
    ONNX_INSTALL_HINT,
    Backend,
    ChipInfo,
    ModuleCost,
    available_backends,
    count_flops,
    count_params,
    detect_chip,
    fixed_threads,
    get_backend,
    measure_module,
    measure_peak_flops,
    param_bytes,
    peak_activation_bytes,
    register_backend,
    split_outliers,
)
from nni_hwaware.profiling import backends as backends_module

F32 = 4  # bytes per float32 element


# --------------------------------------------------------------------------- memory


def test_param_bytes_counts_parameters_and_buffers_once() -> None:
    linear = nn.Linear(10, 20)
    assert param_bytes(linear) == (10 * 20 + 20) * F32

    # weight, bias, running_mean, running_var (float32) + num_batches_tracked (one int64)
    bn = nn.BatchNorm2d(8)
    assert param_bytes(bn) == 4 * 8 * F32 + 8

    tied = nn.Sequential(nn.Linear(6, 6, bias=False), nn.Linear(6, 6, bias=False))
    tied[1].weight = tied[0].weight
    assert param_bytes(tied) == 36 * F32


def test_peak_activation_single_linear_is_its_output() -> None:
    x = torch.randn(4, 10)
    assert peak_activation_bytes(nn.Linear(10, 20), x, "cpu") == 4 * 20 * F32


def test_peak_activation_mlp_is_max_over_live_sets() -> None:
    # Sequential keeps the previous output referenced while the next op allocates:
    #   linear1 -> {h1}           = 320
    #   relu    -> {h1, r}        = 320 + 320 = 640   <- peak
    #   (h1 freed) linear2 -> {r, y} = 320 + 80 = 400
    #   (r freed)  output  -> {y}    = 80
    mlp = nn.Sequential(nn.Linear(10, 20), nn.ReLU(), nn.Linear(20, 5))
    x = torch.randn(4, 10)
    h = 4 * 20 * F32
    y = 4 * 5 * F32
    assert peak_activation_bytes(mlp, x) == max(h, h + h, h + y, y) == 640


def test_peak_activation_tracks_frees_of_intermediates() -> None:
    # The last layer is the widest, so the peak is a live set reached *after* h1 is freed:
    #   {h1} = 320, {h1, r} = 640, (h1 freed) {r, y} = 320 + 640 = 960   <- peak
    # Counting without frees would give 320 + 320 + 640 = 1280.
    mlp = nn.Sequential(nn.Linear(10, 20), nn.ReLU(), nn.Linear(20, 40))
    x = torch.randn(4, 10)
    h = 4 * 20 * F32
    y = 4 * 40 * F32
    assert peak_activation_bytes(mlp, x) == max(h, h + h, h + y, y) == 960


def test_peak_activation_inplace_relu_adds_nothing() -> None:
    # relu_ writes into h1: live sets {h1}=320, {h1}=320, {h1, y}=400.
    mlp = nn.Sequential(nn.Linear(10, 20), nn.ReLU(inplace=True), nn.Linear(20, 5))
    x = torch.randn(4, 10)
    assert peak_activation_bytes(mlp, x) == 4 * 20 * F32 + 4 * 5 * F32 == 400


def test_peak_activation_ignores_inputs_views_and_is_deterministic() -> None:
    class ViewThenLinear(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.fc = nn.Linear(12, 3)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.fc(x.flatten(1))  # flatten of a contiguous input is a view: no bytes

    model = ViewThenLinear()
    x = torch.randn(2, 3, 4)
    results = {peak_activation_bytes(model, (x,), "cpu") for _ in range(3)}
    assert results == {2 * 3 * F32}


def test_peak_activation_rejects_bad_device() -> None:
    with pytest.raises(HwAwareError, match="device"):
        peak_activation_bytes(nn.Linear(2, 2), torch.randn(1, 2), "tpu")


# --------------------------------------------------------------------------- flops


def test_count_flops_linear_and_conv_by_hand() -> None:
    n = 4
    assert count_flops(nn.Linear(10, 20), torch.randn(n, 10)) == 2 * n * 10 * 20

    conv = nn.Conv2d(3, 8, kernel_size=3, padding=1)
    x = torch.randn(2, 3, 16, 16)
    h_out = w_out = 16
    macs = 2 * 8 * h_out * w_out * 3 * 3 * 3
    assert count_flops(conv, x) == 2 * macs

    grouped = nn.Conv2d(8, 16, kernel_size=3, stride=2, groups=4)
    x = torch.randn(1, 8, 9, 9)
    h_out = w_out = (9 - 3) // 2 + 1
    assert count_flops(grouped, x) == 2 * (16 * h_out * w_out * (8 // 4) * 3 * 3)


def test_count_params() -> None:
    assert count_params(nn.Conv2d(3, 8, 3)) == 8 * 3 * 9 + 8
    assert count_params(nn.BatchNorm2d(8)) == 16  # buffers are not parameters


def test_count_flops_rejects_non_module() -> None:
    with pytest.raises(HwAwareError, match=r"nn\.Module"):
        count_flops(lambda x: x, torch.randn(1))  # type: ignore[arg-type]


# --------------------------------------------------------------------------- timing


def test_split_outliers_mad_rule() -> None:
    samples = [1.0, 1.1, 0.9, 1.05, 0.95, 5.0]
    kept, dropped = split_outliers(samples)
    assert dropped == [5.0]
    assert sorted(kept) == sorted(samples[:-1])


# --------------------------------------------------------------------------- chips


def test_fixed_threads_restores_even_on_error() -> None:
    before = torch.get_num_threads()
    with fixed_threads(1) as n:
        assert n == 1 and torch.get_num_threads() == 1
    assert torch.get_num_threads() == before
    with pytest.raises(RuntimeError), fixed_threads(1):
        raise RuntimeError("boom")
    assert torch.get_num_threads() == before
    with fixed_threads(None) as n:
        assert n == before
    with pytest.raises(HwAwareError, match="threads"), fixed_threads(0):
        pass


def test_detect_chip_cpu() -> None:
    chip = detect_chip("cpu", threads=3)
    assert isinstance(chip, ChipInfo)
    assert chip.name and chip.device == "cpu" and chip.threads == 3
    assert detect_chip().threads == torch.get_num_threads()
    with pytest.raises(HwAwareError, match="device"):
        detect_chip("tpu")


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the error when CUDA is absent")
def test_detect_chip_cuda_unavailable_is_an_error() -> None:
    with pytest.raises(HwAwareError, match="cuda"):
        detect_chip("cuda")


def test_measure_peak_flops_positive() -> None:
    state = torch.random.get_rng_state()
    flops = measure_peak_flops("cpu", size=64, seconds=0.05)
    assert flops > 0
    assert torch.equal(torch.random.get_rng_state(), state)  # no global reseeding


# --------------------------------------------------------------------------- backends


def test_unknown_backend_lists_known_names() -> None:
    assert {"torch", "onnxruntime", "onnxruntime-int8", "openvino"} <= set(available_backends())
    with pytest.raises(HwAwareError, match=r"unknown backend 'nope'; choose one of: onnxruntime, onnxruntime-int8, openvino, torch"):
        get_backend("nope")


def test_register_backend_and_name_clash(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(backends_module, "_BACKENDS", dict(backends_module._BACKENDS))

    @register_backend("echo")
    class EchoBackend(Backend):
        def prepare(self, module, example, device):  # type: ignore[no-untyped-def]
            return get_backend("torch").prepare(module, example, device)

    assert isinstance(get_backend("echo"), EchoBackend) and EchoBackend.name == "echo"

    with pytest.raises(HwAwareError, match="already used"):

        @register_backend("torch")
        class Other(Backend):
            def prepare(self, module, example, device):  # type: ignore[no-untyped-def]
                raise NotImplementedError


def test_torch_backend_runner() -> None:
    model = nn.Linear(3, 2)
    x = torch.randn(1, 3)
    runner = get_backend("torch").prepare(model, x, "cpu")
    assert runner.sync is None and runner.providers == ""
    assert not model.training
    with torch.no_grad():
        assert torch.allclose(runner(), model(x))  # type: ignore[arg-type]


def _small_convnet() -> nn.Module:
    torch.manual_seed(0)  # the test's own weights; the code under test never reseeds
    return nn.Sequential(
        nn.Conv2d(3, 8, 3, padding=1),
        nn.BatchNorm2d(8),
        nn.ReLU(),
        nn.Conv2d(8, 4, 3, stride=2, padding=1),
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
    )


def test_onnxruntime_backend_matches_torch() -> None:
    pytest.importorskip(
        "onnxruntime", reason="onnxruntime not installed (pip install 'nni-hwaware[onnx]')"
    )
    model = _small_convnet().eval()
    x = torch.randn(2, 3, 16, 16)
    with torch.inference_mode():
        expected = model(x)
    runner = get_backend("onnxruntime").prepare(model, x, "cpu")
    assert runner.providers == "CPUExecutionProvider"
    assert runner.sync is None
    assert runner.exporter == "torchscript"  # type: ignore[attr-defined]
    (got,) = runner()  # type: ignore[misc]
    assert got.shape == (2, 4)
    assert torch.allclose(torch.from_numpy(got), expected, atol=1e-5)


def test_onnxruntime_missing_fails_early_with_hint(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "onnxruntime", None)  # makes `import onnxruntime` fail
    with pytest.raises(HwAwareError) as info:
        measure_module(nn.Linear(3, 3), (3,), backend="onnxruntime")
    assert ONNX_INSTALL_HINT in str(info.value)
    assert "\n" not in str(info.value)


# --------------------------------------------------------------------------- measure_module


def test_measure_module_conv_block() -> None:
    block = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1, bias=False), nn.BatchNorm2d(8), nn.ReLU())
    block.train()
    threads_before = torch.get_num_threads()
    rng_before = torch.random.get_rng_state()
    cuda_before = torch.cuda.is_initialized()  # an earlier test in this process may have used the GPU

    cost = measure_module(
        block,
        (3, 16, 16),
        batch_size=2,
        threads=1,
        seed=1,
        warmup=1,
        min_rounds=3,
        max_rounds=20,
        max_seconds=0.5,
    )

    assert isinstance(cost, ModuleCost)
    assert cost.latency.ms > 0 and cost.latency.runs >= 3
    assert cost.flops == 2 * (2 * 8 * 16 * 16 * 3 * 3 * 3)  # conv only; BN/ReLU are not counted
    assert cost.params == 8 * 3 * 9 + 2 * 8
    assert cost.param_mb == param_bytes(block) / BYTES_PER_MB
    act = 2 * 8 * 16 * 16 * F32  # conv out + BN out alive together, then BN out + ReLU out
    assert cost.activation_mb == 2 * act / BYTES_PER_MB
    assert cost.memory_mb == pytest.approx(cost.param_mb + cost.activation_mb)
    assert cost.providers == ""

    assert block.training  # mode restored
    assert torch.get_num_threads() == threads_before
    assert torch.equal(torch.random.get_rng_state(), rng_before)
    assert torch.cuda.is_initialized() == cuda_before  # in a fresh process: tests/test_cuda.py


def test_measure_module_onnxruntime_same_static_costs() -> None:
    pytest.importorskip(
        "onnxruntime", reason="onnxruntime not installed (pip install 'nni-hwaware[onnx]')"
    )
    model = _small_convnet()
    options = {"warmup": 1, "min_rounds": 3, "max_rounds": 10, "max_seconds": 0.3}
    eager = measure_module(model, (3, 16, 16), **options)
    ort = measure_module(model, (3, 16, 16), backend="onnxruntime", **options)
    assert ort.providers == "CPUExecutionProvider"
    assert ort.latency.ms > 0
    assert (ort.flops, ort.params, ort.param_mb, ort.activation_mb) == (
        eager.flops,
        eager.params,
        eager.param_mb,
        eager.activation_mb,
    )


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"input_shape": 3}, "input_shape"),
        ({"input_shape": (3, 0)}, "input_shape"),
        ({"batch_size": 0}, "batch_size"),
        ({"backend": "tvm"}, "unknown backend"),
        ({"device": "tpu"}, "device"),
        ({"threads": 0}, "threads"),
        ({"min_rounds": 1}, "min_rounds"),
    ],
)
def test_measure_module_rejects_bad_input(kwargs: dict, match: str) -> None:
    args = {"input_shape": (3,), **kwargs}
    shape = args.pop("input_shape")
    with pytest.raises(HwAwareError, match=match):
        measure_module(nn.Linear(3, 3), shape, **args)


def test_onnx_export_falls_back_to_dynamo_exporter(monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip(
        "onnxruntime", reason="onnxruntime not installed (pip install 'nni-hwaware[onnx]')"
    )
    pytest.importorskip(
        "onnxscript", reason="onnxscript not installed (pip install 'nni-hwaware[onnx]')"
    )
    real_export = torch.onnx.export

    def legacy_broken(*args, dynamo: bool = True, **kwargs):  # type: ignore[no-untyped-def]
        if not dynamo:
            raise RuntimeError("legacy exporter unavailable")
        return real_export(*args, dynamo=dynamo, **kwargs)

    monkeypatch.setattr(torch.onnx, "export", legacy_broken)
    model = _small_convnet().eval()
    x = torch.randn(1, 3, 16, 16)
    runner = get_backend("onnxruntime").prepare(model, x, "cpu")
    assert runner.exporter == "dynamo"  # type: ignore[attr-defined]
    (got,) = runner()  # type: ignore[misc]
    with torch.inference_mode():
        assert torch.allclose(torch.from_numpy(got), model(x), atol=1e-5)
