"""The NNI trial of a multi-trial search: build the sampled network, train, report.

``python -m nni_hwaware.trial`` is the ``trialCommand`` of the search experiments.
Its NNI parameters (:class:`~nni_hwaware.trial.parameters.TrialParameters`) carry
everything it needs, so it runs on any machine NNI's training service sends it
to, and reads no file of the tuner's: the architecture, the space, the data set,
the training options and the costs the cost table predicts for the network.
``--space`` / ``--arch`` / ``--table`` run it without the tuner.

Every epoch reports an intermediate result ``{default: val_top1, val_top3,
train_loss, epoch}``; the final result is ``{default: val_top1, val_top3,
test_top1, test_top3, latency_ms, memory_mb, predicted_latency_ms,
predicted_memory_mb, latency_ratio, flops, params, arch}``: ``latency_ms`` and
``memory_mb`` are measured by the trial on its own machine (the network
timed in shared rounds with the space's reference network for at most 1 s,
:func:`~nni_hwaware.training.compare.measure_against_reference`; ``latency_ratio``
is to the reference), the ``predicted_*`` costs are the cost table's for the chip
(the table is a prior: what the chip measures wins), and ``arch`` echoes the
architecture the trial trained (JSON), so the results stay right when NNI pairs a
trial's parameters with another trial's metrics under concurrency
(microsoft/nni#5726).

The network is measured before it is trained (timing does not depend on the weights). When the
parameters carry the search's budget and the network measures over it, judged as the search
judges a result (:mod:`nni_hwaware.measurement`: the latency as its ratio to the reference times the
table's latency of the reference), the search counts it a failure whatever its accuracy: the
trial reports the measurement with ``default`` 0 and ``not_trained`` and does not train it
(:func:`measure_then_train`).

The last trial of a search (parameters with ``retrain``) retrains the best
network of the search history it was sent and the baseline, times them
interleaved, and answers with both results as its final metric
(:func:`retrain_metrics`); the tuner writes the report. It also saves the retrained found
network in NNI's trial output directory (``NNI_OUTPUT_DIR``, on the machine the trial ran
on): ``network.pt``, ``network.onnx`` and ``network.torchscript.pt``, each export checked and
timed against the baseline's (:func:`nni_hwaware.export.deliver`). Search trials write no file.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable, Mapping
from typing import Any

from nni_hwaware.errors import HwAwareError
from nni_hwaware.measurement import NOT_TRAINED, Measurement, on_table_scale
from nni_hwaware.trial.parameters import Measuring, TrialParameters

__all__ = ["main", "measure_then_train", "measured_costs", "over_budget", "retrain_metrics", "screening_metrics",
           "trial_metrics", "untrained_metrics"]


def trial_metrics(arch: Mapping[str, str], result: Mapping[str, float], costs: Mapping[str, float],
                  measured: Mapping[str, float] | None = None) -> dict[str, Any]:
    """The final metric dict of a trial: measured costs where the trial measured them, else predicted."""
    predicted = {f"predicted_{k}": v for k, v in costs.items() if k in ("latency_ms", "memory_mb")}
    return {"default": result["val_top1"], **result, **costs, **predicted, **(measured or {}),
            "arch": json.dumps(dict(arch), separators=(",", ":"))}


def measured_costs(named: Any, arch: Mapping[str, Any], reference: Mapping[str, Any], seed: int,
                   measuring: Measuring | None = None) -> dict[str, float]:
    """The trial's own measurement (see the module docstring), as the cost table was profiled
    (``measuring``: its backend, batch size, threads and device); nothing without a reference network."""
    from nni_hwaware.training.compare import measure_against_reference

    if not reference:
        return {}
    return measure_against_reference(named, arch, reference, seed=seed, **(measuring or Measuring()).to_dict())


def screening_metrics(named: Any, params: TrialParameters, seed: int) -> dict[str, Any]:
    """The final metric of a screening trial: every architecture of ``params.screen`` measured in shared
    rounds with the reference network (as the table was profiled), none trained. ``screened`` holds, per
    architecture, what it measured (its latency ratio's 95 % interval too) and whether it fits the budget
    judged as the search judges it (:class:`~nni_hwaware.measurement.Measurement`: the interval's upper end);
    ``default`` is 0 (no accuracy: the portal's other columns say what it measured)."""
    from nni_hwaware.training.compare import TRIAL_TIMING_SECONDS, measure_against_reference_many

    if not params.reference:
        raise HwAwareError("a screening trial needs the space's reference network to measure beside")
    archs = [named.check_architecture(a) for a in params.screen]
    seconds = TRIAL_TIMING_SECONDS * max(1.0, (len(archs) + 1) / 2)  # as many rounds as a trial's of one network
    results = measure_against_reference_many(named, archs, params.reference, seconds=seconds, seed=seed,
                                             **params.measuring.to_dict())
    screened = []
    for arch, measured in zip(archs, results, strict=True):
        over = over_budget(measured, params)
        screened.append({**measured, "arch": dict(arch), "fits": not over, **({"over": over} if over else {})})
    return {"default": 0.0, "screening": True, "measured": len(screened), "measured_in": params.measuring.backend,
            "fit": sum(s["fits"] for s in screened),
            "latency_ms": min(s["latency_ms"] for s in screened),
            "screened": json.dumps(screened, separators=(",", ":"))}


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m nni_hwaware.trial", description=__doc__.splitlines()[0])
    parser.add_argument("--space", help="space: a name, a JSON file, nni:<hub space> or module:callable "
                        "(default: the one the tuner sends)")
    parser.add_argument("--space-args", help="keyword arguments of the space as JSON")
    parser.add_argument("--table", help="cost table of the target chip, to run without the tuner")
    parser.add_argument("--chip", help="chip in the table (default: its only chip)")
    parser.add_argument("--backend", default="torch")
    parser.add_argument("--batch-size", type=int, default=1, help="batch size of the cost table")
    parser.add_argument("--train", help="training options as JSON (see TrainConfig; default: the tuner's)")
    parser.add_argument("--epochs", type=int, help="training epochs (overrides the training options)")
    parser.add_argument("--threads", type=int, help="intra-op threads while training (overrides them)")
    parser.add_argument("--data-dir", help="CIFAR-10 directory, for spaces on cifar10 (overrides them)")
    parser.add_argument("--device", help="torch device for training, e.g. cuda (overrides them)")
    parser.add_argument("--arch", help="architecture JSON file, to run without NNI")
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run the trial; a clear error is one line on stderr and a non-zero exit, so NNI marks it failed."""
    from nni_hwaware.trial.entry import run_trial

    args = _parser().parse_args(argv)
    return run_trial("nni_hwaware.trial", lambda: _run(args))


def _standalone(args: argparse.Namespace) -> TrialParameters:
    """The parameters of a run without the tuner: ``--space``, ``--arch`` and ``--table``."""
    from nni_hwaware.cost_model import load_space_model
    from nni_hwaware.spaces.io import load_architecture
    from nni_hwaware.spaces.resolve import resolve_space

    if not args.space or not args.table:
        raise HwAwareError("without the tuner, pass --space NAME, --table FILE and --arch FILE")
    try:
        space_args = json.loads(args.space_args) if args.space_args else {}
    except json.JSONDecodeError as err:
        raise HwAwareError(f"--space-args is not valid JSON: {err}") from None
    named = resolve_space(args.space, **space_args)
    model = load_space_model(named, args.table, chip=args.chip, backend=args.backend, batch_size=args.batch_size)
    arch = load_architecture(args.arch, named)
    return TrialParameters(arch=arch, space=args.space, space_args=space_args, dataset=named.dataset,
                           chip=model.chip, costs=model.predict(arch).metrics(),
                           reference=dict(named.baseline(model)),
                           measuring=Measuring.of_model(model, device=args.device or "cpu"))  # as the table was


def _run(args: argparse.Namespace) -> int:
    import dataclasses

    import nni

    from nni_hwaware.nni_fixes import next_parameters
    from nni_hwaware.spaces.resolve import resolve_space
    from nni_hwaware.training import TrainConfig, train_architecture

    if args.arch:
        params = _standalone(args)
    else:
        raw = next_parameters()
        if not raw:
            raise HwAwareError("no parameters from NNI: run this as an NNI trial, or pass --space, --table and --arch")
        params = TrialParameters.from_dict(raw)
    base = params.train if args.train is None else TrainConfig.from_json(args.train)
    overrides = {k: v for k, v in {"epochs": args.epochs, "threads": args.threads, "data_dir": args.data_dir,
                                   "device": args.device}.items() if v is not None}
    train = dataclasses.replace(base, **overrides)
    named = resolve_space(params.space, **params.space_args)
    if params.dataset and named.dataset != params.dataset:
        raise HwAwareError(f"space {params.space!r} trains on {named.dataset!r} here, but the tuner expects "
                           f"{params.dataset!r}; install the same nni-hwaware version on every machine")
    if params.retrain is not None:
        return _retrain(named, params, train)
    if params.screen:
        final = screening_metrics(named, params, train.seed)
        nni.report_final_result(final)
        print(json.dumps({k: v for k, v in final.items() if k != "screened"}))
        return 0
    arch = named.check_architecture(params.arch)

    def on_epoch(epoch: int, record: Mapping[str, float]) -> None:
        nni.report_intermediate_result({"default": record["val_top1"], "val_top3": record["val_top3"],
                                        "train_loss": record["train_loss"], "epoch": epoch})

    final = measure_then_train(named, arch, params, train.seed,
                               lambda: train_architecture(named, arch, train, on_epoch).metrics())
    nni.report_final_result(final)
    print(json.dumps(final))
    return 0


def measure_then_train(named: Any, arch: Mapping[str, Any], params: TrialParameters, seed: int,
                       train: Callable[[], Mapping[str, float]]) -> dict[str, Any]:
    """A search trial's final metric: its network measured beside the reference (as the table was
    profiled), then trained (``train`` gives the training's metrics) unless it measured over the budget
    the parameters carry: the search counts such a network a failure whatever its accuracy, so the
    measurement is all it needs. A network a screening trial measured (``params.measured``) is trained
    without measuring it again."""
    runtime = {"measured_in": params.measuring.backend}  # the portal says which runtime measured it
    if params.measured:
        return {**trial_metrics(arch, train(), params.costs, params.measured), **runtime}
    measured = measured_costs(named, arch, params.reference, seed, params.measuring)
    if over := over_budget(measured, params):
        final = {**untrained_metrics(arch, params.costs, measured, over), **runtime}
        print(f"{final['not_trained']}: not trained")
        return final
    return {**trial_metrics(arch, train(), params.costs, measured), **(runtime if measured else {})}


def over_budget(measured: Mapping[str, Any], params: TrialParameters) -> list[str]:
    """The budget's metrics ``measured`` is over, judged as the search judges a result (the latency on the
    table's scale: the ratio to the reference times the table's reference latency, the upper end of its
    95 % interval where measured); none without a budget."""
    return Measurement.of(on_table_scale(measured, params.reference_table_latency_ms)).over(params.budget)


def untrained_metrics(arch: Mapping[str, str], costs: Mapping[str, float], measured: Mapping[str, float],
                      over: list[str]) -> dict[str, Any]:
    """The final metric of a trial measured over the budget: a failure's accuracy (0), what it measured,
    and why it was not trained (``not_trained``)."""
    return {**trial_metrics(arch, {"val_top1": 0.0}, costs, measured),
            NOT_TRAINED: f"measured over the budget ({', '.join(over)})"}


def retrain_metrics(baseline: Any, found: Any) -> dict[str, Any]:
    """The final metric of the retraining trial: headline figures for the portal, both
    :class:`~nni_hwaware.training.ModelResult` s (JSON, under ``results``) for the tuner's report."""
    comparison = found.extra.get("vs_baseline", {})
    ci = comparison.get("latency_ratio_ci95") or [None, None]
    in_torch = found.extra.get("vs_baseline_torch") or comparison  # PyTorch's ratio (the same one on torch)
    torch_ci = in_torch.get("latency_ratio_ci95") or [None, None]
    return {"default": found.test_top1, "retrain": True, "test_top3": found.test_top3,
            "latency_ms": found.latency_ms, "memory_mb": found.memory_mb,
            "baseline_test_top1": baseline.test_top1, "baseline_latency_ms": baseline.latency_ms,
            # the headline: the ratio in the deployment runtime; PyTorch's beside it
            "deploy_backend": comparison.get("backend", "torch"),
            "latency_ratio": comparison.get("latency_ratio"), "latency_ratio_ci95_low": ci[0],
            "latency_ratio_ci95_high": ci[1], "torch_latency_ratio": in_torch.get("latency_ratio"),
            "torch_latency_ratio_ci95_low": torch_ci[0], "torch_latency_ratio_ci95_high": torch_ci[1],
            "memory_ratio": comparison.get("memory_ratio"),
            **_deliverable_metrics(found.extra.get("deliverables")),
            "results": json.dumps({"baseline": baseline.to_dict(), "found": found.to_dict()}),
            "arch": json.dumps(found.arch, separators=(",", ":"))}


def _deliverable_metrics(summary: Mapping[str, Any] | None) -> dict[str, Any]:
    """The deliverables' headline figures for the portal: where they are, the ratio of the deployment
    format's exports in their runtime, each export's test accuracy."""
    if not summary:
        return {}
    metrics: dict[str, Any] = {"deliverables_dir": summary["dir"], "deliverables_host": summary["host"]}
    timing = summary.get("timing")
    if timing:
        metrics.update(exported_format=timing["format"], exported_latency_ratio=timing["latency_ratio"],
                       exported_latency_ratio_ci95_low=timing["latency_ratio_ci95"][0],
                       exported_latency_ratio_ci95_high=timing["latency_ratio_ci95"][1])
    for fmt, entry in summary.get("exports", {}).items():
        metrics[f"{fmt.replace('-', '_')}_test_top1"] = entry.get("test_top1")
    return metrics


def compare_in_runtimes(named: Any, results: Mapping[str, Any], rounds: int, seed: int,
                        measuring: Measuring) -> tuple[Any, Any]:
    """The found network and the baseline timed interleaved in the deployment runtime (``measuring``: the
    table's backend, batch size, threads, device), the report's headline; with another backend than
    PyTorch, PyTorch's ratio (what trains) beside it in ``found.extra["vs_baseline_torch"]``."""
    import dataclasses

    from nni_hwaware.training import compare_with_baseline

    options = measuring.to_dict()
    baseline, found = compare_with_baseline(named, results["baseline"], results["found"], rounds=rounds, seed=seed,
                                            **options)
    extra = {**found.extra, "vs_baseline": {**found.extra["vs_baseline"], "backend": measuring.backend}}
    if measuring.backend != "torch":
        _, in_torch = compare_with_baseline(named, results["baseline"], results["found"], rounds=rounds, seed=seed,
                                            **{**options, "backend": "torch"})
        torch_side = in_torch.extra["vs_baseline"]
        extra["vs_baseline_torch"] = {k: torch_side[k] for k in ("latency_ratio", "latency_ratio_ci95", "rounds",
                                                                  "spread")}
        extra["torch_latency_ms"] = in_torch.latency_ms
    return dataclasses.replace(found, extra=extra), baseline


def _retrain(named: Any, params: TrialParameters, train: Any) -> int:
    """The last trial of a search: retrain the best network and the baseline, time them interleaved, report."""
    import dataclasses

    import nni

    from nni_hwaware.export import deliver
    from nni_hwaware.report.search import best_trial
    from nni_hwaware.training import evaluate_architecture

    job = params.retrain
    assert job is not None
    best = best_trial(job.history, job.budget)
    # the table's predictions (a search trial's latency_ms / memory_mb are what it measured)
    predicted = {"baseline": job.baseline_costs,
                 "found": {m: best.get(f"predicted_{m}", best.get(m)) for m in ("latency_ms", "memory_mb")}}
    results = {}
    for name, arch in (("baseline", job.baseline), ("found", best["arch"])):
        result = evaluate_architecture(named, arch, train, name=name, threads=1, repeats=job.repeats,
                                       keep_weights=True)
        results[name] = dataclasses.replace(result, chip=params.chip or result.chip,
                                            predicted_latency_ms=predicted[name].get("latency_ms"),
                                            predicted_memory_mb=predicted[name].get("memory_mb"))
        nni.report_intermediate_result({"default": results[name].test_top1, "retrained": name})
    found, baseline = compare_in_runtimes(named, results, job.rounds, train.seed, params.measuring)
    found = deliver(named, found, baseline, space=params.space, space_args=params.space_args, train=train,
                    backend=params.measuring.backend)
    final = retrain_metrics(baseline, found)
    nni.report_final_result(final)
    for line in found.extra["vs_baseline"]["warnings"]:
        print(line)
    if "deliverables_error" in found.extra:
        print(found.extra["deliverables_error"])
    print(json.dumps({k: v for k, v in final.items() if k != "results"}))
    return 0
