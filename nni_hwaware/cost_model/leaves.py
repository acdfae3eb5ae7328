"""Break any NNI model space into leaves: the things a cost table measures.

One forward of the supernet with NNI's symbolic shapes
(``nni.nas.profiler.pytorch.utils.submodule_input_output_shapes``, shapes
simplified with sympy so each depends only on the labels it truly depends on)
gives every submodule's input and output shapes as expressions over the space's
labels. The space is then walked from the top:

* a ``LayerChoice`` branches: each candidate is walked under ``label == value``;
* a ``Repeat`` with a depth choice branches: its ``k``-th block is walked under
  ``depth >= k``;
* a submodule with no choice inside is a **leaf** (a whole sub-block: its residual
  adds, SE multiplies and channel shuffles are inside what is measured);
* so is one of NNI's mutable layers (``MutableConv2d``, ``MutableLinear``, ...) or
  any other module whose own choices are not in its children;
* everything else (a plain container, a cell) is walked into. What such a container
  computes outside its children (a cell's sum of edges, a residual add around a
  choice) is not in any leaf: profiling measures a few whole networks and adds the
  median gap as a per-network term (:mod:`nni_hwaware.cost_model.profile`).

For each leaf, every combination of the labels its module and input shapes depend
on is frozen into a concrete module and input shape: a :class:`LeafEntry`, keyed by
the module's spec (class, ``repr``, plain attributes) and its shapes. Identical
entries anywhere in the space are measured once. A :class:`LeafTerm` says which
entry a leaf is for each combination of its labels (and the branch conditions it
sits under); the cost model is the sum of these terms.
"""

from __future__ import annotations

import hashlib
import itertools
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from nni_hwaware.errors import HwAwareError
from nni_hwaware.nni_fixes import import_nni_nas, register_shape_formulas
from nni_hwaware.spaces.choices import space_choices

__all__ = ["LeafEntry", "LeafTerm", "SpaceLeaves", "find_leaves"]

_nas = import_nni_nas()


@dataclass(frozen=True)
class LeafEntry:
    """One concrete module at one input shape: a row of the cost table."""

    #: ``module.class: repr | attributes`` on one line.
    spec: str
    #: Per-sample input shapes (without the batch dimension), one per tensor input.
    input_shapes: tuple[tuple[int, ...], ...]
    output_shape: tuple[int, ...]

    @property
    def block(self) -> str:
        """The table's ``block`` name: class name and a hash of spec and shapes."""
        digest = hashlib.sha1(f"{self.spec}|{self.input_shapes}|{self.output_shape}".encode()).hexdigest()
        return f"{self.spec.split(':', 1)[0].rsplit('.', 1)[-1]}-{digest[:12]}"

    @property
    def shape_str(self) -> str:
        """Input shapes as stored in the table: ``"16x8x8"``, ``";"`` between inputs."""
        return ";".join("x".join(map(str, s)) for s in self.input_shapes)


@dataclass
class LeafTerm:
    """A leaf of the space: which entry it is for each combination of its labels."""

    path: str
    #: Labels the leaf's cost depends on, in the space's order.
    labels: tuple[str, ...]
    #: Value-index tuple (over ``labels``) -> entry index; absent: the leaf is not in that network.
    entries: dict[tuple[int, ...], int] = field(default_factory=dict)


@dataclass
class SpaceLeaves:
    """The leaves of a space, its distinct entries and the modules to measure them with."""

    choices: dict[str, list[Any]]
    terms: list[LeafTerm]
    entries: list[LeafEntry]
    #: One module per entry (same order), ready to measure.
    modules: list[nn.Module]
    #: Per-sample shape of the space's input.
    input_shape: tuple[int, ...]

    def occurrences(self) -> int:
        """How many (leaf, label combination) pairs the entries stand for."""
        return sum(len(t.entries) for t in self.terms)


def _module_spec(module: nn.Module) -> str:
    attrs = []
    for name, sub in module.named_modules():
        plain = {k: v for k, v in vars(sub).items()
                 if not k.startswith("_") and k != "training"
                 and isinstance(v, int | float | str | bool | tuple | type(None))}
        if plain:
            attrs.append(f"{name}:{sorted(plain.items())}")
    text = " ".join(repr(module).split())
    return f"{type(module).__module__}.{type(module).__qualname__}: {text} | {' '.join(attrs)}"


