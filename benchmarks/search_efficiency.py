"""Trials each strategy needs to find the best architecture under a latency budget.

On the tabular benchmark (``benchmarks/data/tabular_digits_tiny.csv``: every
architecture of ``digits_tiny`` trained on digits; rebuild it with
``build_tabular.py``), every strategy is driven through NNI's Tuner interface
(``update_search_space`` / ``generate_parameters`` / ``receive_trial_result``),
and a trial is a table look-up instead of a training run. The budget admits
about a third of the architectures. An over-budget trial is reported to the
tuner as a failure (accuracy 0): its network would not fit the chip.

Per strategy, over ``--seeds`` seeds: median trials until the best feasible
architecture is trained (censored at the space size + 1 when never found),
regret at 50 trials, over-budget trials (among the first max(50, trials to best))
and milliseconds per decision. ``random_feasible`` is random search that knows
the budget (uniform over the untried architectures that fit): the bar that
budget masking alone reaches. The last line is one JSON object.
"""

from __future__ import annotations

import argparse
import json
import logging
import random
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import nni
import numpy as np
import pandas as pd

from nni_hwaware.spaces import get_space_config

DATA = Path(__file__).parent / "data"
SPACE = "digits_tiny"


def _strategies(budget_ms: float, ppo: dict[str, Any]) -> dict[str, Callable[[int], Any]]:
    from nni.algorithms.hpo.random_tuner import RandomTuner
    from nni.algorithms.hpo.regularized_evolution_tuner import RegularizedEvolutionTuner
    from nni.algorithms.hpo.tpe_tuner import TpeTuner

    from nni_hwaware.strategies.ppo.tuner import PPOTuner

    class Evolution(RegularizedEvolutionTuner):
        """NNI's regularised evolution takes ``layer_choice`` parameters, not ``choice``."""

        def update_search_space(self, search_space: dict[str, Any]) -> None:
            super().update_search_space({k: {**v, "_type": "layer_choice"} for k, v in search_space.items()})

    def evolution(seed: int) -> Any:
        random.seed(seed)  # NNI's evolution tuner draws from the global `random` module
        np.random.seed(seed)
        return Evolution(optimize_mode="maximize", population_size=16, sample_size=4)

    class RandomFeasible(RandomTuner):
        """Random search that knows the budget: uniform over the untried architectures that fit."""

        def __init__(self, seed: int) -> None:
            super().__init__(seed=seed)
            frame = pd.read_csv(DATA / f"tabular_{SPACE}.csv")
            labels = [s.label for s in get_space_config(SPACE).layer_specs()]
            fits = frame[frame.latency_ms <= budget_ms]
            self.left = [dict(zip(labels, row, strict=True)) for row in fits[labels].itertuples(index=False)]
            self.order = np.random.default_rng(seed).permutation(len(self.left))

        def generate_parameters(self, parameter_id: int, **kwargs: Any) -> dict[str, str]:
            if parameter_id >= len(self.order):
                raise nni.NoMoreTrialError()
            return self.left[self.order[parameter_id]]

    return {
        "ppo": lambda seed: PPOTuner(SPACE, str(DATA / f"{SPACE}_table.csv"),
                                     budget={"latency_ms": budget_ms}, ppo={**ppo, "seed": seed}),
        "random": lambda seed: RandomTuner(seed=seed),
        "tpe": lambda seed: TpeTuner(optimize_mode="maximize", seed=seed),
        "regularized_evolution": evolution,
        "random_feasible": RandomFeasible,
    }


def run(tuner: Any, frame: pd.DataFrame, budget_ms: float, max_trials: int) -> dict[str, Any]:
    """A tuner through NNI's Tuner interface, each trial a table look-up."""
    config = get_space_config(SPACE)
    labels = [s.label for s in config.layer_specs()]
    tuner.update_search_space({s.label: {"_type": "choice", "_value": list(s.candidates)}
                               for s in config.layer_specs()})
    lookup = frame.set_index(labels)
    best_acc = frame[frame.latency_ms <= budget_ms].val_acc.max()
    sequence: list[tuple[bool, float]] = []
    decision_s = 0.0
    for trial in range(max_trials):
        if trial >= 50 and any(fits and acc >= best_acc for fits, acc in sequence):
            break  # the best is found and regret at 50 is known
        start = time.perf_counter()
        try:
            params = tuner.generate_parameters(trial)
        except nni.NoMoreTrialError:
            break
        decision_s += time.perf_counter() - start
        # NNI's evolution tuner answers layer_choice values as {"_value": name, "_idx": i}
        blocks = [v.get("_value") if isinstance(v, dict) else v for v in (params[label] for label in labels)]
        row = lookup.loc[tuple(blocks)]
        fits = bool(row.latency_ms <= budget_ms)
        sequence.append((fits, float(row.val_acc)))
        metric = {"default": float(row.val_acc) if fits else 0.0, "latency_ms": float(row.latency_ms),
                  "arch": json.dumps(dict(zip(labels, blocks, strict=True)))}
        tuner.receive_trial_result(trial, params, metric)
        tuner.trial_end(trial, True)
    return summarise(sequence, frame, budget_ms, max_trials, decision_s)


