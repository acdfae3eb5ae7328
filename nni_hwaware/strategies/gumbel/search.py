"""The whole job: search -> export -> retrain (searched and baseline) -> report, and each step alone.

``nni-hwaware search gumbel --config gumbel.yml`` runs :func:`run_pipeline`:

1. the cost model of the chip (a table file, or the space profiled on this machine, every
   distinct leaf once), the space pruned per (label, value) when ``prune.mode`` is set;
2. :func:`search`: the supernet of the space trained by :class:`HardwareGumbelDARTS`
   on NNI's sequential engine with a Lightning ``Classification`` evaluator
   (training batches for the weights, validation batches for the architecture),
   Lightning checkpoints in ``<out>/<name>/checkpoints`` (an interrupted search
   resumes there, loading them with ``torch.load(weights_only=True)``), the
   exported architecture in ``<out>/<name>/arch.json``; a search that diverges
   (NaN/inf loss) stops with an error and exports nothing; one that collapses (training
   accuracy near chance while the cost terms dominate the loss) stops with one line and
   exports the last architecture before the collapse (``summary["collapse"]``);
3. the exported network and the baseline retrained from random initialisation
   (:func:`nni_hwaware.report.evaluate_architecture`: best-on-validation epoch,
   test top-1/top-3, latency and memory measured on this machine and predicted by
   the table, params, FLOPs);
4. one more search and retraining per ``sweep.targets`` value (latency targets) or, in the
   fixed-weight form, per ``sweep.alphas`` value (:func:`search_points`);
5. the report (:func:`nni_hwaware.report.write_report`): Markdown and CSV table,
   accuracy-latency plot; ``<out>/summary.json``.
"""

from __future__ import annotations

import dataclasses
import json
import math
import pickle
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch.utils.data import Dataset, Sampler

from nni_hwaware.cost_model import SpaceCostModel
from nni_hwaware.errors import HwAwareError
from nni_hwaware.files import write_json
from nni_hwaware.profiling import fixed_threads
from nni_hwaware.spaces.config import Architecture, SpaceConfig
from nni_hwaware.strategies.gumbel.config import GumbelSearchConfig

__all__ = ["EpochShuffle", "SearchOutcome", "gumbel_evaluator", "load_space_cost_model", "point_name", "point_text",
           "run_pipeline", "search", "search_points"]


class EpochShuffle(Sampler[int]):
    """A random order of ``n`` indices that depends only on ``(seed, epoch)``.

    Lightning calls :meth:`set_epoch` before each epoch, so a search resumed from a
    checkpoint sees the same batches as one that never stopped.
    """

    def __init__(self, n: int, seed: int) -> None:
        self.n, self.seed, self.epoch = n, seed, 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def __len__(self) -> int:
        return self.n

    def __iter__(self) -> Any:
        generator = torch.Generator().manual_seed(self.seed * 1_000_003 + self.epoch)
        return iter(torch.randperm(self.n, generator=generator).tolist())


@dataclass
class SearchOutcome:
    """What one search produced."""

    arch: Architecture
    probabilities: dict[str, dict[str, float]]
    history: list[dict[str, Any]]
    search_seconds: float
    alpha: float
    arch_path: Path
    stage_log: list[dict[str, Any]] = field(default_factory=list)
    #: What the collapse guard found (stage, epoch, training top-1, the line, the restored
    #: architecture); None when the search did not collapse.
    collapse: dict[str, Any] | None = None
    #: The export check of the network kept (:func:`measured_export`): its measured ratios to the
    #: baseline, the table's, and the ratios expected before it was measured; None when unchecked.
    export_check: dict[str, Any] | None = None


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


def _datasets(config: GumbelSearchConfig, space: SpaceConfig) -> dict[str, Dataset]:
    from nni_hwaware.spaces.data import make_dataset

    return {split: make_dataset(space.dataset, split, seed=config.seed, data_dir=config.data_dir,
                                shape=tuple(space.input_shape)) for split in ("train", "val")}


