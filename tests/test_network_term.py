"""The per-network term: what whole networks cost beyond their leaves, fitted from a few of them."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from scipy import stats

from nni_hwaware.cost_model.calibration import CALIBRATION_SAMPLES, NetworkTerm, calibration_count, fit_network_term
from nni_hwaware.errors import HwAwareError

CHOICES = {"a": [0, 1, 2], "b": ["x", "y", "z", "w"], "c": [16, 32]}


def _truth(summed: float, sample: dict) -> float:
    """A chip on which every network pays 0.3 ms, 'b=w' costs 0.5 ms more than its leaves say and 'c=32' 0.2 ms."""
    return 1.2 * summed + 0.3 + (0.5 if sample["b"] == "w" else 0.0) + (0.2 if sample["c"] == 32 else 0.0)


def _networks(seed: int, n: int) -> tuple[list[dict], np.ndarray]:
    rng = np.random.default_rng(seed)
    everything = [dict(zip(CHOICES, at, strict=True)) for at in itertools.product(*CHOICES.values())]
    picked = [everything[i] for i in rng.choice(len(everything), n, replace=False)]
    return picked, rng.uniform(1.0, 4.0, n)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_the_term_recovers_offsets_the_ratio_alone_misses(seed: int) -> None:
    samples, summed = _networks(seed, 16)
    rng = np.random.default_rng(100 + seed)
    measured = np.array([_truth(s, x) for s, x in zip(summed, samples, strict=True)])
    measured *= np.exp(rng.normal(0, 0.01, len(measured)))  # 1 % timing noise
    term = fit_network_term(samples, summed, measured, CHOICES)
    assert term.scale == pytest.approx(1.2, rel=0.1)
    # new networks, never seen by the fit: all within 10 %, on average a third of the ratio alone's error
    tests, test_summed = _networks(seed + 50, 20)
    truth = np.array([_truth(s, x) for s, x in zip(test_summed, tests, strict=True)])
    fitted = np.abs(np.array([term.predict(s, x) for s, x in zip(test_summed, tests, strict=True)]) / truth - 1)
    alone = np.abs(float(np.median(measured / summed)) * test_summed / truth - 1)
    assert fitted.max() < 0.10
    assert fitted.mean() < alone.mean() / 3
    # the costly value is found the costliest of its label, by a good part of its 0.5 ms (shrunk toward 0)
    others = max(term.offset("b", v) for v in ("x", "y", "z"))
    assert 0.2 < term.offset("b", "w") - others < 0.6


def test_a_weighted_reference_is_fitted_closely() -> None:
    samples, summed = _networks(3, 12)
    measured = np.array([_truth(s, x) for s, x in zip(summed, samples, strict=True)])
    measured[-1] *= 1.15  # a network off the model: with weight it is fitted closer than without
    plain = fit_network_term(samples, summed, measured, CHOICES)
    weighted = fit_network_term(samples, summed, measured, CHOICES, weights=[1.0] * 11 + [3.0])
    error = lambda t: abs(t.predict(summed[-1], samples[-1]) / measured[-1] - 1)  # noqa: E731
    assert error(weighted) < error(plain)


def test_a_negative_constant_is_refitted_as_none() -> None:
    samples, summed = _networks(4, 12)
    measured = 1.5 * summed - 0.4  # a chip that is faster on small networks than its leaves say
    term = fit_network_term(samples, summed, measured, CHOICES)
    assert term.constant == 0.0
    assert term.scale > 0


def test_rows_of_earlier_versions_and_bad_rows() -> None:
    old = NetworkTerm.from_row(1.3, float("nan"), 0.25)  # a table without latency_terms: the ratio alone
    assert (old.scale, old.constant, old.offsets) == (1.3, 0.0, {})
    term = NetworkTerm(1.1, {"a": {"1": 0.2}}, 0.05)
    again = NetworkTerm.from_row(1.1, term.to_json(), 0.05)
    assert again.predict(2.0, {"a": 1}) == pytest.approx(1.1 * 2.0 + 0.05 + 0.2)
    assert again.offset("a", 7) == 0.0  # a value the calibration never saw
    with pytest.raises(HwAwareError, match="not JSON"):
        NetworkTerm.from_row(1.1, "{oops", 0.0)
    with pytest.raises(HwAwareError, match="latency_scale"):
        NetworkTerm.from_row("x", None, 0.0)
    with pytest.raises(HwAwareError, match="finite and positive"):
        fit_network_term([{"a": 0}], [0.0], [1.0], CHOICES)


SKELETON = {f"layer{i}": ["skip", "a", "b", "c"] for i in range(10)}
LEAF_MS = {"skip": 0.05, "a": 0.6, "b": 0.8, "c": 1.0}


def _skeleton_truth(sample: dict) -> float:
    """A chip where every network pays 0.6 ms and its leaves 1.1x what they cost alone."""
    return 1.1 * sum(LEAF_MS[v] for v in sample.values()) + 0.6


def test_networks_spanning_the_sizes_predict_the_small_ones_a_budgeted_search_ends_at() -> None:
    """Uniform networks of 10 labels all sit near the median size; fitted to them alone, the term
    extrapolates badly to the small networks. The calibration's half that leans toward the cheapest
    values pins the constant."""
    from nni_hwaware.cost_model.profile import calibration_samples, random_samples

    cheapest = dict.fromkeys(SKELETON, "skip")
    samples = calibration_samples(SKELETON, cheapest, 24, seed=0)
    assert len({tuple(s.values()) for s in samples}) == 24
    assert samples == calibration_samples(SKELETON, cheapest, 24, seed=0)  # seeded
    worst = {"uniform": [], "spanning": []}
    for seed in range(6):
        rng = np.random.default_rng(seed)
        small = calibration_samples(SKELETON, cheapest, 40, seed=900 + seed)[20:]  # the leaning half
        for name, fit_on in (("uniform", random_samples(SKELETON, 24, seed=seed)),
                             ("spanning", calibration_samples(SKELETON, cheapest, 24, seed=seed))):
            summed = np.array([sum(LEAF_MS[v] for v in s.values()) for s in fit_on])
            measured = np.array([_skeleton_truth(s) for s in fit_on]) * np.exp(rng.normal(0, 0.03, len(fit_on)))
            term = fit_network_term(fit_on, summed, measured, SKELETON)
            worst[name].append(max(abs(term.predict(sum(LEAF_MS[v] for v in s.values()), s) / _skeleton_truth(s) - 1)
                                   for s in small))
    assert max(worst["spanning"]) < 0.12, worst  # 3 % timing noise
    assert np.mean(worst["spanning"]) < 0.5 * np.mean(worst["uniform"]), worst


# -- the weights beyond the cache ---------------------------------------------------------------
def test_weights_beyond_the_cache_are_fitted_where_networks_exceed_it_and_round_trip() -> None:
    samples, summed = _networks(5, 16)
    weights = np.linspace(0.5, 3.5, 16)  # MB; a 2 MB cache: the largest five stream 0.25-1.5 MB a call
    measured = np.array([_truth(s, x) for s, x in zip(summed, samples, strict=True)]) + 0.4 * np.maximum(0, weights - 2)
    plain = fit_network_term(samples, summed, measured, CHOICES)
    term = fit_network_term(samples, summed, measured, CHOICES, weights_mb=weights, cache_mb=2.0)
    assert plain.beyond_cache is None
    assert term.beyond_cache is not None and term.beyond_cache.cache_mb == 2.0
    assert term.beyond_cache.ms_per_mb == pytest.approx(0.4, rel=0.25)
    error = lambda t, w: max(abs(t.predict(s, x, w) / m - 1)  # noqa: E731
                             for s, x, w, m in zip(summed, samples, w, measured, strict=True))
    assert error(term, weights) < 0.04 and error(term, weights) < error(plain, np.zeros(16)) / 3
    back = NetworkTerm.from_row(term.scale, term.to_json(), term.constant)
    assert back.beyond_cache.to_dict() == term.beyond_cache.to_dict() and back.offsets == term.offsets
    # no network over the cache, too few to carry the term (two), or networks faster beyond it: no term
    assert fit_network_term(samples, summed, measured, CHOICES, weights_mb=weights, cache_mb=8.0).beyond_cache is None
    assert fit_network_term(samples, summed, measured, CHOICES, weights_mb=weights, cache_mb=3.2).beyond_cache is None
    faster = measured - 0.8 * np.maximum(0, weights - 2)
    assert fit_network_term(samples, summed, faster, CHOICES, weights_mb=weights, cache_mb=2.0).beyond_cache is None
    with pytest.raises(HwAwareError, match="__weights_beyond_cache__"):
        NetworkTerm.from_row(1.0, '{"__weights_beyond_cache__": {"cache_mb": "x"}}')


WIDE = {f"layer{i}": list(range(16)) for i in range(8)}  # digits' shape: 8 layers of 16 blocks


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_a_space_of_wide_labels_gets_enough_calibration_networks_to_rank_by_its_offsets(seed: int) -> None:
    # a chip on which each (layer, block) costs up to 0.1 ms more or less than its leaf says: what an
    # offset must learn, and what only networks holding that block can tell
    rng = np.random.default_rng(seed)
    gap = {label: rng.uniform(-0.1, 0.1, len(values)) for label, values in WIDE.items()}
    leaf = {label: rng.uniform(0.1, 0.6, len(values)) for label, values in WIDE.items()}

    def networks(n: int, seed: int) -> tuple[list[dict], np.ndarray, np.ndarray]:
        draw = np.random.default_rng(seed)
        samples = [{label: int(draw.integers(16)) for label in WIDE} for _ in range(n)]
        summed = np.array([sum(leaf[k][v] for k, v in s.items()) for s in samples])
        truth = 1.1 * summed + 0.5 + np.array([sum(gap[k][v] for k, v in s.items()) for s in samples])
        return samples, summed, truth * np.exp(draw.normal(0, 0.01, n))  # 1 % timing noise

    assert calibration_count(WIDE) == 256 and calibration_count({"a": [0]}) == CALIBRATION_SAMPLES
    tests, test_summed, test_truth = networks(60, seed + 1000)

    def ranks(n: int) -> float:
        term = fit_network_term(*networks(n, seed + 10)[:3], WIDE)
        predicted = [term.predict(s, x) for s, x in zip(test_summed, tests, strict=True)]
        return float(stats.spearmanr(predicted, test_truth).statistic)

    few, enough = ranks(CALIBRATION_SAMPLES), ranks(calibration_count(WIDE))
    # (seeds 0-2: 0.94 / 0.90 / 0.92 with 24 networks)
    assert enough > few + 0.025
    assert enough > 0.93