def summarise(sequence: list[tuple[bool, float]], frame: pd.DataFrame, budget_ms: float, max_trials: int,
              seconds: float) -> dict[str, Any]:
    """The figures of one run from its trials in order: (fits the budget, validation accuracy)."""
    best_acc = frame[frame.latency_ms <= budget_ms].val_acc.max()
    found_at = next((i + 1 for i, (fits, acc) in enumerate(sequence) if fits and acc >= best_acc), None)
    window = sequence[: max(50, found_at or 0)]
    best_50 = max([acc if fits else 0.0 for fits, acc in sequence[:50]], default=0.0)
    return {"trials_to_best": found_at if found_at is not None else max_trials + 1,
            "regret_at_50": float(best_acc - best_50), "over_budget": sum(not fits for fits, _ in window),
            "decision_ms": 1000 * seconds / max(1, len(sequence))}


def run_policy_based_rl(seed: int, frame: pd.DataFrame, budget_ms: float, max_trials: int) -> dict[str, Any]:
    """NNI's PolicyBasedRL (extra ``baselines``) through its Strategy interface: NasExperiment on
    NNI's sequential engine, each trial a table look-up."""
    import torch
    from nni.nas.evaluator import FunctionalEvaluator
    from nni.nas.experiment import NasExperiment, NasExperimentConfig
    from nni.nas.strategy import PolicyBasedRL

    from nni_hwaware.spaces import BlockChoiceSpace

    config = get_space_config(SPACE)
    labels = [s.label for s in config.layer_specs()]
    lookup = frame.set_index(labels)
    sequence: list[tuple[bool, float]] = []

    def evaluate(model: Any) -> None:
        row = lookup.loc[tuple(model.arch[label] for label in labels)]
        fits = bool(row.latency_ms <= budget_ms)
        sequence.append((fits, float(row.val_acc)))
        nni.report_final_result(float(row.val_acc) if fits else 0.0)

    torch.manual_seed(seed)  # PolicyBasedRL draws from the global generators
    np.random.seed(seed)
    experiment = NasExperiment(BlockChoiceSpace(config.to_dict()), FunctionalEvaluator(evaluate),
                               PolicyBasedRL(max_collect=max_trials, trial_per_collect=4),
                               NasExperimentConfig("sequential", "raw"))
    experiment.config.max_trial_number = max_trials
    with tempfile.TemporaryDirectory() as tmp:
        experiment.config.experiment_working_directory = tmp
        start = time.perf_counter()
        try:
            experiment.run()
        finally:
            experiment.stop()
    return summarise(sequence, frame, budget_ms, max_trials, time.perf_counter() - start)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=20)
    parser.add_argument("--strategies", nargs="*")
    parser.add_argument("--budget-quantile", type=float, default=1 / 3)
    parser.add_argument("--ppo", default="{}", help="PPO options as JSON (see PPOConfig)")
    args = parser.parse_args()
    logging.getLogger("nni").setLevel(logging.ERROR)
    frame = pd.read_csv(DATA / f"tabular_{SPACE}.csv")
    budget_ms = float(frame.latency_ms.quantile(args.budget_quantile))
    strategies = _strategies(budget_ms, json.loads(args.ppo))
    names = [n for n in (args.strategies or list(strategies)) if n != "policy_based_rl"]
    max_trials = len(frame)
    out: dict[str, Any] = {"budget_ms": budget_ms, "feasible_share": float((frame.latency_ms <= budget_ms).mean()),
                           "n_archs": len(frame), "seeds": args.seeds}
    if args.strategies is None or "policy_based_rl" in args.strategies:
        try:
            import tianshou  # noqa: F401  (NNI's PolicyBasedRL needs it: pip install 'nni-hwaware[baselines]')
            names = [*names, "policy_based_rl"]
        except ImportError:
            out["policy_based_rl"] = "skipped: pip install 'nni-hwaware[baselines]' (tianshou 0.4.11, gym 0.26.2)"
    for name in names:
        if name == "policy_based_rl":
            runs = [run_policy_based_rl(seed, frame, budget_ms, max_trials) for seed in range(args.seeds)]
        else:
            runs = [run(strategies[name](seed), frame, budget_ms, max_trials) for seed in range(args.seeds)]
        summary = {
            "median_trials_to_best": statistics.median(r["trials_to_best"] for r in runs),
            "mean_regret_at_50": statistics.mean(r["regret_at_50"] for r in runs),
            "over_budget_trials": sum(r["over_budget"] for r in runs),
            "decision_ms": statistics.mean(r["decision_ms"] for r in runs),
            "not_found": sum(r["trials_to_best"] > max_trials for r in runs),
        }
        out[name] = summary
        out[f"{name}_median_trials_to_best"] = summary["median_trials_to_best"]
        print(name, json.dumps(summary), flush=True)
    if "ppo" in out and "random" in out:
        out["ratio_vs_random"] = out["ppo_median_trials_to_best"] / out["random_median_trials_to_best"]
        out["regret_at_50"] = out["ppo"]["mean_regret_at_50"]
        out["over_budget_trials"] = out["ppo"]["over_budget_trials"]
        out["decision_ms"] = out["ppo"]["decision_ms"]
    print(json.dumps(out))


if __name__ == "__main__":
    main()
