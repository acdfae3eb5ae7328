"""What a search hands over: the found network trained, saved and exported to the formats chips run.

* :mod:`~nni_hwaware.export.checkpoint`: ``network.pt``, weights with the architecture,
  the space and the training options, loadable with ``weights_only=True``;
* :mod:`~nni_hwaware.export.formats`: ONNX, TorchScript, int8 ONNX and OpenVINO exports, each
  checked against PyTorch on a batch;
* :mod:`~nni_hwaware.export.deliverables`: those a deployment backend needs written for a trained
  network, evaluated on the test split and timed in that runtime against the baseline;
* :mod:`~nni_hwaware.export.source`: which network to export (a checkpoint, a finished
  search's found network, an architecture JSON), as ``nni-hwaware export`` chooses it.
"""

from nni_hwaware.export.checkpoint import (
    CHECKPOINT_FORMAT,
    Checkpoint,
    load_checkpoint,
    network_from_checkpoint,
    save_checkpoint,
)
from nni_hwaware.export.deliverables import (
    DELIVERABLES_FILE,
    calibration_images,
    deliver,
    exported_accuracy,
    onnx_available,
    output_dir,
    time_exports,
    write_deliverables,
)
from nni_hwaware.export.formats import (
    DEPLOY_FORMATS,
    FORMATS,
    KNOWN_FORMATS,
    ExportCheck,
    export_network,
    file_name,
    formats_for,
    load_exported,
)
from nni_hwaware.export.source import ExportSource, architecture_spec, export_source, search_results

__all__ = [
    "CHECKPOINT_FORMAT",
    "DELIVERABLES_FILE",
    "DEPLOY_FORMATS",
    "FORMATS",
    "KNOWN_FORMATS",
    "Checkpoint",
    "ExportCheck",
    "ExportSource",
    "architecture_spec",
    "calibration_images",
    "deliver",
    "export_network",
    "export_source",
    "exported_accuracy",
    "file_name",
    "formats_for",
    "load_checkpoint",
    "load_exported",
    "network_from_checkpoint",
    "onnx_available",
    "output_dir",
    "save_checkpoint",
    "search_results",
    "time_exports",
    "write_deliverables",
]
