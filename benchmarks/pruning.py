"""Search-space size before and after pruning, per shipped space and mode.

Profiles each space on this chip (or loads ``--table-dir/<space>.csv`` when
present), prunes it in every mode, and prints one JSON object on its last line:
``{space: {mode: {"before", "after", "per_layer_kept"}}}``. When the tabular
benchmark of the strategies exists (``benchmarks/data/tabular_digits_tiny.csv``), it
also says whether the best architecture under the latency budget survives pruning.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from nni_hwaware.cost_table import CostModel, CostTable, profile_space
from nni_hwaware.pruning import prune_space
from nni_hwaware.spaces import get_space_config, space_names

DATA = Path(__file__).parent / "data"
SETTINGS = {
    "layer-mean": {},
    "global-mean": {},
    "top-k(3)": {"mode": "top-k", "top": 3},
    "layer-mean+skip": {"always_keep": ["skip"]},
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--spaces", nargs="*", default=space_names())
    parser.add_argument("--table-dir", type=Path, help="reuse <dir>/<space>.csv, write it when missing")
    args = parser.parse_args()
    results: dict[str, dict[str, object]] = {}
    for name in args.spaces:
        config = get_space_config(name)
        path = args.table_dir / f"{name}.csv" if args.table_dir else None
        if path is not None and path.exists():
            table = CostTable.load(path)
        else:
            table = profile_space(config, progress=False, calibration_archs=0)
            if path is not None:
                table.save(path)
        model = CostModel(table, config)
        results[name] = {}
        for label, kwargs in SETTINGS.items():
            result = prune_space(model, **kwargs)
            before, after = result.sizes()
            kept = [len(spec.candidates) for spec in result.config.layer_specs()]
            results[name][label] = {"before": before, "after": after, "per_layer_kept": kept}
        print(name, json.dumps(results[name]), flush=True)
    tabular = DATA / "tabular_digits_tiny.csv"
    if tabular.exists():
        results["tabular_best_survives"] = _best_survives(tabular)
    print(json.dumps(results))


def _best_survives(path: Path) -> dict[str, bool]:
    import pandas as pd

    frame = pd.read_csv(path)
    config = get_space_config("digits_tiny")
    labels = [s.label for s in config.layer_specs()]
    budget = frame.latency_ms.quantile(1 / 3)
    feasible = frame[frame.latency_ms <= budget]
    best = feasible[feasible.val_acc == feasible.val_acc.max()]  # ties: any of them counts
    table = CostTable.load(DATA / "digits_tiny_table.csv")  # the table the tabular latencies came from
    out = {}
    for label, kwargs in SETTINGS.items():
        pruned = prune_space(CostModel(table, config), **kwargs).config
        out[label] = any(
            all(row[layer] in spec.candidates for layer, spec in zip(labels, pruned.layer_specs(), strict=True))
            for _, row in best.iterrows())
    return out


if __name__ == "__main__":
    main()
