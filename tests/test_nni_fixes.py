"""Each fix in nni_hwaware.nni_fixes, shown to matter."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys

import pytest

from nni_hwaware import nni_fixes
from nni_hwaware.nni_fixes import IncompatibleEnvironmentError


@pytest.mark.parametrize(
    ("dist", "version", "pin"),
    [("filelock", "3.12.0", "filelock<3.12"), ("filelock", "3.20.1", "filelock<3.12"),
     ("setuptools", "81.0.0", "setuptools<81"), ("setuptools", "82.1", "setuptools<81")],
)
def test_too_new_versions_are_named_with_the_fix(dist: str, version: str, pin: str) -> None:
    with pytest.raises(IncompatibleEnvironmentError) as info:
        nni_fixes.check_versions({dist: version})
    message = str(info.value)
    assert "\n" not in message
    assert f"{dist} {version}" in message
    assert f"pip install '{pin}'" in message


@pytest.mark.parametrize(
    "installed",
    [{"filelock": "3.11.0", "setuptools": "80.10.2"}, {"filelock": "3.11.9rc1"}, {}],
)
def test_versions_in_range_pass(installed: dict[str, str]) -> None:
    nni_fixes.check_versions(installed)


def test_installed_environment_is_in_range() -> None:
    nni_fixes.check_environment()


def test_missing_pkg_resources_names_the_pin(monkeypatch: pytest.MonkeyPatch) -> None:
    real = importlib.util.find_spec

    def find_spec(name: str, *args: object) -> object:
        return None if name == "pkg_resources" else real(name, *args)

    monkeypatch.setattr(importlib.util, "find_spec", find_spec)
    with pytest.raises(IncompatibleEnvironmentError, match=r"pip install 'setuptools<81'"):
        nni_fixes.check_pkg_resources()


def _stderr_of(code: str) -> str:
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120
    )
    return result.stdout + result.stderr


def test_plain_nni_import_warns_so_the_fix_is_needed() -> None:
    # Without the fix NNI warns about torch classes; if this ever stops failing,
    # NNI or torch changed and the fix can go.
    assert "is found to be not a nn.Module" in _stderr_of("import nni.nas.nn.pytorch")


def test_import_nni_nas_is_silent() -> None:
    code = "from nni_hwaware.nni_fixes import import_nni_nas; import_nni_nas()"
    assert _stderr_of(code) == ""


def test_import_package_prints_nothing() -> None:
    assert _stderr_of("import nni_hwaware") == ""


def test_ppo_tuner_builds_without_importing_torch() -> None:
    # NNI's dispatcher must connect within 10 s of starting, after building the tuner.
    code = (
        "import sys\n"
        "from nni_hwaware.strategies.ppo.tuner import PPOTuner\n"
        "PPOTuner('digits', budget={'latency_ms': '50%'}, search_trials=3, retrain={'epochs': 1},"
        " prune={'mode': 'top-k', 'top': 2}, ppo={'seed': 1})\n"
        "print(sorted(m for m in ('torch', 'torchvision') if m in sys.modules))\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120)
    assert result.stdout.strip() == "[]"


# -- 5. penalty gradient -------------------------------------------------------------


def _tiny_supernet(strategy_class: type, **kwargs: object) -> tuple[object, object]:
    import torch
    from handmade import tiny_config

    from nni_hwaware.spaces import BlockChoiceSpace

    with torch.random.fork_rng():
        torch.manual_seed(0)
        space = BlockChoiceSpace(tiny_config().to_dict())
        strategy = strategy_class(**kwargs)
        return strategy, strategy.mutate_model(space).train()


def test_nni_gumbel_penalty_has_no_gradient_and_resamples_so_fix_4_is_needed() -> None:
    # If this ever fails, NNI's penalty= carries a gradient now and fix 5 can be revisited.
    import torch
    from handmade import tiny_config, tiny_table
    from nni.nas.oneshot.pytorch.base_lightning import BaseOneShotLightningModule
    from nni.nas.oneshot.pytorch.profiler import ExpectationProfilerPenalty
    from nni.nas.oneshot.pytorch.strategy import GumbelDARTS

    from nni_hwaware.cost_model import BlockCostModel

    _, supernet = _tiny_supernet(GumbelDARTS)
    model = BlockCostModel(tiny_table(), tiny_config())
    penalty = ExpectationProfilerPenalty(model.expression_profiler(supernet, "latency_ms"), baseline=1.0, scale=1000.0)

    class Probe(BaseOneShotLightningModule):
        def __init__(self) -> None:
            torch.nn.Module.__init__(self)
            self.net = supernet

    probe = Probe()
    loss = supernet(torch.randn(2, 1, 8, 8)).sum() * 0.0
    penalised, _ = penalty(loss, probe.export_probs())
    alphas = [p for name, p in supernet.named_parameters() if "_arch_alpha" in name]
    grads = torch.autograd.grad(penalised, alphas, allow_unused=True)
    assert all(g is None or torch.all(g == 0) for g in grads)  # 1000 x latency, yet no gradient
    assert probe.export_probs() != probe.export_probs()  # a new Gumbel sample every call


def test_fix_4_forward_masks_carry_the_penalty_gradient() -> None:
    import torch
    from handmade import tiny_config, tiny_table

    from nni_hwaware.cost_model import BlockCostModel
    from nni_hwaware.strategies.gumbel import HardwareGumbelDARTS

    model = BlockCostModel(tiny_table(), tiny_config())
    strategy, supernet = _tiny_supernet(HardwareGumbelDARTS, cost_model=model, penalty={"alpha": 1000.0})
    supernet(torch.randn(2, 1, 8, 8))
    masks = nni_fixes.forward_masks(supernet)
    penalty, _ = strategy.hardware_penalty(list(masks.values()))
    alphas = [p for name, p in supernet.named_parameters() if "_arch_alpha" in name]
    grads = torch.autograd.grad(penalty, alphas)
    assert all(torch.any(g != 0) for g in grads)


# -- 6. intermediate results from inside a one-shot search ----------------------------


def test_reports_inside_the_sequential_engine_reach_the_outer_trial_only_with_fix_5(
        monkeypatch: pytest.MonkeyPatch) -> None:
    import nni
    import nni.trial
    from handmade import tiny_config
    from nni.nas.evaluator import FunctionalEvaluator
    from nni.nas.execution import SequentialExecutionEngine
    from nni.nas.space import RawFormatModelSpace
    from nni.runtime.trial_command_channel import (
        TrialCommandChannel,
        get_default_trial_command_channel,
        set_default_trial_command_channel,
    )

    from nni_hwaware.spaces import BlockChoiceSpace

    class Outer(TrialCommandChannel):
        """What an nnictl trial's channel would send to the manager."""

        def __init__(self) -> None:
            self.sent: list[object] = []

        def receive_parameter(self) -> None:
            return None

        def send_metric(self, type: str, parameter_id: object, trial_job_id: object, sequence: int,
                        value: object) -> None:
            self.sent.append(value)

    monkeypatch.setattr(nni.trial, "_params", None)  # the engine sets NNI's current parameter
    previous = get_default_trial_command_channel()
    outer = Outer()
    set_default_trial_command_channel(outer)
    try:
        reporter = nni_fixes.outer_trial_reporter()

        def evaluate(model: object) -> None:
            nni.report_intermediate_result({"default": 1.0})  # goes to the engine
            reporter({"default": 2.0})  # goes to the trial

        network = BlockChoiceSpace(tiny_config().to_dict())
        space = RawFormatModelSpace(network, FunctionalEvaluator(evaluate)).freeze(
            {"layer1_0": "skip", "layer2_0": "skip"})
        SequentialExecutionEngine().submit_models(space)
        assert get_default_trial_command_channel() is outer
    finally:
        set_default_trial_command_channel(previous)
    assert outer.sent == [{"default": 2.0}]


