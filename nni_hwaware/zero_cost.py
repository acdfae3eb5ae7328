"""Zero-cost proxies: how well a network will train, guessed at initialisation without data.

:func:`synflow` is SynFlow (Tanaka et al. 2020; as a NAS proxy, Abdelfattah et al. 2021): every weight
made positive, an all-ones input, the output summed and back-propagated; the score is the sum over all
parameters of ``|weight x gradient|`` (the "synaptic flow"). One forward and one backward pass.
:func:`naswot` is NASWOT (Mellor et al. 2021) on Gaussian inputs in place of data: how differently
the network's ReLU-like units split a batch of inputs. One forward pass.

The proxies are a registry: one more is ``@register_proxy("name")`` on a function of a network built afresh
and its input shape ``(1, C, H, W)`` returning a finite float; the PPO option ``proxy`` and ``nni-hwaware
proxy --proxy`` read it (:func:`proxy_names`, :func:`get_proxy`; torch is imported only where a network is
scored: NNI's dispatcher checks the options). :class:`ProxyScores` scores the networks of any NNI model
space, cached per architecture, by one proxy or several (``synflow+naswot``, one column each); the PPO
search adds the scores to its surrogate's trend beside the table's costs (``PPOConfig.proxy``): among
networks of the same cost they tell apart those that train better, which the costs cannot.
"""

from __future__ import annotations

import copy
import csv
import json
import logging
import math
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from nni_hwaware.errors import HwAwareError
from nni_hwaware.files import atomic_open

if TYPE_CHECKING:
    import torch
    from torch import nn

_logger = logging.getLogger(__name__)

__all__ = ["ProxyScores", "ZeroCostProxy", "get_proxy", "naswot", "naswot_floor", "proxy_names", "proxy_parts",
           "register_proxy", "synflow"]

#: A proxy: a network (built afresh, the proxy's to change) and its input shape -> a finite float.
Score = Callable[["nn.Module", tuple[int, ...]], float]


@dataclass(frozen=True)
class ZeroCostProxy:
    """A registered proxy (:func:`register_proxy`)."""

    name: str
    score: Score
    #: It changes the network it scores (SynFlow makes the weights positive): scored after the others.
    changes_network: bool = False
    #: ``(reads(network), what it reads, what it misses)``; None: any network (:meth:`ProxyScores.prepare`).
    needs: tuple[Callable[[nn.Module], bool], str, str] | None = None


_PROXIES: dict[str, ZeroCostProxy] = {}


def register_proxy(name: str, *, changes_network: bool = False,
                   needs: tuple[Callable[[nn.Module], bool], str, str] | None = None) -> Callable[[Score], Score]:
    """Function decorator: register ``score(network, input_shape) -> float`` as the proxy ``name``; another
    function under a taken name is an error (the same one again, e.g. reloaded, replaces it)."""
    if not isinstance(name, str) or not name or "+" in name or name == "none":
        raise HwAwareError(f"a zero-cost proxy's name must be a non-empty string without '+', not 'none'; got {name!r}")

    def decorate(score: Score) -> Score:
        old = _PROXIES[name].score if name in _PROXIES else score
        if (old.__module__, old.__qualname__) != (score.__module__, score.__qualname__):
            raise HwAwareError(f"zero-cost proxy name {name!r} is already used by {old.__module__}.{old.__qualname__}; "
                               "pick another name")
        _PROXIES[name] = ZeroCostProxy(name, score, changes_network, needs)
        return score

    return decorate


def proxy_names() -> tuple[str, ...]:
    """The registered proxies, in the order they were registered."""
    return tuple(_PROXIES)


def get_proxy(name: str) -> ZeroCostProxy:
    """The proxy registered as ``name``; an unknown name is a one-line error listing the known ones."""
    if not isinstance(name, str) or name not in _PROXIES:
        raise HwAwareError(f"unknown zero-cost proxy {name!r}; choose one of {', '.join(proxy_names())}")
    return _PROXIES[name]


