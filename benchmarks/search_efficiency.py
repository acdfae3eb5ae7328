"""Search efficiency under a latency budget: PPO against random search and NNI's tuners.

Suites (``--suites``; names match by prefix):

* ``tabular``: the project's own benchmark (``data/tabular_digits_tiny.csv``:
  every architecture of ``digits_tiny`` trained on digits; rebuild it with
  ``build_tabular.py``), masked with the project's own cost table of the space
  (``data/digits_tiny_table.csv``), budget at the 1/3 quantile of that model's latency.
  A run goes on until the best feasible architecture is found.
* ``nb201/<device>/<dataset>/q<quantile>``: NAS-Bench-201 with measured latencies
  (see :mod:`nb201`): 4 devices x 3 data sets x budgets at the 1/3 and 1/10
  quantiles of measured latency; the mask is an additive per-(edge, operation)
  cost table fitted by least squares to the measured latencies (it stands in for
  profiling each operation on the device). Runs of 100 trials.

Every strategy is driven through NNI's Tuner interface (``update_search_space`` /
``generate_parameters`` / ``receive_trial_result``) and a trial is a table look-up that reports the
accuracy and the **measured** latency, as a trial on the device would. **Every strategy measures
first** (:func:`run`): a proposal is measured, and one over the budget as measured is not trained:
the tuner gets what a search trial then reports (``default`` 0, the latency, ``not_trained``) and the
run counts a measurement, not a training. A run ends at 100 trainings or
:data:`MEASUREMENTS_PER_TRAINING` times that many measurements; regret is at 25 / 50 / 100
trainings, against the best network that fits as measured (``--judge model``: as the cost model
says; each run also gives the other judgment's regrets). The peers search over the same mask
(:mod:`peers`): ``random_feasible`` (uniform over the untried mask-feasible architectures),
``rea_feasible`` (regularized evolution) and ``local_search`` (White et al. 2021). ``ppo`` is
:class:`~nni_hwaware.strategies.ppo.tuner.PPOTuner` on the tabular suite and
:class:`~nni_hwaware.strategies.ppo.search.PPOSearch` behind the same Tuner calls on NB201, both with
:class:`PPOConfig`'s defaults plus ``--ppo``; the ablations run the same core: ``ppo_no_policy``
(the same screening, uniform draws in place of the policy's), ``ppo_trained_as_proposed`` (the
accounting and defaults of the release before: every proposal trained), ``ppo_trusting`` (no
correction), ``ppo_no_margin``, ``ppo_no_risk``, ``ppo_conformal``, ``ppo_no_risk_floor`` and
``ppo_synflow``. NNI's own tuners (``random``, ``tpe``, ``regularized_evolution`` over the whole
space) and RL searchers (``policy_based_rl``, ``nni_ppo``, where their extra packages are installed,
:mod:`rl_peers`; ``policy_based_rl`` runs its own loop, not measured first) run too.
The tuning split is declared in :data:`TUNING_FAMILIES`: defaults are chosen on it only.

Per suite and strategy, over ``--seeds`` seeds: median trials until the best
feasible architecture is trained (censored at ``max_trials + 1``), mean regret
(best feasible accuracy minus the best found) at 25 / 50 / 100 trials,
proposals over budget against the model and against the measured latency, and
milliseconds per decision (``generate_parameters``) and per result, and for PPO
runs whether the best they report (``PPOSearch.best``) is over budget as measured.
Per suite, ``delta_oracle_regret`` is what holding PPO's ``delta`` leaves reachable: the
regret of a search that knows every accuracy and proposes only networks that fit with
probability at least ``1 - delta`` under the table's errors (:func:`delta_oracle_regret`).
The last line is one JSON object, with ``trainings``, ``measurements``, ``measurements_per_training``,
``family_ratios`` (family -> PPO's regret over random's, geometric mean), ``families_vs_peers`` (the
same against each peer, with the suites PPO is strictly below), ``regret100_ratio_vs_rea`` and
``regret100_ratio_vs_no_policy``, ``over_budget_measured_share`` (PPO's trainings over the measured
budget, of all its trainings),
``best_over_budget_measured_runs``, and the delta-oracle's regret against random's and PPO's
against the oracle's (geometric means). ``mask_over_budget_measured_share`` and
``accurate_over_budget_measured_share`` say how often the mask-feasible networks, all of them
and the most accurate 5 %, measure over the budget (:func:`over_budget_shares`). The first is
random search over the mask's share in expectation: PPO's share is compared per suite with
random's runs (``suites_over_budget_not_below``) and with that expectation
(``suites_over_budget_not_below_random_expected``), which is free of the luck of random's
runs (the same draws in a device's three data sets, which share its budget and mask).
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import random
import statistics
import sys
import time
from collections.abc import Callable
from functools import cache, partial
from multiprocessing import Pool
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).parent))

import nb201
import nni
from nb201 import Suite
from nni.tuner import Tuner
from peers import LocalSearch, RandomFeasible, RegularizedEvolution

from nni_hwaware.strategies.budget import Budget
from nni_hwaware.strategies.ppo.config import PPOConfig

DATA = Path(__file__).parent / "data"
SPACE = "digits_tiny"
NNI_TUNERS = ("random", "tpe", "regularized_evolution", "policy_based_rl", "nni_ppo")
STRATEGIES = ("ppo", "ppo_no_policy", "ppo_trusting", "ppo_no_margin", "ppo_no_risk", "ppo_conformal",
              "ppo_no_risk_floor", "ppo_synflow", "ppo_trained_as_proposed",
              "random_feasible", "rea_feasible", "local_search", "random", "tpe", "regularized_evolution",
              "policy_based_rl", "nni_ppo")
#: The peers every PPO figure is compared with (each searches over the mask, measures first).
PEERS = ("random_feasible", "rea_feasible", "local_search")
#: The declared tuning split: every default is chosen on these suites only; the others are held out.
TUNING_FAMILIES = ("tabular", "titan_rtx_1")
#: Ablations and variants of PPO's learning from measured costs (on by default): the options each adds to ``--ppo``.
ABLATIONS = {"ppo_no_policy": {"explore": 1.0},
             # the accounting and the defaults of the release before measuring first
             "ppo_trained_as_proposed": {"measure_first": False, "delta": 0.1, "update_every": 1},
             "ppo_trusting": {"correct": False},
             "ppo_no_margin": {"margin": False},
             "ppo_no_risk": {"risk": 1.0},
             "ppo_conformal": {"margin_model": "conformal"},
             "ppo_no_risk_floor": {"risk_floor": False},
             "ppo_synflow": {"proxy": "synflow"}}
CHECKPOINTS = (25, 50, 100)
#: Measurements a run may make per training (on average: a run stops at this many times its trainings).
MEASUREMENTS_PER_TRAINING = 1.5
#: Accuracy points below which a regret is 0 (the benchmarks' accuracies have two decimals).
REGRET_FLOOR = 0.01


def tabular_suite(quantile: float = 1 / 3) -> Suite:
    """The project's own benchmark, masked with the space's profiled cost table."""
    from nni_hwaware.cost_model import space_model
    from nni_hwaware.cost_table import CostTable
    from nni_hwaware.spaces import get_space_config
    from nni_hwaware.spaces.resolve import resolve_space

    frame = pd.read_csv(DATA / f"tabular_{SPACE}.csv")
    config = get_space_config(SPACE)
    model = space_model(resolve_space(SPACE), CostTable.load(DATA / f"{SPACE}_table.csv"))
    choices = {s.label: list(s.candidates) for s in config.layer_specs()}
    archs = list(frame[list(choices)].itertuples(index=False, name=None))
    model_ms = np.array([model.predict(dict(zip(choices, a, strict=True))).latency_ms for a in archs])
    measured = frame.latency_ms.to_numpy(float)
    # The budget admits a third of the architectures under the cost model the search masks with.
    return Suite("tabular", "tabular", choices, {a: i for i, a in enumerate(archs)}, frame.val_acc.to_numpy(float),
                 measured, model_ms, float(np.quantile(model_ms, quantile)), model, len(frame))


def suite_names() -> list[str]:
    return ["tabular"] + [f"nb201/{d}/{s}/q{q:.2f}" for d in nb201.DEVICES for s in nb201.DATASETS
                          for q in (1 / 3, 0.1)]


@cache
def _frame() -> pd.DataFrame:
    return nb201.load()


@cache
def get_suite(name: str) -> Suite:
    if name == "tabular":
        return tabular_suite()
    _, device, dataset, quantile = name.split("/")
    return nb201.nb201_suite(_frame(), device, dataset, {"q0.33": 1 / 3, "q0.10": 0.1}[quantile])


@cache
def _proxy_column(proxy: str = "synflow") -> np.ndarray:
    """Every NB201 cell's score by one zero-cost proxy (``nb201_proxy.py --proxy``), in the data's row order."""
    scores = pd.read_csv(DATA / f"nb201_{proxy}.csv.gz")
    if not (scores.arch_idx.to_numpy() == _frame().arch_idx.to_numpy()).all():
        raise ValueError(f"data/nb201_{proxy}.csv.gz does not match data/nb201_hw.csv.gz; "
                         f"rerun nb201_proxy.py --proxy {proxy}")
    return scores[f"log_{proxy}"].to_numpy(float)


def proxy_lookup(suite: Suite, archs: list[dict[str, str]], proxy: str = "synflow") -> np.ndarray:
    """The scores :class:`~nni_hwaware.zero_cost.ProxyScores` gives these NB201 cells (computed once, read
    here): one column per proxy of ``proxy`` (``synflow+naswot``: two)."""
    rows = [suite.rows[tuple(a[label] for label in suite.labels)] for a in archs]
    parts = proxy.split("+")
    if len(parts) == 1:
        return _proxy_column(proxy)[rows]
    return np.column_stack([_proxy_column(part)[rows] for part in parts])


def proxy_ms(cells: int = 20, proxy: str = "synflow") -> float:
    """Milliseconds the search would spend scoring one NB201 cell on the spot (``nb201_proxy.py``),
    median over ``cells`` random cells."""
    from nb201_proxy import _score, nni_arch

    rows = _frame()[list(nb201.EDGES)].to_dict("records")
    picks = np.random.default_rng(0).choice(len(rows), size=cells, replace=False)
    return float(np.median(_score(([nni_arch(rows[i]) for i in picks], {}, None, proxy))[1]))


class CoreTuner(Tuner):
    """:class:`PPOSearch` behind NNI's Tuner calls (what PPOTuner does, without its files)."""

    def __init__(self, suite: Suite, ppo: dict[str, Any]) -> None:
        from nni_hwaware.strategies.ppo.search import PPOSearch

        config = PPOConfig.from_dict(ppo)
        proxy = partial(proxy_lookup, suite, proxy=config.proxy) if suite.kind == "nb201" else None
        self.search = PPOSearch(suite.model, Budget(latency_ms=suite.budget_ms), config, proxy=proxy)
        self.sent: dict[int, dict[str, str]] = {}

    def update_search_space(self, search_space: dict[str, Any]) -> None:
        pass

    def generate_parameters(self, parameter_id: int, **kwargs: Any) -> dict[str, str]:
        arch = self.search.ask()
        if arch is None:
            raise nni.NoMoreTrialError("every feasible architecture is tried")
        self.sent[parameter_id] = arch
        return dict(arch)

    def receive_trial_result(self, parameter_id: int, parameters: Any, value: Any, **kwargs: Any) -> None:
        self.search.tell(self.sent.pop(parameter_id), dict(value) if isinstance(value, dict) else {"default": value})


