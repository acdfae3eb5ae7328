"""The peers' own ground, over seeds: our Gumbel search vs NNI's one-shot strategies on ProxylessNAS.

NNI's ``ProxylessNAS`` space at width 0.25 and 32x32 inputs (sklearn's digits
upsampled), on this CPU. Every strategy gets the same cost table (profiled here once,
every distinct leaf), the same latency target (``--latency-target``, 60 % of the
reference network's predicted latency, the reference being every label at its slowest
value), the same epochs, data, batch size and learning rates, for each of ``--seeds N``
seeds (``--seed``, ``--seed`` + 1, ...):

* ours: :class:`HardwareGumbelDARTS` in target mode (``penalty.latency_target``: the weight
  set by the search itself; ``gamma`` 0: latency only, like the peers), exporting the most
  probable architecture within the target, timed against the reference on this CPU and exported
  again under a lower limit when measured over it (as the pipeline does; its seconds count as
  search);
* NNI's ``Proxyless``, ``DARTS`` and ``GumbelDARTS`` (``--peers``), each with NNI's own
  ``ExpectationProfilerPenalty`` of the same table's NNI profiler, ``baseline`` = the target,
  ``nonlinear='positive'``, scale 1 (``relu(lat/T - 1)``); exported as the argmax of their
  architecture parameters (NNI's own export of Proxyless is a random draw). NNI 3.0's
  DARTS / GumbelDARTS penalty carries no gradient to the architecture parameters
  (``nni_hwaware.nni_fixes`` item 5), so they run as NNI ships them. A peer that fails on
  the space is recorded with its one-line error and left out of that seed.

Each found network and the reference are retrained the same way from scratch and tested,
and all of them are timed in shared rounds on this CPU (one call of the measuring engine:
each round times every network in a shuffled order), so each strategy's latency ratio to
the reference and ours to each peer come with a 95 % interval from the same rounds. The
report gives each seed's table and one over the seeds (median, min-max); the last line is
one JSON object::

    {"seeds", "space", "latency_target", "strategies", "per_seed": [{"seed", "target_ms",
       "strategies": {name: {"arch", "latency_ratio", "latency_ratio_ci95", "memory_ratio",
                             "predicted_latency_ratio", "expected_latency_ratio", "top1_drop_pp", "top3_drop_pp",
                             "within_target", "search_s", "search_s_over_retrain_s",
                             "meets": {...}, "meets_targets"} or {"error"}},
       "ours_vs": {peer: {"latency_ratio", "latency_ratio_ci95", "memory_ratio", "top1_diff_pts",
                          "top3_diff_pts"}}}],
     "summary": {name: {figure: {median, min, max, n}}}, "ours_vs": {peer: {figure: spread}},
     "all_seeds_meet_targets", "meets_targets": {name: every seed}, "load", ...}

``meets`` are the checks of seed 001 (as in ``oneshot_vs_baseline.py``): the measured latency
ratio within the target, the expected one within 5 % of it (ours: what the export check expected of
the network before timing it, the table corrected by the earlier checks; a peer's, the table's), top-3 drop <= 0.5 points and
top-1 drop <= 1 point against the reference, search <= 3x one retraining;
``all_seeds_meet_targets`` is ours in every seed. ``--load`` runs everything under the load
harness; ``--quick`` takes one epoch of search and of retraining and a small profiling
budget, to check the benchmark end to end (``--space`` / ``--table`` give a smaller space).

    python benchmarks/proxyless_comparison.py --seeds 3 [--epochs 4] [--retrain-epochs 10] [--load]
"""

from __future__ import annotations

import argparse
import json
import math
import time
from pathlib import Path
from typing import Any

import torch

from nni_hwaware.errors import one_line
from nni_hwaware.report.spread import over_seeds

#: NNI's one-shot strategies compared with ours (the names of nni.nas.oneshot.pytorch.strategy).
PEERS = {"nni_proxyless": "Proxyless", "nni_darts": "DARTS", "nni_gumbel_darts": "GumbelDARTS"}
LIMITS = {"top3_drop_pp": 0.5, "top1_drop_pp": 1.0, "search_s_over_retrain_s": 3.0}
#: How close the expected latency ratio must be to the target (relative), as in oneshot_vs_baseline.py.
EXPECTED_WITHIN = 0.05
FIGURES = ("latency_ratio", "memory_ratio", "predicted_latency_ratio", "expected_latency_ratio", "top1_drop_pp",
           "top3_drop_pp", "search_s", "search_s_over_retrain_s")
VERSUS = ("latency_ratio", "memory_ratio", "top1_diff_pts", "top3_diff_pts")