def proxy_parts(text: str) -> tuple[ZeroCostProxy, ...]:
    """The proxies ``text`` names (``a+b``: both, in that order), each once."""
    parts = text.split("+") if isinstance(text, str) else []
    if not set(parts) <= set(_PROXIES) or len(set(parts)) != len(parts) or not parts:
        raise HwAwareError(f"unknown zero-cost proxy {text!r}; choose one of {', '.join(proxy_names())}, "
                           "or several joined by '+'")
    return tuple(map(get_proxy, parts))


def _input_shape(example_input: torch.Tensor | Sequence[int], what: str) -> tuple[int, ...]:
    shape = tuple(example_input.shape) if hasattr(example_input, "shape") else tuple(example_input)
    if not shape or not all(isinstance(v, int) and v > 0 for v in shape):
        raise HwAwareError(f"{what} needs an input shape of positive sizes such as (1, 3, 32, 32), got {shape}")
    return shape


def synflow(module: nn.Module, example_input: torch.Tensor | Sequence[int], *, in_place: bool = False) -> float:
    """The SynFlow score of ``module`` (module docstring); ``example_input`` is a tensor or a shape.

    The module is scored in float64 in eval mode (batch norm at its running statistics) with its
    weights' absolute values and its clipping activations (ReLU6, hard tanh) as ReLU, on a copy of it
    (``in_place``: on the module itself, which it changes).
    """
    import torch

    shape = _input_shape(example_input, "synflow")
    network = module if in_place else copy.deepcopy(module)
    _linearise(network)
    network.double().eval()
    with torch.no_grad():
        for p in network.parameters():
            p.abs_()
            p.grad = None
    with torch.enable_grad():
        out = network(torch.ones(shape, dtype=torch.float64))
        (out[0] if isinstance(out, tuple | list) else out).sum().backward()
    with torch.no_grad():
        score = float(sum((p * p.grad).abs().sum() for p in network.parameters() if p.grad is not None))
    if not math.isfinite(score):
        raise HwAwareError(f"the SynFlow score of a {type(module).__name__} overflowed float64; score a narrower "
                           "or shallower replica of the space (PPO option proxy_space_args)")
    return score


def _activations() -> tuple[tuple[type[nn.Module], ...], tuple[type[nn.Module], ...]]:
    """Those that clip, which SynFlow scores as ReLU (with positive weights and an all-ones input a ReLU network
    is linear, which is what SynFlow measures; ReLU6 would cut the flow wherever an activation passed 6; gates
    such as sigmoid stay: bounded, they keep a squeeze-and-excitation block's product finite), and those whose
    units :func:`naswot` reads (each positive exactly where its input is)."""
    from torch import nn

    return (nn.ReLU6, nn.Hardtanh, nn.Tanh), (nn.ReLU, nn.ReLU6, nn.Hardswish, nn.SiLU, nn.GELU, nn.LeakyReLU)


#: The ridge of :func:`naswot`'s kernel, per unit: a network whose units do not tell its inputs apart
#: (its output does not depend on them) scores low but finite, not minus infinity.
NASWOT_RIDGE = 1e-2


def naswot(module: nn.Module, example_input: torch.Tensor | Sequence[int], *, batch: int = 16, seed: int = 0,
           in_place: bool = False) -> float:
    """NASWOT (Mellor et al. 2021) without data: how differently the network's activations split inputs.

    ``batch`` Gaussian inputs of ``example_input``'s per-sample shape (from ``seed``) stand for a batch of data.
    Each unit after a ReLU-like activation (:func:`_activations`; functional activations are not seen) codes
    an input by whether its output is positive; ``K[i, j]`` counts the units on which inputs ``i`` and ``j``
    agree, and the score is ``log det(K + NASWOT_RIDGE * units * I)``. A network whose units cut its inputs'
    space into more regions trains better (the paper's finding on NAS-Bench-201). Scored in eval mode (batch
    norm at its running statistics) on a copy (``in_place``: the module itself)."""
    shape = _input_shape(example_input, "naswot")
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
    import torch

    network.eval()
    kernel = torch.zeros(batch, batch, dtype=torch.float64)
    units = 0

    def read(_: nn.Module, __: Any, out: torch.Tensor) -> None:
        nonlocal kernel, units
        codes = (out.detach().reshape(batch, -1) > 0).double()
        kernel += codes @ codes.T + (1 - codes) @ (1 - codes).T
        units += codes.shape[1]

    hooks = [m.register_forward_hook(read) for m in network.modules() if isinstance(m, _activations()[1])]
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
    """The lowest :func:`naswot` score of a batch of ``batch``: one unit on which every input agrees. A network
    without ReLU-like units (a linear one codes every input alike) scores it in :class:`ProxyScores`."""
    import torch

    kernel = torch.ones(batch, batch, dtype=torch.float64) + NASWOT_RIDGE * torch.eye(batch, dtype=torch.float64)
    return float(torch.linalg.slogdet(kernel)[1])


