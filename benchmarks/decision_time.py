"""How long a decision of the PPO search takes, as the main job uses it: an ask and a tell.

The search is built as ``config.yml`` builds it (the ``PPOTuner`` over the ``digits`` space with its
``classArgs``: pruning, budgets, the PPO options, the zero-cost proxies scored on the spot by
:class:`~nni_hwaware.zero_cost.ProxyScores`), on a cost table profiled on this machine first. Each
trial is simulated (nothing is trained): its network measures the table's prediction times a seeded
log-normal error, one measured over a budget reports ``not_trained`` (a measurement, no training),
and a trained one reports an accuracy that grows with the network's compute plus seeded noise. Each
decision is timed from ``generate_parameters`` to the end of ``receive_trial_result``.

    python benchmarks/decision_time.py --trainings 300 --seed 0

The last line is one JSON object: the median decision in milliseconds over the decisions up to the
100th training (``decision_ms_at_100``) and between the 201st and the 300th (``decision_ms_at_300``),
each with its interquartile range, the proxy's networks scored and milliseconds a network, and how
many measurements and trainings the search made.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import nni
import numpy as np
import yaml

ROOT = Path(__file__).resolve().parents[1]


def _quartiles(values: list[float]) -> dict[str, float]:
    q = np.quantile(values, [0.25, 0.5, 0.75]) if values else [math.nan] * 3
    return {"median": float(q[1]), "q25": float(q[0]), "q75": float(q[2]), "decisions": len(values)}


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trainings", type=int, default=300)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--ppo", default="{}", help="PPO options over config.yml's, as JSON")
    args = parser.parse_args(argv)
    from nni_hwaware.strategies.ppo.tuner import PPOTuner

    config = yaml.safe_load((ROOT / "config.yml").read_text())
    options = dict(config["tuner"]["classArgs"])
    space = json.loads((ROOT / config["searchSpaceFile"]).read_text())
    for key in ("search_trials", "retrain", "screen", "table"):
        options.pop(key, None)  # search until told to stop; one network a trial (each decision one ask, one tell)
    options["ppo"] = {**options.get("ppo", {}), **json.loads(args.ppo), "seed": args.seed}
    rng = np.random.default_rng(args.seed)
    with tempfile.TemporaryDirectory() as tmp:
        table = Path(tmp) / "cost_table.csv"
        tuner = PPOTuner(options.pop("space"), str(table), state_file=str(Path(tmp) / "state.pt"),
                         profile_seconds=10, **options)
        tuner.update_search_space(space)
        search, session = tuner.search, tuner.session
        limits = search.budget.limits()
        errors: dict[tuple[int, ...], float] = {}
        times: list[tuple[int, float]] = []
        parameter_id, stopped = 0, None
        while search.trainings < args.trainings:
            start = time.perf_counter()
            try:
                params = tuner.generate_parameters(parameter_id)
            except nni.NoMoreTrialError as err:  # every network that fits is tried: say so in the figures
                stopped = f"at {search.trainings} trainings: {err}"
                print(f"stopped {stopped}", file=sys.stderr)
                break
            arch = {k: v for k, v in params.items() if not k.startswith("_")}
            key = search.actions_of(arch)
            predicted = search.predicted(key)
            error = errors.setdefault(key, float(rng.lognormal(0.0, 0.05)))
            measured = {m: predicted[m] * error for m in ("latency_ms", "memory_mb")}
            result: dict[str, Any] = {**measured, "arch": json.dumps(arch)}
            if any(measured[m] > limits[m] for m in limits if m in measured):
                result.update(default=0.0, not_trained="measured over the budget")
            else:
                result["default"] = float(0.8 + 0.05 * math.log(predicted["flops"] + 1.0) / 20
                                          + rng.normal(0.0, 0.01))
            tuner.receive_trial_result(parameter_id, params, result)
            tuner.trial_end(parameter_id, True)
            times.append((search.trainings, 1000 * (time.perf_counter() - start)))
            parameter_id += 1
        proxy = session.proxy
        out = {
            "stopped": stopped,
            "trainings": search.trainings, "measurements": search.measurements,
            "decision_ms_at_100": _quartiles([ms for t, ms in times if t <= 100]),
            "decision_ms_at_300": _quartiles([ms for t, ms in times if 200 < t <= 300]),
            "proxy_networks": None if proxy is None else proxy.computed,
            "proxy_ms_per_network": None if proxy is None else round(proxy.mean_ms(), 2),
            "ppo_options": options["ppo"], "seed": args.seed,
            "decision_ms_median": statistics.median(ms for _, ms in times) if times else math.nan,
        }
    print(json.dumps(out))
    return out


if __name__ == "__main__":
    main()
