"""Name any NNI model space: the project's spaces, NNI's hub spaces, or a user's own.

``--space`` on the command line and ``space:`` in YAML take:

* a registered name (``digits``, ``digits_tiny``, ``cifar10_resnet50``) or a space JSON;
* ``nni:<hub space>``, one of NNI's spaces in ``nni.nas.hub.pytorch`` (``nni:NasBench201``,
  ``nni:ProxylessNAS``, ``nni:MobileNetV3Space``, ``nni:ShuffleNetSpace``), with
  keyword arguments for its constructor;
* ``module:callable``, any importable callable that returns an NNI ``ModelSpace`` (a
  class or a factory), with keyword arguments.

From Python, pass the ``ModelSpace`` object itself. What the cost model, the
strategies and the reports need besides the space is a :class:`NamedSpace`: the
per-sample input shape, the number of classes, the data set it trains on and the
**reference** network that budgets ("60 %") and reports compare with. A space
says its own with attributes (``input_shape``, ``num_classes``, ``dataset``,
``reference``), keyword ``input_shape=...`` etc. override them, and NNI's hub
spaces have defaults here (small widths, 32x32 inputs: they run on a CPU). Without
a reference, it is the network whose every label takes its most expensive value
(:meth:`nni_hwaware.cost_model.SpaceCostModel.reference`).
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import importlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from nni_hwaware.errors import HwAwareError

__all__ = ["HUB_SPACES", "NamedSpace", "resolve_space"]

#: NNI hub spaces: constructor defaults, input shape, and the reference network
#: (a sample, or "largest": every label at its most expensive value).
HUB_SPACES: dict[str, dict[str, Any]] = {
    "NasBench201": {"kwargs": {"num_labels": 10}, "input_shape": (3, 32, 32),
                    "reference": "conv_3x3"},  # every edge a 3x3 conv: the largest cell
    "ProxylessNAS": {"kwargs": {"num_labels": 10, "width_mult": 0.25}, "input_shape": (3, 32, 32),
                     "reference": "largest"},
    "MobileNetV3Space": {"kwargs": {"num_labels": 10}, "input_shape": (3, 32, 32), "reference": "largest"},
    "ShuffleNetSpace": {"kwargs": {"num_labels": 10}, "input_shape": (3, 32, 32), "reference": "largest"},
}
_OPTIONS = ("input_shape", "num_classes", "dataset", "reference")


@dataclass
class NamedSpace:
    """A model space and what searching it needs besides (see the module docstring)."""

    name: str
    #: The space (built on first use from :attr:`factory` when not given: the project's
    #: spaces are only built where a supernet is needed).
    _space: nn.Module | None
    #: Per-sample input shape, e.g. (3, 32, 32).
    input_shape: tuple[int, ...]
    num_classes: int = 10
    dataset: str = "digits"
    #: The reference network: a sample, or "largest".
    reference: Any = "largest"
    kwargs: dict[str, Any] = field(default_factory=dict)
    #: The project's spaces: their config (what block cost tables are read with).
    config: Any = None
    #: Builds the space afresh (its constructor: weights initialised from torch's current seed);
    #: None for a space given as an object.
    factory: Callable[[], nn.Module] | None = field(default=None, repr=False, compare=False)

    @property
    def space(self) -> nn.Module:
        """The NNI model space."""
        if self._space is None:
            if self.factory is None:
                raise HwAwareError(f"space {self.name!r} has neither a space nor a factory")
            self._space = self.factory()
        return self._space

    def dummy_input(self) -> torch.Tensor:
        """One input of the space, batch 1 (seeded, the global random state untouched)."""
        generator = torch.Generator().manual_seed(0)
        return torch.randn((1, *self.input_shape), generator=generator)

    def choices(self) -> dict[str, list[Any]]:
        """``{label: values}`` of the space, in its order."""
        if getattr(self, "_choices", None) is None:
            from nni_hwaware.spaces.choices import space_choices

            self._choices = ({spec.label: list(spec.candidates) for spec in self.config.layer_specs()}
                             if self.config is not None else space_choices(self.space))
        return dict(self._choices)

    def check_architecture(self, sample: Mapping[str, Any]) -> dict[str, Any]:
        """``sample`` in the space's label order if it fits, else one line saying what does not."""
        choices = self.choices()
        missing = [label for label in choices if label not in sample]
        extra = [label for label in sample if label not in choices and not str(label).startswith("_")]
        if missing or extra:
            raise HwAwareError(f"architecture does not fit space {self.name!r}: missing labels {missing}, "
                               f"unknown labels {extra}")
        out = {}
        for label, values in choices.items():
            match = [v for v in values if v == sample[label] or str(v) == str(sample[label])]
            if not match:
                raise HwAwareError(f"architecture does not fit space {self.name!r}: {label}={sample[label]!r}, "
                                   f"allowed: {values}")
            out[label] = match[0]
        return out

    def supernet(self) -> nn.Module:
        """The space built afresh, its weights initialised from torch's current seed."""
        if self.factory is not None:
            return self.factory()
        space = copy.deepcopy(self.space)
        _reset_parameters(space)
        return space

    def build(self, sample: Mapping[str, Any]) -> nn.Module:
        """One network of the space, its weights initialised afresh from torch's current seed."""
        sample = self.check_architecture(sample)
        if self.config is not None:  # the project's spaces build only the sampled blocks
            from nni_hwaware.spaces.network import build_network

            return build_network(self.config, sample)
        if self.factory is not None:
            return self.factory().freeze(sample)
        network = copy.deepcopy(self.space).freeze(sample)  # NNI's freeze hands out the space's own modules
        _reset_parameters(network)
        return network

    def narrowed(self, allowed: Mapping[str, Any]) -> NamedSpace:
        """The same space offering only the ``allowed`` values of its labels (a pruned space)."""
        from nni_hwaware.spaces.choices import narrow_space

        if self.config is not None:  # the project's spaces: a config with fewer candidates per layer
            from nni_hwaware.spaces.network import BlockChoiceSpace

            config = self.config.with_layer_candidates({k: [str(v) for v in vals] for k, vals in allowed.items()})
            return dataclasses.replace(self, _space=None, config=config,
                                       factory=lambda: BlockChoiceSpace(config.to_dict()))
        factory = self.factory
        return dataclasses.replace(
            self, _space=narrow_space(self.space, allowed),
            factory=None if factory is None else (lambda: narrow_space(factory(), allowed)))

    def baseline(self, cost_model: Any = None) -> dict[str, Any]:
        """The reference network as a sample (``"largest"`` needs the space's cost model)."""
        if isinstance(self.reference, Mapping):
            return self.check_architecture(self.reference)
        if self.reference == "largest":
            if cost_model is None:
                raise HwAwareError(f"space {self.name!r}: the reference 'largest' needs the cost model")
            return self.check_architecture(cost_model.reference("largest"))
        return self.check_architecture(dict.fromkeys(self.choices(), self.reference))


