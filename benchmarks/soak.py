"""Soak test: many short trials of the PPO tuner through the real NNI manager.

Runs ``--trials`` (default 200) trials of the tabular benchmark
(``benchmarks/data/tabular_digits_tiny.csv``: every architecture of
``digits_tiny`` trained, so a trial is a table look-up, see ``tabular_trial.py``)
with ``nnictl create`` at ``--concurrency`` (default 2), the tuner being
``nni_hwaware.strategies.ppo.tuner.PPOTuner`` without a budget (all 256
architectures admitted) and with a fixed PPO seed. While it runs, the tuner's
process (NNI's dispatcher, ``python -m nni --exp_params ...``, a child of the
manager) is sampled with psutil.

Figures: the dispatcher's resident memory (MB) once the first trial has started,
at the end and at its peak; the tuner's decisions per second (from
``<experiment dir>/hwaware/tuner_stats.json`` when the tuner writes it, and
proposals per CPU second of the dispatcher in any case); trials per minute and
wall time; trials succeeded / failed and the final status; and whether every
trial's result belongs to the parameters it was given. For the latter, each
trial's echoed ``arch`` is compared with the parameters the trial received (it
writes them to ``received_parameters.json`` in its own folder: NNI 3.0 writes no
parameter file there), with the tuner's proposal of that ``parameter_id`` (the
``TR`` commands in ``nnimanager.log``) and with the tuner's saved search history
(``state_file``). The parameter column of the manager's REST ``trial-jobs``
can pair a trial with another trial's parameters under concurrency
(microsoft/nni#5726); its mismatches are counted for information only. So are
the tuner's "ended without a result" warnings in ``dispatcher.log`` (there should
be none: NNI tells the tuner of a trial's end with the manager's parameter id,
which under that mix-up can be another trial's, so the tuner counts a trial as
failed only once that is certain).

Figures of one run on a 2-core CPU (seed 0): 200 of 200 trials succeeded in 240 s
(51.5 trials per minute); the dispatcher's RSS 833 MB once the search started
(torch), 840 MB at the end (+6.9 MB over 200 trials); 71 decisions per second
(14 ms each, the state file saved at every one included); 0 mismatches between
echoed architectures, received parameters, the tuner's proposals and its history;
200 distinct architectures; the REST parameter column was wrong for 38 trials.

    python benchmarks/soak.py [--trials 200] [--concurrency 2] [--seed 0] [--timeout 3600] [--keep]

The last line is one JSON object.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import shlex
import shutil
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import psutil

from nni_hwaware.experiment import create_experiment, parse_metric, write_config
from nni_hwaware.spaces import get_space_config

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "benchmarks" / "data"
SPACE = "digits_tiny"
MB = 1024 * 1024
_TR = re.compile(r"received command from dispatcher: TR, (\{.*\})\s*$")


def search_space() -> dict[str, Any]:
    """The tuner's search space: one ``choice`` per layer of the space."""
    return {s.label: {"_type": "choice", "_value": list(s.candidates)} for s in get_space_config(SPACE).layer_specs()}


def arch_of(params: dict[str, Any]) -> dict[str, str]:
    """The architecture in a parameter dict (keys starting with ``_`` are the tuner's, not layers)."""
    return {k: str(v) for k, v in params.items() if not k.startswith("_")}


def find_dispatcher(experiment_id: str, pid_hint: int | None = None) -> psutil.Process | None:
    """NNI's dispatcher (``python -m nni --exp_params ...``) under the manager of ``experiment_id``."""
    if pid_hint:
        with contextlib.suppress(psutil.Error):
            return psutil.Process(pid_hint)
    for proc in psutil.process_iter(["cmdline"]):
        cmdline = proc.info["cmdline"] or []
        if "--experiment-id" in cmdline and experiment_id in cmdline:
            with contextlib.suppress(psutil.Error):
                for child in proc.children(recursive=True):
                    args = child.cmdline()
                    if "--exp_params" in args and "nni" in args:
                        return child
    return None


