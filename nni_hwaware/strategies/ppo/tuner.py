"""The PPO search as an NNI Tuner, for ``nnictl create --config``.

``classArgs`` are this class's constructor arguments, checked against its
signature by :class:`PPOClassArgsValidator` (one schema: the signature). The
experiment's search space must be ``choice`` parameters named like the space's
layers (``nni-hwaware search-space --space NAME`` writes it); a space file or
name fixes the layers' shapes.

At start the tuner loads the cost table (or profiles this machine's chip into
it), optionally prunes the space (``prune: {mode: layer-mean, ...}``), resolves
the budget (absolute, or ``"60%"`` of the baseline's predicted cost) and asks
the :class:`~nni_hwaware.strategies.ppo.core.PPOSearch` for architectures. Each
trial's metric carries the architecture it trained (``arch``), which the tuner
trusts over NNI's parameter bookkeeping (microsoft/nni#5726).
"""

from __future__ import annotations

import inspect
import json
import logging
import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import nni
import torch
from nni.tuner import Tuner
from nni.utils import ClassArgsValidator

from nni_hwaware.cost_table import CostModel, CostTable, profile_space
from nni_hwaware.errors import HwAwareError
from nni_hwaware.files import atomic_open
from nni_hwaware.spaces import get_space_config
from nni_hwaware.strategies.budget import Budget
from nni_hwaware.strategies.ppo.core import PPOConfig, PPOSearch

__all__ = ["PPOClassArgsValidator", "PPOTuner", "resolve_budget"]

_logger = logging.getLogger("nni_hwaware.ppo")


def resolve_budget(spec: Mapping[str, float | str] | None, model: CostModel) -> Budget:
    """A :class:`Budget` from numbers or ``"N%"`` of the baseline architecture's predicted cost."""
    baseline = model.predict(model.config.baseline()).metrics()
    values: dict[str, float] = {}
    for key, value in dict(spec or {}).items():
        if key not in ("latency_ms", "memory_mb", "flops"):
            raise HwAwareError(f"unknown budget key {key!r}; use latency_ms, memory_mb, flops")
        if isinstance(value, str) and value.strip().endswith("%"):
            try:
                values[key] = float(value.strip()[:-1]) / 100 * baseline[key]
            except ValueError:
                raise HwAwareError(f"budget {key}: {value!r} is not a percentage like '60%'") from None
        else:
            values[key] = float(value)
    return Budget(**values)


