"""The cost model of a ResNet-skeleton space's block table, as factors over its layer labels."""

from __future__ import annotations

from nni_hwaware.cost_model.model import CostFactor, SpaceCostModel
from nni_hwaware.cost_table.predict import CostModel

__all__ = ["block_cost_model"]


def block_cost_model(model: CostModel) -> SpaceCostModel:
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
