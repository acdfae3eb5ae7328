"""Zero-cost proxies: how well a network will train, guessed at initialisation without data.

:func:`synflow` is SynFlow (Tanaka et al. 2020; as a NAS proxy, Abdelfattah et al. 2021):
every weight made positive, an all-ones input, the output summed and back-propagated; the
score is the sum over all parameters of ``|weight x gradient|`` (the "synaptic flow"
through the network). It costs one forward and one backward pass of one sample.

:class:`ProxyScores` scores the networks of any NNI model space, cached per architecture,
as the log of :func:`synflow` (``log(1 + score)``). The PPO search adds it to its accuracy
surrogate's trend beside the table's costs (``PPOConfig.proxy``): among networks of the same
cost it tells apart those that train better, which the costs cannot.
"""

from __future__ import annotations

import copy
import json
import math
import time
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from nni_hwaware.errors import HwAwareError

__all__ = ["PROXIES", "ProxyScores", "synflow"]

#: The proxies :class:`ProxyScores` computes ("none": no proxy).
PROXIES = ("synflow", "none")


def synflow(module: nn.Module, example_input: torch.Tensor | Sequence[int], *, in_place: bool = False) -> float:
    """The SynFlow score of ``module`` (module docstring); ``example_input`` is a tensor or a shape.

    The module is scored in float64 in eval mode (batch norm at its running statistics) with its
    weights' absolute values and its clipping activations (ReLU6, hard tanh) as ReLU, on a copy of it (``in_place``: on the module itself, which it changes).
    """
    shape = tuple(example_input.shape) if isinstance(example_input, torch.Tensor) else tuple(example_input)
    if not shape or not all(isinstance(v, int) and v > 0 for v in shape):
        raise HwAwareError(f"synflow needs an input shape of positive sizes such as (1, 3, 32, 32), got {shape}")
    network = module if in_place else copy.deepcopy(module)
    _linearise(network)
    network.double().eval()
    with torch.no_grad():
        for p in network.parameters():
            p.abs_()
            p.grad = None
    with torch.enable_grad():
        out = network(torch.ones(shape, dtype=torch.float64))
        if isinstance(out, tuple | list):
            out = out[0]
        out.sum().backward()
    with torch.no_grad():
        score = float(sum((p * p.grad).abs().sum() for p in network.parameters() if p.grad is not None))
    if not math.isfinite(score):
        raise HwAwareError(f"the SynFlow score of a {type(module).__name__} overflowed float64; score a narrower "
                           "or shallower replica of the space (PPO option proxy_space_args)")
    return score


#: Activations that clip, scored as ReLU: with positive weights and an all-ones input a ReLU network
#: is linear, which is what SynFlow measures; ReLU6 would cut the flow wherever an activation passed 6.
#: Gates (sigmoid, hard-sigmoid) stay: bounded, they keep a squeeze-and-excitation block's product finite.
_CLIPPING = (nn.ReLU6, nn.Hardtanh, nn.Tanh)


def _linearise(network: nn.Module) -> None:
    for name, child in list(network.named_children()):
        if isinstance(child, _CLIPPING):
            setattr(network, name, nn.ReLU())
        else:
            _linearise(child)


