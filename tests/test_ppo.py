"""PPO search: budget masking, determinism, duplicates, failures, resume, NNI adapters."""

from __future__ import annotations

import itertools
import json
import math

import nni
import pytest
import torch
from handmade import tiny_config, tiny_table

from nni_hwaware.cost_table import CostModel
from nni_hwaware.errors import HwAwareError
from nni_hwaware.spaces import SpaceConfig, StageConfig
from nni_hwaware.strategies.budget import Budget, BudgetMask
from nni_hwaware.strategies.ppo import PPOConfig, PPOSearch
from nni_hwaware.strategies.ppo.tuner import PPOClassArgsValidator, PPOTuner, resolve_budget

# Latency of every architecture of the hand-made table (fixed parts 0.75 ms):
#   layer1_0: skip 0.1, basic 2.0, bottleneck 1.0;  layer2_0: skip 0.2, basic 4.0, bottleneck 1.0
LAT1 = {"skip": 0.1, "basic": 2.0, "bottleneck": 1.0}
LAT2 = {"skip": 0.2, "basic": 4.0, "bottleneck": 1.0}


def latency(arch: dict[str, str]) -> float:
    return 0.75 + LAT1[arch["layer1_0"]] + LAT2[arch["layer2_0"]]


@pytest.fixture
def model() -> CostModel:
    return CostModel(tiny_table(), tiny_config())


def feasible(limit: float) -> set[tuple[str, str]]:
    return {(a, b) for a, b in itertools.product(LAT1, LAT2) if 0.75 + LAT1[a] + LAT2[b] <= limit}


@pytest.mark.parametrize("limit", [1.05, 2.0, 2.75, 3.0, 5.0, 100.0])
def test_mask_is_exact_for_a_latency_budget(model: CostModel, limit: float) -> None:
    mask = BudgetMask(model, Budget(latency_ms=limit))
    names1, names2 = model.candidates
    reachable = set()
    for i in range(3):
        if mask.allowed([])[i]:
            for j in range(3):
                if mask.allowed([i])[j]:
                    reachable.add((names1[i], names2[j]))
    assert reachable == feasible(limit)


def test_search_proposes_every_feasible_architecture_once_and_never_over_budget(model: CostModel) -> None:
    search = PPOSearch(model, Budget(latency_ms=3.0), PPOConfig(seed=3, update_every=2))
    seen = []
    while (arch := search.ask()) is not None:
        assert latency(arch) <= 3.0
        seen.append((arch["layer1_0"], arch["layer2_0"]))
        search.tell(arch, {"default": 0.5})
    assert sorted(seen) == sorted(feasible(3.0)) and len(seen) == len(set(seen))


def test_memory_budget_mask_uses_weights_plus_largest_activation(model: CostModel) -> None:
    # memory = 0.03 (fixed weights) + weights + max(0.2 stem activation, blocks' activations):
    # skip/skip 0.231, skip/bottleneck 0.33, bottleneck/skip 0.581 fit; bottleneck/bottleneck 0.68,
    # basic/skip 0.731 and the rest do not.
    search = PPOSearch(model, Budget(memory_mb=0.6), PPOConfig(seed=0))
    seen = []
    while (arch := search.ask()) is not None:
        assert model.predict(arch).memory_mb <= 0.6 + 1e-12
        seen.append(arch)
        search.tell(arch, {"default": 1.0})
    all_archs = [dict(zip(("layer1_0", "layer2_0"), p, strict=True)) for p in itertools.product(LAT1, LAT2)]
    assert len(seen) == sum(model.predict(a).memory_mb <= 0.6 for a in all_archs) == 3


def test_budget_below_the_cheapest_names_the_cheapest(model: CostModel) -> None:
    with pytest.raises(HwAwareError, match=r"cheapest achievable is latency_ms 1.05 > budget 1"):
        PPOSearch(model, Budget(latency_ms=1.0))


def test_same_seed_same_decisions_and_global_rng_untouched(model: CostModel) -> None:
    def run(seed: int) -> list[dict[str, str]]:
        search = PPOSearch(model, Budget(latency_ms=100.0), PPOConfig(seed=seed, update_every=2))
        out = []
        for _ in range(6):
            arch = search.ask()
            out.append(arch)
            search.tell(arch, {"default": 0.9 if arch["layer1_0"] == "basic" else 0.1})
        return out

    state = torch.random.get_rng_state()
    assert run(7) == run(7)
    assert torch.equal(state, torch.random.get_rng_state())
    assert any(run(7) != run(s) for s in (8, 9, 10))


