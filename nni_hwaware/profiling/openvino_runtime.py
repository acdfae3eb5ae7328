"""The ``openvino`` backend: a module exported to ONNX and compiled by OpenVINO for its CPU plugin.

The export is :func:`~nni_hwaware.profiling.backends.export_onnx`'s (the same file the
``onnxruntime`` backend runs); ``openvino.Core().compile_model`` compiles it for ``CPU`` with
``INFERENCE_NUM_THREADS = torch.get_num_threads()`` (so
:func:`~nni_hwaware.profiling.chips.fixed_threads` applies as to every backend), one stream, the
latency hint and fp32 inference (a CPU with bf16 units would otherwise run in bf16). Needs
``pip install 'nni-hwaware[openvino]'``.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import torch
from torch import nn

from nni_hwaware.errors import HwAwareError, one_line
from nni_hwaware.profiling._checks import check_module, device_type, parse_device
from nni_hwaware.profiling.backends import Backend, Runner, export_onnx, register_backend

__all__ = ["OPENVINO_INSTALL_HINT", "OpenVinoBackend", "import_openvino", "openvino_model"]

#: What to run when OpenVINO is missing.
OPENVINO_INSTALL_HINT = "pip install 'nni-hwaware[openvino]'"


def import_openvino() -> Any:
    """The ``openvino`` module, or a one-line error naming the extra to install."""
    try:
        import openvino
    except ImportError as exc:
        raise HwAwareError(f"backend 'openvino' needs OpenVINO: {OPENVINO_INSTALL_HINT}") from exc
    return openvino


def openvino_model(path: str | Path) -> Any:
    """The ONNX model at ``path`` compiled by OpenVINO for the CPU, set up as the backend times it."""
    ov = import_openvino()
    try:
        return ov.Core().compile_model(str(path), "CPU", {
            "INFERENCE_NUM_THREADS": int(torch.get_num_threads()), "NUM_STREAMS": 1,
            "PERFORMANCE_HINT": "LATENCY", "INFERENCE_PRECISION_HINT": "f32"})
    except Exception as err:
        raise HwAwareError(f"OpenVINO could not compile {Path(path).name} for the CPU ({one_line(err)}); "
                           "use backend 'onnxruntime'") from None


class _OpenVinoRunner:
    """One infer request of a compiled model on a fixed input."""

    def __init__(self, compiled: Any, example: torch.Tensor, tmpdir: tempfile.TemporaryDirectory[str],
                 exporter: str) -> None:
        self.compiled = compiled
        self.exporter = exporter
        self.providers = "openvino:CPU"
        self.sync = None
        self._tmpdir = tmpdir
        self._request = compiled.create_infer_request()
        self._feed = {0: example.detach().cpu().contiguous().numpy()}

    def __call__(self) -> object:
        return self._request.infer(self._feed)


@register_backend("openvino")
class OpenVinoBackend(Backend):
    """OpenVINO's CPU plugin running the module's ONNX export (module docstring)."""

    session_per_call = True

    def prepare(self, module: nn.Module, example: torch.Tensor, device: str) -> Runner:
        import_openvino()
        check_module(module)
        if device_type(device) != "cpu":
            raise HwAwareError(f"backend 'openvino' runs on the CPU plugin only, not {device!r}; use device 'cpu'")
        parse_device(device)
        module.eval()
        example = example.detach().cpu()
        tmpdir = tempfile.TemporaryDirectory(prefix="nni_hwaware_openvino_")
        try:
            path = Path(tmpdir.name) / "model.onnx"
            exporter = export_onnx(module, example, path)
            compiled = openvino_model(path)
        except BaseException:
            tmpdir.cleanup()
            raise
        return _OpenVinoRunner(compiled, example, tmpdir, exporter)
