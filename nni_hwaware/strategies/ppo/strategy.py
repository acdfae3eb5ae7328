"""The PPO search as an NNI NAS Strategy, for ``NasExperiment(space, evaluator, strategy)``.

A thin wrapper: NNI's ``HPOTunerStrategy`` drives :class:`PPOTuner` (one core,
two routes), and :meth:`state_dict` / :meth:`load_state_dict` carry the policy
and the history into NNI's experiment checkpoint, so a resumed experiment
continues with what it learned. NNI saves that checkpoint only when the
experiment starts and stops; give ``state_file`` to survive a kill too (the
tuner saves it at every proposal and result, and a resume prefers it).
"""

from __future__ import annotations

from typing import Any

from nni.nas.strategy.hpo import HPOTunerStrategy

from nni_hwaware.errors import HwAwareError
from nni_hwaware.strategies.ppo.tuner import PPOTuner

__all__ = ["PPOStrategy"]


class PPOStrategy(HPOTunerStrategy):
    """PPO architecture search under a hardware budget; arguments as :class:`PPOTuner`."""

    def __init__(self, space: str | Any, table: str | None = None, **options: Any) -> None:
        if options.get("retrain") is not None:
            raise HwAwareError("retrain is for nnictl experiments (a final trial); from Python, retrain the best "
                               "architecture with nni_hwaware.training.evaluate_architecture")
        if options.get("screen", 1) != 1:
            raise HwAwareError("screen is for nnictl experiments (screening trials of several networks); from Python "
                               "each sample's evaluator measures its network before training it: leave screen at 1")
        super().__init__(PPOTuner(space, table, **options))
        self.tuner.rerun_in_flight = False  # NasExperiment.resume() does not rerun unfinished models

    def extra_repr(self) -> str:
        tuner = self.tuner
        return f"space={tuner.job.space!r}, budget={tuner.job.budget.to_dict()!r}, ppo={tuner.job.ppo!r}"

    def state_dict(self) -> dict[str, Any]:
        tuner = self.tuner
        return {**super().state_dict(), "ppo": None if tuner.search is None else tuner.state_dict()}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        super().load_state_dict(state_dict)
        self.tuner.initial_state = state_dict.get("ppo")
