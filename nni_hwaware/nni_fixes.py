"""Every fix NNI 3.0 needs on today's stack, in one place.

NNI 3.0 (2023) is frozen; newer releases of its dependencies break it in known ways.
Each fix has a test in ``tests/test_nni_fixes.py`` that fails without it.

1. ``nnictl`` and NNI's trial tool import ``pkg_resources``, which ``setuptools>=81`` no
   longer ships: :func:`check_pkg_resources`.
2. ``filelock>=3.12`` makes every NNI experiment hang at start (NNI's lock sets a private
   attribute that newer releases ignore): :func:`check_versions`.
3. ``import nni.nas.nn.pytorch`` warns about every torch class that is not an ``nn.Module``
   (``Buffer``, ...): :func:`import_nni_nas` silences exactly these.
4. NNI's manager gives the tuner's dispatcher 10 s to connect (``nni_node/core/
   tuner_command_channel.js``), and the dispatcher builds the tuner first; importing torch
   can take longer on a busy machine ("Tuner did not connect in 10 seconds"). The PPO
   tuner's module and constructor import no torch (:mod:`nni_hwaware.strategies.ppo.tuner`).
5. The ``penalty=`` of NNI's DARTS / GumbelDARTS carries no gradient to the architecture
   parameters (``export_probs()`` gives floats; GumbelDARTS' draws a new Gumbel sample, not
   the forward pass's masks). :mod:`nni_hwaware.strategies.gumbel` subclasses the strategy and
   computes the hardware penalty from each pass's masks (:func:`forward_masks`).
6. NNI's sequential engine (under every one-shot strategy) swaps the trial's command channel
   while it trains, so ``nni.report_intermediate_result`` in a one-shot search never reaches
   the ``nnictl`` manager: :func:`outer_trial_reporter` uses the channel of before the search.
7. NNI's manager listens on every interface and its web portal has no authentication, with
   no option against it: a Node preload makes it listen on 127.0.0.1
   (:mod:`nni_hwaware.experiment.portal`, ``nni-hwaware create``).
8. NNI marks a trial that died of a signal (the out-of-memory killer, ``kill -9``)
   ``USER_CANCELED``, as if the user had stopped it (``nni_node/training_service/v3/compat.js``
   knows only the exit code). :func:`supervise_trial` runs the training in a child: a death by
   signal becomes a one-line error and exit status 128 + signal (``FAILED``); a cancel from NNI
   (SIGINT, SIGTERM) is passed on and the supervisor dies of it (``USER_CANCELED``).
9. NNI's training service hands parameters to whichever trial asks first, not to the one the
   manager assigned them to (same file): a trial that dies before asking shifts every later
   trial onto its neighbour's parameters and the last set never runs (part of
   microsoft/nni#5726). :func:`supervise_trial` asks first thing, in a small process, and
   hands them on (:func:`next_parameters`): every started trial takes exactly one set.
10. NNI's shape inference (``nni.nas.profiler.pytorch.utils``), under every space's profile,
    fails on NasBench201 (``Zero`` does ``x.mul(0.)``, NNI's broadcast formula expects two
    tensors; the cell sums a ``torch.stack``: no formula for ``stack`` or ``sum``) and on
    torchvision's blocks (``Sigmoid``, ``SiLU``, ...): :func:`register_shape_formulas`.
11. A tuner cannot stop an experiment with an error: the Tuner API has no call for it, an
    exception in a tuner method only ends the dispatcher's worker, and a search whose trials
    all fail ends as DONE. :func:`report_experiment_error` sends NNI's own error command
    (``ER``, ``MsgDispatcherBase.report_error``): the experiment's status becomes ERROR.
12. When a tuner answers fewer trials than asked for, NNI's
    ``MsgDispatcher.handle_request_trial_jobs`` says "no more" with the *first* requested id,
    and its ``_trial_params`` then replace the parameters just sent under that id with ``''``,
    which the tuner gets back with that trial's result: :func:`fix_no_more_trial_packing`.
13. NNI's dispatcher calls a tuner from two threads (``MsgDispatcherBase.enqueue_command``:
    trial ends go to the assessor's queue and worker), so the PPO tuner's search state would
    change from both at once: :func:`serialized_tuner` makes those calls hold one lock.
14. NNI's manager ends an experiment (DONE) only when ``maxTrialNumber`` trials were submitted
    or ``maxExperimentDuration`` passed (``NNIManager.run``); a tuner with no more trials leaves
    it waiting out the duration: :func:`end_experiment_when_done` sets ``maxTrialNumber`` to the
    trials submitted through the manager's REST API (as ``nnictl update trialnum``).
15. ``import nni.nas.space`` (so every trial) imports Lightning and torchmetrics, ~1 s a process, to
    alias ``nni.nas.evaluator.Lightning`` etc. to ``nni.nas.evaluator.pytorch``'s, which no trial uses:
    :func:`lazy_evaluator_shortcut` (installed by importing :mod:`nni_hwaware`) makes the alias on first use.
"""

