"""The stage plan of a staged search (upper, lower or all layers): who is searched when, and when to move on.

:class:`StagePlan` is plain Python (no torch, no Lightning): the Lightning module
asks it, at the start of each epoch, which layers are searched and at what
temperature, and tells it, at the end, the epoch's mean search loss. Its state
goes into the search's checkpoints, so a resumed search continues the same stage.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

from nni_hwaware.errors import HwAwareError
from nni_hwaware.strategies.gumbel.strategy_config import StagingConfig, TemperatureConfig

__all__ = ["Stage", "StagePlan"]


@dataclass(frozen=True)
class Stage:
    """One stage: the searched layers (weights and architecture parameters) and its epoch limit.

    ``name`` is ``warmup`` (weights of every layer, no architecture update),
    ``upper``, ``lower`` or ``all``. ``trains_stem``/``trains_head``: whether the
    fixed stem (goes with the lower part) and head (with the upper part) train.
    """

    name: str
    layers: tuple[str, ...]
    max_epochs: int
    searches: bool
    trains_stem: bool
    trains_head: bool


class StagePlan:
    """Stages in order, each ended by patience on its loss or by its epoch limit."""

    def __init__(self, labels: Sequence[str], staging: StagingConfig, temperature: TemperatureConfig) -> None:
        labels = [str(label) for label in labels]  # plain str (NNI's labels are a subclass)
        if not labels:
            raise HwAwareError("the space has no searchable layers")
        split = len(labels) // 2 if staging.split is None else staging.split
        if any(part != "all" for part in staging.order) and not 1 <= split < len(labels):
            raise HwAwareError(
                f"stages split m={split} must leave layers on both sides: 1 <= m < {len(labels)} "
                f"(the space has {len(labels)} searchable layers)")
        self.staging, self.temperature, self.split = staging, temperature, split
        self.labels = labels
        parts = {"lower": tuple(labels[:split]), "upper": tuple(labels[split:]), "all": tuple(labels)}
        self.stages: list[Stage] = []
        if staging.warmup_epochs:
            self.stages.append(Stage("warmup", tuple(labels), staging.warmup_epochs, False, True, True))
        for part in staging.order:
            self.stages.append(Stage(part, parts[part], staging.max_epochs, True,
                                     trains_stem=part in ("lower", "all"), trains_head=part in ("upper", "all")))
        self.index = 0
        self.epoch_in_stage = 0
        self.best = float("inf")
        self.bad_epochs = 0
        #: One record per finished epoch: stage, epoch in stage, loss, decision.
        self.log: list[dict[str, Any]] = []

    @property
    def done(self) -> bool:
        return self.index >= len(self.stages)

    @property
    def current(self) -> Stage:
        if self.done:
            raise RuntimeError("the stage plan is finished")
        return self.stages[self.index]

    def later_layers(self) -> tuple[str, ...]:
        """The layers a later stage searches that neither this stage nor an earlier one has searched:
        what is still to move when this stage ends (empty in the last searching stage)."""
        if self.done:
            return ()
        searched = {label for stage in self.stages[: self.index + 1] if stage.searches for label in stage.layers}
        return tuple(label for label in self.labels
                     if label not in searched and any(label in s.layers for s in self.stages[self.index + 1:]
                                                      if s.searches))

    def max_total_epochs(self) -> int:
        """The most epochs the plan can take (every stage to its limit)."""
        return sum(stage.max_epochs for stage in self.stages)

    def temperature_now(self) -> float:
        """The Gumbel temperature for the current epoch of the current stage."""
        return self.temperature.at(self.epoch_in_stage, self.current.max_epochs)

    def end_epoch(self, loss: float) -> str:
        """Record the epoch's mean search loss; returns ``continue``, ``next`` (stage) or ``done``
        (:meth:`stop` ends it early: ``stopped``)."""
        stage = self.current
        self.epoch_in_stage += 1
        if stage.searches:
            if loss < self.best - self.staging.min_delta:
                self.best, self.bad_epochs = loss, 0
            else:
                self.bad_epochs += 1
        stalled = (stage.searches and self.bad_epochs >= self.staging.patience
                   and self.epoch_in_stage >= self.staging.min_epochs)
        finished = stalled or self.epoch_in_stage >= stage.max_epochs
        decision = "continue"
        if finished:
            self.index += 1
            self.epoch_in_stage, self.best, self.bad_epochs = 0, float("inf"), 0
            decision = "done" if self.done else "next"
        self.log.append({"stage": stage.name, "loss": loss, "decision": decision,
                         "reason": "patience" if stalled else ("max_epochs" if finished else "")})
        return decision

    def stop(self, loss: float, reason: str) -> str:
        """End the plan now, in the middle of the current stage (e.g. ``collapse``); returns the decision
        ``stopped``, recorded in :attr:`log` like :meth:`end_epoch`'s."""
        stage = self.current
        self.log.append({"stage": stage.name, "loss": loss, "decision": "stopped", "reason": reason})
        self.index, self.epoch_in_stage, self.best, self.bad_epochs = len(self.stages), 0, float("inf"), 0
        return "stopped"

    def state_dict(self) -> dict[str, Any]:
        return {"index": self.index, "epoch_in_stage": self.epoch_in_stage, "best": self.best,
                "bad_epochs": self.bad_epochs, "log": list(self.log),
                "stages": [asdict(stage) for stage in self.stages]}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        stages = [Stage(**{**s, "layers": tuple(s["layers"])}) for s in state["stages"]]
        if stages != self.stages:
            raise HwAwareError("the checkpoint was written by a search with other stages; "
                               "resume with the same stages options or start afresh (search.resume: false)")
        self.index, self.epoch_in_stage = int(state["index"]), int(state["epoch_in_stage"])
        self.best, self.bad_epochs = float(state["best"]), int(state["bad_epochs"])
        self.log = list(state["log"])