def _own_labels(module: nn.Module) -> dict[str, Any]:
    if isinstance(module, _nas.MutableModule):
        return dict(module.simplify())
    return {}


def _has_choices(module: nn.Module, memo: dict[int, bool]) -> bool:
    key = id(module)
    if key not in memo:
        memo[key] = bool(_own_labels(module)) or any(_has_choices(c, memo) for c in module.children())
    return memo[key]


def _flat_shapes(path: str, value: Any) -> list[Any]:
    from nni.nas.profiler.pytorch.utils.shape import MutableShape
    from torch.utils._pytree import tree_flatten

    flat, _ = tree_flatten(value)
    shapes = []
    for item in flat:
        if isinstance(item, MutableShape | torch.Size):
            shapes.append(item)
        elif isinstance(item, tuple) and all(isinstance(v, int) for v in item):
            shapes.append(torch.Size(item))
        else:
            raise HwAwareError(
                f"module {path!r} takes a non-tensor input ({type(item).__name__}); it cannot be measured on "
                "its own: make its parent a leaf (nni.nas.profiler.pytorch.utils.profiler_leaf_module) or "
                "pass it as a constructor argument")
    return shapes


def _shape_labels(shapes: Sequence[Any]) -> set[str]:
    labels: set[str] = set()
    for shape in shapes:
        if hasattr(shape, "simplify"):
            labels |= set(shape.simplify())
    return labels


def _freeze_shape(shape: Any, sample: Mapping[str, Any]) -> tuple[int, ...]:
    return tuple(int(v) for v in (shape.freeze(dict(sample)) if hasattr(shape, "freeze") else shape))


class _ExtraInputs(nn.Module):
    """Calls a multi-input leaf with fixed tensors for every input but the first."""

    def __init__(self, module: nn.Module, shapes: Sequence[tuple[int, ...]]) -> None:
        super().__init__()
        self.module = module
        generator = torch.Generator().manual_seed(0)
        self.shapes = list(shapes)
        self.extras = [torch.randn((1, *s), generator=generator) for s in shapes]

    def forward(self, x: torch.Tensor) -> Any:
        extras = [e.expand(x.shape[0], *e.shape[1:]).to(x.device) for e in self.extras]
        return self.module(x, *extras)


