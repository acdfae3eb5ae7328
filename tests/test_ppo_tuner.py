"""The PPO search's NNI Tuner: search space, echoed architectures, failures, resume, retraining, paths."""

from __future__ import annotations

import json

import nni
import pytest
from handmade import tiny_config, tiny_table, tiny_tuner

from nni_hwaware.errors import HwAwareError
from nni_hwaware.strategies.budget import Budget
from nni_hwaware.strategies.job import BudgetSpec
from nni_hwaware.strategies.ppo.tuner import PPOClassArgsValidator, PPOTuner
from nni_hwaware.trial.parameters import KEY, TrialParameters

LAT1 = {"skip": 0.1, "basic": 2.0, "bottleneck": 1.0}
LAT2 = {"skip": 0.2, "basic": 4.0, "bottleneck": 1.0}


def latency(arch: dict[str, str]) -> float:
    return 0.75 + LAT1[arch["layer1_0"]] + LAT2[arch["layer2_0"]]


@pytest.fixture(autouse=True)
def _in_tmp(tmp_path, monkeypatch) -> None:
    """Outside NNI the tuner writes to ./hwaware-outputs: keep it out of the checkout."""
    monkeypatch.chdir(tmp_path)


def arch(params: dict) -> dict:
    return {k: v for k, v in params.items() if not k.startswith("_")}


def _tuner(tmp_path, **kwargs) -> PPOTuner:
    return tiny_tuner(tmp_path, **kwargs)


def test_tuner_restricts_to_the_search_space_and_trusts_the_echoed_arch(tmp_path) -> None:
    tuner = _tuner(tmp_path, budget={"latency_ms": "100%"}, ppo={"seed": 1})
    # baseline (bottleneck, bottleneck) predicts 2.75 ms
    assert tuner.search.budget.latency_ms == pytest.approx(2.75)
    generated = [tuner.generate_parameters(i) for i in range(4)]
    params = [arch(p) for p in generated]
    assert all(p["layer2_0"] != "basic" and latency(p) <= 2.75 for p in params)
    # self-contained: the trial gets the space, its training options and the predicted costs
    sent = [TrialParameters.from_dict(p) for p in generated]
    assert all(t.costs["latency_ms"] == pytest.approx(latency(a)) for t, a in zip(sent, params, strict=True))
    assert all(t.space == str(tmp_path / "space.json") and t.train.epochs == 10 and t.retrain is None for t in sent)
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


def test_class_args_validator_checks_the_search_job(tmp_path) -> None:
    validator = PPOClassArgsValidator()
    validator.validate_class_args(space="digits", budget={"latency_ms": "50%"}, ppo={"seed": 1})
    with pytest.raises(ValueError, match="unknown PPOTuner classArgs keys \\['budjet'\\]"):
        validator.validate_class_args(space="digits", budjet={})
    with pytest.raises(ValueError, match="unknown PPO options \\['sed'\\]"):
        validator.validate_class_args(space="digits", ppo={"sed": 1})


def test_budget_spec_takes_numbers_and_percentages_of_the_reference() -> None:
    reference = {"latency_ms": 2.75, "memory_mb": 4.0, "flops": 100.0}
    spec = BudgetSpec(latency_ms="50%", flops=10)
    assert spec.resolve(reference) == Budget(latency_ms=1.375, flops=10)
    with pytest.raises(HwAwareError, match="percentage of the baseline like '50%'"):
        BudgetSpec(latency_ms="fast%")
    with pytest.raises(HwAwareError, match="must be a positive number"):
        BudgetSpec(memory_mb=-1)


