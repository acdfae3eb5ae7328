"""The options :class:`~nni_hwaware.strategies.gumbel.strategy.HardwareGumbelDARTS` takes: the
hardware penalty of the loss, the Gumbel temperature, the stages; validated at construction.

The rest of a search's options (how the supernet trains, the sweep, the whole job's file) are in
:mod:`nni_hwaware.strategies.gumbel.job_config`, which reads them all from YAML or a dict. A bad value
raises :class:`~nni_hwaware.errors.HwAwareError` saying what to change.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from nni_hwaware.errors import HwAwareError
from nni_hwaware.strategies.job import budget_fraction

__all__ = ["DEFAULT_TARGETS", "PenaltyConfig", "StagingConfig", "TemperatureConfig"]

#: The targets a penalty gets when it names no weight, target or budget: latency -55 % and
#: memory -49 % against the baseline (ResNet50 on the project's spaces).
DEFAULT_TARGETS: dict[str, str] = {"latency_target": "45%", "memory_target": "51%"}


def check_finite(name: str, value: float, *, positive: bool = False, nonnegative: bool = False) -> None:
    """Raise a one-line error unless option ``name`` is a finite number (and > 0 / >= 0 if asked)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise HwAwareError(f"{name} must be a finite number, got {value!r}")
    if positive and not value > 0:
        raise HwAwareError(f"{name} must be > 0, got {value}")
    if nonnegative and value < 0:
        raise HwAwareError(f"{name} must be >= 0, got {value}")



