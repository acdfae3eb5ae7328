"""A trained network in one file: weights, architecture, space and training options.

``network.pt`` is a plain dictionary that ``torch.load(path, weights_only=True)`` reads
(no pickled classes): ``format``, ``space`` (the spec string the space was named by:
``digits``, ``nni:NasBench201``, ``module:callable``), ``space_args``, ``arch``,
``input_shape``, ``state_dict`` (the best epoch on validation), ``train`` (the
:class:`~nni_hwaware.training.TrainConfig` as a dict) and ``metrics`` (its accuracies
and costs). :func:`network_from_checkpoint` rebuilds the network from it.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from nni_hwaware.errors import HwAwareError
from nni_hwaware.files import atomic_open

__all__ = ["CHECKPOINT_FORMAT", "Checkpoint", "load_checkpoint", "network_from_checkpoint", "save_checkpoint"]

#: The ``format`` entry of a checkpoint this version writes and reads.
CHECKPOINT_FORMAT = "nni-hwaware-network/1"


@dataclass(frozen=True)
class Checkpoint:
    """What :func:`load_checkpoint` reads (see the module docstring)."""

    space: str
    arch: dict[str, Any]
    state_dict: dict[str, torch.Tensor] = field(repr=False)
    input_shape: tuple[int, ...]
    space_args: dict[str, Any] = field(default_factory=dict)
    train: dict[str, Any] = field(default_factory=dict)
    metrics: dict[str, Any] = field(default_factory=dict)


def _plain(value: Any) -> Any:
    """``value`` as the types ``weights_only`` loading accepts (tuples become lists)."""
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    if value is None or isinstance(value, bool | int | float | str):
        return value
    if hasattr(value, "item") and getattr(value, "ndim", 1) == 0:  # numpy / torch scalars
        return value.item()
    raise HwAwareError(f"cannot store {type(value).__name__} {value!r} in a checkpoint: use plain data")


def save_checkpoint(path: str | os.PathLike[str], *, space: str, arch: Mapping[str, Any],
                    state_dict: Mapping[str, torch.Tensor], input_shape: tuple[int, ...] | list[int],
                    space_args: Mapping[str, Any] | None = None, train: Mapping[str, Any] | None = None,
                    metrics: Mapping[str, Any] | None = None) -> Path:
    """Write the checkpoint atomically (a reader never sees half a file); returns ``path``."""
    if not isinstance(space, str) or not space:
        raise HwAwareError("a checkpoint names its space by a string (a registered name, nni:<hub space> or "
                           "module:callable): pass the spec the space was resolved from")
    if space.endswith(".json") and Path(space).is_file():
        space = str(Path(space).resolve())  # a space file: found again from any directory
    data = {
        "format": CHECKPOINT_FORMAT, "space": space, "space_args": _plain(space_args or {}),
        "arch": _plain(dict(arch)), "input_shape": [int(d) for d in input_shape],
        "state_dict": {k: v.detach().cpu() for k, v in state_dict.items()},
        "train": _plain(train or {}), "metrics": _plain(metrics or {}),
    }
    path = Path(path)
    with atomic_open(path, "wb") as fh:
        torch.save(data, fh)
    return path


def load_checkpoint(path: str | os.PathLike[str]) -> Checkpoint:
    """Read a checkpoint written by :func:`save_checkpoint`; a wrong file is one clear error."""
    path = Path(path)
    if not path.is_file():
        raise HwAwareError(f"no checkpoint at {path}: pass the network.pt a search wrote")
    try:
        data = torch.load(path, weights_only=True, map_location="cpu")
    except Exception as err:  # pickle, zip or weights_only refusal: all mean "not ours"
        raise HwAwareError(f"{path} is not a network checkpoint of nni-hwaware ({type(err).__name__}); "
                           "pass the network.pt a search wrote") from None
    if not isinstance(data, dict) or data.get("format") != CHECKPOINT_FORMAT:
        found = data.get("format") if isinstance(data, dict) else type(data).__name__
        raise HwAwareError(f"{path} is not a network checkpoint of this version (format {found!r}, "
                           f"expected {CHECKPOINT_FORMAT!r})")
    return Checkpoint(space=data["space"], arch=dict(data["arch"]), state_dict=data["state_dict"],
                      input_shape=tuple(data["input_shape"]), space_args=dict(data["space_args"]),
                      train=dict(data["train"]), metrics=dict(data["metrics"]))


def network_from_checkpoint(checkpoint: Checkpoint | str | os.PathLike[str]) -> tuple[Any, torch.nn.Module]:
    """``(named space, network)``: the checkpoint's architecture built and its weights loaded (eval mode)."""
    from nni_hwaware.spaces.resolve import resolve_space

    if not isinstance(checkpoint, Checkpoint):
        checkpoint = load_checkpoint(checkpoint)
    named = resolve_space(checkpoint.space, **checkpoint.space_args)
    arch = named.check_architecture(checkpoint.arch)
    net = named.build(arch)
    try:
        net.load_state_dict(checkpoint.state_dict)
    except RuntimeError as err:
        first = str(err).strip().splitlines()[0]
        raise HwAwareError(f"the checkpoint's weights do not fit {checkpoint.space}'s network {arch}: {first}") from None
    return named, net.eval()
