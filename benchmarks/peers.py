"""The search peers of ``search_efficiency.py``, over the same mask as PPO and measuring first.

Each is an NNI Tuner over a suite (:class:`nb201.Suite`): it proposes only architectures the
suite's cost model puts within the budget (the mask every strategy gets), and learns from the
results the harness reports: a trained network's accuracy, or a measurement alone
(``not_trained``: measured over the budget, so never trained), which it never proposes again.

* :class:`RandomFeasible`: uniform over the untried mask-feasible architectures.
* :class:`RegularizedEvolution`: Real et al. 2019 ("Regularized evolution for image classifier
  architecture search"): a population of the last ``population`` trained networks; each child is
  the best of ``sample`` drawn from it with one label mutated; the oldest dies.
* :class:`LocalSearch`: White et al. 2021 ("Local search is state of the art for neural
  architecture search benchmarks"): train every one-label neighbour of the incumbent (in a random
  order); move to the best when it improves, else restart from a random architecture.
"""

from __future__ import annotations

from collections import deque
from typing import Any

import nni
import numpy as np
from nni.tuner import Tuner

__all__ = ["LocalSearch", "RandomFeasible", "RegularizedEvolution"]


class _MaskTuner(Tuner):
    """What the peers share: the mask-feasible set, what was tried, the results."""

    def __init__(self, suite: Any, seed: int) -> None:
        self.suite, self.labels = suite, suite.labels
        self.rng = np.random.default_rng(seed)
        self.feasible = {a for a, i in suite.rows.items() if suite.feasible[i]}
        self.tried: set[tuple[str, ...]] = set()
        self.sent: dict[int, tuple[str, ...]] = {}

    def update_search_space(self, search_space: dict[str, Any]) -> None:
        pass

    def random_untried(self) -> tuple[str, ...] | None:
        left = sorted(self.feasible - self.tried)
        return left[int(self.rng.integers(len(left)))] if left else None

    def neighbours(self, arch: tuple[str, ...]) -> list[tuple[str, ...]]:
        """Untried mask-feasible architectures one label away, in a random order."""
        out = []
        for i, values in enumerate(self.suite.choices.values()):
            for value in values:
                other = (*arch[:i], value, *arch[i + 1:])
                if value != arch[i] and other in self.feasible and other not in self.tried:
                    out.append(other)
        return [out[j] for j in self.rng.permutation(len(out))]

    def propose(self) -> tuple[str, ...] | None:
        raise NotImplementedError

    def learn(self, arch: tuple[str, ...], accuracy: float | None) -> None:
        """``accuracy`` None: a measurement alone (the network measured over the budget)."""

    def generate_parameters(self, parameter_id: int, **kwargs: Any) -> dict[str, str]:
        arch = self.propose()
        if arch is None:
            raise nni.NoMoreTrialError("every feasible architecture is tried")
        self.tried.add(arch)
        self.sent[parameter_id] = arch
        return dict(zip(self.labels, arch, strict=True))

    def receive_trial_result(self, parameter_id: int, parameters: Any, value: Any, **kwargs: Any) -> None:
        arch = self.sent.pop(parameter_id)
        trained = not (isinstance(value, dict) and value.get("not_trained"))
        self.learn(arch, float(value["default"] if isinstance(value, dict) else value) if trained else None)


class RandomFeasible(_MaskTuner):
    """Random search that knows the budget: uniform over the untried feasible architectures."""

    def propose(self) -> tuple[str, ...] | None:
        return self.random_untried()


class RegularizedEvolution(_MaskTuner):
    """Regularized evolution over the mask (module docstring)."""

    def __init__(self, suite: Any, seed: int, population: int = 16, sample: int = 4) -> None:
        super().__init__(suite, seed)
        self.size, self.sample = population, sample
        self.population: deque[tuple[tuple[str, ...], float]] = deque()

    def propose(self) -> tuple[str, ...] | None:
        if len(self.population) < self.size:
            return self.random_untried()
        picks = self.rng.choice(len(self.population), size=min(self.sample, len(self.population)), replace=False)
        parent = max((self.population[int(i)] for i in picks), key=lambda p: p[1])[0]
        children = self.neighbours(parent)
        return children[0] if children else self.random_untried()

    def learn(self, arch: tuple[str, ...], accuracy: float | None) -> None:
        if accuracy is None:
            return  # not trained: not a member of the population
        self.population.append((arch, accuracy))
        if len(self.population) > self.size:
            self.population.popleft()


class LocalSearch(_MaskTuner):
    """Local search from the incumbent with random restarts (module docstring)."""

    def __init__(self, suite: Any, seed: int) -> None:
        super().__init__(suite, seed)
        self.incumbent: tuple[tuple[str, ...], float] | None = None
        self.best_seen: tuple[tuple[str, ...], float] | None = None
        self.queue: list[tuple[str, ...]] = []

    def propose(self) -> tuple[str, ...] | None:
        while self.queue and self.queue[0] in self.tried:
            self.queue.pop(0)
        if self.queue:
            return self.queue.pop(0)
        # the neighbourhood is done: move to its best if it improved, else restart at random
        if self.best_seen is not None and (self.incumbent is None or self.best_seen[1] > self.incumbent[1]):
            self.incumbent = self.best_seen
            self.queue = self.neighbours(self.incumbent[0])
            if self.queue:
                return self.queue.pop(0)
        self.incumbent, self.best_seen = None, None
        return self.random_untried()

    def learn(self, arch: tuple[str, ...], accuracy: float | None) -> None:
        if accuracy is None:
            return
        if self.incumbent is None and not self.queue:  # a restart's first network: its neighbourhood is next
            self.incumbent, self.best_seen = (arch, accuracy), (arch, accuracy)
            self.queue = self.neighbours(arch)
            return
        if self.best_seen is None or accuracy > self.best_seen[1]:
            self.best_seen = (arch, accuracy)
