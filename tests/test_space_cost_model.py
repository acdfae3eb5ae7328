"""The cost model of any NNI model space: factors, prediction, expectation, bounds, profiling."""

from __future__ import annotations

import itertools
import math
from pathlib import Path

import nni
import numpy as np
import pandas as pd
import pytest
import torch
from torch import nn

from nni_hwaware.cost_model import (
    CostFactor,
    SpaceCostModel,
    choice_cost_model,
    find_leaves,
    profile_model_space,
    space_cost_model,
)
from nni_hwaware.cost_model.calibration import NetworkTerm
from nni_hwaware.cost_table.table import CostTable
from nni_hwaware.errors import HwAwareError
from nni_hwaware.nni_fixes import import_nni_nas
from nni_hwaware.profiling import count_flops, count_params
from nni_hwaware.spaces.choices import space_choices

_nas = import_nni_nas()


def hand_model() -> SpaceCostModel:
    """Three labels; one factor couples a and b (a layer whose input width b chooses)."""
    choices = {"a": ["x", "y"], "b": [8, 16, 32], "c": ["p", "q"]}
    factors = [
        CostFactor(("a",), {"latency_ms": np.array([1.0, 2.0]), "param_mb": np.array([0.1, 0.2]),
                            "activation_mb": np.array([0.5, 0.1]), "flops": np.array([10, 20]),
                            "params": np.array([1, 2])}),
        # given as (b, a): the model reorders it to the space's order (a, b)
        CostFactor(("b", "a"), {"latency_ms": np.array([[1.0, 5.0], [2.0, 6.0], [3.0, 7.0]]),
                                "param_mb": np.zeros((3, 2)), "activation_mb": np.array([[0.2, 0.2], [0.4, 0.4], [0.8, 0.8]]),
                                "flops": np.ones((3, 2)), "params": np.zeros((3, 2))}),
        CostFactor(("c",), {"latency_ms": np.array([0.5, 0.0]), "param_mb": np.array([1.0, 0.0]),
                            "activation_mb": np.zeros(2), "flops": np.zeros(2), "params": np.array([100, 0])}),
    ]
    return SpaceCostModel(choices, factors, {"latency_ms": 10.0, "param_mb": 2.0, "activation_mb": 0.3,
                                             "flops": 1000, "params": 50})


def test_prediction_is_the_sum_of_factors_and_the_largest_activation() -> None:
    model = hand_model()
    cost = model.predict({"a": "y", "b": 16, "c": "p"})
    assert cost.latency_ms == pytest.approx(10 + 2 + 6 + 0.5)
    assert cost.param_mb == pytest.approx(2 + 0.2 + 0 + 1)
    assert cost.activation_mb == pytest.approx(0.4)  # max(0.3 fixed, 0.1, 0.4, 0)
    assert cost.memory_mb == pytest.approx(3.2 + 0.4)
    assert (cost.flops, cost.params) == (1000 + 20 + 1, 50 + 2 + 100)


def test_predict_many_is_predict_indices_of_every_network_to_the_bit() -> None:
    model = hand_model()
    every = list(itertools.product(*(range(len(v)) for v in model.candidates)))
    many = model.predict_many(np.asarray(every))
    for n, at in enumerate(every):
        one = model.predict_indices(at).metrics()
        assert {m: float(many[m][n]) for m in one} == one  # the same sums in the same order: equal, not close


def test_a_sample_that_does_not_fit_gets_one_line() -> None:
    model = hand_model()
    with pytest.raises(HwAwareError, match=r"b=12, allowed: \[8, 16, 32\]"):
        model.predict({"a": "x", "b": 12, "c": "p"})
    with pytest.raises(HwAwareError, match="no value for \\['c'\\]"):
        model.predict({"a": "x", "b": 8})


def test_expected_cost_is_the_exact_mean_over_samples() -> None:
    model = hand_model()
    gen = torch.Generator().manual_seed(0)
    probs = {label: torch.rand(len(values), generator=gen).softmax(0).requires_grad_()
             for label, values in model.choices().items()}
    expected = model.expected(probs)
    mean = {"latency_ms": 0.0, "flops": 0.0, "params": 0.0, "param_mb": 0.0}
    for at in itertools.product(*(range(len(v)) for v in model.candidates)):
        weight = math.prod(float(probs[label][j]) for label, j in zip(model.labels, at, strict=True))
        cost = model.predict_indices(at)
        for key in mean:
            mean[key] += weight * getattr(cost, key)
    for key, value in mean.items():
        assert float(expected[key]) == pytest.approx(value, rel=1e-5)
    expected["latency_ms"].backward()
    # d E[lat] / d p_c = lat_c: the gradient reaches every label's probabilities
    assert probs["c"].grad.tolist() == pytest.approx([0.5, 0.0])
    one_hot = {label: torch.nn.functional.one_hot(torch.tensor(j), len(v)).float()
               for (label, v), j in zip(model.choices().items(), (1, 2, 0), strict=True)}
    assert float(model.expected(one_hot)["memory_mb"]) == pytest.approx(model.predict_indices((1, 2, 0)).memory_mb)