def make_tuner(name: str, suite: Suite, seed: int, ppo: dict[str, Any]) -> Any:
    from nni.algorithms.hpo.random_tuner import RandomTuner
    from nni.algorithms.hpo.regularized_evolution_tuner import RegularizedEvolutionTuner
    from nni.algorithms.hpo.tpe_tuner import TpeTuner

    if name in ABLATIONS:
        return CoreTuner(suite, {**ppo, **ABLATIONS[name], "seed": seed})
    if name == "ppo":
        if suite.kind == "tabular":
            from nni_hwaware.strategies.ppo.tuner import PPOTuner

            return PPOTuner(SPACE, str(DATA / f"{SPACE}_table.csv"), budget={"latency_ms": suite.budget_ms},
                            ppo={**ppo, "seed": seed})
        return CoreTuner(suite, {**ppo, "seed": seed})
    if name == "random":
        return RandomTuner(seed=seed)
    if name == "tpe":
        return TpeTuner(optimize_mode="maximize", seed=seed)
    if name == "regularized_evolution":
        random.seed(seed)  # NNI's evolution tuner draws from the global `random` module
        np.random.seed(seed)
        return RegularizedEvolutionTuner(optimize_mode="maximize", population_size=16, sample_size=4)
    if name == "nni_ppo":
        from rl_peers import nni_ppo_tuner

        return nni_ppo_tuner(seed)
    if name == "random_feasible":
        return RandomFeasible(suite, seed)
    if name == "rea_feasible":
        return RegularizedEvolution(suite, seed)
    if name == "local_search":
        return LocalSearch(suite, seed)
    raise ValueError(f"unknown strategy {name!r}")