from __future__ import annotations

import functools
import importlib.util
import json
import os
import re
import signal
import sys
import threading
import warnings
from collections.abc import Callable
from importlib import metadata
from types import ModuleType
from typing import Any

__all__ = ["IncompatibleEnvironmentError", "check_environment", "check_pkg_resources", "check_versions",
           "end_experiment_when_done", "fix_no_more_trial_packing", "forward_masks", "import_nni_nas",
           "lazy_evaluator_shortcut", "next_parameters", "outer_trial_reporter", "register_shape_formulas",
           "report_experiment_error", "serialized_tuner", "supervise_trial"]

# -- 1 and 2. versions NNI 3.0 works with ---------------------------------------------
#: (distribution, exclusive upper bound, why) — the pins NNI 3.0 needs.
UPPER_BOUNDS: tuple[tuple[str, tuple[int, ...], str], ...] = (
    ("filelock", (3, 12), "newer releases make every NNI experiment hang at start"),
    ("setuptools", (81,), "newer releases drop pkg_resources, which nnictl imports"),
)


class IncompatibleEnvironmentError(ImportError):
    """An installed package is outside the range NNI 3.0 works with."""


def _needs(problem: str, pin: str) -> IncompatibleEnvironmentError:
    return IncompatibleEnvironmentError(f"{problem}; fix: pip install '{pin}'")


def _version_tuple(text: str) -> tuple[int, ...]:
    parts: list[int] = []
    for piece in text.split("."):
        if digits := "".join(ch for ch in piece if ch.isdigit()):
            parts.append(int(digits))
        if not piece.isdigit():  # a piece such as "9rc1" ends the version
            break
    return tuple(parts)


def _installed_version(dist: str) -> str | None:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


def check_versions(installed: dict[str, str] | None = None) -> None:
    """Raise when filelock or setuptools is too new for NNI 3.0 (fix 2).

    ``installed`` maps distribution to version (default: the environment's); a missing
    distribution is not an error here.
    """
    for dist, bound, why in UPPER_BOUNDS:
        version = _installed_version(dist) if installed is None else installed.get(dist)
        if version is not None and _version_tuple(version) >= bound:
            pin = f"{dist}<{'.'.join(map(str, bound))}"
            raise _needs(f"{dist} {version} is installed but NNI 3.0 needs {pin} ({why})", pin)


def check_pkg_resources() -> None:
    """Raise a clear error when ``pkg_resources`` (needed by nnictl) is missing (fix 1)."""
    if importlib.util.find_spec("pkg_resources") is None:
        raise _needs("pkg_resources is missing, so nnictl cannot start (setuptools>=81 removed it)",
                     "setuptools<81")


def check_environment() -> None:
    """Run every check; called once when :mod:`nni_hwaware` is imported."""
    check_versions()
    check_pkg_resources()


# -- 15. nni.nas.evaluator's framework alias, made on its first use --------------------
class _LazyEvaluatorShortcut:
    """Import hook: ``nni.nas.evaluator`` runs without its framework alias, made on first use (fix 15)."""

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> Any:
        if fullname != "nni.nas.evaluator":
            return None
        sys.meta_path.remove(self)  # once: the lookup below is NNI's own
        spec = importlib.util.find_spec(fullname)
        run = spec.loader.exec_module  # type: ignore[union-attr]

        def exec_module(module: ModuleType) -> None:
            from nni.common import framework

            chosen = framework.get_default_framework()
            framework.set_default_framework("none")
            try:
                run(module)
            finally:
                framework.set_default_framework(chosen)

            def alias(name: str) -> Any:  # what NNI does at import, on the first name the module lacks
                if name.startswith("__") or chosen == "none":
                    raise AttributeError(name)
                del module.__dict__["__getattr__"]
                framework.shortcut_module(fullname, "." + chosen, fullname)
                return getattr(module, name)

            module.__getattr__ = alias  # type: ignore[attr-defined]

        spec.loader.exec_module = exec_module  # type: ignore[union-attr]
        return spec


def lazy_evaluator_shortcut() -> bool:
    """Install fix 15's import hook; False, changing nothing, once ``nni.nas.evaluator`` is imported."""
    if "nni.nas.evaluator" in sys.modules or any(isinstance(f, _LazyEvaluatorShortcut) for f in sys.meta_path):
        return False
    sys.meta_path.insert(0, _LazyEvaluatorShortcut())
    return True


