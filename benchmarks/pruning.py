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

from nni_hwaware.cost_model import load_or_profile, space_model
from nni_hwaware.cost_table import CostTable
from nni_hwaware.pruning import prune_choices
from nni_hwaware.spaces import space_names
from nni_hwaware.spaces.resolve import resolve_space

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
        named = resolve_space(name)
        path = args.table_dir / f"{name}.csv" if args.table_dir else None
        model = space_model(named, load_or_profile(named, path))
        results[name] = {}
        for label, kwargs in SETTINGS.items():
            result = prune_choices(model, **kwargs)
            before, after = result.sizes()
            kept = [len(values) for values in result.allowed.values()]
            results[name][label] = {"before": before, "after": after, "per_layer_kept": kept}
        print(name, json.dumps(results[name]), flush=True)
    tabular = DATA / "tabular_digits_tiny.csv"
    if tabular.exists():
        results["tabular_best_survives"] = _best_survives(tabular)
    print(json.dumps(results))


def _best_survives(path: Path) -> dict[str, bool]:
    import pandas as pd

    frame = pd.read_csv(path)
    named = resolve_space("digits_tiny")
    budget = frame.latency_ms.quantile(1 / 3)
    feasible = frame[frame.latency_ms <= budget]
    best = feasible[feasible.val_acc == feasible.val_acc.max()]  # ties: any of them counts
    table = CostTable.load(DATA / "digits_tiny_table.csv")  # the table the tabular latencies came from
    out = {}
    for label, kwargs in SETTINGS.items():
        allowed = prune_choices(space_model(named, table), **kwargs).allowed
        out[label] = any(all(row[layer] in values for layer, values in allowed.items()) for _, row in best.iterrows())
    return out


if __name__ == "__main__":
    main()