class _Walker:
    def __init__(self, space: nn.Module, shapes: dict[str, Any], choices: dict[str, list[Any]]) -> None:
        self.space, self.shapes, self.choices = space, shapes, choices
        self.order = {label: i for i, label in enumerate(choices)}
        self.memo: dict[int, bool] = {}
        self.terms: list[LeafTerm] = []
        self.entries: dict[LeafEntry, int] = {}
        self.modules: list[nn.Module] = []

    def walk(self, path: str, module: nn.Module, context: dict[str, frozenset[Any]]) -> None:
        if isinstance(module, _nas.LayerChoice):
            label = module.label
            for name in module.names:
                self.walk(_join(path, str(name)), module[name], _narrow(context, label, {name}))
            return
        if isinstance(module, _nas.Repeat):
            depth = module.depth_choice
            for k, block in enumerate(module.blocks, start=1):
                sub = _join(path, f"blocks.{k - 1}")
                if isinstance(depth, int):
                    self.walk(sub, block, context)
                    continue
                label = getattr(depth, "label", None)
                if label not in self.choices:
                    raise HwAwareError(f"Repeat {path!r}: its depth must be one categorical choice "
                                       f"(nni.choice), got {depth!r}")
                allowed = {v for v in self.choices[label] if v >= k}
                if allowed:
                    self.walk(sub, block, _narrow(context, label, allowed))
            return
        if isinstance(module, _nas.InputChoice):
            return  # selects one of its inputs: costs nothing of its own
        children = list(module.named_children())
        own = _own_labels(module)
        child_choices = any(_has_choices(c, self.memo) for _, c in children)
        if path and (not _has_choices(module, self.memo) or (own and not child_choices)
                     or isinstance(module, _nas.ParametrizedModule)):
            if path in self.shapes:
                self.leaf(path, module, context)
                return
            if not children:
                return  # never called in the forward pass: not part of any network
        for name, child in children:
            self.walk(_join(path, name), child, context)

    def leaf(self, path: str, module: nn.Module, context: dict[str, frozenset[Any]]) -> None:
        inputs, output = self.shapes[path]
        in_shapes = _flat_shapes(path, inputs)
        if not in_shapes:
            raise HwAwareError(f"module {path!r} takes no tensor input; it cannot be measured on its own")
        out_shapes = _flat_shapes(path, output) if output is not None else []
        depends = set(_own_labels(module)) | _shape_labels(in_shapes) | _shape_labels(out_shapes[:1])
        unknown = sorted(depends - set(self.choices))
        if unknown:
            raise HwAwareError(f"module {path!r} depends on {unknown}, which are not categorical choices of "
                               "the space (every label must be an nni.choice)")
        labels = tuple(sorted(depends | set(context), key=self.order.__getitem__))
        dep = tuple(label for label in labels if label in depends)
        term = LeafTerm(path, labels)
        cache: dict[tuple[Any, ...], int] = {}
        for at in itertools.product(*(range(len(self.choices[label])) for label in labels)):
            sample = {label: self.choices[label][j] for label, j in zip(labels, at, strict=True)}
            if any(sample[label] not in allowed for label, allowed in context.items()):
                continue
            key = tuple(sample[label] for label in dep)
            if key not in cache:
                cache[key] = self.entry(path, module, {label: sample[label] for label in dep},
                                        in_shapes, out_shapes)
            term.entries[at] = cache[key]
        self.terms.append(term)

    def entry(self, path: str, module: nn.Module, sample: dict[str, Any], in_shapes: list[Any],
              out_shapes: list[Any]) -> int:
        frozen = module.freeze(sample) if _own_labels(module) else module
        shapes = [_freeze_shape(s, sample) for s in in_shapes]
        if any(len(s) < 2 for s in shapes):
            raise HwAwareError(f"module {path!r} has an input of shape {shapes}; leaves need a batch "
                               "dimension and at least one more")
        per_sample = tuple(s[1:] for s in shapes)
        output = _freeze_shape(out_shapes[0], sample)[1:] if out_shapes else ()
        entry = LeafEntry(_module_spec(frozen), per_sample, output)
        if entry not in self.entries:
            self.entries[entry] = len(self.modules)
            built = frozen if len(per_sample) == 1 else _ExtraInputs(frozen, per_sample[1:])
            self.modules.append(built)
        return self.entries[entry]


def _join(path: str, name: str) -> str:
    return f"{path}.{name}" if path else name


def _narrow(context: dict[str, frozenset[Any]], label: str, allowed: set[Any]) -> dict[str, frozenset[Any]]:
    out = dict(context)
    out[label] = frozenset(allowed) & out[label] if label in out else frozenset(allowed)
    return out


def find_leaves(space: nn.Module, dummy_input: Any) -> SpaceLeaves:
    """The leaves of ``space`` for ``dummy_input`` (a tensor of the space's input, batch 1).

    The space is put in eval mode for the symbolic forward (BatchNorm on a 1x1 map
    at batch 1 is fine there) and back after.
    """
    from nni.nas.profiler.pytorch.utils import ShapeTensor, submodule_input_output_shapes
    from nni.nas.profiler.pytorch.utils._expression import recursive_simplification

    register_shape_formulas()
    choices = space_choices(space)
    if not isinstance(dummy_input, torch.Tensor) or dummy_input.dim() < 2:
        raise HwAwareError("dummy_input must be a tensor with a batch dimension, e.g. torch.randn(1, 3, 32, 32)")
    was_training = space.training
    space.eval()
    quiet = logging.getLogger("nni")
    level = quiet.level
    quiet.setLevel(logging.ERROR)
    try:
        shapes = submodule_input_output_shapes(space, ShapeTensor(dummy_input[:1], True))
        shapes = recursive_simplification(shapes)
    except (RuntimeError, TypeError, ValueError, IndexError) as err:
        first = str(err).splitlines()[0] if str(err) else type(err).__name__
        raise HwAwareError(
            f"cannot trace the space with an input of shape {tuple(dummy_input.shape)}: {first} "
            "(check the dummy input's shape; a module without a shape formula needs a `_shape_forward` "
            "method or nni.nas.profiler.pytorch.utils.register_shape_inference_formula)") from None
    finally:
        quiet.setLevel(level)
        space.train(was_training)
    walker = _Walker(space, shapes, choices)
    walker.walk("", space, {})
    return SpaceLeaves(choices, walker.terms, list(walker.entries), walker.modules,
                       tuple(dummy_input.shape[1:]))
