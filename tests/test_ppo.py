"""PPO search core: budget masking, determinism, duplicates, failures, resume (the NNI tuner: test_ppo_tuner.py)."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
import torch
from handmade import tiny_config, tiny_table

from nni_hwaware.cost_model import BlockCostModel, CostFactor, SpaceCostModel
from nni_hwaware.errors import HwAwareError
from nni_hwaware.spaces import SpaceConfig, StageConfig
from nni_hwaware.strategies.budget import Budget, BudgetMask
from nni_hwaware.strategies.gaussian_process import HammingGP, expected_improvement, normal_scores
from nni_hwaware.strategies.ppo import PPOConfig, PPOSearch

# Latency of every architecture of the hand-made table (fixed parts 0.75 ms):
#   layer1_0: skip 0.1, basic 2.0, bottleneck 1.0;  layer2_0: skip 0.2, basic 4.0, bottleneck 1.0
LAT1 = {"skip": 0.1, "basic": 2.0, "bottleneck": 1.0}
LAT2 = {"skip": 0.2, "basic": 4.0, "bottleneck": 1.0}


def latency(arch: dict[str, str]) -> float:
    return 0.75 + LAT1[arch["layer1_0"]] + LAT2[arch["layer2_0"]]


@pytest.fixture
def model() -> BlockCostModel:
    return BlockCostModel(tiny_table(), tiny_config())


def feasible(limit: float) -> set[tuple[str, str]]:
    return {(a, b) for a, b in itertools.product(LAT1, LAT2) if 0.75 + LAT1[a] + LAT2[b] <= limit}


@pytest.mark.parametrize("limit", [1.05, 2.0, 2.75, 3.0, 5.0, 100.0])
def test_mask_is_exact_for_a_latency_budget(model: BlockCostModel, limit: float) -> None:
    mask = BudgetMask(model, Budget(latency_ms=limit))
    names1, names2 = model.candidates
    reachable = set()
    for i in range(3):
        if mask.allowed([])[i]:
            for j in range(3):
                if mask.allowed([i])[j]:
                    reachable.add((names1[i], names2[j]))
    assert reachable == feasible(limit)


def test_search_proposes_every_feasible_architecture_once_and_never_over_budget(model: BlockCostModel) -> None:
    search = PPOSearch(model, Budget(latency_ms=3.0), PPOConfig(seed=3, update_every=2))
    seen = []
    while (arch := search.ask()) is not None:
        assert latency(arch) <= 3.0
        seen.append((arch["layer1_0"], arch["layer2_0"]))
        search.tell(arch, {"default": 0.5})
    assert sorted(seen) == sorted(feasible(3.0)) and len(seen) == len(set(seen))


def test_memory_budget_mask_uses_weights_plus_largest_activation(model: BlockCostModel) -> None:
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


def test_budget_below_the_cheapest_names_the_cheapest(model: BlockCostModel) -> None:
    with pytest.raises(HwAwareError, match=r"cheapest achievable is latency_ms 1.05 > budget 1"):
        PPOSearch(model, Budget(latency_ms=1.0))


def test_same_seed_same_decisions_and_global_rng_untouched(model: BlockCostModel) -> None:
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
    model = BlockCostModel(CostTable.from_records(records), config)
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


def test_failures_and_nan_get_the_failure_reward(model: BlockCostModel) -> None:
    search = PPOSearch(model, None, PPOConfig(seed=0, failure_reward=-1.0))
    a, b = search.ask(), search.ask()
    assert search.tell(a, None) == -1.0
    assert search.tell(b, {"default": math.nan}) == -1.0


def test_state_round_trip_continues_identically(model: BlockCostModel) -> None:
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
def test_rewards(model: BlockCostModel, reward: str, metrics: dict, expected: float) -> None:
    search = PPOSearch(model, Budget(latency_ms=100.0), PPOConfig(reward=reward, mnas_target_ms=1.0))
    arch = search.ask()
    assert search.tell(arch, metrics) == pytest.approx(expected)


def _coupled_model() -> SpaceCostModel:
    """Three labels whose costs couple neighbours (a width feeding the next layer): not separable."""
    rng = np.random.default_rng(0)

    def costs(shape: tuple[int, ...]) -> dict[str, np.ndarray]:
        return {m: rng.uniform(0.1, 1.0, shape) * (1e6 if m in ("flops", "params") else 1.0)
                for m in ("latency_ms", "param_mb", "activation_mb", "flops", "params")}

    choices = {"a": ["x", "y", "z"], "b": ["p", "q"], "c": ["u", "v", "w"]}
    factors = [CostFactor(("a", "b"), costs((3, 2))), CostFactor(("b", "c"), costs((2, 3))),
               CostFactor(("c",), costs((3,)))]
    return SpaceCostModel(choices, factors, {"latency_ms": 0.1})


@pytest.mark.parametrize("budget", [Budget(latency_ms=2.0), Budget(memory_mb=2.0),
                                    Budget(latency_ms=2.2, flops=2.0e6)])
def test_coupled_costs_bound_only_the_budgeted_metrics_and_every_feasible_arch_is_proposed_once(
        budget: Budget) -> None:
    model = _coupled_model()
    mask = BudgetMask(model, budget)
    assert not mask.separable
    for prefix in ([], [0], [2], [1, 1], [2, 0]):
        ours = mask._bounds(prefix)
        assert set(ours) == set(budget.limits())  # only what the budget needs
        reference = model.lower_bounds(prefix)
        for metric, values in ours.items():
            np.testing.assert_allclose(values, reference[metric])
    feasible = {k for k in itertools.product(range(3), range(2), range(3)) if mask.within(k)}
    assert set(mask.enumerate()) == feasible
    search = PPOSearch(model, budget, PPOConfig(seed=1))
    proposed = []
    while (arch := search.ask()) is not None:
        proposed.append(search.actions_of(arch))
        search.tell(arch, {"default": float(sum(proposed[-1]))})
    assert sorted(proposed) == sorted(feasible)


def test_batched_look_ahead_equals_the_per_prefix_one(model: BlockCostModel) -> None:
    mask = BudgetMask(model, Budget(latency_ms=3.0, flops=5e6))
    prefixes = np.array([[0], [1], [2]])
    batch = mask.needs_batch(prefixes)
    allowed = mask.allowed_batch(batch)
    for b, prefix in enumerate(prefixes):
        single = mask.needs(list(prefix))
        for metric, values in single.items():
            np.testing.assert_allclose(batch[metric][b, : len(values)], values)
        np.testing.assert_array_equal(allowed[b, : len(single["latency_ms"])], mask.allowed(list(prefix)))


def test_normal_scores_are_rank_based_and_the_surrogate_interpolates() -> None:
    scores = normal_scores(np.array([0.1, 5.0, 0.1, 100.0]))
    assert scores[0] == scores[2] and scores[0] < scores[1] < scores[3]  # ties share; scale-free
    np.testing.assert_allclose(normal_scores(np.array([1.0, 2.0, 3.0])), -normal_scores(np.array([3.0, 2.0, 1.0])))
    x = np.array([[0, 0, 0], [1, 1, 1], [2, 2, 2], [0, 1, 2], [2, 1, 0]])
    y = np.array([-1.0, 0.0, 1.0, 0.2, 0.4])
    gp = HammingGP(3)
    gp.fit(x, y)
    mean, std = gp.predict(x)
    np.testing.assert_allclose(mean, y, atol=0.15)
    _, far = gp.predict(np.array([[1, 0, 2]]))
    assert far[0] > std.max()
    ei = expected_improvement(np.array([0.0, 0.0, 1.0]), np.array([0.1, 1.0, 0.1]), best=0.5)
    assert ei[2] > ei[1] > ei[0] > 0


def test_the_surrogate_extrapolates_a_trend_in_the_predicted_costs_beyond_the_architectures_tried() -> None:
    """Accuracy grows with compute; only cheap architectures are tried, none with the costliest value.
    With the table's costs as features, the costliest architecture is predicted above every result;
    the Hamming kernel alone, which knows nothing of a value never tried, predicts it below."""
    keys = np.asarray(list(itertools.product(range(4), repeat=5)))
    compute = keys.sum(axis=1).astype(float)[:, None]  # each value costs its index: FLOPs-like
    top = np.asarray([[3] * 5])
    for seed in range(5):
        rng = np.random.default_rng(seed)
        tried = rng.choice(np.flatnonzero(keys.max(axis=1) <= 2), 40, replace=False)
        targets = (compute[tried, 0] - compute[tried, 0].mean()) / compute[tried, 0].std()
        targets += rng.normal(0, 0.1, len(tried))
        centre, spread = compute[tried].mean(axis=0), compute[tried].std(axis=0)
        with_trend = HammingGP(5)
        with_trend.fit(keys[tried], targets, (compute[tried] - centre) / spread)
        assert with_trend.trend == 1.0
        assert with_trend.predict(top, (compute[-1:] - centre) / spread)[0][0] > targets.max()
        alone = HammingGP(5)
        alone.fit(keys[tried], targets)
        assert alone.trend == 0.0 and alone.predict(top)[0][0] < targets.max()


def test_the_surrogate_learns_which_labels_decide_the_accuracy() -> None:
    """Two of six labels decide the target; the others only add noise. With a weight per label
    (``ard``), the two deciding labels weigh more than every other, and the held-out architectures
    are predicted better than with one length scale for all (every seed of 5)."""
    keys = np.asarray(list(itertools.product(range(5), repeat=6)))
    for seed in range(5):
        rng = np.random.default_rng(seed)
        effect = rng.normal(size=(2, 5))
        target = effect[0, keys[:, 0]] + effect[1, keys[:, 3]] + rng.normal(0, 0.05, len(keys))
        target = (target - target.mean()) / target.std()
        tried = rng.choice(len(keys), 40, replace=False)
        held = np.setdiff1d(np.arange(len(keys)), tried)[:2000]
        errors = {}
        for ard in (True, False):
            gp = HammingGP(6, ard=ard)
            gp.fit(keys[tried], target[tried])
            errors[ard] = float(np.sqrt(np.mean((gp.predict(keys[held])[0] - target[held]) ** 2)))
            if ard:
                assert gp.weights is not None
                assert min(gp.weights[0], gp.weights[3]) > max(np.delete(gp.weights, [0, 3])), gp.weights
            else:
                assert gp.weights is None
        assert errors[True] < errors[False], errors
    # too few results for a weight each: the grid's one length scale
    few = HammingGP(6, ard=True)
    few.fit(keys[:HammingGP.ARD_MIN_RESULTS - 1], np.linspace(-1, 1, HammingGP.ARD_MIN_RESULTS - 1))
    assert few.weights is None


def test_the_search_gives_the_surrogate_the_tables_predictions_as_features(model: BlockCostModel) -> None:
    search = PPOSearch(model, Budget(latency_ms=3.0), PPOConfig(seed=0))
    keys = np.asarray([search.actions_of(dict(zip(["layer1_0", "layer2_0"], pair, strict=True)))
                       for pair in itertools.product(LAT1, LAT2)])
    features = search._trend_features(keys)
    assert features.shape == (9, 3) and np.isfinite(features).all()
    np.testing.assert_allclose(np.exp(features[:, 0]), [search.predicted(tuple(k))["latency_ms"] for k in keys])
    assert PPOSearch(model, Budget(latency_ms=3.0), PPOConfig(seed=0, trend=False)).surrogate.features is None
    assert search.surrogate.gp.ard and not PPOSearch(model, Budget(latency_ms=3.0),
                                                     PPOConfig(seed=0, ard=False)).surrogate.gp.ard


def _additive_toy() -> tuple[np.ndarray, SpaceCostModel, Budget]:
    """6 labels x 5 values (NB201-like), a reward additive per label, a latency budget."""
    rng = np.random.default_rng(3)
    weights = rng.normal(size=(6, 5))
    choices = {f"e{i}": [f"o{j}" for j in range(5)] for i in range(6)}
    zero = {m: np.zeros(5) for m in ("latency_ms", "param_mb", "activation_mb", "flops", "params")}
    latency = rng.uniform(0.1, 1.0, (6, 5))
    model = SpaceCostModel(choices, [CostFactor((f"e{i}",), {**zero, "latency_ms": latency[i]}) for i in range(6)], {})
    return weights, model, Budget(latency_ms=float(np.quantile(latency.sum(axis=0), 0.3)) + 0.8)


def _trials_to_best(seed: int, trials: int = 100, **options: object) -> int | None:
    weights, model, budget = _additive_toy()
    search = PPOSearch(model, budget, PPOConfig(seed=seed, **options))
    best = max(float(weights[np.arange(6), k].sum()) for k in search.mask.enumerate())
    for trial in range(1, trials + 1):
        arch = search.ask()
        value = float(weights[np.arange(6), search.actions_of(arch)].sum())
        search.tell(arch, {"default": value})
        if value >= best - 1e-12:
            return trial
    return None


@pytest.mark.slow
def test_surrogate_screening_finds_the_best_of_an_additive_reward_in_every_seed() -> None:
    """Over 20 seeds, the best of 12,325 feasible architectures within 100 trials every time, 50 at the median.

    Asserted over seeds, not one path: another CPU's float kernels change a seed's path. Without
    the incumbents' neighbours in the screened pool (``local_best=0``) 6-8 seeds in 20 stalled one
    label away from the best (their policy drew the best with a probability of ~1e-6 and no draw's
    expected improvement exceeded 1e-3).
    """
    found = [_trials_to_best(seed) for seed in range(20)]
    assert all(t is not None for t in found), found
    assert float(np.median(found)) <= 50, found


@pytest.mark.parametrize(("options", "message"), [
    ({"reward_norm": "softmax"}, "reward_norm must be"), ({"surrogate": "forest"}, "surrogate must be"),
    ({"explore": 1.5}, "explore must be in"), ({"entropy_floor": 1.0}, "entropy_floor must be in"),
    ({"screen": 0}, "screen must be >= 1"), ({"replay_best": -1}, "replay_best must be >= 0"),
    ({"local_best": -1}, "local_best must be >= 0"), ({"local_ei": -0.1}, "local_ei must be >= 0")])
def test_bad_options_are_one_line_errors(options: dict, message: str) -> None:
    with pytest.raises(HwAwareError, match=message):
        PPOConfig.from_dict(options)


@pytest.mark.parametrize("option", ["trend", "ard", "correct", "margin", "cost_features"])
def test_a_ppo_switch_given_as_a_string_is_a_one_line_error(option: str) -> None:
    with pytest.raises(HwAwareError, match=f"PPO options: {option} must be true or false, got 'no'"):
        PPOConfig.from_dict({option: "no"})
    assert getattr(PPOConfig.from_dict({option: False}), option) is False


def test_single_episode_updates_with_masked_values_stay_finite(model: BlockCostModel) -> None:
    """Masked values once made torch's entropy gradient NaN (float minimum x 0, scaled by the floor)."""
    search = PPOSearch(model, Budget(latency_ms=3.0), PPOConfig(seed=0, replay_best=0, update_every=1, screen=1))
    for _ in range(3):
        for arch in [search.arch_of(k) for k in search.mask.enumerate()]:
            search.tell(arch, {"default": latency(arch)})
    assert search.updates == 15
    assert all(torch.isfinite(p).all() for p in search.policy.parameters())
