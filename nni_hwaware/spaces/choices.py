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

__all__ = ["narrow_space", "space_choices"]

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
