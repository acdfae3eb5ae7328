"""One multi-trial PPO search, driven by trial events: the work behind the NNI Tuner, free of NNI.

A :class:`SearchSession` holds the :class:`~nni_hwaware.strategies.ppo.job.PPOJob`,
the cost models, the :class:`~nni_hwaware.strategies.ppo.search.PPOSearch` and the
:class:`~nni_hwaware.strategies.ppo.records.TrialRecords`. It turns proposals into
self-contained :class:`~nni_hwaware.trial.parameters.TrialParameters`, learns from
results and trial ends, and decides when the final retraining trial is due: after
``search_trials`` proposals (or when every architecture under the budget was
proposed), once every search result is in. It saves its state after every event
and writes ``trials.json`` / ``tuner_stats.json`` and the report on the manager's
side. :class:`~nni_hwaware.strategies.ppo.tuner.PPOTuner` translates NNI's calls.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from nni_hwaware.errors import HwAwareError
from nni_hwaware.files import write_json
from nni_hwaware.measurement import MEASURED, NOT_TRAINED, on_table_scale
from nni_hwaware.strategies.ppo import workdir
from nni_hwaware.strategies.ppo.job import PPOJob
from nni_hwaware.strategies.ppo.records import (
    ALL_FAILED_AFTER,
    TrialRecords,
    load_state,
    metrics_of,
    save_state,
)

__all__ = ["NoProposal", "SearchFailed", "SearchSession"]

_logger = logging.getLogger("nni_hwaware.ppo")


class NoProposal(Exception):
    """No trial to send now: the search is over, or (``waiting``) the retraining waits for results."""

    def __init__(self, why: str, waiting: bool = False) -> None:
        super().__init__(why)
        self.waiting = waiting


class SearchFailed(HwAwareError):
    """The search cannot go on (every trial failed): the experiment must stop with this error."""


class SearchSession:
    """See the module docstring; ``named`` is the resolved space, ``output_dir`` the manager's folder."""

    def __init__(self, job: PPOJob, named: Any, output_dir: Path, *, write_files: bool) -> None:
        self.job, self.named, self.output_dir, self.write_files = job, named, output_dir, write_files
        self.records, self.search, self.model = TrialRecords(), None, None
        self.proxy: Any = None  # the zero-cost proxy's scores (ProxyScores), when the search uses one
        self.exhausted = False  # every architecture under the budget was proposed
        self.resumed: set[tuple[int, ...]] = set()  # in flight at a resume: NNI never reports their failure
        #: Of those, the networks measured to fit whose training NNI reruns (not sent again).
        self.resumed_training: set[tuple[int, ...]] = set()

    def start(self, search_space: Mapping[str, Any], initial_state: Mapping[str, Any] | None,
              rerun_in_flight: bool) -> None:
        """Load (or profile) the costs, restrict and prune to ``search_space``, resume from a state."""
        from nni_hwaware.spaces.choices import allowed_values
        from nni_hwaware.strategies.job import load_cost_model
        from nni_hwaware.strategies.ppo.search import PPOSearch

        self.full = load_cost_model(self.named, self.job.cost, self.output_dir / "cost_table.csv")
        allowed = allowed_values(search_space, self.full.choices(), self.named.name)
        self.model, self.budget, self.reference = self.job.search_model(self.named, self.full, allowed)
        config = self.job.search_config(self.output_dir)
        own = self.output_dir / workdir.PROXY_SCORES if self.write_files else None
        self.proxy = self.job.proxy_scores(config, self.named, self.reference, own)
        self._proxy_saved = len(self.proxy.cache) if self.proxy is not None else 0
        self.search = PPOSearch(self.model, self.budget, config, proxy=self.proxy)
        state_file = self.job.state_file
        if initial_state is None and state_file and Path(state_file).exists():  # saved at every event: the newest
            initial_state = load_state(state_file)
        if initial_state is not None:
            self.search.load_state_dict(initial_state)
            self.records.load(initial_state.get("tuner") or {})
            search = self.search
            if not rerun_in_flight:  # nobody reruns them: propose them again (those measured to fit: train them)
                for key in search.unresolved():
                    del search.pending[key]
                self.resumed = set()
            else:  # NNI reruns the trials in flight: the screens and the trainings
                training = {search.actions_of(a) for a in TrialRecords.training_at_save(initial_state.get("tuner") or {})}
                self.resumed_training = training & set(search.cleared)
                self.resumed = set(search.unresolved()) | self.resumed_training
            _logger.info("resumed the PPO search: %d results, %d architectures in flight",
                         len(self.search.history.order), len(self.search.pending))
        _logger.info("PPO search on chip %s under %s", self.model.chip, self.budget.limits())

    def ready(self) -> Any:
        if self.search is None:
            raise HwAwareError("the tuner got no search space; set searchSpace/searchSpaceFile in the config")
        return self.search

    def state_dict(self, *, copy_tensors: bool = True) -> dict[str, Any]:
        """The search's state, plus under ``tuner`` the trial records (``copy_tensors``: as the search's)."""
        return {**self.ready().state_dict(copy_tensors=copy_tensors), "tuner": self.records.state()}

    # -- proposing ---------------------------------------------------------------------
    def propose(self, parameter_id: int) -> dict[str, Any]:
        """NNI parameters of the next trial; :class:`NoProposal` when there is none now.

        In this order: the training of a network a screening trial measured to fit; while the search
        goes on, a screening trial of up to ``screen`` new candidates (or, with ``screen: 1``, one trial
        that measures its candidate and trains it if it fits); once it is over, the retraining.
        """
        search = self.ready()
        self._settle_dead()
        if not self.retrain_due():
            waiting = self._next_cleared()
            if waiting is not None:
                self.records.send(parameter_id, waiting)
                self._save_state()
                return self._parameters(waiting, measured=self.records.screened.get(_key(waiting), {})).to_dict()
            if not self._search_done():
                if self.job.screens:
                    archs = self._ask_many(self._screen_slots())
                    if archs:
                        self.records.send_screen(parameter_id, archs)
                        self._save_state()  # in flight from now on: a resumed search must not propose them again
                        return self._parameters({}, screen=archs).to_dict()
                else:
                    arch = search.ask()
                    if arch is not None:
                        self.records.send(parameter_id, arch)
                        self._save_state()  # in flight from now on: a resumed search must not propose it again
                        return self._parameters(arch).to_dict()
                    self.exhausted = True
        if not self.retrain_due():
            if self._search_done() or not (search.pending or self.records.screening):
                raise NoProposal(search.unreachable or ((search.proposer.gave_up or "every architecture under the "
                                                         "budget has been tried") if self.exhausted else self._done_why()))
            raise NoProposal("the screened networks are measured or trained first", waiting=self.job.retrain is not None)
        if not self.retrain_ready():
            raise NoProposal("the retraining waits for the last search results", waiting=True)
        return self.retrain_parameters()

    def _ask_many(self, n: int) -> list[dict[str, Any]]:
        archs = []
        for _ in range(n):
            arch = self.ready().ask()
            if arch is None:
                self.exhausted = not archs and not self.ready().pending
                break
            archs.append(arch)
        return archs

    def _next_cleared(self) -> dict[str, Any] | None:
        """A network measured to fit whose training is not in flight (nor rerun by NNI after a resume)."""
        search = self.ready()
        training = {search.actions_of(a) for a in self.records.in_flight.values()}
        for key in search.cleared:
            if key not in training and key not in self.resumed_training:
                return search.arch_of(key)
        return None

    def _trainings_committed(self) -> int:
        """Trainings done, in flight or due (networks measured to fit)."""
        search = self.ready()
        return len(search.history.order) + len(search.pending) if not self.job.screens else \
            len(search.history.order) + len(search.cleared)

    def _screen_slots(self) -> int:
        """Candidates the next screening trial may measure: at most ``screen``, no more than the trainings
        left (each candidate in a screen may become one) nor the measurements left, and no more than the
        measurements the trainings still to come leave spare (at least one): a screen whose candidates all
        measure over must not spend the measurements those trainings need."""
        slots = self.job.screen
        unresolved = len(self.ready().unresolved())
        if self.job.search_trials is not None:
            needed = self.job.search_trials - self._trainings_committed()
            slots = min(slots, needed - unresolved)
            if (cap := self.job.max_measurements()) is not None:
                left = cap - self.ready().measurements - unresolved  # as if every candidate in flight measured over
                slots = min(slots, left, max(1, left - needed))
        return max(0, slots)

    def _search_done(self) -> bool:
        if self.exhausted:
            return True
        if self.job.search_trials is None:
            return False
        if self._trainings_committed() >= self.job.search_trials:
            return True
        cap = self.job.max_measurements()
        return cap is not None and self.ready().measurements >= cap

    def _done_why(self) -> str:
        cap = self.job.max_measurements()
        if cap is not None and self.ready().measurements >= cap and self._trainings_committed() < (self.job.search_trials or 0):
            return f"the search made its {cap} measurements ({self.job.ppo.measurements_per_training} a training)"
        return f"the search made its {self.job.search_trials} trainings"

    def retrain_due(self) -> bool:
        """Whether the retraining trial is next: the search is over, nothing waits for its training, and it
        was not sent."""
        search = self.ready()
        return (self.job.retrain is not None and not self.records.retrain_sent
                and bool(search.history.order or search.pending) and self._search_done()
                and self._next_cleared() is None)

    def retrain_ready(self) -> bool:
        """Whether every search result is in (the reruns of a resume are not waited for)."""
        return self.retrain_due() and not set(self.ready().pending) - self.resumed and not self.records.screening

    def _parameters(self, arch: dict[str, Any], **extra: Any) -> Any:
        from nni_hwaware.trial.parameters import Measuring, TrialParameters

        costs = self.model.predict(arch).metrics() if arch else {}
        if arch and self.search is not None and self.search.correction is not None:
            # what the chip's measurements so far make of the table's prediction (a portal column)
            corrected = self.search.corrected(arch)
            costs.update({f"corrected_{m}": corrected[m] for m in ("latency_ms", "memory_mb")
                          if self.search.correction.count(m)})
        measure_first = {}
        if (arch or extra.get("screen")) and self.reference and not self.job.train_over_budget:
            # a network measured over the budget is a failure: the trial measures it before training
            budget = {m: v for m, v in self.budget.limits().items() if m in MEASURED}
            if budget:
                measure_first = {"budget": budget, "reference_table_latency_ms": self._reference_latency()}
        # measured as the table was profiled (its backend, batch size, threads, device)
        measuring = Measuring.of_model(self.full, device=self.job.device)
        return TrialParameters(arch=arch, space=self.job.space, space_args=self.job.space_args,
                               dataset=self.named.dataset, chip=self.model.chip,
                               costs=costs,
                               reference=dict(self.reference) if arch or extra.get("screen") else {},
                               measuring=measuring,
                               **{"train": self.job.train, **measure_first, **extra})

    def retrain_parameters(self) -> dict[str, Any]:
        """The last trial: the search history, the baseline and its predicted costs, the retraining options."""
        from nni_hwaware.trial.parameters import RetrainJob

        self._raise_if_all_failed()  # the same line as the result that settled it, whichever thread gets here first
        if not any(r.get("status") != "failed" for r in self.records.results):
            raise SearchFailed("every search trial failed; nothing to retrain")
        self.records.retrain_sent = True
        self._save_state()
        job = RetrainJob(history=self.records.history(), baseline=dict(self.reference),
                         baseline_costs=self.full.predict(self.reference).metrics(), budget=self.budget.limits())
        return self._parameters({}, train=self.job.retrain, retrain=job).to_dict()

    # -- results ---------------------------------------------------------------------
    def result(self, parameter_id: int | None, parameters: Mapping[str, Any], value: Any) -> None:
        """A trial's final result (the retraining trial's: write the report)."""
        from nni_hwaware.trial.parameters import KEY

        if "retrain" in (parameters.get(KEY) or {}) or (isinstance(value, Mapping) and value.get("retrain")):
            return self._write_report(value)
        if isinstance(value, Mapping) and value.get("screening"):
            return self._screened(parameter_id, value)
        arch = self.records.arch_of(parameter_id, parameters, value, self.named.check_architecture)
        self.records.settle(parameter_id)
        metrics = metrics_of(value)
        if metrics is None:
            _logger.warning("trial %s reported %r without a finite 'default'; counted as failed", parameter_id, value)
            self._failure(arch, "no finite result")
        else:
            metrics = on_table_scale(metrics, self._reference_latency())
            screened = self.ready().actions_of(arch) in self.ready().cleared  # trained on its screen's measurement
            self.ready().tell(arch, metrics)
            self.records.add_result(arch, {**metrics, **({"screened": True} if screened else {})})
        self._after_event()
        return None

    def _screened(self, parameter_id: int | None, value: Mapping[str, Any]) -> None:
        """A screening trial's result: each candidate's measurement told to the search (measured to fit: its
        training is next; over the budget: never trained)."""
        import json

        try:
            screened = json.loads(value["screened"])
        except (KeyError, TypeError, json.JSONDecodeError):
            raise HwAwareError(f"screening trial {parameter_id} reported no readable 'screened' list") from None
        archs = [self.named.check_architecture(item["arch"]) for item in screened]
        self.records.settle_screen(parameter_id, archs)  # by its architectures (microsoft/nni#5726)
        search = self.ready()
        for arch, item in zip(archs, screened, strict=True):
            self.resumed.discard(search.actions_of(arch))  # a rerun's result came
            metrics = on_table_scale({k: v for k, v in item.items() if k not in ("arch", "fits", "over")},
                                     self._reference_latency())
            search.tell(arch, {**metrics, NOT_TRAINED: "screening"})
            self.records.add_measurement(arch, {**metrics, "fits": search.actions_of(arch) in search.cleared})
        self._after_event()

    def ended(self, parameter_id: int, success: bool) -> None:
        self.records.end(parameter_id, success)  # *some* trial ended (microsoft/nni#5726)
        self._after_event()

    def imported(self, data: list[dict[str, Any]]) -> None:
        """Results of earlier trials (resume, ``nnictl experiment import``): learn those the search lacks."""
        search, learned = self.ready(), 0
        for arch, metrics in self.records.imported(data, self.named.check_architecture):
            if search.actions_of(arch) not in search.history.rewards:
                learned += 1
                if metrics is None:
                    self._failure(arch, "imported without a finite result")
                else:
                    metrics = on_table_scale(metrics, self._reference_latency())
                    search.tell(arch, metrics)
                    self.records.add_result(arch, metrics)
        _logger.info("imported %d results (%d already known or skipped)", learned, len(data) - learned)
        self._save()

    def _reference_latency(self) -> float:
        """The table's latency of the reference network: a result's measured ratio to it is its
        latency on the table's scale (:func:`~nni_hwaware.measurement.on_table_scale`)."""
        return self.full.predict(self.reference).latency_ms

    def _failure(self, arch: dict[str, Any], why: str) -> None:
        self.records.add_failure(arch, why, self.ready().tell(arch, None))

    def _settle_dead(self) -> None:
        for arch in self.records.dead_screens():
            if self.ready().actions_of(arch) in self.ready().pending:
                _logger.warning("the screening trial of %s ended without a result; counted as failed", arch)
                self._failure(arch, "its screening trial ended without a result (crashed, killed)")
        for arch in self.records.dead():
            if self.ready().actions_of(arch) not in self.ready().history.rewards:  # else its result came
                _logger.warning("a trial of %s ended without a result; counted as failed", arch)
                self._failure(arch, "ended without a final result (crashed, killed, out of memory)")

    def _after_event(self) -> None:
        self._settle_dead()
        self._save()
        self._raise_if_all_failed()

    def _raise_if_all_failed(self) -> None:
        if self.records.all_failed():
            raise SearchFailed(f"the first {ALL_FAILED_AFTER} search trials all failed; see their trial.stderr")

    # -- files on the manager's side -------------------------------------------------------
    def _write_report(self, value: Any) -> None:
        from nni_hwaware.report.search import write_retrain_report

        space = {"space": self.job.space if isinstance(self.job.space, str) else self.named.name,
                 "space_args": dict(self.job.space_args)}
        correction = self.search.correction.summary() if self.search and self.search.correction else {}
        paths, warnings = write_retrain_report(self.output_dir / "report", value, self.records.results,
                                               budget=self.budget.limits(), space=space, correction=correction,
                                               measurements=self.records.measurements)
        for line in warnings:
            _logger.warning("%s", line)
        _logger.info("report written: %s", ", ".join(str(p) for p in paths.values()))
        from nni_hwaware.nni_fixes import end_experiment_when_done

        if end_experiment_when_done():  # NNI fix 14: fewer trials than maxTrialNumber were needed
            _logger.info("every trial is sent: the experiment ends when they finish")

    def _save_state(self) -> None:
        if self.job.state_file and self.search is not None:
            save_state(self.job.state_file, self.state_dict(copy_tensors=False))

    def _save(self) -> None:
        self._save_state()
        if self.write_files and self.proxy is not None and len(self.proxy.cache) > self._proxy_saved:
            self.proxy.save(self.output_dir / workdir.PROXY_SCORES)  # a resumed or later search need not score them again
            self._proxy_saved = len(self.proxy.cache)
        if self.search is not None and self.write_files:
            write_json(self.output_dir / "trials.json", self.records.results)
            write_json(self.output_dir / "tuner_stats.json", self.stats())

    def stats(self) -> dict[str, Any]:
        search = self.ready()
        return {**self.records.stats(search.decisions, search.decision_seconds, len(search.history.order),
                                     len(search.pending)),
                "trainings": search.trainings, "measurements": search.measurements,
                "measurements_per_training": search.measurements / max(1, search.trainings),
                "screened_over_budget": len(search.history.screened),
                "measured_over_budget": search.measured_over_budget(),
                "cost_correction": search.correction.summary() if search.correction is not None else None,
                "proxy": None if self.proxy is None else {"proxy": self.proxy.proxy, "networks": self.proxy.computed,
                                                          "ms_per_network": round(self.proxy.mean_ms(), 2)}}


def _key(arch: Mapping[str, Any]) -> str:
    """An architecture as a key of the records (its JSON, sorted)."""
    import json

    return json.dumps(dict(arch), sort_keys=True)