def peak_rss_mb(proc: psutil.Process) -> float | None:
    """The process's peak resident set (``VmHWM``, Linux), else None."""
    with contextlib.suppress(OSError, ValueError, psutil.Error):
        for line in Path(f"/proc/{proc.pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return None


class Sampler(threading.Thread):
    """Samples the dispatcher's RSS and CPU time every ``interval`` s: (wall time, MB, CPU s)."""

    def __init__(self, experiment_id: str, stats_file: Path, interval: float = 0.5) -> None:
        super().__init__(daemon=True)
        self.experiment_id, self.stats_file, self.interval = experiment_id, stats_file, interval
        self.proc: psutil.Process | None = None
        self.samples: list[tuple[float, float, float]] = []
        self.peak_mb: float | None = None
        self.halt = threading.Event()

    def sample(self) -> tuple[float, float, float] | None:
        if self.proc is None:
            self.proc = find_dispatcher(self.experiment_id)
        if self.proc is None:
            return None
        try:
            with self.proc.oneshot():
                cpu = self.proc.cpu_times()
                point = (time.time(), self.proc.memory_info().rss / MB, cpu.user + cpu.system)
            self.peak_mb = peak_rss_mb(self.proc) or self.peak_mb
        except psutil.Error:
            return None
        self.samples.append(point)
        return point

    def run(self) -> None:
        while not self.halt.is_set():
            self.sample()
            self.halt.wait(self.interval)


def tuner_proposals(log: Path) -> dict[int, dict[str, Any]]:
    """parameter_id -> parameters of every ``TR`` command the manager got from the dispatcher."""
    out: dict[int, dict[str, Any]] = {}
    with contextlib.suppress(OSError):
        for line in log.read_text(errors="replace").splitlines():
            found = _TR.search(line)
            if found:
                with contextlib.suppress(json.JSONDecodeError, KeyError):
                    record = json.loads(found.group(1))
                    out[int(record["parameter_id"])] = record["parameters"]
    return out


def dispatcher_warnings(log: Path) -> dict[str, int]:
    """Counts of the tuner's and NNI's warnings in ``dispatcher.log`` worth a look after a soak."""
    text = ""
    with contextlib.suppress(OSError):
        text = log.read_text(errors="replace")
    return {"dispatcher_errors": text.count(" ERROR ("),
            "tuner_ended_without_result": text.count("ended without a result"),
            "nni_unknown_parameter_id": text.count("Find unknown job parameter id")}


def tuner_history(state_file: Path) -> dict[str, float] | None:
    """The tuner's saved search history: architecture (JSON) -> reward; None without the file."""
    if not state_file.is_file():
        return None
    import torch

    state = torch.load(state_file, weights_only=True)
    specs = get_space_config(SPACE).layer_specs()
    labels, candidates = [s.label for s in specs], [list(s.candidates) for s in specs]
    history = {}
    for actions, reward in state["history"]:
        arch = {label: names[j] for label, names, j in zip(labels, candidates, actions, strict=True)}
        history[json.dumps(arch, sort_keys=True)] = float(reward)
    history["__pending__"] = float(len(state["pending"]))
    return history


def check(jobs: list[dict[str, Any]], proposals: dict[int, dict[str, Any]],
          history: dict[str, float] | None) -> dict[str, Any]:
    """Every trial's echoed arch against what it received, what the tuner proposed, the tuner's history and REST."""
    key = lambda arch: json.dumps(arch, sort_keys=True)  # noqa: E731
    counts = {"trials_checked": 0, "no_received_file": 0, "no_final_metric": 0, "mismatch_received": 0,
              "mismatch_tuner_proposal": 0, "mismatch_metric_parameter_id": 0, "mismatch_tuner_history": 0,
              "mismatch_rest_parameters": 0}
    examples: list[str] = []
    echoed_archs: list[str] = []
    for job in jobs:
        trial = job["trialJobId"]
        if not job.get("finalMetricData"):
            counts["no_final_metric"] += 1
            continue
        metric_record = job["finalMetricData"][-1]
        metric = parse_metric(metric_record["data"])
        echoed = key(json.loads(metric["arch"]))
        echoed_archs.append(echoed)
        counts["trials_checked"] += 1
        received_file = Path(job.get("logPath", "")) / "received_parameters.json"
        try:
            received = json.loads(received_file.read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError):
            counts["no_received_file"] += 1
            received = None
        if received is not None:
            if key(arch_of(received["parameters"])) != echoed:
                counts["mismatch_received"] += 1
                examples.append(f"{trial}: echoed {echoed}, received {received['parameters']}")
            pid = received.get("parameter_id")
            if str(metric_record.get("parameterId")) != str(pid):
                counts["mismatch_metric_parameter_id"] += 1
            proposed = proposals.get(int(pid)) if pid is not None else None
            if proposed is None or key(arch_of(proposed)) != key(arch_of(received["parameters"])):
                counts["mismatch_tuner_proposal"] += 1
                examples.append(f"{trial}: received parameter_id {pid} {received['parameters']}, tuner sent {proposed}")
        if history is not None and history.get(echoed) != float(metric["default"]):
            counts["mismatch_tuner_history"] += 1
            examples.append(f"{trial}: tuner history has {history.get(echoed)} for {echoed}, trial {metric['default']}")
        rest = [json.loads(h) for h in job.get("hyperParameters") or []]
        if not rest or key(arch_of(rest[-1]["parameters"])) != echoed:
            counts["mismatch_rest_parameters"] += 1
    counts["mismatches"] = (counts["mismatch_received"] + counts["mismatch_tuner_proposal"]
                            + counts["mismatch_metric_parameter_id"] + counts["mismatch_tuner_history"])
    counts["distinct_archs"] = len(set(echoed_archs))
    counts["duplicate_results"] = len(echoed_archs) - len(set(echoed_archs))
    proposed_archs = [key(arch_of(p)) for p in proposals.values()]
    counts["tuner_proposals"] = len(proposed_archs)
    counts["duplicate_proposals"] = len(proposed_archs) - len(set(proposed_archs))
    if history is not None:
        counts["tuner_history_size"] = len(history) - 1
        counts["tuner_pending_at_end"] = int(history["__pending__"])
    counts["examples"] = examples[:5]
    return counts


def max_concurrency(jobs: list[dict[str, Any]]) -> int:
    """The largest number of trials running at once, from their start and end times."""
    events = sorted([(j["startTime"], 1) for j in jobs if j.get("startTime")]
                    + [(j["endTime"], -1) for j in jobs if j.get("endTime")])
    running = peak = 0
    for _, step in events:
        running += step
        peak = max(peak, running)
    return peak


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=200)
    parser.add_argument("--concurrency", type=int, default=2)
    parser.add_argument("--seed", type=int, default=0, help="PPO seed")
    parser.add_argument("--timeout", type=float, default=3600, help="seconds to wait for the experiment")
    parser.add_argument("--keep", action="store_true", help="keep the experiment files (path printed)")
    args = parser.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="nni-hwaware-soak-"))
    state_name = "soak_ppo_state.pt"  # relative: the tuner writes only inside the experiment working directory
    trial_cmd = " ".join(shlex.quote(p) for p in (sys.executable, str(ROOT / "benchmarks" / "tabular_trial.py"),
                                                  "--space", SPACE))
    template = {
        "experimentName": "nni-hwaware soak",
        "searchSpace": search_space(),
        "trialCommand": trial_cmd,
        "trialCodeDirectory": str(ROOT),
        "trialConcurrency": args.concurrency,
        "maxTrialNumber": args.trials,
        "tuner": {
            "codeDirectory": str(ROOT),
            "className": "nni_hwaware.strategies.ppo.tuner.PPOTuner",
            "classArgs": {"space": SPACE, "table": str(DATA / f"{SPACE}_table.csv"), "ppo": {"seed": args.seed},
                          "state_file": state_name},
        },
        "trainingService": {"platform": "local"},
    }
    env = dict(os.environ, PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}")
    out: dict[str, Any] = {"trials_requested": args.trials, "concurrency": args.concurrency, "seed": args.seed}
    try:
        config = write_config(template, tmp / "config.yml", tmp / "nni-experiments")
        start = time.perf_counter()
        with create_experiment(config, env=env) as experiment:
            created = time.perf_counter()
            stats_file = experiment.experiment_dir / "hwaware" / "tuner_stats.json"
            sampler = Sampler(experiment.id, stats_file)
            sampler.start()
            try:
                status = experiment.wait(timeout=args.timeout, poll=2.0)
            finally:
                ended = time.perf_counter()
                sampler.halt.set()
                sampler.join()
            stats = None
            with contextlib.suppress(OSError, json.JSONDecodeError):
                stats = json.loads(stats_file.read_text(encoding="utf-8"))
            if stats and stats.get("pid") and (sampler.proc is None or sampler.proc.pid != stats["pid"]):
                out["dispatcher_pid_disagrees"] = {"psutil": sampler.proc and sampler.proc.pid, "stats": stats["pid"]}
                sampler.proc = find_dispatcher(experiment.id, stats["pid"])
            last = sampler.sample()  # after the last result, before the stop
            jobs = experiment.trial_jobs()
            final_status = experiment.status()
            proposals = tuner_proposals(experiment.experiment_dir / "log" / "nnimanager.log")
            history = tuner_history(experiment.workdir / state_name)
        stopped = time.perf_counter()

        starts = [j["startTime"] / 1000 for j in jobs if j.get("startTime")]
        ends = [j["endTime"] / 1000 for j in jobs if j.get("endTime")]
        first_start = min(starts) if starts else None
        samples = sampler.samples
        at_start = next((s for s in samples if first_start is not None and s[0] >= first_start), None)
        finished = [j for j in jobs if j["status"] in ("SUCCEEDED", "FAILED", "USER_CANCELED", "SYS_CANCELED")]
        cpu_s = (last[2] - at_start[2]) if last and at_start else None
        decisions = stats.get("decisions") if stats else None
        decision_s = stats.get("decision_seconds") if stats else None
        out.update({
            "status": status, "status_at_end": final_status,
            "trials": len(jobs), "succeeded": sum(j["status"] == "SUCCEEDED" for j in jobs),
            "failed": sum(j["status"] != "SUCCEEDED" for j in finished),
            "running_at_end": len(jobs) - len(finished),
            "max_concurrent_trials": max_concurrency(jobs),
            "wall_s": round(stopped - start, 1), "experiment_s": round(ended - start, 1),
            "create_s": round(created - start, 1),
            "trials_per_min": round(60 * len(finished) / (ended - start), 2),
            "trials_per_min_first_to_last": (round(60 * len(finished) / (max(ends) - first_start), 2)
                                             if ends and first_start else None),
            "dispatcher_pid": sampler.proc.pid if sampler.proc else None,
            "rss_mb_first_seen": round(samples[0][1], 1) if samples else None,
            "rss_mb_start": round(at_start[1], 1) if at_start else None,
            "rss_mb_end": round(last[1], 1) if last else None,
            "rss_mb_peak": round(max([s[1] for s in samples] + [sampler.peak_mb or 0.0]), 1) if samples else None,
            "rss_mb_growth": round(last[1] - at_start[1], 1) if last and at_start else None,
            "rss_samples": len(samples),
            "tuner_stats": stats,
            "decisions_per_s": round(decisions / decision_s, 1) if decisions and decision_s else None,
            "decision_ms": round(1000 * decision_s / decisions, 3) if decisions and decision_s else None,
            "dispatcher_cpu_s": round(cpu_s, 2) if cpu_s is not None else None,
            "proposals_per_dispatcher_cpu_s": (round(len(proposals) / cpu_s, 1)
                                               if cpu_s and proposals else None),
        })
        out.update(dispatcher_warnings(experiment.experiment_dir / "log" / "dispatcher.log"))
        out.update(check(jobs, proposals, history))
        if len(out.get("examples") or []) == 0:
            out.pop("examples", None)
    finally:
        if args.keep:
            out["kept"] = str(tmp)
        else:
            shutil.rmtree(tmp, ignore_errors=True)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