def test_lower_bounds_never_exceed_a_completion_and_are_exact_for_one_label_factors() -> None:
    model = hand_model()
    for prefix_len in range(3):
        for prefix in itertools.product(*(range(len(v)) for v in model.candidates[:prefix_len])):
            bounds = model.lower_bounds(list(prefix))
            for j in range(len(model.candidates[prefix_len])):
                rest = itertools.product(*(range(len(v)) for v in model.candidates[prefix_len + 1:]))
                costs = [model.predict_indices((*prefix, j, *r)) for r in rest]
                best = min(c.latency_ms for c in costs)
                assert bounds["latency_ms"][j] == pytest.approx(best)  # no label shared by two open factors
                assert bounds["memory_mb"][j] <= min(c.memory_mb for c in costs) + 1e-9


def test_restrict_keeps_the_costs_of_the_kept_values() -> None:
    model = hand_model()
    small = model.restrict({"b": [32, 8]})
    assert small.candidates[1] == [32, 8] and small.size() == 8
    sample = {"a": "y", "b": 32, "c": "q"}
    assert small.predict(sample) == model.predict(sample)
    with pytest.raises(HwAwareError, match="cannot keep"):
        model.restrict({"b": [64]})


def test_choice_table_builds_a_model_from_per_choice_costs(tmp_path) -> None:
    path = tmp_path / "costs.csv"
    pd.DataFrame([
        {"label": "_fixed", "value": "", "latency_ms": 1.0, "memory_mb": 0.5, "flops": 100, "params": 10},
        {"label": "e0", "value": "conv", "latency_ms": 2.0, "memory_mb": 0.25, "flops": 50, "params": 5},
        {"label": "e0", "value": "skip", "latency_ms": 0.5, "memory_mb": 0.0, "flops": 0, "params": 0},
        {"label": "depth", "value": "2", "latency_ms": 3.0, "memory_mb": 1.0, "flops": 70, "params": 7},
        {"label": "depth", "value": "1", "latency_ms": 1.5, "memory_mb": 0.5, "flops": 35, "params": 3},
    ]).to_csv(path, index=False)
    model = choice_cost_model(path, choices={"e0": ["skip", "conv"], "depth": [1, 2]})
    cost = model.predict({"e0": "conv", "depth": 2})
    assert (cost.latency_ms, cost.memory_mb, cost.flops, cost.params) == (6.0, 1.75, 220, 22)
    assert model.candidates == [["skip", "conv"], [1, 2]]  # the space's order and types
    with pytest.raises(HwAwareError, match="no row for e0='pool'"):
        choice_cost_model(path, choices={"e0": ["skip", "conv", "pool"], "depth": [1, 2]})
    bad = pd.read_csv(path)
    bad.loc[1, "latency_ms"] = -1
    with pytest.raises(HwAwareError, match=r"row 1 .*latency_ms"):
        choice_cost_model(bad)


class UserSpace(_nas.ModelSpace):
    """A user's space: a width choice, a LayerChoice whose candidates depend on it, a Repeat."""

    def __init__(self) -> None:
        super().__init__()
        width = nni.choice("width", [4, 8])
        self.stem = nn.Sequential(_nas.MutableConv2d(1, width, 3, padding=1), _nas.MutableBatchNorm2d(width),
                                  nn.ReLU())
        self.op = _nas.LayerChoice({
            "conv3": _nas.MutableConv2d(width, width, 3, padding=1),
            "conv1": _nas.MutableConv2d(width, width, 1),
            "skip": nn.Identity(),
        }, label="op")
        self.widen = _nas.MutableConv2d(width, 8, 1)
        self.body = _nas.Repeat(lambda index: nn.Sequential(nn.Conv2d(8, 8, 3, padding=1), nn.ReLU()),
                                depth=nni.choice("depth", [1, 2, 3]))
        self.head = nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(8, 10))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.body(self.widen(self.op(self.stem(x)))))


