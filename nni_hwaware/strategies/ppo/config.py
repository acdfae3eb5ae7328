"""Options of the PPO search: documented dataclasses, one per concern, validated at construction.

:class:`PPOConfig` is what users write (YAML, ``classArgs``, ``PPOConfig(delta=0.5, ...)``): one flat
set of keys, composed of

* :class:`PolicyOptions`: the actor-critic and its update (what PPO learns from, and how);
* :class:`ProposalOptions`: what picks a proposal among the masked draws (the surrogate, the zero-cost
  proxies, the neighbours of the best);
* :class:`~nni_hwaware.strategies.feasibility_options.FeasibilityOptions`: the budget as measured (the
  correction of the table, its margin, the risk a search may take);

and the ``seed``. Each part validates its own fields; :meth:`PPOConfig.policy_options` and its siblings
give a part on its own. ``reward`` and ``proxy`` are checked against their registries
(:mod:`~nni_hwaware.strategies.ppo.rewards`, :mod:`nni_hwaware.zero_cost`), of which :data:`REWARDS`
and :data:`PROXIES` are live views. Kept free of torch so that NNI's dispatcher can build the tuner
quickly (see :mod:`nni_hwaware.nni_fixes`, the tuner must connect within 10 seconds).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, fields
from typing import Any, TypeVar

from nni_hwaware.checked_options import from_mapping
from nni_hwaware.errors import HwAwareError
from nni_hwaware.strategies.feasibility_options import FeasibilityOptions
from nni_hwaware.strategies.ppo.rewards import get_reward, reward_names
from nni_hwaware.zero_cost import proxy_names

__all__ = ["PROXIES", "REWARDS", "FeasibilityOptions", "PPOConfig", "PolicyOptions", "ProposalOptions"]

_T = TypeVar("_T")


class _Names(Sequence[str]):
    """A registry's names as a tuple reads them (``in``, iteration, ``len``), current at every use."""

    def __init__(self, names: Callable[[], tuple[str, ...]]) -> None:
        self._names = names

    def __getitem__(self, index: Any) -> Any:
        return self._names()[index]

    def __len__(self) -> int:
        return len(self._names())

    def __iter__(self) -> Iterator[str]:
        return iter(self._names())

    def __contains__(self, name: object) -> bool:
        return name in self._names()

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Sequence) and tuple(self) == tuple(other)

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return repr(self._names())


def _proxy_choices() -> tuple[str, ...]:
    names = proxy_names()
    return (*("+".join(c) for r in range(1, len(names) + 1) for c in itertools.combinations(names, r)), "none")


#: The rewards (:mod:`~nni_hwaware.strategies.ppo.rewards`) the option ``reward`` takes.
REWARDS: Sequence[str] = _Names(reward_names)
#: The zero-cost proxies (:mod:`nni_hwaware.zero_cost`) the option ``proxy`` takes: each registered one, each
#: combination of them in the order registered (``a+b``: both, one feature each), and "none" (no proxy).
PROXIES: Sequence[str] = _Names(_proxy_choices)