class PPOTuner(Tuner):
    """NNI Tuner over :class:`~nni_hwaware.strategies.ppo.core.PPOSearch`.

    Parameters mirror the YAML ``classArgs``: ``space`` (name or JSON file),
    ``table`` (cost table file; profiled on this machine and written there when
    missing), ``chip`` / ``backend`` / ``batch_size`` (which rows of the table),
    ``budget`` (e.g. ``{latency_ms: "60%"}``), ``prune`` (options of
    :func:`~nni_hwaware.pruning.prune_space`, or None), ``ppo`` (options of
    :class:`~nni_hwaware.strategies.ppo.core.PPOConfig`), ``state_file`` (where
    the search state is saved after every result, for resuming).
    """

    def __init__(self, space: str, table: str | None = None, *, chip: str | None = None,
                 backend: str = "torch", batch_size: int = 1, budget: dict[str, Any] | None = None,
                 prune: dict[str, Any] | None = None, ppo: dict[str, Any] | None = None,
                 state_file: str | None = None) -> None:
        self.config = get_space_config(space)
        self.table_path = table
        self.chip, self.backend, self.batch_size = chip, backend, batch_size
        self.budget_spec, self.prune_options = budget, prune
        self.ppo_config = PPOConfig.from_dict(ppo)
        self.state_file = state_file
        self.search: PPOSearch | None = None
        self.model: CostModel | None = None
        #: A saved :meth:`PPOSearch.state_dict` to continue from (set by the NNI Strategy on resume).
        self.initial_state: dict[str, Any] | None = None
        self._params: dict[int, dict[str, str]] = {}
        self._reported: set[int] = set()

    # -- setup ---------------------------------------------------------------------
    def _table(self) -> CostTable:
        if self.table_path and Path(self.table_path).exists():
            return CostTable.load(self.table_path)
        _logger.info("profiling space %s on this machine's chip", self.config.name)
        table = profile_space(self.config, chip=self.chip, backend=self.backend,
                              batch_size=self.batch_size, progress=False)
        if self.table_path:
            table.save(self.table_path)
        return table

    def update_search_space(self, search_space: Mapping[str, Any]) -> None:
        labels = {spec.label: spec for spec in self.config.layer_specs()}
        layer_candidates: dict[str, list[str]] = {}
        for name, spec in search_space.items():
            kind = spec.get("_type") if isinstance(spec, Mapping) else None
            if kind != "choice":
                raise HwAwareError(f"search space parameter {name!r} is {kind!r}; the PPO tuner takes only 'choice'")
            if name not in labels:
                raise HwAwareError(f"search space parameter {name!r} is not a layer of space "
                                   f"{self.config.name!r} (layers: {', '.join(labels)})")
            layer_candidates[name] = [str(v) for v in spec["_value"]]
        missing = sorted(set(labels) - set(layer_candidates))
        if missing:
            raise HwAwareError(f"the search space lacks layers {missing} of space {self.config.name!r}")
        config = self.config.with_layer_candidates(layer_candidates)
        table = self._table()
        model = CostModel(table, config, chip=self.chip, backend=self.backend, batch_size=self.batch_size)
        if self.prune_options is not None:
            from nni_hwaware.pruning import prune_space

            result = prune_space(model, **self.prune_options)
            before, after = result.sizes()
            _logger.info("pruned the space from %d to %d architectures", before, after)
            model = CostModel(table, result.config, chip=model.chip, backend=self.backend,
                              batch_size=self.batch_size)
        self.model = model
        budget = resolve_budget(self.budget_spec, model)
        self.search = PPOSearch(model, budget, self.ppo_config)
        if self.initial_state is None and self.state_file and Path(self.state_file).exists():
            self.initial_state = torch.load(self.state_file, weights_only=True)
        if self.initial_state is not None:
            self.search.load_state_dict(self.initial_state)
            _logger.info("resumed the PPO search with %d results", len(self.search.history.order))
        _logger.info("PPO search on chip %s under %s", model.chip, budget.limits())

    # -- trials ----------------------------------------------------------------------
    def _ready(self) -> PPOSearch:
        if self.search is None:
            raise HwAwareError("the tuner got no search space; set searchSpace/searchSpaceFile in the config")
        return self.search

    def generate_parameters(self, parameter_id: int, **kwargs: Any) -> dict[str, str]:
        arch = self._ready().ask()
        if arch is None:
            raise nni.NoMoreTrialError("every architecture under the budget has been tried")
        self._params[parameter_id] = arch
        return dict(arch)

    def receive_trial_result(self, parameter_id: int, parameters: Mapping[str, Any], value: Any,
                             **kwargs: Any) -> None:
        search = self._ready()
        arch = self._arch_of(parameter_id, parameters, value)
        metrics = dict(value) if isinstance(value, Mapping) else {"default": value}
        default = metrics.get("default")
        if not isinstance(default, (int, float)) or not math.isfinite(float(default)):
            _logger.warning("trial %s reported %r without a finite 'default'; counted as failed",
                            parameter_id, value)
            search.tell(arch, None)
        else:
            search.tell(arch, metrics)
        self._reported.add(parameter_id)
        self._save()

    def trial_end(self, parameter_id: int, success: bool, **kwargs: Any) -> None:
        arch = self._params.pop(parameter_id, None)
        if arch is not None and parameter_id not in self._reported:
            _logger.warning("trial %s ended without a result (success=%s); counted as failed", parameter_id, success)
            self._ready().tell(arch, None)
            self._save()
        self._reported.discard(parameter_id)

    def import_data(self, data: list[dict[str, Any]]) -> None:
        """Results of earlier trials (resume, ``nnictl experiment import``): learn from them."""
        search = self._ready()
        for record in data:
            try:
                arch = self._arch_of(None, record["parameter"], record.get("value"))
            except HwAwareError as err:
                _logger.warning("skipping an imported result: %s", err)
                continue
            if search.actions_of(arch) in search.history.rewards:
                continue
            value = record.get("value")
            search.tell(arch, dict(value) if isinstance(value, Mapping) else {"default": value})
        self._save()

    def _arch_of(self, parameter_id: int | None, parameters: Mapping[str, Any], value: Any) -> dict[str, str]:
        echoed = value.get("arch") if isinstance(value, Mapping) else None
        if isinstance(echoed, str):
            try:
                return json.loads(echoed)
            except json.JSONDecodeError:
                raise HwAwareError(f"trial {parameter_id} echoed a malformed arch {echoed!r}") from None
        if parameter_id is not None and parameter_id in self._params:
            return self._params[parameter_id]
        return {k: str(v) for k, v in parameters.items() if not k.startswith("_")}

    def _save(self) -> None:
        if self.state_file and self.search is not None:
            with atomic_open(self.state_file, "wb") as fh:
                torch.save(self.search.state_dict(), fh)


class PPOClassArgsValidator(ClassArgsValidator):
    """Checks ``classArgs`` against :class:`PPOTuner`'s signature (the one schema)."""

    def validate_class_args(self, **kwargs: Any) -> None:
        signature = inspect.signature(PPOTuner.__init__)
        allowed = [p for p in signature.parameters if p != "self"]
        unknown = sorted(set(kwargs) - set(allowed))
        if unknown:
            raise ValueError(f"unknown PPOTuner classArgs {unknown}; allowed: {allowed}")
        try:
            signature.bind(None, **kwargs)
        except TypeError as err:
            raise ValueError(f"PPOTuner classArgs: {err}") from None
        PPOConfig.from_dict(kwargs.get("ppo"))
        Budget.from_dict({k: 1.0 for k in (kwargs.get("budget") or {})})
        get_space_config(kwargs["space"])
