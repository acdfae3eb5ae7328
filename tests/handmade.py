"""A hand-made cost table for a two-layer space, with numbers chosen to check by hand."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from nni_hwaware.cost_table import CostTable, profile_entries
from nni_hwaware.spaces import SpaceConfig, StageConfig

PEAK = 1e9  # FLOP/s

# block -> (latency_ms, flops, params, param_mb, activation_mb) per layer index (0, 1); fixed parts first.
COSTS = {
    "stem": (0.5, 1000, 10, 0.01, 0.2),
    "head": (0.25, 200, 20, 0.02, 0.05),
    ("layer1_0", "skip"): (0.1, 0, 0, 0.0, 0.1),
    ("layer1_0", "basic"): (2.0, 4_000_000, 4000, 0.4, 0.3),
    ("layer1_0", "bottleneck"): (1.0, 1_000_000, 3000, 0.3, 0.25),
    ("layer2_0", "skip"): (0.2, 500, 40, 0.001, 0.05),
    ("layer2_0", "basic"): (4.0, 2_000_000, 8000, 0.8, 0.15),
    ("layer2_0", "bottleneck"): (1.0, 1_000_000, 1000, 0.1, 0.12),
}


def tiny_config() -> SpaceConfig:
    return SpaceConfig(
        name="tiny", in_channels=1, image_size=8, num_classes=10, stem_channels=8,
        stages=(StageConfig(8, 1, 1), StageConfig(16, 1, 2)),
        candidates=("skip", "basic", "bottleneck"),
    )


def tiny_table(chip: str = "chipA", scale: float = 1.0) -> CostTable:
    config = tiny_config()
    labels = {(s.input_shape, s.out_channels, s.stride): s.label for s in config.layer_specs()}
    records = []
    for entry in profile_entries(config):
        key = entry.key
        lookup = key.block if entry.kind == "fixed" else (labels[(key.input_shape, key.out_channels, key.stride)], key.block)
        latency, flops, params, param_mb, act_mb = COSTS[lookup]
        latency *= scale
        records.append({
            "block": key.block, "kind": entry.kind, "input_shape": key.shape_str,
            "out_channels": key.out_channels, "stride": key.stride, "chip": chip, "backend": "torch",
            "batch_size": 1, "latency_ms": latency, "latency_std_ms": 0.01, "latency_cv": 0.01,
            "runs": 10, "param_mb": param_mb, "activation_mb": act_mb, "memory_mb": param_mb + act_mb,
            "flops": flops, "params": params, "peak_flops": PEAK,
            "utilisation": flops / (latency / 1000 * PEAK), "torch_version": "2.14.1", "threads": 2,
            "profiled_at": "2026-11-29", "device": "cpu", "providers": "",
        })
    return CostTable.from_records(records)


def tiny_files(tmp_path: Path) -> tuple[Path, Path]:
    """The two-layer space and its hand-made table, written into ``tmp_path``."""
    space = tmp_path / "tiny_space.json"
    space.write_text(tiny_config().to_json())
    table = tmp_path / "tiny_table.csv"
    tiny_table().save(table)
    return space, table


def tiny_gumbel_config(tmp_path: Path, space: Path, table: Path, *, search: dict[str, Any] | None = None,
                       retrain: dict[str, Any] | None = None) -> Path:
    """A one-epoch-per-stage Gumbel search of the two-layer space (``out``: ``tmp_path / "run"``), written to
    ``tmp_path / "gumbel.yml"``; ``search`` and ``retrain`` replace those sections."""
    config = {
        "space": str(space), "seed": 0, "out": str(tmp_path / "run"),
        "cost": {"table": str(table), "repeats": 1},
        "penalty": {"alpha": 20.0, "gamma": 0.0},
        "temperature": {"init": 1.0, "min": 1.0, "hard": True},
        "stages": {"split": 1, "order": ["upper", "lower"], "max_epochs": 1, "min_epochs": 1},
        "search": search if search is not None else {"threads": 1, "arc_lr": 0.1, "accelerator": "cpu"},
        "retrain": retrain if retrain is not None else {"epochs": 2},
        "sweep": {"alphas": [0.0]},
    }
    path = tmp_path / "gumbel.yml"
    path.write_text(yaml.safe_dump(config))
    return path


def tiny_tuner(tmp_path: Path, **options: Any) -> Any:
    """A :class:`PPOTuner` over :func:`tiny_config` with :func:`tiny_table`, its search space given (files in ``tmp_path``)."""
    from nni_hwaware.strategies.ppo.tuner import PPOTuner

    table = tmp_path / "t.csv"
    tiny_table().save(table)
    space = tmp_path / "space.json"
    space.write_text(tiny_config().to_json())
    tuner = PPOTuner(str(space), str(table), **options)
    tuner.update_search_space({"layer1_0": {"_type": "choice", "_value": ["skip", "basic", "bottleneck"]},
                               "layer2_0": {"_type": "choice", "_value": ["skip", "bottleneck"]}})
    return tuner
