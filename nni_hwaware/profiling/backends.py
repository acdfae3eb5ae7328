"""Inference backends: how one forward of a module is run when it is timed.

A backend turns ``(module, example input, device)`` into a :class:`Runner`, a
zero-argument callable that runs one forward on that fixed input, plus the
``sync`` function to call before reading the clock and a ``providers`` string
naming what executed it.  The measuring engine
(:func:`~nni_hwaware.profiling.rounds.time_in_rounds`) only ever sees the
runner, so all backends are timed identically.

Backends live in a name -> class registry; add one with::

    @register_backend("tensorrt")
    class TensorRTBackend(Backend):
        def prepare(self, module, example, device): ...

Built in:

* ``"torch"`` (default) -- eager PyTorch, ``module.eval()`` on ``device``,
  each call under :func:`torch.inference_mode`.
* ``"onnxruntime"`` -- the module exported to ONNX (opset
  :data:`ONNX_OPSET`) and run by an ``onnxruntime.InferenceSession``; needs
  ``pip install 'nni-hwaware[onnx]'``.
* ``"onnxruntime-int8"`` -- the same export quantized statically to int8
  (:mod:`nni_hwaware.profiling.int8`).
* ``"openvino"`` -- the same export compiled by OpenVINO for its CPU plugin
  (:mod:`nni_hwaware.profiling.openvino_runtime`); needs
  ``pip install 'nni-hwaware[openvino]'``.
"""

from __future__ import annotations

import tempfile
import warnings
from abc import ABC, abstractmethod
from collections.abc import Callable
from pathlib import Path
from typing import Any, ClassVar, Protocol, TypeVar, runtime_checkable

import torch
from torch import nn

from nni_hwaware.errors import HwAwareError, one_line
from nni_hwaware.profiling._checks import ONNX_INSTALL_HINT, check_module, parse_device

__all__ = [
    "ONNX_OPSET",
    "Backend",
    "OnnxRunner",
    "OnnxRuntimeBackend",
    "Runner",
    "TorchBackend",
    "available_backends",
    "export_onnx",
    "get_backend",
    "onnx_session",
    "register_backend",
]

#: ONNX opset used for every export.  18 is the lowest opset the
#: torch.export-based exporter emits natively, is supported by the legacy
#: TorchScript exporter too, and is run by onnxruntime >= 1.14; fixing it
#: keeps exported graphs (and hence latencies) stable across torch versions.
ONNX_OPSET = 18


@runtime_checkable
class Runner(Protocol):
    """One prepared forward: ``runner()`` runs it on the fixed example input."""

    #: Called before each clock read (e.g. ``torch.cuda.synchronize``); ``None`` if calls are synchronous.
    sync: Callable[[], None] | None
    #: Execution providers joined by ``"+"`` (ONNX Runtime); ``""`` for eager torch.
    providers: str

    def __call__(self) -> object: ...


class Backend(ABC):
    """Turns a module into a :class:`Runner`; subclasses register with :func:`register_backend`."""

    #: Registry name, set by :func:`register_backend`.
    name: ClassVar[str] = ""
    #: Whether every prepared module runs as a session of its own, whose per-call cost (binding the
    #: input, allocating the output, a graph's entry and exit) a whole network pays once, not once per
    #: leaf: a table subtracts it from each leaf (see :mod:`nni_hwaware.cost_model.profile`).
    session_per_call: ClassVar[bool] = False

    @abstractmethod
    def prepare(self, module: nn.Module, example: torch.Tensor, device: str) -> Runner:
        """Prepare ``module`` to run on ``example`` (batch included) on ``device``.

        May put ``module`` in eval mode and move it to ``device`` in place.
        Raises :class:`~nni_hwaware.errors.HwAwareError` if the backend cannot
        run there (missing package, no such execution provider).
        """


_BACKENDS: dict[str, type[Backend]] = {}

_B = TypeVar("_B", bound=type[Backend])


def register_backend(name: str) -> Callable[[_B], _B]:
    """Class decorator: register a :class:`Backend` subclass under ``name``.

    Registering a different class under a taken name is an error;
    re-registering the same class (same module and qualified name, e.g. after
    a module reload) replaces it.
    """
    if not isinstance(name, str) or not name:
        raise HwAwareError(f"backend name must be a non-empty string, got {name!r}")

    def decorate(cls: _B) -> _B:
        if not (isinstance(cls, type) and issubclass(cls, Backend)):
            raise HwAwareError(
                f"@register_backend({name!r}) must decorate a Backend subclass, got {cls!r}"
            )
        old = _BACKENDS.get(name)
        if old is not None and (old.__module__, old.__qualname__) != (
            cls.__module__,
            cls.__qualname__,
        ):
            raise HwAwareError(
                f"backend name {name!r} is already used by {old.__module__}.{old.__qualname__}; pick another name"
            )
        cls.name = name
        _BACKENDS[name] = cls
        return cls

    return decorate


