"""Hardware cost tables: profile a space's blocks on each chip, predict any architecture's cost."""

from __future__ import annotations

from nni_hwaware.cost_table.fidelity import FidelityReport, random_architectures, validate
from nni_hwaware.cost_table.predict import METRICS, ArchCost, CostModel
from nni_hwaware.cost_table.profile import ProfileEntry, profile_entries, profile_space
from nni_hwaware.cost_table.table import COLUMNS, BlockKey, CostTable

__all__ = [
    "COLUMNS",
    "METRICS",
    "ArchCost",
    "BlockKey",
    "CostModel",
    "CostTable",
    "FidelityReport",
    "ProfileEntry",
    "profile_entries",
    "profile_space",
    "random_architectures",
    "validate",
]