def judged(suite: Suite, judge: str) -> tuple[np.ndarray, float]:
    """Which networks count as feasible, and the best feasible accuracy: as measured or by the model."""
    return (suite.feasible_measured, suite.best_measured) if judge == "measured" else (suite.feasible, suite.best)


def search_space(suite: Suite, kind: str = "choice") -> dict[str, Any]:
    return {label: {"_type": kind, "_value": list(values)} for label, values in suite.choices.items()}


def run(tuner: Any, suite: Suite, max_trials: int, judge: str = "measured", measure_first: bool = True,
        per_training: float = MEASUREMENTS_PER_TRAINING) -> dict[str, Any]:
    """A tuner through NNI's Tuner interface, each trial a table look-up (``judge``: what counts as feasible).

    Measured first (the default): every proposal is measured (its measured latency looked up), and one
    measured over the budget is not trained: the tuner gets what a search trial reports then (``default``
    0, the measured latency and ``not_trained``), and the run counts a measurement, not a training. A run
    ends at ``max_trials`` trainings or ``per_training`` times that many measurements, whichever comes
    first; the regrets are at 25 / 50 / 100 trainings. ``measure_first`` False: every proposal is trained
    (and one over the budget reported as a failure, accuracy 0), the accounting before measuring first.
    """
    from nni.algorithms.hpo.regularized_evolution_tuner import RegularizedEvolutionTuner

    # NNI's evolution and PPO tuners take layer_choice parameters, not choice
    layer = isinstance(tuner, RegularizedEvolutionTuner) or type(tuner).__module__.startswith("nni.algorithms.hpo.ppo")
    tuner.update_search_space(search_space(suite, "layer_choice" if layer else "choice"))
    feasible, best = judged(suite, judge)
    sequence: list[int] = []  # the trained networks, in order
    measurements, screened_over = 0, 0
    max_measurements = math.floor(per_training * max_trials) if measure_first else max_trials
    decide = learn = 0.0
    trial = 0
    while len(sequence) < max_trials and measurements < max_measurements:
        if len(sequence) >= CHECKPOINTS[-1] and any(feasible[i] and suite.accuracy[i] >= best for i in sequence):
            break  # the best is found and regret at 100 is known
        start = time.perf_counter()
        try:
            params = tuner.generate_parameters(trial)
        except nni.NoMoreTrialError:
            break
        decide += time.perf_counter() - start
        # NNI's layer_choice tuners answer {"_value": name, "_idx": i}
        arch = tuple(str(v.get("_value") if isinstance(v, dict) else v) for v in (params[k] for k in suite.labels))
        row = suite.rows[arch]
        measurements += 1
        over = bool(suite.measured_ms[row] > suite.budget_ms * (1 + 1e-9))
        metric: dict[str, Any] = {"latency_ms": float(suite.measured_ms[row]),
                                  "arch": json.dumps(dict(zip(suite.labels, arch, strict=False)))}
        if measure_first and over:
            screened_over += 1
            metric.update(default=0.0, not_trained="measured over the budget (latency_ms)")
        else:
            sequence.append(row)
            metric["default"] = float(suite.accuracy[row]) if feasible[row] else 0.0
        start = time.perf_counter()
        tuner.receive_trial_result(trial, params, metric)
        tuner.trial_end(trial, True)
        learn += time.perf_counter() - start
        trial += 1
    out = summarise(sequence, suite, max_trials, decide, learn, judge, decisions=trial)
    out.update(measurements=measurements, screened_over_budget=screened_over,
               measurements_per_training=measurements / max(1, len(sequence)))
    search = getattr(tuner, "search", None)
    if search is not None and getattr(search, "proxy", None) is not None:
        # networks the proxy scored: what computing it on the spot would add to the decisions
        out["proxy_networks_per_decision"] = len(search._proxy_scores) / max(1, search.decisions)
    if search is not None and hasattr(search, "best"):
        reported = search.best()
        out["best_over_budget_measured"] = bool(
            reported is not None and suite.measured_ms[suite.rows[tuple(reported[0][k] for k in suite.labels)]]
            > suite.budget_ms * (1 + 1e-9))
    return out


