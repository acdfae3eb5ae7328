"""The cost model of any NNI model space: costs as small factors over the space's labels.

* :func:`find_leaves` breaks a space into the leaves a cost table measures;
* :func:`profile_model_space` measures each distinct leaf once on this chip;
* :func:`space_cost_model` builds a :class:`SpaceCostModel` from the table;
* :class:`BlockCostModel` predicts a network from a table of the project's block rows;
* :func:`choice_cost_model` builds one from a plain table of per-choice costs
  (a tabular benchmark, nn-Meter, a vendor's profiler).
"""

from __future__ import annotations

from nni_hwaware.cost_model.block_table import METRICS, ArchCost, BlockCostModel
from nni_hwaware.cost_model.blocks import as_space_model, block_cost_model
from nni_hwaware.cost_model.choice_table import choice_cost_model, load_choice_table
from nni_hwaware.cost_model.for_space import (
    is_choice_table,
    load_or_profile,
    load_space_model,
    profile_space,
    space_model,
)
from nni_hwaware.cost_model.leaves import (
    LeafEntry,
    LeafTerm,
    SpaceLeaves,
    find_leaves,
)
from nni_hwaware.cost_model.model import ADDITIVE, CostFactor, SpaceCostModel
from nni_hwaware.cost_model.profile import (
    measure_samples,
    profile_model_space,
    random_samples,
    space_cost_model,
)

__all__ = [
    "ADDITIVE",
    "METRICS",
    "ArchCost",
    "BlockCostModel",
    "CostFactor",
    "LeafEntry",
    "LeafTerm",
    "SpaceCostModel",
    "SpaceLeaves",
    "as_space_model",
    "block_cost_model",
    "choice_cost_model",
    "find_leaves",
    "is_choice_table",
    "load_choice_table",
    "load_or_profile",
    "load_space_model",
    "measure_samples",
    "profile_model_space",
    "profile_space",
    "random_samples",
    "space_cost_model",
    "space_model",
]