def gumbel_evaluator(config: GumbelSearchConfig, space: SpaceConfig | Any, max_epochs: int, out: Path,
                     extra_callbacks: Sequence[Any] = ()) -> Any:
    """NNI's Lightning ``Classification`` evaluator of a search: the space's data, ``config.search``'s options."""
    from functools import partial

    from nni.nas.evaluator.pytorch import Classification, DataLoader
    from pytorch_lightning.callbacks import ModelCheckpoint

    s = config.search
    data = _datasets(config, space)
    loaders = {
        "train": DataLoader(data["train"], batch_size=s.batch_size, sampler=EpochShuffle(len(data["train"]), config.seed),
                            num_workers=s.workers),
        "val": DataLoader(data["val"], batch_size=s.batch_size,
                          sampler=EpochShuffle(len(data["val"]), config.seed + 1), num_workers=s.workers),
    }
    callbacks = list(extra_callbacks)
    if s.checkpoint:
        callbacks.append(ModelCheckpoint(dirpath=out / "checkpoints", filename="last", save_top_k=1,
                                         enable_version_counter=False))
    accelerator = "gpu" if s.accelerator == "cuda" else s.accelerator
    strategy = "ddp_find_unused_parameters_true" if s.devices > 1 else "auto"
    return Classification(
        optimizer=partial(torch.optim.SGD, momentum=s.momentum, nesterov=s.momentum > 0),
        learning_rate=s.lr, weight_decay=s.weight_decay, num_classes=space.num_classes,
        train_dataloaders=loaders["train"], val_dataloaders=loaders["val"],
        max_epochs=max_epochs, accelerator=accelerator, devices=s.devices, strategy=strategy,
        logger=False, enable_progress_bar=False, enable_model_summary=False, num_sanity_val_steps=0,
        enable_checkpointing=s.checkpoint, callbacks=callbacks, default_root_dir=str(out),
        gradient_clip_val=None)


def search(config: GumbelSearchConfig, space: SpaceConfig | Any, cost_model: SpaceCostModel, out: Path, *,
           report: Callable[[dict[str, Any]], None] | None = None, callbacks: Sequence[Any] = ()) -> SearchOutcome:
    """Run one search into ``out`` and export its architecture to ``out/arch.json``.

    ``space`` is a :class:`SpaceConfig` or a :class:`~nni_hwaware.spaces.resolve.NamedSpace`
    (any NNI model space) and ``cost_model`` its cost model. ``report`` receives each
    epoch's record (default: NNI's intermediate result); ``callbacks`` are extra
    Lightning callbacks.
    """
    from nni.nas.execution import SequentialExecutionEngine
    from nni.nas.space import RawFormatModelSpace

    from nni_hwaware.spaces.io import save_architecture
    from nni_hwaware.spaces.resolve import resolve_space
    from nni_hwaware.strategies.gumbel.staged import StagePlan
    from nni_hwaware.strategies.gumbel.strategy import HardwareGumbelDARTS

    out.mkdir(parents=True, exist_ok=True)
    if isinstance(space, SpaceConfig):
        space = resolve_space(space)  # the project's spaces are ModelSpaces like any other
    labels = list(cost_model.labels)
    max_epochs = StagePlan(labels, config.stages, config.temperature).max_total_epochs()
    start = time.perf_counter()
    with fixed_threads(config.search.threads):
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(config.seed)  # the supernet's initial weights
            supernet = space.supernet()
        evaluator = gumbel_evaluator(config, space, max_epochs, out, callbacks)
        checkpoint = out / "checkpoints" / "last.ckpt"
        resume = config.search.checkpoint and config.search.resume and checkpoint.is_file()
        if resume:
            # Tensors and plain types only: a file planted there cannot run code when loaded.
            evaluator.fit_kwargs.update(ckpt_path=str(checkpoint), weights_only=True)
        strategy = HardwareGumbelDARTS(
            cost_model, penalty=config.penalty, temperature=config.temperature, staging=config.stages,
            arc_learning_rate=config.search.arc_lr, arc_weight_decay=config.search.arc_weight_decay,
            gradient_clip_val=config.search.gradient_clip, arc_every=config.search.arc_every,
            baseline_bias=config.search.baseline_bias,
            seed=config.seed, report=report,
            reference=space.baseline(cost_model))
        try:
            strategy(RawFormatModelSpace(supernet, evaluator), SequentialExecutionEngine())
        except pickle.UnpicklingError as err:
            if not resume:
                raise
            why = next((line.strip() for line in str(err).splitlines() if "Unsupported" in line), "refused")
            raise HwAwareError(
                f"{checkpoint} holds more than tensors and plain values, so it is not loaded "
                f"(torch.load weights_only=True: {why.split(' Please use')[0][:160]}); a search of this "
                "version did not write it: delete it or set search.resume: false") from None
    seconds = time.perf_counter() - start
    arch = strategy.export_architecture()
    module = strategy.module
    outcome = SearchOutcome(arch=arch, probabilities=strategy.probabilities(), history=module.history,
                            search_seconds=seconds, alpha=config.penalty.alpha, arch_path=out / "arch.json",
                            stage_log=list(module.plan.log) if module.plan else [], collapse=module.collapse)
    if module.trainer.is_global_zero:
        aims = {k: getattr(config.penalty, k) for k in ("latency_target", "memory_target")
                if getattr(config.penalty, k) is not None}
        save_architecture(outcome.arch_path, arch, space, alpha=config.penalty.alpha, **aims,
                          probabilities=outcome.probabilities, search_seconds=seconds, chip=cost_model.chip)
        write_json(out / "history.json", {"history": module.history, "stages": outcome.stage_log,
                                          "collapse": outcome.collapse})
    return outcome