def delta_oracle_regret(suite: Suite, delta: float, judge: str = "measured") -> float:
    """The regret of a search that knows every network's accuracy but, like PPO, proposes only networks
    that fit the budget as measured with probability at least ``1 - delta``.

    A network's probability of measuring over is the share of the table's errors (log measured /
    predicted, over the whole space: a perfect validation of the table) that would put its prediction
    over the budget; what no correction can learn of one network stays unknown to the oracle too. It
    finds the best network it may propose that fits (``judge``), so no search holding ``delta`` per
    proposal reaches a lower regret, however many trials it runs, unless it learns the table's errors
    network by network.
    """
    errors = np.sort(np.log(suite.measured_ms / suite.model_ms))
    gap = np.log(suite.budget_ms * (1 + 1e-9)) - np.log(suite.model_ms)
    over = 1.0 - np.searchsorted(errors, gap, side="right") / len(errors)
    feasible, best = judged(suite, judge)
    allowed = (over <= delta) & feasible
    return best - float(suite.accuracy[allowed].max()) if allowed.any() else best


def over_budget_shares(suite: Suite, top: float = 0.05) -> dict[str, float]:
    """How often the mask-feasible networks measure over the budget: all of them (what random search
    over the mask proposes, in expectation) and the most accurate ``top`` of them (where a search that
    finds accurate networks proposes)."""
    masked = np.flatnonzero(suite.feasible)
    over = ~suite.feasible_measured
    accurate = masked[np.argsort(-suite.accuracy[masked], kind="stable")[: max(1, round(top * len(masked)))]]
    return {"mask_over_budget_measured_share": float(over[masked].mean()),
            "accurate_over_budget_measured_share": float(over[accurate].mean())}


