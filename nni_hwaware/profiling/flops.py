"""Floating-point operations and parameter count of one module.

FLOPs here follow :class:`torch.utils.flop_counter.FlopCounterMode`: a
multiply and an add each count as one operation, so a multiply-accumulate is
**2 FLOPs** and the reported number is ``2 x MACs`` (many papers, e.g. the
ResNet and MobileNet tables, quote MACs and call them FLOPs; divide by 2 to
compare).  Only the operators with a registered formula are counted --
matrix multiplies (``mm``, ``addmm``, ``bmm``, linear), convolutions and
attention -- with, for example:

* ``Linear(in, out)`` on ``N`` rows: ``2 * N * in * out``;
* ``Conv2d(C_in, C_out, (k_h, k_w), groups=g)`` with output ``H_out x W_out``:
  ``2 * N * C_out * H_out * W_out * (C_in / g) * k_h * k_w``.

Bias additions, normalisation, activations and pooling are not counted; on
conv nets they are a small fraction of the total and on every chip they are
memory-bound rather than compute-bound, which the latency column captures.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn
from torch.utils.flop_counter import FlopCounterMode

from nni_hwaware.profiling._checks import as_input_tuple, check_module

__all__ = ["count_flops", "count_params"]


def count_flops(module: nn.Module, inputs: torch.Tensor | Sequence[torch.Tensor]) -> int:
    """FLOPs (= 2 x MACs) of one forward of ``module`` on ``inputs`` (the whole batch).

    The forward runs under :func:`torch.inference_mode`, so nothing is
    recorded for autograd; ``inputs`` must be on the module's device.
    """
    check_module(module)
    args = as_input_tuple(inputs)
    counter = FlopCounterMode(display=False)
    with torch.inference_mode(), counter:
        module(*args)
    return int(counter.get_total_flops())


def count_params(module: nn.Module) -> int:
    """Number of parameter elements, each distinct parameter counted once (tied weights once).

    Buffers (e.g. BatchNorm running statistics) are not parameters and are
    not counted here; :func:`~nni_hwaware.profiling.memory.param_bytes`
    includes them because they occupy memory.
    """
    check_module(module)
    return sum(p.numel() for p in module.parameters())
