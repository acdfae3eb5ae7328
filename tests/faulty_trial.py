"""The real trial (``python -m nni_hwaware.trial``) with a fault injected, for tests/test_failures.py.

``HWAWARE_TEST_FAULTS`` maps NNI trial sequence ids to a fault:

* ``crash``: an exception before training (a bug in the trial, a bad node);
* ``kill``: SIGKILL after the first epoch's report, as the kernel's OOM killer does;
* ``oom``: the address space is limited, then training allocates beyond it, so a
  real allocation fails (MemoryError / torch's "not enough memory");
* ``nan``: the training loss becomes NaN (a diverging network).

Any other trial runs unchanged.
"""

from __future__ import annotations

import json
import os
import resource
import signal
import sys

from nni_hwaware.nni_fixes import supervise_trial

if __name__ == "__main__":  # as python -m nni_hwaware.trial does, before importing torch
    code = supervise_trial([sys.executable, __file__, *sys.argv[1:]])
    if code is not None:
        sys.exit(code)

import nni
import torch

from nni_hwaware.trial.run import main


def _inject(fault: str) -> None:
    if fault == "crash":
        raise RuntimeError("injected crash before training")
    if fault == "kill":
        report = nni.report_intermediate_result

        def report_then_die(metric: object) -> None:
            report(metric)
            os.kill(os.getpid(), signal.SIGKILL)

        nni.report_intermediate_result = report_then_die
    elif fault == "oom":
        forward = torch.nn.Module.__call__

        def hungry(self: torch.nn.Module, *args: object, **kwargs: object) -> object:
            with open("/proc/self/status") as fh:
                size_kb = next(int(line.split()[1]) for line in fh if line.startswith("VmSize:"))
            limit = (size_kb + 256 * 1024) * 1024
            resource.setrlimit(resource.RLIMIT_AS, (limit, resource.getrlimit(resource.RLIMIT_AS)[1]))
            torch.zeros(1 << 31, dtype=torch.float32)  # 8 GiB: beyond the limit
            return forward(self, *args, **kwargs)

        torch.nn.Module.__call__ = hungry
    elif fault == "nan":
        loss = torch.nn.functional.cross_entropy

        def diverged(*args: object, **kwargs: object) -> torch.Tensor:
            return loss(*args, **kwargs) * float("nan")

        torch.nn.functional.cross_entropy = diverged


if __name__ == "__main__":
    faults = json.loads(os.environ.get("HWAWARE_TEST_FAULTS", "{}"))
    fault = faults.get(str(nni.get_sequence_id()))
    if fault:
        _inject(fault)
    sys.exit(main(sys.argv[1:]))
