"""The registries of zero-cost proxies and of rewards: every entry works, names are unique, lookups say what exists."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from nni_hwaware.errors import HwAwareError
from nni_hwaware.strategies.budget import Budget
from nni_hwaware.strategies.ppo.config import PROXIES, REWARDS, PPOConfig
from nni_hwaware.strategies.ppo.rewards import get_reward, register_reward, reward_names, reward_of
from nni_hwaware.zero_cost import get_proxy, proxy_names, proxy_parts, register_proxy


def _tiny_network() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), nn.BatchNorm2d(4), nn.ReLU(), nn.AdaptiveAvgPool2d(1),
                         nn.Flatten(), nn.Linear(4, 2))


@pytest.mark.parametrize("name", proxy_names())
def test_every_registered_proxy_scores_a_tiny_network_to_a_finite_number(name: str) -> None:
    score = get_proxy(name).score(_tiny_network(), (1, 3, 8, 8))
    assert isinstance(score, float) and math.isfinite(score)


@pytest.mark.parametrize("name", reward_names())
def test_every_registered_reward_maps_a_result_to_a_float(name: str) -> None:
    metrics = {"default": 0.9, "latency_ms": 12.0, "flops": 3e6, "params": 1e4, "memory_mb": 2.0}
    reward = get_reward(name)(metrics, PPOConfig(reward=name), Budget(latency_ms=20.0))
    assert isinstance(reward, float) and math.isfinite(reward)
    assert reward_of(metrics, PPOConfig(reward=name), Budget(latency_ms=20.0)) == reward


def test_the_options_and_the_cli_read_the_registries() -> None:
    assert tuple(REWARDS) == reward_names() and set(proxy_names()) < set(PROXIES)
    assert "none" in PROXIES and "+".join(proxy_names()) in PROXIES  # every proxy at once, in the registry's order
    assert [p.name for p in proxy_parts("synflow+naswot")] == ["synflow", "naswot"]
    for name in (*reward_names(), *PROXIES):
        assert PPOConfig(**({"reward": name} if name in REWARDS else {"proxy": name}))


def test_registering_a_taken_name_raises_and_the_registries_stay_as_they_were() -> None:
    proxies, rewards = proxy_names(), reward_names()
    with pytest.raises(HwAwareError, match="zero-cost proxy name 'synflow' is already used by"):
        register_proxy("synflow")(lambda network, shape: 0.0)
    with pytest.raises(HwAwareError, match="reward name 'accuracy' is already used by"):
        register_reward("accuracy")(lambda metrics, config, budget: 0.0)
    with pytest.raises(HwAwareError, match="without '\\+'"):
        register_proxy("a+b")
    assert proxy_names() == proxies and reward_names() == rewards


def test_a_new_proxy_and_a_new_reward_are_one_decorated_function_each(monkeypatch: pytest.MonkeyPatch) -> None:
    import nni_hwaware.strategies.ppo.rewards as rewards
    import nni_hwaware.zero_cost as zero_cost

    monkeypatch.setattr(zero_cost, "_PROXIES", dict(zero_cost._PROXIES))
    monkeypatch.setattr(rewards, "_REWARDS", dict(rewards._REWARDS))

    @register_proxy("param_count")
    def _params(network: nn.Module, shape: tuple[int, ...]) -> float:
        return math.log1p(sum(p.numel() for p in network.parameters()))

    @register_reward("half_accuracy")
    def _half(metrics, config, budget) -> float:
        return 0.5 * float(metrics["default"])

    assert "param_count" in PROXIES and "synflow+naswot+param_count" in PROXIES and "half_accuracy" in REWARDS
    assert PPOConfig(proxy="naswot+param_count", reward="half_accuracy").reward == "half_accuracy"
    assert reward_of({"default": 0.8}, PPOConfig(reward="half_accuracy"), Budget()) == 0.4
    assert get_proxy("param_count").score(_tiny_network(), (1, 3, 8, 8)) > 0
    register_proxy("param_count")(_params)  # the same function again (a reload): no error


@pytest.mark.parametrize(("lookup", "message"), [
    (lambda: get_proxy("snip"), "unknown zero-cost proxy 'snip'; choose one of synflow, naswot"),
    (lambda: proxy_parts("synflow+synflow"), "unknown zero-cost proxy 'synflow\\+synflow'; choose one of"),
    (lambda: get_reward("latency"), "unknown reward 'latency'; use one of accuracy, neg_flops, mnas"),
    (lambda: PPOConfig(reward="latency"), "unknown reward 'latency'; use one of accuracy, neg_flops, mnas"),
    (lambda: PPOConfig(proxy="snip"), "proxy must be one of synflow, naswot, synflow\\+naswot, none")])
def test_an_unknown_name_is_one_line_listing_the_known_ones(lookup, message: str) -> None:
    with pytest.raises(HwAwareError, match=message) as error:
        lookup()
    assert "\n" not in str(error.value)
