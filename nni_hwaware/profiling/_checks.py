"""Argument checks shared by the profiling modules (private).

Every check raises :class:`~nni_hwaware.errors.HwAwareError` with a one-line
message saying what to change, and none of them touches CUDA unless the
requested device is a CUDA device.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn

from nni_hwaware.errors import HwAwareError

__all__ = [
    "ONNX_INSTALL_HINT",
    "as_input_tuple",
    "check_module",
    "check_positive_int",
    "device_type",
    "parse_device",
]

#: What to run when an optional dependency of the ONNX path is missing.
ONNX_INSTALL_HINT = "pip install 'nni-hwaware[onnx]'"


def device_type(device: str) -> str:
    """The kind of ``device`` (``cpu``, ``cuda``, ...), without asking whether it is there."""
    try:
        return torch.device(device).type
    except (RuntimeError, TypeError):
        return parse_device(device).type  # its own one-line error


def check_module(module: object) -> nn.Module:
    """Return ``module`` if it is an ``nn.Module``."""
    if not isinstance(module, nn.Module):
        raise HwAwareError(f"module must be a torch.nn.Module, got {type(module).__name__}")
    return module


def as_input_tuple(inputs: torch.Tensor | Sequence[torch.Tensor]) -> tuple[torch.Tensor, ...]:
    """Normalise forward inputs to a tuple of tensors (a lone tensor becomes a 1-tuple)."""
    if isinstance(inputs, torch.Tensor):
        return (inputs,)
    if isinstance(inputs, Sequence) and not isinstance(inputs, str):
        result = tuple(inputs)
        if all(isinstance(t, torch.Tensor) for t in result):
            return result
    raise HwAwareError(
        f"inputs must be a tensor or a sequence of tensors, got {type(inputs).__name__}"
    )


def check_positive_int(name: str, value: object) -> int:
    """Return ``value`` if it is an int >= 1 (bools rejected)."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise HwAwareError(f"{name} must be an integer >= 1, got {value!r}")
    return value


def parse_device(device: str | torch.device, *, require_available: bool = True) -> torch.device:
    """Parse ``'cpu'``, ``'cuda'`` or ``'cuda:<index>'``; CUDA must be usable if requested.

    ``torch.cuda`` is only queried for CUDA devices, so CPU runs never
    initialise a CUDA context.
    """
    try:
        dev = torch.device(device)
    except (RuntimeError, TypeError) as exc:
        raise HwAwareError(f"device must be 'cpu' or 'cuda[:index]', got {device!r}") from exc
    if dev.type not in ("cpu", "cuda"):
        raise HwAwareError(f"device must be 'cpu' or 'cuda[:index]', got {device!r}")
    if dev.type == "cuda" and require_available:
        if not torch.cuda.is_available():
            raise HwAwareError(
                f"device {device!r} requested but torch.cuda.is_available() is False; use device='cpu'"
            )
        count = torch.cuda.device_count()
        if dev.index is not None and dev.index >= count:
            raise HwAwareError(
                f"device {device!r} requested but only {count} CUDA device(s) exist; use cuda:0..cuda:{count - 1}"
            )
    return dev