def _search(strategy: Any, named: Any, config: Any, epochs: int, out: Path) -> float:
    from nni.nas.execution import SequentialExecutionEngine
    from nni.nas.space import RawFormatModelSpace

    from nni_hwaware.profiling import fixed_threads
    from nni_hwaware.strategies.gumbel.evaluator import gumbel_evaluator

    start = time.perf_counter()
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(config.seed)  # the supernet's weights, and NNI's initial architecture parameters
        supernet = named.supernet()
        evaluator = gumbel_evaluator(config, named, epochs, out)
        with fixed_threads(config.search.threads):
            strategy(RawFormatModelSpace(supernet, evaluator), SequentialExecutionEngine())
    return time.perf_counter() - start


def _nni_strategy(name: str, penalty: Any, arc_lr: float) -> Any:
    # nni.nas.strategy may hold a placeholder: the one-shot module has the real classes
    from nni.nas.oneshot.pytorch import strategy as oneshot

    return getattr(oneshot, PEERS[name])(arc_learning_rate=arc_lr, penalty=penalty)


def _argmax(strategy: Any, named: Any) -> dict[str, Any]:
    choices = named.choices()
    return {label: choices[label][int(alpha.argmax())] for label, alpha in strategy._arch_parameters.items()
            if label in choices}


def meets(figures: dict[str, Any], latency_target: float) -> dict[str, bool]:
    """Seed 001's checks of one found network (ratios to the reference; the target a share of it)."""
    return {"latency_ratio_within_target": figures["latency_ratio"] <= latency_target,
            "expected_latency_ratio_within_5pct_of_target":
                abs(figures["expected_latency_ratio"] / latency_target - 1) <= EXPECTED_WITHIN,
            **{f"{key}_within_{bound:g}": figures[key] <= bound for key, bound in LIMITS.items()}}


def _timed(networks: dict[str, torch.nn.Module], shape: tuple[int, ...], rounds: int, seed: int,
           max_seconds: float) -> Any:
    """Every network timed in the same shuffled rounds (one call of the measuring engine)."""
    from nni_hwaware.profiling import fixed_threads
    from nni_hwaware.profiling.backends import get_backend
    from nni_hwaware.profiling.rounds import time_in_rounds

    runtime = get_backend("torch")
    with fixed_threads(1):
        example = torch.randn((1, *shape), generator=torch.Generator().manual_seed(seed))
        runners = [runtime.prepare(net, example, "cpu") for net in networks.values()]
        return time_in_rounds(runners, min_sample_ms=5.0, min_rounds=rounds, max_rounds=max(rounds, 1000),
                              target=0.02, max_seconds=max_seconds, seed=seed)


