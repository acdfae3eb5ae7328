"""Running real NNI experiments: :mod:`nni_hwaware.experiment.nnictl` drives ``nnictl``."""

from __future__ import annotations

from nni_hwaware.experiment.nnictl import (
    TERMINAL_STATUSES,
    RunningExperiment,
    create_experiment,
    free_port,
    nnictl_path,
    parse_metric,
    port_open,
    write_config,
)

__all__ = [
    "TERMINAL_STATUSES",
    "RunningExperiment",
    "create_experiment",
    "free_port",
    "nnictl_path",
    "parse_metric",
    "port_open",
    "write_config",
]
