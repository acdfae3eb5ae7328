"""Running real NNI experiments.

* :mod:`~nni_hwaware.experiment.nnictl` drives ``nnictl``: :func:`run_nnictl` runs every
  nnictl command of the package; :func:`create_experiment` and :class:`RunningExperiment`
  start, poll, stop and resume experiments from Python;
* :mod:`~nni_hwaware.experiment.launch`: ``nnictl create``/``resume``/``view`` on the user's
  terminal, the web portal kept on 127.0.0.1 (see :mod:`~nni_hwaware.experiment.portal`);
* :mod:`~nni_hwaware.experiment.check`: what would make a config fail, said before launching.
"""

from __future__ import annotations

from nni_hwaware.experiment.nnictl import (
    TERMINAL_STATUSES,
    NnictlRun,
    RunningExperiment,
    create_experiment,
    free_port,
    nnictl_path,
    parse_metric,
    port_open,
    register_tuner,
    run_nnictl,
    write_config,
)

__all__ = [
    "TERMINAL_STATUSES",
    "NnictlRun",
    "RunningExperiment",
    "create_experiment",
    "free_port",
    "nnictl_path",
    "parse_metric",
    "port_open",
    "register_tuner",
    "run_nnictl",
    "write_config",
]