def available_backends() -> list[str]:
    """Names of the registered backends, sorted (registered, not necessarily installed)."""
    return sorted(_BACKENDS)


def get_backend(name: str) -> Backend:
    """A new instance of the backend registered as ``name``."""
    cls = _BACKENDS.get(name) if isinstance(name, str) else None
    if cls is None:
        raise HwAwareError(
            f"unknown backend {name!r}; choose one of: {', '.join(available_backends())}"
        )
    return cls()


def _cuda_sync(dev: torch.device) -> Callable[[], None] | None:
    if dev.type != "cuda":
        return None

    def sync() -> None:
        torch.cuda.synchronize(dev)

    return sync


# --------------------------------------------------------------------------- torch


class _TorchRunner:
    def __init__(self, module: nn.Module, example: torch.Tensor, dev: torch.device) -> None:
        self.module = module
        self.example = example
        self.sync = _cuda_sync(dev)
        self.providers = ""

    def __call__(self) -> object:
        with torch.inference_mode():
            return self.module(self.example)


@register_backend("torch")
class TorchBackend(Backend):
    """Eager PyTorch: ``module.eval().to(device)``, each call under :func:`torch.inference_mode`."""

    def prepare(self, module: nn.Module, example: torch.Tensor, device: str) -> Runner:
        check_module(module)
        dev = parse_device(device)
        module.eval().to(dev)
        return _TorchRunner(module, example.to(dev), dev)


# --------------------------------------------------------------------------- ONNX Runtime


def _import_onnxruntime() -> Any:
    try:
        import onnxruntime
    except ImportError as exc:
        raise HwAwareError(f"backend 'onnxruntime' needs onnxruntime: {ONNX_INSTALL_HINT}") from exc
    return onnxruntime


def export_onnx(
    module: nn.Module, example: torch.Tensor, path: str | Path, *, opset: int = ONNX_OPSET,
    dynamic_batch: bool = False,
) -> str:
    """Export ``module`` (in eval mode) to ``path`` with one input ``"input"`` and one output ``"output"``.

    Returns which exporter succeeded: ``"torchscript"`` or ``"dynamo"``.

    On torch 2.14 both exporters exist.  The legacy TorchScript exporter
    (``torch.onnx.export(..., dynamo=False)``) is tried first: it traces the
    module in well under a second, needs only the ``onnx`` package, and
    handles the convolutional search spaces here; its deprecation warnings
    are silenced.  If it fails (it is slated for removal, and some modules
    do not trace), the ``torch.export``-based exporter
    (``dynamo=True``, which needs ``onnxscript >= 0.6``: torch 2.14 imports
    ``onnxscript._framework_apis.torch_2_11``) is tried; it takes about a
    second per module and writes weights to a side ``.data`` file next to
    ``path``.  Both use the fixed ``opset`` and static shapes (the batch
    size is baked in, which lets ONNX Runtime specialise kernels), unless
    ``dynamic_batch``: then the first dimension of input and output is a free
    ``batch`` axis (a deployed model; timing keeps static shapes).
    """
    path = str(path)
    common: dict[str, Any] = {
        "input_names": ["input"],
        "output_names": ["output"],
        "opset_version": opset,
    }
    legacy: dict[str, Any] = {}
    dynamo: dict[str, Any] = {}
    if dynamic_batch:
        legacy["dynamic_axes"] = {"input": {0: "batch"}, "output": {0: "batch"}}
        # one self-contained file for a deployed model (no side file of external weights)
        dynamo.update(dynamic_shapes=({0: torch.export.Dim("batch")},), external_data=False)
    module.eval()
    try:
        with warnings.catch_warnings(), torch.no_grad():
            warnings.simplefilter("ignore")
            torch.onnx.export(module, (example,), path, dynamo=False, **common, **legacy)
        return "torchscript"
    except Exception as legacy_error:  # any trace/export failure: try the other exporter
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                torch.onnx.export(module, (example,), path, dynamo=True, verbose=False, **common, **dynamo)
        except ImportError as exc:
            raise HwAwareError(
                f"ONNX export needs onnx and onnxscript>=0.6: {ONNX_INSTALL_HINT}"
            ) from exc
        except Exception as exc:
            raise HwAwareError(
                f"could not export {type(module).__name__} to ONNX (legacy exporter: "
                f"{one_line(legacy_error)}; dynamo exporter: {one_line(exc)}); use backend='torch'"
            ) from exc
        return "dynamo"