def summarise(sequence: list[int], suite: Suite, max_trials: int, decide_s: float, learn_s: float,
              judge: str = "measured", decisions: int | None = None) -> dict[str, Any]:
    """The figures of one run from its trainings in order (rows of the suite), judged as ``judge`` says;
    the regrets of the other judgment too (``model_regret_at_*`` or ``measured_regret_at_*``).
    ``decisions``: the proposals made (measured), by default one per training."""
    judgments = {name: judged(suite, name) for name in ("measured", "model")}
    mask, best_value = judgments[judge]
    feasible = [bool(mask[i]) for i in sequence]
    found = next((t + 1 for t, (i, ok) in enumerate(zip(sequence, feasible, strict=False))
                  if ok and suite.accuracy[i] >= best_value), None)
    out: dict[str, Any] = {"judge": judge, "trials_to_best": found if found is not None else max_trials + 1}
    for name, (other, other_best) in judgments.items():
        prefix = "" if name == judge else f"{name}_"
        for k in CHECKPOINTS:
            best = max([float(suite.accuracy[i]) for i in sequence[:k] if other[i]], default=0.0)
            out[f"{prefix}regret_at_{k}"] = other_best - best
    out["over_budget_model"] = sum(not suite.feasible[i] for i in sequence)
    out["over_budget_measured"] = sum(bool(suite.measured_ms[i] > suite.budget_ms) for i in sequence)
    out["trials"] = len(sequence)
    decisions = len(sequence) if decisions is None else decisions
    out["ask_ms"] = 1000 * decide_s / max(1, decisions)
    out["result_ms"] = 1000 * learn_s / max(1, decisions)
    out["decision_ms"] = out["ask_ms"] + out["result_ms"]  # a decision is an ask and a tell
    return out


def one_run(task: tuple[str, str, int, dict[str, Any], str]) -> tuple[str, str, dict[str, Any]]:
    suite_name, name, seed, ppo, judge = task
    logging.getLogger("nni").setLevel(logging.ERROR)
    suite = get_suite(suite_name)
    max_trials = suite.max_trials
    if name == "policy_based_rl":
        from rl_peers import run_policy_based_rl

        return suite_name, name, run_policy_based_rl(suite, seed, max_trials, partial(summarise, judge=judge),
                                                     judge=judge)
    measure_first = {**ppo, **ABLATIONS.get(name, {})}.get("measure_first", True)
    return suite_name, name, run(make_tuner(name, suite, seed, ppo), suite, max_trials, judge, measure_first)


def available(name: str) -> str | None:
    """Why a strategy cannot run here (None: it can)."""
    from rl_peers import missing

    return missing(name)