def test_policy_learns_the_rewarding_block() -> None:
    # 3 layers x 3 choices, reward = number of layers using 'bottleneck'
    config = SpaceConfig(name="t3", in_channels=1, image_size=8, num_classes=10, stem_channels=8,
                         stages=(StageConfig(8, 3, 1),), candidates=("skip", "basic", "bottleneck"))
    from nni_hwaware.cost_table import profile_entries
    table = tiny_table()
    frame = table.frame
    row = frame.iloc[0].to_dict()
    records = [{**row, "block": e.key.block, "kind": e.kind, "input_shape": e.key.shape_str,
                "out_channels": e.key.out_channels, "stride": e.key.stride} for e in profile_entries(config)]
    from nni_hwaware.cost_table import CostTable
    model = CostModel(CostTable.from_records(records), config)
    search = PPOSearch(model, None, PPOConfig(seed=0, update_every=4))
    for _ in range(24):
        arch = search.ask()
        if arch is None:
            break
        search.tell(arch, {"default": sum(b == "bottleneck" for b in arch.values()) / 3})
    state = torch.from_numpy(search._state([]))[None]
    dist, _ = search.policy(state, torch.ones(1, 3, dtype=torch.bool))
    assert int(dist.probs.argmax()) == 2
    assert search.best() == ({"layer1_0": "bottleneck", "layer1_1": "bottleneck", "layer1_2": "bottleneck"}, 1.0)


def test_failures_and_nan_get_the_failure_reward(model: CostModel) -> None:
    search = PPOSearch(model, None, PPOConfig(seed=0, failure_reward=-1.0))
    a, b = search.ask(), search.ask()
    assert search.tell(a, None) == -1.0
    assert search.tell(b, {"default": math.nan}) == -1.0


def test_state_round_trip_continues_identically(model: CostModel) -> None:
    config = PPOConfig(seed=5, update_every=2)
    first = PPOSearch(model, None, config)
    for _ in range(3):
        arch = first.ask()
        first.tell(arch, {"default": 0.3})
    state = first.state_dict()
    second = PPOSearch(model, None, config)
    second.load_state_dict(state)
    assert [first.ask() for _ in range(3)] == [second.ask() for _ in range(3)]
    assert set(second.history.rewards) == set(first.history.rewards)


@pytest.mark.parametrize(
    ("reward", "metrics", "expected"),
    [("accuracy", {"default": 0.8}, 0.8), ("neg_flops", {"default": 0.8, "flops": 2e6}, -2.0),
     ("mnas", {"default": 0.8, "latency_ms": 2.0}, 0.8 * (2.0 / 1.0) ** -0.07)],
)
def test_rewards(model: CostModel, reward: str, metrics: dict, expected: float) -> None:
    search = PPOSearch(model, Budget(latency_ms=100.0), PPOConfig(reward=reward, mnas_target_ms=1.0))
    arch = search.ask()
    assert search.tell(arch, metrics) == pytest.approx(expected)


def _tuner(tmp_path, **kwargs) -> PPOTuner:
    table = tmp_path / "t.csv"
    tiny_table().save(table)
    space = tmp_path / "space.json"
    space.write_text(tiny_config().to_json())
    tuner = PPOTuner(str(space), str(table), **kwargs)
    tuner.update_search_space({"layer1_0": {"_type": "choice", "_value": ["skip", "basic", "bottleneck"]},
                               "layer2_0": {"_type": "choice", "_value": ["skip", "bottleneck"]}})
    return tuner


