"""What a search hands over: the found network trained, saved, exported, checked and timed.

:func:`write_deliverables` writes into one directory (a trial's ``NNI_OUTPUT_DIR`` under
NNI, the run's ``--out`` otherwise):

* ``network.pt``: the trained weights with the architecture, the space and the training
  options (:mod:`nni_hwaware.export.checkpoint`);
* ``network.onnx`` (when ``onnx`` is installed), ``network.torchscript.pt`` and the deployment
  backend's own format (``network.int8.onnx`` for ``onnxruntime-int8``, calibrated on
  :data:`CALIBRATION_IMAGES` training images drawn by the training seed; ``network.openvino.xml``
  for ``openvino``; :mod:`nni_hwaware.export.formats`), each checked against PyTorch on a batch and
  evaluated on the data set's test split: its test accuracy next to PyTorch's;
* ``deliverables.json``: all of the above, the machine and directory they are on, and, when
  the baseline network is given, the latency of the deployment format's export against the
  baseline's export of the same format, in the runtime it ships on, timed in shared rounds
  (:func:`~nni_hwaware.profiling.rounds.time_in_rounds`) on this machine, as a ratio with its
  95 % interval (``timing``).
"""

from __future__ import annotations

import importlib.util
import logging
import os
import socket
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import torch
from torch import nn

from nni_hwaware.errors import HwAwareError, one_line
from nni_hwaware.export.checkpoint import save_checkpoint
from nni_hwaware.export.formats import (
    DEPLOY_FORMATS,
    export_network,
    file_name,
    formats_for,
    load_exported,
)
from nni_hwaware.files import write_json

__all__ = ["CALIBRATION_IMAGES", "DELIVERABLES_FILE", "calibration_images", "deliver", "exported_accuracy",
           "onnx_available", "output_dir", "time_exports", "write_deliverables"]

_logger = logging.getLogger(__name__)

#: The summary a deliverables directory holds.
DELIVERABLES_FILE = "deliverables.json"
#: Seconds of shared timing rounds of the found network's and the baseline's exports.
TIMING_SECONDS = 5.0
#: Training images an int8 export is calibrated on.
CALIBRATION_IMAGES = 256


def onnx_available() -> bool:
    """Whether the ``onnx`` extra is installed (ONNX export and ONNX Runtime)."""
    return all(importlib.util.find_spec(m) is not None for m in ("onnx", "onnxruntime"))


def output_dir(default: str | os.PathLike[str] | None = None) -> Path | None:
    """Where a trial keeps its files: NNI's ``NNI_OUTPUT_DIR`` (every training service sets it), else ``default``."""
    found = os.environ.get("NNI_OUTPUT_DIR")
    if found:
        return Path(found)
    return Path(default) if default is not None else None


def exported_accuracy(run: Any, dataset: str, input_shape: Sequence[int], *, seed: int = 0,
                      data_dir: str | None = None, batch_size: int = 256) -> float:
    """Top-1 accuracy of ``run`` (a callable batch -> logits) on the test split ``seed`` draws."""
    from torch.utils.data import DataLoader

    from nni_hwaware.spaces.data import make_dataset

    data = make_dataset(dataset, "test", seed=seed, data_dir=data_dir, shape=tuple(input_shape))
    correct = total = 0
    for x, y in DataLoader(data, batch_size=batch_size, shuffle=False):
        correct += int((run(x).argmax(dim=1) == y).sum())
        total += len(y)
    return correct / total


def calibration_images(dataset: str, input_shape: Sequence[int], *, count: int = CALIBRATION_IMAGES, seed: int = 0,
                       data_dir: str | None = None) -> torch.Tensor:
    """``count`` images of the data set's training split, drawn by ``seed`` (one batch): what an int8
    export's activation ranges are calibrated on. The same seed draws the same images."""
    from nni_hwaware.spaces.data import make_dataset

    data = make_dataset(dataset, "train", seed=seed, data_dir=data_dir, shape=tuple(input_shape))
    order = torch.randperm(len(data), generator=torch.Generator().manual_seed(seed))[:count]
    return torch.stack([data[int(i)][0] for i in order])


