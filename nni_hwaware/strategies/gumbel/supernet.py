"""The supernet of the search: one Gumbel-softmax mask per label per step, shared by every mixed op.

:class:`LabelMasks` draws, once per forward pass of the supernet, one
Gumbel-softmax mask over each label's values from its architecture parameters
``alpha`` (each label with its own seeded generator) and hands the same tensor to
every module that asks for that label: the :class:`GumbelMixedLayer` of a
``LayerChoice``, NNI's differentiable ``Repeat`` (depth weights) and NNI's mixed
operations (``MixedConv2d``, ``MixedLinear``, ``MixedBatchNorm2d``, ...: widths,
kernels, expansions), which call it in place of their softmax. NNI's own Gumbel
softmax draws a new sample in every mixed op of a label; here a label has one
mask in a step, and :meth:`LabelMasks.current` is what the penalty is computed
from, so the penalty has a gradient to ``alpha``:

* soft (``hard=False``): ``m = softmax((alpha + g) / tau)``; a ``LayerChoice`` runs
  every candidate and sums ``m_j f_j(x)`` (with ``min_weight``, weights below it are
  zeroed and those candidates skipped);
* hard (``hard=True``, straight-through): ``m`` is one-hot in value with the soft
  sample's gradient; a ``LayerChoice`` runs only the sampled candidate,
  ``m_k f_k(x)``, so a step costs about one network's forward and backward.

In evaluation mode every label's mask is the one-hot of ``argmax alpha``: the
network the search would export now.
"""

from __future__ import annotations

import zlib
from typing import Any

import torch
from torch import nn

from nni_hwaware.nni_fixes import import_nni_nas

__all__ = ["GumbelMixedLayer", "LabelMasks", "gumbel_softmax_sample"]

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


def label_seed(seed: int, label: str) -> int:
    """The seed of one label's noise stream, from the search seed and the label."""
    return (int(seed) * 1_000_003 + zlib.crc32(str(label).encode())) % 2**62


class LabelMasks:
    """One Gumbel-softmax mask per label per forward pass; see the module docstring.

    A plain object (not a module): NNI's mixed ops keep it as their ``_softmax`` and
    call it with their ``alpha``; :meth:`attach` clears the masks at every forward of
    the supernet and follows its train/eval mode.
    """

    def __init__(self, alphas: dict[str, nn.Parameter], values: dict[str, list[Any]], *, seed: int = 0,
                 tau: float = 1.0, hard: bool = True, min_weight: float = 0.0) -> None:
        self.alphas = dict(alphas)
        self.values = {label: list(v) for label, v in values.items()}
        self.labels = list(alphas)
        self._label_of = {id(alpha): label for label, alpha in alphas.items()}
        self.tau, self.hard, self.min_weight = tau, hard, min_weight
        self.generators = {label: torch.Generator().manual_seed(label_seed(seed, label)) for label in alphas}
        self.training = True
        #: The masks of the current forward pass (tensors in its autograd graph).
        self.masks: dict[str, torch.Tensor] = {}

    def attach(self, model: nn.Module) -> None:
        """Clear the masks at the start of every forward of ``model`` and follow its mode."""
        def begin(module: nn.Module, args: Any) -> None:
            self.training = module.training
            self.masks = {}

        model.register_forward_pre_hook(begin)

    def mask(self, label: str) -> torch.Tensor:
        """The mask of ``label`` in this forward pass (drawn on first use)."""
        if label not in self.masks:
            alpha = self.alphas[label]
            if not self.training:
                self.masks[label] = torch.zeros_like(alpha).scatter_(-1, alpha.detach().argmax(-1, keepdim=True), 1.0)
            else:
                mask = gumbel_softmax_sample(alpha, self.tau, self.hard, self.generators[label])
                if not self.hard and self.min_weight > 0:
                    keep = mask.detach() >= min(self.min_weight, float(mask.detach().max()))
                    mask = mask * keep
                self.masks[label] = mask
        return self.masks[label]

    def __call__(self, alpha: torch.Tensor) -> torch.Tensor:
        label = self._label_of.get(id(alpha))
        if label is None:
            raise KeyError("an architecture parameter the search did not create; was the space mutated "
                           "by HardwareGumbelDARTS?")
        return self.mask(label)

    def current(self) -> dict[str, torch.Tensor]:
        """Every label's mask in this forward pass (labels no module asked for are drawn now)."""
        return {label: self.mask(label) for label in self.labels}

    def probabilities(self, label: str) -> torch.Tensor:
        """``softmax(alpha)`` of ``label``: the sampling probabilities without noise."""
        return self.alphas[label].softmax(dim=-1)

    def architecture(self) -> dict[str, Any]:
        """Each label's most probable value (what the search exports now)."""
        return {str(label): self.values[label][int(self.alphas[label].argmax())] for label in self.labels}


class GumbelMixedLayer(DifferentiableMixedLayer):
    """A ``LayerChoice`` in the supernet, weighted by its label's shared mask (module docstring)."""

    def __init__(self, paths: Any, alpha: torch.Tensor, label: str, masks: LabelMasks) -> None:
        super().__init__(paths, alpha, nn.Softmax(-1), label)
        object.__setattr__(self, "_masks", masks)  # shared, not a submodule

    @classmethod
    def mutate(cls, module: nn.Module, name: str, memo: dict[str, Any],
               mutate_kwargs: dict[str, Any]) -> GumbelMixedLayer | None:
        """NNI mutation hook: every plain ``LayerChoice`` becomes a :class:`GumbelMixedLayer`."""
        if type(module) is not _nas.LayerChoice:
            return None
        if module.label not in memo:
            raise KeyError(f"LayerChoice {module.label} has no architecture parameter in the memo")
        return cls(module.candidates, memo[module.label], module.label, mutate_kwargs["masks"])

    @property
    def mask(self) -> torch.Tensor | None:
        """This layer's mask in the last forward pass (None if it has not run)."""
        return self._masks.masks.get(self.label)

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        masks = self._masks
        mask = masks.mask(self.label)
        if not masks.training or masks.hard:
            k = int(mask.detach().argmax())
            out = self[self.names[k]](*args, **kwargs)
            return out if not masks.training else out * mask[k]
        active = [j for j in range(len(self.names)) if not masks.min_weight or float(mask[j].detach()) > 0]
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
        return f"label={self.label!r}"
