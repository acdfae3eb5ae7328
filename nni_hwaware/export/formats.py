"""A trained network exported to the formats chips run, each export checked against PyTorch.

* ``onnx``: ``network.onnx`` (opset :data:`~nni_hwaware.profiling.backends.ONNX_OPSET`, one
  input ``input`` and one output ``output``, a free batch axis) for ONNX Runtime, TensorRT
  and vendor compilers; needs the ``onnx`` extra (``pip install 'nni-hwaware[onnx]'``).
* ``torchscript``: ``network.torchscript.pt`` (``torch.jit.trace``), for LibTorch and
  PyTorch Mobile; ``torch.jit.load`` reads it without this package.

Each export is run on a seeded batch and compared with the PyTorch network's outputs
(:data:`ATOL` + :data:`RTOL` x |output|): :class:`ExportCheck` says how far apart they are.
A file appears only once it is complete (written in a temporary directory, then moved).
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

__all__ = ["ATOL", "FORMATS", "RTOL", "ExportCheck", "export_network", "file_name", "load_exported"]

#: Export formats, in the order a search writes them.
FORMATS = ("onnx", "torchscript")
#: An export agrees with PyTorch when ``|exported - torch| <= ATOL + RTOL * |torch|`` everywhere
#: (float32 kernels of two runtimes differ by about 1e-6 on these networks).
ATOL = 1e-4
RTOL = 1e-3
_FILES = {"onnx": "network.onnx", "torchscript": "network.torchscript.pt"}


def file_name(fmt: str) -> str:
    """The file a format is written to (``network.onnx``, ``network.torchscript.pt``)."""
    _check_format(fmt)
    return _FILES[fmt]


def _check_format(fmt: str) -> None:
    if fmt not in FORMATS:
        raise HwAwareError(f"unknown export format {fmt!r}; use one of: {', '.join(FORMATS)}")


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
    from nni_hwaware.profiling.backends import onnx_session

    session = onnx_session(path, device)
    name = session.get_inputs()[0].name

    def run_onnx(x: torch.Tensor) -> torch.Tensor:
        return torch.from_numpy(np.asarray(session.run(None, {name: x.detach().cpu().numpy()})[0]))
    return run_onnx


def export_network(net: nn.Module, input_shape: tuple[int, ...], path: str | os.PathLike[str], fmt: str, *,
                   check_batch: int = 8, seed: int = 0) -> ExportCheck:
    """Export ``net`` (one sample of shape ``input_shape``) to ``path`` as ``fmt`` and check it."""
    _check_format(fmt)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    net = copy.deepcopy(net).eval().cpu()  # the caller's module stays where and as it was
    generator = torch.Generator().manual_seed(seed)
    batch = torch.randn((max(2, check_batch), *input_shape), generator=generator)
    with torch.inference_mode():
        expected = net(batch)
    tmp = Path(tempfile.mkdtemp(prefix=f".{path.name}.", dir=path.parent))
    try:
        written = tmp / path.name
        exporter = _export_onnx(net, batch[:2], written) if fmt == "onnx" else _export_torchscript(net, batch[:2], written)
        try:
            got = load_exported(written, fmt)(batch)
        except Exception as err:  # the runtime's own errors (ONNX Runtime, TorchScript): one line
            raise HwAwareError(f"the {fmt} export of {type(net).__name__} does not run on a batch of {len(batch)} "
                               f"({one_line(err)})") from None
        if got.shape != expected.shape:
            raise HwAwareError(f"the {fmt} export gives outputs of shape {tuple(got.shape)}, PyTorch "
                               f"{tuple(expected.shape)}")
        diff = (got - expected).abs()
        matches = bool((diff <= ATOL + RTOL * expected.abs()).all())
        # side files (external weights) first, the model last: it never appears without them
        for part in sorted(tmp.iterdir(), key=lambda p: p.name == path.name):
            os.replace(part, path.parent / part.name)
    finally:
        with contextlib.suppress(OSError):
            shutil.rmtree(tmp)
    return ExportCheck(format=fmt, path=str(path), max_abs_diff=float(diff.max()), matches=matches,
                       batch=len(batch), exporter=exporter)


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
