"""Both strategies on a user's own space from Python, with NNI's NasExperiment (a few minutes on a CPU).

    cd examples/own_space && PYTHONPATH=. python python_api.py [--quick]
"""

from __future__ import annotations

import argparse
from pathlib import Path

from nni.nas.experiment import NasExperiment, NasExperimentConfig

from nni_hwaware.cost_model import load_or_profile, space_model
from nni_hwaware.spaces.resolve import resolve_space
from nni_hwaware.strategies.evaluator import hardware_evaluator
from nni_hwaware.strategies.gumbel import GumbelSearchConfig, HardwareGumbelDARTS
from nni_hwaware.strategies.gumbel.evaluator import gumbel_evaluator
from nni_hwaware.strategies.ppo.strategy import PPOStrategy


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="2 trials and 1 epoch each")
    args = parser.parse_args()
    out = Path("runs/python_api")
    out.mkdir(parents=True, exist_ok=True)
    named = resolve_space("own_space:OwnSpace")
    table = out / "cost_table.csv"
    model = space_model(named, load_or_profile(named, table))  # profiles this CPU once
    print(model, "reference:", model.predict(named.baseline(model)))

    # PPO, multi-trial: each trial trains one network and reports it with its predicted costs
    strategy = PPOStrategy("own_space:OwnSpace", str(table), budget={"latency_ms": "60%"}, ppo={"seed": 0})
    train = {"epochs": 1 if args.quick else 8, "threads": 1}
    experiment = NasExperiment(named.space, hardware_evaluator("own_space:OwnSpace", str(table), train=train),
                               strategy, NasExperimentConfig("sequential", "raw"))
    experiment.config.max_trial_number = 2 if args.quick else 12
    experiment.run()
    print("PPO, best:", max(strategy.tuner.records.results, key=lambda r: r["default"]))
    experiment.stop()

    # Gumbel-DARTS, one-shot: one Gumbel mask per label shared by every mixed op of it
    config = GumbelSearchConfig.from_dict({
        "out": str(out / "gumbel"), "penalty": {"latency_target": "45%", "memory_target": "51%"},
        "stages": {"order": ["all"], "max_epochs": 1 if args.quick else 6},
        "search": {"threads": 1, "checkpoint": False}})
    gumbel = HardwareGumbelDARTS(model, penalty=config.penalty, staging=config.stages,
                                 reference=named.baseline(model), report=lambda record: None)
    experiment = NasExperiment(named.supernet(), gumbel_evaluator(config, named, config.stages.max_epochs,
                                                                  out / "gumbel"), gumbel)
    experiment.run()
    print("Gumbel:", experiment.export_top_models(formatter="dict")[0])
    experiment.stop()


if __name__ == "__main__":
    main()