def _reset_parameters(module: nn.Module) -> None:
    for sub in module.modules():
        reset = getattr(sub, "reset_parameters", None)
        if callable(reset):
            reset()


def _check_shape(name: str, shape: Any) -> tuple[int, ...]:
    if isinstance(shape, str):
        try:
            shape = tuple(int(v) for v in shape.split("x"))
        except ValueError:
            shape = None
    if not isinstance(shape, tuple | list) or not shape or not all(isinstance(v, int) and v > 0 for v in shape):
        raise HwAwareError(f"space {name!r}: input_shape must be per-sample sizes such as [3, 32, 32] "
                           f"or '3x32x32', got {shape!r}")
    return tuple(shape)


def resolve_space(spec: str | nn.Module | NamedSpace | Any, **kwargs: Any) -> NamedSpace:
    """The space ``spec`` names (module docstring); ``kwargs`` go to its constructor.

    ``input_shape``, ``num_classes``, ``dataset`` and ``reference`` among ``kwargs`` are
    not constructor arguments: they override what the space says of itself.
    """
    from nni_hwaware.spaces.skeleton import SpaceConfig

    if isinstance(spec, NamedSpace):
        if kwargs:
            raise HwAwareError(f"space {spec.name!r} is already resolved; it takes no arguments")
        return spec
    options = {k: kwargs.pop(k) for k in _OPTIONS if k in kwargs}
    defaults: dict[str, Any] = {}
    from nni_hwaware.spaces.network import BlockChoiceSpace

    if isinstance(spec, SpaceConfig | BlockChoiceSpace):
        return _project_space(spec if isinstance(spec, SpaceConfig) else spec.config, options)
    factory = None
    if isinstance(spec, nn.Module):
        space, name = spec, type(spec).__name__
    elif not isinstance(spec, str) or not spec:
        raise HwAwareError(f"a space is a name, 'nni:<hub space>', 'module:callable' or a ModelSpace; got {spec!r}")
    elif spec.startswith("nni:"):
        hub = spec[4:]
        if hub not in HUB_SPACES:
            raise HwAwareError(f"unknown NNI hub space {hub!r}; supported: "
                               f"{', '.join('nni:' + n for n in HUB_SPACES)} (or module:callable)")
        module = importlib.import_module("nni.nas.hub.pytorch")
        entry = HUB_SPACES[hub]
        defaults = {"input_shape": entry["input_shape"], "reference": entry["reference"],
                    "num_classes": int({**entry["kwargs"], **kwargs}.get("num_labels", 10))}
        arguments = {**entry["kwargs"], **kwargs}
        space = _construct(spec, getattr(module, hub), arguments)
        factory = functools.partial(getattr(module, hub), **arguments)
        name = spec
    elif ":" in spec:
        module_name, _, attr = spec.partition(":")
        try:
            target = getattr(importlib.import_module(module_name), attr)
        except (ImportError, AttributeError) as err:
            raise HwAwareError(f"cannot import space {spec!r}: {err}; give 'module:callable' of an importable "
                               "module (is its folder on PYTHONPATH?)") from None
        space, name = _construct(spec, target, kwargs), spec
        factory = functools.partial(target, **kwargs)
    else:
        from nni_hwaware.spaces.registry import get_space_config

        if kwargs:
            raise HwAwareError(f"space {spec!r} takes no arguments; got {sorted(kwargs)}")
        narrowed = _narrowed_file(spec)
        if narrowed is not None:
            base = resolve_space(narrowed["space"], **{**dict(narrowed.get("space_args") or {}), **options})
            return base.narrowed(narrowed["allowed"])
        return _project_space(get_space_config(spec), options)
    from nni_hwaware.nni_fixes import import_nni_nas

    if not isinstance(space, import_nni_nas().ModelSpace):
        raise HwAwareError(f"space {name!r} is a {type(space).__name__}, not an NNI ModelSpace")
    found = {k: getattr(space, k) for k in _OPTIONS if getattr(space, k, None) is not None
             and not callable(getattr(space, k))}
    values = {**defaults, **found, **options}
    if "input_shape" not in values:
        raise HwAwareError(f"space {name!r} does not say its input shape; give input_shape (e.g. [3, 32, 32]) "
                           "or set an input_shape attribute on the space")
    return NamedSpace(name=name, _space=space, input_shape=_check_shape(name, values["input_shape"]),
                      num_classes=int(values.get("num_classes", 10)), dataset=str(values.get("dataset", "digits")),
                      reference=values.get("reference", "largest"), kwargs=dict(kwargs), factory=factory)