#: Seconds of shared timing rounds per export check (a trial's check is 1 s; the export decides
#: what is retrained, so it gets a tighter interval).
EXPORT_CHECK_SECONDS = 4.0
#: A limit lowered under a network measured over sits this share under its table cost: well outside the
#: budget mask's rounding tolerance (1e-9), which would otherwise let the same network fit again.
UNDER_MEASURED_OVER = 1e-6
#: A check whose latency interval holds the target is timed again, this many times as long, and decided by
#: that: under load a 4 s check's interval reaches +-15 %, and a point estimate under the target then
#: measures over it as often as not.
UNDECIDED_FACTOR = 4.0


def measured_export(config: GumbelSearchConfig, space: Any, cost_model: SpaceCostModel, outcome: SearchOutcome,
                    log: Callable[[str], None] = print) -> SearchOutcome:
    """The export checked on this machine: the exported network timed in shared rounds with the
    baseline (:func:`~nni_hwaware.training.compare.measure_against_reference`), its memory measured.

    While it measures over a target (as a ratio to the baseline), the search's distribution is
    exported again (:func:`~nni_hwaware.strategies.gumbel.strategy.fitting_architecture`) with that
    target's limit scaled by target / measured: the table under-predicting a region of the space by
    12 % makes the next export aim 12 % lower (and always under the table's cost of the network
    measured over, so that a small excess does not export it again). One measured within but more
    than ``penalty.export_fill`` (when > 0) under a target lands closer: that limit is raised
    halfway (geometric mean) towards the lowest table cost of a network measured over it, or by
    target / measured when none was (the table over-predicting the region), and never above the
    target itself, so that the network kept fits its targets by the table as well. A check
    whose latency interval holds the target is timed again, ``UNDECIDED_FACTOR`` times as long, and
    decided by that. An export already measured is not measured again; that ends the checks. At most
    ``penalty.export_checks`` measurements; the network kept is the one within every target as
    measured that comes nearest them (the largest mean of its measured / target ratios), else the
    one nearest them from above. Each check goes into ``outcome.history``'s last record as
    ``export_checks`` and into ``arch.json``, the kept one into ``outcome.export_check``.

    Each check also records what was expected of its network before it was timed
    (``expected_latency_ratio`` / ``expected_memory_ratio``): its table ratio times how much this
    machine measured the earlier checks over the table (:func:`_check_scale`; the first check's is the
    table's own). That is the search's prediction once the table, a prior, has met the chip: an export
    chosen after a check that measured the region 10 % over the table is expected 10 % over its table cost.
    """
    from nni_hwaware.spaces.io import save_architecture
    from nni_hwaware.strategies.gumbel.strategy import fitting_architecture
    from nni_hwaware.training.compare import measure_against_reference

    penalty = config.penalty
    reference = space.baseline(cost_model)
    base = cost_model.predict(reference)
    targets = {"latency_ms": penalty.budget("latency_target", base.latency_ms),
               "memory_mb": penalty.budget("memory_target", base.memory_mb)}
    targets = {k: v for k, v in targets.items() if v is not None}
    if not targets or penalty.export_checks <= 0:
        return outcome
    shares = {k: v / (base.latency_ms if k == "latency_ms" else base.memory_mb) for k, v in targets.items()}
    timing = {"threads": config.cost.threads, "batch_size": config.cost.batch_size, "backend": config.cost.backend,
              "device": config.cost.device, "seed": config.seed, "seconds": EXPORT_CHECK_SECONDS}
    limits, arch, checks = dict(targets), outcome.arch, []
    over_costs: dict[str, float] = {}  # per target, the lowest table cost of a network measured over it
    unfit = ""
    for _ in range(penalty.export_checks):
        measured = measure_against_reference(space, arch, reference, **timing)
        retimed = _straddles(measured, shares.get("latency_ms"))
        if retimed:  # undecided on a busy machine: time it longer
            measured = measure_against_reference(space, arch, reference,
                                                 **{**timing, "seconds": timing["seconds"] * UNDECIDED_FACTOR})
        predicted = cost_model.predict(arch)
        ratios = {"latency_ms": measured["latency_ratio"],
                  "memory_mb": measured["memory_mb"] / measured["reference_memory_mb"]}
        over = {k: ratios[k] / shares[k] for k in targets if ratios[k] > shares[k]}
        table = {"latency": predicted.latency_ms / base.latency_ms, "memory": predicted.memory_mb / base.memory_mb}
        checks.append({"arch": dict(arch), "measured_latency_ratio": ratios["latency_ms"],
                       "measured_memory_ratio": ratios["memory_mb"],
                       "predicted_latency_ratio": table["latency"], "predicted_memory_ratio": table["memory"],
                       # what the search expected of it before timing it: the table corrected by the earlier checks
                       **{f"expected_{k}_ratio": v * _check_scale(checks, k) for k, v in table.items()},
                       "limits": dict(limits), "within": not over, "retimed": retimed})
        costs = {"latency_ms": predicted.latency_ms, "memory_mb": predicted.memory_mb}
        if over:
            for k, excess in over.items():
                over_costs[k] = min(over_costs.get(k, math.inf), costs[k])
                # strictly under the network measured over, however small the excess
                limits[k] = min(limits[k] / excess, over_costs[k] * (1 - UNDER_MEASURED_OVER))
        else:
            short = {k: shares[k] / ratios[k] for k in targets
                     if penalty.export_fill > 0 and ratios[k] < shares[k] * (1 - penalty.export_fill)}
            if not short:
                break
            for k, shortfall in short.items():  # never above the target: the export fits it by the table too
                raised = math.sqrt(limits[k] * over_costs[k]) if k in over_costs else limits[k] * shortfall
                limits[k] = min(raised, targets[k])
        try:
            arch = fitting_architecture(cost_model, outcome.probabilities, limits, fill=penalty.export_fill)
        except HwAwareError as err:  # nothing fits the corrected limits: keep the nearest measured
            unfit = f"; nothing fits the corrected limits ({err})"
            break
        if any(c["arch"] == arch for c in checks):
            break
    within = [c for c in checks if c["within"]]
    nearest = max(within, key=lambda c: sum(_measured(c, k) / shares[k] for k in targets)) if within else min(
        checks, key=lambda c: max(_measured(c, k) / shares[k] for k in targets))
    if len(checks) > 1 or not nearest["within"] or unfit:
        line = ", ".join(f"{_arch_short(c['arch'])}: latency {c['measured_latency_ratio']:.3f} "
                         f"(table {c['predicted_latency_ratio']:.3f}, expected {c['expected_latency_ratio']:.3f}), "
                         f"memory {c['measured_memory_ratio']:.3f}" for c in checks)
        verdict = "within the targets" if nearest["within"] else "none within the targets as measured; kept the nearest"
        log(f"export measured against the baseline on this machine: {line}; {verdict}{unfit}")
    outcome = dataclasses.replace(outcome, arch=dict(nearest["arch"]), history=[*outcome.history],
                                  export_check=dict(nearest))
    if outcome.history:
        outcome.history[-1] = {**outcome.history[-1], "export_checks": checks}
    if _is_rank_zero():
        aims = {k: getattr(penalty, k) for k in ("latency_target", "memory_target") if getattr(penalty, k) is not None}
        save_architecture(outcome.arch_path, outcome.arch, space, alpha=penalty.alpha, **aims,
                          probabilities=outcome.probabilities, search_seconds=outcome.search_seconds,
                          chip=cost_model.chip, export_checks=checks)
    return outcome


