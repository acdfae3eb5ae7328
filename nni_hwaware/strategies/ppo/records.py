"""The tuner's records of a search: trials in flight, results, failures; free of NNI and torch.

NNI tells a tuner about trials through parameter ids, and under concurrency the
ids of trial *ends* are the manager's, often another trial's (microsoft/nni#5726);
result ids are right (a trial sends the id it received). So:

* a result's architecture is the one the trial echoes in its metric (``arch``),
  trusted over the id's parameters, and a difference is counted as a mismatch;
* an end only says that *some* trial ended. Once every search trial sent has
  ended, the ones without a result are exactly the dead ones
  (:meth:`TrialRecords.dead`); until then they stay in flight. A successful end
  waits :data:`RESULT_GRACE_S` for its result, which NNI may deliver after it.

A search whose first :data:`ALL_FAILED_AFTER` settled trials all failed is
stopped (:meth:`TrialRecords.all_failed`): the same cause would fail the rest.
"""

from __future__ import annotations

import io
import json
import math
import os
import pickle
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from nni_hwaware.errors import HwAwareError
from nni_hwaware.measurement import RATIO_LATENCY
from nni_hwaware.trial.parameters import KEY

__all__ = ["ALL_FAILED_AFTER", "RESULT_GRACE_S", "TrialRecords", "load_state", "metrics_of", "save_state"]

#: Seconds a trial NNI reports as succeeded has to deliver its final result before it counts as failed.
RESULT_GRACE_S = 60.0
#: Settled search trials that all failed, after which the search stops with an error.
ALL_FAILED_AFTER = 5
#: Fields of a result the retraining trial and the report need (the search history).
HISTORY_KEYS = ("default", "latency_ms", "memory_mb", "predicted_latency_ms", "predicted_memory_mb",
                "corrected_latency_ms", "corrected_memory_mb", "latency_ratio", RATIO_LATENCY, "flops", "params",
                "status")


def metrics_of(value: Any) -> dict[str, Any] | None:
    """The metric dict of a result (a plain number becomes ``default``); None when it has no finite ``default``."""
    metrics = dict(value) if isinstance(value, Mapping) else {"default": value}
    default = metrics.get("default")
    if isinstance(default, bool) or not isinstance(default, (int, float)) or not math.isfinite(float(default)):
        return None
    return metrics


