"""The NNI trial of a multi-trial search: build the sampled network, train, report.

``python -m nni_hwaware.trial`` is the ``trialCommand`` of the search experiments.
The parameters NNI hands over are the architecture (label -> value) and what the
trial needs to build the space and read its costs (``_space``, ``_space_args``,
``_table``, ``_chip``); ``--space``/``--table`` run it without the tuner. Every epoch reports an intermediate
result ``{default: val_top1, val_top3, train_loss, epoch}``; the final result is
``{default: val_top1, val_top3, test_top1, test_top3, latency_ms, memory_mb,
flops, params, arch}``: the hardware costs are the cost table's prediction for
the chip, and ``arch`` echoes the architecture the trial trained (JSON), so the
results stay right when NNI pairs a trial's parameters with another trial's
metrics under concurrency (microsoft/nni#5726).
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Mapping
from typing import Any

from nni_hwaware.errors import HwAwareError

__all__ = ["main", "trial_metrics"]


def trial_metrics(arch: Mapping[str, str], result: Mapping[str, float],
                  costs: Mapping[str, float]) -> dict[str, Any]:
    """The final metric dict of a trial."""
    return {"default": result["val_top1"], **result, **costs,
            "arch": json.dumps(dict(arch), separators=(",", ":"))}


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m nni_hwaware.trial", description=__doc__.splitlines()[0])
    parser.add_argument("--space", help="space: a name, a JSON file, nni:<hub space> or module:callable "
                        "(default: the one the tuner names)")
    parser.add_argument("--space-args", help="keyword arguments of the space as JSON")
    parser.add_argument("--table", help="cost table of the target chip (default: the one the tuner names)")
    parser.add_argument("--chip", help="chip in the table (default: its only chip)")
    parser.add_argument("--backend", default="torch")
    parser.add_argument("--batch-size", type=int, default=1, help="batch size of the cost table")
    parser.add_argument("--train", default="{}", help="training options as JSON (see TrainConfig)")
    parser.add_argument("--epochs", type=int, help="training epochs (overrides --train)")
    parser.add_argument("--threads", type=int, help="intra-op threads while training (overrides --train)")
    parser.add_argument("--data-dir", help="CIFAR-10 directory, for spaces on cifar10 (overrides --train)")
    parser.add_argument("--device", help="torch device for training, e.g. cuda (overrides --train)")
    parser.add_argument("--arch", help="architecture JSON file, to run without NNI")
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run the trial; a clear error is one line on stderr and a non-zero exit, so NNI marks it failed."""
    from nni_hwaware.trial.entry import run_trial

    args = _parser().parse_args(argv)
    return run_trial("nni_hwaware.trial", lambda: _run(args))


def _run(args: argparse.Namespace) -> int:
    from pathlib import Path

    import nni

    from nni_hwaware.cost_model import load_space_model
    from nni_hwaware.nni_fixes import next_parameters
    from nni_hwaware.spaces.io import load_architecture
    from nni_hwaware.spaces.resolve import resolve_space
    from nni_hwaware.trial.train import TrainConfig, train_architecture

    train = TrainConfig.from_json(args.train, epochs=args.epochs, threads=args.threads,
                                  data_dir=args.data_dir, device=args.device)
    params = {} if args.arch else (next_parameters() or {})
    space = args.space or params.get("_space")
    if not space:
        raise HwAwareError("no space: pass --space NAME (or run under the PPO tuner, which names it)")
    try:
        space_args = json.loads(args.space_args) if args.space_args else dict(params.get("_space_args") or {})
    except json.JSONDecodeError as err:
        raise HwAwareError(f"--space-args is not valid JSON: {err}") from None
    named = resolve_space(space, **space_args)
    table = args.table or params.get("_table")
    if not table:
        raise HwAwareError("no cost table: pass --table FILE (or run under the PPO tuner, which names it)")
    if not Path(table).is_file():
        raise HwAwareError(f"cost table {table} does not exist here: profile the space or pass --table FILE")
    model = load_space_model(named, table, chip=args.chip or params.get("_chip"), backend=args.backend,
                             batch_size=args.batch_size)
    if params.get("_retrain"):
        return _retrain(named, model, params)
    if args.arch:
        arch = load_architecture(args.arch, named)
    else:
        if not params:
            raise HwAwareError("no parameters from NNI: run this as an NNI trial, or pass --arch FILE")
        arch = named.check_architecture({k: v for k, v in params.items() if not k.startswith("_")})
    costs = model.predict(arch).metrics()

    def on_epoch(epoch: int, record: Mapping[str, float]) -> None:
        nni.report_intermediate_result({"default": record["val_top1"], "val_top3": record["val_top3"],
                                        "train_loss": record["train_loss"], "epoch": epoch})

    result = train_architecture(named, arch, train, on_epoch)
    final = trial_metrics(arch, result.metrics(), costs)
    nni.report_final_result(final)
    print(json.dumps(final))
    return 0


def _wait_for_results(path: str, expected: int, timeout: float = 900.0) -> list[dict[str, Any]]:
    """The tuner's record of every search trial, once the last running ones have reported."""
    import time
    from pathlib import Path

    from nni_hwaware.files import read_json

    deadline = time.monotonic() + timeout
    trials: list[dict[str, Any]] = []
    while time.monotonic() < deadline:
        if Path(path).is_file():
            trials = read_json(path, "trial history")
            if len(trials) >= expected:
                break
        time.sleep(2.0)
    return trials


def _retrain(config: Any, model: Any, params: Mapping[str, Any]) -> int:
    """The last trial of a search: retrain the best architecture and the baseline, write the report."""
    import nni

    from nni_hwaware.report.results import evaluate_architecture
    from nni_hwaware.report.search import best_trial, write_search_report
    from nni_hwaware.trial.paths import inside_experiment
    from nni_hwaware.trial.train import TrainConfig

    history_file = inside_experiment(params["_history_file"], "parameter _history_file")
    out_dir = inside_experiment(f"{params['_output_dir']}/report", "parameter _output_dir")
    trials = _wait_for_results(str(history_file), int(params["_expected"]))
    best = best_trial(trials)
    train = TrainConfig.from_dict(params.get("_train") or {})
    results = {}
    for name, arch in (("baseline", config.baseline(model)), ("found", best["arch"])):
        results[name] = evaluate_architecture(config, arch, train, cost_model=model, name=name,
                                              threads=model.threads)
        nni.report_intermediate_result({"default": results[name].test_top1, "retrained": name})
    paths = write_search_report(out_dir, results["baseline"], results["found"], trials,
                                baseline_predicted_ms=model.predict(config.baseline(model)).latency_ms)
    found, base = results["found"], results["baseline"]
    final = {"default": found.test_top1, "retrain": True, "test_top3": found.test_top3,
             "latency_ms": found.latency_ms, "memory_mb": found.memory_mb,
             "baseline_test_top1": base.test_top1, "baseline_latency_ms": base.latency_ms,
             "latency_ratio": found.latency_ms / base.latency_ms, "memory_ratio": found.memory_mb / base.memory_mb,
             "report": str(paths["markdown"]), "arch": json.dumps(found.arch, separators=(",", ":"))}
    nni.report_final_result(final)
    print(json.dumps(final))
    print("report written: " + ", ".join(str(p) for p in paths.values()))
    return 0