def _has_gates(network: nn.Module) -> bool:
    return any(isinstance(m, _activations()[1]) for m in network.modules())


def _linearise(network: nn.Module) -> None:
    from torch import nn

    for name, child in list(network.named_children()):
        if isinstance(child, _activations()[0]):
            setattr(network, name, nn.ReLU())
        else:
            _linearise(child)


@register_proxy("synflow", changes_network=True)
def _synflow_feature(network: nn.Module, shape: tuple[int, ...]) -> float:
    """``log(1 + SynFlow)`` (:func:`synflow`), scored in place: the network's weights are made positive."""
    return math.log1p(synflow(network, shape, in_place=True))


@register_proxy("naswot", needs=(_has_gates, "ReLU-like activation modules", "functional activations are not seen"))
def _naswot_feature(network: nn.Module, shape: tuple[int, ...]) -> float:
    """:func:`naswot`'s score; a network without ReLU-like units (or none that ran) codes every input alike:
    :func:`naswot_floor`, the lowest score."""
    score = _naswot(network, shape)
    return naswot_floor() if score is None else score


class ProxyScores:
    """A zero-cost proxy of each network of a space, cached per architecture (module docstring).

    ``named`` is the resolved space (:func:`~nni_hwaware.spaces.resolve.resolve_space`); its networks are
    built afresh (seed 0) and scored with an input of ``input_shape`` (default: the space's). A narrower
    replica of the space or a smaller input scores faster; a shallower one keeps less of what the score adds
    beside the costs (``benchmarks/nb201_proxy.py``). Called with architectures (``{label: value}``) it gives
    their log-scores; :attr:`seconds` and :attr:`computed` say what computing them cost."""

    def __init__(self, named: Any, proxy: str = "synflow", input_shape: Sequence[int] | None = None) -> None:
        #: The proxies scored (registered names), one column each when more than one.
        self.parts = tuple(p.name for p in proxy_parts(proxy))
        self.named, self.proxy = named, proxy
        self.input_shape = tuple(int(v) for v in (input_shape or named.input_shape))
        self.labels = list(named.choices())
        #: What the scores are of: the space, its constructor arguments and the input (saved with them).
        self.replica = json.dumps({"space": str(named.name), "space_args": named.kwargs,
                                   "input_shape": list(self.input_shape)}, sort_keys=True, default=str)
        self.cache: dict[tuple[str, ...], float | tuple[float, ...]] = {}
        self.seconds, self.computed = 0.0, 0
        self._prepared = False

    def prepare(self, arch: Mapping[str, Any]) -> None:
        """Drop a proxy beside others where ``arch``'s network (e.g. the reference) lacks what it reads (NASWOT:
        ReLU-like activation modules), with a warning; refuse it alone there, in one line."""
        if self._prepared or all(get_proxy(p).needs is None for p in self.parts):
            return
        try:
            network = self.build(arch)
        except HwAwareError:
            raise
        except Exception as err:  # a user's space can fail in any way: one line says where
            raise self._cannot(err) from None
        self._prepared = True  # settled once, on the first network asked (the search's reference)
        lacking = {p.name: p.needs for p in map(get_proxy, self.parts) if p.needs and not p.needs[0](network)}
        keep = [i for i, part in enumerate(self.parts) if part not in lacking]
        for name, (_, what, unseen) in lacking.items():
            if not keep:
                other = " or ".join(n for n in proxy_names() if get_proxy(n).needs is None) or "none"
                raise HwAwareError(f"{name} reads the units of {what}, and the networks of {self.named.name} have "
                                   f"none ({unseen}); use proxy: {other}")
            _logger.warning("%s reads %s and the networks of %s have none (%s): the zero-cost proxy is %s alone",
                            name, what, self.named.name, unseen, " and ".join(self.parts[i] for i in keep))
        if lacking:
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
        # those that read the network as built first, then those that change it, each but the last on a copy
        proxies = sorted(map(get_proxy, self.parts), key=lambda p: p.changes_network)
        values = {p.name: float(p.score(copy.deepcopy(network) if p.changes_network and p is not proxies[-1]
                                        else network, (1, *self.input_shape))) for p in proxies}
        scores = tuple(values[part] for part in self.parts)
        return scores[0] if len(scores) == 1 else scores

    @property
    def columns(self) -> list[str]:
        """The score columns of :meth:`save`'s file: ``log_score``, or ``log_score_<proxy>`` for each of several."""
        return ["log_score"] if len(self.parts) == 1 else [f"log_score_{part}" for part in self.parts]

    def build(self, arch: Mapping[str, Any]) -> nn.Module:
        """The network of ``arch``, weights from seed 0 (torch's global random state untouched); a space built by a
        constructor is built under NNI's ``model_context`` (what ``freeze`` does: only the chosen modules made)."""
        import torch

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
        with atomic_open(path, "w") as fh:
            writer = csv.writer(fh)
            writer.writerow([*self.labels, *self.columns, "proxy", "replica"])
            for key, value in self.cache.items():
                values = value if isinstance(value, tuple) else (value,)
                writer.writerow([*key, *map(repr, values), self.proxy, self.replica])

    def load(self, path: str | Path) -> int:
        """Add the scores :meth:`save` wrote (of this space and proxy); returns how many were read."""
        try:
            with open(path, encoding="utf-8", newline="") as fh:
                rows = list(csv.DictReader(fh))
        except OSError as err:
            raise HwAwareError(f"cannot read proxy scores {path}: {err.strerror or err}") from None
        if rows and rows[0].get("proxy", self.proxy) != self.proxy:
            raise HwAwareError(f"proxy scores {path} are of proxy {rows[0]['proxy']}, and this search scores "
                               f"{self.proxy}; score them with `nni-hwaware proxy --proxy {self.proxy}` or set "
                               f"proxy: {rows[0]['proxy']}")
        if rows and (missing := [c for c in [*self.labels, *self.columns] if c not in rows[0]]):
            raise HwAwareError(f"proxy scores {path} lack columns {missing}; they are of another space "
                               f"(this one's labels: {self.labels})")
        for n, row in enumerate(rows, start=2):
            if row.get("proxy", self.proxy) != self.proxy or row.get("replica", self.replica) != self.replica:
                raise HwAwareError(f"proxy scores {path} line {n} are of {row.get('proxy')} on {row.get('replica')}, "
                                   f"not of {self.proxy} on {self.replica}; score afresh (delete the file) or give "
                                   "the options they were scored with")
            values = [_number(row[column]) for column in self.columns]
            if bad := [c for c, v in zip(self.columns, values, strict=True) if not math.isfinite(v)]:
                raise HwAwareError(f"proxy scores {path} line {n}: {bad[0]} {row[bad[0]]!r} is not a number")
            self.cache[tuple(str(row[label]) for label in self.labels)] = values[0] if len(values) == 1 else tuple(values)
        return len(rows)

    def mean_ms(self) -> float:
        """Milliseconds per network scored (build and score)."""
        return 1000 * self.seconds / max(1, self.computed)


def _number(text: Any) -> float:
    try:
        return float(text)
    except (TypeError, ValueError):
        return math.nan


def _has_choices(network: nn.Module) -> bool:
    simplify = getattr(network, "simplify", None)
    return bool(simplify()) if callable(simplify) else False