# -- 3. NNI's spurious warnings at import ---------------------------------------------
#: Warnings NNI 3.0 emits at import on torch>=2.5; harmless.
_NNI_IMPORT_WARNINGS = r".*is found to be not a nn\.Module, which is unexpected.*"


def import_nni_nas() -> ModuleType:
    """Import ``nni.nas.nn.pytorch`` without its spurious warnings and return it."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=_NNI_IMPORT_WARNINGS, category=RuntimeWarning)
        return importlib.import_module("nni.nas.nn.pytorch")


# -- 5. penalty gradient: the masks of the forward pass -------------------------------
def forward_masks(module: Any) -> dict[str, Any]:
    """``{label: mask}``: the Gumbel-softmax masks the searchable layers used in the last forward pass.

    The tensors are in that pass's autograd graph, so a penalty built from them has a gradient
    to the architecture parameters (fix 5). They are the supernet's shared label masks
    (:class:`nni_hwaware.strategies.gumbel.supernet.LabelMasks`); a label no module asked for is missing.
    """
    for sub in module.modules():
        masks = getattr(sub, "_masks", None) or getattr(sub, "_softmax", None)
        if hasattr(masks, "masks") and hasattr(masks, "alphas"):
            return dict(masks.masks)
    return {}


# -- 6. intermediate results from inside a one-shot search ----------------------------
def outer_trial_reporter() -> Callable[[Any], None]:
    """A ``report(metric)`` that reaches the NNI trial around a one-shot search (fix 6).

    Call it before the search starts: it sends intermediate results through the trial command
    channel current then (the ``nnictl`` trial's), even while NNI's sequential engine has replaced it.
    """
    import nni
    from nni.runtime import trial_command_channel as channels

    outer = channels.get_default_trial_command_channel()

    def report(metric: Any) -> None:
        inner = channels.get_default_trial_command_channel()
        channels.set_default_trial_command_channel(outer)
        try:
            nni.report_intermediate_result(metric)
        finally:
            channels.set_default_trial_command_channel(inner)

    return report


# -- 8 and 9. a trial killed by a signal is FAILED; each trial takes its own parameters -
#: Set in the child of :func:`supervise_trial`: the parameter record it received (JSON).
SUPERVISED_ENV = "NNI_HWAWARE_SUPERVISED"


def next_parameters() -> Any:
    """The trial's parameters: those :func:`supervise_trial` fetched, else ``nni.get_next_parameter()``.

    Either way NNI's trial module knows the record, so results carry its parameter id.
    """
    import nni
    import nni.trial

    handed = os.environ.get(SUPERVISED_ENV)
    if not handed or handed == "1":
        return nni.get_next_parameter()
    record = json.loads(handed)
    nni.trial._params = record  # what get_next_parameter() would have set
    return None if record is None else record["parameters"]


def supervise_trial(command: list[str]) -> int | None:
    """Run ``command`` (the trial itself) in a child process; its exit status, or None (fixes 8, 9).

    Returns None, running nothing, outside an NNI trial (``NNI_PLATFORM`` unset) or inside the
    child: the caller then does the work itself. The child takes the parameters fetched here
    with :func:`next_parameters` and reports its results to NNI itself.
    """
    import subprocess

    if not os.environ.get("NNI_PLATFORM") or os.environ.get(SUPERVISED_ENV):
        return None
    from nni.runtime.trial_command_channel import get_default_trial_command_channel

    record = get_default_trial_command_channel().receive_parameter()  # fix 9: first thing
    child = subprocess.Popen(command, env={**os.environ, SUPERVISED_ENV: json.dumps(record)})
    cancelled: list[int] = []

    def forward(signum: int, _frame: object) -> None:
        cancelled.append(signum)
        child.send_signal(signum)

    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, forward)
    code = child.wait()
    if cancelled:  # NNI (or the user) stopped the trial: die as NNI expects
        signal.signal(cancelled[0], signal.SIG_DFL)
        os.kill(os.getpid(), cancelled[0])
    if code < 0:
        hint = " (most likely the kernel's out-of-memory killer)" if -code == signal.SIGKILL else ""
        print(f"nni_hwaware.trial: error: the training process was killed by {signal.Signals(-code).name}"
              f"{hint}; see `dmesg` and lower the batch size or the trial concurrency", file=sys.stderr)
        return 128 - code
    return code


# -- 10. shape formulas NNI's shape inference lacks -----------------------------------
@functools.cache
def register_shape_formulas() -> None:
    """Add the shape formulas NasBench201 and torchvision's blocks need to NNI's shape inference (once).

    ``add`` / ``mul`` with a Python number (``x.mul(0.)``): the tensor's shape; ``stack(tensors,
    dim)``: a new dimension of size ``len(tensors)``; ``sum(x, dim, keepdim)``: the reduced shape;
    activations, dropout, normalisations: their input's shape; any other module without a formula,
    on inputs of fixed shapes: its output's shape in the dry run (:func:`_fall_back_to_dry_run`).
    """
    import torch
    from nni.nas.profiler.pytorch.utils import shape_formula
    from nni.nas.profiler.pytorch.utils.shape import MutableShape, ShapeTensor
    from torch import nn

    broadcast = shape_formula.aten_shape_broadcast

    def scalar_safe_broadcast(fn: Any, x: Any, y: Any, **kwargs: Any) -> Any:
        if isinstance(x, ShapeTensor) and isinstance(y, ShapeTensor):
            return broadcast(fn, x, y, **kwargs)
        return y.real_shape if isinstance(y, ShapeTensor) else x.real_shape

    def stack(fn: Any, tensors: list[Any], dim: int = 0, **kwargs: Any) -> Any:
        shape = list(shape_formula.ensure_shape(tensors[0]))
        dim = dim + len(shape) + 1 if dim < 0 else dim
        return MutableShape(*shape[:dim], len(tensors), *shape[dim:])

    def reduce_sum(fn: Any, x: Any, dim: list[int] | int | None = None, keepdim: bool = False,
                   **kwargs: Any) -> Any:
        shape = list(shape_formula.ensure_shape(x))
        if dim is None:
            return MutableShape()
        dims = {d % len(shape) for d in ([dim] if isinstance(dim, int) else dim)}
        if keepdim:
            return MutableShape(*[1 if i in dims else s for i, s in enumerate(shape)])
        return MutableShape(*[s for i, s in enumerate(shape) if i not in dims])

    aten, formulas = torch.ops.aten, shape_formula._shape_inference_formulas
    for module_class in (nn.ReLU, nn.ReLU6, nn.Sigmoid, nn.SiLU, nn.Hardswish, nn.Hardsigmoid, nn.GELU,
                         nn.Tanh, nn.LeakyReLU, nn.ELU, nn.Identity, nn.Dropout2d, nn.BatchNorm1d,
                         nn.GroupNorm, nn.InstanceNorm2d, nn.Softmax):
        formulas.setdefault(module_class, shape_formula.keep_shape_formula)
    for name in ("sigmoid", "sigmoid_", "silu", "silu_", "tanh", "hardtanh", "clone", "contiguous",
                 "leaky_relu", "elu", "relu6", "dropout", "native_dropout"):
        op = getattr(aten, name, None)
        for overload in (op, getattr(op, "default", None)):
            if overload is not None:
                formulas.setdefault(overload, shape_formula.keep_first_shape_formula)
    _fall_back_to_dry_run()
    for ops, formula in (((aten.add.Tensor, aten.add, aten.mul.Tensor, aten.mul), scalar_safe_broadcast),
                         ((aten.stack.default, aten.stack), stack), ((aten.sum.dim_IntList, aten.sum), reduce_sum)):
        formulas.update(dict.fromkeys(ops, formula))


def _fall_back_to_dry_run() -> None:
    """A module with no formula, called on inputs of fixed shapes, gets its outputs' dry-run shapes."""
    import torch
    from nni.nas.profiler.pytorch.utils import shape as shape_module
    from torch.utils._pytree import tree_map

    original = shape_module._module_shape_inference_impl

    def assign(t: Any) -> Any:
        if isinstance(t, shape_module.ShapeTensor) and t.real_shape is None:
            t.real_shape = shape_module.MutableShape(*t.elem.shape)
        return t

    def infer(module: Any, outputs: Any, *args: Any, is_leaf: Any = None, **kwargs: Any) -> Any:
        try:
            return original(module, outputs, *args, is_leaf=is_leaf, **kwargs)
        except RuntimeError:
            inputs = [a for a in (*args, *kwargs.values()) if isinstance(a, torch.Tensor)]
            if not inputs or not all(isinstance(a, shape_module.ShapeTensor) and a.real_shape is not None
                                     and not a.real_shape.is_mutable() and tuple(a.real_shape) == tuple(a.elem.shape)
                                     for a in inputs):
                raise
            return tree_map(assign, outputs)

    shape_module._module_shape_inference_impl = infer