def test_tuner_resume_keeps_in_flight_architectures_and_the_retraining_flag(tmp_path) -> None:
    state = tmp_path / "ppo_state.pt"
    tuner = _tuner(tmp_path, ppo={"seed": 3}, state_file=str(state), search_trials=4, retrain={"epochs": 1})
    sent = [tuner.generate_parameters(i) for i in range(3)]
    tuner.receive_trial_result(0, sent[0], {"default": 0.5, "arch": json.dumps(arch(sent[0]))})
    # killed here: sent[1] and sent[2] were running; NNI reruns them after the resume
    resumed = _tuner(tmp_path, ppo={"seed": 3}, state_file=str(state), search_trials=4, retrain={"epochs": 1})
    search = resumed.search
    assert list(search.history.rewards.values()) == [0.5]
    assert {search.actions_of(arch(p)) for p in sent[1:]} == set(search.pending)
    fourth = resumed.generate_parameters(0)  # parameter ids restart at 0 after a resume
    assert arch(fourth) not in [arch(p) for p in sent]
    with pytest.raises(nni.NoMoreTrialError, match="waits for the last search results"):
        resumed.generate_parameters(1)  # the fourth is running
    resumed.receive_trial_result(0, fourth, {"default": 0.6, "arch": json.dumps(arch(fourth))})
    final = TrialParameters.from_dict(resumed.generate_parameters(1))
    assert final.retrain is not None  # the reruns of the resume are not waited for
    assert sorted(r["default"] for r in final.retrain.history) == [0.5, 0.6]
    # the rerun of sent[1] comes back through import_data (NNI's path for resumed trials)
    resumed.import_data([{"parameter": sent[1], "value": {"default": 0.7, "arch": json.dumps(arch(sent[1]))}}])
    assert search.history.rewards[search.actions_of(arch(sent[1]))] == 0.7
    again = _tuner(tmp_path, ppo={"seed": 3}, state_file=str(state), search_trials=4, retrain={"epochs": 1})
    assert again.records.retrain_sent and len(again.records.results) == 3


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
    final = TrialParameters.from_dict(tuner.generate_parameters(3))
    assert final.retrain is not None and len(final.retrain.history) == 3  # it waits for no one
    assert [r.get("status") for r in final.retrain.history] == ["failed", None, "failed"]


@pytest.mark.parametrize("state_file", ["../elsewhere/state.pt", "/tmp/state.pt"])
def test_tuner_writes_only_inside_the_experiment_directory(tmp_path, monkeypatch, state_file: str) -> None:
    monkeypatch.setenv("NNI_LOG_DIRECTORY", str(tmp_path / "experiments" / "EXP1" / "log"))
    with pytest.raises(HwAwareError, match="outside the experiment working directory"):
        PPOTuner("digits_tiny", "table.csv", state_file=state_file)
    with pytest.raises(HwAwareError, match=r"cost table .* is outside the experiment working directory"):
        PPOTuner("digits_tiny", "../../table.csv")  # missing: the tuner would profile and write it


def test_tuner_import_data_skips_foreign_and_retraining_records(tmp_path) -> None:
    tuner = _tuner(tmp_path)
    tuner.import_data([{"parameter": {KEY: {"space": "x", "retrain": {}}}, "value": {"default": 0.9}},
                       {"parameter": {"layer1_0": "conv9", "layer2_0": "skip"}, "value": 0.3},
                       {"value": 0.3},
                       {"parameter": {"layer1_0": "skip", "layer2_0": "skip"}, "value": {"default": 0.4}}])
    assert list(tuner.search.history.rewards.values()) == [0.4]
    assert tuner.records.retrain_sent


class _Dispatcher:
    """Stands in for NNI's dispatcher: the trial callback it hands the tuner, and its error command."""

    def __init__(self) -> None:
        self.trials: list[tuple[int, dict]] = []
        self.errors: list[str] = []

    def send_trial(self, parameter_id: int, params: dict) -> None:
        self.trials.append((parameter_id, params))

    def report_error(self, message: str) -> None:
        self.errors.append(message)


def test_the_retraining_trial_is_sent_once_every_search_result_is_in(tmp_path) -> None:
    dispatcher = _Dispatcher()
    tuner = _tuner(tmp_path, ppo={"seed": 4}, search_trials=3, retrain={"epochs": 1})
    first = tuner.generate_multiple_parameters([1, 2, 3], st_callback=dispatcher.send_trial)
    assert len(first) == 3
    tuner.receive_trial_result(1, first[0], {"default": 0.5, "arch": json.dumps(arch(first[0]))})
    # a slot is free, but two search trials still run: NNI is told "no more" for now
    assert tuner.generate_multiple_parameters([4], st_callback=dispatcher.send_trial) == []
    tuner.receive_trial_result(2, first[1], {"default": 0.9, "arch": json.dumps(arch(first[1]))})
    assert dispatcher.trials == []
    tuner.receive_trial_result(3, first[2], {"default": 0.7, "arch": json.dumps(arch(first[2]))})
    [(parameter_id, params)] = dispatcher.trials  # sent by the tuner itself, under the id NNI asked with
    retrain = TrialParameters.from_dict(params)
    assert parameter_id == 4 and retrain.retrain is not None and retrain.train.epochs == 1
    assert [r["default"] for r in retrain.retrain.history] == [0.5, 0.9, 0.7]
    assert retrain.retrain.baseline == {"layer1_0": "bottleneck", "layer2_0": "bottleneck"}
    assert retrain.retrain.baseline_costs["latency_ms"] == pytest.approx(2.75)
    assert tuner.generate_multiple_parameters([5], st_callback=dispatcher.send_trial) == []  # sent once


