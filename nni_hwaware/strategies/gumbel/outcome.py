"""What one search produced (:class:`SearchOutcome`): what the export check and the pipeline read."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from nni_hwaware.spaces.skeleton import Architecture

__all__ = ["SearchOutcome"]


@dataclass
class SearchOutcome:
    """What one search produced."""

    arch: Architecture
    probabilities: dict[str, dict[str, float]]
    history: list[dict[str, Any]]
    search_seconds: float
    alpha: float
    arch_path: Path
    stage_log: list[dict[str, Any]] = field(default_factory=list)
    #: What the collapse guard found (stage, epoch, training top-1, the line, the restored
    #: architecture); None when the search did not collapse.
    collapse: dict[str, Any] | None = None
    #: The export check of the network kept
    #: (:func:`~nni_hwaware.strategies.gumbel.export_check.measured_export`): its measured ratios to
    #: the baseline, the table's, and the ratios expected before it was measured; None when unchecked.
    export_check: dict[str, Any] | None = None
