"""A trained network exported to the formats chips run, each export checked against PyTorch.

* ``onnx``: ``network.onnx`` (opset :data:`~nni_hwaware.profiling.backends.ONNX_OPSET`, one
  input ``input`` and one output ``output``, a free batch axis) for ONNX Runtime, TensorRT
  and vendor compilers; needs the ``onnx`` extra (``pip install 'nni-hwaware[onnx]'``).
* ``torchscript``: ``network.torchscript.pt`` (``torch.jit.trace``), for LibTorch and
  PyTorch Mobile; ``torch.jit.load`` reads it without this package.
* ``onnx-int8``: ``network.int8.onnx``, the ONNX export quantized statically to int8
  (:func:`~nni_hwaware.profiling.int8.quantize_onnx`: QDQ, per-channel weights), calibrated on
  the images it is given (a few hundred training images drawn by seed); for ONNX Runtime.
* ``openvino``: ``network.openvino.xml`` and its ``.bin`` weights, OpenVINO's model (converted
  from the ONNX export, fp32); needs the ``openvino`` extra.

:data:`DEPLOY_FORMATS` names the format each deployment backend ships in.

Each export is run on a batch (seeded, or the first calibration images) and compared with the
PyTorch network's outputs: an fp32 export agrees within :data:`ATOL` + :data:`RTOL` x |output|; an
int8 one when it picks the same class for at least :data:`INT8_AGREEMENT` of the batch.
:class:`ExportCheck` says how far apart they are. A file appears only once it is complete
(written in a temporary directory, then moved).
"""

from __future__ import annotations

import contextlib
import copy
import os
import shutil
import tempfile
import warnings
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from nni_hwaware.errors import HwAwareError, one_line

__all__ = ["ATOL", "DEPLOY_FORMATS", "FORMATS", "INT8_AGREEMENT", "KNOWN_FORMATS", "RTOL", "ExportCheck",
           "export_network", "file_name", "formats_for", "load_exported"]

#: Export formats a search always writes, in order.
FORMATS = ("onnx", "torchscript")
#: Every format :func:`export_network` writes.
KNOWN_FORMATS = ("onnx", "torchscript", "onnx-int8", "openvino")
#: The format a deployment backend ships in (the found network's deliverable for it).
DEPLOY_FORMATS = {"onnxruntime": "onnx", "onnxruntime-int8": "onnx-int8", "openvino": "openvino",
                  "torch": "torchscript"}
#: An int8 export agrees with PyTorch when it picks PyTorch's class on this share of the checked batch.
INT8_AGREEMENT = 0.9
#: An export agrees with PyTorch when ``|exported - torch| <= ATOL + RTOL * |torch|`` everywhere
#: (float32 kernels of two runtimes differ by about 1e-6 on these networks).
ATOL = 1e-4
RTOL = 1e-3
_FILES = {"onnx": "network.onnx", "torchscript": "network.torchscript.pt", "onnx-int8": "network.int8.onnx",
          "openvino": "network.openvino.xml"}


def file_name(fmt: str) -> str:
    """The file a format is written to (``network.onnx``, ``network.torchscript.pt``, ...)."""
    _check_format(fmt)
    return _FILES[fmt]


def formats_for(backend: str) -> tuple[str, ...]:
    """The formats a search for deployment on ``backend`` writes: :data:`FORMATS` and the backend's own."""
    deploy = DEPLOY_FORMATS.get(backend)
    return FORMATS if deploy is None or deploy in FORMATS else (*FORMATS, deploy)


def _check_format(fmt: str) -> None:
    if fmt not in KNOWN_FORMATS:
        raise HwAwareError(f"unknown export format {fmt!r}; use one of: {', '.join(KNOWN_FORMATS)}")


@dataclass(frozen=True)
class ExportCheck:
    """One export and how well it reproduces the PyTorch network on a batch."""

    format: str
    path: str
    #: Largest ``|exported - torch|`` over the checked batch.
    max_abs_diff: float
    #: Whether every output is within ``ATOL + RTOL * |torch|``.
    matches: bool
    batch: int
    #: Which exporter wrote it (``torchscript`` / ``dynamo`` for ONNX, ``trace`` for TorchScript).
    exporter: str

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def load_exported(path: str | os.PathLike[str], fmt: str, device: str = "cpu") -> Callable[[torch.Tensor], torch.Tensor]:
    """A callable running the exported model at ``path`` on a batch (outputs as a CPU tensor)."""
    _check_format(fmt)
    path = Path(path)
    if not path.is_file():
        raise HwAwareError(f"no {fmt} export at {path}")
    if fmt == "torchscript":
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", FutureWarning)  # torch.jit is deprecated, still what LibTorch loads
            module = torch.jit.load(str(path), map_location=device).eval()

        def run_script(x: torch.Tensor) -> torch.Tensor:
            with torch.inference_mode():
                return module(x.to(device)).cpu()
        return run_script
    if fmt == "openvino":
        from nni_hwaware.profiling.openvino_runtime import openvino_model

        compiled = openvino_model(path)

        def run_openvino(x: torch.Tensor) -> torch.Tensor:
            return torch.from_numpy(np.asarray(compiled(x.detach().cpu().numpy())[0]).copy())
        return run_openvino
    from nni_hwaware.profiling.backends import onnx_session

    session = onnx_session(path, device)
    name = session.get_inputs()[0].name

    def run_onnx(x: torch.Tensor) -> torch.Tensor:
        return torch.from_numpy(np.asarray(session.run(None, {name: x.detach().cpu().numpy()})[0]))
    return run_onnx