def _narrowed_file(spec: str) -> dict[str, Any] | None:
    """A pruned space of any NNI space (``nni-hwaware prune``'s JSON with ``allowed``), else None."""
    from pathlib import Path

    from nni_hwaware.files import read_json

    if not spec.endswith(".json") or not Path(spec).is_file():
        return None
    data = read_json(spec, "space file")
    if not isinstance(data, dict) or "allowed" not in data:
        return None
    if not isinstance(data.get("space"), str) or not isinstance(data["allowed"], dict):
        raise HwAwareError(f"space file {spec} needs 'space' (a name) and 'allowed' (label -> values)")
    return data


def _project_space(config: Any, options: Mapping[str, Any]) -> NamedSpace:
    """One of the project's ResNet-skeleton spaces, an ordinary ModelSpace like any other."""
    from nni_hwaware.spaces.network import BlockChoiceSpace

    values = {"input_shape": config.input_shape, "num_classes": config.num_classes, "dataset": config.dataset,
              "reference": config.baseline(), **options}
    return NamedSpace(name=config.name, _space=None,
                      input_shape=_check_shape(config.name, values["input_shape"]),
                      num_classes=int(values["num_classes"]), dataset=str(values["dataset"]),
                      reference=values["reference"], config=config,
                      factory=lambda: BlockChoiceSpace(config.to_dict()))


def _construct(spec: str, target: Any, kwargs: Mapping[str, Any]) -> nn.Module:
    if not callable(target):
        raise HwAwareError(f"space {spec!r} is not callable; name a ModelSpace class or a function returning one")
    try:
        return target(**kwargs)
    except (TypeError, ValueError, AssertionError) as err:
        raise HwAwareError(f"cannot build space {spec!r} with arguments {dict(kwargs)}: "
                           f"{' '.join(str(err).split()) or type(err).__name__}") from None