@dataclass
class TrialRecords:
    """What the tuner knows of its trials (module docstring); :meth:`state` / :meth:`load` persist it."""

    #: One record per finished search trial: ``{arch, default, latency_ms, ...}`` or ``status: failed``.
    results: list[dict[str, Any]] = field(default_factory=list)
    retrain_sent: bool = False
    #: Search trials sent and not settled: parameter id -> architecture.
    in_flight: dict[int, dict[str, Any]] = field(default_factory=dict)
    #: Ids of the search trials sent by this run of the tuner.
    sent: set[int] = field(default_factory=set)
    #: Parameter id -> (when, succeeded) for every trial end NNI announced.
    ended: dict[int, tuple[float, bool]] = field(default_factory=dict)
    mismatches: int = 0
    #: Screening trials sent and not settled: parameter id -> the architectures it measures.
    screening: dict[int, list[dict[str, Any]]] = field(default_factory=dict)
    #: What the screening trials measured: one record per candidate (``fits``: measured to fit the budget).
    measurements: list[dict[str, Any]] = field(default_factory=list)

    @property
    def screened(self) -> dict[str, dict[str, Any]]:
        """The screening measurement of each architecture (its sorted JSON as the key): what its training
        trial reports instead of measuring it again."""
        return {json.dumps(m["arch"], sort_keys=True): {k: v for k, v in m.items() if k not in ("arch", "fits")}
                for m in self.measurements}

    def send_screen(self, parameter_id: int, archs: list[dict[str, Any]]) -> None:
        self.screening[parameter_id] = [dict(a) for a in archs]
        self.sent.add(parameter_id)

    def settle_screen(self, parameter_id: int | None, archs: list[dict[str, Any]]) -> None:
        """A screening trial's result came: the one that measured ``archs`` is settled (found by its
        architectures, as NNI may pair a result with another trial's id, microsoft/nni#5726)."""
        pid = next((p for p, sent in self.screening.items() if sent == archs), parameter_id)
        if pid != parameter_id:
            self.mismatches += 1
        self.screening.pop(pid, None)  # type: ignore[arg-type]

    def add_measurement(self, arch: Mapping[str, Any], metrics: Mapping[str, Any]) -> None:
        self.measurements.append({"arch": dict(arch), **{k: v for k, v in metrics.items() if k != "arch"}})

    def dead_screens(self) -> list[dict[str, Any]]:
        """The candidates of screening trials now certain to have ended without a result; removed."""
        if not self._certainly_ended(self.screening):
            return []
        dead = [a for archs in self.screening.values() for a in archs]
        self.screening.clear()
        return dead

    def _certainly_ended(self, waiting: Mapping[int, Any]) -> bool:
        """Whether the trials of ``waiting`` ended without a result for sure: every trial sent has ended
        and none of theirs ended well lately (its result may still be on the way)."""
        if not waiting or not self.sent <= self.ended.keys():
            return False
        now = time.monotonic()
        return not any(success and now - since < RESULT_GRACE_S for pid, (since, success) in self.ended.items()
                       if pid in waiting)

    def send(self, parameter_id: int, arch: dict[str, Any]) -> None:
        self.in_flight[parameter_id] = arch
        self.sent.add(parameter_id)

    def arch_of(self, parameter_id: int | None, parameters: Mapping[str, Any], value: Any,
                check: Callable[[Mapping[str, Any]], dict[str, Any]]) -> dict[str, Any]:
        """The architecture a result is for: the one echoed in the metric, else the one sent."""
        echoed = value.get("arch") if isinstance(value, Mapping) else None
        sent = self.in_flight.get(parameter_id) if parameter_id is not None else None
        if isinstance(echoed, str):
            try:
                data = json.loads(echoed)
            except json.JSONDecodeError:
                raise HwAwareError(f"trial {parameter_id} echoed a malformed arch {echoed!r}") from None
            if not isinstance(data, dict):
                raise HwAwareError(f"trial {parameter_id} echoed {echoed!r}, not a label -> value mapping")
            arch = check(data)
            if sent is not None and sent != arch:
                self.mismatches += 1
            return arch
        if sent is not None:
            return sent
        return check({k: v for k, v in parameters.items() if not k.startswith("_")})

    def settle(self, parameter_id: int | None) -> None:
        """``parameter_id``'s search trial has its result (or was counted as failed)."""
        self.in_flight.pop(parameter_id, None)  # type: ignore[arg-type]

    def add_result(self, arch: Mapping[str, Any], metrics: Mapping[str, Any]) -> None:
        self.results.append({"arch": dict(arch), **{k: v for k, v in metrics.items() if k != "arch"}})

    def add_failure(self, arch: Mapping[str, Any], why: str, reward: float) -> None:
        self.results.append({"arch": dict(arch), "default": None, "status": "failed", "reason": why,
                             "reward": reward})

    def end(self, parameter_id: int, success: bool) -> None:
        self.ended[parameter_id] = (time.monotonic(), success)

    def dead(self) -> list[dict[str, Any]]:
        """The search trials now certain to have ended without a result (module docstring); removed."""
        if not self._certainly_ended(self.in_flight):
            return []
        dead = list(self.in_flight.values())
        self.in_flight.clear()
        return dead

    def failures(self) -> int:
        return sum(1 for r in self.results if r.get("status") == "failed")

    def all_failed(self) -> bool:
        """Whether the first :data:`ALL_FAILED_AFTER` settled search trials (or all, if fewer are
        expected) failed and none succeeded."""
        return bool(self.results) and self.failures() == len(self.results) >= ALL_FAILED_AFTER

    def history(self) -> list[dict[str, Any]]:
        """The finished search trials, compact: what the retraining trial is sent."""
        return [{"arch": r["arch"], **{k: r[k] for k in HISTORY_KEYS if k in r}} for r in self.results]

    def state(self) -> dict[str, Any]:
        return {"results": self.results, "retrain_sent": self.retrain_sent, "measurements": self.measurements,
                "training": list(self.in_flight.values())}

    def load(self, state: Mapping[str, Any]) -> None:
        self.results = [dict(r) for r in state.get("results", [])]
        self.retrain_sent = bool(state.get("retrain_sent", False))
        self.measurements = [dict(m) for m in state.get("measurements", [])]

    @staticmethod
    def training_at_save(state: Mapping[str, Any]) -> list[dict[str, Any]]:
        """The architectures whose training trials were in flight when ``state`` was saved."""
        return [dict(a) for a in state.get("training", [])]

    def imported(self, data: list[Any], check: Callable[[Mapping[str, Any]], dict[str, Any]]
                 ) -> list[tuple[dict[str, Any], dict[str, Any] | None]]:
        """``(arch, metrics or None: failed)`` of each search result in NNI's ``import_data`` records;
        a retraining trial's record marks it as sent; foreign records are skipped (logged by the caller)."""
        out = []
        for record in data:
            parameters = record.get("parameter") if isinstance(record, Mapping) else None
            if not isinstance(parameters, Mapping):
                continue
            if "retrain" in (parameters.get(KEY) or {}):
                self.retrain_sent = True
                continue
            try:
                arch = self.arch_of(None, parameters, record.get("value"), check)
            except HwAwareError:
                continue
            out.append((arch, metrics_of(record.get("value"))))
        return out

    def stats(self, decisions: int, decision_seconds: float, results: int, in_flight: int) -> dict[str, Any]:
        """Decisions, results and failures so far (``tuner_stats.json``)."""
        return {"decisions": decisions, "decision_seconds": decision_seconds, "results": results,
                "measurements_screened": len(self.measurements),
                "failed": self.failures(), "in_flight": in_flight, "arch_mismatches": self.mismatches,
                "pid": os.getpid()}


