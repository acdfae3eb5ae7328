"""What a finished architecture is worth to the PPO search: a registry of rewards, one function each.

A reward maps a trial's metrics (``default``: its accuracy; ``latency_ms``, ``flops``, ...), the
search's options and its budget to one float; the option ``reward`` names it. Add one with::

    @register_reward("latency_penalised")
    def _latency_penalised(metrics, config, budget):
        return float(metrics["default"]) - 0.01 * float(metrics["latency_ms"])

Built in: ``accuracy`` (the validation accuracy), ``neg_flops`` (the negative-FLOPs reward, in
MFLOPs) and ``mnas`` (the MnasNet reward ``ACC * (LAT / T)^w``, Tan et al. 2019). Kept free of
torch: the options validate their ``reward`` against this registry when NNI's dispatcher builds the
tuner.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, TypeVar

from nni_hwaware.errors import HwAwareError

if TYPE_CHECKING:
    from nni_hwaware.strategies.budget import Budget

__all__ = ["Reward", "get_reward", "register_reward", "reward_names", "reward_of"]

#: A reward: the metrics a trial reported, the search's options (a
#: :class:`~nni_hwaware.strategies.ppo.config.PolicyOptions`: ``mnas_w``, ...) and its budget -> the reward.
Reward = Callable[[Mapping[str, float], Any, "Budget"], float]
_R = TypeVar("_R", bound=Reward)

_REWARDS: dict[str, Reward] = {}


def register_reward(name: str) -> Callable[[_R], _R]:
    """Function decorator: register a reward under ``name`` (the option ``reward``).

    A different function under a taken name is an error; the same function again (same module and
    qualified name, e.g. after a module reload) replaces it.
    """
    if not isinstance(name, str) or not name:
        raise HwAwareError(f"reward name must be a non-empty string, got {name!r}")

    def decorate(function: _R) -> _R:
        if not callable(function):
            raise HwAwareError(f"@register_reward({name!r}) must decorate a function, got {function!r}")
        old = _REWARDS.get(name)
        if old is not None and _qualified(old) != _qualified(function):
            raise HwAwareError(f"reward name {name!r} is already used by {_qualified(old)}; pick another name")
        _REWARDS[name] = function
        return function

    return decorate


def _qualified(function: Callable[..., object]) -> str:
    return f"{getattr(function, '__module__', '?')}.{getattr(function, '__qualname__', repr(function))}"


def reward_names() -> tuple[str, ...]:
    """The registered rewards, in the order they were registered."""
    return tuple(_REWARDS)


def get_reward(name: str) -> Reward:
    """The reward registered as ``name``; an unknown name is a one-line error listing the known ones."""
    function = _REWARDS.get(name) if isinstance(name, str) else None
    if function is None:
        raise HwAwareError(f"unknown reward {name!r}; use one of {', '.join(reward_names())}")
    return function


def reward_of(metrics: Mapping[str, float], config: Any, budget: Budget) -> float:
    """The reward of a finished architecture: the one ``config.reward`` names."""
    return get_reward(config.reward)(metrics, config, budget)


@register_reward("accuracy")
def accuracy(metrics: Mapping[str, float], config: Any, budget: Budget) -> float:
    """The validation accuracy the trial reported (``default``)."""
    return float(metrics["default"])


@register_reward("neg_flops")
def neg_flops(metrics: Mapping[str, float], config: Any, budget: Budget) -> float:
    """The negative-FLOPs reward: minus the network's MFLOPs (the cheapest network is the best)."""
    return -float(metrics["flops"]) / 1e6


@register_reward("mnas")
def mnas(metrics: Mapping[str, float], config: Any, budget: Budget) -> float:
    """The MnasNet reward ``ACC * (LAT / T)^w``: ``T`` is ``mnas_target_ms`` or the latency budget,
    ``w`` is ``mnas_w``."""
    accuracy = float(metrics["default"])
    target = config.mnas_target_ms or budget.latency_ms
    if target is None:
        raise HwAwareError("the 'mnas' reward needs mnas_target_ms or a latency budget")
    return accuracy * (float(metrics["latency_ms"]) / target) ** config.mnas_w
