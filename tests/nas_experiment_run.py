"""``python nas_experiment_run.py WORKDIR TRIALS [EXPERIMENT_ID]``: a PPO search of digits_tiny
through ``NasExperiment`` (sequential engine), with a state file; with an id, resume it."""

from __future__ import annotations

import sys
from pathlib import Path

from nni.nas.experiment import NasExperiment, NasExperimentConfig

from nni_hwaware.experiment import free_port
from nni_hwaware.spaces import BlockChoiceSpace, get_space_config
from nni_hwaware.strategies.evaluator import hardware_evaluator
from nni_hwaware.strategies.ppo.strategy import PPOStrategy

TABLE = str(Path(__file__).resolve().parents[1] / "benchmarks" / "data" / "digits_tiny_table.csv")

if __name__ == "__main__":
    workdir, trials = Path(sys.argv[1]), int(sys.argv[2])
    resume_id = sys.argv[3] if len(sys.argv) > 3 else None
    strategy = PPOStrategy("digits_tiny", TABLE, ppo={"seed": 0, "update_every": 2},
                           state_file=str(workdir / "ppo_state.pt"))
    experiment = NasExperiment(BlockChoiceSpace(get_space_config("digits_tiny").to_dict()),
                               hardware_evaluator("digits_tiny", TABLE, train={"epochs": 1, "threads": 1}),
                               strategy, NasExperimentConfig("sequential", "raw"), id=resume_id)
    experiment.config.max_trial_number = trials
    experiment.config.experiment_working_directory = str(workdir)
    print(f"experiment id: {experiment.id}", flush=True)
    if resume_id:
        experiment.resume(port=free_port())
    else:
        experiment.run(port=free_port())  # not 8080: tests run two at a time
    experiment.stop()
