"""The PPO search as an NNI Tuner, for ``nnictl create --config``.

``classArgs`` are this class's constructor arguments, checked against its
signature by :class:`PPOClassArgsValidator` (one schema: the signature). The
space is any NNI model space (``space``: a registered name, ``nni:<hub space>`` or
``module:callable``, with ``space_args``); the experiment's search space must be
``choice`` parameters named like the space's labels, with some or all of their
values (``nni-hwaware search-space --space NAME`` writes it).

At start the tuner loads the cost table (or profiles this machine's chip into
it), optionally prunes the space (``prune: {mode: layer-mean, ...}``), resolves
the budget (absolute, or ``"60%"`` of the baseline's predicted cost) and asks
the :class:`~nni_hwaware.strategies.ppo.core.PPOSearch` for architectures. Each
trial's metric carries the architecture it trained (``arch``), which the tuner
trusts over NNI's parameter bookkeeping (microsoft/nni#5726).

NNI's manager gives the dispatcher 10 seconds to connect, and it builds the
tuner first: this module and the constructor import nothing heavy (no torch);
the work starts in :meth:`PPOTuner.update_search_space`.
"""

from __future__ import annotations

import inspect
import json
import logging
import math
import os
import time
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import nni
from nni.tuner import Tuner
from nni.utils import ClassArgsValidator

from nni_hwaware.errors import HwAwareError
from nni_hwaware.files import atomic_open, write_json
from nni_hwaware.strategies.ppo.config import PPOConfig

if TYPE_CHECKING:
    from nni_hwaware.cost_model import SpaceCostModel
    from nni_hwaware.spaces.resolve import NamedSpace
    from nni_hwaware.strategies.budget import Budget
    from nni_hwaware.strategies.ppo.core import PPOSearch

__all__ = ["PPOClassArgsValidator", "PPOTuner", "resolve_budget"]

_logger = logging.getLogger("nni_hwaware.ppo")
#: Seconds a trial NNI reports as succeeded has to deliver its final result before it counts as failed.
RESULT_GRACE_S = 60.0


def _experiment_root() -> Path | None:
    """The experiment working directory when running as NNI's tuner (its log dir is ``<root>/<id>/log``)."""
    log_dir = os.environ.get("NNI_LOG_DIRECTORY")
    return Path(log_dir).resolve().parent.parent if log_dir else None


def _resolve(path: str) -> Path:
    candidate = Path(path).expanduser()
    if candidate.is_absolute():
        return candidate
    return (_experiment_root() or Path.cwd()) / candidate


def _writable(path: Path, what: str) -> Path:
    """``path``, if the tuner may write it: under NNI, inside the experiment working directory."""
    root = _experiment_root()
    if root is not None and not path.resolve().is_relative_to(root):
        raise HwAwareError(f"{what} {path} is outside the experiment working directory {root}; the tuner "
                           "writes only inside it: use a relative path (or create the file beforehand)")
    return path


def _output_dir() -> Path:
    """``<experiment dir>/hwaware`` under NNI, ``./hwaware-outputs`` otherwise."""
    log_dir = os.environ.get("NNI_LOG_DIRECTORY")
    return Path(log_dir).resolve().parent / "hwaware" if log_dir else Path.cwd() / "hwaware-outputs"


