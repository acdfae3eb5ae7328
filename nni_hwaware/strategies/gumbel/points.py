"""The searches of a run (the config's own, then the sweep's points), their names, and the targets as
shares of the baseline."""

from __future__ import annotations

from typing import Any

from nni_hwaware.strategies.gumbel.job_config import GumbelSearchConfig

__all__ = ["point_name", "point_text", "search_points", "target_ratios", "target_share"]


def search_points(config: GumbelSearchConfig) -> list[tuple[str, GumbelSearchConfig, dict[str, Any]]]:
    """``(name, config, point)`` of every search of a run: the config's own, then each sweep point
    not equal to it. ``point`` says what the search aimed at: ``{"alpha": a}`` in the fixed-weight
    form, else ``{"latency_target": t}`` (with ``memory_target`` when the penalty has one)."""
    penalty = config.penalty
    own = ("alpha", penalty.alpha) if penalty.latency_target is None else ("latency_target", penalty.latency_target)
    points: dict[str, tuple[str, GumbelSearchConfig, dict[str, Any]]] = {}
    for option, value in (own, *config.sweep.points):
        name = point_name(option, value)
        if name in points:
            continue
        run_config = config if (option, value) == own else config.replace(**{f"penalty.{option}": value})
        point: dict[str, Any] = {option: value}
        if run_config.penalty.memory_target is not None:
            point["memory_target"] = run_config.penalty.memory_target
        points[name] = (name, run_config, point)
    return list(points.values())


def point_name(option: str, value: float | str) -> str:
    """The folder and result name of a search point: ``alpha_1p5``, ``target_30pct``, ``target_2p5ms``."""
    if option == "alpha":
        return _alpha_name(float(value))
    if isinstance(value, str):
        from nni_hwaware.strategies.job import budget_fraction

        return f"target_{100 * budget_fraction(value, 'latency target'):g}pct".replace(".", "p")
    return f"target_{float(value):g}ms".replace(".", "p")


def point_text(point: dict[str, Any] | None) -> str:
    """``alpha=1.5`` or ``latency target 30%`` (``memory target 51%``) of a search point."""
    if not point:
        return ""
    parts = []
    for key, value in point.items():
        unit = "" if isinstance(value, str) else (" ms" if key == "latency_target" else " MB")
        parts.append(f"alpha={value:g}" if key == "alpha" else f"{key.replace('_', ' ')} {value}{unit}")
    return ", ".join(parts)


def _alpha_name(alpha: float) -> str:
    return f"alpha_{alpha:g}".replace(".", "p")


def target_ratios(config: GumbelSearchConfig, baseline: Any) -> dict[str, float]:
    """The penalty's targets as ratios to the baseline's predicted costs (``latency_ratio`` / ``memory_ratio``)."""
    out = {}
    for key, target, predicted in (("latency_ratio", config.penalty.latency_target, baseline.predicted_latency_ms),
                                   ("memory_ratio", config.penalty.memory_target, baseline.predicted_memory_mb)):
        share = target_share(target, predicted, key)
        if share is not None:
            out[key] = share
    return out


def target_share(target: float | str | None, predicted: float | None, name: str) -> float | None:
    """A target as a share of the baseline's predicted cost ("45%" or ms / MB; None when unknown)."""
    from nni_hwaware.strategies.job import budget_fraction

    if isinstance(target, str):
        return budget_fraction(target, name)
    if target is not None and predicted:
        return float(target) / float(predicted)
    return None
