"""``nni-hwaware check-config``: what would make an experiment config fail, said before launching.

Checks an ``nnictl`` config that uses the PPO tuner: the YAML itself, the search
space file, the tuner's ``classArgs`` (through the same validator nnictl runs),
that the trial command names the same space, and, when the cost table exists,
that some architecture fits the budget. Each problem is one line.
"""

from __future__ import annotations

import json
import os
import shlex
from pathlib import Path
from typing import Any

import yaml

from nni_hwaware.errors import HwAwareError

__all__ = ["check_config"]

PPO_NAMES = ("HardwarePPO", "nni_hwaware.strategies.ppo.tuner.PPOTuner")


def _load(path: Path) -> dict[str, Any]:
    if not path.is_file():
        raise HwAwareError(f"config file {path} does not exist")
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as err:
        raise HwAwareError(f"{path} is not valid YAML: {' '.join(str(err).split())}") from None
    if not isinstance(data, dict):
        raise HwAwareError(f"{path} must hold a mapping of experiment settings")
    return data


def check_config(path: str | os.PathLike[str]) -> list[str]:
    """Raise :class:`HwAwareError` on the first problem; return notes on what will happen."""
    from nni_hwaware.strategies.budget import BudgetMask
    from nni_hwaware.strategies.ppo.tuner import PPOClassArgsValidator, PPOTuner

    path = Path(path).resolve()
    config = _load(path)
    base = path.parent
    tuner = config.get("tuner") or {}
    name = tuner.get("name") or tuner.get("className")
    if name not in PPO_NAMES:
        raise HwAwareError(f"{path.name}: tuner {name!r} is not the PPO tuner ({' or '.join(PPO_NAMES)})")
    args = dict(tuner.get("classArgs") or {})
    try:
        PPOClassArgsValidator().validate_class_args(**args)
    except (ValueError, TypeError) as err:
        raise HwAwareError(f"{path.name}: tuner classArgs: {err}") from None
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
    ppo = PPOTuner(**args)
    if args.get("search_trials") is not None and args.get("retrain") is not None:
        needed = int(args["search_trials"]) + 1
        if int(config.get("maxTrialNumber", needed)) != needed:
            raise HwAwareError(f"{path.name}: maxTrialNumber must be search_trials + 1 = {needed} "
                               "(the search trials, then one that retrains the best network)")
    notes = []
    root = base / config.get("experimentWorkingDirectory", os.path.expanduser("~/nni-experiments"))
    table_path = Path(args["table"]) if args.get("table") else None
    if table_path is not None and not table_path.is_absolute():
        table_path = root / table_path
    if table_path is None or not table_path.exists():
        _check_labels(search_space, ppo)
        notes.append("no cost table yet: the tuner profiles this machine's chip when the experiment starts")
        return notes
    from nni_hwaware.cost_model import load_space_model

    full = load_space_model(ppo.named, table_path, chip=args.get("chip"), backend=args.get("backend", "torch"),
                            batch_size=args.get("batch_size", 1))
    model, budget, _ = ppo.search_model(search_space, full)
    BudgetMask(model, budget)  # raises, naming the cheapest achievable cost, when nothing fits
    notes.append(f"cost table {table_path} (chip {model.chip}); budget {budget.limits()}")
    return notes


def _check_labels(search_space: dict[str, Any], tuner: Any) -> None:
    """The search space's parameters against the space's labels and values (no cost table needed)."""
    choices = tuner.named.choices()
    for name, spec in search_space.items():
        if not isinstance(spec, dict) or spec.get("_type") != "choice":
            raise HwAwareError(f"search space parameter {name!r} must be a choice")
        if name not in choices:
            raise HwAwareError(f"search space parameter {name!r} is not a label of space {tuner.space!r}")
        unknown = sorted({str(v) for v in spec["_value"]} - {str(v) for v in choices[name]})
        if unknown:
            raise HwAwareError(f"search space parameter {name!r} has values {unknown} that space "
                               f"{tuner.space!r} does not have")
    missing = sorted(set(choices) - set(search_space))
    if missing:
        raise HwAwareError(f"the search space lacks labels {missing} of space {tuner.space!r}")
