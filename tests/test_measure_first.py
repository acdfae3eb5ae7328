"""Measured first, trained only if it fits: two resources, measurements and trainings.

A network is measured on the chip (seconds) before it is trained (minutes to hours); one measured over
the budget costs a measurement, never a training. The core (PPOSearch), the NNI tuner's screening
trials and the trial itself judge a measurement the same way.
"""

from __future__ import annotations

import itertools
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from nni_hwaware.cost_model import CostFactor, SpaceCostModel
from nni_hwaware.measurement import Measurement, on_table_scale
from nni_hwaware.strategies.budget import Budget
from nni_hwaware.strategies.ppo import PPOConfig, PPOSearch
from nni_hwaware.trial.parameters import Measuring, TrialParameters

LABELS, VALUES = 3, 4
TABLE = np.array([[0.1, 0.4, 0.9, 1.6]] * LABELS) * np.array([1.0, 1.1, 1.25])[:, None]
KEYS = list(itertools.product(range(VALUES), repeat=LABELS))


def toy_model() -> SpaceCostModel:
    return SpaceCostModel({f"l{i}": [f"v{j}" for j in range(VALUES)] for i in range(LABELS)},
                          [CostFactor((f"l{i}",), {"latency_ms": TABLE[i]}) for i in range(LABELS)],
                          {"latency_ms": 0.5}, name="toy")


def predicted(key: tuple[int, ...]) -> float:
    return 0.5 + float(sum(TABLE[i, j] for i, j in enumerate(key)))


def accuracy(key: tuple[int, ...]) -> float:
    return 50.0 + 10.0 * predicted(key)  # accuracy grows with compute: the best networks sit at the budget's edge


