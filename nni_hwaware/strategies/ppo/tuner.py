"""The PPO search as an NNI Tuner, for ``nnictl create --config``: a thin adapter.

``classArgs`` are a :class:`~nni_hwaware.strategies.job.SearchJob` (validated
once; :class:`PPOClassArgsValidator` runs the same check in ``nnictl``). The
experiment's search space must be ``choice`` parameters named like the space's
labels (``nni-hwaware search-space --space NAME`` writes it). Each proposal of
the :class:`~nni_hwaware.strategies.ppo.core.PPOSearch` goes out as
:class:`~nni_hwaware.trial.parameters.TrialParameters`: everything the trial
needs, costs included, so trials run on any machine of NNI's training service.
After ``search_trials`` results, one last trial retrains the best network and the
baseline; it is sent once every search result is in, with the search history in
its parameters, and the tuner writes the report from its answer.

NNI's manager gives the dispatcher 10 seconds to connect, and it builds the tuner
first: the constructor imports nothing heavy; the work starts in
:meth:`PPOTuner.update_search_space`. Paths: :mod:`~nni_hwaware.strategies.ppo.workdir`;
trial bookkeeping and failures: :mod:`~nni_hwaware.strategies.ppo.records`.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import nni
from nni.tuner import Tuner
from nni.utils import ClassArgsValidator

from nni_hwaware.errors import HwAwareError
from nni_hwaware.files import atomic_open, write_json
from nni_hwaware.strategies.job import SearchJob
from nni_hwaware.strategies.ppo import workdir
from nni_hwaware.strategies.ppo.records import ALL_FAILED_AFTER, TrialRecords, metrics_of

__all__ = ["PPOClassArgsValidator", "PPOTuner"]

_logger = logging.getLogger("nni_hwaware.ppo")


class PPOTuner(Tuner):
    """NNI Tuner over :class:`~nni_hwaware.strategies.ppo.core.PPOSearch`; arguments: :class:`SearchJob`'s fields."""

    def __init__(self, space: Any, table: str | None = None, **options: Any) -> None:
        self._named = None
        if not isinstance(space, str):  # a ModelSpace or NamedSpace object (the Python route)
            from nni_hwaware.spaces.resolve import resolve_space

            self._named = resolve_space(space, **(options.get("space_args") or {}))
            space = self._named.name
        elif space.endswith(".json"):
            space = str(workdir.resolve(space))
        self.output_dir = workdir.output_dir()
        table = str(workdir.resolve(table)) if table else str(self.output_dir / "cost_table.csv")
        self.job = SearchJob.from_dict({"space": space, "table": table, **options}, "PPOTuner classArgs")
        if not Path(table).exists():  # profiled at start and written there
            workdir.writable(Path(table), "cost table")
        state_file = self.job.state_file and str(workdir.writable(workdir.resolve(self.job.state_file), "state_file"))
        self.state_file = state_file or (str(self.output_dir / "ppo_state.pt") if workdir.experiment_root() else None)
        self.records, self.search, self.model = TrialRecords(), None, None
        #: Whether architectures in flight at a save run again after a resume (nnictl resume reruns them).
        self.rerun_in_flight = True
        #: A saved :meth:`state_dict` to continue from (set by the NNI Strategy on resume).
        self.initial_state: dict[str, Any] | None = None
        self._waiting: list[int] = []  # parameter ids NNI asked for while the retraining had to wait
        self._send: Any = None  # NNI's callback to issue a trial later (the retraining)
        self._exhausted = False  # every architecture under the budget was proposed
        self._resumed: set[tuple[int, ...]] = set()  # in flight at a resume: NNI never reports their failure

    @property
    def named(self) -> Any:
        if self._named is None:
            self._named = self.job.named()
        return self._named

    def update_search_space(self, search_space: Mapping[str, Any]) -> None:
        try:
            import torch

            from nni_hwaware.spaces.choices import allowed_values
            from nni_hwaware.strategies.job import load_cost_model
            from nni_hwaware.strategies.ppo.core import PPOSearch

            self.full = load_cost_model(self.named, self.job.cost, self.output_dir / "cost_table.csv")
            allowed = allowed_values(search_space, self.full.choices(), self.named.name)
            self.model, self.budget, self.reference = self.job.search_model(self.named, self.full, allowed)
            self.search = PPOSearch(self.model, self.budget, self.job.ppo)
            if self.state_file and Path(self.state_file).exists():  # tensors and plain containers only
                try:
                    self.initial_state = torch.load(self.state_file, weights_only=True)
                except Exception as err:
                    raise HwAwareError(f"cannot read the PPO state {self.state_file}: {' '.join(str(err).split())[:200]}"
                                       "; delete it to start the search afresh") from None
            if self.initial_state is not None:
                self.search.load_state_dict(self.initial_state)
                self.records.load(self.initial_state.get("tuner") or {})
                if not self.rerun_in_flight:
                    self.search.pending.clear()  # nobody reruns them: propose them again
                self._resumed = set(self.search.pending)
            _logger.info("PPO search on chip %s under %s", self.model.chip, self.budget.limits())
        except HwAwareError as err:
            _logger.error("nni-hwaware: %s", err)  # one clear line in the dispatcher's log
            raise

    def state_dict(self) -> dict[str, Any]:
        """The search's state, plus under ``tuner`` the trial records."""
        return {**self._ready().state_dict(), "tuner": self.records.state()}

    def _ready(self) -> Any:
        if self.search is None:
            raise HwAwareError("the tuner got no search space; set searchSpace/searchSpaceFile in the config")
        return self.search

    # -- proposing ---------------------------------------------------------------------
    def generate_multiple_parameters(self, parameter_id_list: list[int], **kwargs: Any) -> list[dict[str, Any]]:
        self._send = kwargs.get("st_callback", self._send)
        params = []
        for parameter_id in parameter_id_list:
            try:
                params.append(self.generate_parameters(parameter_id))
            except nni.NoMoreTrialError:
                if self._retrain_due():  # sent by _maybe_retrain once every search result is in
                    self._waiting.append(parameter_id)
                break
        return params

    def generate_parameters(self, parameter_id: int, **kwargs: Any) -> dict[str, Any]:
        search = self._ready()
        self._settle_dead()
        if not self._retrain_due() and not self._search_done():
            arch = search.ask()
            if arch is not None:
                self.records.send(parameter_id, arch)
                self._save_state()  # in flight from now on: a resumed search must not propose it again
                return self._parameters(arch).to_dict()
            self._exhausted = True
        if not self._retrain_due():
            raise nni.NoMoreTrialError("every architecture under the budget has been tried" if self._exhausted
                                       else f"the search made its {self.job.search_trials} trials")
        if set(search.pending) - self._resumed:
            raise nni.NoMoreTrialError("the retraining waits for the last search results")
        return self._retrain_parameters()

    def _search_done(self) -> bool:
        search = self._ready()
        searched = len(search.history.order) + len(search.pending)
        return self._exhausted or (self.job.search_trials is not None and searched >= self.job.search_trials)

    def _retrain_due(self) -> bool:
        """Whether the retraining trial is next: the search is over, and it was not sent."""
        search = self._ready()
        if self.job.retrain is None or self.records.retrain_sent or not (search.history.order or search.pending):
            return False
        return self._search_done()

    def _parameters(self, arch: dict[str, Any], **extra: Any) -> Any:
        from nni_hwaware.trial.parameters import TrialParameters

        return TrialParameters(arch=arch, space=self.job.space, space_args=self.job.space_args,
                               dataset=self.named.dataset, chip=self.model.chip,
                               costs=self.model.predict(arch).metrics() if arch else {},
                               **{"train": self.job.train, **extra})

    def _retrain_parameters(self) -> dict[str, Any]:
        from nni_hwaware.trial.parameters import RetrainJob

        if not any(r.get("status") != "failed" for r in self.records.results):
            self._fail("every search trial failed; nothing to retrain")
        self.records.retrain_sent = True
        self._save_state()
        job = RetrainJob(history=self.records.history(), baseline=dict(self.reference),
                         baseline_costs=self.full.predict(self.reference).metrics())
        return self._parameters({}, train=self.job.retrain, retrain=job).to_dict()

    # -- results ---------------------------------------------------------------------
    def receive_trial_result(self, parameter_id: int, parameters: Mapping[str, Any], value: Any,
                             **kwargs: Any) -> None:
        from nni_hwaware.trial.parameters import KEY

        if "retrain" in (parameters.get(KEY) or {}):
            return self._write_report(value)
        arch = self.records.arch_of(parameter_id, parameters, value, self.named.check_architecture)
        self.records.settle(parameter_id)
        metrics = metrics_of(value)
        if metrics is None:
            _logger.warning("trial %s reported %r without a finite 'default'; counted as failed", parameter_id, value)
            self._record_failure(arch, "no finite result")
        else:
            self._ready().tell(arch, metrics)
            self.records.add_result(arch, metrics)
        self._after_event()

    def trial_end(self, parameter_id: int, success: bool, **kwargs: Any) -> None:
        self.records.end(parameter_id, success)  # some trial ended (microsoft/nni#5726)
        self._after_event()

    def _record_failure(self, arch: dict[str, Any], why: str) -> None:
        self.records.add_failure(arch, why, self._ready().tell(arch, None))

    def _settle_dead(self) -> None:
        for arch in self.records.dead():
            if self._ready().actions_of(arch) not in self._ready().history.rewards:  # else its result came
                _logger.warning("a trial of %s ended without a result; counted as failed", arch)
                self._record_failure(arch, "ended without a final result (crashed, killed, out of memory)")

    def _after_event(self) -> None:
        self._settle_dead()
        self._save()
        if self.records.all_failed():
            self._fail(f"the first {ALL_FAILED_AFTER} search trials all failed; see their trial.stderr")
        if (self._waiting and self._send is not None and self._retrain_due()
                and not set(self._ready().pending) - self._resumed):
            self._send(self._waiting.pop(0), self._retrain_parameters())

    def _fail(self, why: str) -> None:
        """Stop the experiment with ``why`` as its error (status ERROR, not DONE)."""
        from nni_hwaware.nni_fixes import report_experiment_error

        message = f"nni-hwaware: {why}"
        _logger.error(message)
        report_experiment_error(self._send, message)
        raise HwAwareError(why)

    def import_data(self, data: list[dict[str, Any]]) -> None:
        """Results of earlier trials (resume, ``nnictl experiment import``): learn those the search lacks."""
        search = self._ready()
        for record in data:
            parameters = record.get("parameter") if isinstance(record, Mapping) else None
            if not isinstance(parameters, Mapping):
                _logger.warning("skipping an imported record without parameters: %r", record)
                continue
            if "retrain" in (parameters.get("_hwaware") or {}):
                self.records.retrain_sent = True
                continue
            try:
                arch = self.records.arch_of(None, parameters, record.get("value"), self.named.check_architecture)
            except HwAwareError as err:
                _logger.warning("skipping an imported result: %s", err)
                continue
            if search.actions_of(arch) in search.history.rewards:
                continue
            metrics = metrics_of(record.get("value"))
            if metrics is None:
                self._record_failure(arch, "imported without a finite result")
            else:
                search.tell(arch, metrics)
                self.records.add_result(arch, metrics)
        self._save()

    # -- files on the manager's side -------------------------------------------------------
    def _write_report(self, value: Any) -> None:
        import json

        from nni_hwaware.report.search import write_search_report
        from nni_hwaware.training import ModelResult

        results = json.loads(value["results"])
        baseline, found = ModelResult.from_dict(results["baseline"]), ModelResult.from_dict(results["found"])
        paths = write_search_report(self.output_dir / "report", baseline, found, self.records.results,
                                    baseline_predicted_ms=baseline.predicted_latency_ms,
                                    budget=self.budget.limits())
        for line in found.extra.get("vs_baseline", {}).get("warnings", []):
            _logger.warning("%s", line)
        _logger.info("report written: %s", ", ".join(str(p) for p in paths.values()))

    def _save_state(self) -> None:
        if self.state_file and self.search is not None:
            import torch

            with atomic_open(self.state_file, "wb") as fh:
                torch.save(self.state_dict(), fh)

    def _save(self) -> None:
        self._save_state()
        if self.search is not None and (self.job.retrain is not None or workdir.experiment_root() is not None):
            write_json(self.output_dir / "trials.json", self.records.results)
            write_json(self.output_dir / "tuner_stats.json", self.stats())

    def stats(self) -> dict[str, Any]:
        search = self._ready()
        return self.records.stats(search.decisions, search.decision_seconds, len(search.history.order),
                                  len(search.pending))


class PPOClassArgsValidator(ClassArgsValidator):
    """Checks ``classArgs`` as the tuner will: the :class:`SearchJob` and the space they name."""

    def validate_class_args(self, **kwargs: Any) -> None:
        try:
            if "space" not in kwargs:
                raise HwAwareError("PPOTuner classArgs need space: the space to search")
            PPOTuner(**kwargs).named  # noqa: B018  (resolving the space checks space and space_args)
        except HwAwareError as err:
            raise ValueError(str(err)) from None
