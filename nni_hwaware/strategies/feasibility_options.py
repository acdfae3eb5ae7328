"""Options of a search's feasibility: how the table's predictions are corrected by what the chip
measured, and how much a search may risk on networks that measure over the budget.

One documented, validated dataclass (kept free of torch and of the modules that import it, so that
NNI's dispatcher can build the PPO tuner quickly; see :mod:`nni_hwaware.nni_fixes`).
:class:`~nni_hwaware.strategies.feasibility.Feasibility` takes it;
:class:`~nni_hwaware.strategies.ppo.config.PPOConfig` has these fields among its flat keys. The
messages name them as the PPO options they are to a user.
"""

from __future__ import annotations

from dataclasses import dataclass

from nni_hwaware.errors import HwAwareError

__all__ = ["FeasibilityOptions"]


@dataclass(frozen=True)
class FeasibilityOptions:
    """The budget as measured: the correction of the table, its margin, and the chance constraint (what
    :class:`~nni_hwaware.strategies.feasibility.Feasibility` takes)."""

    correct: bool = True
    """Learn from measured costs: fit a correction of the table's predictions from the (predicted,
    measured) ``latency_ms`` / ``memory_mb`` pairs the results carry, keep proposals within the
    budget by the corrected prediction times a margin (``margin_model``), and spend at most ``risk``
    of the proposals on networks expected over the budget as measured. On the 24 NAS-Bench-201
    suites of ``benchmarks/search_efficiency.py``, judged as measured (10 seeds), it cut the
    proposals over the measured budget from 8.8 % to 1.5 % of all; the regret at 100 trials rose
    from 0.23x to 0.48x that of random search over the mask-feasible set (the best networks sit at
    the budget's edge, which a margin that holds delta keeps out of reach). False: the table is
    trusted (measured costs are still kept, and the search's ``best()`` never names a network measured over
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
        if self.margin_model not in ("gp", "conformal"):
            raise HwAwareError(f"PPO option margin_model must be 'gp' or 'conformal', got {self.margin_model!r}")
        if not 0.0 < self.delta < 1.0:
            raise HwAwareError(f"PPO option delta must be in (0, 1), got {self.delta}")
        if not 0.0 <= self.risk <= 1.0:
            raise HwAwareError(f"PPO option risk must be in [0, 1], got {self.risk}")
        if not self.measurements_per_training >= 1.0:
            raise HwAwareError(f"PPO option measurements_per_training must be >= 1 (each training is measured "
                               f"first), got {self.measurements_per_training}")
        for name in ("shrinkage", "prior_margin"):
            if not getattr(self, name) > 0:
                raise HwAwareError(f"PPO option {name} must be > 0, got {getattr(self, name)}")