# -- 11. a tuner that stops the experiment with an error ------------------------------
def report_experiment_error(trial_callback: Any, message: str) -> bool:
    """Stop the experiment with ``message`` as its error (status ERROR, fix 11); False when not run by NNI.

    ``trial_callback`` is the ``st_callback`` NNI's dispatcher passes to
    ``generate_multiple_parameters`` (a bound method of the dispatcher).
    """
    report = getattr(getattr(trial_callback, "__self__", None), "report_error", None)
    if report is None:
        return False
    report(message)
    return True


# -- 12. "no more trials" must not overwrite the parameters of a trial just sent ------
def _handle_request_trial_jobs(self: Any, data: int) -> None:
    """NNI's ``MsgDispatcher.handle_request_trial_jobs``, saying "no more" with an unanswered id (fix 12)."""
    from nni.runtime import msg_dispatcher as md

    ids = [md._create_parameter_id() for _ in range(data)]
    params_list = self.tuner.generate_multiple_parameters(ids, st_callback=self.send_trial_callback)
    for i, params in enumerate(params_list):
        self.send(md.CommandType.NewTrialJob, md._pack_parameter(ids[i], params))
    if len(params_list) < len(ids):
        self.send(md.CommandType.NoMoreTrialJobs, md._pack_parameter(ids[len(params_list)], ""))


