"""The whole job: search -> export -> retrain (searched and baseline) -> report.

``nni-hwaware search gumbel --config gumbel.yml`` runs :func:`run_pipeline`:

1. the cost model of the chip (a table file, or the space profiled on this machine, every
   distinct leaf once), the space pruned per (label, value) when ``prune.mode`` is set
   (:func:`load_space_cost_model`);
2. :func:`~nni_hwaware.strategies.gumbel.search.search`: the supernet of the space trained by
   :class:`~nni_hwaware.strategies.gumbel.strategy.HardwareGumbelDARTS`, Lightning checkpoints in
   ``<out>/search/<name>/checkpoints``, the exported architecture in
   ``<out>/search/<name>/arch.json``; a search that diverges (NaN/inf loss) stops with an error
   and exports nothing; one that collapses (training accuracy near chance while the cost terms
   dominate the loss) stops with one line and exports the last architecture before the collapse
   (``summary["collapse"]``); with targets, the export is checked on this machine against the
   baseline (:func:`~nni_hwaware.strategies.gumbel.export_check.measured_export`);
3. the exported network and the baseline retrained from random initialisation
   (:func:`nni_hwaware.report.evaluate_architecture`: best-on-validation epoch,
   test top-1/top-3, latency and memory measured on this machine and predicted by
   the table, params, FLOPs);
4. one more search and retraining per ``sweep.targets`` value (latency targets) or, in the
   fixed-weight form, per ``sweep.alphas`` value
   (:func:`~nni_hwaware.strategies.gumbel.points.search_points`); a sweep target that no
   network of the space meets on this chip (its cheapest network is over it: in a runtime with
   a per-call cost, a small target can be) is skipped before its search, with one line, and
   listed in ``summary["sweep_unreachable"]`` (the config's own target stops the job instead);
5. each found network timed interleaved with the baseline, its network files delivered, and
   the report (:func:`nni_hwaware.report.write_report`): Markdown and CSV table,
   accuracy-latency plot; ``<out>/summary.json``.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from nni_hwaware.errors import TargetUnreachable
from nni_hwaware.files import write_json
from nni_hwaware.spaces.skeleton import Architecture
from nni_hwaware.strategies.gumbel.evaluator import is_rank_zero
from nni_hwaware.strategies.gumbel.export_check import measured_export
from nni_hwaware.strategies.gumbel.job_config import GumbelSearchConfig
from nni_hwaware.strategies.gumbel.outcome import SearchOutcome
from nni_hwaware.strategies.gumbel.points import (
    point_name,
    point_text,
    search_points,
    target_ratios,
)
from nni_hwaware.strategies.gumbel.search import search

__all__ = ["load_space_cost_model", "run_pipeline"]


def load_space_cost_model(config: GumbelSearchConfig, out: Path) -> tuple[Any, Any]:
    """The named space of ``config.space`` (any NNI model space) and its cost model, pruned as asked.

    Without a table file the space is profiled here once (every distinct leaf). With
    ``config.prune.mode`` set, the space is narrowed to the kept values (the reference
    network's values always stay) and the pruning report is written to ``out``.
    """
    import dataclasses as dc

    from nni_hwaware.files import write_atomically
    from nni_hwaware.spaces.resolve import resolve_space
    from nni_hwaware.strategies.job import load_cost_model, prune_model

    named = resolve_space(config.space, **config.space_args)
    model = load_cost_model(named, config.cost, out / "cost_table.csv", seed=config.seed)
    reference = named.baseline(model)
    result = prune_model(model, config.prune, reference)
    if result is None:
        return dc.replace(named, reference=reference), model
    write_atomically(out / "pruning.csv", result.report.to_csv(index=False))
    return dc.replace(named.narrowed(result.allowed), reference=reference), result.model


def _deliver(config: GumbelSearchConfig, space: Any, main: Any, baseline: Any, train: Any, out: Path,
             log: Callable[[str], None]) -> Any:
    """The retrained network's files (``<out>/network/``, or NNI's trial output directory)."""
    from nni_hwaware.export import deliver

    main = deliver(space, main, baseline, space=config.space, space_args=config.space_args, train=train,
                   out=out / "network", threads=config.cost.threads)
    if "deliverables" in main.extra:
        log(f"searched: the trained network and its exports are in {main.extra['deliverables']['dir']}")
    if "deliverables_error" in main.extra:
        log(f"searched: {main.extra['deliverables_error']}")
    return main


def run_pipeline(config: GumbelSearchConfig, *, report: Callable[[dict[str, Any]], None] | None = None,
                 log: Callable[[str], None] = print) -> dict[str, Any]:
    """Search, export, retrain the found network and the baseline, sweep, report; returns the summary."""
    from nni_hwaware.report import ModelResult, evaluate_architecture, write_report

    out = Path(config.out)
    out.mkdir(parents=True, exist_ok=True)
    write_json(out / "config.json", config.to_dict())
    space, cost_model = load_space_cost_model(config, out)  # pruned, if config.prune says so
    train = config.train_config()

    done: dict[tuple[tuple[str, str], ...], ModelResult] = {}

    def retrain(arch: Architecture, name: str, point: dict[str, Any] | None, **extra: Any) -> ModelResult:
        # The same architecture trains (same seed) and measures the same: do it once.
        path = out / "results" / f"{name}.json"
        key = tuple(sorted(arch.items()))
        if key in done:
            result = dataclasses.replace(done[key], name=name, alpha=extra.get("alpha"),
                                         search_seconds=extra.get("search_seconds"))
        else:
            result = evaluate_architecture(space, arch, train, cost_model=cost_model, name=name,
                                           threads=config.cost.threads, batch_size=config.cost.batch_size,
                                           backend=config.cost.backend, repeats=config.cost.repeats,
                                           keep_weights=True, **extra)
            done[key] = result
        if point is not None:  # what the search that found it aimed at (alpha or latency target)
            result = dataclasses.replace(result, extra={**result.extra, "search_point": point})
        result.save(path)
        log(f"{name}: test top-1 {result.test_top1:.4f}, top-3 {result.test_top3:.4f}, "
            f"latency {result.latency_ms:.4g} ms, memory {result.memory_mb:.4g} MB ({path})")
        return result

    points = search_points(config)  # the main search first, then the sweep's other points
    main_name = points[0][0]
    outcomes: dict[str, SearchOutcome] = {}
    results: dict[str, ModelResult] = {}
    unreachable: list[dict[str, Any]] = []  # sweep points no network of the space meets on this chip
    for name, run_config, point in points:
        try:
            outcome = search(run_config, space, cost_model, out / "search" / name,
                             report=report if name == main_name else None)
        except TargetUnreachable as err:
            if name == main_name:  # the config's own target: the user must change it
                raise
            log(f"search {point_text(point)}: skipped, {err}")
            unreachable.append({**point, "reason": str(err)})
            continue
        if not is_rank_zero():
            return {}
        if run_config.penalty.latency_target is not None or run_config.penalty.memory_target is not None:
            outcome = measured_export(run_config, space, cost_model, outcome, log)
        outcomes[name] = outcome
        log(f"search {point_text(point)}: {json.dumps(outcome.arch)} in {outcome.search_seconds:.1f} s")
        results[name] = retrain(outcome.arch, f"searched_{name}", point,
                                alpha=point.get("alpha"), search_seconds=outcome.search_seconds)
        if outcome.export_check:  # what the export's check measured, and what was expected of it
            results[name] = dataclasses.replace(results[name], extra={**results[name].extra,
                                                                      "export_check": outcome.export_check})
        if outcome.collapse:  # the module said it in one line; the result keeps it
            results[name] = dataclasses.replace(results[name], extra={**results[name].extra,
                                                                      "search_collapse": outcome.collapse})
    main = results[main_name].renamed("searched")
    main.save(out / "results" / "searched.json")
    baseline = retrain(space.baseline(), "baseline", None) if config.baseline else None  # the reference network
    sweep = [results[point_name(option, value)] for option, value in config.sweep.points
             if point_name(option, value) in results]
    files: dict[str, str] = {}
    if baseline is not None:  # each found network timed interleaved with the baseline, in this process
        from nni_hwaware.training import compare_with_baseline

        cost = config.cost
        timing = {"rounds": cost.rounds, "batch_size": cost.batch_size, "backend": cost.backend,
                  "threads": cost.threads, "seed": config.seed}
        baseline_main, main = compare_with_baseline(space, baseline, main, **timing)
        sweep = [compare_with_baseline(space, baseline, r, **timing)[1] for r in sweep]
        configs = {name: run_config for name, run_config, _ in points}
        main = _with_targets(main, configs[main_name], baseline)
        sweep = [_with_targets(r, configs[r.name.removeprefix("searched_")], baseline) for r in sweep]
        baseline = baseline_main
        for result in (main, *sweep):
            for line in result.extra["vs_baseline"]["warnings"]:
                log(f"{result.name}: {line}")
        main = _deliver(config, space, main, baseline, train, out, log)
        main.save(out / "results" / "searched.json")
        baseline.save(out / "results" / "baseline.json")
        files = {k: str(v) for k, v in write_report(out / "report", baseline, [main], sweep=sweep).items()}
    else:
        main = _deliver(config, space, main, None, train, out, log)
        main.save(out / "results" / "searched.json")
    penalty = config.penalty
    summary = {
        "space": space.name, "chip": cost_model.chip,
        # the fixed-weight form's alpha; with a latency target the search set the weight itself
        "alpha": penalty.alpha if penalty.latency_target is None else None,
        "latency_target": penalty.latency_target, "memory_target": penalty.memory_target,
        "point": points[0][2],
        "arch": main.arch, "arch_path": str(outcomes[main_name].arch_path),
        "searched": main.to_dict(), "baseline": baseline.to_dict() if baseline else None,
        # each sweep point's result with the option it set (alpha or latency_target) at the top
        "sweep": [{**r.to_dict(), **r.extra["search_point"]} for r in sweep], "report": files,
        # sweep points skipped before their search: the space's cheapest network is over them here
        "sweep_unreachable": unreachable,
        "search_seconds": outcomes[main_name].search_seconds,
        # the collapse guard's finding of the main search (None: it did not collapse); a sweep
        # point's is in its entry's extra.search_collapse
        "collapse": outcomes[main_name].collapse,
    }
    write_json(out / "summary.json", summary)
    return summary


def _with_targets(result: Any, config: GumbelSearchConfig, baseline: Any) -> Any:
    targets = target_ratios(config, baseline)
    return dataclasses.replace(result, extra={**result.extra, "targets": targets}) if targets else result