def aggregate(runs: list[dict[str, Any]]) -> dict[str, Any]:
    other = next(k.split("_regret")[0] for k in runs[0] if k.endswith("_regret_at_100"))
    trials = sum(r["trials"] for r in runs)
    out = {"median_trials_to_best": statistics.median(r["trials_to_best"] for r in runs),
            **{f"mean_regret_at_{k}": statistics.mean(r[f"regret_at_{k}"] for r in runs) for k in CHECKPOINTS},
            **{f"mean_{other}_regret_at_{k}": statistics.mean(r[f"{other}_regret_at_{k}"] for r in runs)
               for k in CHECKPOINTS},
            "over_budget_model": sum(r["over_budget_model"] for r in runs),
            "over_budget_measured": sum(r["over_budget_measured"] for r in runs),
            "over_budget_measured_share": sum(r["over_budget_measured"] for r in runs) / max(1, trials),
            "proposals": trials,
            "trainings": trials,
            "measurements": sum(r.get("measurements", r["trials"]) for r in runs),
            "screened_over_budget": sum(r.get("screened_over_budget", 0) for r in runs),
            "measurements_per_training": sum(r.get("measurements", r["trials"]) for r in runs) / max(1, trials),
            "max_measurements_per_training": max(r.get("measurements_per_training", 1.0) for r in runs),
            "decision_ms": statistics.median(r["decision_ms"] for r in runs),
            "ask_ms": statistics.median(r.get("ask_ms", r["decision_ms"]) for r in runs),
            "result_ms": statistics.median(r["result_ms"] for r in runs), "runs": len(runs)}
    if any("proxy_networks_per_decision" in r for r in runs):
        out["proxy_networks_per_decision"] = statistics.mean(r.get("proxy_networks_per_decision", 0.0) for r in runs)
    if any("best_over_budget_measured" in r for r in runs):
        out["best_over_budget_measured_runs"] = sum(bool(r.get("best_over_budget_measured")) for r in runs)
    return out


def _geomean(values: list[float]) -> float:
    return math.exp(statistics.mean(math.log(v) for v in values)) if values else math.nan


