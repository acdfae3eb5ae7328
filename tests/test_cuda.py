"""The CUDA paths: chip detection, synchronised timing, CUDA memory, a table profiled on a GPU,
a Gumbel search on Lightning's GPU accelerator, training and exporting a network trained on a GPU.

Every test here is skipped where ``torch.cuda.is_available()`` is False (CI has no GPU);
run them on a GPU machine with ``pytest tests/test_cuda.py``.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from handmade import tiny_config, tiny_files, tiny_gumbel_config
from torch import nn

from nni_hwaware.cli import main
from nni_hwaware.cost_model import space_model
from nni_hwaware.cost_table import CostTable
from nni_hwaware.errors import HwAwareError
from nni_hwaware.profiling import detect_chip, measure_module, peak_activation_bytes
from nni_hwaware.report import ModelResult
from nni_hwaware.spaces.resolve import resolve_space

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")


class _Matmuls(nn.Module):
    """``n`` chained products with a fixed ``size x size`` weight: ``2 n size^3`` FLOPs per call."""

    def __init__(self, size: int, n: int) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.randn(size, size) / size**0.5)
        self.n = n

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for _ in range(self.n):
            x = x @ self.weight
        return x


def test_detect_chip_names_the_gpu() -> None:
    chip = detect_chip("cuda")
    assert chip.name == torch.cuda.get_device_name(0)
    assert chip.device == "cuda:0"
    with pytest.raises(HwAwareError, match=r"only \d+ CUDA device"):
        detect_chip(f"cuda:{torch.cuda.device_count()}")


def test_profiling_on_the_cpu_leaves_cuda_alone() -> None:
    """Where a GPU exists, a CPU profile neither initialises CUDA nor puts anything on the GPU
    (a fresh process: the other tests here do use the GPU)."""
    code = (
        "import torch\n"
        "from torch import nn\n"
        "from nni_hwaware.profiling import detect_chip, measure_module\n"
        "net = nn.Sequential(nn.Conv2d(3, 8, 3), nn.BatchNorm2d(8), nn.ReLU())\n"
        "cost = measure_module(net, (3, 16, 16), device='cpu', max_seconds=0.5)\n"
        "assert cost.latency.ms > 0 and detect_chip('cpu').device == 'cpu'\n"
        "print(torch.cuda.is_initialized())\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "False"


def test_cuda_latency_waits_for_the_kernels() -> None:
    """Timed without synchronising, a launch returns in microseconds: the FLOP rate would be impossible."""
    size = 4096
    one = measure_module(_Matmuls(size, 1), (size,), batch_size=size, device="cuda", max_seconds=3.0)
    four = measure_module(_Matmuls(size, 4), (size,), batch_size=size, device="cuda", max_seconds=3.0)
    flops = 2 * size**3
    # an H100/H200 does about 60 TFLOP/s in float32 (1e15 is above any GPU's float32 peak)
    assert flops / (one.latency.ms / 1e3) < 1e15
    assert 2.5 < four.latency.ms / one.latency.ms < 6.0
    assert one.flops == pytest.approx(flops, rel=0.01)


def test_cuda_memory_counts_the_activations() -> None:
    """CUDA's peak allocation during a forward covers the output and is on the scale the CPU path gives."""
    net = nn.Sequential(nn.Conv2d(3, 64, 3, padding=1), nn.ReLU(), nn.Conv2d(64, 64, 3, padding=1)).eval()
    x = torch.randn(8, 3, 64, 64)
    out_bytes = 8 * 64 * 64 * 64 * 4
    with torch.inference_mode():
        cpu = peak_activation_bytes(net, x)
        net_gpu, x_gpu = net.to("cuda"), x.to("cuda")
        gpu = peak_activation_bytes(net_gpu, x_gpu)
    assert gpu >= out_bytes
    assert cpu >= out_bytes
    assert 0.5 < gpu / cpu < 8  # cuDNN's workspaces are in the CUDA figure, not in the CPU one


