"""The choices of an NNI model space: its labels and values, and the same space with fewer.

:func:`space_choices` lists ``{label: values}`` of any ``ModelSpace`` (every label must
be categorical: ``LayerChoice``, ``Repeat`` depth, ``nni.choice`` arguments of NNI's
mutable layers); :func:`narrow_space` is what a pruned space is: a copy offering fewer
values (NNI cannot shrink a ``LayerChoice`` in place).
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from typing import Any

from torch import nn

from nni_hwaware.errors import HwAwareError
from nni_hwaware.nni_fixes import import_nni_nas

__all__ = ["allowed_values", "narrow_space", "space_choices"]

_nas = import_nni_nas()


def space_choices(space: nn.Module) -> dict[str, list[Any]]:
    """``{label: values}`` of a model space; every label must be categorical."""
    if not isinstance(space, _nas.MutableModule):
        raise HwAwareError(f"expected an NNI ModelSpace, got {type(space).__name__}")
    choices: dict[str, list[Any]] = {}
    for label, mutable in space.simplify().items():
        values = getattr(mutable, "values", None)
        if not isinstance(mutable, _categorical()) or values is None:
            raise HwAwareError(f"label {label!r} is a {type(mutable).__name__}, not a categorical choice; "
                               "use nni.choice(...) (a LayerChoice, Repeat depth or mutable layer argument)")
        choices[str(label)] = [_plain(v) for v in values]  # plain str: NNI's labels are a subclass
    return choices


def _plain(value: Any) -> Any:
    """A value as a plain Python type (NNI gives str subclasses), so it pickles and saves anywhere."""
    for kind in (bool, int, float, str):
        if isinstance(value, kind):
            return kind(value)
    return value


def _categorical() -> type:
    from nni.mutable import Categorical

    return Categorical


def narrow_space(space: Any, allowed: Mapping[str, Sequence[Any]]) -> Any:
    """A copy of ``space`` whose labels offer only the ``allowed`` values.

    ``LayerChoice``\\ s lose the dropped candidates (modules included, so a one-shot
    supernet of the narrowed space holds only what is kept); every other categorical
    choice (``Repeat`` depth, widths and kernels of mutable layers) keeps only the
    allowed values. ``space.freeze(sample)`` works for every sample of the narrowed
    space, and NNI's strategies sample only from it.
    """
    nas = import_nni_nas()
    from nni.mutable import Categorical

    narrowed = copy.deepcopy(space)
    choices = narrowed.simplify()
    unknown = sorted(set(allowed) - set(choices))
    if unknown:
        raise HwAwareError(f"cannot narrow labels {unknown}: the space has no such choices")
    for label, values in allowed.items():
        present = list(choices[label].values)
        kept = [v for v in present if any(v == a or str(v) == str(a) for a in values)]
        if not kept:
            raise HwAwareError(f"label {label!r}: none of {list(values)} is among its values {present}")
        allowed_here = {label: kept}
        for module in narrowed.modules():
            if isinstance(module, nas.LayerChoice) and module.label == label:
                for name in [n for n in module.names if n not in kept]:
                    module._modules.pop(str(name))
                module.names = list(kept)
                module.choice.values = list(kept)
                module.choice.weights = [1 / len(kept)] * len(kept)
                if module.choice.default_value not in kept:
                    module.choice.default_value = kept[0]
                module._dry_run_choice = module.choice.default_value if module.choice.default_value in kept else kept[0]
        for mutable in narrowed.leaf_mutables(lambda m: isinstance(m, Categorical)):
            if isinstance(mutable, Categorical) and mutable.label == label:
                mutable.values = list(allowed_here[label])
                mutable.weights = [1 / len(kept)] * len(kept)
                if mutable.default_value not in kept:
                    mutable.default_value = kept[0]
    return narrowed


def allowed_values(search_space: Mapping[str, Any], choices: Mapping[str, Sequence[Any]],
                   space_name: str) -> dict[str, list[Any]]:
    """The values an NNI search space (``{label: {_type: choice, _value: [...]}}``) allows of each label.

    Every parameter must be a ``choice`` named like a label, with values the space has,
    and every label must be there; each mistake is one line naming it.
    """
    allowed: dict[str, list[Any]] = {}
    for name, spec in search_space.items():
        kind = spec.get("_type") if isinstance(spec, Mapping) else None
        if kind != "choice":
            raise HwAwareError(f"search space parameter {name!r} is {kind!r}; the PPO tuner takes only 'choice'")
        if not isinstance(spec.get("_value"), list):
            raise HwAwareError(f"search space parameter {name!r} needs '_value': the list of its values")
        if name not in choices:
            raise HwAwareError(f"search space parameter {name!r} is not a label of space {space_name!r} "
                               f"(labels: {', '.join(choices)})")
        wanted = [str(v) for v in spec["_value"]]
        unknown = sorted(set(wanted) - {str(v) for v in choices[name]})
        if unknown:
            raise HwAwareError(f"search space parameter {name!r} has values {unknown} that space "
                               f"{space_name!r} does not have; its values: {list(choices[name])}")
        allowed[name] = [v for v in choices[name] if str(v) in wanted]
    missing = [label for label in choices if label not in allowed]
    if missing:
        raise HwAwareError(f"the search space lacks labels {missing} of space {space_name!r}")
    return allowed
