"""Static int8 quantization with ONNX Runtime's own tools, and the ``onnxruntime-int8`` backend.

:func:`quantize_onnx` quantizes an fp32 ONNX model statically (``onnxruntime.quantization``):
QDQ format, signed int8 weights per output channel, int8 activations whose ranges are
calibrated (min-max) on the inputs it is given. The same inputs give the same model, so a
calibration drawn from a seed (:func:`seeded_calibration`, or a few hundred training images
drawn by seed for a trained network: :func:`nni_hwaware.export.deliverables.calibration_images`)
is deterministic.

The ``onnxruntime-int8`` backend times a module as it is deployed in int8: exported to ONNX
(:func:`~nni_hwaware.profiling.backends.export_onnx`), quantized on :data:`LEAF_CALIBRATION`
seeded batches shaped like its input (a cost table's leaf has no images; its latency does
not depend on the values it sees), and run by an ONNX Runtime session set up as the fp32
backend's (:func:`~nni_hwaware.profiling.backends.onnx_session`). CPU only: ONNX Runtime runs
QDQ models on the GPU through TensorRT, which this backend does not set up.
"""

from __future__ import annotations

import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from nni_hwaware.errors import HwAwareError, one_line
from nni_hwaware.profiling._checks import ONNX_INSTALL_HINT, check_module, device_type, parse_device
from nni_hwaware.profiling.backends import (
    Backend,
    OnnxRunner,
    Runner,
    export_onnx,
    onnx_session,
    register_backend,
)

__all__ = ["LEAF_CALIBRATION", "OnnxRuntimeInt8Backend", "quantize_onnx", "seeded_calibration"]

#: Seeded batches a leaf (or any module timed by the backend) is calibrated on.
LEAF_CALIBRATION = 8


def _quantization() -> Any:
    try:
        from onnxruntime import quantization
    except ImportError as exc:
        raise HwAwareError(f"backend 'onnxruntime-int8' needs onnxruntime: {ONNX_INSTALL_HINT}") from exc
    return quantization


def seeded_calibration(shape: Sequence[int], batches: int = LEAF_CALIBRATION, *, seed: int = 0) -> list[np.ndarray]:
    """``batches`` standard-normal float32 arrays of ``shape`` (batch included), drawn from ``seed``."""
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(tuple(shape)).astype(np.float32) for _ in range(batches)]


class _Reader:
    """``onnxruntime.quantization.CalibrationDataReader``: one feed per calibration array."""

    def __init__(self, name: str, arrays: Sequence[np.ndarray]) -> None:
        self._feeds = iter([{name: np.ascontiguousarray(a, dtype=np.float32)} for a in arrays])

    def get_next(self) -> dict[str, np.ndarray] | None:
        return next(self._feeds, None)

    def rewind(self) -> None:  # quantize_static reads the inputs once
        pass


def quantize_onnx(source: str | Path, target: str | Path, calibration: Sequence[np.ndarray]) -> Path:
    """Write ``source`` (an fp32 ONNX model with one input) quantized to int8 at ``target``.

    Static quantization in QDQ format: int8 weights per output channel, int8 activations with
    ranges from min-max calibration on ``calibration`` (arrays fed to the model's input, each
    with its batch dimension). Raises :class:`~nni_hwaware.errors.HwAwareError` in one line when
    there is no calibration data or ONNX Runtime cannot quantize the model.
    """
    q = _quantization()
    if not calibration:
        raise HwAwareError("int8 quantization needs calibration inputs; give at least one batch")
    source, target = Path(source), Path(target)
    import onnx

    name = onnx.load(str(source), load_external_data=False).graph.input[0].name
    # the quantizer's own sessions warn of every initializer its graph leaves unused: errors only
    import onnxruntime

    onnxruntime.set_default_logger_severity(3)
    with tempfile.TemporaryDirectory(prefix="nni_hwaware_int8_") as tmp:
        model = source
        try:  # shape inference and graph clean-up ONNX Runtime recommends before quantizing
            prepared = Path(tmp) / "prepared.onnx"
            q.quant_pre_process(str(source), str(prepared), skip_symbolic_shape=True)
            model = prepared
        except Exception:  # a graph the pre-processing cannot handle is quantized as it is
            model = source
        try:
            q.quantize_static(str(model), str(target), _Reader(name, calibration),
                              quant_format=q.QuantFormat.QDQ, per_channel=True,
                              activation_type=q.QuantType.QInt8, weight_type=q.QuantType.QInt8,
                              calibrate_method=q.CalibrationMethod.MinMax,
                              extra_options={"ActivationSymmetric": False, "WeightSymmetric": True})
        except Exception as err:
            raise HwAwareError(f"ONNX Runtime could not quantize {source.name} to int8 ({one_line(err)}); "
                               "use backend 'onnxruntime'") from None
    return target


@register_backend("onnxruntime-int8")
class OnnxRuntimeInt8Backend(Backend):
    """The module exported to ONNX, quantized to int8 (:func:`quantize_onnx`, calibrated on
    :data:`LEAF_CALIBRATION` batches drawn from ``calibration_seed``), run by ONNX Runtime on the CPU."""

    session_per_call = True

    #: The seed the calibration inputs are drawn from.
    calibration_seed: int = 0

    def prepare(self, module: nn.Module, example: torch.Tensor, device: str) -> Runner:
        _quantization()
        check_module(module)
        if device_type(device) != "cpu":
            raise HwAwareError(f"backend 'onnxruntime-int8' runs on the CPU only, not {device!r}; "
                               "use device 'cpu' or backend 'onnxruntime'")
        dev = parse_device(device)
        module.eval()
        example = example.detach().cpu()
        tmpdir = tempfile.TemporaryDirectory(prefix="nni_hwaware_int8_")
        try:
            fp32, int8 = Path(tmpdir.name) / "model.onnx", Path(tmpdir.name) / "model.int8.onnx"
            exporter = export_onnx(module, example, fp32)
            quantize_onnx(fp32, int8, seeded_calibration(example.shape, seed=self.calibration_seed))
            session = onnx_session(int8, device)
        except BaseException:
            tmpdir.cleanup()
            raise
        return OnnxRunner(session, example, dev, tmpdir, exporter)