@dataclass(frozen=True)
class PenaltyConfig:
    """The hardware terms of the search loss CE + alpha*lat^beta + gamma*mem^delta.

    .. math::

        L = \\mathrm{CE} + \\alpha\\,\\widehat{\\mathrm{lat}}(a)^{\\beta}
              + \\gamma\\,\\widehat{\\mathrm{mem}}(a)^{\\delta}

    with the costs normalised (``normalise``) so that ``alpha`` and ``gamma`` mean
    the same in every space: by default relative to the baseline architecture, so
    ``alpha = 1`` weighs the baseline's latency as one nat of cross entropy.

    Which form a term takes follows from what is given. Targets (``latency_target`` /
    ``memory_target``): the search sets the term's weight itself, and ``alpha`` /
    ``gamma`` are only where that weight starts. Budgets: the weight times the excess over
    the budget. Otherwise the fixed-weight form above. A penalty that names no weight, no
    target and no budget gets the default targets, :data:`DEFAULT_TARGETS` (latency 45 %
    and memory 51 % of the baseline's); give ``alpha`` / ``gamma`` alone for fixed weights.
    """

    #: Weight of the latency term (>= 0; 0 switches it off); with a latency target, the
    #: weight the controller starts from. None: 1.0.
    alpha: float | None = None
    #: Exponent of the latency term (> 0; fixed-weight and budget forms only).
    beta: float = 1.0
    #: Weight of the memory term (>= 0); with a memory target, where it starts. None: 0.5.
    gamma: float | None = None
    #: Exponent of the memory term (> 0).
    delta: float = 1.0
    #: ``baseline``: cost / cost of the baseline architecture; ``none``: ms and MB as they are.
    normalise: str = "baseline"
    #: Memory model: ``table`` (weights + largest activation, as the cost table predicts)
    #: or ``sum`` (the literal sum of per-block weights + activations).
    memory: str = "table"
    #: Budget mode: penalise only latency above this many ms (relative excess ``lat/T - 1``),
    #: or above ``"N%"`` of the baseline's predicted latency.
    latency_budget_ms: float | str | None = None
    #: Budget mode: penalise only memory above this many MB (or ``"N%"`` of the baseline's).
    memory_budget_mb: float | str | None = None
    #: Target mode: the search sets the latency term's weight itself, by dual ascent, so that
    #: the latency expected under the architecture distribution lands on this many ms (or
    #: ``"N%"`` of the baseline's predicted latency); ``alpha`` is the weight it starts from.
    latency_target: float | str | None = None
    #: Target mode for memory (MB or ``"N%"``); ``gamma`` is the weight it starts from.
    memory_target: float | str | None = None
    #: How a target sets its weight. ``projection``: after every architecture update the
    #: searched labels' logits are tilted by ``-w * c / T`` (the KL projection of the
    #: distribution onto ``E[c] <= T``), with the smallest ``w >= 0`` that brings the expected
    #: cost to the target, found by bisection: the multiplier is solved each step, so the
    #: distribution lands on the target at once and cannot wind past it. ``pi``: the weight
    #: moves by the PI-controlled dual ascent below and the penalty's gradient does the work.
    controller: str = "projection"
    #: Target mode: the export takes the most probable architecture whose predicted costs are
    #: within ``[1 - export_fill, 1]`` of the targets, where one is (0: the most probable within
    #: them, however far under).
    export_fill: float = 0.05
    #: Target mode: how many times the exported network is timed against the baseline on this
    #: machine (interleaved, 4 s; 16 s when the latency's interval holds the target) before it
    #: is retrained; one measured over a target is exported
    #: again with that target's limit scaled by target / measured ratio (the table is a prior:
    #: the chip's measurement wins), one measured more than ``export_fill`` under it with the
    #: limit raised halfway towards the lowest one measured over (or by target / measured);
    #: the network kept is the one within the targets that comes nearest them. 0: trust the table.
    export_checks: int = 3
    #: Integral gain of the ``pi`` controller, per architecture update:
    #: ``I <- max(0, I + dual_lr * g)`` with ``g = E[c]/T - 1``.
    dual_lr: float = 0.02
    #: Proportional gain: the weight is ``max(0, I + dual_gain * g)``; it damps the
    #: oscillation plain dual ascent has around the target (a PI-controlled Lagrangian).
    dual_gain: float = 5.0

    def __post_init__(self) -> None:
        limits = ("latency_budget_ms", "memory_budget_mb", "latency_target", "memory_target")
        if self.alpha is None and self.gamma is None and all(getattr(self, n) is None for n in limits):
            for name, value in DEFAULT_TARGETS.items():  # nothing named: the default targets
                object.__setattr__(self, name, value)
        for name, value in (("alpha", 1.0), ("gamma", 0.5)):
            if getattr(self, name) is None:
                object.__setattr__(self, name, value)
        check_finite("penalty alpha", self.alpha, nonnegative=True)
        check_finite("penalty gamma", self.gamma, nonnegative=True)
        check_finite("penalty beta", self.beta, positive=True)
        check_finite("penalty delta", self.delta, positive=True)
        if self.normalise not in ("baseline", "none"):
            raise HwAwareError(f"penalty normalise must be 'baseline' or 'none', got {self.normalise!r}")
        if self.memory not in ("table", "sum"):
            raise HwAwareError(f"penalty memory must be 'table' or 'sum', got {self.memory!r}")
        for name in ("latency_budget_ms", "memory_budget_mb", "latency_target", "memory_target"):
            value = getattr(self, name)
            if isinstance(value, str):
                budget_fraction(value, f"penalty {name}")
            elif value is not None:
                check_finite(f"penalty {name}", value, positive=True)
        for cost, budget in (("latency", "latency_budget_ms"), ("memory", "memory_budget_mb")):
            if getattr(self, f"{cost}_target") is not None and getattr(self, budget) is not None:
                raise HwAwareError(f"penalty {cost}_target and {budget} are two forms of one limit: give one")
        for cost, power in (("latency", "beta"), ("memory", "delta")):
            if getattr(self, f"{cost}_target") is not None and getattr(self, power) != 1.0:
                raise HwAwareError(
                    f"penalty {power} {getattr(self, power)} shapes the fixed-weight and budget forms only; with "
                    f"{cost}_target the term is weight * {cost} / target: drop {power} or set {cost}_target: null")
        if self.controller not in ("projection", "pi"):
            raise HwAwareError(f"penalty controller must be 'projection' or 'pi', got {self.controller!r}")
        check_finite("penalty export_fill", self.export_fill, nonnegative=True)
        if self.export_fill >= 1:
            raise HwAwareError(f"penalty export_fill is a share of the targets, so it must be < 1, "
                               f"got {self.export_fill}")
        if isinstance(self.export_checks, bool) or not isinstance(self.export_checks, int) or self.export_checks < 0:
            raise HwAwareError(f"penalty export_checks must be an integer >= 0 (0: trust the table), "
                               f"got {self.export_checks!r}")
        check_finite("penalty dual_lr", self.dual_lr, positive=True)
        check_finite("penalty dual_gain", self.dual_gain, nonnegative=True)

    def budget(self, name: str, baseline: float) -> float | None:
        """Budget ``name`` (``latency_budget_ms`` / ``memory_budget_mb``) in ms or MB, given the baseline's."""
        value = getattr(self, name)
        if isinstance(value, str):
            return budget_fraction(value, f"penalty {name}") * baseline
        return value


