"""Hardware cost tables, the files: validated per-chip rows of measured costs.

What a table predicts of a whole network is :mod:`nni_hwaware.cost_model`'s (which also profiles it).
"""

from __future__ import annotations

from nni_hwaware.cost_table.block_keys import ProfileEntry, profile_entries
from nni_hwaware.cost_table.table import COLUMNS, BlockKey, CostTable

__all__ = [
    "COLUMNS",
    "BlockKey",
    "CostTable",
    "ProfileEntry",
    "profile_entries",
]