LIMIT = sorted(predicted(k) for k in KEYS)[len(KEYS) // 2]
#: The table under-predicts the three most accurate networks it puts within the budget: they measure 1.5x over.
UNDER = set(sorted((k for k in KEYS if predicted(k) <= LIMIT), key=accuracy, reverse=True)[:3])
BEST = max((k for k in KEYS if predicted(k) * (1.5 if k in UNDER else 1.0) <= LIMIT), key=accuracy)


def chip(key: tuple[int, ...]) -> float:
    return predicted(key) * (1.5 if key in UNDER else 1.0)


def _search(seed: int, trainings: int, **options: Any) -> PPOSearch:
    """A search of ``trainings`` trainings on the toy; measured first unless ``measure_first`` is False
    (then every proposal is trained, and one over the budget is a wasted training)."""
    search = PPOSearch(toy_model(), Budget(latency_ms=LIMIT), PPOConfig(seed=seed, proxy="none", **options))
    while search.trainings < trainings:
        arch = search.ask()
        if arch is None:
            break
        key = search.actions_of(arch)
        if options.get("measure_first", True) and chip(key) > LIMIT:
            search.tell(arch, {"default": 0.0, "latency_ms": chip(key), "not_trained": "measured over the budget"})
        else:
            search.tell(arch, {"default": accuracy(key) if chip(key) <= LIMIT else 0.0, "latency_ms": chip(key)})
    return search


def test_measured_first_the_search_finds_the_best_network_the_table_puts_wrongly_in_reach() -> None:
    # 12 trainings: measured first, the three networks the table under-predicts cost a measurement each and
    # the trainings go to networks that fit; trained as proposed, they cost trainings and the search gives up
    # the budget's edge, where the best network that fits is (over 8 seeds: 6 of 8 against 1 of 8 here)
    first = [_search(seed, 12) for seed in range(8)]
    trained = [_search(seed, 12, measure_first=False) for seed in range(8)]
    found = [s.actions_of(s.best()[0]) == BEST for s in first]
    assert sum(found) >= 5, found
    assert sum(s.actions_of(s.best()[0]) == BEST for s in trained) <= 2
    for search in first:
        assert search.trainings == 12 and search.measured_over_budget() == 0  # nothing over the budget trained
        assert search.measurements <= 1.5 * search.trainings
        assert search.measurements == 12 + len(search.history.screened)


def test_a_measurement_alone_costs_no_training_and_one_over_the_budget_is_never_proposed_again() -> None:
    search = PPOSearch(toy_model(), Budget(latency_ms=LIMIT), PPOConfig(seed=0, proxy="none"))
    over, fits = search.ask(), search.ask()
    assert search.tell(over, {"latency_ms": 2 * LIMIT}) == search.config.failure_reward  # no default: measured only
    assert search.tell(fits, {"latency_ms": 0.5 * LIMIT, "not_trained": "screening"}) is None
    assert (search.measurements, search.trainings) == (2, 0)
    assert search.actions_of(over) in search.history.screened and search.actions_of(over) not in search.pending
    assert search.actions_of(fits) in search.cleared and search.actions_of(fits) in search.pending
    assert not search.history.order  # the accuracy surrogate knows nothing of either yet
    proposed = [search.ask() for _ in range(20)]
    assert over not in proposed and fits not in proposed
    # the training of the network measured to fit: a training, not a second measurement
    assert search.tell(fits, {"default": 70.0, "latency_ms": 0.5 * LIMIT}) == 70.0
    assert (search.measurements, search.trainings) == (2, 1) and not search.cleared
    assert search.best() == (fits, 70.0)


def _wide_model() -> SpaceCostModel:
    """8 labels of 6 values: 1.7 million networks, too many to list."""
    costs = np.array([0.0, 0.05, 0.1, 0.2, 0.3, 0.45])
    return SpaceCostModel({f"l{i}": [f"v{j}" for j in range(6)] for i in range(8)},
                          [CostFactor((f"l{i}",), {"latency_ms": costs * (1 + 0.1 * i)}) for i in range(8)],
                          {"latency_ms": 0.3}, name="wide")


def _proposals_after_disagreeing_measurements(seed: int) -> tuple[list[bool], str | None]:
    """Two networks of one corner of the space measured 1.6x and 0.55x their predictions: the lowest
    correction makes the mask's limit 3.6x the budget, while every other network's corrected bound stays
    near its prediction. Whether each of three proposals fits as the exact check judges it, and why the
    search gave up (None: it did not)."""
    search = PPOSearch(_wide_model(), Budget(latency_ms=1.0), PPOConfig(seed=seed, proxy="none", max_resample=192))
    for key, factor in [((5, 5, 0, 0, 0, 0, 0, 0), 1.6), ((4, 5, 0, 0, 0, 0, 0, 0), 0.55)]:
        latency = search.predicted(key)["latency_ms"] * factor
        search.tell(search.arch_of(key), {"latency_ms": latency, "default": 0.0 if latency > 1.0 else 60.0,
                                          **({"not_trained": "measured over the budget"} if latency > 1.0 else {})})
    fits = []
    for _ in range(3):
        arch = search.ask()
        if arch is None:
            break
        key = search.actions_of(arch)
        fits.append(bool(search.feasibility.fits_all([key])[0]))
        latency = search.predicted(key)["latency_ms"]
        search.tell(arch, {"default": 50.0 + latency, "latency_ms": latency})
    return fits, search.proposer.gave_up


def test_the_draws_mask_never_squeezes_past_the_cheapest_network_and_a_proposal_ends_untightened() -> None:
    search = PPOSearch(_wide_model(), Budget(latency_ms=1.0), PPOConfig(seed=0, proxy="none"))
    feasibility = search.feasibility
    excess = search.predicted((3,) * 8)["latency_ms"]  # 2.46 ms against 1 ms
    assert feasibility.tighten([(3,) * 8]) and feasibility.squeeze == pytest.approx(excess)
    assert feasibility.draw_mask.budget.latency_ms == pytest.approx(1.0 / excess)
    assert not feasibility.tighten([(5,) * 8])  # 4x more would leave out even the cheapest network (0.3 ms)
    arch = search.ask()  # a proposal draws under the mask again, and leaves it so
    assert arch is not None and feasibility.squeeze == 1.0 and feasibility.draw_mask is feasibility.mask


@pytest.mark.slow  # 16 searches: 17 s
def test_draws_the_exact_check_rejects_make_the_next_draws_tighter_not_the_search_give_up(monkeypatch) -> None:
    # the python_api example's search once stopped at 2 of its 3 trials this way: one measurement over,
    # one well under, and every later draw filled a mask no corrected bound came near
    for seed in range(8):
        fits, gave_up = _proposals_after_disagreeing_measurements(seed)
        assert fits == [True, True, True] and gave_up is None, (seed, fits, gave_up)
    from nni_hwaware.strategies.feasibility import Feasibility

    monkeypatch.setattr(Feasibility, "tighten", lambda self, rejected: False)  # draws under the mask alone
    untightened = [_proposals_after_disagreeing_measurements(seed) for seed in range(8)]  # 2 of 8 give up here
    assert any(len(fits) < 3 for fits, _ in untightened)
    assert any(str(gave_up).startswith("no untried network under the budget in 192 draws")
               for _, gave_up in untightened)


def test_a_measure_callback_makes_ask_return_only_networks_measured_to_fit() -> None:
    measured: list[dict[str, str]] = []

    def measure(archs: list[dict[str, str]]) -> list[dict[str, float]]:
        measured.extend(archs)
        return [{"latency_ms": chip(tuple(int(a[f"l{i}"][1:]) for i in range(LABELS)))} for a in archs]

    search = PPOSearch(toy_model(), Budget(latency_ms=LIMIT), PPOConfig(seed=1, proxy="none", correct=False),
                       measure=measure)
    for _ in range(15):
        arch = search.ask()
        key = search.actions_of(arch)
        assert chip(key) <= LIMIT and key in search.cleared  # measured, fits, waits for its training
        search.tell(arch, {"default": accuracy(key), "latency_ms": chip(key)})
    assert search.trainings == 15 and search.measurements == len(measured) >= 15
    assert all(chip(k) > LIMIT for k in search.history.screened)


def test_a_search_resumed_in_the_middle_of_a_screen_keeps_what_was_measured_and_what_waits() -> None:
    search = PPOSearch(toy_model(), Budget(latency_ms=LIMIT), PPOConfig(seed=2, proxy="none"))
    for _ in range(4):
        arch = search.ask()
        search.tell(arch, {"default": accuracy(search.actions_of(arch)), "latency_ms": chip(search.actions_of(arch))})
    screen = [search.ask() for _ in range(3)]  # a screening trial of three, one result back
    search.tell(screen[0], {"latency_ms": 0.5 * LIMIT, "not_trained": "screening"})
    again = PPOSearch(toy_model(), Budget(latency_ms=LIMIT), PPOConfig(seed=2, proxy="none"))
    again.load_state_dict(search.state_dict())
    assert again.cleared == search.cleared and set(again.pending) == set(search.pending)
    assert (again.measurements, again.trainings) == (search.measurements, search.trainings) == (5, 4)
    assert again.history.measured == search.history.measured
    assert again.risk_allowance() == pytest.approx(search.risk_allowance())
    # the rest of the screen comes back after the resume: each is told as it would have been
    for arch in screen[1:]:
        key = again.actions_of(arch)
        again.tell(arch, {"latency_ms": chip(key), "not_trained": "screening"})
        assert (key in again.cleared) == (chip(key) <= LIMIT)
    assert again.measurements == 7 and again.trainings == 4


def test_a_measurement_fits_by_the_upper_end_of_its_interval() -> None:
    metrics = on_table_scale({"latency_ms": 9.0, "latency_ratio": 0.5, "latency_ratio_ci95_high": 0.56,
                              "memory_mb": 3.0}, reference_latency_ms=10.0)
    measurement = Measurement.of(metrics)
    assert measurement.latency_ms == pytest.approx(5.0) and measurement.latency_high_ms == pytest.approx(5.6)
    assert not measurement.trained  # no default: a measurement alone
    assert measurement.fits({"latency_ms": 5.6}) and measurement.over({"latency_ms": 5.5}) == ["latency_ms"]
    assert measurement.over({"memory_mb": 2.0}) == ["memory_mb"]
    assert Measurement.of({**metrics, "default": 0.9}).trained
    assert not Measurement.of({**metrics, "default": 0.0, "not_trained": "over"}).trained


#: What the test's backend prepared: (batch size, device) per network.
PREPARED: list[tuple[int, str]] = []


def test_a_trial_measures_on_the_tables_backend_and_batch_size() -> None:
    from nni_hwaware.profiling import backends
    from nni_hwaware.profiling.backends import TorchBackend, register_backend
    from nni_hwaware.spaces.resolve import resolve_space
    from nni_hwaware.trial.run import measured_costs, screening_metrics

    @register_backend("test-counting")
    class CountingBackend(TorchBackend):
        def prepare(self, module: torch.nn.Module, example: torch.Tensor, device: str) -> Any:
            PREPARED.append((int(example.shape[0]), device))
            return super().prepare(module, example, device)

    try:
        _measure_on_the_counting_backend(resolve_space, measured_costs, screening_metrics)
    finally:
        backends._BACKENDS.pop("test-counting", None)  # other tests list the registered backends


def _measure_on_the_counting_backend(resolve_space: Any, measured_costs: Any, screening_metrics: Any) -> None:
    named = resolve_space("digits_tiny")
    arch = {"layer1_0": "skip", "layer2_0": "skip", "layer3_0": "skip", "layer4_0": "skip"}
    reference = {label: "basic" for label in arch}
    measuring = Measuring(backend="test-counting", batch_size=4, threads=1)
    PREPARED.clear()
    measured = measured_costs(named, arch, reference, seed=0, measuring=measuring)
    assert PREPARED == [(4, "cpu"), (4, "cpu")]  # the network and the reference, at the table's batch
    assert measured["latency_ratio"] < 1.0
    # a screening trial: every candidate and the reference, in shared rounds, on the same backend
    params = TrialParameters(arch={}, space="digits_tiny", reference=reference, measuring=measuring,
                             screen=[arch, {**arch, "layer4_0": "bottleneck"}], budget={"latency_ms": 1e6},
                             reference_table_latency_ms=1.0)
    params = TrialParameters.from_dict(params.to_dict())  # what the trial gets on the wire
    PREPARED.clear()
    final = screening_metrics(named, params, seed=0)
    assert len(PREPARED) == 3 and final["screening"] and final["measured"] == 2 and final["fit"] == 2
    assert final["measured_in"] == "test-counting"  # the portal says which runtime measured them
    screened = json.loads(final["screened"])
    assert [s["arch"] for s in screened] == params.screen and all(s["fits"] for s in screened)


def test_bad_measuring_options_get_one_line() -> None:
    from nni_hwaware.errors import HwAwareError

    with pytest.raises(HwAwareError, match="batch_size must be an integer >= 1"):
        Measuring(batch_size=0)
    with pytest.raises(HwAwareError, match="measuring options are malformed"):
        Measuring.from_dict({"backend": "torch", "cores": 2})


# -- the NNI tuner's screening trials --------------------------------------------------------------------
def _screening_tuner(tmp_path: Path, **options: Any) -> Any:
    from handmade import tiny_tuner

    return tiny_tuner(tmp_path, screen=8, budget={"latency_ms": "100%"}, search_trials=3,
                      ppo={"seed": 0, "proxy": "none"}, **options)


def _screen_result(params: dict[str, Any], fits: set[str]) -> dict[str, Any]:
    """What a screening trial reports: each candidate measured (those named in ``fits`` well within)."""
    body = TrialParameters.from_dict(params)
    screened = [{"arch": a, "latency_ms": 1.0, "memory_mb": 1.0,
                 "latency_ratio": 0.1 if json.dumps(a, sort_keys=True) in fits else 10.0,
                 "latency_ratio_ci95_low": 0.09, "latency_ratio_ci95_high": 0.11 if json.dumps(
                     a, sort_keys=True) in fits else 11.0} for a in body.screen]
    return {"default": 0.0, "screening": True, "measured": len(screened), "screened": json.dumps(screened)}


def test_the_tuner_screens_candidates_then_trains_only_those_measured_to_fit(tmp_path: Path) -> None:
    tuner = _screening_tuner(tmp_path)
    first = tuner.generate_parameters(0)
    screen = TrialParameters.from_dict(first)
    assert not screen.arch and 1 <= len(screen.screen) <= 3  # no more candidates than trainings left
    assert screen.budget and screen.reference and screen.measuring.backend == "torch"
    fits = {json.dumps(a, sort_keys=True) for a in screen.screen[:1]}
    tuner.receive_trial_result(0, first, _screen_result(first, fits))
    training = TrialParameters.from_dict(tuner.generate_parameters(1))
    assert json.dumps(training.arch, sort_keys=True) in fits  # the one measured to fit, and only it
    assert training.measured["latency_ratio"] == pytest.approx(0.1)  # not measured again
    search = tuner.search
    assert search.measurements == len(screen.screen) and search.trainings == 0
    tuner.receive_trial_result(1, {}, {"default": 0.8, "arch": json.dumps(training.arch)})
    assert search.trainings == 1 and search.measurements == len(screen.screen)
    stats = tuner.stats()
    assert stats["trainings"] == 1 and stats["measurements"] == len(screen.screen)


def test_a_screen_leaves_the_measurements_the_trainings_still_to_come_need(tmp_path: Path) -> None:
    # 4 trainings, so at most 6 measurements: a screen of 4 that all measured over would leave 2 for 4
    # trainings. The first screen holds the 2 spare; once those measured over, one candidate at a time.
    from handmade import tiny_tuner

    tuner = tiny_tuner(tmp_path, screen=8, budget={"latency_ms": "100%"}, search_trials=4,
                       ppo={"seed": 0, "proxy": "none"})
    first = tuner.generate_parameters(0)
    assert len(TrialParameters.from_dict(first).screen) == 2
    over = _screen_result(first, set())
    over["screened"] = json.dumps([{**c, "latency_ratio": 1.3, "latency_ratio_ci95_high": 1.35}
                                   for c in json.loads(over["screened"])])  # just over: the table's others may fit
    tuner.receive_trial_result(0, first, over)
    second = tuner.generate_parameters(1)
    assert len(TrialParameters.from_dict(second).screen) == 1
    fits = {json.dumps(a, sort_keys=True) for a in TrialParameters.from_dict(second).screen}
    tuner.receive_trial_result(1, second, _screen_result(second, fits))
    assert TrialParameters.from_dict(tuner.generate_parameters(2)).arch  # the one that fits is trained
    assert tuner.search.measurements == 3 and len(tuner.search.cleared) == 1


def test_a_tuner_resumed_in_the_middle_of_a_screen_waits_for_its_rerun_and_trains_what_fits(tmp_path: Path) -> None:
    state = tmp_path / "state.pt"
    tuner = _screening_tuner(tmp_path, state_file=str(state))
    first = tuner.generate_parameters(0)
    screen = TrialParameters.from_dict(first).screen
    resumed = _screening_tuner(tmp_path, state_file=str(state))  # nnictl resume: NNI reruns the screening trial
    assert {resumed.search.actions_of(a) for a in screen} <= set(resumed.search.pending)
    fits = {json.dumps(a, sort_keys=True) for a in screen}
    resumed.receive_trial_result(0, first, _screen_result(first, fits))
    sent = [TrialParameters.from_dict(resumed.generate_parameters(i)).arch for i in range(1, 1 + len(screen))]
    assert sorted(json.dumps(a, sort_keys=True) for a in sent) == sorted(fits)  # each trained once, none re-screened
    assert resumed.search.measurements == len(screen)


def test_check_config_works_out_the_trials_a_screened_search_needs() -> None:
    from nni_hwaware.strategies.ppo.job import PPOJob

    job = PPOJob.from_dict({"space": "digits", "search_trials": 24, "retrain": {"epochs": 1}, "screen": 8})
    assert job.screens and job.max_trials() == 24 + 36 + 1  # every training, 1.5 measurements each, the retraining
    assert PPOJob.from_dict({"space": "digits", "search_trials": 24, "screen": 1}).max_trials() == 36  # a trial each
    assert PPOJob.from_dict({"space": "digits", "search_trials": 24, "train_over_budget": True}).max_trials() == 24
