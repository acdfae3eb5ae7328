"""The zero-cost proxy: SynFlow's known values, scores of a hub space's networks, and the PPO search using them."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn

from nni_hwaware.cost_model import CostFactor, SpaceCostModel
from nni_hwaware.errors import HwAwareError
from nni_hwaware.strategies.budget import Budget
from nni_hwaware.strategies.ppo import PPOConfig, PPOSearch
from nni_hwaware.zero_cost import ProxyScores, synflow


def test_synflow_of_a_linear_network_is_its_flow_through_each_layer_and_leaves_it_unchanged() -> None:
    """Two bias-free linear layers: the output sum R = 1^T |W2| |W1| 1 is linear in each layer's
    weights, so each layer's sum of |w dR/dw| is R and the score is 2R."""
    torch.manual_seed(0)
    network = nn.Sequential(nn.Linear(4, 3, bias=False), nn.Linear(3, 2, bias=False)).train()
    before = {k: v.clone() for k, v in network.state_dict().items()}
    w1, w2 = (m.weight.detach().double().abs() for m in network)
    flow = float(torch.ones(2, dtype=torch.float64) @ w2 @ w1 @ torch.ones(4, dtype=torch.float64))
    assert synflow(network, (1, 4)) == pytest.approx(2 * flow, rel=1e-12)
    assert synflow(network, torch.zeros(1, 4)) == pytest.approx(2 * flow, rel=1e-12)  # only the shape counts
    assert network.training and all(p.dtype == torch.float32 and p.grad is None for p in network.parameters())
    for key, value in network.state_dict().items():
        assert torch.equal(value, before[key])