class ProxyScores:
    """A zero-cost proxy of each network of a space, cached per architecture (module docstring).

    ``named`` is the resolved space (:func:`~nni_hwaware.spaces.resolve.resolve_space`); its networks
    are built afresh (seed 0) and scored with an input of ``input_shape`` (default: the space's). A
    narrower replica of the space or a smaller input scores faster; a shallower one keeps less of what
    the score adds beside the costs (``benchmarks/nb201_proxy.py``). Calling it with architectures
    (``{label: value}``) gives their log-scores; :attr:`seconds` and :attr:`computed` say what
    computing them cost.
    """

    def __init__(self, named: Any, proxy: str = "synflow", input_shape: Sequence[int] | None = None) -> None:
        if proxy not in PROXIES or proxy == "none":
            raise HwAwareError(f"unknown zero-cost proxy {proxy!r}; choose one of {[p for p in PROXIES if p != 'none']}")
        self.named, self.proxy = named, proxy
        self.input_shape = tuple(int(v) for v in (input_shape or named.input_shape))
        self.labels = list(named.choices())
        #: What the scores are of: the space, its constructor arguments and the input (saved with them).
        self.replica = json.dumps({"space": str(named.name), "space_args": named.kwargs,
                                   "input_shape": list(self.input_shape)}, sort_keys=True, default=str)
        self.cache: dict[tuple[str, ...], float] = {}
        self.seconds = 0.0
        self.computed = 0

    def check(self, arch: Mapping[str, Any]) -> float:
        """Score ``arch`` (e.g. the reference network, before a search) and say in one line why it cannot be."""
        try:
            return float(self([arch])[0])
        except HwAwareError:
            raise
        except Exception as err:  # a user's space can fail in any way: one line says where
            raise HwAwareError(f"the zero-cost proxy cannot score a network of {self.named.name!r} with inputs of "
                               f"{list(self.input_shape)}: {type(err).__name__}: {' '.join(str(err).split())[:200]}; "
                               "check proxy_input_shape and proxy_space_args, or set proxy: none") from None

    def _key(self, arch: Mapping[str, Any]) -> tuple[str, ...]:
        return tuple(str(arch[label]) for label in self.labels)

    def __call__(self, archs: Iterable[Mapping[str, Any]]) -> np.ndarray:
        out = []
        for arch in archs:
            key = self._key(arch)
            if key not in self.cache:
                start = time.perf_counter()
                self.cache[key] = math.log1p(synflow(self.build(arch), (1, *self.input_shape), in_place=True))
                self.seconds += time.perf_counter() - start
                self.computed += 1
            out.append(self.cache[key])
        return np.asarray(out, dtype=float)

    def build(self, arch: Mapping[str, Any]) -> nn.Module:
        """The network of ``arch``, weights from seed 0 (torch's global random state untouched).

        A space built by a constructor is built under NNI's ``model_context`` (what NNI's
        ``freeze`` does after building the whole space: only the chosen modules are made).
        """
        sample = self.named.check_architecture(arch)
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(0)
            if self.named.factory is not None and self.named.config is None:
                from nni.nas.space import model_context

                with model_context(sample):
                    network = self.named.factory()
                if not _has_choices(network):
                    return network
            return self.named.build(sample)

    def save(self, path: str | Path) -> None:
        """Write the scores so far as CSV (one column per label, then ``log_score``), atomically."""
        import csv

        from nni_hwaware.files import atomic_open

        with atomic_open(path, "w") as fh:
            writer = csv.writer(fh)
            writer.writerow([*self.labels, "log_score", "proxy", "replica"])
            for key, value in self.cache.items():
                writer.writerow([*key, repr(value), self.proxy, self.replica])

    def load(self, path: str | Path) -> int:
        """Add the scores :meth:`save` wrote (of this space and proxy); returns how many were read."""
        import csv

        try:
            with open(path, encoding="utf-8", newline="") as fh:
                rows = list(csv.DictReader(fh))
        except OSError as err:
            raise HwAwareError(f"cannot read proxy scores {path}: {err.strerror or err}") from None
        need = [*self.labels, "log_score"]
        if rows and (missing := [c for c in need if c not in rows[0]]):
            raise HwAwareError(f"proxy scores {path} lack columns {missing}; they are of another space "
                               f"(this one's labels: {self.labels})")
        read = 0
        for n, row in enumerate(rows, start=2):
            if row.get("proxy", self.proxy) != self.proxy or row.get("replica", self.replica) != self.replica:
                raise HwAwareError(f"proxy scores {path} line {n} are of {row.get('proxy')} on {row.get('replica')}, "
                                   f"not of {self.proxy} on {self.replica}; score afresh (delete the file) or give "
                                   "the options they were scored with")
            try:
                value = float(row["log_score"])
            except (TypeError, ValueError):
                value = math.nan
            if not math.isfinite(value):
                raise HwAwareError(f"proxy scores {path} line {n}: log_score {row['log_score']!r} is not a number")
            self.cache[tuple(str(row[label]) for label in self.labels)] = value
            read += 1
        return read

    def mean_ms(self) -> float:
        """Milliseconds per network scored (build and score)."""
        return 1000 * self.seconds / max(1, self.computed)


def _has_choices(network: nn.Module) -> bool:
    simplify = getattr(network, "simplify", None)
    return bool(simplify()) if callable(simplify) else False
