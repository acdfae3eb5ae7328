"""What a search hands over: the found network trained, saved and exported to the formats chips run.

* :mod:`~nni_hwaware.export.checkpoint`: ``network.pt``, weights with the architecture,
  the space and the training options, loadable with ``weights_only=True``;
* :mod:`~nni_hwaware.export.formats`: ONNX and TorchScript exports, each checked against
  PyTorch on a batch;
* :mod:`~nni_hwaware.export.deliverables`: all of them written for a trained network,
  evaluated on the test split and timed with ONNX Runtime against the baseline;
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
    deliver,
    exported_accuracy,
    onnx_available,
    output_dir,
    time_onnx,
    write_deliverables,
)
from nni_hwaware.export.formats import (
    FORMATS,
    ExportCheck,
    export_network,
    file_name,
    load_exported,
)
from nni_hwaware.export.source import ExportSource, architecture_spec, export_source, search_results

__all__ = [
    "CHECKPOINT_FORMAT",
    "DELIVERABLES_FILE",
    "FORMATS",
    "Checkpoint",
    "ExportCheck",
    "ExportSource",
    "architecture_spec",
    "deliver",
    "export_network",
    "export_source",
    "exported_accuracy",
    "file_name",
    "load_checkpoint",
    "load_exported",
    "network_from_checkpoint",
    "onnx_available",
    "output_dir",
    "save_checkpoint",
    "search_results",
    "time_onnx",
    "write_deliverables",
]
