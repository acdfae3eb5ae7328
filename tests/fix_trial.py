"""A torch-free trial for the tests of nni_fixes 8 and 9: reports its parameter ``x``.

``FIX_TEST_FAULTS`` maps sequence ids to ``crash-before-asking`` (exits before asking
NNI for parameters) or ``sigkill`` (killed by SIGKILL after asking). With
``--supervised`` the trial runs under :func:`nni_hwaware.nni_fixes.supervise_trial`.
"""

from __future__ import annotations

import json
import os
import signal
import sys

from nni_hwaware.nni_fixes import next_parameters, supervise_trial

if __name__ == "__main__":
    if "--supervised" in sys.argv:
        code = supervise_trial([sys.executable, __file__])
        if code is not None:
            sys.exit(code)
    import nni

    fault = json.loads(os.environ.get("FIX_TEST_FAULTS", "{}")).get(str(nni.get_sequence_id()))
    if fault == "crash-before-asking":
        sys.exit(1)
    params = next_parameters()
    if fault == "sigkill":
        os.kill(os.getpid(), signal.SIGKILL)
    nni.report_final_result({"default": params["x"]})
