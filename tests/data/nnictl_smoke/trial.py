"""Trial script of the nnictl smoke test (``tests/test_nnictl_e2e.py``).

It fits a tiny random-feature ridge regression on fixed synthetic data and
reports an accuracy-like score plus two made-up hardware costs. Every value is a
deterministic function of the parameters (:func:`compute_metrics`), so the test
can recompute and compare them exactly. The parameters are echoed inside the
final metric because NNI 3.0 can pair a trial's parameters with another trial's
metrics when trials run concurrently (microsoft/nni#5726).
"""

from __future__ import annotations

import numpy as np

EPOCHS = 3


def _fit(width: int, depth: int, alpha: float, epoch: int) -> float:
    rng = np.random.default_rng(1234)
    x = rng.normal(size=(400, 8))
    y = np.sin(x[:, 0]) + 0.5 * x[:, 1] ** 2 - x[:, 2]
    h = x
    for layer in range(depth):
        w = np.random.default_rng(100 * layer + width).normal(size=(h.shape[1], width))
        h = np.tanh(h @ w / np.sqrt(h.shape[1]))
    n_train = 100 + 100 * epoch
    a, b = h[:n_train], y[:n_train]
    coef = np.linalg.solve(a.T @ a + alpha * np.eye(width), a.T @ b)
    pred = h[300:] @ coef
    resid = float(np.mean((pred - y[300:]) ** 2))
    return round(1.0 / (1.0 + resid), 6)


def compute_metrics(params: dict) -> tuple[list[float], dict]:
    """Intermediate scores and the final metric dict for ``params``."""
    width, depth, alpha = int(params["width"]), int(params["depth"]), float(params["alpha"])
    scores = [_fit(width, depth, alpha, epoch) for epoch in range(EPOCHS)]
    n_weights = 8 * width + (depth - 1) * width * width + width
    final = {
        "default": scores[-1],
        "latency_ms": round(0.25 * depth + 0.01 * n_weights, 6),
        "memory_mb": round(n_weights * 4 / 2**20, 9),
        "width": width,
        "depth": depth,
        "alpha": alpha,
    }
    return scores, final


def main() -> None:
    import nni

    params = nni.get_next_parameter()
    scores, final = compute_metrics(params)
    for score in scores:
        nni.report_intermediate_result({"default": score})
    nni.report_final_result(final)


if __name__ == "__main__":
    main()
