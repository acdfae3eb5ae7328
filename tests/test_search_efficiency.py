"""benchmarks/search_efficiency.py judges a search on what the device measured, and keeps the model's judgment beside it."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

from nb201 import Suite
from search_efficiency import (
    aggregate,
    delta_oracle_regret,
    headline,
    over_budget_shares,
    summarise,
)


def toy_suite() -> Suite:
    """Four networks: the model says three fit the 10 ms budget; as measured only two do."""
    archs = {("a",): 0, ("b",): 1, ("c",): 2, ("d",): 3}
    return Suite("toy", "nb201", {"x": ["a", "b", "c", "d"]}, archs,
                 accuracy=np.array([90.0, 80.0, 70.0, 95.0]), measured_ms=np.array([12.0, 9.0, 5.0, 20.0]),
                 model_ms=np.array([9.5, 8.0, 4.0, 20.0]), budget_ms=10.0, model=None, max_trials=3)


def test_a_network_over_budget_as_measured_is_no_find_and_the_models_judgment_is_kept_beside() -> None:
    suite = toy_suite()
    assert suite.best == 90.0 and suite.best_measured == 80.0
    run = summarise([0, 2], suite, 3, 0.0, 0.0)  # a (over as measured), then c
    assert run["judge"] == "measured" and run["regret_at_25"] == pytest.approx(10.0)  # best fit found: c, 70
    assert run["model_regret_at_25"] == pytest.approx(0.0)  # by the model, a (90) fits
    assert run["over_budget_measured"] == 1 and run["over_budget_model"] == 0
    by_model = summarise([0, 2], suite, 3, 0.0, 0.0, judge="model")
    assert by_model["regret_at_25"] == 0.0 and by_model["measured_regret_at_25"] == pytest.approx(10.0)
    assert by_model["trials_to_best"] == 1 and run["trials_to_best"] == 4  # censored: b never tried


def test_the_headline_gives_the_share_of_proposals_over_the_measured_budget() -> None:
    suite = toy_suite()
    ppo = aggregate([{**summarise([1, 2], suite, 3, 0.0, 0.0), "best_over_budget_measured": False}] * 2)
    masked = aggregate([summarise([0, 1, 2], suite, 3, 0.0, 0.0)] * 2)
    figures = headline({"toy": {"ppo": ppo, "random_feasible": masked}})
    assert figures["over_budget_measured_share"] == 0.0 and masked["over_budget_measured_share"] == pytest.approx(1 / 3)
    assert figures["over_budget_below_random_feasible_in_every_suite"] is True
    assert figures["best_over_budget_measured_runs"] == 0
    assert figures["regret100_ratio_vs_masked_random"] == pytest.approx(1.0)


def test_the_share_is_compared_with_random_runs_and_with_randoms_share_in_expectation() -> None:
    suite = toy_suite()  # mask-feasible: a (measured over), b, c: random's share is 1/3 in expectation
    ppo = aggregate([summarise([0, 1, 2, 1], suite, 4, 0.0, 0.0)] * 2)  # 1 of 4 over
    lucky = aggregate([summarise([1, 2], suite, 4, 0.0, 0.0)] * 2)  # random's runs never drew a
    figures = headline({"toy": {"ppo": ppo, "random_feasible": lucky, **over_budget_shares(suite)}})
    assert figures["suites_over_budget_not_below"] == ["toy"]  # 1/4 against the runs' 0
    assert figures["over_budget_below_random_expected_in_every_suite"] is True  # 1/4 against 1/3
    unlucky = aggregate([summarise([0, 1], suite, 4, 0.0, 0.0)] * 2)  # 1 of 2 over
    figures = headline({"toy": {"ppo": aggregate([summarise([0, 1, 2], suite, 4, 0.0, 0.0)] * 2),
                                "random_feasible": unlucky, **over_budget_shares(suite)}})
    assert figures["suites_over_budget_not_below"] == []  # 1/3 against the runs' 1/2
    assert figures["suites_over_budget_not_below_random_expected"] == ["toy"]  # 1/3 is not below 1/3


def test_the_delta_oracle_proposes_only_what_the_tables_errors_let_fit_with_probability_one_minus_delta() -> None:
    suite = toy_suite()  # the errors' logs: a 0.23, b 0.12, c 0.22, d 0
    # b (predicted 8 ms) goes over 10 ms only with a's error: 1 in 4; a (9.5 ms) with three of the four errors
    assert delta_oracle_regret(suite, 0.1) == pytest.approx(10.0)  # only c may be proposed: 80 - 70
    assert delta_oracle_regret(suite, 0.3) == pytest.approx(0.0)  # b too, which fits as measured
    assert delta_oracle_regret(suite, 0.8, judge="model") == pytest.approx(0.0)  # a, the model's best
    masked = aggregate([summarise([0, 1, 2], suite, 3, 0.0, 0.0)] * 2)
    ppo = aggregate([summarise([2], suite, 3, 0.0, 0.0)] * 2)  # regret 10, as the oracle at delta 0.1
    figures = headline({"toy": {"ppo": ppo, "random_feasible": masked, "delta_oracle_regret": 10.0}})
    assert figures["regret100_ratio_vs_delta_oracle"] == pytest.approx(1.0)
    assert figures["delta_oracle_regret_ratio_vs_masked_random"] == pytest.approx(10.0 / 0.01)  # random found b


def test_the_most_accurate_mask_feasible_networks_can_overrun_more_often_than_the_mask() -> None:
    suite = toy_suite()  # mask-feasible: a (90, measured over), b (80), c (70)
    shares = over_budget_shares(suite, top=0.34)  # the most accurate third: a
    assert shares == {"mask_over_budget_measured_share": pytest.approx(1 / 3), "accurate_over_budget_measured_share": 1.0}