def headline(suites: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """The closing figures: PPO against random over the feasible set and against NNI's tuners."""
    out: dict[str, Any] = {}
    ratios, tabular, beats, other_ratios, below, below_expected = [], [], {}, [], {}, {}
    oracle_vs_random, ppo_vs_oracle = [], []
    for name, result in suites.items():
        ppo, masked = result.get("ppo"), result.get("random_feasible")
        if not isinstance(ppo, dict):
            continue
        if isinstance(masked, dict):
            a, b = ppo["mean_regret_at_100"], masked["mean_regret_at_100"]
            # regrets below the data's resolution (accuracies to 0.01 points) count as 0.01
            ratios.append(max(a, REGRET_FLOOR) / max(b, REGRET_FLOOR))
            if (oracle := result.get("delta_oracle_regret")) is not None:
                oracle_vs_random.append(max(oracle, REGRET_FLOOR) / max(b, REGRET_FLOOR))
                ppo_vs_oracle.append(max(a, REGRET_FLOOR) / max(oracle, REGRET_FLOOR))
            other = next((k for k in ppo if k.startswith("mean_") and k.endswith("_regret_at_100")
                          and k != "mean_regret_at_100"), None)
            if other and other in masked:
                other_ratios.append(max(ppo[other], REGRET_FLOOR) / max(masked[other], REGRET_FLOOR))
            share = ppo["over_budget_measured_share"]
            below[name] = share < masked["over_budget_measured_share"] or share == 0
            if (expected := result.get("mask_over_budget_measured_share")) is not None:
                # random's share in expectation (its draws are uniform over the mask), free of its runs' luck
                below_expected[name] = share < expected or share == 0
            if name.startswith("tabular"):
                tabular.append(ppo["median_trials_to_best"] / masked["median_trials_to_best"])
        others = {k: v for k, v in result.items() if k in NNI_TUNERS and isinstance(v, dict)}
        beats[name] = all(ppo["mean_regret_at_100"] < v["mean_regret_at_100"] or
                          (ppo["mean_regret_at_100"] == v["mean_regret_at_100"] and
                           ppo["median_trials_to_best"] < v["median_trials_to_best"]) for v in others.values())
    out["regret100_ratio_vs_masked_random"] = _geomean(ratios)
    out["regret100_ratio_vs_masked_random_other_judgment"] = _geomean(other_ratios)
    # what holding delta per proposal leaves reachable: the delta-oracle against random, PPO against it
    out["delta_oracle_regret_ratio_vs_masked_random"] = _geomean(oracle_vs_random)
    out["regret100_ratio_vs_delta_oracle"] = _geomean(ppo_vs_oracle)
    out["trials_to_best_ratio_vs_masked_random"] = _geomean(tabular)
    out["over_budget_model"] = sum(r["ppo"]["over_budget_model"] for r in suites.values() if isinstance(r.get("ppo"), dict))
    out["over_budget_measured"] = sum(r["ppo"]["over_budget_measured"] for r in suites.values()
                                      if isinstance(r.get("ppo"), dict))
    ppo_runs = [r["ppo"] for r in suites.values() if isinstance(r.get("ppo"), dict)]
    trials = sum(r.get("proposals", 0) for r in ppo_runs)
    out["over_budget_measured_share"] = (out["over_budget_measured"] / trials) if trials else 0.0
    out["over_budget_below_random_feasible_in_every_suite"] = all(below.values()) if below else None
    out["suites_over_budget_not_below"] = [k for k, v in below.items() if not v]
    out["over_budget_below_random_expected_in_every_suite"] = all(below_expected.values()) if below_expected else None
    out["suites_over_budget_not_below_random_expected"] = [k for k, v in below_expected.items() if not v]
    out["best_over_budget_measured_runs"] = sum(r.get("best_over_budget_measured_runs", 0) for r in ppo_runs)
    times = [r["ppo"]["decision_ms"] for r in suites.values() if isinstance(r.get("ppo"), dict)]
    out["decision_ms"] = statistics.median(times) if times else math.nan
    scored = [r["ppo"]["proxy_networks_per_decision"] for name, r in suites.items()
              if name.startswith("nb201") and isinstance(r.get("ppo"), dict) and "proxy_networks_per_decision" in r["ppo"]]
    if scored:
        out["proxy_networks_per_decision"] = statistics.mean(scored)
    out["beats_every_nni_tuner"] = all(beats.values()) if beats else None
    out["suites_not_beaten"] = [k for k, v in beats.items() if not v]
    out.update(peer_figures(suites))
    return out


def family_of(suite_name: str) -> str:
    """A suite's device family: ``tabular`` or the NB201 device."""
    parts = suite_name.split("/")
    return "tabular" if suite_name.startswith("tabular") else parts[1] if len(parts) > 1 else suite_name


def regret_ratio(a: dict[str, Any], b: dict[str, Any]) -> float:
    """``a``'s mean regret at 100 trainings over ``b``'s (regrets below the data's resolution count as it)."""
    return max(a["mean_regret_at_100"], REGRET_FLOOR) / max(b["mean_regret_at_100"], REGRET_FLOOR)


def peer_figures(suites: dict[str, dict[str, Any]], strategy: str = "ppo") -> dict[str, Any]:
    """``strategy`` against each peer (and PPO against its ablation without the policy), per device family:
    the geometric mean of the regret ratios at 100 trainings over the family's suites, and in how many
    suites it is strictly below the peer (a tie, at 0 regret or not, is not below)."""
    out: dict[str, Any] = {}
    ppo_runs = [r[strategy] for r in suites.values() if isinstance(r.get(strategy), dict)]
    out["trainings"] = sum(r.get("trainings", r.get("proposals", 0)) for r in ppo_runs)
    out["measurements"] = sum(r.get("measurements", 0) for r in ppo_runs)
    out["measurements_per_training"] = out["measurements"] / max(1, out["trainings"])
    out["max_measurements_per_training_of_a_run"] = max((r.get("max_measurements_per_training", 0.0)
                                                         for r in ppo_runs), default=math.nan)
    out["tuning_families"] = list(TUNING_FAMILIES)
    by_peer: dict[str, dict[str, Any]] = {}
    for peer in (*PEERS, "ppo_no_policy"):
        families: dict[str, list[float]] = {}
        below: dict[str, int] = {}
        for name, result in suites.items():
            a, b = result.get(strategy), result.get(peer)
            if not (isinstance(a, dict) and isinstance(b, dict)) or peer == strategy:
                continue
            family = family_of(name)
            families.setdefault(family, []).append(regret_ratio(a, b))
            below[family] = below.get(family, 0) + (a["mean_regret_at_100"] < b["mean_regret_at_100"])
        if families:
            by_peer[peer] = {f: {"ratio": _geomean(v), "suites": len(v), "below": below[f]}
                             for f, v in families.items()}
    out["families_vs_peers"] = by_peer
    ratios = by_peer.get("random_feasible", {})
    out["family_ratios"] = {f: v["ratio"] for f, v in ratios.items()}
    if "rea_feasible" in by_peer:
        every = [regret_ratio(r[strategy], r["rea_feasible"]) for r in suites.values()
                 if isinstance(r.get(strategy), dict) and isinstance(r.get("rea_feasible"), dict)]
        out["regret100_ratio_vs_rea"] = _geomean(every)
        out["family_ratios_vs_rea"] = {f: v["ratio"] for f, v in by_peer["rea_feasible"].items()}
    if "ppo_no_policy" in by_peer:
        every = [regret_ratio(r[strategy], r["ppo_no_policy"]) for r in suites.values()
                 if isinstance(r.get(strategy), dict) and isinstance(r.get("ppo_no_policy"), dict)]
        out["regret100_ratio_vs_no_policy"] = _geomean(every)
    return out


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=10)
    parser.add_argument("--suites", nargs="*", help="suite names or prefixes (default: all)")
    parser.add_argument("--strategies", nargs="*", choices=STRATEGIES)
    parser.add_argument("--ppo", default="{}", help="PPO options as JSON (see PPOConfig), e.g. for ablations")
    parser.add_argument("--judge", choices=("measured", "model"), default="measured",
                        help="feasible as measured on the device (default) or by the cost model")
    parser.add_argument("--jobs", type=int, default=1, help="runs in parallel (processes)")
    parser.add_argument("--out", help="also write the per-suite figures here (JSON)")
    parser.add_argument("--merge", nargs="*", default=[], help="per-suite figures of earlier runs (--out files)")
    args = parser.parse_args(argv)
    ppo = json.loads(args.ppo)
    PPOConfig.from_dict(ppo)  # bad options: one clear line before any run
    names = [s for s in suite_names() if not args.suites or any(s.startswith(p) for p in args.suites)]
    strategies = list(args.strategies or STRATEGIES)
    suites: dict[str, dict[str, Any]] = {s: {} for s in names}
    for name in list(strategies):
        why = available(name)
        if why is not None:
            strategies.remove(name)
            for s in names:
                suites[s][name] = f"skipped: {why}"
    tasks = [(s, name, seed, ppo, args.judge) for s in names for name in strategies for seed in range(args.seeds)]
    runs: dict[tuple[str, str], list[dict[str, Any]]] = {}
    mapper: Callable[..., Any]
    # NNI's PPOTuner builds its TensorFlow graph in the process's default graph: one run per process.
    fresh = "nni_ppo" in strategies
    with Pool(args.jobs, maxtasksperchild=1 if fresh else 50) if args.jobs > 1 or fresh else _Serial() as pool:
        mapper = pool.imap_unordered if args.jobs > 1 or fresh else pool.imap
        for suite_name, name, result in mapper(one_run, tasks):
            runs.setdefault((suite_name, name), []).append(result)
            if len(runs[(suite_name, name)]) == args.seeds:
                suites[suite_name][name] = aggregate(runs[(suite_name, name)])
                print(suite_name, name, json.dumps(suites[suite_name][name]), flush=True)
    for path in args.merge:
        for suite_name, result in json.loads(Path(path).read_text()).items():
            for name, figures in result.items():
                if isinstance(figures, dict) or name not in suites.setdefault(suite_name, {}):
                    suites[suite_name][name] = figures
    delta = PPOConfig.from_dict(ppo).delta
    for s in names:
        suite = get_suite(s)
        suites[s].update(budget_ms=suite.budget_ms, feasible=int(suite.feasible.sum()),
                         delta_oracle_regret=delta_oracle_regret(suite, delta, args.judge), **over_budget_shares(suite))
    if args.out:
        Path(args.out).write_text(json.dumps(suites, indent=1))
    out = {"seeds": args.seeds, "judge": args.judge, "ppo_options": {**ppo}, "suites": suites, **headline(suites)}
    if "proxy_networks_per_decision" in out:
        # the NB201 runs read the proxy's scores; scoring them on the spot would add this much a decision
        out["proxy_ms_per_network"] = proxy_ms(proxy=PPOConfig.from_dict(ppo).proxy)
        out["decision_ms_proxy_on_the_spot"] = out["decision_ms"] + out["proxy_networks_per_decision"] * out[
            "proxy_ms_per_network"]
    print(json.dumps(out))
    return out


class _Serial:
    """In-process stand-in for a Pool (``--jobs 1``)."""

    def __enter__(self) -> _Serial:
        return self

    def __exit__(self, *exc: object) -> None:
        pass

    @staticmethod
    def imap(func: Callable[..., Any], items: list[Any]) -> Any:
        return map(func, items)


if __name__ == "__main__":
    main()
