"""NNI trial: profile a space on the machine the trial runs on and report the table.

Run by NNI (``trialCommand: python -m nni_hwaware.trial.profile_chip --space digits``; any
space: ``--space nni:NasBench201``, ``--space-args JSON``)
with one trial per board: with the remote training service each trial lands on
one machine of ``machineList``. The final metric is
``{"default": <reference network's latency ms>, "chip": ..., "rows": ..., "cost_table": <table>}``
(see :mod:`nni_hwaware.cost_table.transport`); ``nni-hwaware collect`` merges
the tables of all trials into one file. A ``chip`` parameter from the tuner, if
any, names the board instead of the detected CPU/GPU model.
"""

from __future__ import annotations

import argparse
import sys

from nni_hwaware.errors import HwAwareError


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m nni_hwaware.trial.profile_chip")
    parser.add_argument("--space", required=True)
    parser.add_argument("--space-args", default="{}", help="keyword arguments of the space as JSON")
    parser.add_argument("--backend", default="torch")
    parser.add_argument("--batch-size", type=int, default=1)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--threads", type=int)
    args = parser.parse_args(argv)

    import json

    import nni

    from nni_hwaware.cost_model import profile_space, space_model
    from nni_hwaware.cost_table.transport import METRIC_KEY, table_to_text
    from nni_hwaware.nni_fixes import next_parameters
    from nni_hwaware.spaces.resolve import resolve_space

    try:
        params = next_parameters() or {}
        space_args = json.loads(args.space_args)
        if not isinstance(space_args, dict):
            raise HwAwareError("--space-args must be a JSON object of keyword arguments")
        named = resolve_space(args.space, **space_args)
        table = profile_space(named, chip=params.get("chip"), backend=args.backend, device=args.device,
                              batch_size=args.batch_size, threads=args.threads, progress=False)
    except (HwAwareError, json.JSONDecodeError) as err:
        print(f"profile_chip: error: {err}", file=sys.stderr)
        return 2
    chip = table.chips()[0]
    model = space_model(named, table, chip=chip, backend=args.backend, batch_size=args.batch_size)
    nni.report_final_result({
        "default": model.predict(named.baseline(model)).latency_ms, "chip": chip, "rows": len(table),
        METRIC_KEY: table_to_text(table),
    })
    return 0


if __name__ == "__main__":
    from nni_hwaware.trial.entry import trial_main

    trial_main("nni_hwaware.trial.profile_chip", main)