def resolve_budget(spec: Mapping[str, float | str] | None, baseline: Mapping[str, float]) -> Budget:
    """A :class:`Budget` from numbers or ``"N%"`` of the baseline architecture's predicted cost."""
    from nni_hwaware.strategies.budget import Budget

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

    Parameters mirror the YAML ``classArgs``: ``space`` (a registered name or JSON file,
    ``nni:<hub space>`` or ``module:callable``, with ``space_args``; from Python also a
    ``ModelSpace`` or ``NamedSpace`` object),
    ``table`` (cost table file; profiled on this machine and written there when
    missing), ``chip`` / ``backend`` / ``batch_size`` (which rows of the table),
    ``budget`` (e.g. ``{latency_ms: "60%"}``), ``prune`` (options of
    :func:`~nni_hwaware.pruning.prune_space`, or None), ``ppo`` (options of
    :class:`~nni_hwaware.strategies.ppo.core.PPOConfig`), ``state_file`` (where
    the search state is saved after every result, for resuming; default under NNI
    ``<experiment dir>/hwaware/ppo_state.pt``), ``search_trials``
    and ``retrain`` (after that many search results, one last trial retrains the
    best architecture and the baseline with the ``retrain`` training options and
    writes the report; see :mod:`nni_hwaware.trial.run`), ``device`` (where a
    missing table is profiled: ``cpu``, ``cuda``, ...).

    Relative paths are resolved against the experiment's working directory (the
    folder that holds ``<experiment id>/``) when run by NNI, else the current one;
    the search's own files go to ``<experiment dir>/hwaware/``. Under NNI the tuner
    writes only inside the experiment working directory.

    Resuming (``nnictl resume``): the new tuner loads ``state_file`` (policy, history,
    architectures in flight, whether the retraining trial was sent), then learns the
    results NNI hands back (:meth:`import_data`) that the state lacks. Without a state
    file it rebuilds its history from those results alone. An architecture with a
    result is never proposed again; NNI itself reruns the trials that were running.
    Failed trials (crashed, killed, out of memory, NaN) get the failure reward and are
    listed in ``trials.json`` with ``status: failed``; ``tuner_stats.json`` there
    counts decisions, results and failures.
    """

    def __init__(self, space: str | Any, table: str | None = None, *, space_args: dict[str, Any] | None = None,
                 chip: str | None = None,
                 backend: str = "torch", batch_size: int = 1, budget: dict[str, Any] | None = None,
                 prune: dict[str, Any] | None = None, ppo: dict[str, Any] | None = None,
                 state_file: str | None = None, search_trials: int | None = None,
                 retrain: dict[str, Any] | None = None, device: str = "cpu") -> None:
        self.space_args = dict(space_args or {})
        self._named: NamedSpace | None = None
        if not isinstance(space, str):  # a ModelSpace or NamedSpace object (the Python route)
            from nni_hwaware.spaces.resolve import resolve_space

            self._named = resolve_space(space, **self.space_args)
            space = self._named.name
        self.space = str(_resolve(space)) if space.endswith(".json") else space
        self.output_dir = _output_dir()
        self.table_path = str(_resolve(table)) if table else str(self.output_dir / "cost_table.csv")
        if not Path(self.table_path).exists():  # profiled at start and written there
            _writable(Path(self.table_path), "cost table")
        self.chip, self.backend, self.batch_size, self.device = chip, backend, batch_size, device
        self.budget_spec, self.prune_options = budget, prune
        self.ppo_config = PPOConfig.from_dict(ppo)
        if state_file:
            self.state_file: str | None = str(_writable(_resolve(state_file), "state_file"))
        else:
            self.state_file = str(self.output_dir / "ppo_state.pt") if _experiment_root() else None
        if search_trials is not None and search_trials < 1:
            raise HwAwareError(f"search_trials must be >= 1, got {search_trials}")
        if retrain is not None and search_trials is None:
            raise HwAwareError("retrain needs search_trials: the number of search trials before the final retraining")
        self.search_trials, self.retrain = search_trials, retrain
        self._results: list[dict[str, Any]] = []
        self._retrain_sent = False
        self.search: PPOSearch | None = None
        #: The cost model the search masks with (the search space's values, pruned).
        self.model: SpaceCostModel | None = None
        #: Whether the architectures in flight when the state was saved run again after a
        #: resume (nnictl resume reruns them; NasExperiment does not, see PPOStrategy).
        self.rerun_in_flight = True
        #: A saved :meth:`PPOSearch.state_dict` to continue from (set by the NNI Strategy on resume).
        self.initial_state: dict[str, Any] | None = None
        #: Search trials sent and not settled (no result, not counted as failed): id -> arch.
        self._params: dict[int, dict[str, str]] = {}
        #: Ids whose final result arrived (search and retraining trials).
        self._reported: set[int] = set()
        #: Architectures in flight when the state was saved: NNI reruns them on resume.
        self._resumed: set[tuple[int, ...]] = set()
        #: Ids of the search trials sent in this run of the tuner.
        self._sent: set[int] = set()
        #: parameter id -> (when, succeeded) for every trial end NNI announced.
        self._ended: dict[int, tuple[float, bool]] = {}
        #: Results whose echoed architecture differs from the one sent with their parameter id.
        self._mismatches = 0

    # -- setup ---------------------------------------------------------------------
    @property
    def named(self) -> NamedSpace:
        """The searched space (resolved on first use: building spaces needs torch)."""
        if self._named is None:
            from nni_hwaware.spaces.resolve import resolve_space

            self._named = resolve_space(self.space, **self.space_args)
        return self._named

    def space_model(self) -> SpaceCostModel:
        """The whole space's cost model from ``table`` (a cost table, profiled there when missing, or
        a per-choice cost table)."""
        from nni_hwaware.cost_model import load_space_model

        if not Path(self.table_path).exists():
            _writable(Path(self.table_path), "cost table")
            _logger.info("profiling space %s on this machine's chip", self.named.name)
        return load_space_model(self.named, self.table_path, chip=self.chip, backend=self.backend,
                                batch_size=self.batch_size, device=self.device)

    def search_model(self, search_space: Mapping[str, Any], full: SpaceCostModel
                     ) -> tuple[SpaceCostModel, Budget, dict[str, Any]]:
        """The cost model of the search space's values (pruned as asked), the budget and the reference.

        ``full`` is the whole space's model; the budget's percentages are of the reference
        network's cost under it.
        """
        choices = full.choices()
        allowed: dict[str, list[Any]] = {}
        for name, spec in search_space.items():
            kind = spec.get("_type") if isinstance(spec, Mapping) else None
            if kind != "choice":
                raise HwAwareError(f"search space parameter {name!r} is {kind!r}; the PPO tuner takes only 'choice'")
            if not isinstance(spec.get("_value"), list):
                raise HwAwareError(f"search space parameter {name!r} needs '_value': the list of its values")
            if name not in choices:
                raise HwAwareError(f"search space parameter {name!r} is not a label of space "
                                   f"{self.named.name!r} (labels: {', '.join(choices)})")
            wanted = [str(v) for v in spec["_value"]]
            allowed[name] = [v for v in choices[name] if str(v) in wanted]
            unknown = sorted(set(wanted) - {str(v) for v in choices[name]})
            if unknown:
                raise HwAwareError(f"search space parameter {name!r} has values {unknown} that space "
                                   f"{self.named.name!r} does not have; its values: {choices[name]}")
        missing = [label for label in choices if label not in allowed]
        if missing:
            raise HwAwareError(f"the search space lacks labels {missing} of space {self.named.name!r}")
        model = full.restrict(allowed)
        if self.prune_options is not None:
            from nni_hwaware.pruning import prune_choices

            result = prune_choices(model, **self.prune_options)
            before, after = result.sizes()
            _logger.info("pruned the space from %d to %d architectures", before, after)
            model = result.model
        reference = self.named.baseline(full)
        budget = resolve_budget(self.budget_spec, full.predict(reference).metrics())
        return model, budget, reference

    def update_search_space(self, search_space: Mapping[str, Any]) -> None:
        try:
            self._setup(search_space)
        except HwAwareError as err:
            _logger.error("nni-hwaware: %s", err)  # one clear line in the dispatcher's log
            raise

    def _setup(self, search_space: Mapping[str, Any]) -> None:
        import torch

        from nni_hwaware.strategies.ppo.core import PPOSearch

        if self.retrain is not None:
            from nni_hwaware.trial.train import TrainConfig

            TrainConfig.from_dict(self.retrain)
        model, budget, _ = self.search_model(search_space, self.space_model())
        self.model = model
        self.search = PPOSearch(model, budget, self.ppo_config)
        if self.state_file and Path(self.state_file).exists():  # saved at every event: the newest
            try:  # tensors and plain containers only: never unpickles objects
                self.initial_state = torch.load(self.state_file, weights_only=True)
            except Exception as err:
                raise HwAwareError(f"cannot read the PPO state {self.state_file}: "
                                   f"{' '.join(str(err).split())[:200]}; delete it to start the search afresh") from None
        if self.initial_state is not None:
            self._load_state(self.initial_state)
        _logger.info("PPO search on chip %s under %s", model.chip, budget.limits())

    def _load_state(self, state: Mapping[str, Any]) -> None:
        search = self._ready()
        search.load_state_dict(state)
        extra = state.get("tuner") or {}
        self._results = [dict(r) for r in extra.get("results", [])]
        self._retrain_sent = bool(extra.get("retrain_sent", False))
        if not self.rerun_in_flight:
            search.pending.clear()  # nobody reruns them: propose them again
        self._resumed = set(search.pending)
        _logger.info("resumed the PPO search: %d results, %d architectures in flight",
                     len(search.history.order), len(search.pending))

    def state_dict(self) -> dict[str, Any]:
        """What :attr:`state_file` holds: the search's state, plus under ``tuner`` the trial records
        and whether the retraining trial was sent."""
        return {**self._ready().state_dict(),
                "tuner": {"results": self._results, "retrain_sent": self._retrain_sent}}

    # -- trials ----------------------------------------------------------------------
    def _ready(self) -> PPOSearch:
        if self.search is None:
            raise HwAwareError("the tuner got no search space; set searchSpace/searchSpaceFile in the config")
        return self.search

    def generate_parameters(self, parameter_id: int, **kwargs: Any) -> dict[str, Any]:
        search = self._ready()
        self._settle_failures()
        searched = len(search.history.order) + len(search.pending)
        done = self.search_trials is not None and searched >= self.search_trials
        if done and self.retrain is not None and not self._retrain_sent:
            self._retrain_sent = True
            self._save_state()
            return self._retrain_parameters()
        # NNI may ask for more trials than maxTrialNumber leaves room for (several slots
        # free at once); answering "no more" then would stop the queued retraining trial,
        # so extra requests get ordinary proposals, which NNI drops at the trial limit.
        arch = search.ask()
        if arch is None:
            if self.retrain is not None and not self._retrain_sent and search.history.order:
                self._retrain_sent = True
                self._save_state()
                return self._retrain_parameters()
            raise nni.NoMoreTrialError("every architecture under the budget has been tried")
        self._params[parameter_id] = arch
        self._sent.add(parameter_id)
        self._save_state()  # in flight from now on: a resumed search must not propose it again
        return {**arch, **self._space_parameters()}

    def _space_parameters(self) -> dict[str, Any]:
        """What a trial needs to build the space and its cost model, besides the architecture."""
        return {"_space": self.space, "_space_args": self.space_args, "_table": self.table_path,
                "_chip": self.model.chip if self.model else None}

    def _retrain_parameters(self) -> dict[str, Any]:
        """The last trial: retrain the best architecture and the baseline, write the report."""
        search = self._ready()
        return {"_retrain": True, **self._space_parameters(), "_train": self.retrain, "_output_dir": str(self.output_dir),
                "_history_file": str(self.output_dir / "trials.json"),
                # not the reruns of a resume: NNI never tells the tuner when those fail
                "_expected": len(search.history.order) + len(set(search.pending) - self._resumed)}

    def receive_trial_result(self, parameter_id: int, parameters: Mapping[str, Any], value: Any,
                             **kwargs: Any) -> None:
        search = self._ready()
        self._reported.add(parameter_id)
        if parameters.get("_retrain"):
            self._settle_failures()
            return  # the final retraining trial: a report, not a search result
        arch = self._arch_of(parameter_id, parameters, value)
        self._params.pop(parameter_id, None)
        metrics = dict(value) if isinstance(value, Mapping) else {"default": value}
        default = metrics.get("default")
        if not isinstance(default, (int, float)) or not math.isfinite(float(default)):
            _logger.warning("trial %s reported %r without a finite 'default'; counted as failed",
                            parameter_id, value)
            self._record_failure(arch, "no finite result")
        else:
            search.tell(arch, metrics)
            self._results.append({"arch": arch, **{k: v for k, v in metrics.items() if k != "arch"}})
        self._settle_failures()
        self._save()

    def _record_failure(self, arch: dict[str, str], why: str) -> None:
        reward = self._ready().tell(arch, None)
        self._results.append({"arch": arch, "default": None, "status": "failed", "reason": why,
                              "reward": reward})

    def trial_end(self, parameter_id: int, success: bool, **kwargs: Any) -> None:
        # The id here is the manager's, which under concurrency can be another trial's
        # (microsoft/nni#5726): it only says that *some* trial ended. See _settle_failures.
        self._ended[parameter_id] = (time.monotonic(), success)
        self._settle_failures()

    def _settle_failures(self) -> None:
        """Count as failed the search trials that ended without a result, once that is certain.

        Result ids are right (a trial sends the id it received), but the ids of trial
        ends are the manager's, which under concurrency are often another trial's
        (microsoft/nni#5726): an end only says that *some* trial ended. Once every
        search trial sent has ended, the ones without a result are exactly the dead
        ones; until then they stay in flight (never proposed again). A successful end
        waits :data:`RESULT_GRACE_S` for its result, which NNI may deliver after it.
        """
        if not self._params or not self._sent <= self._ended.keys():
            return
        now = time.monotonic()
        if any(success and now - since < RESULT_GRACE_S for pid, (since, success) in self._ended.items()
               if pid in self._params):
            return
        for parameter_id, arch in list(self._params.items()):
            del self._params[parameter_id]
            if self._ready().actions_of(arch) in self._ready().history.rewards:
                continue  # its result came under another id
            _logger.warning("a trial of %s ended without a result; counted as failed", arch)
            self._record_failure(arch, "ended without a final result (crashed, killed, out of memory)")
        self._save()

    def import_data(self, data: list[dict[str, Any]]) -> None:
        """Results of earlier trials (resume, ``nnictl experiment import``): learn from them.

        Results the search already has are skipped; the retraining trial's result
        only marks it as sent. A record that does not fit this space is skipped with
        a warning.
        """
        search = self._ready()
        learned = 0
        for record in data:
            parameters = record.get("parameter") if isinstance(record, Mapping) else None
            if not isinstance(parameters, Mapping):
                _logger.warning("skipping an imported record without parameters: %r", record)
                continue
            if parameters.get("_retrain"):
                self._retrain_sent = True
                continue
            value = record.get("value")
            try:
                arch = self._arch_of(None, parameters, value)
                key = search.actions_of(arch)
            except HwAwareError as err:
                _logger.warning("skipping an imported result: %s", err)
                continue
            if key in search.history.rewards:
                continue
            metrics = dict(value) if isinstance(value, Mapping) else {"default": value}
            default = metrics.get("default")
            if not isinstance(default, (int, float)) or not math.isfinite(float(default)):
                self._record_failure(arch, "imported without a finite result")
            else:
                search.tell(arch, metrics)
                self._results.append({"arch": arch, **{k: v for k, v in metrics.items() if k != "arch"}})
            learned += 1
        _logger.info("imported %d results (%d already known)", learned, len(data) - learned)
        self._save()

    def _arch_of(self, parameter_id: int | None, parameters: Mapping[str, Any], value: Any) -> dict[str, str]:
        echoed = value.get("arch") if isinstance(value, Mapping) else None
        if isinstance(echoed, str):
            try:
                parameters = json.loads(echoed)
            except json.JSONDecodeError:
                raise HwAwareError(f"trial {parameter_id} echoed a malformed arch {echoed!r}") from None
            if not isinstance(parameters, dict):
                raise HwAwareError(f"trial {parameter_id} echoed {echoed!r}, not a label -> value mapping")
            arch = self.named.check_architecture({k: v for k, v in parameters.items() if not k.startswith("_")})
            sent = self._params.get(parameter_id) if parameter_id is not None else None
            if sent is not None and sent != arch:
                self._mismatches += 1
                _logger.warning("trial %s trained %s but was sent %s", parameter_id, arch, sent)
            return arch
        if parameter_id is not None and parameter_id in self._params:
            return self._params[parameter_id]
        return self.named.check_architecture({k: v for k, v in parameters.items() if not k.startswith("_")})

    def _save_state(self) -> None:
        """The state file only: what changes with a proposal."""
        if self.state_file and self.search is not None:
            import torch

            with atomic_open(self.state_file, "wb") as fh:
                torch.save(self.state_dict(), fh)

    def _save(self) -> None:
        """The state file, the trial records and the counters: what changes with a result."""
        self._save_state()
        if self.search is not None and (self.retrain is not None or _experiment_root() is not None):
            write_json(self.output_dir / "trials.json", self._results)
            write_json(self.output_dir / "tuner_stats.json", self.stats())

    def stats(self) -> dict[str, Any]:
        """Decisions, results and failures so far (``tuner_stats.json``)."""
        search = self._ready()
        return {"decisions": search.decisions, "decision_seconds": search.decision_seconds,
                "results": len(search.history.order),
                "failed": sum(1 for r in self._results if r.get("status") == "failed"),
                "in_flight": len(search.pending), "arch_mismatches": self._mismatches, "pid": os.getpid()}


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
        from nni_hwaware.spaces.resolve import resolve_space
        from nni_hwaware.strategies.budget import Budget

        Budget.from_dict({k: 1.0 for k in (kwargs.get("budget") or {})})
        resolve_space(kwargs["space"], **(kwargs.get("space_args") or {}))
        if kwargs.get("retrain") is not None:
            from nni_hwaware.trial.train import TrainConfig

            TrainConfig.from_dict(kwargs["retrain"])
        PPOTuner(**kwargs)  # the constructor's own checks
