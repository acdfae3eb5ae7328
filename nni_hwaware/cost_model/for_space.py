"""A named space's cost model from a cost-table file, profiled on this machine when missing.

What every entry point (the PPO tuner, its trials, the evaluator, the Gumbel
pipeline, the command line) does to get from ``space`` + ``table`` to a
:class:`~nni_hwaware.cost_model.SpaceCostModel`:

* a table with leaf rows (:func:`~nni_hwaware.cost_model.profile_model_space`, any space)
  is read through the space's leaves;
* a table of the project's block rows (``nni-hwaware profile`` of a registered space,
  :func:`nni_hwaware.cost_model.profile_space`) through its block cost model;
* a per-choice cost table (``label, value, latency_ms, ...``: a tabular benchmark,
  nn-Meter, a vendor's profiler) through :func:`~nni_hwaware.cost_model.choice_cost_model`;
* a missing table is profiled here (every distinct leaf once) and written.

:func:`load_space_model` does all of it from a file name: what the tuner, its trials,
the evaluator and the command line call.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from nni_hwaware.cost_model.blocks import block_cost_model
from nni_hwaware.cost_model.leaves import SpaceLeaves, find_leaves
from nni_hwaware.cost_model.model import SpaceCostModel
from nni_hwaware.cost_model.profile import profile_model_space, space_cost_model
from nni_hwaware.cost_table.table import CostTable
from nni_hwaware.errors import HwAwareError

__all__ = ["is_choice_table", "load_or_profile", "load_space_model", "profile_space", "space_model"]


def _leaves(named: Any) -> SpaceLeaves:
    cached = getattr(named, "_leaves", None)
    if cached is None:
        cached = find_leaves(named.space, named.dummy_input())
        object.__setattr__(named, "_leaves", cached)
    return cached


def profile_space(space: Any, *, space_args: dict[str, Any] | None = None, **options: Any) -> CostTable:
    """Profile a space on this chip (every distinct leaf once; see :func:`profile_model_space`).

    ``space`` is anything :func:`~nni_hwaware.spaces.resolve.resolve_space` takes: a
    registered name or its :class:`~nni_hwaware.spaces.SpaceConfig`, ``nni:<hub space>``,
    ``module:callable``, a ``ModelSpace`` or a ``NamedSpace``; ``options`` go to
    :func:`profile_model_space` (chip, backend, device, batch_size, threads, peak_flops, ...).
    """
    from nni_hwaware.spaces.resolve import resolve_space

    named = space if hasattr(space, "dummy_input") else resolve_space(space, **(space_args or {}))
    options.setdefault("reference", named.baseline)
    return profile_model_space(named.space, named.dummy_input(), leaves=_leaves(named), **options)


def load_or_profile(named: Any, path: str | os.PathLike[str] | None, *, chip: str | None = None,
                    backend: str = "torch", batch_size: int = 1, device: str = "cpu", threads: int | None = 1,
                    seed: int = 0, progress: bool = False, max_seconds: float | None = None) -> CostTable:
    """The table at ``path``; when there is none, the space profiled on this machine (and saved there).

    A table of this machine's chip without rows for ``backend`` / ``batch_size`` / ``threads`` (profiled
    for another runtime, say) gets them: the space is profiled so and the rows are added to the file.
    ``max_seconds`` bounds the profiling's timing rounds (None:
    :func:`~nni_hwaware.profiling.measure.time_budget`)."""
    table = CostTable.load(path) if path is not None and Path(path).is_file() else None
    if table is not None and not _lacks(table, chip, backend, batch_size, device, threads):
        return table
    table = profile_model_space(named.space, named.dummy_input(), chip=chip, backend=backend, device=device,
                                batch_size=batch_size, threads=threads, seed=seed, progress=progress, table=table,
                                leaves=_leaves(named), max_seconds=max_seconds, reference=named.baseline)
    if path is not None:
        table.save(path)
    return table


def _lacks(table: CostTable, chip: str | None, backend: str, batch_size: int, device: str,
           threads: int | None) -> bool:
    """Whether ``table`` lacks rows of this machine's chip for the backend, batch size and thread count
    that profiling here adds: when it holds this chip, or ``chip`` names it. A table of another chip is
    left as it is (its model says what is missing)."""
    from nni_hwaware.profiling.chips import detect_chip

    here = detect_chip(device, threads)
    if (chip or here.name) != here.name or (chip is None and here.name not in table.chips()):
        return False
    name = here.name
    frame = table.frame
    return not ((frame.chip == name) & (frame.backend == backend) & (frame.batch_size == batch_size)
                & (frame.threads == here.threads)).any()


def space_model(named: Any, table: CostTable, *, chip: str | None = None, backend: str = "torch",
                batch_size: int = 1, threads: int | None = None) -> SpaceCostModel:
    """The cost model of ``named`` (a :class:`~nni_hwaware.spaces.resolve.NamedSpace`) from ``table``; of
    the rows timed with ``threads`` intra-op threads where the table holds several counts."""
    table = _at_threads(table, chip, backend, batch_size, threads)
    frame = table.frame
    if (frame.kind == "leaf").any():
        return space_cost_model(_leaves(named), table, chip=chip, backend=backend, batch_size=batch_size,
                                name=named.name)
    config = getattr(named, "config", None)
    if config is None:
        raise HwAwareError(f"the cost table holds the project's block rows, not the leaves of space {named.name!r}; "
                           "profile this space (nni-hwaware profile --space ...)")
    from nni_hwaware.cost_model.block_table import BlockCostModel

    return block_cost_model(BlockCostModel(table, config, chip=chip, backend=backend, batch_size=batch_size))


def _at_threads(table: CostTable, chip: str | None, backend: str, batch_size: int,
                threads: int | None) -> CostTable:
    """``table`` less the rows of the same chip, backend and batch size at other thread counts than
    ``threads`` (the only count there when None); the table itself when it holds one count."""
    frame = table.frame
    same = (frame.backend == backend) & (frame.batch_size == batch_size)
    if chip is not None:
        same &= frame.chip == chip
    counts = sorted(int(t) for t in frame.threads[same].unique())
    if len(counts) <= 1:
        return table
    if threads is None:
        raise HwAwareError(f"the cost table holds backend {backend!r} at batch size {batch_size} timed with "
                           f"{counts} threads; choose one with threads=... (--threads)")
    if threads not in counts:
        raise HwAwareError(f"the cost table has no rows for backend {backend!r} at batch size {batch_size} "
                           f"timed with {threads} threads, only {counts}; profile it so, or choose one of these")
    return CostTable(frame[~same | (frame.threads == threads)].reset_index(drop=True))


def is_choice_table(path: str | os.PathLike[str]) -> bool:
    """Whether ``path`` is a per-choice cost table (a CSV with ``label`` and ``value`` columns)."""
    path = Path(path)
    if path.suffix.lower() != ".csv" or not path.is_file():
        return False
    with path.open(encoding="utf-8") as fh:
        header = [c.strip() for c in fh.readline().split(",")]
    return "label" in header and "value" in header and "block" not in header


def load_space_model(named: Any, path: str | os.PathLike[str] | None, *, chip: str | None = None,
                     backend: str = "torch", batch_size: int = 1, device: str = "cpu",
                     threads: int | None = 1, seed: int = 0, max_seconds: float | None = None) -> SpaceCostModel:
    """The cost model of ``named`` from the file at ``path`` (module docstring); profiled there when missing."""
    if path is not None and is_choice_table(path):
        from nni_hwaware.cost_model.choice_table import choice_cost_model

        return choice_cost_model(path, choices=named.choices(), name=named.name, chip=chip or "")
    table = load_or_profile(named, path, chip=chip, backend=backend, batch_size=batch_size, device=device,
                            threads=threads, seed=seed, max_seconds=max_seconds)
    return space_model(named, table, chip=chip, backend=backend, batch_size=batch_size, threads=threads)