def _check_scale(checks: Sequence[Mapping[str, Any]], kind: str) -> float:
    """How much this machine measured the checked exports over the table (``kind``: latency or memory): the
    geometric mean of their measured / predicted ratios, 1 before any. The table is a prior; the export's
    expected cost is its table cost times this, as the PPO search's correction of the table
    (:class:`~nni_hwaware.strategies.correction.CostCorrection`'s global scale) from its trials."""
    logs = [math.log(c[f"measured_{kind}_ratio"] / c[f"predicted_{kind}_ratio"]) for c in checks
            if c[f"measured_{kind}_ratio"] > 0 and c[f"predicted_{kind}_ratio"] > 0]
    return math.exp(sum(logs) / len(logs)) if logs else 1.0


def _straddles(measured: Mapping[str, Any], share: float | None) -> bool:
    """Whether the measured latency ratio's 95 % interval holds ``share`` (the target as a ratio)."""
    low, high = measured.get("latency_ratio_ci95_low"), measured.get("latency_ratio_ci95_high")
    return share is not None and low is not None and high is not None and low < share < high


def _measured(check: Mapping[str, Any], target: str) -> float:
    return check[f"measured_{target.split('_')[0]}_ratio"]


def _arch_short(arch: Mapping[str, Any]) -> str:
    values = list(arch.values())
    common = max(set(values), key=values.count) if values else None
    return " ".join(f"{k}:{v}" for k, v in arch.items() if v != common) or f"all {common}"