@dataclass(frozen=True)
class TemperatureConfig:
    """Gumbel-softmax temperature, annealed from ``init`` to ``min`` within each stage."""

    init: float = 5.0
    min: float = 0.5
    #: ``exponential`` (geometric) or ``linear`` interpolation over the stage's epochs.
    schedule: str = "exponential"
    #: Straight-through (hard) Gumbel: one-hot masks forward, soft gradients backward;
    #: only the sampled block of each layer runs. ``False``: every block runs, weighted.
    hard: bool = True
    #: Soft mode only: mask weights below this are set to 0 (in the forward pass and the
    #: penalty alike) and their blocks are not run; 0 runs every block.
    min_weight: float = 0.0

    def __post_init__(self) -> None:
        check_finite("temperature init", self.init, positive=True)
        check_finite("temperature min_weight", self.min_weight, nonnegative=True)
        if self.min_weight >= 0.5:
            raise HwAwareError(f"temperature min_weight must be < 0.5, got {self.min_weight}")
        check_finite("temperature min", self.min, positive=True)
        if self.min > self.init:
            raise HwAwareError(f"temperature min ({self.min}) must not exceed init ({self.init})")
        if self.schedule not in ("exponential", "linear"):
            raise HwAwareError(f"temperature schedule must be 'exponential' or 'linear', got {self.schedule!r}")

    def at(self, step: int, steps: int) -> float:
        """Temperature at epoch ``step`` (0-based) of a stage of ``steps`` epochs."""
        fraction = min(step, steps - 1) / max(steps - 1, 1)
        if self.schedule == "linear":
            return self.init + (self.min - self.init) * fraction
        return self.init * (self.min / self.init) ** fraction


_STAGE_NAMES = ("upper", "lower", "all")


@dataclass(frozen=True)
class StagingConfig:
    """Staged search: which layers are searched when, and when a stage ends.

    The ``n`` searchable layers split into the lower ``split`` (``m``) and the upper
    ``n - m``. Each stage in ``order`` searches one part (``upper``, ``lower`` or
    ``all``) and freezes the rest (weights and architecture parameters); the stem
    goes with the lower part, the head with the upper one. A stage ends when its
    mean search loss has not fallen by ``min_delta`` for ``patience`` epochs (after
    at least ``min_epochs``), or after ``max_epochs``. ``order: [all]`` is a
    single-stage search. A stage that collapses (training accuracy near chance while the
    cost terms dominate the loss) ends the search (``collapse_accuracy``).
    """

    #: ``m``, the number of lower layers (None: half of the layers, rounded down).
    split: int | None = None
    order: tuple[str, ...] = ("upper", "lower")
    max_epochs: int = 6
    min_epochs: int = 2
    patience: int = 2
    min_delta: float = 1e-3
    #: Epochs that train all weights with fixed architecture parameters before the stages.
    warmup_epochs: int = 0
    #: The collapse guard: an epoch whose training top-1 (the weight steps' batches) falls below
    #: this share, after an earlier epoch above it, while the cost terms are more than
    #: ``collapse_cost_share`` of the architecture loss stops the search, and the architecture
    #: distribution of the last epoch before it is exported. None: 1.5 / the number of classes
    #: (near chance); 0 switches the guard off.
    collapse_accuracy: float | None = None
    #: The cost terms' share of the architecture loss, ``penalty / (CE + penalty)``, above which
    #: they dominate it (the guard's second condition).
    collapse_cost_share: float = 0.5

    def __post_init__(self) -> None:
        if isinstance(self.order, str):
            object.__setattr__(self, "order", (self.order,))
        if not self.order or any(part not in _STAGE_NAMES for part in self.order):
            raise HwAwareError(f"stages order must list parts among {_STAGE_NAMES}, got {list(self.order)}")
        for name in ("max_epochs", "min_epochs", "patience"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise HwAwareError(f"stages {name} must be an integer >= 1, got {value!r}")
        if self.min_epochs > self.max_epochs:
            raise HwAwareError(f"stages min_epochs ({self.min_epochs}) exceeds max_epochs ({self.max_epochs})")
        if not isinstance(self.warmup_epochs, int) or self.warmup_epochs < 0:
            raise HwAwareError(f"stages warmup_epochs must be an integer >= 0, got {self.warmup_epochs!r}")
        check_finite("stages min_delta", self.min_delta, nonnegative=True)
        if self.collapse_accuracy is not None:
            check_finite("stages collapse_accuracy", self.collapse_accuracy, nonnegative=True)
            if self.collapse_accuracy >= 1:
                raise HwAwareError(f"stages collapse_accuracy is a share of the batches (0 switches the guard "
                                   f"off), so it must be < 1, got {self.collapse_accuracy}")
        check_finite("stages collapse_cost_share", self.collapse_cost_share, nonnegative=True)
        if self.collapse_cost_share >= 1:
            raise HwAwareError(f"stages collapse_cost_share must be < 1, got {self.collapse_cost_share}")
        if self.split is not None and (not isinstance(self.split, int) or self.split < 1):
            raise HwAwareError(f"stages split (m) must be an integer >= 1, got {self.split!r}")