# -- 8 and 9. trials killed by a signal; parameters handed to whoever asks first ------------


def _run_fix_trials(tmp_path, supervised: bool) -> dict[int, tuple[str, float | None]]:
    """Four trials of a grid over x = 0..3, one at a time: the first exits before asking for
    parameters, the second is killed by SIGKILL. Returns sequence id -> (status, reported x)."""
    import json
    import os
    from pathlib import Path

    from nni_hwaware.experiment import create_experiment, parse_metric, write_config

    script = Path(__file__).with_name("fix_trial.py")
    template = {
        "searchSpace": {"x": {"_type": "choice", "_value": [0, 1, 2, 3]}},
        "trialCommand": f"{sys.executable} {script}" + (" --supervised" if supervised else ""),
        "trialCodeDirectory": str(tmp_path), "trialConcurrency": 1, "maxTrialNumber": 4,
        "tuner": {"name": "GridSearch"}, "trainingService": {"platform": "local"},
    }
    path = write_config(template, tmp_path / "config.yml", tmp_path / "experiments")
    env = {"FIX_TEST_FAULTS": json.dumps({"0": "crash-before-asking", "1": "sigkill"}),
           "PYTHONPATH": os.pathsep.join(filter(None, [str(script.parents[1]), os.environ.get("PYTHONPATH")]))}
    with create_experiment(path, env=env) as experiment:
        experiment.wait(timeout=180)
        jobs = experiment.trial_jobs()
    return {job["sequenceId"]: (job["status"], parse_metric(job["finalMetricData"][-1]["data"])["default"]
                                if job.get("finalMetricData") else None) for job in jobs}


