"""Measure one ``nn.Module`` on one chip: latency, FLOPs, parameters, memory.

The building blocks of the per-chip cost tables:

* :func:`measure_modules` / :func:`measure_module` -- everything at once, as
  :class:`ModuleCost` objects, the latencies timed by the one measuring engine;
* :func:`time_in_rounds` -- that engine: every item timed once per round in a
  shuffled order, 10th percentiles over rounds with 95 % intervals, a probe's drift;
* :func:`split_outliers` (the median +- 3 * 1.4826 * MAD rule);
* :func:`count_flops` (2 x MACs), :func:`count_params`,
  :func:`param_bytes`, :func:`peak_activation_bytes`;
* :func:`detect_chip`, :func:`measure_peak_flops`, :func:`fixed_threads`;
* the backend registry (:func:`get_backend`, :func:`register_backend`),
  with ``"torch"``, ``"onnxruntime"``, ``"onnxruntime-int8"`` and ``"openvino"`` built in.

Importing this package imports torch but neither onnxruntime nor OpenVINO, and never
initialises CUDA.
"""

from __future__ import annotations

from nni_hwaware.profiling._checks import ONNX_INSTALL_HINT
from nni_hwaware.profiling.backends import (
    ONNX_OPSET,
    Backend,
    OnnxRuntimeBackend,
    Runner,
    TorchBackend,
    available_backends,
    export_onnx,
    get_backend,
    register_backend,
)
from nni_hwaware.profiling.chips import (
    ChipInfo,
    cache_mb,
    detect_chip,
    fixed_threads,
    measure_peak_flops,
)
from nni_hwaware.profiling.flops import count_flops, count_params
from nni_hwaware.profiling.int8 import OnnxRuntimeInt8Backend, quantize_onnx
from nni_hwaware.profiling.interleaved import interleaved_latency
from nni_hwaware.profiling.measure import BYTES_PER_MB, ModuleCost, measure_module, measure_modules
from nni_hwaware.profiling.memory import param_bytes, peak_activation_bytes
from nni_hwaware.profiling.openvino_runtime import OpenVinoBackend
from nni_hwaware.profiling.rounds import (
    ItemTiming,
    RoundsTiming,
    median_interval,
    quantile_interval,
    time_in_rounds,
)
from nni_hwaware.profiling.timing import split_outliers

__all__ = [
    "BYTES_PER_MB",
    "ONNX_INSTALL_HINT",
    "ONNX_OPSET",
    "Backend",
    "ChipInfo",
    "ItemTiming",
    "ModuleCost",
    "OnnxRuntimeBackend",
    "OnnxRuntimeInt8Backend",
    "OpenVinoBackend",
    "RoundsTiming",
    "Runner",
    "TorchBackend",
    "available_backends",
    "cache_mb",
    "count_flops",
    "count_params",
    "detect_chip",
    "export_onnx",
    "fixed_threads",
    "get_backend",
    "interleaved_latency",
    "measure_module",
    "measure_modules",
    "measure_peak_flops",
    "median_interval",
    "param_bytes",
    "peak_activation_bytes",
    "quantile_interval",
    "quantize_onnx",
    "register_backend",
    "split_outliers",
    "time_in_rounds",
]