def test_tuner_restricts_to_the_search_space_and_trusts_the_echoed_arch(tmp_path) -> None:
    tuner = _tuner(tmp_path, budget={"latency_ms": "100%"}, ppo={"seed": 1})
    # baseline (bottleneck, bottleneck) predicts 2.75 ms
    assert tuner.search.budget.latency_ms == pytest.approx(2.75)
    generated = [tuner.generate_parameters(i) for i in range(4)]
    assert all(p["_table"] == str(tmp_path / "t.csv") for p in generated)
    params = [{k: v for k, v in p.items() if not k.startswith("_")} for p in generated]
    assert all(p["layer2_0"] != "basic" and latency(p) <= 2.75 for p in params)
    # NNI paired trial 0's parameters with trial 1's metric: the echoed arch wins.
    tuner.receive_trial_result(0, params[0], {"default": 0.7, "arch": json.dumps(params[1])})
    key = tuner.search.actions_of(params[1])
    assert tuner.search.history.rewards[key] == 0.7
    tuner.receive_trial_result(2, params[2], {"latency_ms": 1.0})  # no default: failed
    assert tuner.search.history.rewards[tuner.search.actions_of(params[2])] == 0.0
    tuner.trial_end(3, False)  # NNI's end ids can be another trial's (nni#5726): not settled yet
    assert tuner.search.actions_of(params[3]) in tuner.search.pending
    for i, success in ((0, True), (1, False), (2, True)):
        tuner.trial_end(i, success)
    assert tuner.search.history.rewards[tuner.search.actions_of(params[3])] == 0.0  # all ended: certain
    assert tuner.search.history.rewards[key] == 0.7  # its result came under id 0


def test_tuner_raises_no_more_trial_when_exhausted(tmp_path) -> None:
    tuner = _tuner(tmp_path, budget={"latency_ms": 1.05})
    arch = tuner.generate_parameters(0)
    tuner.receive_trial_result(0, arch, {"default": 0.5})
    with pytest.raises(nni.NoMoreTrialError):
        tuner.generate_parameters(1)


def test_tuner_resumes_from_its_state_file(tmp_path) -> None:
    state = tmp_path / "ppo_state.pt"
    tuner = _tuner(tmp_path, ppo={"seed": 2}, state_file=str(state))
    done = []
    for i in range(3):
        arch = tuner.generate_parameters(i)
        tuner.receive_trial_result(i, arch, {"default": 0.1 * i})
        done.append(arch)
    resumed = _tuner(tmp_path, ppo={"seed": 2}, state_file=str(state))
    assert len(resumed.search.history.order) == 3
    new = [resumed.generate_parameters(10 + i) for i in range(3)]
    assert not any(a in done for a in new) and len(new) == 3


def test_tuner_import_data_counts_earlier_trials(tmp_path) -> None:
    tuner = _tuner(tmp_path)
    tuner.import_data([{"parameter": {"layer1_0": "skip", "layer2_0": "skip"}, "value": {"default": 0.4}},
                       {"parameter": {"layer1_0": "basic", "layer2_0": "skip"}, "value": 0.6}])
    assert sorted(tuner.search.history.rewards.values()) == [0.4, 0.6]


@pytest.mark.parametrize(
    ("space", "message"),
    [({"layer1_0": {"_type": "uniform", "_value": [0, 1]}}, "only 'choice'"),
     ({"conv9": {"_type": "choice", "_value": ["skip"]}}, "not a label"),
     ({"layer1_0": {"_type": "choice", "_value": ["skip"]}}, "lacks labels")],
)
def test_tuner_rejects_bad_search_spaces(tmp_path, space: dict, message: str) -> None:
    table = tmp_path / "t.csv"
    tiny_table().save(table)
    path = tmp_path / "space.json"
    path.write_text(tiny_config().to_json())
    with pytest.raises(HwAwareError, match=message):
        PPOTuner(str(path), str(table)).update_search_space(space)


def test_class_args_validator_uses_the_signature(tmp_path) -> None:
    validator = PPOClassArgsValidator()
    validator.validate_class_args(space="digits", budget={"latency_ms": "50%"}, ppo={"seed": 1})
    with pytest.raises(ValueError, match="unknown PPOTuner classArgs \\['budjet'\\]"):
        validator.validate_class_args(space="digits", budjet={})
    with pytest.raises(HwAwareError, match="unknown PPO options \\['sed'\\]"):
        validator.validate_class_args(space="digits", ppo={"sed": 1})


def test_resolve_budget_rejects_garbage(model: CostModel) -> None:
    baseline = model.predict(tiny_config().baseline()).metrics()
    assert resolve_budget({"latency_ms": "50%", "flops": 10}, baseline) == Budget(latency_ms=1.375, flops=10)
    with pytest.raises(HwAwareError, match="not a percentage"):
        resolve_budget({"latency_ms": "fast%"}, baseline)
    with pytest.raises(HwAwareError, match="unknown budget key"):
        resolve_budget({"energy": 1}, baseline)


