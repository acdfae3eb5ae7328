"""The supernet layer of the search: NNI's differentiable mixed layer that keeps its masks.

:class:`GumbelMixedLayer` replaces each ``LayerChoice`` of the space (it
subclasses NNI's ``DifferentiableMixedLayer`` and its ``mutate`` hook). In
training, each forward pass draws one Gumbel-softmax mask over the layer's
candidates from the architecture parameters ``alpha`` with its own seeded
generator, uses it, and keeps it as :attr:`GumbelMixedLayer.mask` -- the tensor
the penalty multiplies the costs by, so the penalty has a gradient to ``alpha``:

* soft (``hard=False``): every candidate runs, the output is ``sum_j m_j f_j(x)``
  (with ``min_weight``, weights below it are zeroed and those candidates skipped);
* hard (``hard=True``, straight-through): ``m`` is one-hot in value with the soft
  sample's gradient (``F.gumbel_softmax(hard=True)``), and only the sampled
  candidate runs: ``m_k f_k(x)``. A step costs about one network's forward and
  backward; ``alpha`` still gets the cross-entropy gradient through ``m_k``.

In evaluation mode the layer runs its most probable candidate (``argmax alpha``),
the architecture the search would export now. :meth:`export_probs` is the plain
``softmax(alpha)`` (NNI's Gumbel version draws a new Gumbel sample instead).
"""

from __future__ import annotations

import zlib
from typing import Any

import torch
from torch import nn

from nni_hwaware.nni_fixes import import_nni_nas

__all__ = ["GumbelMixedLayer", "gumbel_softmax_sample"]

_nas = import_nni_nas()

from nni.nas.oneshot.pytorch.supermodule.differentiable import (  # noqa: E402
    DifferentiableMixedLayer,
)


def gumbel_softmax_sample(logits: torch.Tensor, tau: float, hard: bool,
                          generator: torch.Generator) -> torch.Tensor:
    """``F.gumbel_softmax`` with the noise drawn from ``generator`` (on the CPU).

    Same formula as torch's: ``y = softmax((logits + g) / tau)``, ``g = -log(Exp(1))``;
    with ``hard`` the result is ``one_hot(argmax y) - y.detach() + y``.
    """
    noise = -torch.empty(logits.shape, dtype=logits.dtype).exponential_(generator=generator).log()
    soft = ((logits + noise.to(logits.device)) / tau).softmax(dim=-1)
    if not hard:
        return soft
    index = soft.argmax(dim=-1, keepdim=True)
    one_hot = torch.zeros_like(soft).scatter_(-1, index, 1.0)
    return one_hot - soft.detach() + soft


class GumbelMixedLayer(DifferentiableMixedLayer):
    """A ``LayerChoice`` in the supernet; see the module docstring."""

    def __init__(self, paths: Any, alpha: torch.Tensor, label: str, *, seed: int = 0,
                 tau: float = 1.0, hard: bool = True, min_weight: float = 0.0) -> None:
        super().__init__(paths, alpha, nn.Softmax(-1), label)
        self.tau = tau
        self.hard = hard
        #: Soft mode: weights below this are zeroed and their candidates skipped.
        self.min_weight = min_weight
        #: Noise source of this layer's masks (checkpointed with the search).
        self.generator = torch.Generator().manual_seed(seed)
        #: The mask of the last training forward pass (a tensor in the autograd graph).
        self.mask: torch.Tensor | None = None

    @classmethod
    def mutate(cls, module: nn.Module, name: str, memo: dict[str, Any],
               mutate_kwargs: dict[str, Any]) -> GumbelMixedLayer | None:
        """NNI mutation hook: every plain ``LayerChoice`` becomes a :class:`GumbelMixedLayer`."""
        if type(module) is not _nas.LayerChoice:
            return None
        if module.label not in memo:
            raise KeyError(f"LayerChoice {module.label} has no architecture parameter in the memo")
        # One noise stream per layer, from the search seed and the layer's label.
        seed = (int(mutate_kwargs.get("seed", 0)) * 1_000_003 + zlib.crc32(module.label.encode())) % 2**62
        return cls(module.candidates, memo[module.label], module.label, seed=seed,
                   tau=float(mutate_kwargs.get("tau", 1.0)), hard=bool(mutate_kwargs.get("hard", True)),
                   min_weight=float(mutate_kwargs.get("min_weight", 0.0)))

    def sample_mask(self) -> torch.Tensor:
        """Draw a new mask from ``alpha`` at the current temperature.

        In soft mode, weights below :attr:`min_weight` are set to zero (the largest is always kept).
        """
        mask = gumbel_softmax_sample(self._arch_alpha, self.tau, self.hard, self.generator)
        if not self.hard and self.min_weight > 0:
            keep = mask.detach() >= min(self.min_weight, float(mask.detach().max()))
            mask = mask * keep
        return mask

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        if not self.training:
            self.mask = None
            return self[self.names[int(self._arch_alpha.argmax())]](*args, **kwargs)
        mask = self.sample_mask()
        self.mask = mask
        if self.hard:
            k = int(mask.detach().argmax())
            return self[self.names[k]](*args, **kwargs) * mask[k]
        active = [j for j in range(len(self.names)) if not self.min_weight or float(mask[j].detach()) > 0]
        if len(active) == len(self.names):
            return self._reduction([self[name](*args, **kwargs) for name in self.names], mask)
        return self._reduction([self[self.names[j]](*args, **kwargs) for j in active], mask[active])

    def probabilities(self) -> torch.Tensor:
        """``softmax(alpha)``: the sampling probabilities without Gumbel noise."""
        return self._arch_alpha.softmax(dim=-1)

    def export_probs(self, memo: dict[str, Any]) -> dict[str, Any]:
        if self.label in memo:
            return {}
        return {self.label: dict(zip(self.names, self.probabilities().detach().cpu().tolist(), strict=True))}

    def extra_repr(self) -> str:
        return f"label={self.label!r}, tau={self.tau:.3g}, hard={self.hard}"