def _alpha_name(alpha: float) -> str:
    return f"alpha_{alpha:g}".replace(".", "p")


def _target_ratios(config: GumbelSearchConfig, baseline: Any) -> dict[str, float]:
    """The penalty's targets as ratios to the baseline's predicted costs (``latency_ratio`` / ``memory_ratio``)."""
    out = {}
    for key, target, predicted in (("latency_ratio", config.penalty.latency_target, baseline.predicted_latency_ms),
                                   ("memory_ratio", config.penalty.memory_target, baseline.predicted_memory_mb)):
        share = _target_share(target, predicted, key)
        if share is not None:
            out[key] = share
    return out


def _target_share(target: float | str | None, predicted: float | None, name: str) -> float | None:
    """A target as a share of the baseline's predicted cost ("45%" or ms / MB; None when unknown)."""
    from nni_hwaware.strategies.job import budget_fraction

    if isinstance(target, str):
        return budget_fraction(target, name)
    if target is not None and predicted:
        return float(target) / float(predicted)
    return None


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
    outcomes: dict[str, SearchOutcome] = {}
    results: dict[str, ModelResult] = {}
    for name, run_config, point in points:
        outcome = search(run_config, space, cost_model, out / "search" / name,
                         report=report if name == points[0][0] else None)
        if not _is_rank_zero():
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
    main_name = points[0][0]
    main = results[main_name].renamed("searched")
    main.save(out / "results" / "searched.json")
    baseline = retrain(space.baseline(), "baseline", None) if config.baseline else None  # the reference network
    sweep = [results[point_name(option, value)] for option, value in config.sweep.points]
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
        "search_seconds": outcomes[main_name].search_seconds,
        # the collapse guard's finding of the main search (None: it did not collapse); a sweep
        # point's is in its entry's extra.search_collapse
        "collapse": outcomes[main_name].collapse,
    }
    write_json(out / "summary.json", summary)
    return summary


def check_refit(config: GumbelSearchConfig) -> None:
    """A one-line error unless ``--refit`` has targets to correct and a baseline to measure against."""
    if config.penalty.latency_target is None and config.penalty.memory_target is None:
        raise HwAwareError("--refit corrects the penalty's targets; this config has none (set penalty.latency_target "
                           "and/or memory_target, e.g. \"45%\")")
    if not config.baseline:
        raise HwAwareError("--refit needs the found network measured against the baseline; set baseline: true")