#: NNI's own handler, kept when :func:`fix_no_more_trial_packing` replaces it.
_NNI_REQUEST_HANDLER: Any = None


def fix_no_more_trial_packing() -> None:
    """Patch NNI's dispatcher (fix 12); done when the package's tuner is imported (in the dispatcher)."""
    global _NNI_REQUEST_HANDLER
    from nni.runtime import msg_dispatcher as md

    if md.MsgDispatcher.handle_request_trial_jobs is not _handle_request_trial_jobs:
        _NNI_REQUEST_HANDLER = md.MsgDispatcher.handle_request_trial_jobs
        md.MsgDispatcher.handle_request_trial_jobs = _handle_request_trial_jobs


# -- 13. a tuner's calls come from two of NNI's threads -------------------------------
#: The Tuner methods NNI's dispatcher calls (and the tuner's state, which a strategy reads).
TUNER_CALLS = ("update_search_space", "generate_parameters", "generate_multiple_parameters",
               "receive_trial_result", "trial_end", "import_data", "state_dict")


def serialized_tuner(cls: type) -> type:
    """Make each of :data:`TUNER_CALLS` that ``cls`` defines hold one re-entrant lock of the instance (fix 13)."""
    for name in TUNER_CALLS:
        if (method := cls.__dict__.get(name)) is None:
            continue

        @functools.wraps(method)
        def locked(self: Any, *args: Any, _method: Callable[..., Any] = method, **kwargs: Any) -> Any:
            lock = self.__dict__.get("_nni_calls_lock")
            if lock is None:  # the first call: dict.setdefault is atomic, so two threads get the same lock
                lock = self.__dict__.setdefault("_nni_calls_lock", threading.RLock())
            with lock:
                return _method(self, *args, **kwargs)

        setattr(cls, name, locked)
    return cls


# -- 14. the experiment ends when the tuner is done -----------------------------------
def manager_url(channel: str | None = None) -> str | None:
    """The REST API of the manager that started this dispatcher (from ``NNI_TUNER_COMMAND_CHANNEL``,
    ``ws://localhost:PORT[/PREFIX]/tuner``); None outside NNI's dispatcher."""
    channel = os.environ.get("NNI_TUNER_COMMAND_CHANNEL") if channel is None else channel
    found = re.fullmatch(r"ws://localhost:(\d+)(/.*)?/tuner", channel or "")
    if found is None:
        return None
    # 127.0.0.1, not localhost: the manager may listen on IPv4 loopback alone (fix 7)
    return f"http://127.0.0.1:{found.group(1)}{found.group(2) or ''}/api/v1/nni"


def end_experiment_when_done(url: str | None = None, timeout: float = 10.0) -> bool:
    """Set the experiment's ``maxTrialNumber`` to the trials submitted so far (fix 14), so that NNI's manager
    ends it as DONE once they finish; False outside NNI or when the manager did not answer."""
    import urllib.error
    import urllib.request

    url = manager_url() if url is None else url
    if url is None:
        return False
    try:
        with urllib.request.urlopen(f"{url}/experiment", timeout=timeout) as response:
            profile = json.loads(response.read())
        profile["params"]["maxTrialNumber"] = int(profile["nextSequenceId"])
        request = urllib.request.Request(f"{url}/experiment?update_type=MAX_TRIAL_NUM", method="PUT",
                                         data=json.dumps(profile).encode(), headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=timeout):
            return True
    except (urllib.error.URLError, OSError, KeyError, ValueError, TypeError):
        return False
