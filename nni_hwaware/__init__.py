"""Hardware-aware neural architecture search for Microsoft NNI.

Importing the package checks that the installed stack is one NNI 3.0 runs on
(see :mod:`nni_hwaware.nni_fixes`) and imports nothing heavy; import the
submodules you use (``nni_hwaware.cost_table``, ``nni_hwaware.spaces``, ...).
"""

from __future__ import annotations

from importlib import metadata as _metadata

from nni_hwaware.nni_fixes import check_environment as _check_environment
from nni_hwaware.nni_fixes import lazy_evaluator_shortcut as _lazy_evaluator_shortcut

__version__ = _metadata.version("nni-hwaware")
__all__ = ["__version__"]

_check_environment()
_lazy_evaluator_shortcut()