@pytest.mark.slow
@pytest.mark.nnictl
def test_nni_shifts_parameters_and_calls_killed_trials_cancelled_so_fixes_8_and_9_are_needed(tmp_path) -> None:
    trials = _run_fix_trials(tmp_path, supervised=False)
    assert trials[1][0] == "USER_CANCELED"  # killed by SIGKILL, shown as if the user stopped it
    # trial 0 never asked: trial 2 ran trial 1's x, trial 3 trial 2's, and x = 3 never ran
    assert (trials[2][1], trials[3][1]) == (1, 2)


@pytest.mark.slow
@pytest.mark.nnictl
def test_fixes_8_and_9_supervised_trials_fail_visibly_and_take_their_own_parameters(tmp_path) -> None:
    trials = _run_fix_trials(tmp_path, supervised=True)
    assert [trials[i][0] for i in range(4)] == ["FAILED", "FAILED", "SUCCEEDED", "SUCCEEDED"]
    assert (trials[2][1], trials[3][1]) == (2, 3)


def test_next_parameters_takes_the_handed_record(monkeypatch: pytest.MonkeyPatch) -> None:
    import json

    import nni.trial

    record = {"parameter_id": 7, "parameter_source": "algorithm", "parameters": {"x": 1}, "parameter_index": 0}
    monkeypatch.setenv(nni_fixes.SUPERVISED_ENV, json.dumps(record))
    monkeypatch.setattr(nni.trial, "_params", None)
    assert nni_fixes.next_parameters() == {"x": 1}
    assert nni.trial._params == record  # results then carry parameter id 7


# -- 10. shape formulas for NasBench201 and torchvision's blocks ---------------------------

_NB201_SHAPES = """
import sys, torch, warnings
warnings.filterwarnings("ignore")
from nni.nas.hub.pytorch import NasBench201
from nni.nas.profiler.pytorch.utils import ShapeTensor, submodule_input_output_shapes
if sys.argv[1] == "fixed":
    from nni_hwaware.nni_fixes import register_shape_formulas
    register_shape_formulas()
try:
    shapes = submodule_input_output_shapes(NasBench201().eval(), ShapeTensor(torch.randn(1, 3, 32, 32), True))
    print("OUT", tuple(shapes["classifier"][1]))
except RuntimeError as err:
    print("FAILED", str(err).splitlines()[0][:80])
"""


@pytest.mark.parametrize("mode", ["plain", "fixed"])
def test_shape_inference_of_nasbench201_needs_the_formulas(mode: str) -> None:
    out = subprocess.run([sys.executable, "-c", _NB201_SHAPES, mode], capture_output=True, text=True,
                         timeout=300, check=True).stdout
    if mode == "plain":
        assert "FAILED" in out and "Zero" in out
    else:
        assert "OUT (1, 10)" in out