def test_a_search_whose_trials_all_fail_stops_with_an_error(tmp_path) -> None:
    dispatcher = _Dispatcher()
    tuner = _tuner(tmp_path, ppo={"seed": 5}, search_trials=8)
    params = tuner.generate_multiple_parameters(list(range(5)), st_callback=dispatcher.send_trial)
    for i, p in enumerate(params[:4]):
        tuner.receive_trial_result(i, p, {"default": float("nan")})
    assert dispatcher.errors == []
    with pytest.raises(HwAwareError, match="the first 5 search trials all failed"):
        tuner.receive_trial_result(4, params[4], {"default": float("nan")})
    assert dispatcher.errors == ["nni-hwaware: the first 5 search trials all failed; see their trial.stderr"]


def test_a_search_whose_trials_all_fail_gives_one_reason_whichever_call_settles_it(tmp_path) -> None:
    """NNI handles results and trial ends on two threads: the retraining trial's request can come after the
    fifth failure is in but before its result's call has stopped the experiment; it gives the same line."""
    dispatcher = _Dispatcher()
    tuner = _tuner(tmp_path, ppo={"seed": 5}, search_trials=5, retrain={"epochs": 1})
    params = tuner.generate_multiple_parameters(list(range(5)), st_callback=dispatcher.send_trial)
    for i, p in enumerate(params):
        try:
            tuner.receive_trial_result(i, p, {"default": float("nan")})
        except HwAwareError:
            assert i == 4
    with pytest.raises(HwAwareError, match=r"^the first 5 search trials all failed; see their trial\.stderr$"):
        tuner._session().retrain_parameters()


def test_the_tuner_writes_the_report_from_the_retraining_trials_answer(tmp_path, monkeypatch) -> None:
    from nni_hwaware.training import ModelResult
    from nni_hwaware.trial.run import retrain_metrics

    root = tmp_path / "experiments"
    monkeypatch.setenv("NNI_LOG_DIRECTORY", str(root / "EXP1" / "log"))
    tuner = _tuner(tmp_path, ppo={"seed": 6}, search_trials=1, retrain={"epochs": 1})
    first = tuner.generate_parameters(0)
    tuner.receive_trial_result(0, first, {"default": 0.8, "latency_ms": 1.2, "arch": json.dumps(arch(first))})
    final = tuner.generate_parameters(1)

    def result(name: str, arch_: dict, ms: float, mb: float) -> ModelResult:
        return ModelResult(name=name, space="tiny", arch=arch_, test_top1=0.9, test_top3=0.99, val_top1=0.9,
                           val_top3=0.99, latency_ms=ms, memory_mb=mb, params=10, flops=100,
                           predicted_latency_ms=ms, predicted_memory_mb=mb)

    baseline = result("baseline", {"layer1_0": "bottleneck", "layer2_0": "bottleneck"}, 2.0, 4.0)
    found = result("found", arch(first), 1.0, 2.0)
    found = ModelResult.from_dict({**found.to_dict(), "extra": {"vs_baseline": {
        "latency_ratio": 0.5, "latency_ratio_ci95": [0.48, 0.52], "spread": 0.01, "memory_ratio": 0.5,
        "predicted_latency_ratio": 0.5, "rounds": 10, "warnings": []}}})
    tuner.receive_trial_result(1, final, retrain_metrics(baseline, found))
    report = root / "EXP1" / "hwaware" / "report"
    markdown = (report / "comparison.md").read_text()
    assert "latency ratio, measured interleaved: 0.500 (95 % interval 0.480 to 0.520, 10 rounds" in markdown
    saved = json.loads((report / "results.json").read_text())
    assert saved["best"]["arch"] == arch(first) and len(saved["trials"]) == 1


