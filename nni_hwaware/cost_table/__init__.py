"""Hardware cost tables: validated per-chip rows of measured costs (profiled by :mod:`nni_hwaware.cost_model`)."""

from __future__ import annotations

from nni_hwaware.cost_table.predict import METRICS, ArchCost, CostModel
from nni_hwaware.cost_table.profile import ProfileEntry, profile_entries
from nni_hwaware.cost_table.table import COLUMNS, BlockKey, CostTable

__all__ = [
    "COLUMNS",
    "METRICS",
    "ArchCost",
    "BlockKey",
    "CostModel",
    "CostTable",
    "ProfileEntry",
    "profile_entries",
]
