"""The peer's own ground: our hardware-penalised Gumbel search vs NNI's Proxyless on ProxylessNAS.

NNI's ``ProxylessNAS`` space at width 0.25 and 32x32 inputs (sklearn's digits
upsampled), on this CPU. Both strategies get the same cost table (profiled here,
every distinct leaf once), the same latency budget (60 % of the reference
network's predicted latency, the reference being every label at its slowest
value), the same epochs, data, batch size and learning rates:

* ours: :class:`HardwareGumbelDARTS` with the budget-mode penalty
  ``alpha * relu(lat/T - 1)`` on the masks of the forward pass (alpha 1, gamma 0);
* NNI's ``Proxyless`` with ``ExpectationProfilerPenalty`` of the same table's NNI
  profiler, ``baseline=T``, ``nonlinear='positive'``, scale 1: the same formula.

Each exported network (NNI's: the argmax of its architecture parameters, since its
own export is a random draw) is retrained the same way from scratch, tested, and
the two are timed interleaved (10 rounds; ratio ours / NNI's with a 95 % interval).
Prints one JSON object on its last line.

    python benchmarks/proxyless_comparison.py [--epochs 4] [--retrain-epochs 10] [--seed 0]
"""

from __future__ import annotations

import argparse
import json
import math
import time
from pathlib import Path
from typing import Any

import torch

from nni_hwaware.cost_model import load_or_profile, space_model
from nni_hwaware.profiling import BYTES_PER_MB, measure_module
from nni_hwaware.profiling.interleaved import interleaved_latency
from nni_hwaware.spaces.resolve import resolve_space
from nni_hwaware.strategies.gumbel import GumbelSearchConfig, HardwareGumbelDARTS
from nni_hwaware.strategies.gumbel.search import gumbel_evaluator
from nni_hwaware.training.train import TrainConfig, train_architecture


def _search(strategy: Any, named: Any, config: GumbelSearchConfig, epochs: int, out: Path) -> float:
    from nni.nas.execution import SequentialExecutionEngine
    from nni.nas.space import RawFormatModelSpace

    start = time.perf_counter()
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(config.seed)
        supernet = named.supernet()
    evaluator = gumbel_evaluator(config, named, epochs, out)
    torch.set_num_threads(config.search.threads)
    strategy(RawFormatModelSpace(supernet, evaluator), SequentialExecutionEngine())
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=4, help="search epochs of both strategies")
    parser.add_argument("--retrain-epochs", type=int, default=10)
    parser.add_argument("--budget", type=float, default=0.6, help="latency budget, share of the reference's")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", default="proxyless-comparison")
    args = parser.parse_args()
    from nni.nas.oneshot.pytorch.profiler import ExpectationProfilerPenalty
    from nni.nas.oneshot.pytorch.strategy import (
        Proxyless,  # nni.nas.strategy may hold a placeholder
    )

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    named = resolve_space("nni:ProxylessNAS")
    model = space_model(named, load_or_profile(named, out / "cost_table.csv", seed=args.seed))
    reference = named.baseline(model)
    budget_ms = args.budget * model.predict(reference).latency_ms
    config = GumbelSearchConfig.from_dict({
        "out": str(out), "seed": args.seed,
        "penalty": {"alpha": 1.0, "gamma": 0.0, "latency_budget_ms": budget_ms},
        "temperature": {"init": 1.0, "min": 0.33},
        "stages": {"order": ["all"], "max_epochs": args.epochs, "min_epochs": args.epochs},
        "search": {"batch_size": 128, "lr": 0.05, "arc_lr": 0.01, "threads": 2, "checkpoint": False,
                   "accelerator": "cpu"}})
    ours = HardwareGumbelDARTS(model, penalty=config.penalty, temperature=config.temperature,
                               staging=config.stages, arc_learning_rate=config.search.arc_lr, seed=args.seed,
                               reference=reference, report=lambda record: None)
    seconds = {"ours": _search(ours, named, config, args.epochs, out / "ours")}
    penalty = ExpectationProfilerPenalty(model.expression_profiler(named.space, "latency_ms"), baseline=budget_ms,
                                         scale=1.0, nonlinear="positive")
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(args.seed)  # NNI draws its initial architecture parameters from the global generator
        nni_strategy = Proxyless(arc_learning_rate=config.search.arc_lr, penalty=penalty)
        seconds["nni_proxyless"] = _search(nni_strategy, named, config, args.epochs, out / "nni")
    choices = named.choices()
    archs = {"ours": ours.export_architecture(),
             "nni_proxyless": {label: choices[label][int(alpha.argmax())]
                               for label, alpha in nni_strategy._arch_parameters.items()}}
    train = TrainConfig(epochs=args.retrain_epochs, seed=args.seed, threads=2, batch_size=64)
    results: dict[str, dict[str, Any]] = {}
    networks = {}
    for name, arch in archs.items():
        arch = named.check_architecture(arch)
        trained = train_architecture(named, arch, train)
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(args.seed)
            networks[name] = named.build(arch).eval()
        measured = measure_module(networks[name], named.input_shape, threads=1, seed=args.seed)
        predicted = model.predict(arch)
        input_mb = 4 * math.prod(named.input_shape) / BYTES_PER_MB
        results[name] = {"arch": arch, "test_top1": trained.test_top1, "test_top3": trained.test_top3,
                         "val_top1": trained.val_top1, "memory_mb": measured.memory_mb + input_mb,
                         "params": measured.params, "flops": measured.flops,
                         "predicted_latency_ms": predicted.latency_ms, "predicted_memory_mb": predicted.memory_mb,
                         "within_budget": predicted.latency_ms <= budget_ms * (1 + 1e-9),
                         "search_s": round(seconds[name], 1)}
        print(f"{name}: {json.dumps(results[name])}", flush=True)
    timing = interleaved_latency(networks["nni_proxyless"], networks["ours"], named.input_shape, rounds=10,
                                 seed=args.seed)
    results["nni_proxyless"]["latency_ms"] = timing["a_ms"]
    results["ours"]["latency_ms"] = timing["b_ms"]
    summary = {"space": "nni:ProxylessNAS", "budget_ms": budget_ms,
               "reference_predicted_ms": model.predict(reference).latency_ms, "epochs": args.epochs,
               "ours": results["ours"], "nni_proxyless": results["nni_proxyless"],
               "latency_ratio_ours_vs_nni": timing["ratio"], "latency_ratio_ci95": timing["ci95"],
               "memory_ratio_ours_vs_nni": results["ours"]["memory_mb"] / results["nni_proxyless"]["memory_mb"],
               "top1_diff_pts": 100 * (results["ours"]["test_top1"] - results["nni_proxyless"]["test_top1"])}
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