def test_a_block_without_a_formula_takes_its_dry_run_shape() -> None:
    import torch
    from nni.nas.profiler.pytorch.utils import ShapeTensor, submodule_input_output_shapes
    from torchvision.ops import SqueezeExcitation

    nni_fixes.register_shape_formulas()
    block = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3, stride=2), SqueezeExcitation(8, 2),
                                torch.nn.Mish())  # Mish: no NNI formula
    shapes = submodule_input_output_shapes(block, ShapeTensor(torch.randn(1, 3, 9, 9), True))
    assert tuple(shapes["2"][1]) == (1, 8, 4, 4)


class _Recorder:
    """A dispatcher's ``self`` for NNI's handler: a tuner that answers one of two requests, and ``send``."""

    def __init__(self) -> None:
        self.sent: list[tuple[object, dict]] = []

        class OneTrial:
            def generate_multiple_parameters(self, ids: list, **kwargs: object) -> list:
                return [{"x": 1}]

        self.tuner = OneTrial()

    def send(self, command: object, data: str) -> None:
        self.sent.append((command, json.loads(data)))

    def send_trial_callback(self, parameter_id: int, params: dict) -> None:  # pragma: no cover
        raise AssertionError("not used")


@pytest.mark.parametrize("fixed", [False, True])
def test_fix_12_no_more_trials_keeps_the_parameters_just_sent(fixed: bool) -> None:
    from nni.runtime import msg_dispatcher as md

    original = nni_fixes._NNI_REQUEST_HANDLER or md.MsgDispatcher.handle_request_trial_jobs
    handler = nni_fixes._handle_request_trial_jobs if fixed else original
    dispatcher = _Recorder()
    first = md._next_parameter_id
    handler(dispatcher, 2)
    [(new, trial), (no_more, rest)] = dispatcher.sent
    assert new == md.CommandType.NewTrialJob and no_more == md.CommandType.NoMoreTrialJobs
    assert trial["parameter_id"] == first
    if fixed:  # "no more" names the unanswered id; the trial's parameters stay known
        assert rest["parameter_id"] == first + 1 and md._trial_params[first] == {"x": 1}
    else:  # NNI 3.0: the trial just sent loses its parameters
        assert rest["parameter_id"] == first and md._trial_params[first] == ""


def test_fix_12_is_applied_when_the_tuner_is_imported() -> None:
    from nni.runtime import msg_dispatcher as md

    import nni_hwaware.strategies.ppo.tuner  # noqa: F401

    assert md.MsgDispatcher.handle_request_trial_jobs is nni_fixes._handle_request_trial_jobs


