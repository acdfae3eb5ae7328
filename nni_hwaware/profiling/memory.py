"""Memory of one module: its weights and the peak of its forward activations.

Two numbers, kept apart because they scale differently: weights are paid once
per deployed model, activations grow with batch size and resolution.

* :func:`param_bytes` -- bytes of parameters and buffers, each distinct
  storage counted once (tied weights, views).
* :func:`peak_activation_bytes` -- the largest number of bytes of tensors
  created by one inference forward that are alive at the same time, output
  included, weights and inputs excluded.  On CPU this is computed from the
  tensors the ATen operators return (a deterministic, allocator-independent
  count); on CUDA it is read from the caching allocator's peak statistics.
"""

from __future__ import annotations

import weakref
from collections.abc import Iterable, Sequence
from typing import Any

import torch
from torch import nn
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

from nni_hwaware.profiling._checks import as_input_tuple, check_module, parse_device

__all__ = ["param_bytes", "peak_activation_bytes"]


def _storage_key(tensor: torch.Tensor) -> int:
    return tensor.untyped_storage().data_ptr()


def param_bytes(module: nn.Module) -> int:
    """Bytes of ``module``'s parameters and buffers, each storage counted once.

    Counting storages (not tensors) means tied weights and views of one
    buffer are not double-counted; it is ``sum(storage.nbytes())`` over the
    distinct storages, so a parameter that is a slice of a larger storage
    counts the whole storage, which is what has to be kept in memory.
    """
    check_module(module)
    seen: dict[int, int] = {}
    for tensor in (*module.parameters(), *module.buffers()):
        storage = tensor.untyped_storage()
        key = storage.data_ptr()
        if key == 0:  # empty tensor: no allocation
            continue
        seen[key] = max(seen.get(key, 0), storage.nbytes())
    return sum(seen.values())


class _LiveStorageTracker(TorchDispatchMode):
    """Dispatch mode that keeps a running sum of the bytes of live op outputs.

    Every tensor returned by an ATen operator is mapped to its untyped
    storage, keyed by the storage's data pointer.  A storage seen for the
    first time adds its ``nbytes()`` to ``live`` and gets a
    :func:`weakref.finalize` that subtracts them again when the storage is
    deallocated; ``peak`` is the maximum ``live`` ever reached.  Storages
    listed in ``ignore`` (weights, buffers, inputs) and empty storages are
    never counted; a storage seen again (views, in-place results) adds
    nothing unless it grew (``resize_``), in which case the growth is added.
    """

    def __init__(self, ignore: Iterable[int]) -> None:
        super().__init__()
        self.live = 0
        self.peak = 0
        self._ignore = frozenset(ignore)
        self._sizes: dict[int, int] = {}
        self._finalizers: list[weakref.finalize] = []

    def _free(self, key: int) -> None:
        self.live -= self._sizes.pop(key, 0)

    def _record(self, tensor: torch.Tensor) -> None:
        if tensor.is_meta:
            return
        storage = tensor.untyped_storage()
        key = storage.data_ptr()
        nbytes = storage.nbytes()
        if key == 0 or nbytes == 0 or key in self._ignore:
            return
        previous = self._sizes.get(key)
        if previous is None:
            self._finalizers.append(weakref.finalize(storage, self._free, key))
            previous = 0
        if nbytes > previous:
            self._sizes[key] = nbytes
            self.live += nbytes - previous
            self.peak = max(self.peak, self.live)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
        out = func(*args, **(kwargs or {}))
        for item in tree_flatten(out)[0]:
            if isinstance(item, torch.Tensor):
                self._record(item)
        return out

    def detach_all(self) -> None:
        """Stop listening for frees (after the measurement is read)."""
        for finalizer in self._finalizers:
            finalizer.detach()
        self._finalizers.clear()


def _resolve_device(
    device: str | torch.device | None, inputs: tuple[torch.Tensor, ...]
) -> torch.device:
    if device is None:
        device = inputs[0].device if inputs else torch.device("cpu")
    return parse_device(device)


def peak_activation_bytes(
    module: nn.Module,
    inputs: torch.Tensor | Sequence[torch.Tensor],
    device: str | torch.device | None = None,
) -> int:
    """Peak bytes of activations alive at once during one inference forward.

    ``inputs`` must already be on ``device`` (and ``module`` too); ``device``
    defaults to the device of the first input and only selects the method.

    **CPU** (deterministic; independent of allocator and thread count): the
    forward runs under :func:`torch.inference_mode` inside a
    :class:`~torch.utils._python_dispatch.TorchDispatchMode`.  For every
    tensor an ATen operator returns, its untyped storage is looked up by data
    pointer; a storage not seen before, and not one of the module's
    parameters or buffers or the inputs, adds ``storage.nbytes()`` to a live
    counter and gets a :func:`weakref.finalize` that subtracts the same
    amount when the storage is freed.  The result is the maximum of the live
    counter over the forward, with the output still alive at the end (so it
    is counted).  Consequences: views and in-place operators (``ReLU(inplace
    =True)``) add nothing; an intermediate counts from the operator that
    creates it until Python drops its last reference; scratch memory that a
    kernel allocates and frees internally (im2col buffers, oneDNN
    scratchpads) is invisible, as is allocator caching.  For a chain
    ``y = f2(f1(x))`` with outputs ``a`` and ``b`` the peak is ``|a| + |b|``
    (``a`` is still referenced while ``f2`` allocates ``b``).

    **CUDA**: ``torch.cuda.reset_peak_memory_stats``, then the peak
    ``torch.cuda.max_memory_allocated`` during the forward minus
    ``torch.cuda.memory_allocated`` just before it (both after
    ``torch.cuda.synchronize``).  This includes kernel workspaces (cuDNN)
    and is rounded to the caching allocator's block sizes (512 bytes), so it
    is close to but not identical with the CPU count.
    """
    check_module(module)
    args = as_input_tuple(inputs)
    dev = _resolve_device(device, args)
    if dev.type == "cuda":
        return _peak_activation_bytes_cuda(module, args, dev)

    ignore = {_storage_key(t) for t in (*module.parameters(), *module.buffers(), *args)}
    tracker = _LiveStorageTracker(ignore)
    try:
        with torch.inference_mode(), tracker:
            out: Any = module(*args)
        peak = tracker.peak
        del out
    finally:
        tracker.detach_all()
    return peak


def _peak_activation_bytes_cuda(
    module: nn.Module, args: tuple[torch.Tensor, ...], dev: torch.device
) -> int:
    torch.cuda.synchronize(dev)
    torch.cuda.reset_peak_memory_stats(dev)
    before = torch.cuda.memory_allocated(dev)
    with torch.inference_mode():
        out = module(*args)
    torch.cuda.synchronize(dev)
    peak = torch.cuda.max_memory_allocated(dev) - before
    del out
    return max(int(peak), 0)
