"""Options of the PPO search: a documented dataclass, validated at construction.

Kept free of torch so that NNI's dispatcher can build the tuner quickly (see
:mod:`nni_hwaware.nni_fixes`, the tuner must connect within 10 seconds).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from nni_hwaware.checked_options import from_mapping
from nni_hwaware.errors import HwAwareError

__all__ = ["REWARDS", "PPOConfig"]

REWARDS = ("accuracy", "neg_flops", "mnas")
#: The zero-cost proxies :mod:`nni_hwaware.zero_cost` scores (``a+b``: both, one feature each; "none": no proxy).
PROXIES = ("synflow", "naswot", "synflow+naswot", "none")


@dataclass(frozen=True)
class PPOConfig:
    """Options of the PPO search (CleanRL-style: one documented field each)."""

    seed: int = 0
    """Seeds the policy's initial weights and every sampled decision."""
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
    """'adam' or 'sgd' (seed 000 step 5: stochastic gradient descent)."""
    clip: float = 0.2
    """PPO's clipping range of the probability ratio."""
    value_coef: float = 0.5
    """c in L = L_actor + c * L_critic - beta * entropy (+ the entropy floor's term)."""
    entropy_coef: float = 0.02
    """beta at the start (seed 000 step 7: entropy keeps the search exploring)."""
    entropy_coef_final: float = 0.005
    """beta after ``entropy_decay_updates`` updates (linear annealing)."""
    entropy_decay_updates: int = 100
    entropy_floor: float = 0.5
    """Share of the most entropy (log of the allowed values) each decision keeps: below it the loss
    pushes back (0: no floor)."""
    hidden: int = 64
    """Width of the actor-critic MLP."""
    reward: str = "accuracy"
    """'accuracy' (validation accuracy), 'neg_flops' (seed 000 step 6) or 'mnas' (ACC * (LAT/T)^w)."""
    mnas_target_ms: float | None = None
    """T of the MnasNet reward (default: the latency budget)."""
    mnas_w: float = -0.07
    failure_reward: float = 0.0
    """Reward of a trial that failed, reported NaN, or measured its network over the budget."""
    reward_norm: str = "rank"
    """What the policy learns from: 'rank' (normal scores of the rewards' ranks among all results),
    'zscore' (standardised rewards) or 'raw' (the rewards, advantages normalised per batch, as
    in seed 000). The surrogate fits the normal scores with 'rank', z-scores otherwise."""
    replay_best: int = 4
    """The best architectures so far replayed in every policy update (0: none)."""
    cost_features: bool = True
    """Each next value's least budget share in the state (False: only the budget left)."""
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
    networks: the tuner and the strategy build them; :class:`PPOSearch` alone is given the scores
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
    correct: bool = True
    """Learn from measured costs: fit a correction of the table's predictions from the (predicted,
    measured) ``latency_ms`` / ``memory_mb`` pairs the results carry, keep proposals within the
    budget by the corrected prediction times a margin (``margin_model``), and spend at most ``risk``
    of the proposals on networks expected over the budget as measured. On the 24 NAS-Bench-201
    suites of ``benchmarks/search_efficiency.py``, judged as measured (10 seeds), it cut the
    proposals over the measured budget from 8.8 % to 1.5 % of all; the regret at 100 trials rose
    from 0.23x to 0.48x that of random search over the mask-feasible set (the best networks sit at
    the budget's edge, which a margin that holds delta keeps out of reach). False: the table is
    trusted (measured costs are still kept, and :meth:`best` never names a network measured over
    budget). Results without measured costs leave the correction empty: the table alone decides."""
    measure_first: bool = True
    """Each network is measured on the chip before it is trained, and one measured over the budget is not
    trained (the project's trials do so; a result with ``not_trained``, or without ``default``, is such a
    measurement): a proposal over the budget then costs a measurement (seconds), not a training (minutes to
    hours), and the search may spend ``1 - 1 / measurements_per_training`` of its proposals on networks
    that measure over (:mod:`nni_hwaware.strategies.feasibility`). False: every proposal is trained, and
    ``risk`` is the share that may be expected over."""
    measurements_per_training: float = 1.5
    """With ``measure_first``: measurements the search may make per training, on average over the run."""
    delta: float = 0.5
    """A proposal must fit the budget, as measured, with probability at least 1 - delta. Measured first (the
    default) the measurement is the check, so a proposal need only be as likely to fit as not: 0.5, the
    largest of 0.1, 0.3, 0.5, 0.7 and 0.9 under which no run of the tuning split (the tabular suite and the
    Titan RTX suites of ``benchmarks/search_efficiency.py``, 5 seeds) reached 1.5 measurements per training
    (0.1: 0.62x random's regret there, 0.3: 0.36x, 0.5: 0.13x, 0.7: 0.11x with runs at the cap). Trained
    as proposed (``measure_first`` False), 0.1."""
    margin: bool = True
    """Check proposals by the corrected prediction times the margin (False: the corrected
    prediction alone, an ablation)."""
    margin_model: str = "gp"
    """How the margin is set: ``gp``, per architecture from a Gaussian process of the measured
    ratios (tight near measured networks); ``conformal``, one quantile for every architecture."""
    risk_floor: bool = True
    """With the GP margin, each candidate's probability of measuring over the budget is at least what
    the table's errors as a whole give it (the correction's leave-one-out residuals, as before the GP
    is fitted), not the GP's alone: beside measured networks the GP is confident, and among many
    candidates near the budget's edge the search picks those it is most optimistic about. On the 24
    NAS-Bench-201 suites of ``benchmarks/search_efficiency.py`` (``risk`` 0.02, both proxies, 10 seeds)
    it kept the share of proposals over the measured budget below random search's in every suite
    (1.50 % of all) for 0.483x random's regret at 100 trials; False gave 0.461x, 1.75 % and 23 of 24
    suites (False: the GP's probability alone)."""
    weigh_feasibility: bool = True
    """With ``correct``, the surrogate's expected improvement of a draw is multiplied by its
    probability of fitting the budget as measured (constrained expected improvement)."""
    risk: float = 0.02
    """With ``correct`` and not ``measure_first``: the share of its proposals the search may expect to measure over the budget,
    over the run. Each proposal's probability of measuring over is spent from this allowance (an
    architecture at the budget's edge spends about 0.5, one far inside it nothing), so the search
    gambles on the edge, where the best networks are, only as often as the allowance grows. The
    default is the largest allowance (of 0.02-0.05) under which the six Titan RTX suites of
    ``benchmarks/search_efficiency.py`` stay below random search's share (in expectation) of proposals
    measured over the budget; the other 18 NAS-Bench-201 suites are its held-out figures."""
    shrinkage: float = 4.0
    """Ridge weight that shrinks each (label, value) residual of the correction toward zero."""
    prior_margin: float = 1.0
    """The margin before enough pairs exist for a conformal one (about 1 / delta): e.g. 1 plus the
    table's error at its 90th percentile from ``nni-hwaware validate``."""

    def __post_init__(self) -> None:
        if self.reward not in REWARDS:
            raise HwAwareError(f"unknown reward {self.reward!r}; use one of {', '.join(REWARDS)}")
        if self.optimizer not in ("adam", "sgd"):
            raise HwAwareError(f"optimizer must be 'adam' or 'sgd', got {self.optimizer!r}")
        if self.reward_norm not in ("rank", "zscore", "raw"):
            raise HwAwareError(f"reward_norm must be 'rank', 'zscore' or 'raw', got {self.reward_norm!r}")
        if self.surrogate not in ("gp", "none"):
            raise HwAwareError(f"surrogate must be 'gp' or 'none', got {self.surrogate!r}")
        if not 0.0 <= self.entropy_floor < 1.0:
            raise HwAwareError(f"PPO option entropy_floor must be in [0, 1), got {self.entropy_floor}")
        if not self.local_ei >= 0.0:
            raise HwAwareError(f"PPO option local_ei must be >= 0, got {self.local_ei}")
        if not 0.0 <= self.explore <= 1.0:
            raise HwAwareError(f"PPO option explore must be in [0, 1], got {self.explore}")
        for name in ("replay_best", "warmup", "local_best"):
            if getattr(self, name) < 0:
                raise HwAwareError(f"PPO option {name} must be >= 0, got {getattr(self, name)}")
        for name in ("update_every", "epochs", "hidden", "max_resample", "screen"):
            if getattr(self, name) < 1:
                raise HwAwareError(f"PPO option {name} must be >= 1, got {getattr(self, name)}")
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
        if self.margin_model not in ("gp", "conformal"):
            raise HwAwareError(f"PPO option margin_model must be 'gp' or 'conformal', got {self.margin_model!r}")
        if not 0.0 < self.delta < 1.0:
            raise HwAwareError(f"PPO option delta must be in (0, 1), got {self.delta}")
        for name in ("risk",):
            if not 0.0 <= getattr(self, name) <= 1.0:
                raise HwAwareError(f"PPO option {name} must be in [0, 1], got {getattr(self, name)}")
        if not self.measurements_per_training >= 1.0:
            raise HwAwareError(f"PPO option measurements_per_training must be >= 1 (each training is measured "
                               f"first), got {self.measurements_per_training}")
        for name in ("lr", "clip", "shrinkage", "prior_margin"):
            if not getattr(self, name) > 0:
                raise HwAwareError(f"PPO option {name} must be > 0, got {getattr(self, name)}")

    @classmethod
    def from_dict(cls, data: Mapping[str, Any] | None) -> PPOConfig:
        return from_mapping(cls, data, "PPO options")