@dataclass(frozen=True)
class PolicyOptions:
    """The actor-critic and its PPO update: the batch, the loss, the optimiser, and the reward it learns."""

    update_every: int = 3
    """Results (finished trials and measurements) per policy update: 1 updates after every result. 3 keeps a
    decision cheap at hundreds of trainings; it is the largest of 1-4 under which the policy's draws stay off
    the architectures already tried (``tests/test_tuner_contract.py``; at 4 up to 14 % of its draws were
    tried ones). On the tuning split of ``benchmarks/search_efficiency.py`` (the tabular suite and the Titan
    RTX suites, 5 seeds, delta 0.5) 1 / 3 / 4 gave 0.13x / 0.19x / 0.09x random's regret."""
    epochs: int = 8
    """Passes over each batch of episodes per update."""
    lr: float = 0.01
    """Adam learning rate."""
    optimizer: str = "adam"
    """'adam' or 'sgd' (plain stochastic gradient descent)."""
    clip: float = 0.2
    """PPO's clipping range of the probability ratio."""
    value_coef: float = 0.5
    """c in L = L_actor + c * L_critic - beta * entropy (+ the entropy floor's term)."""
    entropy_coef: float = 0.02
    """beta at the start (the entropy bonus keeps the search exploring)."""
    entropy_coef_final: float = 0.005
    """beta after ``entropy_decay_updates`` updates (linear annealing)."""
    entropy_decay_updates: int = 100
    """Updates over which beta anneals linearly from ``entropy_coef`` to ``entropy_coef_final``."""
    entropy_floor: float = 0.5
    """Share of the most entropy (log of the allowed values) each decision keeps: below it the loss
    pushes back (0: no floor)."""
    hidden: int = 64
    """Width of the actor-critic MLP."""
    reward: str = "accuracy"
    """A registered reward (:mod:`~nni_hwaware.strategies.ppo.rewards`): 'accuracy' (validation accuracy),
    'neg_flops' (the negative-FLOPs reward) or 'mnas' (the MnasNet reward ACC * (LAT/T)^w)."""
    mnas_target_ms: float | None = None
    """T of the MnasNet reward (default: the latency budget)."""
    mnas_w: float = -0.07
    """w of the MnasNet reward (negative: a network slower than T is worth less)."""
    failure_reward: float = 0.0
    """Reward of a trial that failed, reported NaN, or measured its network over the budget."""
    reward_norm: str = "rank"
    """What the policy learns from: 'rank' (normal scores of the rewards' ranks among all results),
    'zscore' (standardised rewards) or 'raw' (the rewards, advantages normalised per batch, as
    in the plain PPO update). The surrogate fits the normal scores with 'rank', z-scores otherwise."""
    replay_best: int = 4
    """The best architectures so far replayed in every policy update (0: none)."""
    cost_features: bool = True
    """Each next value's least budget share in the state (False: only the budget left)."""

    def __post_init__(self) -> None:
        get_reward(self.reward)  # an unknown one is a one-line error naming the registered ones
        if self.optimizer not in ("adam", "sgd"):
            raise HwAwareError(f"optimizer must be 'adam' or 'sgd', got {self.optimizer!r}")
        if self.reward_norm not in ("rank", "zscore", "raw"):
            raise HwAwareError(f"reward_norm must be 'rank', 'zscore' or 'raw', got {self.reward_norm!r}")
        if not 0.0 <= self.entropy_floor < 1.0:
            raise HwAwareError(f"PPO option entropy_floor must be in [0, 1), got {self.entropy_floor}")
        _at_least(self, 0, "replay_best")
        _at_least(self, 1, "update_every", "epochs", "hidden")
        for name in ("lr", "clip"):
            if not getattr(self, name) > 0:
                raise HwAwareError(f"PPO option {name} must be > 0, got {getattr(self, name)}")