#: Key of a saved state under which its plain entries are kept, each pickled as a byte string (:func:`save_state`).
PLAIN_KEY = "__plain__"


class _PlainPickler(pickle.Pickler):
    """Pickles builtin containers, numbers and strings only: anything else raises :class:`TypeError`."""

    def reducer_override(self, obj: Any) -> Any:
        raise TypeError(f"not a plain value: {type(obj).__name__}")


class _PlainUnpickler(pickle.Unpickler):
    """Reads what :class:`_PlainPickler` wrote; refuses every global, so no object is ever built."""

    def find_class(self, module: str, name: str) -> Any:
        raise pickle.UnpicklingError(f"a plain state names {module}.{name}")


def save_state(path: str, state: Mapping[str, Any]) -> None:
    """Write the search state atomically: its tensors by ``torch.save``, its plain entries pickled apart.

    A state is mostly plain lists and numbers (the history, the measurements, the correction's data), which
    torch's pickler visits one Python call an object; pickled by the C pickler into byte strings, they write
    in a tenth of the time. The rest (the policy's and the optimiser's tensors, the random state) stays
    torch's, and :func:`load_state` reads both without building any object.
    """
    import torch

    from nni_hwaware.files import atomic_open

    kept: dict[str, Any] = {}
    plain: dict[str, bytes] = {}
    for key, value in state.items():
        buffer = io.BytesIO()
        try:
            _PlainPickler(buffer, protocol=4).dump(value)
            plain[key] = buffer.getvalue()
        except TypeError:
            kept[key] = value
    kept[PLAIN_KEY] = plain
    with atomic_open(path, "wb") as fh:
        torch.save(kept, fh)


def load_state(path: str) -> dict[str, Any]:
    """Read a state :func:`save_state` wrote; never unpickles objects (``weights_only``, no globals)."""
    import torch

    try:
        state = torch.load(path, weights_only=True)
        for key, blob in state.pop(PLAIN_KEY, {}).items():
            state[key] = _PlainUnpickler(io.BytesIO(blob)).load()
        return state
    except Exception as err:
        raise HwAwareError(f"cannot read the PPO state {path}: {' '.join(str(err).split())[:200]}"
                           "; delete it to start the search afresh") from None
