"""The cost model of a ResNet-skeleton space's block table, as factors over its layer labels."""

from __future__ import annotations

from typing import Any

from nni_hwaware.cost_model.block_table import BlockCostModel
from nni_hwaware.cost_model.model import CostFactor, SpaceCostModel

__all__ = ["as_space_model", "block_cost_model"]


def block_cost_model(model: BlockCostModel) -> SpaceCostModel:
    """The same costs as ``model`` (one factor per layer label), as a :class:`SpaceCostModel`."""
    factors = []
    for i, (label, names) in enumerate(zip(model.labels, model.candidates, strict=True)):
        costs = {m: model.layer_costs[m][i, : len(names)]
                 for m in ("latency_ms", "param_mb", "activation_mb", "flops", "params")}
        factors.append(CostFactor((label,), costs))
    fixed = {m: model.fixed_costs[m] for m in ("latency_ms", "param_mb", "flops", "params")}
    fixed["activation_mb"] = model.fixed_activation_mb
    fixed["activation_sum_mb"] = model.fixed_costs["activation_mb"]
    return SpaceCostModel(dict(zip(model.labels, model.candidates, strict=True)), factors, fixed,
                          chip=model.chip, backend=model.backend, batch_size=model.batch_size,
                          name=model.config.name, peak_flops=float(model.fixed["peak_flops"].iloc[0]),
                          threads=model.threads)


def as_space_model(model: SpaceCostModel | BlockCostModel, reference: Any = None) -> tuple[SpaceCostModel, dict[str, Any]]:
    """``model`` as a :class:`SpaceCostModel` and its reference network as a sample.

    ``reference`` is a sample, ``"largest"`` or a value every label takes; by default a
    ResNet-skeleton :class:`BlockCostModel`'s baseline, else ``"largest"``.
    """
    if isinstance(model, BlockCostModel):
        reference = model.config.baseline() if reference is None else reference
        model = block_cost_model(model)
    return model, model.reference("largest" if reference is None else reference)