@dataclass(frozen=True)
class ProposalOptions:
    """What picks a proposal among the masked draws: the screening surrogate, its features, the neighbours."""

    screen: int = 64
    """Masked samples drawn per proposal and screened by the surrogate (1: propose the policy's draw)."""
    explore: float = 0.25
    """Share of the screened samples drawn uniformly over the feasible values instead of from the policy."""
    surrogate: str = "gp"
    """'gp' (a Gaussian process with a Hamming kernel; expected improvement picks the sample)
    or 'none' (the policy's first fresh sample is proposed)."""
    trend: bool = True
    """The surrogate's kernel adds a linear kernel on what the table predicts of each architecture
    (the logs of its latency, FLOPs and parameters), its weight (0 or 1) chosen by marginal
    likelihood with the length scale and noise: where accuracy grows with compute, the surrogate
    extrapolates it to architectures far from those tried (False: the Hamming kernel alone)."""
    proxy: str = "synflow+naswot"
    """Zero-cost proxies of accuracy (:mod:`nni_hwaware.zero_cost`) as more features of the surrogate's
    trend: each network scored at initialisation, without data (a forward and a backward pass,
    cached), so that among networks of the same cost those that will train better stand out before
    any is trained. ``synflow+naswot`` (the default: both, one feature each), ``synflow`` (one
    forward and backward pass on an all-ones input), ``naswot`` (how differently the network's units
    split 16 Gaussian inputs, :func:`~nni_hwaware.zero_cost.naswot`) or ``none``. On the 24
    NAS-Bench-201 suites of ``benchmarks/search_efficiency.py`` (with ``risk_floor``, 10 seeds) the two
    gave 0.483x random's regret at 100 trials where SynFlow alone gave 0.514x. It needs the space's
    networks: the tuner and the strategy build them; ``PPOSearch`` alone is given the scores
    (its ``proxy`` argument)."""
    proxy_space_args: Mapping[str, Any] | None = field(default=None, hash=False)
    """Constructor arguments of the replica of the space the proxy scores (e.g. ``{stem_out_channels: 8}``
    for ``nni:NasBench201``): a narrower replica scores faster. Keep the depth: on NAS-Bench-201 one cell a
    stage instead of five ranked the networks alike but kept half of what the proxy gained the search
    (``benchmarks/nb201_proxy.py`` checks a replica). Default: the space as searched."""
    proxy_input_shape: tuple[int, ...] | None = None
    """Per-sample input shape the proxy scores with (e.g. ``[3, 16, 16]``); default: the space's."""
    proxy_scores: str | None = None
    """A CSV of proxy scores to start from (the ``proxy_scores.csv`` a search of the same space and
    replica wrote beside its report): networks scored there are not scored again. A search also reads
    its own folder's file when it resumes."""
    ard: bool = True
    """The surrogate's Hamming kernel weighs each label by its own relevance, fitted by marginal
    likelihood (automatic relevance determination): where a few labels decide the accuracy, two
    architectures that differ only in the others still look alike (False: one length scale for all)."""
    local_best: int = 4
    """The best architectures so far whose one-label neighbours (those within budget) join the
    screened pool when no draw promises an improvement (``local_ei``; 0: never)."""
    local_ei: float = 1e-3
    """Expected improvement (in normal scores) below which no draw counts as promising, so the
    neighbours of the ``local_best`` best architectures join the pool."""
    warmup: int = 4
    """Results before the surrogate screens (the first proposals are the policy's draws)."""
    max_resample: int = 1000
    """Masked draws per proposal before giving up when every draw is tried or in flight."""
    weigh_feasibility: bool = True
    """With ``correct``, the surrogate's expected improvement of a draw is multiplied by its
    probability of fitting the budget as measured (constrained expected improvement)."""

    def __post_init__(self) -> None:
        if self.surrogate not in ("gp", "none"):
            raise HwAwareError(f"surrogate must be 'gp' or 'none', got {self.surrogate!r}")
        if not self.local_ei >= 0.0:
            raise HwAwareError(f"PPO option local_ei must be >= 0, got {self.local_ei}")
        if not 0.0 <= self.explore <= 1.0:
            raise HwAwareError(f"PPO option explore must be in [0, 1], got {self.explore}")
        _at_least(self, 0, "warmup", "local_best")
        _at_least(self, 1, "max_resample", "screen")
        if self.proxy not in PROXIES:
            raise HwAwareError(f"PPO option proxy must be one of {', '.join(PROXIES)}, got {self.proxy!r}")
        if self.proxy_space_args is not None and not isinstance(self.proxy_space_args, Mapping):
            raise HwAwareError(f"PPO option proxy_space_args must be a mapping of constructor arguments, "
                               f"got {self.proxy_space_args!r}")
        if self.proxy_space_args and (options := sorted({"input_shape", "num_classes", "dataset", "reference"}
                                                        & set(self.proxy_space_args))):
            raise HwAwareError(f"PPO option proxy_space_args takes the space's constructor arguments, not {options}; "
                               "give the proxy's input shape as proxy_input_shape")
        shape = self.proxy_input_shape
        if shape is not None and (not isinstance(shape, tuple | list) or not shape or not all(
                isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in shape)):
            raise HwAwareError(f"PPO option proxy_input_shape must be per-sample sizes such as [3, 16, 16], "
                               f"got {shape!r}")
        if shape is not None:
            object.__setattr__(self, "proxy_input_shape", tuple(shape))


def _at_least(options: Any, least: int, *names: str) -> None:
    for name in names:
        if getattr(options, name) < least:
            raise HwAwareError(f"PPO option {name} must be >= {least}, got {getattr(options, name)}")


@dataclass(frozen=True)
class PPOConfig(PolicyOptions, ProposalOptions, FeasibilityOptions):
    """Options of the PPO search (CleanRL-style: one documented field each), flat: the fields of
    :class:`PolicyOptions`, :class:`ProposalOptions` and
    :class:`~nni_hwaware.strategies.feasibility_options.FeasibilityOptions`, and the seed."""

    seed: int = 0
    """Seeds the policy's initial weights and every sampled decision."""

    def __post_init__(self) -> None:
        for part in (PolicyOptions, ProposalOptions, FeasibilityOptions):
            part.__post_init__(self)

    def _part(self, kind: type[_T]) -> _T:
        return kind(**{f.name: getattr(self, f.name) for f in fields(kind)})  # type: ignore[arg-type]

    @property
    def policy_options(self) -> PolicyOptions:
        """The actor-critic's and its update's options, on their own."""
        return self._part(PolicyOptions)

    @property
    def proposal_options(self) -> ProposalOptions:
        """The options of what picks a proposal, on their own."""
        return self._part(ProposalOptions)

    @property
    def feasibility_options(self) -> FeasibilityOptions:
        """The options of the budget as measured, on their own (what :class:`~nni_hwaware.strategies.feasibility.Feasibility` takes)."""
        return self._part(FeasibilityOptions)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any] | None) -> PPOConfig:
        return from_mapping(cls, data, "PPO options")
