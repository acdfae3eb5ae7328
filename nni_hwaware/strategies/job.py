"""The sections of a search job both searches share, and the work they share.

A job says what to search, against which costs (:class:`CostConfig`: a cost table and the chip,
backend and batch size in it, or this machine profiled), under which budget (:class:`BudgetSpec`)
and pruned how (:class:`PruneConfig`). The PPO search's job is
:class:`~nni_hwaware.strategies.ppo.job.PPOJob`; the Gumbel pipeline has ``cost`` and ``prune``
sections of these types. Each section is a validated dataclass built from plain mappings
(:func:`~nni_hwaware.checked_options.from_mapping`), so a misspelt key anywhere is one line naming
the section and the allowed keys, said before anything starts.

Kept free of torch at import: NNI's dispatcher builds the tuner, which builds its job, within 10
seconds (see :mod:`nni_hwaware.nni_fixes`).

The work shared by the searches also lives here: :func:`load_cost_model` (a table file, or the space
profiled on this machine once), :func:`prune_model` (the ``S = k*U*P`` pruning of the space's
choices) and :meth:`BudgetSpec.resolve` (``"60%"`` of the reference network's predicted cost).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from nni_hwaware.errors import HwAwareError

if TYPE_CHECKING:
    from nni_hwaware.cost_model import SpaceCostModel
    from nni_hwaware.pruning.prune import ChoicePruneResult
    from nni_hwaware.spaces.resolve import NamedSpace
    from nni_hwaware.strategies.budget import Budget

__all__ = ["BudgetSpec", "CostConfig", "PruneConfig", "budget_fraction", "load_cost_model", "prune_model"]

_BUDGET_KEYS = ("latency_ms", "memory_mb", "flops")


def budget_fraction(text: str, name: str) -> float:
    """``"45%"`` -> 0.45; anything else is an error naming ``name``."""
    stripped = text.strip()
    try:
        fraction = float(stripped[:-1]) / 100 if stripped.endswith("%") else float("nan")
    except ValueError:
        fraction = float("nan")
    if not (math.isfinite(fraction) and fraction > 0):
        raise HwAwareError(f"{name} must be a positive number or a percentage of the baseline like '50%', got {text!r}")
    return fraction


@dataclass(frozen=True)
class BudgetSpec:
    """Upper bounds on latency (ms), memory (MB) and FLOPs: numbers, or ``"N%"`` of the reference
    network's predicted cost; ``None`` leaves a cost free (the hardware budget a search stays inside)."""

    latency_ms: float | str | None = None
    memory_mb: float | str | None = None
    flops: float | str | None = None

    def __post_init__(self) -> None:
        for name in _BUDGET_KEYS:
            value = getattr(self, name)
            if isinstance(value, str):
                budget_fraction(value, f"budget {name}")
            elif value is not None and (isinstance(value, bool) or not isinstance(value, (int, float))
                                        or not (math.isfinite(value) and value > 0)):
                raise HwAwareError(f"budget {name} must be a positive number or a percentage like '60%', "
                                   f"got {value!r}")

    def resolve(self, reference: Mapping[str, float]) -> Budget:
        """The :class:`~nni_hwaware.strategies.budget.Budget` in ms / MB / FLOPs, percentages taken of
        ``reference`` (the reference network's predicted costs)."""
        from nni_hwaware.strategies.budget import Budget

        values = {}
        for name in _BUDGET_KEYS:
            value = getattr(self, name)
            if isinstance(value, str):
                values[name] = budget_fraction(value, f"budget {name}") * float(reference[name])
            elif value is not None:
                values[name] = float(value)
        return Budget(**values)

    def to_dict(self) -> dict[str, float | str]:
        return {k: v for k, v in asdict(self).items() if v is not None}