def test_leaves_of_a_user_space_follow_its_choices() -> None:
    leaves = find_leaves(UserSpace(), torch.randn(1, 1, 8, 8))
    assert leaves.choices == {"width": [4, 8], "op": ["conv3", "conv1", "skip"], "depth": [1, 2, 3]}
    by_path = {t.path: t.labels for t in leaves.terms}
    assert by_path["op.conv3"] == ("width", "op")  # its size follows width, it exists when op == conv3
    assert by_path["body.blocks.2"] == ("depth",)  # the third block exists when depth >= 3
    assert by_path["head"] == ()
    third = next(t for t in leaves.terms if t.path == "body.blocks.2")
    assert sorted(third.entries) == [(2,)]
    # the three body blocks are one entry, measured once
    assert len({t.entries[(2,)] for t in leaves.terms if t.path.startswith("body")}) == 1


def test_profiled_user_space_predicts_flops_and_params_of_every_network_exactly(tmp_path: Path) -> None:
    space = UserSpace()
    x = torch.randn(1, 1, 8, 8)
    table = profile_model_space(space, x, progress=False, peak_flops=1e10, calibration_samples=2,
                                max_seconds=0.3)
    model = space_cost_model(find_leaves(space, x), table, name="user")
    assert model.size() == 18
    for at in itertools.product(*(range(len(v)) for v in model.candidates)):
        sample = model.sample_of(at)
        network = space.freeze(sample).eval()
        cost = model.predict(sample)
        assert cost.flops == count_flops(network, x)
        assert cost.params == count_params(network)
    assert (table.frame.kind == "network").sum() == 1
    # NNI's ExpressionProfiler of the model (for Filter, RangeProfilerFilter, penalties) agrees with it
    profilers = {m: model.expression_profiler(space, m) for m in ("latency_ms", "memory_mb", "flops", "params")}
    for at in itertools.product(*(range(len(v)) for v in model.candidates)):
        sample = model.sample_of(at)
        cost = model.predict(sample).metrics()
        for metric, profiler in profilers.items():
            assert profiler.profile(sample) == pytest.approx(cost[metric]), (metric, sample)
    # the network row's term (scale, constant, per-(label, value) offsets) completes every prediction's latency
    leaves = find_leaves(space, x)
    bare = space_cost_model(leaves, table, with_network_term=False)
    row = table.frame.set_index("kind").loc["network"]
    term = NetworkTerm.from_row(row.latency_scale, row.latency_terms, row.latency_ms)
    # offsets for every label, or none where a 0.3 s calibration of these tiny networks left no
    # positive scale and the fit fell back to the ratio alone (seen on one runner)
    assert not term.offsets or set(term.offsets) == set(model.labels)
    for at in itertools.product(*(range(len(v)) for v in model.candidates)):
        sample = model.sample_of(at)
        expected = term.predict(bare.predict(sample).latency_ms, sample)
        assert model.predict(sample).latency_ms == pytest.approx(expected, rel=1e-9, abs=1e-5)
    # the table round-trips through its file with the term
    path = tmp_path / "table.csv"
    table.save(path)
    again_model = space_cost_model(leaves, CostTable.load(path), name="user")
    assert again_model.predict(sample).latency_ms == pytest.approx(model.predict(sample).latency_ms)
    # profiling again with the table measures nothing new
    again = profile_model_space(space, x, progress=False, table=table, calibration_samples=2)
    assert len(again) == len(table)


def test_bad_spaces_get_one_line() -> None:
    class Numerical(_nas.ModelSpace):
        def __init__(self) -> None:
            super().__init__()
            self.conv = _nas.MutableConv2d(1, 4, 3)
            self.rate = nni.uniform("rate", 0.0, 1.0)
            self.add_mutable(self.rate)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.conv(x)

    with pytest.raises(HwAwareError, match="'rate' is a Numerical, not a categorical choice") as info:
        space_choices(Numerical())
    assert "\n" not in str(info.value)
    with pytest.raises(HwAwareError, match=r"cannot trace the space with an input of shape \(1, 3, 8, 8\)") as info:
        find_leaves(UserSpace(), torch.randn(1, 3, 8, 8))
    assert "\n" not in str(info.value)
    with pytest.raises(HwAwareError, match="batch dimension"):
        find_leaves(UserSpace(), torch.randn(8))


# -- pruning and budgets on any space ---------------------------------------------------