class OnnxRunner:
    """Runs an ``InferenceSession`` on a fixed input.

    CPU: the input is a NumPy array and ``session.run`` returns NumPy.
    CUDA: input and output are bound to device memory with an IO binding
    (the input tensor's CUDA pointer), so host<->device copies are not timed,
    matching the eager backend whose input already lives on the GPU.
    """

    def __init__(
        self,
        session: Any,
        example: torch.Tensor,
        dev: torch.device,
        tmpdir: tempfile.TemporaryDirectory[str],
        exporter: str,
    ) -> None:
        self.session = session
        self.exporter = exporter
        self.providers = "+".join(session.get_providers())
        self.sync = _cuda_sync(dev)
        # The model file (and any external weights) stays on disk as long as the session may use it.
        self._tmpdir = tmpdir
        self._input_name = session.get_inputs()[0].name
        self._dev = dev
        if dev.type == "cuda":
            self._example = example.detach().to(dev).contiguous()
            self._binding = session.io_binding()
            self._binding.bind_input(
                name=self._input_name,
                device_type="cuda",
                device_id=dev.index or 0,
                element_type=_numpy_dtype(self._example.dtype),
                shape=tuple(self._example.shape),
                buffer_ptr=self._example.data_ptr(),
            )
            self._binding.bind_output(session.get_outputs()[0].name, "cuda", dev.index or 0)
            self._feed = None
        else:
            self._feed = {self._input_name: example.detach().cpu().contiguous().numpy()}

    def __call__(self) -> object:
        if self._feed is None:
            self.session.run_with_iobinding(self._binding)
            return None
        return self.session.run(None, self._feed)


def _numpy_dtype(dtype: torch.dtype) -> Any:
    import numpy as np

    mapping = {
        torch.float32: np.float32,
        torch.float16: np.float16,
        torch.float64: np.float64,
        torch.int64: np.int64,
        torch.int32: np.int32,
    }
    if dtype not in mapping:
        raise HwAwareError(
            f"backend 'onnxruntime' cannot bind a {dtype} input; use float32, float16 or float64"
        )
    return mapping[dtype]


@register_backend("onnxruntime")
class OnnxRuntimeBackend(Backend):
    """ONNX Runtime: export with :func:`export_onnx`, run with an ``InferenceSession``.

    Providers: ``CPUExecutionProvider`` alone for ``device="cpu"``;
    ``CUDAExecutionProvider`` (then CPU for unsupported nodes) for a CUDA
    device, which needs the ``onnxruntime-gpu`` build.  The session uses
    ``intra_op_num_threads = torch.get_num_threads()`` (so
    :func:`~nni_hwaware.profiling.chips.fixed_threads` applies to both
    backends), one inter-op thread, sequential execution and all graph
    optimisations.
    """

    session_per_call = True

    def prepare(self, module: nn.Module, example: torch.Tensor, device: str) -> Runner:
        _import_onnxruntime()
        check_module(module)
        dev = parse_device(device)
        module.eval().to(dev)
        example = example.to(dev)
        tmpdir = tempfile.TemporaryDirectory(prefix="nni_hwaware_onnx_")
        try:
            path = Path(tmpdir.name) / "model.onnx"
            exporter = export_onnx(module, example, path)
            session = onnx_session(path, device)
        except BaseException:
            tmpdir.cleanup()
            raise
        return OnnxRunner(session, example, dev, tmpdir, exporter)


def onnx_session(path: str | Path, device: str = "cpu") -> Any:
    """An ``onnxruntime.InferenceSession`` of the model at ``path``, set up as the backend times it.

    Providers: ``CPUExecutionProvider`` alone for ``device="cpu"``; ``CUDAExecutionProvider``
    (then CPU) for a CUDA device. ``intra_op_num_threads = torch.get_num_threads()``, one
    inter-op thread, sequential execution, all graph optimisations.
    """
    ort = _import_onnxruntime()
    dev = parse_device(device)
    if dev.type == "cuda":
        if "CUDAExecutionProvider" not in ort.get_available_providers():
            raise HwAwareError(
                "onnxruntime has no CUDAExecutionProvider; install onnxruntime-gpu or use device='cpu'"
            )
        providers: list[Any] = [("CUDAExecutionProvider", {"device_id": dev.index or 0}), "CPUExecutionProvider"]
    else:
        providers = ["CPUExecutionProvider"]
    options = ort.SessionOptions()
    options.intra_op_num_threads = torch.get_num_threads()
    options.inter_op_num_threads = 1
    options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    options.log_severity_level = 3  # errors only
    return ort.InferenceSession(str(path), sess_options=options, providers=providers)