def test_fix_13_nni_calls_the_tuner_from_two_threads_and_the_tuner_takes_them_one_at_a_time(
        tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    import threading
    from queue import Queue

    from handmade import tiny_tuner
    from nni.runtime.msg_dispatcher_base import MsgDispatcherBase
    from nni.runtime.tuner_command_channel import CommandType

    # NNI 3.0: a trial's end goes to the assessor's queue, its result to the default one (two worker threads)
    dispatcher = MsgDispatcherBase.__new__(MsgDispatcherBase)
    dispatcher.default_command_queue, dispatcher.assessor_command_queue = Queue(), Queue()
    dispatcher.enqueue_command(CommandType.TrialEnd, {"trial_job_id": "a"})
    dispatcher.enqueue_command(CommandType.ReportMetricData, {"type": "FINAL"})
    assert dispatcher.assessor_command_queue.qsize() == 1 and dispatcher.default_command_queue.qsize() == 1

    monkeypatch.chdir(tmp_path)  # outside NNI the tuner writes to ./hwaware-outputs
    tuner = tiny_tuner(tmp_path)
    params = tuner.generate_parameters(0)
    inside, release, order = threading.Event(), threading.Event(), []
    ended = tuner.session.ended

    def slow_end(*args, **kwargs):  # a trial end that takes a while (a policy update, a state save)
        inside.set()
        release.wait(10)
        return ended(*args, **kwargs)

    monkeypatch.setattr(tuner.session, "ended", slow_end)
    end = threading.Thread(target=lambda: (tuner.trial_end(0, True), order.append("end")))
    result = threading.Thread(target=lambda: (tuner.receive_trial_result(0, params, {"default": 0.5}),
                                              order.append("result")))
    end.start()
    assert inside.wait(10)
    result.start()
    result.join(0.5)
    alive = result.is_alive()  # the result waits for the trial end under way
    release.set()
    end.join(10)
    result.join(10)
    assert alive and order == ["end", "result"]
    assert tuner.search.history.rewards  # the result was learned once the end was settled


def test_fix_14_nni_waits_for_the_duration_when_the_tuner_is_done_early_and_the_fix_ends_it() -> None:
    """NNI 3.0's manager sets DONE only at maxTrialNumber or maxExperimentDuration (nnimanager.js: run);
    the fix sets maxTrialNumber to the trials submitted through the manager's REST API, as nnictl does."""
    import json
    import threading
    from http.server import BaseHTTPRequestHandler, HTTPServer
    from pathlib import Path

    import nni_node

    from nni_hwaware.nni_fixes import end_experiment_when_done, manager_url

    manager = (Path(nni_node.__file__).parent / "core" / "nnimanager.js").read_text()
    # the loop: DONE only under these two conditions; TUNER_NO_MORE_TRIAL alone keeps it running
    assert "this.currSubmittedTrialNum >= this.maxTrialNum" in manager and "case 'MAX_TRIAL_NUM':" in manager

    assert manager_url("ws://localhost:8080/tuner") == "http://127.0.0.1:8080/api/v1/nni"
    assert manager_url("ws://localhost:8080/prefix/tuner") == "http://127.0.0.1:8080/prefix/api/v1/nni"
    assert manager_url("") is None

    seen: dict[str, object] = {}

    class Manager(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # the experiment profile
            body = json.dumps({"id": "x", "nextSequenceId": 7, "params": {"maxTrialNumber": 61}}).encode()
            self.send_response(200)
            self.end_headers()
            self.wfile.write(body)

        def do_PUT(self) -> None:
            seen["query"] = self.path.split("?", 1)[1]
            seen["body"] = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            self.send_response(200)
            self.end_headers()

        def log_message(self, *args: object) -> None:
            pass

    server = HTTPServer(("127.0.0.1", 0), Manager)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        assert end_experiment_when_done(url=f"http://127.0.0.1:{server.server_port}/api/v1/nni")
    finally:
        server.shutdown()
    assert seen["query"] == "update_type=MAX_TRIAL_NUM" and seen["body"]["params"]["maxTrialNumber"] == 7
    assert not end_experiment_when_done(url="http://127.0.0.1:9/api/v1/nni", timeout=1)  # no manager: False


_LIGHTNING_CHECK = (
    "import sys\n"
    "{first}"
    "import nni.nas.space\n"
    "print(int('pytorch_lightning' in sys.modules))\n"
)


def test_fix_15_nni_spaces_import_lightning_and_the_fix_waits_for_its_first_use() -> None:
    def lightning_loaded(code: str) -> str:
        done = subprocess.run([sys.executable, "-W", "ignore", "-c", code], capture_output=True, text=True,
                              timeout=300, check=True)
        return done.stdout.split()

    # without the fix, every space (so every trial) pays for Lightning; if this ever fails, NNI changed
    assert lightning_loaded(_LIGHTNING_CHECK.format(first="")) == ["1"]
    # with it (installed by importing the package), Lightning waits until a name needs it
    after = (
        "import nni.nas.evaluator as evaluator\n"
        "print(evaluator.FunctionalEvaluator.__name__)\n"
        "from nni.nas.evaluator import Lightning, Classification\n"  # NNI's framework alias, on first use
        "import nni.nas.evaluator.pytorch as pytorch\n"
        "print(int(Classification is pytorch.Classification), int(evaluator.Lightning is pytorch.Lightning),\n"
        "      int('pytorch_lightning' in sys.modules))\n"
    )
    assert lightning_loaded(_LIGHTNING_CHECK.format(first="import nni_hwaware\n") + after) == [
        "0", "FunctionalEvaluator", "1", "1", "1"]


def test_fix_15_changes_nothing_once_nni_nas_is_imported() -> None:
    import nni.nas.evaluator  # noqa: F401  (imported by this suite's other tests too)

    assert nni_fixes.lazy_evaluator_shortcut() is False
    assert not any(isinstance(f, nni_fixes._LazyEvaluatorShortcut) for f in sys.meta_path)