def refit_changes(config: GumbelSearchConfig, summary: Mapping[str, Any]) -> dict[str, Any]:
    """The config changes of one more search whose targets are corrected by what the first one measured.

    Each target (as a share of the baseline) is multiplied by the found network's predicted
    ratio over its measured one: a network the table predicted at 45 % of the baseline and
    that measured 50 % gets a target of 40.5 %, so the next search lands nearer the user's
    45 % as measured. The refit reads the first run's cost table and writes to ``<out>/refit``.
    """
    check_refit(config)
    penalty = config.penalty
    comparison = ((summary.get("searched") or {}).get("extra") or {}).get("vs_baseline") or {}
    if not comparison:
        raise HwAwareError("--refit needs the found network measured against the baseline; set baseline: true")
    baseline = summary.get("baseline") or {}
    out = Path(config.out)
    changes: dict[str, Any] = {"out": str(out / "refit")}
    table = out / "cost_table.csv"
    if config.cost.table is None and table.is_file():
        changes["cost.table"] = str(table)
    for name, target, measured, predicted, reference in (
            ("latency_target", penalty.latency_target, comparison.get("latency_ratio"),
             comparison.get("predicted_latency_ratio"), baseline.get("predicted_latency_ms")),
            ("memory_target", penalty.memory_target, comparison.get("memory_ratio"),
             comparison.get("predicted_memory_ratio"), baseline.get("predicted_memory_mb"))):
        if target is None:
            continue
        if not (measured and predicted):
            raise HwAwareError(f"--refit: the first search's {name.split('_')[0]} ratio was not measured and "
                               "predicted both; nothing to correct it by")
        share = _target_share(target, reference, name)
        if share is None:
            raise HwAwareError(f"--refit: the baseline's predicted cost is unknown; cannot read {name} {target!r} "
                               "as a share of it")
        changes[f"penalty.{name}"] = f"{100 * share * float(predicted) / float(measured):.4g}%"
    return changes


def search_points(config: GumbelSearchConfig) -> list[tuple[str, GumbelSearchConfig, dict[str, Any]]]:
    """``(name, config, point)`` of every search of a run: the config's own, then each sweep point
    not equal to it. ``point`` says what the search aimed at: ``{"alpha": a}`` in the fixed-weight
    form, else ``{"latency_target": t}`` (with ``memory_target`` when the penalty has one)."""
    penalty = config.penalty
    own = ("alpha", penalty.alpha) if penalty.latency_target is None else ("latency_target", penalty.latency_target)
    points: dict[str, tuple[str, GumbelSearchConfig, dict[str, Any]]] = {}
    for option, value in (own, *config.sweep.points):
        name = point_name(option, value)
        if name in points:
            continue
        run_config = config if (option, value) == own else config.replace(**{f"penalty.{option}": value})
        point: dict[str, Any] = {option: value}
        if run_config.penalty.memory_target is not None:
            point["memory_target"] = run_config.penalty.memory_target
        points[name] = (name, run_config, point)
    return list(points.values())


def point_name(option: str, value: float | str) -> str:
    """The folder and result name of a search point: ``alpha_1p5``, ``target_30pct``, ``target_2p5ms``."""
    if option == "alpha":
        return _alpha_name(float(value))
    if isinstance(value, str):
        from nni_hwaware.strategies.job import budget_fraction

        return f"target_{100 * budget_fraction(value, 'latency target'):g}pct".replace(".", "p")
    return f"target_{float(value):g}ms".replace(".", "p")


def point_text(point: dict[str, Any] | None) -> str:
    """``alpha=1.5`` or ``latency target 30%`` (``memory target 51%``) of a search point."""
    if not point:
        return ""
    parts = []
    for key, value in point.items():
        unit = "" if isinstance(value, str) else (" ms" if key == "latency_target" else " MB")
        parts.append(f"alpha={value:g}" if key == "alpha" else f"{key.replace('_', ' ')} {value}{unit}")
    return ", ".join(parts)


def _with_targets(result: Any, config: GumbelSearchConfig, baseline: Any) -> Any:
    targets = _target_ratios(config, baseline)
    return dataclasses.replace(result, extra={**result.extra, "targets": targets}) if targets else result


def _is_rank_zero() -> bool:
    """False in the extra processes of a multi-device (DDP) search: they stop after searching."""
    import os

    return int(os.environ.get("RANK", os.environ.get("LOCAL_RANK", "0"))) == 0

