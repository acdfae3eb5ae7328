"""Zero-cost proxies: how well a network will train, guessed at initialisation without data.

:func:`synflow` is SynFlow (Tanaka et al. 2020; as a NAS proxy, Abdelfattah et al. 2021):
every weight made positive, an all-ones input, the output summed and back-propagated; the
score is the sum over all parameters of ``|weight x gradient|`` (the "synaptic flow"
through the network). It costs one forward and one backward pass of one sample.

:func:`naswot` is NASWOT (Mellor et al. 2021) on Gaussian inputs in place of data: how
differently the network's ReLU-like units split a batch of inputs. It costs one forward pass.

:class:`ProxyScores` scores the networks of any NNI model space, cached per architecture,
by one of them or both (``synflow+naswot``, one column each; SynFlow as ``log(1 + score)``).
The PPO search adds the scores to its accuracy surrogate's trend beside the table's costs
(``PPOConfig.proxy``): among networks of the same cost they tell apart those that train
better, which the costs cannot.
"""

from __future__ import annotations

import copy
import json
import logging
import math
import time
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from nni_hwaware.errors import HwAwareError

_logger = logging.getLogger(__name__)

#: The scores :class:`ProxyScores` computes; ``synflow+naswot`` asks for both, one column each.
SCORERS = ("synflow", "naswot")

__all__ = ["SCORERS", "ProxyScores", "naswot", "naswot_floor", "synflow"]



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


#: Activations whose units :func:`naswot` reads: each is positive exactly where its input is.
_GATES = (nn.ReLU, nn.ReLU6, nn.Hardswish, nn.SiLU, nn.GELU, nn.LeakyReLU)
#: The ridge of :func:`naswot`'s kernel, per unit: a network whose units do not tell its inputs apart
#: (its output does not depend on them) scores low but finite, not minus infinity.
NASWOT_RIDGE = 1e-2


def naswot(module: nn.Module, example_input: torch.Tensor | Sequence[int], *, batch: int = 16, seed: int = 0,
           in_place: bool = False) -> float:
    """NASWOT (Mellor et al. 2021) without data: how differently the network's activations split inputs.

    ``batch`` Gaussian inputs of ``example_input``'s per-sample shape (from ``seed``) stand for a batch of
    data. Each unit after a ReLU-like activation (:data:`_GATES`; functional activations are not seen)
    codes an input by whether its output is positive; ``K[i, j]`` counts the units on which inputs ``i``
    and ``j`` agree, and the score is ``log det(K + NASWOT_RIDGE * units * I)``. A network whose units
    cut its inputs' space into more regions trains better (the paper's finding on NAS-Bench-201).
    Scored in eval mode (batch norm at its running statistics) on a copy (``in_place``: the module itself).
    """
    shape = tuple(example_input.shape) if isinstance(example_input, torch.Tensor) else tuple(example_input)
    if not shape or not all(isinstance(v, int) and v > 0 for v in shape):
        raise HwAwareError(f"naswot needs an input shape of positive sizes such as (1, 3, 32, 32), got {shape}")
    if batch < 2:
        raise HwAwareError(f"naswot needs a batch of at least 2 inputs, got {batch}")
    if not _has_gates(module):
        raise HwAwareError(f"naswot reads the units of ReLU-like activation modules, and a {type(module).__name__} "
                           "has none (functional activations are not seen); use proxy: synflow")
    score = _naswot(module if in_place else copy.deepcopy(module), shape, batch, seed)
    if score is None:
        raise HwAwareError(f"naswot: no activation of a {type(module).__name__} ran on its input; use proxy: synflow")
    return score


def _naswot(network: nn.Module, shape: tuple[int, ...], batch: int = 16, seed: int = 0) -> float | None:
    """:func:`naswot` of ``network`` itself (put in eval mode), or None where no ReLU-like unit ran."""
    network.eval()
    kernel = torch.zeros(batch, batch, dtype=torch.float64)
    units = 0

    def read(_: nn.Module, __: Any, out: torch.Tensor) -> None:
        nonlocal kernel, units
        codes = (out.detach().reshape(batch, -1) > 0).double()
        kernel += codes @ codes.T + (1 - codes) @ (1 - codes).T
        units += codes.shape[1]

    hooks = [m.register_forward_hook(read) for m in network.modules() if isinstance(m, _GATES)]
    inputs = torch.randn((batch, *shape[1:]), generator=torch.Generator().manual_seed(seed))
    try:
        with torch.no_grad():
            network(inputs)
    finally:
        for hook in hooks:
            hook.remove()
    if not units:
        return None
    ridge = NASWOT_RIDGE * units * torch.eye(batch, dtype=torch.float64)
    return float(torch.linalg.slogdet(kernel + ridge)[1])