def _runtime(path: str | os.PathLike[str], fmt: str, example: Any) -> Any:
    """A zero-argument callable running the export at ``path`` on ``example`` (NumPy) in its runtime."""
    if fmt == "openvino":
        from nni_hwaware.profiling.openvino_runtime import openvino_model

        request = openvino_model(path).create_infer_request()
        return lambda: request.infer({0: example})
    if fmt == "torchscript":
        run = load_exported(path, fmt)
        tensor = torch.from_numpy(example)
        return lambda: run(tensor)
    from nni_hwaware.profiling.backends import onnx_session

    session = onnx_session(path)
    feed = {session.get_inputs()[0].name: example}
    return lambda: session.run(None, feed)


def time_exports(found: str | os.PathLike[str], baseline: str | os.PathLike[str], input_shape: Sequence[int], *,
                 fmt: str = "onnx", batch_size: int = 1, threads: int | None = 1,
                 seconds: float = TIMING_SECONDS, seed: int = 0) -> dict[str, Any]:
    """Latency of two exports of format ``fmt`` in the runtime they ship on (ONNX Runtime for ``onnx`` and
    ``onnx-int8``, OpenVINO's CPU plugin for ``openvino``, LibTorch for ``torchscript``), timed in shared
    shuffled rounds on this machine: ``{format, found_ms, baseline_ms, latency_ratio, latency_ratio_ci95,
    rounds, batch_size, threads}`` (ratio found / baseline)."""
    import numpy as np

    from nni_hwaware.profiling.chips import fixed_threads
    from nni_hwaware.profiling.rounds import sample_clock, time_in_rounds

    example = np.random.default_rng(seed).standard_normal((batch_size, *input_shape)).astype(np.float32)
    with fixed_threads(threads):
        runners = [_runtime(path, fmt, example) for path in (found, baseline)]
        timing = time_in_rounds(runners, min_rounds=20, max_seconds=seconds, min_sample_ms=2.0, seed=seed,
                                clock=sample_clock("cpu", torch.get_num_threads()), budget_clock=time.perf_counter)
    ratio = timing.ratio(0, 1)
    return {"format": fmt, "found_ms": timing[0].ms, "baseline_ms": timing[1].ms,
            "latency_ratio": ratio["ratio"], "latency_ratio_ci95": ratio["ci95"], "rounds": timing.rounds,
            "batch_size": batch_size, "threads": threads}


def _needs(fmt: str) -> str | None:
    """What is missing to write ``fmt`` (the extra to install), or None."""
    if fmt in ("onnx", "onnx-int8") and not onnx_available():
        return "install the onnx extra (pip install 'nni-hwaware[onnx]')"
    if fmt == "openvino" and (importlib.util.find_spec("openvino") is None or not onnx_available()):
        return "install the openvino and onnx extras (pip install 'nni-hwaware[onnx,openvino]')"
    return None


