"""NAS-Bench-201 with measured device latencies as tabular search suites.

``data/nb201_hw.csv.gz`` holds every NAS-Bench-201 cell (15,625) with its test
accuracy on CIFAR-10, CIFAR-100 and ImageNet16-120 and its measured latency on
four devices (sources and licences in ``data/README.md``). A cell is 6 edges
(``edge_<to>_<from>``), each one of 5 operations.

The searches mask with a cost model, not with the measured latencies: an
additive per-(edge, operation) table fitted by least squares to the measured
latencies of the device (``latency ≈ b + Σ_e c_{e, op_e}``). It stands in for
profiling each operation on the device (what ``nni-hwaware profile`` does on a
real chip); each edge's cheapest operation is shifted into the fixed row so every
entry is non-negative, and a negative intercept is clipped at 0. The table goes
through :func:`~nni_hwaware.cost_model.choice_cost_model` like any per-choice
cost table.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from nni_hwaware.cost_model import SpaceCostModel, choice_cost_model

__all__ = ["DATASETS", "DEVICES", "EDGES", "OPS", "Suite", "load", "nb201_suite", "per_choice_table"]

DATA = Path(__file__).parent / "data" / "nb201_hw.csv.gz"
OPS = ("none", "skip_connect", "nor_conv_1x1", "nor_conv_3x3", "avg_pool_3x3")
EDGES = ("edge_1_0", "edge_2_0", "edge_2_1", "edge_3_0", "edge_3_1", "edge_3_2")
DEVICES = ("titan_rtx_1", "silver_4114", "samsung_a50", "eyeriss")
DATASETS = {"cifar10": "acc_cifar10_test", "cifar100": "acc_cifar100_test",
            "imagenet16": "acc_imagenet16_120_test"}
_EDGE = re.compile(r"(\w+)~(\d)")


@dataclass
class Suite:
    """A tabular search problem: every architecture's accuracy, measured and modelled latency."""

    name: str
    kind: str
    """'tabular' (the project's own benchmark) or 'nb201'."""
    choices: dict[str, list[str]]
    rows: dict[tuple[str, ...], int]
    """Architecture (values in label order) -> row of the arrays below."""
    accuracy: np.ndarray
    measured_ms: np.ndarray
    model_ms: np.ndarray
    budget_ms: float
    model: SpaceCostModel
    max_trials: int
    """Trials per run (the tabular suite runs on until the best is found)."""
    feasible: np.ndarray = field(init=False)
    """Fits the budget under the cost model (what the searches are told)."""
    best: float = field(init=False)
    feasible_measured: np.ndarray = field(init=False)
    """Fits the budget as measured on the device (what a deployed network must do)."""
    best_measured: float = field(init=False)

    def __post_init__(self) -> None:
        self.feasible = self.model_ms <= self.budget_ms * (1 + 1e-9)
        self.best = float(self.accuracy[self.feasible].max())
        self.feasible_measured = self.measured_ms <= self.budget_ms * (1 + 1e-9)
        self.best_measured = float(self.accuracy[self.feasible_measured].max())

    @property
    def labels(self) -> list[str]:
        return list(self.choices)


def load(path: Path = DATA) -> pd.DataFrame:
    """The data file with one column per edge (the operation on it)."""
    frame = pd.read_csv(path)
    edges = frame.arch_str.map(lambda s: [op for op, _ in _EDGE.findall(s)])
    for k, edge in enumerate(EDGES):
        frame[edge] = edges.map(lambda ops, k=k: ops[k])
    return frame


def _one_hot(frame: pd.DataFrame) -> np.ndarray:
    columns = [(frame[edge] == op).to_numpy(float) for edge in EDGES for op in OPS]
    return np.stack(columns, axis=1)


def _additive_fit(design: np.ndarray, target: np.ndarray) -> tuple[float, np.ndarray]:
    """Least squares ``target ≈ b + design @ c`` (minimum-norm ``c``), shifted so each edge's least entry is 0."""
    solution, *_ = np.linalg.lstsq(np.hstack([np.ones((len(design), 1)), design]), target, rcond=None)
    intercept, coef = float(solution[0]), solution[1:].reshape(len(EDGES), len(OPS))
    low = coef.min(axis=1, keepdims=True)
    return max(0.0, intercept + float(low.sum())), coef - low


def per_choice_table(frame: pd.DataFrame, device: str) -> pd.DataFrame:
    """The per-choice cost table of ``device``: latency fitted to the measured one, FLOPs and parameters
    fitted to the computed ones (both additive over edges; memory from 4-byte parameters)."""
    design = _one_hot(frame)
    fits = {"latency_ms": _additive_fit(design, frame[f"latency_ms_{device}"].to_numpy(float)),
            "flops": _additive_fit(design, 1e6 * frame.flops_M_computed.to_numpy(float)),
            "params": _additive_fit(design, 1e6 * frame.params_M_computed.to_numpy(float))}
    rows = [{"label": "_fixed", "value": "", **{m: b for m, (b, _) in fits.items()}}]
    for e, edge in enumerate(EDGES):
        for o, op in enumerate(OPS):
            rows.append({"label": edge, "value": op, **{m: float(c[e, o]) for m, (_, c) in fits.items()}})
    table = pd.DataFrame(rows)
    table["memory_mb"] = 4 * table.params / 2**20
    return table[["label", "value", "latency_ms", "memory_mb", "flops", "params"]]


def nb201_suite(frame: pd.DataFrame, device: str, dataset: str, quantile: float, max_trials: int = 100) -> Suite:
    """One NB201 suite: budget at the ``quantile`` of the device's measured latency."""
    measured = frame[f"latency_ms_{device}"].to_numpy(float)
    choices = {edge: list(OPS) for edge in EDGES}
    model = choice_cost_model(per_choice_table(frame, device), choices=choices, name="nb201", chip=device)
    design = _one_hot(frame)
    per_edge = np.stack([model.factors[model.factors_of[e][0]].costs["latency_ms"] for e in range(len(EDGES))])
    model_ms = model.fixed["latency_ms"] + design @ per_edge.reshape(-1)
    rows = {tuple(r): i for i, r in enumerate(frame[list(EDGES)].itertuples(index=False, name=None))}
    return Suite(f"nb201/{device}/{dataset}/q{quantile:.2f}", "nb201", choices, rows,
                 frame[DATASETS[dataset]].to_numpy(float), measured, model_ms, float(np.quantile(measured, quantile)),
                 model, max_trials)