def naswot_floor(batch: int = 16) -> float:
    """The lowest :func:`naswot` score of a batch of ``batch``: one unit on which every input agrees.

    :class:`ProxyScores` gives it to a network without ReLU-like units (a linear network codes
    every input alike), which :func:`naswot` itself refuses.
    """
    kernel = torch.ones(batch, batch, dtype=torch.float64) + NASWOT_RIDGE * torch.eye(batch, dtype=torch.float64)
    return float(torch.linalg.slogdet(kernel)[1])


def _has_gates(network: nn.Module) -> bool:
    return any(isinstance(m, _GATES) for m in network.modules())


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
        parts = proxy.split("+")
        if not set(parts) <= set(SCORERS) or len(set(parts)) != len(parts):
            raise HwAwareError(f"unknown zero-cost proxy {proxy!r}; choose one of {list(SCORERS)} or both, "
                               f"joined by '+'")
        self.named, self.proxy = named, proxy
        #: The proxies scored, one column each when more than one.
        self.parts = tuple(parts)
        self.input_shape = tuple(int(v) for v in (input_shape or named.input_shape))
        self.labels = list(named.choices())
        #: What the scores are of: the space, its constructor arguments and the input (saved with them).
        self.replica = json.dumps({"space": str(named.name), "space_args": named.kwargs,
                                   "input_shape": list(self.input_shape)}, sort_keys=True, default=str)
        self.cache: dict[tuple[str, ...], float | tuple[float, ...]] = {}
        self.seconds = 0.0
        self.computed = 0
        self._prepared = False

    def prepare(self, arch: Mapping[str, Any]) -> None:
        """Drop ``naswot`` beside another proxy where ``arch``'s network (e.g. the reference) has no ReLU-like
        activation module for it to read, with a warning; refuse ``naswot`` alone there, in one line."""
        if "naswot" not in self.parts or self._prepared:
            return
        try:
            network = self.build(arch)
        except HwAwareError:
            raise
        except Exception as err:  # a user's space can fail in any way: one line says where
            raise self._cannot(err) from None
        self._prepared = True  # settled once, on the first network asked (the search's reference)
        if _has_gates(network):
            return
        if len(self.parts) == 1:
            raise HwAwareError(f"naswot reads the units of ReLU-like activation modules, and the networks of "
                               f"{self.named.name} have none (functional activations are not seen); "
                               "use proxy: synflow")
        _logger.warning("naswot reads ReLU-like activation modules and the networks of %s have none "
                        "(functional activations are not seen): the zero-cost proxy is %s alone",
                        self.named.name, " and ".join(p for p in self.parts if p != "naswot"))
        keep = [i for i, part in enumerate(self.parts) if part != "naswot"]
        self.parts = tuple(self.parts[i] for i in keep)
        self.proxy = "+".join(self.parts)
        self.cache = {key: (value if not isinstance(value, tuple) else value[keep[0]] if len(keep) == 1
                            else tuple(value[i] for i in keep)) for key, value in self.cache.items()}

    def check(self, arch: Mapping[str, Any]) -> np.ndarray:
        """Score ``arch`` (e.g. the reference network, before a search) and say in one line why it cannot be
        (after :meth:`prepare`)."""
        try:
            self.prepare(arch)
            return np.asarray(self([arch])[0])
        except HwAwareError:
            raise
        except Exception as err:  # a user's space can fail in any way: one line says where
            raise self._cannot(err) from None

    def _cannot(self, err: Exception) -> HwAwareError:
        return HwAwareError(f"the zero-cost proxy cannot score a network of {self.named.name!r} with inputs of "
                            f"{list(self.input_shape)}: {type(err).__name__}: {' '.join(str(err).split())[:200]}; "
                            "check proxy_input_shape and proxy_space_args, or set proxy: none")

    def _key(self, arch: Mapping[str, Any]) -> tuple[str, ...]:
        return tuple(str(arch[label]) for label in self.labels)

    def __call__(self, archs: Iterable[Mapping[str, Any]]) -> np.ndarray:
        out = []
        for arch in archs:
            key = self._key(arch)
            if key not in self.cache:
                start = time.perf_counter()
                self.cache[key] = self._score(self.build(arch))
                self.seconds += time.perf_counter() - start
                self.computed += 1
            out.append(self.cache[key])
        return np.asarray(out, dtype=float)

    def _score(self, network: nn.Module) -> float | tuple[float, ...]:
        shape = (1, *self.input_shape)
        # NASWOT first: SynFlow scored in place makes the weights positive. A network without ReLU-like
        # units (or none that ran) codes every input alike: the lowest score
        wot = math.nan
        if "naswot" in self.parts:
            wot = _naswot(network, shape)
            wot = naswot_floor() if wot is None else wot
        flow = math.log1p(synflow(network, shape, in_place=True)) if "synflow" in self.parts else math.nan
        values = tuple(flow if part == "synflow" else wot for part in self.parts)
        return values[0] if len(values) == 1 else values

    @property
    def columns(self) -> list[str]:
        """The score columns of :meth:`save`'s file: ``log_score``, or ``log_score_<proxy>`` for each of several."""
        return ["log_score"] if len(self.parts) == 1 else [f"log_score_{part}" for part in self.parts]

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
        """Write the scores so far as CSV (one column per label, then :attr:`columns`), atomically."""
        import csv

        from nni_hwaware.files import atomic_open

        with atomic_open(path, "w") as fh:
            writer = csv.writer(fh)
            writer.writerow([*self.labels, *self.columns, "proxy", "replica"])
            for key, value in self.cache.items():
                values = value if isinstance(value, tuple) else (value,)
                writer.writerow([*key, *map(repr, values), self.proxy, self.replica])

    def load(self, path: str | Path) -> int:
        """Add the scores :meth:`save` wrote (of this space and proxy); returns how many were read."""
        import csv

        try:
            with open(path, encoding="utf-8", newline="") as fh:
                rows = list(csv.DictReader(fh))
        except OSError as err:
            raise HwAwareError(f"cannot read proxy scores {path}: {err.strerror or err}") from None
        need = [*self.labels, *self.columns]
        if rows and rows[0].get("proxy", self.proxy) != self.proxy:
            raise HwAwareError(f"proxy scores {path} are of proxy {rows[0]['proxy']}, and this search scores "
                               f"{self.proxy}; score them with `nni-hwaware proxy --proxy {self.proxy}` or set "
                               f"proxy: {rows[0]['proxy']}")
        if rows and (missing := [c for c in need if c not in rows[0]]):
            raise HwAwareError(f"proxy scores {path} lack columns {missing}; they are of another space "
                               f"(this one's labels: {self.labels})")
        read = 0
        for n, row in enumerate(rows, start=2):
            if row.get("proxy", self.proxy) != self.proxy or row.get("replica", self.replica) != self.replica:
                raise HwAwareError(f"proxy scores {path} line {n} are of {row.get('proxy')} on {row.get('replica')}, "
                                   f"not of {self.proxy} on {self.replica}; score afresh (delete the file) or give "
                                   "the options they were scored with")
            values = []
            for column in self.columns:
                try:
                    value = float(row[column])
                except (TypeError, ValueError):
                    value = math.nan
                if not math.isfinite(value):
                    raise HwAwareError(f"proxy scores {path} line {n}: {column} {row[column]!r} is not a number")
                values.append(value)
            self.cache[tuple(str(row[label]) for label in self.labels)] = values[0] if len(values) == 1 else tuple(values)
            read += 1
        return read

    def mean_ms(self) -> float:
        """Milliseconds per network scored (build and score)."""
        return 1000 * self.seconds / max(1, self.computed)


def _has_choices(network: nn.Module) -> bool:
    simplify = getattr(network, "simplify", None)
    return bool(simplify()) if callable(simplify) else False