@dataclass(frozen=True)
class CostConfig:
    """Where the costs come from: a cost table file and the chip, backend and batch size in it."""

    #: Cost table file (``nni-hwaware profile``, or a per-choice table); None profiles the
    #: space on this machine first (written to the job's output directory).
    table: str | None = None
    chip: str | None = None
    backend: str = "torch"
    batch_size: int = 1
    #: Where a missing table is profiled: ``cpu``, ``cuda``, ...
    device: str = "cpu"
    #: Threads for profiling (when ``table`` is None) and for measuring the retrained networks.
    threads: int | None = 1
    #: Timing runs per retrained network (its latency is their median).
    repeats: int = 3
    #: Alternating timing rounds of a found network and the baseline (A B, B A, ...): their
    #: latency ratio and its 95 % interval (:func:`nni_hwaware.training.compare_with_baseline`).
    rounds: int = 10
    #: Seconds of timing rounds when a missing table is profiled, like ``nni-hwaware profile
    #: --time-budget`` (None: 0.25 s per leaf, within 2 s to 2 minutes).
    profile_seconds: float | None = None

    def __post_init__(self) -> None:
        if isinstance(self.repeats, bool) or not isinstance(self.repeats, int) or self.repeats < 1:
            raise HwAwareError(f"cost repeats must be an integer >= 1, got {self.repeats!r}")
        if isinstance(self.rounds, bool) or not isinstance(self.rounds, int) or self.rounds < 2:
            raise HwAwareError(f"cost rounds must be an integer >= 2, got {self.rounds!r}")
        if self.threads is not None and (not isinstance(self.threads, int) or self.threads < 1):
            raise HwAwareError(f"cost threads must be an integer >= 1 (or null), got {self.threads!r}")
        if isinstance(self.batch_size, bool) or not isinstance(self.batch_size, int) or self.batch_size < 1:
            raise HwAwareError(f"cost batch_size must be an integer >= 1, got {self.batch_size!r}")
        if self.table is not None and not isinstance(self.table, str):
            raise HwAwareError(f"cost table must be a file name, got {self.table!r}")
        if self.profile_seconds is not None and (isinstance(self.profile_seconds, bool)
                                                 or not isinstance(self.profile_seconds, (int, float))
                                                 or not math.isfinite(self.profile_seconds)
                                                 or self.profile_seconds <= 0):
            raise HwAwareError(f"profile_seconds must be a positive number of seconds (or null), "
                               f"got {self.profile_seconds!r}")


@dataclass(frozen=True)
class PruneConfig:
    """Pruning before the search: keep the (label, value) choices scoring ``S = k*U*P`` above a
    threshold.

    ``mode`` is one of :data:`nni_hwaware.pruning.MODES` (None: search the whole
    space). The values in ``keep`` and the reference network's values always stay.
    """

    mode: str | None = None
    k: float = 1.0
    threshold: float | None = None
    top: int | None = None
    keep: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        from nni_hwaware.pruning import MODES

        if self.mode is not None and self.mode not in MODES:
            raise HwAwareError(f"prune mode must be one of {', '.join(MODES)} (or null), got {self.mode!r}")
        if isinstance(self.keep, str):
            object.__setattr__(self, "keep", (self.keep,))
        if self.mode == "top-k" and (not isinstance(self.top, int) or self.top < 1):
            raise HwAwareError(f"prune mode top-k needs top: an integer >= 1, got {self.top!r}")
        if self.mode == "value" and not isinstance(self.threshold, (int, float)):
            raise HwAwareError("prune mode value needs threshold: a number")
        if not (isinstance(self.k, (int, float)) and math.isfinite(self.k) and self.k > 0):
            raise HwAwareError(f"prune k must be a positive number, got {self.k!r}")


def load_cost_model(named: NamedSpace, cost: CostConfig, default_table: str | Path, *,
                    seed: int = 0) -> SpaceCostModel:
    """The whole space's cost model: from ``cost.table`` (a cost table or a per-choice table), or the
    space profiled on this machine into ``default_table`` when there is none (once; later runs load it)."""
    from nni_hwaware.cost_model import load_space_model

    table = Path(cost.table) if cost.table else Path(default_table)
    return load_space_model(named, table, chip=cost.chip, backend=cost.backend, batch_size=cost.batch_size,
                            device=cost.device, threads=cost.threads, seed=seed, max_seconds=cost.profile_seconds)


def prune_model(model: SpaceCostModel, prune: PruneConfig, reference: Mapping[str, Any]
                ) -> ChoicePruneResult | None:
    """``model`` pruned by ``S = k*U*P`` as ``prune`` says (None when ``prune.mode`` is None); the
    reference network's values and ``prune.keep`` always stay."""
    if prune.mode is None:
        return None
    from nni_hwaware.pruning import prune_choices

    return prune_choices(model, mode=prune.mode, k=prune.k, threshold=prune.threshold, top=prune.top,
                         always_keep=(*prune.keep, *reference.values()))