def one_seed(args: argparse.Namespace, named: Any, model: Any, seed: int) -> dict[str, Any]:
    """Every strategy searched, retrained and timed for one seed."""
    from nni.nas.oneshot.pytorch.profiler import ExpectationProfilerPenalty

    from nni_hwaware.profiling import BYTES_PER_MB, measure_module
    from nni_hwaware.strategies.gumbel import GumbelSearchConfig, HardwareGumbelDARTS
    from nni_hwaware.strategies.gumbel.export_check import measured_export
    from nni_hwaware.strategies.gumbel.outcome import SearchOutcome
    from nni_hwaware.training.train import TrainConfig, train_architecture

    out = args.out / f"seed_{seed}"
    reference = named.baseline(model)
    reference_ms = model.predict(reference).latency_ms
    target_ms = args.latency_target * reference_ms
    config = GumbelSearchConfig.from_dict({
        "out": str(out), "seed": seed,
        "penalty": {"latency_target": target_ms, "memory_target": None, "gamma": 0.0},
        "temperature": {"init": 1.0, "min": 0.33},
        "stages": {"order": ["all"], "max_epochs": args.epochs, "min_epochs": args.epochs},
        "search": {"batch_size": 128, "lr": 0.05, "arc_lr": 0.01, "threads": args.threads, "checkpoint": False,
                   "accelerator": "cpu"}})
    archs: dict[str, dict[str, Any]] = {}
    seconds: dict[str, float] = {}
    errors: dict[str, str] = {}
    ours = HardwareGumbelDARTS(model, penalty=config.penalty, temperature=config.temperature,
                               staging=config.stages, arc_learning_rate=config.search.arc_lr, seed=seed,
                               reference=reference, report=lambda record: None)
    seconds["ours"] = _search(ours, named, config, args.epochs, out / "ours")
    # as the pipeline exports: timed against the reference on this CPU, exported again if measured over
    start = time.perf_counter()
    outcome = measured_export(config, named, model, SearchOutcome(
        arch=ours.export_architecture(), probabilities=ours.probabilities(), history=[],
        search_seconds=seconds["ours"], alpha=0.0, arch_path=out / "ours" / "arch.json"))
    archs["ours"] = outcome.arch
    expected = {"ours": (outcome.export_check or {}).get("expected_latency_ratio")}
    seconds["ours"] += time.perf_counter() - start
    for name in args.peers:
        penalty = ExpectationProfilerPenalty(model.expression_profiler(named.space, "latency_ms"),
                                             baseline=target_ms, scale=1.0, nonlinear="positive")
        try:
            strategy = _nni_strategy(name, penalty, config.search.arc_lr)
            seconds[name] = _search(strategy, named, config, args.epochs, out / name)
            archs[name] = named.check_architecture(_argmax(strategy, named))
        except Exception as err:  # a peer that does not run on this space: one line, and on without it
            errors[name] = one_line(err)
            print(f"seed {seed}: {name} failed: {errors[name]}", flush=True)
    train = TrainConfig(epochs=args.retrain_epochs, seed=seed, threads=args.threads, batch_size=64)
    trained, networks, measured = {}, {}, {}
    input_mb = 4 * math.prod(named.input_shape) / BYTES_PER_MB
    for name, arch in {"reference": reference, **archs}.items():
        arch = named.check_architecture(arch)
        trained[name] = train_architecture(named, arch, train)
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            networks[name] = named.build(arch).eval()
        measured[name] = measure_module(networks[name], named.input_shape, threads=1, seed=seed).memory_mb + input_mb
    timing = _timed(networks, tuple(named.input_shape), args.rounds, seed, args.timing_seconds)
    index = {name: i for i, name in enumerate(networks)}
    ref = trained["reference"]
    strategies: dict[str, dict[str, Any]] = {}
    for name, arch in archs.items():
        ratio = timing.ratio(index[name], index["reference"])
        figures = {
            "arch": arch, "latency_ratio": ratio["ratio"], "latency_ratio_ci95": ratio["ci95"],
            "latency_ms": timing[index[name]].ms, "memory_mb": measured[name],
            "memory_ratio": measured[name] / measured["reference"],
            "predicted_latency_ratio": model.predict(arch).latency_ms / reference_ms,
            "predicted_memory_ratio": model.predict(arch).memory_mb / model.predict(reference).memory_mb,
            # what the search expected before timing it: ours, the table corrected by its export checks;
            # NNI's peers are exported unchecked, so the table's prediction
            "expected_latency_ratio": expected.get(name) or model.predict(arch).latency_ms / reference_ms,
            "test_top1": trained[name].test_top1, "test_top3": trained[name].test_top3,
            "top1_drop_pp": 100 * (ref.test_top1 - trained[name].test_top1),
            "top3_drop_pp": 100 * (ref.test_top3 - trained[name].test_top3),
            "within_target": model.predict(arch).latency_ms <= target_ms * (1 + 1e-9),
            "search_s": seconds[name], "retrain_s": trained[name].train_seconds,
            "search_s_over_retrain_s": seconds[name] / trained[name].train_seconds,
        }
        figures["meets"] = meets(figures, args.latency_target)
        figures["meets_targets"] = all(figures["meets"].values())
        strategies[name] = figures
        print(f"seed {seed}: {name}: {json.dumps({k: v for k, v in figures.items() if k != 'meets'})}", flush=True)
    for name, error in errors.items():
        strategies[name] = {"error": error}
    versus = {}
    for peer in archs:
        if peer == "ours":
            continue
        ratio = timing.ratio(index["ours"], index[peer])
        versus[peer] = {"latency_ratio": ratio["ratio"], "latency_ratio_ci95": ratio["ci95"],
                        "memory_ratio": measured["ours"] / measured[peer],
                        "top1_diff_pts": 100 * (trained["ours"].test_top1 - trained[peer].test_top1),
                        "top3_diff_pts": 100 * (trained["ours"].test_top3 - trained[peer].test_top3)}
    return {"seed": seed, "target_ms": target_ms, "reference_predicted_ms": reference_ms,
            "reference": {"arch": reference, "test_top1": ref.test_top1, "test_top3": ref.test_top3,
                          "latency_ms": timing[index["reference"]].ms, "memory_mb": measured["reference"]},
            "timing_rounds": timing.rounds, "strategies": strategies, "ours_vs": versus}