def write_deliverables(out: str | os.PathLike[str], named: Any, net: nn.Module, arch: Mapping[str, Any], *,
                       space: str, space_args: Mapping[str, Any] | None = None,
                       train: Mapping[str, Any] | None = None, metrics: Mapping[str, Any] | None = None,
                       baseline: nn.Module | None = None, backend: str = "onnxruntime",
                       formats: Sequence[str] | None = None, threads: int | None = 1, seed: int = 0,
                       timing_seconds: float = TIMING_SECONDS) -> dict[str, Any]:
    """Save, export, check and time the trained ``net`` (see the module docstring); returns the summary.

    ``named`` is the resolved space (its ``input_shape`` and ``dataset``); ``space`` the spec
    string it was resolved from, stored so the checkpoint rebuilds it. ``metrics`` holds the
    PyTorch network's ``test_top1``, which each export's test accuracy is compared with.
    ``backend`` is the runtime the network is deployed on: its format is written
    (:func:`~nni_hwaware.export.formats.formats_for`, unless ``formats`` says otherwise) and is the
    one timed against the baseline's export of the same format (``onnx`` for ``torch``). A format
    whose extra is missing is left out, with a note.
    """
    out = Path(out)
    metrics = dict(metrics or {})
    shape = tuple(named.input_shape)
    data_dir = (train or {}).get("data_dir")
    data_seed = int((train or {}).get("seed", 0))
    formats = tuple(formats) if formats is not None else formats_for(backend)
    checkpoint = save_checkpoint(out / "network.pt", space=space, arch=arch, state_dict=net.state_dict(),
                                 input_shape=shape, space_args=space_args, train=train, metrics=metrics)
    summary: dict[str, Any] = {"dir": str(out.resolve()), "host": socket.gethostname(), "backend": backend,
                               "files": {"checkpoint": checkpoint.name}, "exports": {}, "notes": []}
    calibration = None
    if "onnx-int8" in formats:
        calibration = calibration_images(named.dataset, shape, seed=data_seed, data_dir=data_dir)
        summary["calibration"] = {"images": len(calibration), "split": "train", "seed": data_seed}
    torch_top1 = metrics.get("test_top1")
    for fmt in formats:
        if missing := _needs(fmt):
            summary["notes"].append(f"no {fmt} export: {missing}")
            continue
        try:
            check = export_network(net, shape, out / file_name(fmt), fmt, seed=seed, calibration=calibration)
            entry = {**check.to_dict(), "path": file_name(fmt)}
            entry["test_top1"] = exported_accuracy(load_exported(out / file_name(fmt), fmt), named.dataset, shape,
                                                   seed=data_seed, data_dir=data_dir)
        except Exception as err:  # one format failing leaves the others and the checkpoint
            summary["notes"].append(f"no {fmt} export: {err if isinstance(err, HwAwareError) else one_line(err)}")
            continue
        if torch_top1 is not None:
            entry["test_top1_vs_torch"] = entry["test_top1"] - float(torch_top1)
        if not check.matches:
            summary["notes"].append(f"the {fmt} export differs from PyTorch by up to {check.max_abs_diff:.3g}")
        summary["files"][fmt] = file_name(fmt)
        summary["exports"][fmt] = entry
    timed = DEPLOY_FORMATS.get(backend, "onnx") if backend != "torch" else "onnx"
    if baseline is not None and timed in summary["exports"]:
        with tempfile.TemporaryDirectory(prefix="nni_hwaware_baseline_") as tmp:
            base = Path(tmp) / file_name(timed)
            try:
                export_network(baseline, shape, base, timed, seed=seed, calibration=calibration)
                summary["timing"] = time_exports(out / file_name(timed), base, shape, fmt=timed, threads=threads,
                                                 seconds=timing_seconds, seed=seed)
            except HwAwareError as err:
                summary["notes"].append(f"no {timed} timing against the baseline: {err}")
    write_json(out / DELIVERABLES_FILE, summary)
    return summary


def deliver(named: Any, found: Any, baseline: Any = None, *, space: Any, space_args: Mapping[str, Any] | None = None,
            train: Any = None, out: str | os.PathLike[str] | None = None, nni_dir: bool = True,
            threads: int | None = 1, backend: str = "onnxruntime") -> Any:
    """Write a retrained network's deliverables (:func:`write_deliverables`) and return the
    :class:`~nni_hwaware.training.ModelResult` ``found`` with their summary in ``extra["deliverables"]``.

    They go to NNI's trial output directory under NNI (unless ``nni_dir`` is False: a
    directory the user named), to ``out`` otherwise, and nowhere when neither is set. A
    failure to write them is logged and kept in ``extra["deliverables_error"]``: it never
    costs the retrained result. ``found`` (and ``baseline``, for the ONNX Runtime timing) must carry their
    trained weights (``evaluate_architecture(..., keep_weights=True)``); ``space`` is the spec the
    space was named by (a space object is stored by its name, which may not rebuild it).
    """
    import dataclasses

    where = output_dir(out) if nni_dir else (Path(out) if out is not None else None)
    if where is None or found.state_dict is None:
        return found
    net = named.build(found.arch)
    net.load_state_dict(found.state_dict)
    base = None
    if baseline is not None and baseline.state_dict is not None:
        base = named.build(baseline.arch)
        base.load_state_dict(baseline.state_dict)
    options = train.to_dict() if hasattr(train, "to_dict") else dict(train or {})
    metrics = {"test_top1": found.test_top1, "test_top3": found.test_top3, "val_top1": found.val_top1,
               "latency_ms": found.latency_ms, "memory_mb": found.memory_mb}
    try:
        summary = write_deliverables(where, named, net, found.arch, space=space if isinstance(space, str) else named.name,
                                     space_args=space_args, train=options, metrics=metrics, baseline=base,
                                     backend=backend, threads=threads, seed=int(options.get("seed", 0)))
    except (HwAwareError, OSError, RuntimeError) as err:
        message = f"the trained network was not saved in {where}: {one_line(err)}"
        _logger.warning("%s", message)
        return dataclasses.replace(found, extra={**found.extra, "deliverables_error": message})
    return dataclasses.replace(found, extra={**found.extra, "deliverables": summary})
