"""The PPO search as an NNI Tuner, for ``nnictl create --config``: a thin adapter.

``classArgs`` are a :class:`~nni_hwaware.strategies.ppo.job.PPOJob` (validated
once; :class:`PPOClassArgsValidator` runs the same check in ``nnictl``). The
experiment's search space must be ``choice`` parameters named like the space's
labels (``nni-hwaware search-space --space NAME`` writes it). The work is the
:class:`~nni_hwaware.strategies.ppo.session.SearchSession`'s; this class
translates NNI's calls:

* a proposal goes out as self-contained
  :class:`~nni_hwaware.trial.parameters.TrialParameters`, so trials run on any
  machine of NNI's training service;
* the final retraining trial is due once every search result is in: when NNI
  asks earlier, it is told "no more" for now, and the tuner sends the trial
  itself through the callback NNI hands to ``generate_multiple_parameters``
  (as NNI's own PPO and evolution tuners do);
* a search whose trials all fail stops the experiment with an error
  (:func:`~nni_hwaware.nni_fixes.report_experiment_error`), not as DONE;
* NNI's calls, which come from two of its threads, run one at a time
  (:func:`~nni_hwaware.nni_fixes.serialized_tuner`).

NNI's manager gives the dispatcher 10 seconds to connect, and it builds the tuner
first: the constructor imports nothing heavy; the work starts in
:meth:`PPOTuner.update_search_space`. Paths: :mod:`~nni_hwaware.strategies.ppo.workdir`.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import Any

import nni
from nni.tuner import Tuner
from nni.utils import ClassArgsValidator

from nni_hwaware.errors import HwAwareError
from nni_hwaware.nni_fixes import fix_no_more_trial_packing, serialized_tuner
from nni_hwaware.strategies.ppo import workdir
from nni_hwaware.strategies.ppo.job import PPOJob
from nni_hwaware.strategies.ppo.session import NoProposal, SearchFailed, SearchSession

__all__ = ["PPOClassArgsValidator", "PPOTuner"]

_logger = logging.getLogger("nni_hwaware.ppo")
fix_no_more_trial_packing()  # NNI fix 12: this module is imported in NNI's dispatcher


@serialized_tuner  # NNI fix 13: NNI calls trial_end on another thread than the rest
class PPOTuner(Tuner):
    """NNI Tuner over the PPO search; arguments: :class:`PPOJob`'s fields (``classArgs``)."""

    def __init__(self, space: Any, table: str | None = None, **options: Any) -> None:
        named = None
        if not isinstance(space, str):  # a ModelSpace or NamedSpace object (the Python route)
            from nni_hwaware.spaces.resolve import resolve_space

            named = resolve_space(space, **(options.get("space_args") or {}))
            space = named.name
        space, table, state_file, output_dir = workdir.tuner_files(space, table, options.pop("state_file", None))
        self.job = PPOJob.from_dict({"space": space, "table": table, "state_file": state_file, **options},
                                       "PPOTuner classArgs")
        self._named, self.output_dir, self.state_file = named, output_dir, state_file
        self.session: SearchSession | None = None
        #: Whether architectures in flight at a save run again after a resume (nnictl resume reruns them).
        self.rerun_in_flight = True
        #: A saved :meth:`state_dict` to continue from (set by the NNI Strategy on resume).
        self.initial_state: dict[str, Any] | None = None
        self._waiting: list[int] = []  # parameter ids NNI asked for while the retraining had to wait
        self._send: Callable[[int, dict[str, Any]], None] | None = None  # NNI's callback to issue a trial

    @property
    def named(self) -> Any:
        """The searched space (resolved on first use: building spaces needs torch)."""
        if self._named is None:
            self._named = self.job.named()
        return self._named

    @property
    def search(self) -> Any:
        """The :class:`~nni_hwaware.strategies.ppo.search.PPOSearch` (None before the search space arrives)."""
        return self.session.search if self.session else None

    @property
    def model(self) -> Any:
        """The cost model the search masks with (the search space's values, pruned)."""
        return self.session.model if self.session else None

    @property
    def records(self) -> Any:
        return self._session().records

    def _session(self) -> SearchSession:
        if self.session is None:
            raise HwAwareError("the tuner got no search space; set searchSpace/searchSpaceFile in the config")
        return self.session

    def update_search_space(self, search_space: Mapping[str, Any]) -> None:
        try:
            session = SearchSession(self.job, self.named, self.output_dir,
                                    write_files=self.job.retrain is not None or workdir.experiment_root() is not None)
            session.start(search_space, self.initial_state, self.rerun_in_flight)
            self.session = session
        except HwAwareError as err:
            _logger.error("nni-hwaware: %s", err)  # one clear line in the dispatcher's log
            raise

    def state_dict(self) -> dict[str, Any]:
        return self._session().state_dict()

    def generate_multiple_parameters(self, parameter_id_list: list[int], **kwargs: Any) -> list[dict[str, Any]]:
        self._send = kwargs.get("st_callback", self._send)
        params = []
        for parameter_id in parameter_id_list:
            try:
                params.append(self._guarded(lambda pid=parameter_id: self._session().propose(pid)))
            except NoProposal as stop:
                if stop.waiting:  # sent by _after_event once every search result is in
                    self._waiting.append(parameter_id)
                break
        return params

    def generate_parameters(self, parameter_id: int, **kwargs: Any) -> dict[str, Any]:
        try:
            return self._guarded(lambda: self._session().propose(parameter_id))
        except NoProposal as stop:
            raise nni.NoMoreTrialError(str(stop)) from None

    def receive_trial_result(self, parameter_id: int, parameters: Mapping[str, Any], value: Any,
                             **kwargs: Any) -> None:
        if not isinstance(parameters, Mapping):  # NNI's own bookkeeping may have lost them (fix 12)
            parameters = {}
        self._guarded(lambda: self._session().result(parameter_id, parameters, value))
        self._send_waiting_retrain()

    def trial_end(self, parameter_id: int, success: bool, **kwargs: Any) -> None:
        self._guarded(lambda: self._session().ended(parameter_id, success))
        self._send_waiting_retrain()

    def import_data(self, data: list[dict[str, Any]]) -> None:
        self._session().imported(data)

    def stats(self) -> dict[str, Any]:
        return self._session().stats()

    def _send_waiting_retrain(self) -> None:
        session = self._session()
        if self._waiting and self._send is not None and session.retrain_ready():
            self._send(self._waiting.pop(0), self._guarded(session.retrain_parameters))

    def _guarded(self, call: Callable[[], Any]) -> Any:
        """``call()``; a :class:`SearchFailed` stops the experiment with its message as the error."""
        try:
            return call()
        except SearchFailed as err:
            from nni_hwaware.nni_fixes import report_experiment_error

            message = f"nni-hwaware: {err}"
            _logger.error(message)
            report_experiment_error(self._send, message)
            raise


class PPOClassArgsValidator(ClassArgsValidator):
    """Checks ``classArgs`` as the tuner will: the :class:`PPOJob` and the space they name."""

    def validate_class_args(self, **kwargs: Any) -> None:
        try:
            if "space" not in kwargs:
                raise HwAwareError("PPOTuner classArgs need space: the space to search")
            PPOTuner(**kwargs).named  # noqa: B018  (resolving the space checks space and space_args)
        except HwAwareError as err:
            raise ValueError(str(err)) from None