def test_pruning_scores_every_value_and_narrows_an_nni_space() -> None:
    from nni_hwaware.pruning import narrow_space, prune_choices

    choices = {"width": [4, 8], "op": ["conv3", "conv1", "skip"], "depth": [1, 2, 3]}
    # S = U * P with C = 1e3: width 8 scores 8 * 20/(1 * 1) ... computed by hand below
    frame = pd.DataFrame([
        {"label": "width", "value": 4, "latency_ms": 1000.0, "memory_mb": 0, "flops": 1e3, "params": 1},    # S = 1
        {"label": "width", "value": 8, "latency_ms": 1000.0, "memory_mb": 0, "flops": 3e3, "params": 1},    # S = 3
        {"label": "op", "value": "conv3", "latency_ms": 1000.0, "memory_mb": 0, "flops": 1e3, "params": 9},  # S = 9
        {"label": "op", "value": "conv1", "latency_ms": 1000.0, "memory_mb": 0, "flops": 1e3, "params": 1},  # S = 1
        {"label": "op", "value": "skip", "latency_ms": 1000.0, "memory_mb": 0, "flops": 0, "params": 0},    # S = 0
        {"label": "depth", "value": 1, "latency_ms": 1000.0, "memory_mb": 0, "flops": 1e3, "params": 1},    # S = 1
        {"label": "depth", "value": 2, "latency_ms": 1000.0, "memory_mb": 0, "flops": 2e3, "params": 2},    # S = 4
        {"label": "depth", "value": 3, "latency_ms": 1000.0, "memory_mb": 0, "flops": 3e3, "params": 3},    # S = 9
    ])
    model = choice_cost_model(frame, choices=choices, peak_flops=1e3)
    result = prune_choices(model, mode="layer-mean", always_keep=["skip"])
    # means: width 2 -> {8}; op 10/3 -> {conv3} + skip kept; depth 14/3 -> {3}
    assert result.allowed == {"width": [8], "op": ["conv3", "skip"], "depth": [3]}
    assert result.sizes() == (18, 2)
    assert result.model.size() == 2
    # global mean 28/8 = 3.5: depth 2 (S = 4) stays, width 4 (S = 3) goes
    assert prune_choices(model, mode="global-mean").allowed == {"width": [8], "op": ["conv3"], "depth": [2, 3]}

    space = narrow_space(UserSpace(), result.allowed)
    assert {label: list(m.values) for label, m in space.simplify().items()} == result.allowed
    assert sorted(space.op.names) == ["conv3", "skip"] and not hasattr(space.op, "conv1")
    for sample in ({"width": 8, "op": "skip", "depth": 3}, {"width": 8, "op": "conv3", "depth": 3}):
        assert space.freeze(sample)(torch.randn(2, 1, 8, 8)).shape == (2, 10)
    leaves = find_leaves(space, torch.randn(1, 1, 8, 8))
    assert leaves.choices == result.allowed
    assert list(UserSpace().simplify()["op"].values) == ["conv3", "conv1", "skip"]  # the original is untouched