def export_network(net: nn.Module, input_shape: tuple[int, ...], path: str | os.PathLike[str], fmt: str, *,
                   check_batch: int = 8, seed: int = 0, calibration: torch.Tensor | None = None) -> ExportCheck:
    """Export ``net`` (one sample of shape ``input_shape``) to ``path`` as ``fmt`` and check it.

    ``onnx-int8`` needs ``calibration``: the images (a batch of them) the activations' ranges are
    calibrated on; its first ``check_batch`` images are then the checked batch."""
    _check_format(fmt)
    if fmt == "onnx-int8" and (calibration is None or len(calibration) == 0):
        raise HwAwareError("the onnx-int8 export needs calibration images (a few hundred training images)")
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    net = copy.deepcopy(net).eval().cpu()  # the caller's module stays where and as it was
    generator = torch.Generator().manual_seed(seed)
    batch = torch.randn((max(2, check_batch), *input_shape), generator=generator)
    if fmt == "onnx-int8":
        batch = calibration[: max(2, check_batch)].float().cpu()
    with torch.inference_mode():
        expected = net(batch)
    tmp = Path(tempfile.mkdtemp(prefix=f".{path.name}.", dir=path.parent))
    try:
        written = tmp / path.name
        exporter = _export(net, batch[:2], written, fmt, calibration)
        try:
            got = load_exported(written, fmt)(batch)
        except Exception as err:  # the runtime's own errors (ONNX Runtime, TorchScript): one line
            raise HwAwareError(f"the {fmt} export of {type(net).__name__} does not run on a batch of {len(batch)} "
                               f"({one_line(err)})") from None
        if got.shape != expected.shape:
            raise HwAwareError(f"the {fmt} export gives outputs of shape {tuple(got.shape)}, PyTorch "
                               f"{tuple(expected.shape)}")
        diff = (got - expected).abs()
        if fmt == "onnx-int8":  # int8 differs in the digits; what it must keep is the answer
            matches = bool((got.argmax(dim=-1) == expected.argmax(dim=-1)).float().mean() >= INT8_AGREEMENT)
        else:
            matches = bool((diff <= ATOL + RTOL * expected.abs()).all())
        # side files (external weights) first, the model last: it never appears without them
        for part in sorted(tmp.iterdir(), key=lambda p: p.name == path.name):
            os.replace(part, path.parent / part.name)
    finally:
        with contextlib.suppress(OSError):
            shutil.rmtree(tmp)
    return ExportCheck(format=fmt, path=str(path), max_abs_diff=float(diff.max()), matches=matches,
                       batch=len(batch), exporter=exporter)


def _export(net: nn.Module, example: torch.Tensor, path: Path, fmt: str, calibration: torch.Tensor | None) -> str:
    if fmt == "torchscript":
        return _export_torchscript(net, example, path)
    if fmt == "onnx":
        return _export_onnx(net, example, path)
    fp32 = path.with_name(".fp32." + path.name.replace(".xml", ".onnx"))
    try:
        exporter = _export_onnx(net, example, fp32)
        if fmt == "onnx-int8":
            from nni_hwaware.profiling.int8 import quantize_onnx

            assert calibration is not None
            quantize_onnx(fp32, path, [calibration[i:i + 32].float().cpu().numpy()
                                       for i in range(0, len(calibration), 32)])
        else:  # openvino: OpenVINO's own model of the ONNX export
            _save_openvino(fp32, path)
    finally:
        for part in fp32.parent.glob(fp32.name + "*"):
            part.unlink()
    return exporter


def _save_openvino(onnx_path: Path, path: Path) -> None:
    from nni_hwaware.profiling.openvino_runtime import import_openvino

    ov = import_openvino()
    try:
        ov.save_model(ov.convert_model(str(onnx_path)), str(path), compress_to_fp16=False)
    except Exception as err:
        raise HwAwareError(f"OpenVINO could not convert the ONNX export ({one_line(err)})") from None


def _export_onnx(net: nn.Module, example: torch.Tensor, path: Path) -> str:
    from nni_hwaware.profiling.backends import export_onnx

    return export_onnx(net, example, path, dynamic_batch=True)


def _export_torchscript(net: nn.Module, example: torch.Tensor, path: Path) -> str:
    try:
        with warnings.catch_warnings(), torch.no_grad():
            warnings.simplefilter("ignore")
            traced = torch.jit.trace(net, example, check_trace=False)
            torch.jit.save(traced, str(path))
    except Exception as err:
        raise HwAwareError(f"could not trace {type(net).__name__} to TorchScript ({one_line(err)}); "
                           "export it to ONNX instead (--format onnx)") from None
    return "trace"
