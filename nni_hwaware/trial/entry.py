"""How every trial of the package starts and fails: supervised, with one-line errors.

:func:`trial_main` is the ``__main__`` of each trial module: under NNI it runs the
trial in a supervised child (:func:`nni_hwaware.nni_fixes.supervise_trial`, fixes 8
and 9), and :func:`run_trial` turns the errors a user can act on into one line on
stderr and an exit status NNI shows as ``FAILED``.
"""

from __future__ import annotations

import gc
import sys
from collections.abc import Callable

from nni_hwaware.errors import HwAwareError

__all__ = ["OUT_OF_MEMORY", "run_trial", "trial_main"]

#: Exit status of a trial that ran out of memory (2: any other clear error).
OUT_OF_MEMORY = 3


def _out_of_memory(err: BaseException) -> bool:
    import torch

    if isinstance(err, (MemoryError, torch.OutOfMemoryError)):
        return True
    text = str(err)
    return isinstance(err, RuntimeError) and any(
        words in text for words in ("out of memory", "not enough memory", "can't allocate memory"))


def run_trial(prog: str, body: Callable[[], int]) -> int:
    """``body()``; a :class:`HwAwareError` or running out of memory is one line on stderr and exit 2 / 3."""
    try:
        return body()
    except HwAwareError as err:
        print(f"{prog}: error: {err}", file=sys.stderr)
        return 2
    except (MemoryError, RuntimeError) as err:
        if not _out_of_memory(err):
            raise
        first = (str(err).strip().splitlines() or [type(err).__name__])[0]
        print(f"{prog}: error: out of memory ({first[:200]}); lower the batch size "
              "(--train '{\"batch_size\": 32}') or train on a device with more memory", file=sys.stderr)
        return OUT_OF_MEMORY


def trial_main(module: str, main: Callable[[], int]) -> None:
    """Exit with ``main()``'s status, run in a supervised child of ``python -m module`` under NNI."""
    from nni_hwaware.nni_fixes import supervise_trial

    code = supervise_trial([sys.executable, "-m", module, *sys.argv[1:]])
    code = main() if code is None else code
    # the interpreter's last collections walk every object torch and NNI made at import: about
    # 1 s a trial process, a second of every trial; frozen objects are not walked
    gc.freeze()
    raise SystemExit(code)
