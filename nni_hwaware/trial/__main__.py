import sys

from nni_hwaware.nni_fixes import supervise_trial

code = supervise_trial([sys.executable, "-m", "nni_hwaware.trial", *sys.argv[1:]])
if code is None:
    from nni_hwaware.trial.run import main

    code = main()
raise SystemExit(code)