def test_tuner_resume_keeps_in_flight_architectures_and_the_retraining_flag(tmp_path) -> None:
    state = tmp_path / "ppo_state.pt"
    tuner = _tuner(tmp_path, ppo={"seed": 3}, state_file=str(state), search_trials=4, retrain={"epochs": 1})
    sent = [tuner.generate_parameters(i) for i in range(3)]
    arch = lambda p: {k: v for k, v in p.items() if not k.startswith("_")}  # noqa: E731
    tuner.receive_trial_result(0, sent[0], {"default": 0.5, "arch": json.dumps(arch(sent[0]))})
    # killed here: sent[1] and sent[2] were running; NNI reruns them after the resume
    resumed = _tuner(tmp_path, ppo={"seed": 3}, state_file=str(state), search_trials=4, retrain={"epochs": 1})
    search = resumed.search
    assert list(search.history.rewards.values()) == [0.5]
    assert {search.actions_of(arch(p)) for p in sent[1:]} == set(search.pending)
    fourth = resumed.generate_parameters(0)  # parameter ids restart at 0 after a resume
    assert arch(fourth) not in [arch(p) for p in sent]
    final = resumed.generate_parameters(1)
    assert final["_retrain"] and final["_expected"] == 2  # the reruns are not waited for
    # the rerun of sent[1] comes back through import_data (NNI's path for resumed trials)
    resumed.import_data([{"parameter": sent[1], "value": {"default": 0.7, "arch": json.dumps(arch(sent[1]))}}])
    assert search.history.rewards[search.actions_of(arch(sent[1]))] == 0.7
    again = _tuner(tmp_path, ppo={"seed": 3}, state_file=str(state), search_trials=4, retrain={"epochs": 1})
    assert again._retrain_sent and len(again._results) == 2


def test_tuner_records_failed_trials_for_the_report(tmp_path, monkeypatch) -> None:
    root = tmp_path / "experiments"
    monkeypatch.setenv("NNI_LOG_DIRECTORY", str(root / "EXP1" / "log"))
    tuner = _tuner(tmp_path, ppo={"seed": 0}, search_trials=3, retrain={"epochs": 1})
    assert tuner.state_file == str(root / "EXP1" / "hwaware" / "ppo_state.pt")
    params = [tuner.generate_parameters(i) for i in range(3)]
    tuner.trial_end(0, False)  # crashed or killed: no result
    tuner.receive_trial_result(1, params[1], {"default": float("nan")})
    tuner.trial_end(1, False)
    tuner.receive_trial_result(2, params[2], {"default": 0.9})
    tuner.trial_end(2, True)
    trials = json.loads((root / "EXP1" / "hwaware" / "trials.json").read_text())
    assert [t.get("status") for t in trials] == ["failed", None, "failed"]  # trial 0 settled last
    assert [trials[0]["reward"], trials[2]["reward"]] == [0.0, 0.0]
    stats = json.loads((root / "EXP1" / "hwaware" / "tuner_stats.json").read_text())
    assert stats["results"] == 3 and stats["failed"] == 2 and stats["decisions"] == 3
    final = tuner.generate_parameters(3)
    assert final["_retrain"] and final["_expected"] == 3  # the retraining trial waits for no one


@pytest.mark.parametrize("state_file", ["../elsewhere/state.pt", "/tmp/state.pt"])
def test_tuner_writes_only_inside_the_experiment_directory(tmp_path, monkeypatch, state_file: str) -> None:
    monkeypatch.setenv("NNI_LOG_DIRECTORY", str(tmp_path / "experiments" / "EXP1" / "log"))
    with pytest.raises(HwAwareError, match="outside the experiment working directory"):
        PPOTuner("digits_tiny", "table.csv", state_file=state_file)
    with pytest.raises(HwAwareError, match=r"cost table .* is outside the experiment working directory"):
        PPOTuner("digits_tiny", "../../table.csv")  # missing: the tuner would profile and write it


def test_tuner_import_data_skips_foreign_and_retraining_records(tmp_path) -> None:
    tuner = _tuner(tmp_path)
    tuner.import_data([{"parameter": {"_retrain": True}, "value": {"default": 0.9}},
                       {"parameter": {"layer1_0": "conv9", "layer2_0": "skip"}, "value": 0.3},
                       {"value": 0.3},
                       {"parameter": {"layer1_0": "skip", "layer2_0": "skip"}, "value": {"default": 0.4}}])
    assert list(tuner.search.history.rewards.values()) == [0.4]
    assert tuner._retrain_sent
