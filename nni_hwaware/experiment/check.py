"""``nni-hwaware check-config``: what would make an experiment config fail, said before launching.

Checks an ``nnictl`` config that uses the PPO tuner: the YAML itself, the search
space file, the tuner's ``classArgs`` (through the same validator nnictl runs),
that the trial command names the same space, the training service as ``nnictl``
will read it (a remote service's machine list, each machine's host, user and key or
password, a local ``pythonPath``), and, when the cost table exists, that some
architecture fits the budget. Each problem is one line; a service whose trials run on
other machines gets a note that it needs ``nni-hwaware create --expose``.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shlex
from pathlib import Path
from typing import Any

import yaml

from nni_hwaware.errors import HwAwareError

__all__ = ["check_config", "check_training_service", "load_config", "remote_platforms"]

PPO_NAMES = ("HardwarePPO", "nni_hwaware.strategies.ppo.tuner.PPOTuner")


def load_config(path: str | os.PathLike[str]) -> dict[str, Any]:
    """The settings of the nnictl config at ``path``; :class:`HwAwareError` when it is missing or no mapping."""
    path = Path(path)
    if not path.is_file():
        raise HwAwareError(f"config file {path} does not exist")
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as err:
        raise HwAwareError(f"{path} is not valid YAML: {' '.join(str(err).split())}") from None
    if not isinstance(data, dict):
        raise HwAwareError(f"{path} must hold a mapping of experiment settings")
    return data


#: Training services of NNI 3.0 (``trainingService.platform``).
PLATFORMS = ("local", "remote", "openpai", "aml", "dlc", "kubeflow", "frameworkcontroller", "adl")
#: What a service whose trials run elsewhere needs: its workers connect back to the manager.
EXPOSE_NOTE = ("trainingService {platform}: trials run on other machines, which must reach the manager; "
               "start it with `nni-hwaware create --config {config} --expose`")


def check_training_service(config: dict[str, Any], name: str) -> list[str]:
    """Raise on a training service ``nnictl`` would refuse or that cannot run; return its notes."""
    services = config.get("trainingService") or {"platform": "local"}
    services = services if isinstance(services, list) else [services]
    notes = []
    for service in services:
        if not isinstance(service, dict) or "platform" not in service:
            raise HwAwareError(f"{name}: trainingService needs a platform ({', '.join(PLATFORMS)})")
        platform = service["platform"]
        if platform not in PLATFORMS:
            raise HwAwareError(f"{name}: unknown trainingService platform {platform!r}; use one of "
                               f"{', '.join(PLATFORMS)}")
        if platform == "local":
            python = service.get("pythonPath")
            if python and not Path(str(python)).exists():
                raise HwAwareError(f"{name}: trainingService pythonPath {python} does not exist on this machine; "
                                   "point it at the directory or interpreter the trials should run")
            continue
        if platform == "remote":
            machines = service.get("machineList")
            if not isinstance(machines, list) or not machines:
                raise HwAwareError(f"{name}: trainingService remote needs a machineList (host, user and "
                                   "sshKeyFile or password per machine); remote trials need --expose too")
            for i, machine in enumerate(machines):
                if not isinstance(machine, dict):
                    raise HwAwareError(f"{name}: machineList[{i}] must be a mapping of host, user, sshKeyFile")
                missing = [key for key in ("host", "user") if not machine.get(key)]
                if not (machine.get("sshKeyFile") or machine.get("password")):
                    missing.append("sshKeyFile or password")
                if missing:
                    raise HwAwareError(f"{name}: machineList[{i}] lacks {', '.join(missing)}; "
                                       "remote trials need --expose too")
        notes.append(EXPOSE_NOTE.format(platform=platform, config=name))
    return notes


def remote_platforms(path: str | os.PathLike[str]) -> list[str]:
    """The training services of the config at ``path`` whose trials run on other machines."""
    services = load_config(Path(path).resolve()).get("trainingService") or {}
    services = services if isinstance(services, list) else [services]
    return [str(s.get("platform")) for s in services if isinstance(s, dict) and s.get("platform") != "local"]


def check_config(path: str | os.PathLike[str]) -> list[str]:
    """Raise :class:`HwAwareError` on the first problem; return notes on what will happen."""
    from nni_hwaware.spaces.choices import allowed_values
    from nni_hwaware.strategies.budget import BudgetMask
    from nni_hwaware.strategies.job import load_cost_model
    from nni_hwaware.strategies.ppo.job import PPOJob

    path = Path(path).resolve()
    config = load_config(path)
    base = path.parent
    tuner = config.get("tuner") or {}
    name = tuner.get("name") or tuner.get("className")
    if name not in PPO_NAMES:
        raise HwAwareError(f"{path.name}: tuner {name!r} is not the PPO tuner ({' or '.join(PPO_NAMES)})")
    args = dict(tuner.get("classArgs") or {})
    if "space" not in args:
        raise HwAwareError(f"{path.name}: tuner classArgs need space: the space to search")
    try:
        job = PPOJob.from_dict(args, "tuner classArgs")
        named = job.named()
    except HwAwareError as err:
        raise HwAwareError(f"{path.name}: {err}") from None
    service_notes = check_training_service(config, path.name)
    space_file = config.get("searchSpaceFile")
    if space_file:
        space_path = base / space_file
        if not space_path.is_file():
            raise HwAwareError(f"{path.name}: searchSpaceFile {space_path} does not exist")
        search_space = json.loads(space_path.read_text(encoding="utf-8"))
    else:
        search_space = config.get("searchSpace")
        if not isinstance(search_space, dict):
            raise HwAwareError(f"{path.name}: set searchSpaceFile (write it with `nni-hwaware search-space`)")
    command = shlex.split(str(config.get("trialCommand", "")))
    if "--space" in command:
        trial_space = command[command.index("--space") + 1]
        if trial_space != args["space"]:
            raise HwAwareError(f"{path.name}: trialCommand trains space {trial_space!r} but the tuner "
                               f"searches {args['space']!r}; use the same space in both")
    if job.search_trials is not None and job.retrain is not None:
        needed = job.max_trials()
        if int(config.get("maxTrialNumber", needed)) < needed:
            measured = job.max_measurements()
            how = (f"{job.search_trials} trainings, up to {measured} candidates measured by screening trials "
                   f"({job.screen} a trial, one in the worst case), then one that retrains the best network"
                   if job.screens else
                   f"up to {measured or job.search_trials} trials, each measuring its network and training the "
                   f"{job.search_trials} that fit, then one that retrains the best network")
            raise HwAwareError(f"{path.name}: maxTrialNumber must be at least {needed} ({how}); the experiment "
                               "ends when the trainings are done")
    choices = named.choices()
    try:
        allowed = allowed_values(search_space, choices, named.name)
    except HwAwareError as err:
        raise HwAwareError(f"{path.name}: {err}") from None
    root = base / config.get("experimentWorkingDirectory", os.path.expanduser("~/nni-experiments"))
    table_path = Path(job.table) if job.table else None
    if table_path is not None and not table_path.is_absolute():
        table_path = root / table_path
    if table_path is None or not table_path.exists():
        return ["no cost table yet: the tuner profiles this machine's chip when the experiment starts",
                *service_notes]
    cost = dataclasses.replace(job.cost, table=str(table_path))  # the table as the tuner will resolve it
    full = load_cost_model(named, cost, table_path)
    model, budget, _ = job.search_model(named, full, allowed)
    BudgetMask(model, budget)  # raises, naming the cheapest achievable cost, when nothing fits
    return [f"cost table {table_path} (chip {model.chip}); budget {budget.limits()}", *service_notes]
