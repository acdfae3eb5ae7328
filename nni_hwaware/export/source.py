"""Which network to export: a trained checkpoint, a finished search's found network or an architecture JSON.

:func:`export_source` decides, as ``nni-hwaware export`` does with its arguments:

* ``weights`` (a ``network.pt``, see :mod:`~nni_hwaware.export.checkpoint`): the trained
  network, its space and architecture from the checkpoint;
* ``source`` an architecture JSON (a label -> value mapping, or ``{"arch": ...}``): that
  architecture untrained, in ``space`` or the space the file names;
* ``source`` a finished PPO experiment (its id, its directory, or its ``results.json``):
  the trained network it saved when that file is on this machine, else its found
  architecture untrained.

Untrained networks are initialised from ``seed`` without touching the global random state.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

from nni_hwaware.errors import HwAwareError
from nni_hwaware.export.checkpoint import load_checkpoint, network_from_checkpoint
from nni_hwaware.files import read_json

__all__ = ["ExportSource", "architecture_spec", "export_source", "search_results"]

#: Where a finished search's results lie: under ``experiment`` itself, then these registries.
EXPERIMENT_ROOTS = ("nni-experiments", "~/nni-experiments")


def search_results(experiment: str | os.PathLike[str]) -> Path:
    """``results.json`` of a finished search, from an experiment id or directory.

    Looked for as ``hwaware/report/results.json`` or ``results.json`` under ``experiment``,
    then under ``./nni-experiments/<id>`` and ``~/nni-experiments/<id>``.
    """
    candidates = [Path(experiment)] + [Path(root).expanduser() / experiment for root in EXPERIMENT_ROOTS]
    for base in candidates:
        for path in (base / "hwaware" / "report" / "results.json", base / "results.json"):
            if path.is_file():
                return path
    raise HwAwareError(f"no finished search report for {str(experiment)!r}: looked for hwaware/report/results.json "
                       "under it, ./nni-experiments/<id> and ~/nni-experiments/<id>")


def architecture_spec(arch_file: str | os.PathLike[str]) -> tuple[str, dict[str, Any]]:
    """``(space, space_args)`` an architecture file names in its ``space`` / ``space_args`` entries."""
    data = read_json(arch_file, "architecture file")
    space = data.get("space") if isinstance(data, dict) else None
    if not space:
        raise HwAwareError(f"{arch_file} names no space; pass --space")
    space_args = data.get("space_args")
    return space, dict(space_args) if isinstance(space_args, dict) else {}


@dataclass(frozen=True)
class ExportSource:
    """What :func:`export_source` chose: the network, its named space, and what it is, in words."""

    named: Any
    network: nn.Module
    #: e.g. ``trained network {...} of digits from out/network.pt``.
    description: str
    #: Something the user should know about the choice (the trained network is on another host), or None.
    warning: str | None = None


def _untrained(named: Any, arch: Mapping[str, Any], seed: int) -> nn.Module:
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return named.build(arch)


def _resolve(space: str, space_args: Mapping[str, Any] | None) -> Any:
    from nni_hwaware.spaces.resolve import resolve_space

    return resolve_space(space, **dict(space_args or {}))


def _saved_network(results: Mapping[str, Any]) -> str | None:
    """The ``network.pt`` a finished search saved of its found network, when it is on this machine."""
    summary = results["best"].get("extra", {}).get("deliverables") or {}
    saved = Path(summary.get("dir", "")) / "network.pt" if summary else None
    return str(saved) if saved is not None and saved.is_file() else None


def _found_untrained(results: Mapping[str, Any], space: str | None, space_args: Mapping[str, Any] | None,
                     seed: int) -> ExportSource:
    """A finished search's found architecture, untrained, in its space unless ``space`` is given."""
    best, saved_space = results["best"], results.get("space") or {}
    if space is None:
        space = saved_space.get("space")
        if not space_args and saved_space.get("space_args"):
            space_args = saved_space["space_args"]
    if space is None:
        raise HwAwareError("the experiment's report names no space; pass --space (and --space-args)")
    named = _resolve(space, space_args)
    summary = best.get("extra", {}).get("deliverables") or {}
    warning = None
    if summary:
        warning = (f"the trained network is on {summary['host']} in {summary['dir']}; exporting the "
                   "architecture untrained (copy its network.pt here and pass --weights)")
    net = _untrained(named, named.check_architecture(best["arch"]), seed)
    return ExportSource(named, net, "the experiment's found network, untrained", warning)


def export_source(source: str | os.PathLike[str] | None = None, *, weights: str | os.PathLike[str] | None = None,
                  space: str | None = None, space_args: Mapping[str, Any] | None = None,
                  seed: int = 0) -> ExportSource:
    """The network to export from ``weights``, an experiment or an architecture JSON (module docstring).

    ``space`` / ``space_args`` name the space of an untrained network; without ``space``, the
    one the architecture file or the experiment's report names (with its arguments, unless
    ``space_args`` are given). Raises :class:`HwAwareError` on a source that is none of these.
    """
    from nni_hwaware.spaces.io import load_architecture

    arch_file = None
    if source and weights:
        raise HwAwareError("give either an experiment / architecture JSON or --weights, not both")
    if source:
        path = Path(source)
        data = read_json(path, "architecture file") if path.suffix == ".json" else None
        if isinstance(data, dict) and "best" not in data:
            arch_file = path
        else:
            if data is not None and not isinstance(data, dict):
                raise HwAwareError(f"{path} holds no architecture (a label -> value mapping) nor search results")
            results = data if data is not None else read_json(search_results(source), "search results")
            weights = _saved_network(results)
            if weights is None:
                return _found_untrained(results, space, space_args, seed)
    if weights:
        checkpoint = load_checkpoint(weights)
        named, net = network_from_checkpoint(checkpoint)
        return ExportSource(named, net, f"trained network {checkpoint.arch} of {checkpoint.space} from {weights}")
    if arch_file is None:
        raise HwAwareError("give an experiment id or directory, an architecture JSON, or --weights network.pt")
    if space is None:
        space, named_args = architecture_spec(arch_file)
        space_args = space_args or named_args
    named = _resolve(space, space_args)
    arch = load_architecture(arch_file, named)
    return ExportSource(named, _untrained(named, arch, seed), f"untrained network {arch} of {named.name} (seed {seed})")