def seeds_markdown(per_seed: list[dict[str, Any]], names: list[str]) -> str:
    """One line per (seed, strategy) and per strategy over the seeds: ratios to the reference, drops."""
    lines = ["| seed | strategy | latency ratio (95 % interval) | table / expected | memory ratio | "
             "top-1 drop (pts) | top-3 drop (pts) | within target (table) | search (s) |",
             "|---|---|---:|---:|---:|---:|---:|---|---:|"]
    for record in per_seed:
        for name in names:
            s = record["strategies"].get(name)
            if s is None:
                continue
            if "error" in s:
                lines.append(f"| {record['seed']} | {name} | failed: {s['error']} | | | | | | |")
                continue
            low, high = s["latency_ratio_ci95"]
            lines.append(f"| {record['seed']} | {name} | {s['latency_ratio']:.3f} ({low:.3f}-{high:.3f}) | "
                         f"{s['predicted_latency_ratio']:.3f} / {s['expected_latency_ratio']:.3f} | "
                         f"{s['memory_ratio']:.3f} | {s['top1_drop_pp']:+.2f} | {s['top3_drop_pp']:+.2f} | "
                         f"{'yes' if s['within_target'] else 'no'} | {s['search_s']:.0f} |")
    return "\n".join(lines) + "\n"


def summarise(per_seed: list[dict[str, Any]], names: list[str]) -> dict[str, Any]:
    """Median and spread over the seeds of each strategy's figures and of ours against each peer."""
    summary = {name: over_seeds([r["strategies"][name] for r in per_seed
                                 if "error" not in r["strategies"].get(name, {"error": ""})], FIGURES)
               for name in names}
    versus = {peer: over_seeds([r["ours_vs"][peer] for r in per_seed if peer in r["ours_vs"]], VERSUS)
              for peer in names if peer != "ours"}
    return {"summary": summary, "ours_vs": versus}


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=4, help="search epochs of every strategy")
    parser.add_argument("--retrain-epochs", type=int, default=10)
    parser.add_argument("--latency-target", "--budget", type=float, default=0.6,
                        help="latency target of every strategy, share of the reference's predicted latency")
    parser.add_argument("--seed", type=int, default=0, help="the first seed (and the load harness's)")
    parser.add_argument("--seeds", type=int, default=1, help="how many seeds: seed, seed + 1, ...")
    parser.add_argument("--peers", nargs="*", default=list(PEERS), choices=list(PEERS))
    parser.add_argument("--space", default="nni:ProxylessNAS")
    parser.add_argument("--space-args", type=json.loads, default={}, help="JSON keyword arguments of the space")
    parser.add_argument("--table", help="reuse this cost table (default: profile this CPU into <out> once)")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=10, help="least shared timing rounds")
    parser.add_argument("--timing-seconds", type=float, default=20.0, help="most seconds of timing rounds")
    parser.add_argument("--out", type=Path, default=Path("proxyless-comparison"))
    parser.add_argument("--load", action="store_true", help="run everything under the load harness")
    parser.add_argument("--load-seconds", type=float, default=4 * 3600.0, help="the load's time bound")
    parser.add_argument("--quick", action="store_true",
                        help="one epoch of search and of retraining, 3 s of profiling, short timing")
    args = parser.parse_args(argv)
    if args.seeds < 1:
        parser.error("--seeds must be at least 1")
    if not 0 < args.latency_target:
        parser.error("--latency-target must be a share > 0 of the reference's latency")
    if args.quick:
        args.epochs, args.retrain_epochs, args.rounds, args.timing_seconds = 1, 1, 4, 1.0
    from nni_hwaware.profiling.load import run_under_load

    result = run_under_load(lambda: run(args), enabled=args.load, seed=args.seed, seconds=args.load_seconds)
    print(json.dumps(result, default=float))
    return result


def run(args: argparse.Namespace) -> dict[str, Any]:
    from nni_hwaware.cost_model import load_or_profile, space_model
    from nni_hwaware.cost_table import CostTable
    from nni_hwaware.spaces.resolve import resolve_space

    args.out.mkdir(parents=True, exist_ok=True)
    named = resolve_space(args.space, **args.space_args)
    if args.table:
        table = CostTable.load(args.table)
    else:
        table = load_or_profile(named, args.out / "cost_table.csv", seed=args.seed,
                                max_seconds=3.0 if args.quick else None)
    model = space_model(named, table)
    seeds = list(range(args.seed, args.seed + args.seeds))
    per_seed = [one_seed(args, named, model, seed) for seed in seeds]
    names = ["ours", *args.peers]
    print(seeds_markdown(per_seed, names))
    ran = [name for name in names if any("error" not in r["strategies"][name] for r in per_seed)]
    result = {"space": args.space, "space_args": args.space_args, "seeds": seeds, "quick": args.quick,
              "latency_target": args.latency_target, "epochs": args.epochs, "retrain_epochs": args.retrain_epochs,
              "strategies": names, "ran": ran, "per_seed": per_seed, **summarise(per_seed, names),
              "all_seeds_meet_targets": all(r["strategies"]["ours"]["meets_targets"] for r in per_seed),
              "meets_targets": {name: all(r["strategies"][name].get("meets_targets", False) for r in per_seed)
                                for name in names}}
    return result


if __name__ == "__main__":
    main()