def test_budget_mask_on_coupled_factors_never_proposes_over_budget() -> None:
    from nni_hwaware.strategies.budget import Budget, BudgetMask
    from nni_hwaware.strategies.ppo import PPOConfig, PPOSearch

    model = hand_model()
    every = list(itertools.product(*(range(len(v)) for v in model.candidates)))
    latencies = sorted(model.predict_indices(at).latency_ms for at in every)
    budget = Budget(latency_ms=latencies[len(latencies) // 3], memory_mb=3.6)
    mask = BudgetMask(model, budget)
    assert not mask.separable  # the (a, b) factor couples two labels
    feasible = {at for at in every if mask.within(at)}
    assert set(mask.enumerate()) == feasible and 0 < len(feasible) < len(every)
    search = PPOSearch(model, budget, PPOConfig(seed=3, update_every=2))
    proposed = []
    while (arch := search.ask()) is not None:
        proposed.append(arch)
        search.tell(arch, {"default": float(len(proposed) % 3)})
    assert {model.indices(a) for a in proposed} == feasible  # every feasible one, none over, none twice
    assert len(proposed) == len(feasible)


# -- the Gumbel search on a user's space ---------------------------------------------------


@pytest.mark.slow
def test_gumbel_search_on_a_user_space_finds_the_cheapest_network_under_a_strong_penalty(tmp_path) -> None:
    """Width (a MutableConv2d choice inside a LayerChoice), op and Repeat depth share one mask each."""
    from nni_hwaware.spaces.resolve import resolve_space
    from nni_hwaware.strategies.gumbel import GumbelSearchConfig, search

    named = resolve_space(UserSpace(), input_shape=(1, 8, 8))
    choices = {"width": [4, 8], "op": ["conv3", "conv1", "skip"], "depth": [1, 2, 3]}
    frame = pd.DataFrame([{"label": label, "value": value, "latency_ms": cost, "memory_mb": 0.1 * cost,
                           "flops": 1000 * cost, "params": 10 * cost}
                          for label, costs in (("width", (1, 4)), ("op", (3, 2, 0.1)), ("depth", (1, 2, 3)))
                          for value, cost in zip(choices[label], costs, strict=True)])
    model = choice_cost_model(frame, choices=choices, name="user")
    config = GumbelSearchConfig.from_dict({
        "out": str(tmp_path), "seed": 0, "penalty": {"alpha": 20.0, "gamma": 0.0},
        "temperature": {"init": 1.0, "min": 1.0, "hard": True},
        "stages": {"order": ["all"], "max_epochs": 2, "min_epochs": 2},
        "search": {"batch_size": 64, "lr": 0.05, "arc_lr": 0.1, "threads": 1, "checkpoint": False,
                   "accelerator": "cpu"}})
    gaps, ratios = [], []
    for seed in range(5):  # over seeds: another CPU takes another path
        records: list[dict] = []
        outcome = search(config.replace(seed=seed), named, model, tmp_path / f"run{seed}", report=records.append)
        assert outcome.arch == {"width": 4, "op": "skip", "depth": 1}, (seed, outcome.probabilities)
        assert all(max(p.values()) > 0.8 for p in outcome.probabilities.values()), (seed, outcome.probabilities)
        assert records[-1]["expected_latency_ms"] < records[0]["expected_latency_ms"]
        free = search(config.replace(**{"penalty.alpha": 0.0, "seed": seed}), named, model, tmp_path / f"free{seed}")
        gaps.append(outcome.probabilities["op"]["skip"] - free.probabilities["op"]["skip"])
        ratios.append(free.history[-1]["expected_latency_ms"] / outcome.history[-1]["expected_latency_ms"])
    # no penalty, no pull towards the cheapest: always less of it, and much less at the median
    assert min(gaps) > 0 and float(np.median(gaps)) > 0.25, gaps
    assert min(ratios) > 1.5, ratios


def test_a_gumbel_search_takes_the_same_path_for_its_seed_whatever_ran_before(tmp_path) -> None:
    """Two searches of one seed after different draws from torch's global generator (another search of a
    sweep, a user's own code): the same architecture probabilities, and the caller's generator given back."""
    from nni_hwaware.spaces.resolve import resolve_space
    from nni_hwaware.strategies.gumbel import GumbelSearchConfig, search

    named = resolve_space(UserSpace(), input_shape=(1, 8, 8))
    choices = {"width": [4, 8], "op": ["conv3", "conv1", "skip"], "depth": [1, 2, 3]}
    frame = pd.DataFrame([{"label": label, "value": value, "latency_ms": 1.0 + j, "memory_mb": 0.1,
                           "flops": 1000, "params": 10} for label, values in choices.items()
                          for j, value in enumerate(values)])
    model = choice_cost_model(frame, choices=choices, name="user")
    config = GumbelSearchConfig.from_dict({
        "out": str(tmp_path), "seed": 3, "penalty": {"alpha": 0.0, "gamma": 0.0},
        "temperature": {"init": 1.0, "min": 1.0, "hard": True},
        "stages": {"order": ["all"], "max_epochs": 1, "min_epochs": 1},
        "search": {"batch_size": 64, "lr": 0.05, "arc_lr": 0.1, "threads": 1, "checkpoint": False,
                   "accelerator": "cpu"}})
    outcomes = []
    for before in (0, 1):
        torch.manual_seed(before)
        outcomes.append(search(config, named, model, tmp_path / f"run{before}").probabilities)
        # the caller's generator goes on where it was, as if no search had run
        assert torch.rand(1).item() == torch.rand(1, generator=torch.Generator().manual_seed(before)).item()
    assert outcomes[0] == outcomes[1]


class TwoInputSpace(_nas.ModelSpace):
    """A leaf with two tensor inputs (a fusion of the choice's output with the stem's)."""

    class Fuse(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.conv = nn.Conv2d(8, 8, 3, padding=1)

        def forward(self, x: torch.Tensor, skip: torch.Tensor) -> torch.Tensor:
            return self.conv(x) + skip

    def __init__(self) -> None:
        super().__init__()
        self.stem = nn.Conv2d(1, 8, 3, padding=1)
        self.op = _nas.LayerChoice({"conv": nn.Conv2d(8, 8, 3, padding=1), "skip": nn.Identity()}, label="op")
        self.fuse = TwoInputSpace.Fuse()
        self.head = nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(8, 10))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        stem = self.stem(x)
        return self.head(self.fuse(self.op(stem), stem))


def test_a_leaf_with_two_inputs_is_measured_with_both() -> None:
    space, x = TwoInputSpace(), torch.randn(1, 1, 8, 8)
    leaves = find_leaves(space, x)
    fuse = next(e for e in leaves.entries if "Fuse" in e.block)
    assert fuse.input_shapes == ((8, 8, 8), (8, 8, 8)) and fuse.shape_str == "8x8x8;8x8x8"
    table = profile_model_space(space, x, progress=False, peak_flops=1e10, calibration_samples=0,
                                max_seconds=0.2)
    model = space_cost_model(leaves, table)
    for value in ("conv", "skip"):
        network = space.freeze({"op": value}).eval()
        assert model.predict({"op": value}).flops == count_flops(network, x)  # the add included
    row = table.frame.set_index("block").loc[fuse.block]
    assert row.input_shape == "8x8x8;8x8x8" and row.activation_mb >= 2 * 4 * 512 / 2**20


def test_a_module_no_shape_formula_covers_gets_one_line() -> None:
    class Roll(nn.Module):  # torch.roll: no NNI shape formula, and its input width is a choice
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return torch.roll(x, 1, dims=1)

    class Space(_nas.ModelSpace):
        def __init__(self) -> None:
            super().__init__()
            self.conv = _nas.MutableConv2d(1, nni.choice("w", [4, 8]), 3)
            self.roll = Roll()

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.roll(self.conv(x))

    with pytest.raises(HwAwareError, match=r"cannot trace the space.*_shape_forward") as info:
        find_leaves(Space(), torch.randn(1, 1, 8, 8))
    assert "\n" not in str(info.value)


def test_building_a_network_leaves_the_users_space_untouched() -> None:
    from nni_hwaware.spaces.resolve import resolve_space

    named = resolve_space(UserSpace(), input_shape=(1, 8, 8))
    before = {k: v.clone() for k, v in named.space.state_dict().items()}
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(5)
        network = named.build({"width": 8, "op": "conv3", "depth": 2})
    assert all(torch.equal(before[k], v) for k, v in named.space.state_dict().items())
    assert network(torch.randn(2, 1, 8, 8)).shape == (2, 10)


def test_fixed_rows_and_value_types_of_a_per_choice_table() -> None:
    from nni_hwaware.pruning import prune_choices

    frame = pd.DataFrame([
        {"label": "_fixed", "value": "", "latency_ms": 1, "memory_mb": 1.0, "activation_mb": 0.5, "flops": 1, "params": 1},
        {"label": "_fixed", "value": "", "latency_ms": 1, "memory_mb": 1.0, "activation_mb": 0.5, "flops": 1, "params": 1},
        {"label": "w", "value": "0.5", "latency_ms": 1, "memory_mb": 0.1, "activation_mb": 0.0, "flops": 1e3, "params": 1},
        {"label": "w", "value": "1.0", "latency_ms": 1, "memory_mb": 0.2, "activation_mb": 0.0, "flops": 4e3, "params": 4},
        {"label": "k", "value": "3", "latency_ms": 1, "memory_mb": 0.1, "activation_mb": 0.0, "flops": 1e3, "params": 1},
        {"label": "k", "value": "5", "latency_ms": 1, "memory_mb": 0.2, "activation_mb": 0.0, "flops": 9e3, "params": 9},
    ])
    model = choice_cost_model(frame, choices={"w": [0.5, 1.0], "k": [3, 5]}, peak_flops=1e6)
    cost = model.predict({"w": 0.5, "k": 3})
    assert cost.param_mb == pytest.approx(1.0 + 0.1 + 0.1)  # weights of both fixed parts
    assert cost.memory_mb == pytest.approx(1.2 + 0.5)  # plus the largest activation
    allowed = prune_choices(model, mode="top-k", top=1).allowed
    assert allowed == {"w": [1.0], "k": [5]} and type(allowed["k"][0]) is int


@pytest.mark.parametrize("version", ["2.0.0+cpu", None])
def test_a_table_of_another_torch_says_why_its_leaves_are_missing(version: str | None, tmp_path: Path) -> None:
    """Leaves are named by their module's printout: a table profiled under another torch can lack them,
    and the error says so; under this torch it does not blame the version."""
    from nni_hwaware.cost_model import load_space_model
    from nni_hwaware.spaces.resolve import resolve_space

    path = Path(__file__).resolve().parents[1] / "benchmarks" / "data" / "digits_tiny_table.csv"
    frame = CostTable.load(path).frame.copy()
    frame["torch_version"] = version or torch.__version__
    frame = frame[~frame.block.str.startswith("Conv2dNormActivation")]
    stale = tmp_path / "table.csv"
    CostTable(frame).save(stale)
    with pytest.raises(HwAwareError) as info:
        load_space_model(resolve_space("digits_tiny"), stale)
    message = str(info.value)
    assert "has no row for" in message and "\n" not in message
    assert ("profiled under torch 2.0.0+cpu, this is torch" in message) == (version is not None)


@pytest.mark.parametrize("coupled", [False, True])
def test_the_feasible_list_is_the_masks_own_walk_as_the_mask_moves(coupled: bool) -> None:
    """The list a search draws from, as the correction moves the mask's limits up and down: always exactly
    what the mask's own walk finds, in its order (and None past the limit)."""
    from nni_hwaware.strategies.budget import Budget, BudgetMask
    from nni_hwaware.strategies.feasibility import Feasibility, FeasibilityOptions

    rng = np.random.default_rng(0)
    choices = {f"l{i}": list(range(4)) for i in range(6)}
    factors = [CostFactor((f"l{i}",), {"latency_ms": rng.uniform(0.1, 1.0, 4), "param_mb": rng.uniform(0, 1, 4),
                                       "activation_mb": rng.uniform(0, 1, 4), "flops": rng.integers(1, 99, 4),
                                       "params": rng.integers(1, 99, 4)}) for i in range(6)]
    if coupled:
        factors.append(CostFactor(("l0", "l1"), {m: rng.uniform(0, 0.5, (4, 4)) for m in
                                                 ("latency_ms", "param_mb", "activation_mb", "flops", "params")}))
    model = SpaceCostModel(choices, factors, {"latency_ms": 0.5, "param_mb": 0.1, "activation_mb": 0.1,
                                              "flops": 10, "params": 10})
    every = model.predict_many(np.asarray(list(itertools.product(*(range(4) for _ in range(6))))))
    at = {m: lambda q, m=m: float(np.quantile(every[m], q)) for m in ("latency_ms", "memory_mb")}
    feasibility = Feasibility(model, Budget(latency_ms=at["latency_ms"](0.5), memory_mb=at["memory_mb"](0.5)),
                              FeasibilityOptions(correct=False))
    # the mask's limits move as a correction would move them: down, up past the walk's slack, back down
    for q_latency, q_memory in [(0.5, 0.5), (0.45, 0.4), (0.55, 0.6), (0.9, 0.95), (0.3, 0.2), (0.5, 0.5)]:
        budget = Budget(latency_ms=at["latency_ms"](q_latency), memory_mb=at["memory_mb"](q_memory))
        feasibility.mask = BudgetMask(model, budget)
        feasibility._listed = False
        walk = feasibility.mask.enumerate(20_000)
        assert walk and feasibility.feasible_list(20_000) == walk
        feasibility._listed = False
        assert feasibility.feasible_list(len(walk) - 1) is None


@pytest.mark.parametrize("seed", range(3))
def test_needs_of_many_prefixes_at_once_are_each_prefixs_own_to_the_bit(seed: int) -> None:
    """The policy's states and masks read the look-ahead of a batch of prefixes: under a memory budget
    too, each row is exactly what the prefix alone gives (12 labels: sums past numpy's 8-way unrolling)."""
    from nni_hwaware.strategies.budget import Budget, BudgetMask

    rng = np.random.default_rng(seed)
    choices = {f"l{i}": list(range(int(rng.integers(2, 6)))) for i in range(12)}
    factors = [CostFactor((label,), {m: rng.uniform(0, 1, len(values)) for m in
                                     ("latency_ms", "param_mb", "activation_mb", "flops", "params")})
               for label, values in choices.items()]
    model = SpaceCostModel(choices, factors, {"latency_ms": 0.5, "param_mb": 0.1, "activation_mb": 0.3,
                                              "flops": 10, "params": 10})
    mask = BudgetMask(model, Budget(latency_ms=6.0, memory_mb=7.0))
    for i in range(12):
        prefixes = np.stack([rng.integers(0, len(choices[f"l{k}"]), 32) for k in range(i)], 1) if i else \
            np.zeros((32, 0), dtype=int)
        batch = mask.needs_batch(prefixes)
        for b, prefix in enumerate(prefixes):
            for metric, need in mask._needs(prefix).items():
                assert np.array_equal(batch[metric][b, :len(need)], need)
                assert np.isinf(batch[metric][b, len(need):]).all()


def _separable_hand_model() -> SpaceCostModel:
    """:func:`hand_model` with b's factor its own (as if a were fixed at x): every factor of one label."""
    plain = hand_model()
    coupled = plain.factors[1]
    alone = CostFactor(("b",), {m: np.asarray(v)[0] for m, v in coupled.costs.items()})
    return SpaceCostModel(plain.choices(), [plain.factors[0], alone, plain.factors[2]], plain.fixed)


@pytest.mark.parametrize("build", [hand_model, _separable_hand_model])
def test_weights_beyond_the_cache_add_to_every_prediction_and_the_bounds_still_hold(build) -> None:
    from nni_hwaware.cost_model.calibration import BeyondCache
    from nni_hwaware.strategies.budget import Budget, BudgetMask

    plain = build()
    model = SpaceCostModel(plain.choices(), plain.factors, plain.fixed, beyond_cache=BeyondCache(2.5, 3.0))
    every = list(itertools.product(*(range(len(v)) for v in model.candidates)))
    for at in every:  # weights 2.1-3.2 MB: 0 to 2.1 ms more than the factors
        cost, bare = model.predict_indices(at), plain.predict_indices(at)
        assert cost.latency_ms == pytest.approx(bare.latency_ms + 3.0 * max(0.0, bare.param_mb - 2.5))
    many = model.predict_many(np.array(every))["latency_ms"]
    assert list(many) == pytest.approx([model.predict_indices(at).latency_ms for at in every])
    for i in range(len(model.labels)):  # every completion costs at least its bound
        for prefix in itertools.product(*(range(len(v)) for v in model.candidates[:i])):
            low = model.lower_bounds(list(prefix))["latency_ms"]
            for at in every:
                if at[:i] == prefix:
                    assert model.predict_indices(at).latency_ms >= low[at[i]] - 1e-9
    one_hot = {label: torch.nn.functional.one_hot(torch.tensor(at), len(values)).double()
               for label, values, at in zip(model.labels, model.candidates, every[5], strict=True)}
    assert float(model.expected(one_hot)["latency_ms"]) == pytest.approx(model.predict_indices(every[5]).latency_ms)
    assert model.restrict({"a": ["y"]}).beyond_cache is model.beyond_cache
    # the mask judges the whole network: never a network over the budget, every one within it
    latencies = sorted(model.predict_indices(at).latency_ms for at in every)
    for limit in latencies[len(latencies) // 4:: len(latencies) // 4]:
        mask = BudgetMask(model, Budget(latency_ms=limit))
        # a separable model bounds the term at a completion's least weights: vectorised, no longer exact
        assert mask.separable == (build is _separable_hand_model) and not mask.exact
        assert set(mask.enumerate()) == {at for at in every if model.predict_indices(at).latency_ms <= limit}
        assert mask.cheapest_costs()["latency_ms"] <= latencies[0] + 1e-9
        for i in range(len(model.labels)):  # the look-ahead, one prefix or many at once, is under every completion
            prefixes = list(itertools.product(*(range(len(v)) for v in model.candidates[:i])))
            batch = mask.needs_batch(np.array(prefixes, dtype=int).reshape(len(prefixes), i))["latency_ms"]
            for b, prefix in enumerate(prefixes):
                need = mask.needs(prefix)["latency_ms"]
                assert np.array_equal(batch[b, :len(need)], need)
                for at in every:
                    if at[:i] == prefix:
                        assert model.predict_indices(at).latency_ms >= need[at[i]] - 1e-9
    if build is _separable_hand_model:  # the term is where a completion's weights pass the cache: it bites
        mask = BudgetMask(model, Budget(latency_ms=latencies[-1]))
        assert mask.needs([1, 0])["latency_ms"].max() > BudgetMask(plain, Budget(latency_ms=latencies[-1])).needs(
            [1, 0])["latency_ms"].max() + 2.0


def test_the_cache_is_read_from_the_system_and_absent_where_it_does_not_say(tmp_path: Path) -> None:
    import os

    from nni_hwaware.profiling import cache_mb

    cpu = sorted(os.sched_getaffinity(0))[0] if hasattr(os, "sched_getaffinity") else 0
    for index, (level, kind, size) in enumerate([("1", "Data", "48K"), ("1", "Instruction", "32K"),
                                                 ("2", "Unified", "1280K"), ("3", "Unified", "30M")]):
        folder = tmp_path / f"cpu{cpu}" / "cache" / f"index{index}"
        folder.mkdir(parents=True)
        for name, text in (("level", level), ("type", kind), ("size", size)):
            (folder / name).write_text(text + "\n")
    assert cache_mb("cpu", root=tmp_path) == pytest.approx(1.25)
    assert cache_mb("cpu", root=tmp_path / "nothing") is None
