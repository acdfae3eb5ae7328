"""The Gumbel benchmarks over seeds: each seed's figures, the median and spread, one JSON line last.

``benchmarks/oneshot_vs_baseline.py`` end to end with ``--quick`` on the hand-made two-layer
space (its figures mean nothing there: the test checks the structure and that every verdict
is computed from the per-seed figures), and its pieces on hand-made summaries.
"""

from __future__ import annotations

import importlib.util
import json
import statistics
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import yaml
from handmade import tiny_config, tiny_table

ROOT = Path(__file__).resolve().parents[1]


def _benchmark(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, ROOT / "benchmarks" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def oneshot() -> ModuleType:
    return _benchmark("oneshot_vs_baseline")


def _tiny(tmp_path: Path, **sweep: Any) -> Path:
    tmp_path.mkdir(parents=True, exist_ok=True)
    space, table = tmp_path / "tiny_space.json", tmp_path / "tiny_table.csv"
    space.write_text(tiny_config().to_json())
    tiny_table().save(table)
    config = {
        "space": str(space), "seed": 0, "cost": {"table": str(table), "repeats": 1}, "prune": {"mode": None},
        "penalty": {"latency_target": "80%", "memory_target": None, "gamma": 0.0},
        "temperature": {"init": 1.0, "min": 1.0, "hard": True},
        "stages": {"order": ["all"], "max_epochs": 3, "min_epochs": 3},
        "search": {"threads": 1, "arc_lr": 0.1, "accelerator": "cpu"},
        "retrain": {"epochs": 5, "threads": 1},
        "sweep": sweep or {"targets": ["40%", "60%", "80%"]},
    }
    path = tmp_path / "gumbel.yml"
    path.write_text(yaml.safe_dump(config))
    return path


def _result(name: str, latency: float, memory: float, top1: float, top3: float, **extra: Any) -> dict[str, Any]:
    return {"name": name, "arch": {"layer1_0": "skip"}, "alpha": extra.pop("alpha", None), "test_top1": top1,
            "test_top3": top3, "latency_ms": latency, "memory_mb": memory, "predicted_latency_ms": latency,
            "predicted_memory_mb": memory, "params": 1, "flops": 1, "train_seconds": 10.0, "search_seconds": 20.0,
            "extra": {"vs_baseline": {"latency_ratio": latency / 2.0, "latency_ratio_ci95": [0, 1], "spread": 0.01,
                                      "warnings": []}, **extra}}


def test_a_seed_is_checked_against_its_targets(oneshot: ModuleType) -> None:
    baseline = _result("baseline", 2.0, 1.0, 0.98, 1.0)
    sweep = [_result(f"searched_target_{t}pct", 2.0 * t / 100, 0.5, 0.975, 0.998,
                     search_point={"latency_target": f"{t}%"}) | {"latency_target": f"{t}%"} for t in (60, 30)]
    searched = _result("searched", 0.9, 0.5, 0.975, 0.998, search_point={"latency_target": "45%"})
    summary = {"baseline": baseline, "searched": searched, "sweep": sweep, "chip": "cpu"}
    record = oneshot.one_seed(summary, targeted=True)
    assert [p["latency_target"] for p in record["sweep"]] == ["30%", "45%", "60%"]  # the main one joins the sweep
    assert [p["latency_ratio"] for p in record["sweep"]] == pytest.approx([0.3, 0.45, 0.6])
    assert record["latency_falls_with_target"] is True
    assert record["latency_ratio"] == pytest.approx(0.45) and record["top3_drop_pp"] == pytest.approx(0.2)
    assert record["search_s_over_retrain_s"] == 2.0
    checks = oneshot.meets(record, {"latency_ratio": 0.45, "memory_ratio": 0.51})
    assert all(checks.values()), checks
    # each check on its own: just over a bound fails it
    for key, value, check in (("latency_ratio", 0.451, "latency_ratio_within_target"),
                              ("expected_memory_ratio", 0.48, "expected_memory_ratio_within_5pct_of_target"),
                              ("top1_drop_pp", 1.01, "top1_drop_pp_within_1"),
                              ("top3_drop_pp", 0.51, "top3_drop_pp_within_0.5"),
                              ("search_s_over_retrain_s", 3.1, "search_s_over_retrain_s_within_3")):
        failed = oneshot.meets({**record, key: value}, {"latency_ratio": 0.45, "memory_ratio": 0.51})
        assert [k for k, ok in failed.items() if not ok] == [check], (key, failed)
    # unchecked, the search expected what the table predicts; checked, what its export check expected of it
    assert record["expected_latency_ratio"] == record["predicted_latency_ratio"] == pytest.approx(0.45)
    checked = _result("searched", 0.9, 0.5, 0.975, 0.998, search_point={"latency_target": "45%"},
                      export_check={"expected_latency_ratio": 0.44, "expected_memory_ratio": 0.5})
    record = oneshot.one_seed({**summary, "searched": checked}, targeted=True)
    assert (record["expected_latency_ratio"], record["predicted_latency_ratio"]) == pytest.approx((0.44, 0.45))
    assert record["expected_memory_ratio"] == 0.5
    # the same network at every target does not "fall"; one that rises with a lower target does not either
    assert not oneshot._falls([0.333, 0.335, 0.333]) and not oneshot._falls([0.6, 0.3, 0.45])
    assert oneshot._falls([0.6, 0.45, 0.3])


def test_load_runs_everything_under_the_harness(oneshot: ModuleType, monkeypatch: pytest.MonkeyPatch,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    from nni_hwaware.profiling import load

    events: list[Any] = []

    class FakeLoad:  # records what the benchmark asks for; loads nothing
        def __init__(self, seed: int, seconds: float) -> None:
            events.append(("load", seed, seconds))
            self.pids = [1, 2]

        def __enter__(self) -> FakeLoad:
            events.append("start")
            return self

        def __exit__(self, *exc: object) -> None:
            events.append("stop")

    monkeypatch.setattr(load, "BackgroundLoad", FakeLoad)
    monkeypatch.setattr(oneshot, "run", lambda args: events.append(("run", args.seeds, args.quick)) or {"x": 1})
    result = oneshot.main(["--seeds", "3", "--seed", "7", "--load", "--load-seconds", "60", "--quick"])
    assert events == [("load", 7, 60.0), "start", ("run", 3, True), "stop"]
    assert result["load"] == {"seed": 7, "seconds": 60.0, "workers": 2}
    assert json.loads(capsys.readouterr().out.strip().splitlines()[-1]) == result
    events.clear()
    assert oneshot.main(["--quick"])["load"] is None and events == [("run", 1, True)]


@pytest.mark.slow
def test_oneshot_vs_baseline_over_seeds_ends_with_one_json_line(oneshot: ModuleType, tmp_path: Path,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    result = oneshot.main(["--config", str(_tiny(tmp_path)), "--out", str(tmp_path / "out"), "--seed", "5",
                           "--seeds", "2", "--quick"])
    out = capsys.readouterr().out.strip().splitlines()
    assert json.loads(out[-1]) == json.loads(json.dumps(result, default=float))  # the last line, one object
    assert "| seed | latency ratio | memory ratio |" in "\n".join(out) and "# seed 6" in "\n".join(out)
    assert result["seeds"] == [5, 6] and [r["seed"] for r in result["per_seed"]] == [5, 6]
    assert result["latency_targets"] == ["40%", "60%", "80%"]
    assert result["target_ratios"] == {"latency_ratio": pytest.approx(0.8), "memory_ratio": 0.51}
    for record in result["per_seed"]:
        assert [p["latency_target"] for p in record["sweep"]] == ["40%", "60%", "80%"]
        assert record["meets_targets"] == all(record["meets"].values())
        assert record["meets"] == oneshot.meets(record, result["target_ratios"])
        assert (tmp_path / "out" / f"seed_{record['seed']}" / "summary.json").is_file()
    for key in ("latency_ratio", "memory_ratio", "top1_drop_pp", "top3_drop_pp"):
        values = [r[key] for r in result["per_seed"]]
        assert result["median"][key] == pytest.approx(statistics.median(values))
        assert (result["spread"][key]["min"], result["spread"][key]["max"]) == (min(values), max(values))
    assert result["all_seeds_meet_targets"] == all(r["meets_targets"] for r in result["per_seed"])
    assert result["latency_falls_with_target"] == all(r["latency_falls_with_target"] for r in result["per_seed"])
    assert result["load"] is None and result["quick"] is True

    # the fixed-weight form: keyed by alpha
    alphas = oneshot.main(["--config", str(_tiny(tmp_path / "a")), "--out", str(tmp_path / "alphas"), "--quick",
                           "--alphas", "0", "5", "50"])
    assert alphas["alphas"] == [0.0, 1.0, 5.0, 50.0] and "latency_falls_with_alpha" in alphas  # with its own 1.0
    assert [p["alpha"] for p in alphas["per_seed"][0]["sweep"]] == [0.0, 1.0, 5.0, 50.0]
    assert alphas["target_ratios"] == oneshot.SEED_TARGETS


def test_the_sweep_needs_three_points(oneshot: ModuleType, tmp_path: Path) -> None:
    with pytest.raises(SystemExit, match="at least 3 points"):
        oneshot.main(["--config", str(_tiny(tmp_path, targets=["40%"])), "--out", str(tmp_path / "o"), "--quick"])


@pytest.fixture(scope="module")
def proxyless() -> ModuleType:
    return _benchmark("proxyless_comparison")


def test_proxyless_comparison_runs_under_the_harness_when_asked(proxyless: ModuleType, monkeypatch: pytest.MonkeyPatch,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    from nni_hwaware.profiling import load

    events: list[Any] = []

    class FakeLoad:
        def __init__(self, seed: int, seconds: float) -> None:
            events.append(("load", seed, seconds))
            self.pids = [1]

        def __enter__(self) -> FakeLoad:
            return self

        def __exit__(self, *exc: object) -> None:
            events.append("stop")

    monkeypatch.setattr(load, "BackgroundLoad", FakeLoad)
    monkeypatch.setattr(proxyless, "run", lambda args: events.append(("run", args.seeds, args.epochs)) or {})
    result = proxyless.main(["--seeds", "2", "--seed", "3", "--load", "--quick"])
    assert events == [("load", 3, 4 * 3600.0), ("run", 2, 1), "stop"]
    assert result["load"] == {"seed": 3, "seconds": 4 * 3600.0, "workers": 1}
    assert json.loads(capsys.readouterr().out.strip().splitlines()[-1]) == result


def test_proxyless_comparison_over_seeds_ends_with_one_json_line(proxyless: ModuleType, tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    """Ours and NNI's Proxyless, DARTS and GumbelDARTS on the two-layer space; a peer that fails is one line."""
    real = proxyless._nni_strategy

    def flaky(name: str, penalty: Any, arc_lr: float) -> Any:
        if name == "nni_darts":
            raise RuntimeError("this peer does not run here")
        return real(name, penalty, arc_lr)

    monkeypatch.setattr(proxyless, "_nni_strategy", flaky)
    _tiny(tmp_path)
    result = proxyless.main(["--space", str(tmp_path / "tiny_space.json"), "--table", str(tmp_path / "tiny_table.csv"),
                             "--out", str(tmp_path / "out"), "--seeds", "2", "--seed", "4", "--quick",
                             "--threads", "1"])
    out = capsys.readouterr().out.strip().splitlines()
    assert json.loads(out[-1]) == json.loads(json.dumps(result, default=float))
    assert result["seeds"] == [4, 5] and result["strategies"] == ["ours", "nni_proxyless", "nni_darts",
                                                                   "nni_gumbel_darts"]
    assert result["ran"] == ["ours", "nni_proxyless", "nni_gumbel_darts"]
    for record in result["per_seed"]:
        assert record["strategies"]["nni_darts"] == {"error": "RuntimeError: this peer does not run here"}
        assert set(record["ours_vs"]) == {"nni_proxyless", "nni_gumbel_darts"}
        ours = record["strategies"]["ours"]
        assert ours["within_target"]  # our export fits the target by the table, in every seed
        assert ours["predicted_latency_ratio"] <= 0.6 + 1e-9
        assert ours["meets"] == proxyless.meets(ours, 0.6) and ours["meets_targets"] == all(ours["meets"].values())
        for peer in ("nni_proxyless", "nni_gumbel_darts"):  # exported unchecked: expected is the table's
            assert record["strategies"][peer]["expected_latency_ratio"] == record["strategies"][peer][
                "predicted_latency_ratio"]
        low, high = ours["latency_ratio_ci95"]
        assert low <= ours["latency_ratio"] <= high
    for name in result["ran"]:
        values = [r["strategies"][name]["latency_ratio"] for r in result["per_seed"]]
        assert result["summary"][name]["latency_ratio"]["median"] == pytest.approx(statistics.median(values))
        assert result["summary"][name]["latency_ratio"]["n"] == 2
    assert result["summary"]["nni_darts"]["latency_ratio"]["n"] == 0
    assert result["all_seeds_meet_targets"] == all(r["strategies"]["ours"]["meets_targets"]
                                                   for r in result["per_seed"])
    assert result["meets_targets"]["nni_darts"] is False
    assert "| 4 | nni_darts | failed: RuntimeError: this peer does not run here |" in "\n".join(out)