def test_the_search_takes_its_prior_margin_from_the_tables_fidelity_figures(tmp_path, caplog) -> None:
    from nni_hwaware.strategies.fidelity import FIDELITY_SUFFIX

    assert _tuner(tmp_path).search.correction.prior_margin == 1.0  # no figures: the default
    # what `nni-hwaware validate t.csv` saves beside the table: 9 in 10 networks within 1.12x (latency)
    (tmp_path / f"t.csv{FIDELITY_SUFFIX}").write_text(json.dumps(
        {"n_archs": 20, "latency": {"ratio_q90_vs_reference": 1.12}, "memory": {"ratio_q90": 1.03}}))
    assert _tuner(tmp_path).search.correction.prior_margin == pytest.approx(1.12)
    # the user's own prior margin wins; a search that trusts the table has none
    assert _tuner(tmp_path, ppo={"prior_margin": 1.3}).search.correction.prior_margin == pytest.approx(1.3)
    assert _tuner(tmp_path, ppo={"correct": False}).search.correction is None
    # a file that is not one: a warning, and the default
    (tmp_path / f"t.csv{FIDELITY_SUFFIX}").write_text("[1, 2]")
    assert _tuner(tmp_path).search.correction.prior_margin == 1.0
    assert "is not a fidelity file" in caplog.text


def test_trials_are_sent_the_budget_to_measure_against_before_training(tmp_path) -> None:
    """A network measured over the budget is a failure to the search: its trial is sent the budget (on the
    table's scale, with the table's latency of the reference) so it can stop before training;
    ``train_over_budget`` trains every network."""
    tuner = _tuner(tmp_path, budget={"latency_ms": "80%", "memory_mb": "90%"}, ppo={"seed": 1})
    sent = TrialParameters.from_dict(tuner.generate_parameters(0))
    limits = tuner.search.budget.limits()
    assert sent.budget == {"latency_ms": pytest.approx(0.8 * 2.75), "memory_mb": pytest.approx(limits["memory_mb"])}
    assert sent.reference_table_latency_ms == pytest.approx(2.75)  # the baseline (bottleneck, bottleneck)
    assert sent.reference and sent.reference == dict(tuner.session.reference)
    everything = _tuner(tmp_path / "all", budget={"latency_ms": "80%"}, ppo={"seed": 1}, train_over_budget=True)
    assert TrialParameters.from_dict(everything.generate_parameters(0)).budget == {}
    with pytest.raises(HwAwareError, match="train_over_budget must be true or false"):
        _tuner(tmp_path / "bad", train_over_budget="no")


def test_a_saved_state_reads_back_exactly_and_an_older_file_still_reads(tmp_path) -> None:
    """Tensors, tuples, integer keys, NaN and the random state come back as they were saved, whichever part
    of the file holds them; a state written whole by ``torch.save`` (before the plain part) reads too."""
    import math

    import torch

    from nni_hwaware.strategies.ppo.records import load_state, save_state

    state = {"policy": {"w": torch.arange(6.0).reshape(2, 3)}, "optimizer": {"state": {0: {"step": torch.tensor(3.0)}},
                                                                               "param_groups": [{"lr": 0.01, "params": [0]}]},
             "generator": torch.Generator().manual_seed(4).get_state(),
             "history": [[[0, 2, 1], 0.5], [[1, 1, 1], float("nan")]], "pending": [(0, 1)],
             "counts": {3: 1.5}, "config": {"seed": 1, "proxy": None, "risk_floor": True}}
    path = tmp_path / "s.pt"
    save_state(str(path), state)
    back = load_state(str(path))
    assert set(back) == set(state)
    assert torch.equal(back["policy"]["w"], state["policy"]["w"])
    assert torch.equal(back["optimizer"]["state"][0]["step"], torch.tensor(3.0))
    assert torch.equal(back["generator"], state["generator"])
    assert back["history"][0] == [[0, 2, 1], 0.5] and math.isnan(back["history"][1][1])
    assert back["pending"] == [(0, 1)] and back["counts"] == {3: 1.5} and back["config"] == state["config"]
    old = tmp_path / "old.pt"
    torch.save(dict(state), old)
    assert load_state(str(old))["history"][0] == [[0, 2, 1], 0.5]