def test_profile_a_table_on_the_gpu_and_predict_from_it(tmp_path: Path) -> None:
    out = tmp_path / "table.csv"
    assert main(["profile", "--space", "digits_tiny", "--device", "cuda", "--time-budget", "3",
                 "--out", str(out)]) == 0
    table = CostTable.load(out)
    frame = table.frame
    name = torch.cuda.get_device_name(0)
    assert table.chips() == [name]
    assert set(frame.device) == {"cuda:0"}
    leaves = frame[frame.kind == "leaf"]
    assert len(leaves) > 5 and (leaves.latency_ms > 0).all() and (leaves.memory_mb > 0).all()
    model = space_model(resolve_space("digits_tiny"), table)
    config_arch = {label: values[0] for label, values in model.choices().items()}
    cost = model.predict(config_arch)
    assert cost.latency_ms > 0 and cost.memory_mb > 0


def test_onnxruntime_on_cuda_runs_or_says_what_to_install() -> None:
    pytest.importorskip("onnxruntime")
    import onnxruntime

    net = nn.Sequential(nn.Conv2d(3, 8, 3), nn.ReLU())
    if "CUDAExecutionProvider" in onnxruntime.get_available_providers():
        cost = measure_module(net, (3, 32, 32), backend="onnxruntime", device="cuda", max_seconds=2.0)
        assert cost.latency.ms > 0 and cost.providers.startswith("CUDAExecutionProvider")
    else:
        with pytest.raises(HwAwareError, match="onnxruntime-gpu"):
            measure_module(net, (3, 32, 32), backend="onnxruntime", device="cuda", max_seconds=2.0)


def test_gumbel_search_on_the_gpu_retrains_on_it_and_exports(tmp_path: Path) -> None:
    """The default accelerator ('auto') searches on the GPU; the retraining runs on CUDA too."""
    space, table = tiny_files(tmp_path)
    path = tiny_gumbel_config(tmp_path, space, table, search={"threads": 1, "arc_lr": 0.1},  # accelerator: auto
                              retrain={"epochs": 1, "device": "cuda"})
    assert main(["search", "gumbel", "--config", str(path)]) == 0
    run = tmp_path / "run"
    summary = json.loads((run / "summary.json").read_text())
    # the cost penalty drives both layers to 'skip', as on CPU (tests/test_gumbel_cli.py)
    assert summary["arch"] == {"layer1_0": "skip", "layer2_0": "skip"}
    searched = ModelResult.load(run / "results" / "searched.json")
    assert searched.train_seconds > 0 and 0 <= searched.test_top1 <= 1
    from nni_hwaware.export import network_from_checkpoint

    _, net = network_from_checkpoint(run / "network" / "network.pt")
    assert all(p.device.type == "cpu" for p in net.parameters())  # a checkpoint loads anywhere
    assert (run / "network" / "network.onnx").is_file()
    assert (run / "network" / "network.torchscript.pt").is_file()


def test_retrain_on_cuda_saves_exports_that_match_the_network(tmp_path: Path) -> None:
    space = tmp_path / "tiny_space.json"
    space.write_text(tiny_config().to_json())
    arch = tmp_path / "arch.json"
    arch.write_text(json.dumps({"arch": {"layer1_0": "basic", "layer2_0": "bottleneck"}}))
    result = tmp_path / "result.json"
    assert main(["retrain", "--arch", str(arch), "--space", str(space), "--epochs", "2",
                 "--train", json.dumps({"device": "cuda"}), "--out", str(result),
                 "--save", str(tmp_path / "net")]) == 0
    trained = ModelResult.load(result)
    assert trained.test_top1 > 0.3  # two epochs on digits learn far above chance (0.1)
    from nni_hwaware.export import load_exported, network_from_checkpoint

    _, net = network_from_checkpoint(tmp_path / "net" / "network.pt")
    x = torch.randn(4, 1, 8, 8)
    with torch.no_grad():
        expected = net(x)
    on_gpu = load_exported(tmp_path / "net" / "network.torchscript.pt", "torchscript", device="cuda")
    torch.testing.assert_close(on_gpu(x), expected, rtol=1e-3, atol=1e-3)
