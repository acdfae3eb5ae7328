"""The Gumbel search as one NNI trial: ``python -m nni_hwaware.strategies.gumbel.trial --config gumbel.yml``.

The ``trialCommand`` of a one-trial ``nnictl`` experiment (see
``examples/digits/gumbel_nnictl.yml``). It runs the whole job of
``nni-hwaware search gumbel`` (search, export, retrain the found network and the
baseline, report) and reports to NNI:

* per search epoch, an intermediate result ``{default: val_top1, val_top3,
  expected_latency_ms, expected_memory_mb, arch_latency_ms, stage, epoch,
  temperature, loss, ce, penalty, ..., arch}`` -- the portal shows the search
  progressing stage by stage;
* at the end, a final result ``{default: val_top1 of the retrained network,
  test_top1, test_top3, latency_ms, memory_mb (measured), predicted_latency_ms,
  predicted_memory_mb, params, flops, latency_ratio, memory_ratio (vs the
  baseline), top1_drop_pp, top3_drop_pp, search_seconds, arch}`` and ``alpha`` (fixed-weight
  form) or ``latency_target`` / ``memory_target`` (target form), and ``collapse`` (the
  collapse guard's line) when the search stopped on one.

A search that fails on bad input or diverges (NaN/inf loss: the stage, epoch,
step and last finite losses are named) prints one line to stderr
(``nni_hwaware.strategies.gumbel.trial: error: ...``, in the trial's ``trial.stderr``)
and exits with status 2: NNI marks the trial FAILED, and nothing is exported.

The parameters NNI hands over (if any) override the config: ``alpha``, ``beta``,
``gamma``, ``delta``, ``latency_target``, ``memory_target`` (the penalty's) or any dotted
option (``temperature.init``),
so a tuner can sweep them with one trial per value. Files go to
``$NNI_OUTPUT_DIR/gumbel`` (the trial's folder) unless ``--out`` is given.
"""

from __future__ import annotations

import argparse
import json
import os
from collections.abc import Mapping
from typing import Any

__all__ = ["PARAMETER_ALIASES", "final_metrics", "main", "overrides_from_parameters"]

#: Short names a tuner's search space may use for penalty options.
PARAMETER_ALIASES = {name: f"penalty.{name}"
                     for name in ("alpha", "beta", "gamma", "delta", "latency_target", "memory_target")}


def overrides_from_parameters(parameters: Mapping[str, Any] | None) -> dict[str, Any]:
    """Config changes (dotted paths) from NNI's parameters; keys starting with ``_`` are NNI's own."""
    return {PARAMETER_ALIASES.get(key, key): value for key, value in (parameters or {}).items()
            if not key.startswith("_")}


def final_metrics(summary: Mapping[str, Any]) -> dict[str, Any]:
    """The final metric dict of the trial from :func:`run_pipeline`'s summary."""
    searched, baseline = summary["searched"], summary.get("baseline")
    keys = ("test_top1", "test_top3", "val_top1", "val_top3", "latency_ms", "memory_mb",
            "predicted_latency_ms", "predicted_memory_mb", "params", "flops")
    final: dict[str, Any] = {"default": searched["val_top1"], **{k: searched[k] for k in keys}}
    if baseline:
        final.update(
            latency_ratio=searched["latency_ms"] / baseline["latency_ms"],
            memory_ratio=searched["memory_mb"] / baseline["memory_mb"],
            top1_drop_pp=100 * (baseline["test_top1"] - searched["test_top1"]),
            top3_drop_pp=100 * (baseline["test_top3"] - searched["test_top3"]),
            baseline_test_top1=baseline["test_top1"], baseline_latency_ms=baseline["latency_ms"])
    final.update(search_seconds=summary["search_seconds"], arch=json.dumps(summary["arch"], separators=(",", ":")))
    for key in ("alpha", "latency_target", "memory_target"):  # the search's form: a fixed weight or its targets
        if summary.get(key) is not None:
            final[key] = summary[key]
    if summary.get("collapse"):  # the search stopped on a collapse: the portal shows why
        final["collapse"] = summary["collapse"]["line"]
    return final


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m nni_hwaware.strategies.gumbel.trial",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("--config", required=True, help="search config YAML (as for nni-hwaware search gumbel)")
    parser.add_argument("--out", help="output directory (default: $NNI_OUTPUT_DIR/gumbel, else the config's out)")
    return parser


def main(argv: list[str] | None = None) -> int:
    from nni_hwaware.trial.entry import run_trial

    args = _parser().parse_args(argv)
    return run_trial("nni_hwaware.strategies.gumbel.trial", lambda: _run(args))


def _run(args: argparse.Namespace) -> int:
    import nni

    from nni_hwaware.nni_fixes import next_parameters, outer_trial_reporter
    from nni_hwaware.strategies.gumbel.job_config import GumbelSearchConfig
    from nni_hwaware.strategies.gumbel.pipeline import run_pipeline

    config = GumbelSearchConfig.from_yaml(args.config)
    config = config.replace(**overrides_from_parameters(next_parameters()))
    out = args.out or (os.path.join(os.environ["NNI_OUTPUT_DIR"], "gumbel") if os.environ.get("NNI_OUTPUT_DIR")
                       else None)
    if out:
        if os.environ.get("NNI_PLATFORM"):
            from nni_hwaware.trial.paths import inside_experiment

            out = str(inside_experiment(out, "--out"))
        config = config.replace(out=out)
    summary = run_pipeline(config, report=outer_trial_reporter())
    if not summary:  # an extra DDP process
        return 0
    final = final_metrics(summary)
    nni.report_final_result(final)
    print(json.dumps(final))
    return 0


if __name__ == "__main__":
    from nni_hwaware.trial.entry import trial_main

    trial_main("nni_hwaware.strategies.gumbel.trial", main)
