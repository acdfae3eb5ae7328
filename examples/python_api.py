"""Both strategies from Python through NNI's ``NasExperiment`` (digits, this CPU).

    python examples/python_api.py              # PPO: 12 trials, then Gumbel-DARTS
    python examples/python_api.py --quick      # a minute: 3 PPO trials, a 1-epoch Gumbel search

1. Profile the space on this machine into a cost table (seconds).
2. PPO: ``NasExperiment(space, hardware_evaluator(...), PPOStrategy(...))`` searches
   under 60 % of the baseline's latency; each trial trains the sampled network.
3. Gumbel-DARTS: the one-shot strategy penalised by the table's latency and memory,
   run by ``NasExperiment`` on NNI's sequential engine; the exported architecture is
   printed and can be retrained with ``nni-hwaware retrain``.
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path


def run_ppo(table: Path, workdir: Path, trials: int, epochs: int) -> dict[str, object]:
    from nni.nas.experiment import NasExperiment, NasExperimentConfig

    from nni_hwaware.spaces import BlockChoiceSpace, get_space_config
    from nni_hwaware.strategies.evaluator import hardware_evaluator
    from nni_hwaware.strategies.ppo.strategy import PPOStrategy

    config = get_space_config("digits")
    strategy = PPOStrategy("digits", str(table), budget={"latency_ms": "60%"}, ppo={"seed": 0, "update_every": 4})
    experiment = NasExperiment(
        BlockChoiceSpace(config.to_dict()),
        hardware_evaluator("digits", str(table), train={"epochs": epochs, "threads": 1}),
        strategy,
        NasExperimentConfig("sequential", "raw"),  # in this process; drop it for NNI's web portal (then
        # start it inside `with nni_hwaware.experiment.portal.local_portal():` to keep it on 127.0.0.1)
    )
    experiment.config.max_trial_number = trials
    experiment.config.experiment_working_directory = str(workdir)
    try:
        experiment.run()
    finally:
        experiment.stop()
    search = strategy.tuner.search
    # each trial measured its network first: trained if it fit, else it cost a measurement, not a training
    over = search.measured_over_budget() + len(search.history.screened)
    best = search.best()  # None when every trial was measured over the budget
    if best is None:
        print(f"no trial was measured within the budget ({over} measured over it)")
    arch, accuracy = best if best is not None else (None, None)
    return {"best_arch": arch, "best_val_top1": accuracy, "trials": search.trainings + len(search.history.screened),
            "trainings": search.trainings, "measured_over_budget": over}


def run_gumbel(table: Path, workdir: Path, quick: bool) -> dict[str, object]:
    from nni.nas.evaluator.pytorch import Classification, DataLoader
    from nni.nas.experiment import NasExperiment

    from nni_hwaware.cost_model import space_model
    from nni_hwaware.cost_table import CostTable
    from nni_hwaware.pruning import prune_choices
    from nni_hwaware.spaces.data import Digits
    from nni_hwaware.spaces.resolve import resolve_space
    from nni_hwaware.strategies.gumbel.strategy import HardwareGumbelDARTS

    named = resolve_space("digits")
    full = space_model(named, CostTable.load(table))
    # Seed 001 step 4: prune by S = k*U*P first, keeping the cheap blocks a search needs and
    # the baseline's block (the penalty is relative to the baseline's cost).
    pruned = prune_choices(full, always_keep=["skip", "mbconv_k3_e3", "bottleneck"])
    space, model = named.narrowed(pruned.allowed), pruned.model
    epochs = 1 if quick else 15
    evaluator = Classification(
        train_dataloaders=DataLoader(Digits("train"), batch_size=64),
        val_dataloaders=DataLoader(Digits("val"), batch_size=64),
        num_classes=10, learning_rate=0.01, max_epochs=epochs, accelerator="cpu", logger=False,
        enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False)
    strategy = HardwareGumbelDARTS(model, penalty={"latency_target": "45%", "memory_target": "51%"},
                                   staging={"order": ["all"], "max_epochs": epochs, "min_epochs": epochs},
                                   reference=named.baseline(full), report=lambda record: None)
    experiment = NasExperiment(space.supernet(), evaluator, strategy)  # sequential engine
    experiment.config.experiment_working_directory = str(workdir)
    try:
        experiment.run()
    finally:
        experiment.stop()
    arch = strategy.export_architecture()
    return {"arch": arch, "predicted": model.predict(arch).metrics(),
            "baseline_predicted": full.predict(named.baseline(full)).metrics()}


def main(argv: list[str] | None = None) -> dict[str, object]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--skip-gumbel", action="store_true")
    args = parser.parse_args(argv)

    from nni_hwaware.cost_model import profile_space

    out: dict[str, object] = {}
    with tempfile.TemporaryDirectory() as tmp:
        table = Path(tmp) / "cost_table.csv"
        # --quick: 5 s of timing rounds instead of 0.25 s per leaf (a coarser table)
        profile_space("digits", progress=False, max_seconds=5.0 if args.quick else None).save(table)
        out["ppo"] = run_ppo(table, Path(tmp), trials=3 if args.quick else 12, epochs=2 if args.quick else 10)
        print("PPO:", json.dumps(out["ppo"]))
        if not args.skip_gumbel:
            out["gumbel"] = run_gumbel(table, Path(tmp), args.quick)
            print("Gumbel-DARTS:", json.dumps(out["gumbel"]))
    return out


if __name__ == "__main__":
    main()
