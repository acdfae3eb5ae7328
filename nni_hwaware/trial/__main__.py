from nni_hwaware.trial.entry import trial_main
from nni_hwaware.trial.run import main

trial_main("nni_hwaware.trial", main)
