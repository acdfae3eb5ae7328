"""The Gumbel search as a one-trial ``nnictl`` experiment: per-epoch results reach the manager.

A GridSearch tuner hands ``alpha`` to ``python -m nni_hwaware.strategies.gumbel.trial`` on the
hand-made two-layer space; the test reads the manager's REST API: one intermediate result
per search epoch (stage, expected latency and memory, validation accuracy) and the final
dict (measured costs, ratios to the baseline, the architecture). About 60 s.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from experiments import gumbel_trial_template
from handmade import tiny_config, tiny_table

from nni_hwaware.experiment import create_experiment, parse_metric, write_config

pytestmark = [pytest.mark.nnictl, pytest.mark.slow]

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "digits" / "gumbel_nnictl.yml"


def test_example_experiment_config_runs_the_gumbel_trial() -> None:
    config = yaml.safe_load(EXAMPLE.read_text())
    assert config["trialCommand"].startswith("python -m nni_hwaware.strategies.gumbel.trial --config gumbel.yml")
    assert (EXAMPLE.parent / "gumbel.yml").is_file()
    assert config["maxTrialNumber"] == 1 and config["searchSpace"]["latency_target"]["_type"] == "choice"


def test_one_trial_gumbel_experiment_reports_each_epoch_and_a_final_dict(tmp_path: Path) -> None:
    space = tmp_path / "tiny_space.json"
    space.write_text(tiny_config().to_json())
    table = tmp_path / "tiny_table.csv"
    tiny_table().save(table)
    search = {
        "space": str(space), "seed": 0,
        "cost": {"table": str(table), "repeats": 1},
        "penalty": {"alpha": 0.0, "gamma": 0.0},
        "temperature": {"init": 1.0, "min": 1.0, "hard": True},
        "stages": {"split": 1, "order": ["upper", "lower"], "max_epochs": 2, "min_epochs": 2},
        "search": {"threads": 1, "arc_lr": 0.1, "accelerator": "cpu"},
        "retrain": {"epochs": 1},
    }
    (tmp_path / "gumbel.yml").write_text(yaml.safe_dump(search))
    template = gumbel_trial_template(tmp_path, "nni-hwaware-gumbel-test", 20.0)
    config = write_config(template, tmp_path / "config.yml", tmp_path / "experiments")
    with create_experiment(config, timeout=60) as exp:
        assert exp.wait(timeout=240, poll=1.0) in ("DONE", "TUNER_NO_MORE_TRIAL"), exp.describe()
        (job,) = exp.trial_jobs()
        assert job["status"] == "SUCCEEDED", exp.describe()
        data = exp.rest(f"metric-data/{job['trialJobId']}")
        periodical = sorted((m for m in data if m["type"] == "PERIODICAL"), key=lambda m: int(m["sequence"]))
        epochs = [parse_metric(m["data"]) for m in periodical]
        assert [e["stage"] for e in epochs] == ["upper", "upper", "lower", "lower"]
        for epoch in epochs:
            assert {"default", "val_top1", "val_top3", "expected_latency_ms", "expected_memory_mb",
                    "temperature", "loss", "penalty"} <= set(epoch)
        # alpha = 20 from the tuner (the YAML says 0): the expected latency falls
        assert epochs[-1]["expected_latency_ms"] < epochs[0]["expected_latency_ms"]
        (final,) = exp.final_metrics()
        assert json.loads(final["arch"]) == {"layer1_0": "skip", "layer2_0": "skip"}
        assert final["alpha"] == 20.0
        assert {"default", "test_top1", "test_top3", "latency_ms", "memory_mb", "latency_ratio",
                "memory_ratio", "top1_drop_pp", "top3_drop_pp", "search_seconds"} <= set(final)
        assert final["latency_ratio"] < 1.0
        exp.stop()