def test_synflow_counts_only_the_paths_that_reach_the_output() -> None:
    class Cut(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.a, self.b = nn.Linear(4, 4, bias=False), nn.Linear(4, 2, bias=False)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.b(self.a(x) * 0.0)

    assert synflow(Cut(), (1, 4)) == 0.0
    with pytest.raises(HwAwareError, match="input shape of positive sizes"):
        synflow(Cut(), (1, 0))


def test_clipping_activations_are_scored_as_relu() -> None:
    """ReLU6 would cut the flow wherever an activation passed 6; scored as ReLU, the network is linear."""
    torch.manual_seed(0)
    clipped = nn.Sequential(nn.Linear(4, 8, bias=False), nn.ReLU6(), nn.Linear(8, 2, bias=False))
    with torch.no_grad():
        clipped[0].weight.mul_(20.0)  # activations of about 20-40: ReLU6 would clip every one
    plain = nn.Sequential(clipped[0], nn.ReLU(), clipped[2])
    assert synflow(clipped, (1, 4)) == synflow(plain, (1, 4)) > 0
    assert isinstance(clipped[1], nn.ReLU6)  # scored on a copy


@pytest.fixture(scope="module")
def nb201_replica():
    from nni_hwaware.spaces.resolve import resolve_space

    return resolve_space("nni:NasBench201", stem_out_channels=4, num_modules_per_stack=1)


def _cell(op: str) -> dict[str, str]:
    return {f"cell/{a}_{b}": op for a, b in ((0, 1), (0, 2), (1, 2), (0, 3), (1, 3), (2, 3))}


def test_proxy_scores_of_a_hub_space_are_cached_deterministic_and_rank_a_dead_cell_last(nb201_replica) -> None:
    state = torch.random.get_rng_state()
    scores = ProxyScores(nb201_replica, input_shape=(3, 8, 8))
    cells = [_cell("none"), _cell("skip_connect"), _cell("conv_3x3"), _cell("conv_1x1")]
    first = scores(cells)
    assert scores.computed == 4 and np.isfinite(first).all()
    np.testing.assert_array_equal(scores(cells[::-1]), first[::-1])
    assert scores.computed == 4  # asked again: read from the cache
    np.testing.assert_array_equal(ProxyScores(nb201_replica, input_shape=(3, 8, 8))(cells), first)
    # every edge 'none': only the stem-to-head shortcuts carry flow; convolutions carry the most
    assert first[0] == first.min() and first[2] == first.max()
    assert torch.equal(torch.random.get_rng_state(), state)
    with pytest.raises(HwAwareError, match="unknown zero-cost proxy"):
        ProxyScores(nb201_replica, proxy="snip")


def _interaction_toy() -> tuple[SpaceCostModel, Budget, dict[tuple[int, ...], float]]:
    """6 labels x 5 values; the accuracy a sum of random pairwise interactions (no label alone
    tells it), the costs additive and unrelated to it; the proxy sees the accuracy with noise."""
    rng = np.random.default_rng(5)
    pairs = rng.normal(size=(6, 6, 5, 5))
    choices = {f"e{i}": [f"o{j}" for j in range(5)] for i in range(6)}
    zero = {m: np.zeros(5) for m in ("latency_ms", "param_mb", "activation_mb", "flops", "params")}
    latency = rng.uniform(0.1, 1.0, (6, 5))
    model = SpaceCostModel(choices, [CostFactor((f"e{i}",), {**zero, "latency_ms": latency[i]}) for i in range(6)], {})
    totals = latency[np.arange(6)[:, None], np.indices((5,) * 6).reshape(6, -1)].sum(axis=0)
    budget = Budget(latency_ms=float(np.quantile(totals, 0.3)))

    def accuracy(key: tuple[int, ...]) -> float:
        return float(sum(pairs[i, j, key[i], key[j]] for i in range(6) for j in range(i + 1, 6)))

    return model, budget, accuracy


def _regret(seed: int, proxy: bool, trials: int = 25) -> float:
    """The best feasible accuracy less the best of ``trials`` proposals."""
    model, budget, accuracy = _interaction_toy()
    noise = np.random.default_rng(100 + seed)

    def scores(archs: list[dict[str, str]]) -> np.ndarray:
        return np.asarray([accuracy(tuple(int(a[f"e{i}"][1]) for i in range(6))) for a in archs]) \
            + noise.normal(scale=0.5, size=len(archs))

    search = PPOSearch(model, budget, PPOConfig(seed=seed, proxy="synflow" if proxy else "none"),
                       proxy=scores)
    best, found = max(accuracy(k) for k in search.mask.enumerate()), -np.inf
    for _ in range(trials):
        arch = search.ask()
        found = max(found, value := accuracy(search.actions_of(arch)))
        search.tell(arch, {"default": value})
    return best - found


def test_a_proxy_that_sees_what_the_costs_cannot_finds_better_networks_sooner() -> None:
    """Over four seeds (another CPU's kernels change a seed's path), 25 trials among ~4,700 feasible
    networks whose accuracy no label alone explains: the proxy at least halves the mean regret."""
    model, budget, _ = _interaction_toy()
    assert 1000 < len(PPOSearch(model, budget, PPOConfig(proxy="none")).mask.enumerate()) < 10_000
    with_proxy = [_regret(seed, True) for seed in range(4)]
    without = [_regret(seed, False) for seed in range(4)]
    assert np.mean(with_proxy) * 2 <= np.mean(without), (with_proxy, without)


def test_the_search_asks_the_proxy_once_per_architecture_and_checks_its_answers() -> None:
    model, budget, accuracy = _interaction_toy()
    asked: list[str] = []

    def scores(archs: list[dict[str, str]]) -> np.ndarray:
        asked.extend(str(sorted(a.items())) for a in archs)
        return np.arange(len(archs), dtype=float)

    search = PPOSearch(model, budget, PPOConfig(seed=0), proxy=scores)
    for _ in range(12):
        arch = search.ask()
        search.tell(arch, {"default": accuracy(search.actions_of(arch))})
    assert asked and len(asked) == len(set(asked)) == len(search._proxy_scores)
    keys = np.asarray(list(search._proxy_scores)[:3])
    assert search._trend_features(keys).shape == (3, 4)
    assert PPOSearch(model, budget, PPOConfig(seed=0, proxy="none"), proxy=scores).proxy is None
    assert PPOSearch(model, budget, PPOConfig(seed=0)).proxy is None  # no scores given: the costs alone

    bad = PPOSearch(model, budget, PPOConfig(seed=0), proxy=lambda archs: np.full(len(archs), np.nan))
    with pytest.raises(HwAwareError, match="one finite score per architecture"):
        bad._trend_features(keys)


@pytest.mark.parametrize(("options", "message"), [
    ({"proxy": "snip"}, "proxy must be one of synflow, naswot, synflow\\+naswot, none"),
    ({"proxy_input_shape": [3, 0, 16]}, "proxy_input_shape must be per-sample sizes"),
    ({"proxy_space_args": [1, 2]}, "proxy_space_args must be a mapping"),
    ({"proxy_space_args": {"input_shape": [3, 8, 8]}}, r"not \['input_shape'\]; give the proxy's input shape"),
    ({"proxy_input_shape": [True, 8, 8]}, "proxy_input_shape must be per-sample sizes")])
def test_bad_proxy_options_are_one_line_errors(options: dict, message: str) -> None:
    with pytest.raises(HwAwareError, match=message):
        PPOConfig.from_dict(options)
    assert PPOConfig(proxy_input_shape=[3, 8, 8]).proxy_input_shape == (3, 8, 8)  # from Python too


def test_proxy_scores_round_trip_through_their_file_and_refuse_another_spaces(nb201_replica, tmp_path) -> None:
    scores = ProxyScores(nb201_replica, input_shape=(3, 8, 8))
    cells = [_cell("conv_3x3"), _cell("avg_pool_3x3")]
    first = scores(cells)
    scores.save(tmp_path / "proxy_scores.csv")
    again = ProxyScores(nb201_replica, input_shape=(3, 8, 8))
    assert again.load(tmp_path / "proxy_scores.csv") == 2
    np.testing.assert_array_equal(again(cells), first)
    assert again.computed == 0  # read, not scored
    (tmp_path / "other.csv").write_text("layer1_0,log_score,proxy\nskip,1.0,synflow\n")
    with pytest.raises(HwAwareError, match="lack columns"):
        again.load(tmp_path / "other.csv")
    (tmp_path / "nan.csv").write_text(",".join([*scores.labels, "log_score", "proxy"]) + "\n"
                                      + ",".join(["none"] * 6 + ["oops", "synflow"]) + "\n")
    with pytest.raises(HwAwareError, match="line 2: log_score 'oops' is not a number"):
        again.load(tmp_path / "nan.csv")


def test_the_tuner_scores_the_networks_it_screens_and_keeps_the_scores_for_a_resume(tmp_path, monkeypatch) -> None:
    from handmade import tiny_tuner

    monkeypatch.chdir(tmp_path)  # outside NNI the tuner writes to ./hwaware-outputs
    state = tmp_path / "ppo_state.pt"
    tuner = tiny_tuner(tmp_path, ppo={"seed": 0}, state_file=str(state), search_trials=6, retrain={"epochs": 1})
    for i in range(6):
        params = tuner.generate_parameters(i)
        tuner.receive_trial_result(i, params, {"default": 0.1 * i})
    session = tuner._session()
    scored = session.proxy.computed
    assert scored == len(tuner.search._proxy_scores) > 0
    stats = session.stats()["proxy"]
    # the default: both proxies, one column each
    assert stats["proxy"] == "synflow+naswot" and stats["networks"] == scored and stats["ms_per_network"] > 0
    written = tuner.output_dir / "proxy_scores.csv"
    assert "log_score_synflow,log_score_naswot" in written.read_text().splitlines()[0]
    resumed = tiny_tuner(tmp_path, ppo={"seed": 0}, state_file=str(state), search_trials=6, retrain={"epochs": 1})
    assert resumed._session().proxy.computed == 0 and len(resumed._session().proxy.cache) == scored
    with pytest.raises(HwAwareError, match="PPO option proxy_scores: no file"):
        tiny_tuner(tmp_path / "x", ppo={"proxy_scores": str(tmp_path / "missing.csv")})
    with pytest.raises(HwAwareError, match="proxy_space_args needs a space built from its name"):
        tiny_tuner(tmp_path / "y", ppo={"proxy_space_args": {"width": 2}})


def test_scores_of_another_replica_are_refused_and_a_bad_replica_fails_before_the_search(
        nb201_replica, tmp_path, monkeypatch) -> None:
    from handmade import tiny_tuner

    scores = ProxyScores(nb201_replica, input_shape=(3, 8, 8))
    scores([_cell("conv_3x3")])
    scores.save(tmp_path / "proxy_scores.csv")
    with pytest.raises(HwAwareError, match=r"not of synflow on .*16, 16"):
        ProxyScores(nb201_replica, input_shape=(3, 16, 16)).load(tmp_path / "proxy_scores.csv")
    monkeypatch.chdir(tmp_path)
    with pytest.raises(HwAwareError, match=r"cannot score a network of .* with inputs of \[5, 8, 8\]: RuntimeError"):
        tiny_tuner(tmp_path / "z", ppo={"proxy_input_shape": [5, 8, 8]})


def test_the_proxys_time_counts_as_decision_time_wherever_it_is_asked() -> None:
    import time as clock

    model, budget, accuracy = _interaction_toy()

    def slow(archs: list[dict[str, str]]) -> np.ndarray:
        clock.sleep(0.01 * len(archs))
        return np.zeros(len(archs))

    search = PPOSearch(model, budget, PPOConfig(seed=0), proxy=slow)
    archs = [dict(zip(search.labels, (f"o{(i + j) % 5}" for j in range(6)), strict=True)) for i in range(5)]
    for arch in archs:  # results the search did not propose (an import): scored when the surrogate fits
        search.tell(arch, {"default": accuracy(search.actions_of(arch))})
    assert search.decisions == 0 and search.decision_seconds >= 0.05


def test_a_state_saved_before_the_proxy_options_existed_resumes() -> None:
    model, budget, _ = _interaction_toy()
    search = PPOSearch(model, budget, PPOConfig(seed=0, proxy="none"))
    arch = search.ask()
    search.tell(arch, {"default": 1.0})
    state = search.state_dict()
    for key in ("proxy", "proxy_space_args", "proxy_input_shape", "proxy_scores"):
        state["config"].pop(key)
    resumed = PPOSearch(model, budget, PPOConfig(seed=0))  # the proxy on, as the old state's default reads
    resumed.load_state_dict(state)
    assert len(resumed.history.order) == 1
    with pytest.raises(HwAwareError, match=r"made with other options \(risk: 0.02 saved, 0.05 now\)"):
        PPOSearch(model, budget, PPOConfig(seed=0, risk=0.05)).load_state_dict(state)


def test_the_proxy_command_scores_a_space_ahead_and_a_search_then_scores_nothing(tmp_path, monkeypatch, capsys) -> None:
    from handmade import tiny_config, tiny_tuner

    from nni_hwaware.cli import main

    monkeypatch.chdir(tmp_path)  # outside NNI the tuner writes to ./hwaware-outputs
    space = tmp_path / "space.json"
    space.write_text(tiny_config().to_json())
    out = tmp_path / "scores.csv"
    assert main(["proxy", "--space", str(space), "--out", str(out)]) == 0
    every = int(np.prod([len(spec.candidates) for spec in tiny_config().layer_specs()]))
    assert len(out.read_text().splitlines()) == every + 1
    tuner = tiny_tuner(tmp_path / "run", ppo={"seed": 0, "proxy_scores": str(out)}, search_trials=6,
                       retrain={"epochs": 1})
    for i in range(5):
        params = tuner.generate_parameters(i)
        tuner.receive_trial_result(i, params, {"default": 0.1 * i})
    assert tuner._session().proxy.computed == 0 and len(tuner.search._proxy_scores) > 0
    assert main(["proxy", "--space", "nni:ProxylessNAS", "--out", str(tmp_path / "x.csv")]) == 2
    assert main(["proxy", "--space", str(space), "--input-shape", "3xx", "--out", str(tmp_path / "x.csv")]) == 2
    assert not (tmp_path / "x.csv").exists()
    errors = capsys.readouterr().err.splitlines()
    assert errors[-2].startswith("nni-hwaware proxy: error: space nni:ProxylessNAS has 2.25e+19 networks")
    assert errors[-1] == "nni-hwaware proxy: error: --input-shape must be sizes such as 3x16x16, got '3xx'"


class _Gate(nn.Module):
    """A ReLU on the input's features picked by ``index`` (each feature one unit)."""

    def __init__(self, index: list[int]) -> None:
        super().__init__()
        self.index, self.relu = index, nn.ReLU()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.relu(x[:, self.index])


def test_naswot_of_a_network_blind_to_its_input_is_the_ridged_kernels_known_determinant() -> None:
    """Every unit codes every input alike: K = u 11^T, so with the ridge r u the eigenvalues are
    u (B + r) once and r u B - 1 times."""
    from nni_hwaware.zero_cost import NASWOT_RIDGE, naswot

    class Blind(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.relu = nn.ReLU()

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.relu(torch.ones(x.shape[0], 5))

    u, b, r = 5, 16, NASWOT_RIDGE
    expected = np.log(u * (b + r)) + (b - 1) * np.log(r * u)
    assert naswot(Blind(), (1, 3)) == pytest.approx(expected, rel=1e-12)
    assert naswot(Blind(), (1, 3), batch=4) == pytest.approx(np.log(u * (4 + r)) + 3 * np.log(r * u), rel=1e-12)


def test_naswot_ranks_units_that_split_the_inputs_apart_above_units_that_copy_one_another() -> None:
    """Eight units on eight independent Gaussian features tell 16 inputs apart; eight copies of one
    feature code them no better than one unit does."""
    from nni_hwaware.zero_cost import naswot

    independent, copies, fewer = _Gate(list(range(8))), _Gate([0] * 8), _Gate(list(range(4)))
    for seed in range(3):
        scores = [naswot(m, (1, 8), seed=seed) for m in (independent, fewer, copies)]
        assert scores[0] > scores[1] > scores[2]
    assert naswot(independent, (1, 8), seed=1) == naswot(independent, torch.zeros(1, 8), seed=1)  # the shape counts
    assert naswot(independent, (1, 8), seed=1) != naswot(independent, (1, 8), seed=2)


def test_naswot_leaves_the_module_as_it_was_and_says_what_it_cannot_score() -> None:
    from nni_hwaware.zero_cost import naswot

    torch.manual_seed(0)
    network = nn.Sequential(nn.Linear(4, 6), nn.BatchNorm1d(6), nn.ReLU(), nn.Linear(6, 2)).train()
    before = {k: v.clone() for k, v in network.state_dict().items()}
    assert np.isfinite(naswot(network, (1, 4)))
    assert network.training and not network[2]._forward_hooks
    for key, value in network.state_dict().items():
        assert torch.equal(value, before[key])
    with pytest.raises(HwAwareError, match="has none"):
        naswot(nn.Sequential(nn.Linear(4, 2)), (1, 4))
    with pytest.raises(HwAwareError, match="at least 2"):
        naswot(network, (1, 4), batch=1)


def test_both_proxies_score_a_hub_space_in_two_columns_that_round_trip_through_their_file(nb201_replica,
                                                                                          tmp_path) -> None:
    cells = [_cell("none"), _cell("skip_connect"), _cell("conv_3x3"), _cell("conv_1x1")]
    flow = ProxyScores(nb201_replica, input_shape=(3, 8, 8))(cells)
    wot = ProxyScores(nb201_replica, "naswot", input_shape=(3, 8, 8))(cells)
    both = ProxyScores(nb201_replica, "synflow+naswot", input_shape=(3, 8, 8))
    scores = both(cells)
    assert scores.shape == (4, 2)
    np.testing.assert_array_equal(scores[:, 0], flow)  # each column as its proxy alone scores it
    np.testing.assert_array_equal(scores[:, 1], wot)
    assert wot[0] == wot.min() and np.isfinite(wot).all()  # every edge 'none': the least, and finite
    both.save(tmp_path / "proxy_scores.csv")
    again = ProxyScores(nb201_replica, "synflow+naswot", input_shape=(3, 8, 8))
    assert again.load(tmp_path / "proxy_scores.csv") == 4 and again.computed == 0
    np.testing.assert_array_equal(again(cells), scores)
    # a search of one proxy given both's scores (or the other way round) says what to do
    with pytest.raises(HwAwareError, match=r"are of proxy synflow\+naswot, and this search scores synflow; "
                                           r"score them with `nni-hwaware proxy --proxy synflow` or set "
                                           r"proxy: synflow\+naswot$"):
        ProxyScores(nb201_replica, input_shape=(3, 8, 8)).load(tmp_path / "proxy_scores.csv")


def test_the_search_takes_a_row_of_scores_per_architecture_as_one_feature_each() -> None:
    model, budget, accuracy = _interaction_toy()

    def two(archs: list[dict[str, str]]) -> np.ndarray:
        keys = [tuple(int(a[f"e{i}"][1]) for i in range(6)) for a in archs]
        return np.asarray([[accuracy(k), float(sum(k))] for k in keys])

    search = PPOSearch(model, budget, PPOConfig(seed=0, proxy="synflow+naswot"), proxy=two)
    for _ in range(8):
        arch = search.ask()
        search.tell(arch, {"default": accuracy(search.actions_of(arch))})
    keys = [search.actions_of(search.ask())]
    assert search._trend_features(np.asarray(keys)).shape == (1, 5)  # 3 costs + 2 scores
    bad = PPOSearch(model, budget, PPOConfig(seed=0, proxy="synflow+naswot"), proxy=lambda a: np.zeros((len(a) + 1, 2)))
    with pytest.raises(HwAwareError, match="one finite score"):
        for _ in range(8):
            arch = bad.ask()
            bad.tell(arch, {"default": 0.5})


def _one_choice_space(candidates: dict[str, nn.Module], functional_relu: bool):
    """A user's space of one LayerChoice after a stem, with the stem's ReLU a function or a module."""
    from nni_hwaware.nni_fixes import import_nni_nas

    nas = import_nni_nas()

    class OneChoice(nas.ModelSpace):
        def __init__(self) -> None:
            super().__init__()
            self.stem = nn.Conv2d(1, 4, 3, padding=1)
            self.act = nn.Identity() if functional_relu else nn.ReLU()
            self.op = nas.LayerChoice(candidates, label="op")
            self.head = nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(4, 3))

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            x = self.act(self.stem(x))
            return self.head(self.op(torch.relu(x) if functional_relu else x))

    from nni_hwaware.spaces.resolve import resolve_space

    return resolve_space(OneChoice(), input_shape=(1, 8, 8), reference={"op": next(iter(candidates))})


def test_naswot_beside_synflow_is_dropped_where_the_space_has_no_activation_modules_and_refused_alone(
        caplog) -> None:
    named = _one_choice_space({"conv3": nn.Conv2d(4, 4, 3, padding=1), "conv1": nn.Conv2d(4, 4, 1)},
                              functional_relu=True)
    both = ProxyScores(named, "synflow+naswot")
    both.cache[("conv1",)] = (1.5, 2.5)  # scored as a row before (read from a file): SynFlow's part is kept
    with caplog.at_level("WARNING", logger="nni_hwaware.zero_cost"):
        score = both.check({"op": "conv3"})
    assert both.parts == ("synflow",) and both.proxy == "synflow" and both.columns == ["log_score"]
    assert score.shape == () and np.isfinite(score) and both.cache[("conv1",)] == 1.5
    assert "functional activations are not seen): the zero-cost proxy is synflow alone" in caplog.text
    assert both([{"op": "conv1"}, {"op": "conv3"}]).shape == (2,)  # one score a network from then on
    with pytest.raises(HwAwareError, match=r"networks of OneChoice have none .*use proxy: synflow"):
        ProxyScores(named, "naswot").check({"op": "conv3"})


def test_a_network_without_activation_units_scores_naswots_floor_the_lowest_a_batch_can_score() -> None:
    from nni_hwaware.zero_cost import NASWOT_RIDGE, naswot_floor

    batch = 16  # one unit on which all inputs agree: det(J + r I) = r^(B-1) (r + B)
    assert naswot_floor(batch) == pytest.approx((batch - 1) * np.log(NASWOT_RIDGE) + np.log(NASWOT_RIDGE + batch))
    named = _one_choice_space({"gated": nn.Sequential(nn.Conv2d(4, 4, 3, padding=1), nn.ReLU()),
                               "linear": nn.Conv2d(4, 4, 3, padding=1)}, functional_relu=True)
    both = ProxyScores(named, "synflow+naswot")
    both.check({"op": "gated"})  # the reference reads its ReLU: both proxies stay
    scores = both([{"op": "gated"}, {"op": "linear"}])
    assert scores.shape == (2, 2) and np.isfinite(scores).all()
    assert scores[1, 1] == pytest.approx(naswot_floor()) and scores[1, 1] < scores[0, 1]
