"""The NNI trial of a multi-trial search: build the sampled network, train, report.

``python -m nni_hwaware.trial --space digits --table cost_table.csv`` is the
``trialCommand`` of the search experiments. The parameters NNI hands over are the
architecture (layer label -> block name). Every epoch reports an intermediate
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
import sys
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
    parser.add_argument("--space", required=True, help="space name or JSON file")
    parser.add_argument("--table", required=True, help="cost table of the target chip")
    parser.add_argument("--chip", help="chip in the table (default: its only chip)")
    parser.add_argument("--backend", default="torch")
    parser.add_argument("--batch-size", type=int, default=1, help="batch size of the cost table")
    parser.add_argument("--train", default="{}", help="training options as JSON (see TrainConfig)")
    parser.add_argument("--arch", help="architecture JSON file, to run without NNI")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        return _run(args)
    except HwAwareError as err:
        print(f"nni_hwaware.trial: error: {err}", file=sys.stderr)
        return 2


def _run(args: argparse.Namespace) -> int:
    import nni

    from nni_hwaware.cost_table import CostModel, CostTable
    from nni_hwaware.spaces import get_space_config
    from nni_hwaware.spaces.io import load_architecture
    from nni_hwaware.trial.train import TrainConfig, train_architecture

    config = get_space_config(args.space)
    try:
        options = json.loads(args.train)
    except json.JSONDecodeError as err:
        raise HwAwareError(f"--train is not valid JSON: {err}") from None
    train = TrainConfig.from_dict(options)
    model = CostModel(CostTable.load(args.table), config, chip=args.chip, backend=args.backend,
                      batch_size=args.batch_size)
    if args.arch:
        arch = load_architecture(args.arch, config)
    else:
        params = nni.get_next_parameter()
        if not params:
            raise HwAwareError("no parameters from NNI: run this as an NNI trial, or pass --arch FILE")
        arch = config.check_architecture({k: v for k, v in params.items() if not k.startswith("_")})
    costs = model.predict(arch).metrics()

    def on_epoch(epoch: int, record: Mapping[str, float]) -> None:
        nni.report_intermediate_result({"default": record["val_top1"], "val_top3": record["val_top3"],
                                        "train_loss": record["train_loss"], "epoch": epoch})

    result = train_architecture(config, arch, train, on_epoch)
    final = trial_metrics(arch, result.metrics(), costs)
    nni.report_final_result(final)
    print(json.dumps(final))
    return 0
