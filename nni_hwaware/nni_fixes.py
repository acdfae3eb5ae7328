"""Every fix NNI 3.0 needs on today's stack, in one place.

NNI 3.0 (2023) is frozen; newer releases of its dependencies break it in known
ways. Each fix here has a test in ``tests/test_nni_fixes.py`` that fails without it.

1. ``nnictl`` and NNI's trial tool import ``pkg_resources`` at top level, which
   ``setuptools>=81`` no longer ships: :func:`check_pkg_resources`.
2. ``filelock>=3.12`` makes every NNI experiment hang at start (NNI's lock sets a
   private attribute that newer releases ignore): :func:`check_versions`.
3. ``import nni.nas.nn.pytorch`` warns about every torch class that is not an
   ``nn.Module`` (``Buffer``, ...): :func:`import_nni_nas` silences exactly these.
4. NNI's manager gives the tuner's dispatcher 10 seconds (hard-coded in
   ``nni_node/core/tuner_command_channel.js``) to connect, and the dispatcher
   imports and builds the tuner first; importing torch alone can take longer on a
   busy machine, and the experiment then fails with "Tuner did not connect in 10
   seconds". The PPO tuner's module and constructor import no torch
   (:mod:`nni_hwaware.strategies.ppo.tuner`); the work starts in
   ``update_search_space``, after the connection.
5. The ``penalty=`` of NNI's DARTS / GumbelDARTS carries no gradient to the
   architecture parameters (``export_probs()`` returns Python floats, and
   GumbelDARTS' draws a new Gumbel sample rather than the forward pass's masks).
   Not patched in NNI: :mod:`nni_hwaware.strategies.gumbel` subclasses NNI's
   strategy, its mixed layer keeps the mask of each forward pass
   (:func:`forward_masks` collects them) and the hardware penalty is computed
   from those tensors.
6. NNI's sequential engine (every one-shot strategy runs on it) swaps the trial's
   command channel while it trains, so ``nni.report_intermediate_result`` called
   during a one-shot search inside an ``nnictl`` trial never reaches the manager:
   :func:`outer_trial_reporter` sends through the channel current before the search.
7. NNI's manager listens on every network interface, and its web portal has no
   authentication; NNI has no option against it. A Node preload makes it listen on
   127.0.0.1: :mod:`nni_hwaware.experiment.portal` (``nni-hwaware create``).
8. NNI 3.0 marks a trial that died of a signal (the kernel's out-of-memory killer,
   ``kill -9``) ``USER_CANCELED``, as if the user had stopped it
   (``nni_node/training_service/v3/compat.js`` knows only the exit code). The
   package's trials run under :func:`supervise_trial`: the training runs in a child
   process, a death by signal becomes a one-line error and exit status 128 + signal
   (``FAILED``), and a cancel from NNI (SIGINT, SIGTERM) is passed on, then the
   supervisor dies of the same signal (still ``USER_CANCELED``).
9. NNI 3.0's training service hands parameters out from one queue, to whichever
   trial asks first, not to the trial the manager assigned them to
   (``nni_node/training_service/v3/compat.js``). A trial that dies before asking
   (a crash at import, a bad node) shifts every later trial onto its neighbour's
   parameters, and the last parameters sent, such as a search's final retraining
   trial, are never run; the manager's records pair trials with the wrong
   parameters (part of microsoft/nni#5726). :func:`supervise_trial` asks for the
   parameters first thing, in a small process, and hands them to the trial
   (:func:`next_parameters`), so every started trial takes exactly one set.
10. NNI 3.0's shape inference (``nni.nas.profiler.pytorch.utils``), which profiling
    any model space builds on, fails on NasBench201: its ``Zero`` op multiplies by a
    Python float (``x.mul(0.)``; NNI's broadcast formula expects two tensors) and its
    cell sums ``torch.stack`` of its edges (no formula for ``stack`` or ``sum``); and
    on torchvision's blocks (``Sigmoid``, ``SiLU``, ``Hardswish``, ... have no
    formula). :func:`register_shape_formulas` adds these formulas, and lets a module
    without one whose inputs have fixed shapes take its output shape from the dry run.
11. A tuner cannot stop an experiment with an error of its own: NNI's Tuner API has
    no call for it, an exception in a tuner method only ends the dispatcher's worker
    (the manager then waits, or later says "tuner may have crashed"), and a search
    whose trials all fail ends as DONE. :func:`report_experiment_error` sends NNI's
    own error command (``ER``, ``MsgDispatcherBase.report_error``) through the
    dispatcher that handed the tuner its trial callback: the manager logs the reason
    ("Dispatcher error: ...") and sets the experiment's status to ERROR.
12. When a tuner answers fewer trials than the manager asked for, NNI 3.0's dispatcher
    (``MsgDispatcher.handle_request_trial_jobs``) says "no more" with the *first*
    requested parameter id, and its bookkeeping (``_trial_params``) then replaces the
    parameters just sent under that id with ``''``: the tuner later receives that
    trial's result with ``''`` as its parameters. It happens whenever two trials end
    in one poll and the tuner can give only one more (e.g. the retraining must wait).
    :func:`fix_no_more_trial_packing` makes "no more" use the first id not answered.
13. NNI 3.0's dispatcher calls a tuner from two threads: every trial's end
    (``Tuner.trial_end``) goes to the assessor's command queue, whose worker thread
    runs beside the one that asks for trials and hands in results
    (``MsgDispatcherBase.enqueue_command``), so a tuner's calls overlap. The PPO
    tuner's would change the search state from two threads at once (a policy update
    under way while a trial end settles a failure, the all-failed check read on one
    thread and the retraining request on the other). :func:`serialized_tuner` makes
    every call NNI makes of a tuner class hold one lock of its instance.
14. NNI 3.0's manager ends an experiment (DONE) only when ``maxTrialNumber`` trials were
    submitted or ``maxExperimentDuration`` passed (``NNIManager.run``): a tuner that
    has no more trials (``TUNER_NO_MORE_TRIAL``) leaves it waiting until the duration.
    A search whose screened networks do not all fit uses fewer trials than the most it
    could need. :func:`end_experiment_when_done` sets the experiment's
    ``maxTrialNumber`` to the trials submitted, through the manager's REST API on
    localhost (as ``nnictl update trialnum`` does), so the manager ends it as DONE once
    they finish.
"""

from __future__ import annotations

import functools
import importlib
import importlib.util
import threading
import warnings
from collections.abc import Callable
from importlib import metadata
from types import ModuleType
from typing import Any

__all__ = [
    "IncompatibleEnvironmentError",
    "check_environment",
    "check_pkg_resources",
    "check_versions",
    "end_experiment_when_done",
    "fix_no_more_trial_packing",
    "forward_masks",
    "import_nni_nas",
    "next_parameters",
    "outer_trial_reporter",
    "register_shape_formulas",
    "report_experiment_error",
    "serialized_tuner",
    "supervise_trial",
]

#: (distribution, exclusive upper bound, why) — the pins NNI 3.0 needs.
UPPER_BOUNDS: tuple[tuple[str, tuple[int, ...], str], ...] = (
    ("filelock", (3, 12), "newer releases make every NNI experiment hang at start"),
    ("setuptools", (81,), "newer releases drop pkg_resources, which nnictl imports"),
)


class IncompatibleEnvironmentError(ImportError):
    """An installed package is outside the range NNI 3.0 works with."""


def _version_tuple(text: str) -> tuple[int, ...]:
    parts: list[int] = []
    for piece in text.split("."):
        digits = "".join(ch for ch in piece if ch.isdigit())
        if not digits:
            break
        parts.append(int(digits))
        if not piece.isdigit():
            break
    return tuple(parts)


def check_versions(installed: dict[str, str] | None = None) -> None:
    """Raise when filelock or setuptools is too new for NNI 3.0.

    ``installed`` maps distribution name to version; by default it is read from
    the environment. A missing distribution is not an error here.
    """
    for dist, bound, why in UPPER_BOUNDS:
        if installed is not None:
            version = installed.get(dist)
        else:
            try:
                version = metadata.version(dist)
            except metadata.PackageNotFoundError:
                version = None
        if version is None:
            continue
        if _version_tuple(version) >= bound:
            pin = ".".join(map(str, bound))
            raise IncompatibleEnvironmentError(
                f"{dist} {version} is installed but NNI 3.0 needs {dist}<{pin} ({why}); "
                f"fix: pip install '{dist}<{pin}'"
            )


def check_pkg_resources() -> None:
    """Raise a clear error when ``pkg_resources`` (needed by nnictl) is missing."""
    if importlib.util.find_spec("pkg_resources") is None:
        raise IncompatibleEnvironmentError(
            "pkg_resources is missing, so nnictl cannot start (setuptools>=81 removed it); "
            "fix: pip install 'setuptools<81'"
        )


def check_environment() -> None:
    """Run every check; called once when :mod:`nni_hwaware` is imported."""
    check_versions()
    check_pkg_resources()


#: Warnings NNI 3.0 emits at import on torch>=2.5; harmless.
_NNI_IMPORT_WARNINGS = r".*is found to be not a nn\.Module, which is unexpected.*"


def import_nni_nas() -> ModuleType:
    """Import ``nni.nas.nn.pytorch`` without its spurious warnings and return it."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=_NNI_IMPORT_WARNINGS, category=RuntimeWarning)
        return importlib.import_module("nni.nas.nn.pytorch")


# -- 5. penalty gradient: the masks of the forward pass ------------------------------


def forward_masks(module: Any) -> dict[str, Any]:
    """The Gumbel-softmax mask each searchable layer of ``module`` used in its last forward pass.

    ``{label: tensor}``, tensors in the autograd graph of that pass, so a penalty
    built from them has a gradient to the architecture parameters (fix 5; NNI's
    ``export_probs()`` gives floats). They are the masks the supernet's mixed
    modules shared in that pass (:class:`nni_hwaware.strategies.gumbel.supernet.LabelMasks`);
    a label no module asked for is missing.
    """
    for sub in module.modules():
        masks = getattr(sub, "_masks", None) or getattr(sub, "_softmax", None)
        if hasattr(masks, "masks") and hasattr(masks, "alphas"):  # the search's shared label masks
            return dict(masks.masks)
    return {}


# -- 6. intermediate results from inside a one-shot search ----------------------------


def outer_trial_reporter() -> Callable[[Any], None]:
    """A ``report(metric)`` that reaches the NNI trial around a one-shot search (fix 5).

    Call it before the search starts; the returned function sends intermediate
    results through the trial command channel current at that moment (the
    ``nnictl`` trial's), even while NNI's sequential engine has replaced it.
    """
    import nni
    from nni.runtime.trial_command_channel import (
        get_default_trial_command_channel,
        set_default_trial_command_channel,
    )

    outer = get_default_trial_command_channel()

    def report(metric: Any) -> None:
        inner = get_default_trial_command_channel()
        set_default_trial_command_channel(outer)
        try:
            nni.report_intermediate_result(metric)
        finally:
            set_default_trial_command_channel(inner)

    return report


# -- 8. a trial killed by a signal is FAILED, not USER_CANCELED ------------------------

#: Set in the child of :func:`supervise_trial`: the parameter record it received (JSON).
SUPERVISED_ENV = "NNI_HWAWARE_SUPERVISED"


def next_parameters() -> Any:
    """The trial's parameters: those :func:`supervise_trial` fetched, else ``nni.get_next_parameter()``.

    Either way NNI's trial module knows the record, so results carry its parameter id.
    """
    import json
    import os

    import nni
    import nni.trial

    handed = os.environ.get(SUPERVISED_ENV)
    if not handed or handed == "1":
        return nni.get_next_parameter()
    record = json.loads(handed)
    nni.trial._params = record  # what get_next_parameter() would have set
    return None if record is None else record["parameters"]


def supervise_trial(command: list[str]) -> int | None:
    """Run ``command`` (the trial itself) in a child process; its exit status, or None.

    Returns None, and runs nothing, outside an NNI trial (``NNI_PLATFORM`` unset) or
    inside the child: the caller then does the work itself. The parameters are
    fetched here (fix 9) and passed on; the child takes them with
    :func:`next_parameters` and reports its results to NNI itself.
    """
    import os
    import signal
    import subprocess
    import sys

    if not os.environ.get("NNI_PLATFORM") or os.environ.get(SUPERVISED_ENV):
        return None
    import json

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
        name = signal.Signals(-code).name
        hint = " (most likely the kernel's out-of-memory killer)" if -code == signal.SIGKILL else ""
        print(f"nni_hwaware.trial: error: the training process was killed by {name}{hint}; "
              "see `dmesg` and lower the batch size or the trial concurrency", file=sys.stderr)
        return 128 - code
    return code


# -- 10. shape formulas NNI's shape inference lacks ----------------------------------

_SHAPE_FORMULAS_REGISTERED = False


def register_shape_formulas() -> None:
    """Add the shape formulas NasBench201 needs to NNI's shape inference (idempotent).

    * ``add`` / ``mul`` with a Python number (``x.mul(0.)``): the tensor's shape;
    * ``stack(tensors, dim)``: a new dimension of size ``len(tensors)``;
    * ``sum(x, dim, keepdim)``: the reduced shape.
    """
    global _SHAPE_FORMULAS_REGISTERED
    if _SHAPE_FORMULAS_REGISTERED:
        return
    import torch
    from nni.nas.profiler.pytorch.utils import shape_formula
    from nni.nas.profiler.pytorch.utils.shape import MutableShape, ShapeTensor

    broadcast = shape_formula.aten_shape_broadcast

    def scalar_safe_broadcast(fn: Any, x: Any, y: Any, **kwargs: Any) -> Any:
        if not isinstance(y, ShapeTensor):
            return x.real_shape
        if not isinstance(x, ShapeTensor):
            return y.real_shape
        return broadcast(fn, x, y, **kwargs)

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
    from torch import nn

    for module_class in (nn.ReLU, nn.ReLU6, nn.Sigmoid, nn.SiLU, nn.Hardswish, nn.Hardsigmoid, nn.GELU,
                         nn.Tanh, nn.LeakyReLU, nn.ELU, nn.Identity, nn.Dropout2d, nn.BatchNorm1d,
                         nn.GroupNorm, nn.InstanceNorm2d, nn.Softmax):
        formulas.setdefault(module_class, shape_formula.keep_shape_formula)
    for name in ("sigmoid", "sigmoid_", "silu", "silu_", "tanh", "hardtanh", "clone", "contiguous",
                 "leaky_relu", "elu", "relu6", "dropout", "native_dropout"):
        op = getattr(aten, name, None)
        if op is not None:
            formulas.setdefault(op, shape_formula.keep_first_shape_formula)
            if hasattr(op, "default"):
                formulas.setdefault(op.default, shape_formula.keep_first_shape_formula)
    _fall_back_to_dry_run()
    for op in (aten.add.Tensor, aten.add, aten.mul.Tensor, aten.mul):
        formulas[op] = scalar_safe_broadcast
    for op in (aten.stack.default, aten.stack):
        formulas[op] = stack
    for op in (aten.sum.dim_IntList, aten.sum):
        formulas[op] = reduce_sum
    _SHAPE_FORMULAS_REGISTERED = True


def _fall_back_to_dry_run() -> None:
    """A module with no formula, called on inputs of fixed shapes, gets its outputs' dry-run shapes."""
    import torch
    from nni.nas.profiler.pytorch.utils import shape as shape_module

    original = shape_module._module_shape_inference_impl

    def infer(module: Any, outputs: Any, *args: Any, is_leaf: Any = None, **kwargs: Any) -> Any:
        try:
            return original(module, outputs, *args, is_leaf=is_leaf, **kwargs)
        except RuntimeError:
            inputs = [a for a in (*args, *kwargs.values()) if isinstance(a, torch.Tensor)]
            fixed = all(isinstance(a, shape_module.ShapeTensor) and a.real_shape is not None
                        and not a.real_shape.is_mutable() and tuple(a.real_shape) == tuple(a.elem.shape)
                        for a in inputs)
            if not inputs or not fixed:
                raise
            from torch.utils._pytree import tree_map

            def assign(t: Any) -> Any:
                if isinstance(t, shape_module.ShapeTensor) and t.real_shape is None:
                    t.real_shape = shape_module.MutableShape(*t.elem.shape)
                return t

            return tree_map(assign, outputs)

    shape_module._module_shape_inference_impl = infer


# -- 11. a tuner that stops the experiment with an error ------------------------------


def report_experiment_error(trial_callback: Any, message: str) -> bool:
    """Stop the experiment with ``message`` as its error (status ERROR); False when not run by NNI.

    ``trial_callback`` is the ``st_callback`` NNI's dispatcher passes to
    ``generate_multiple_parameters`` (a bound method of the dispatcher).
    """
    dispatcher = getattr(trial_callback, "__self__", None)
    report = getattr(dispatcher, "report_error", None)
    if report is None:
        return False
    report(message)
    return True


# -- 12. "no more trials" must not overwrite the parameters of a trial just sent --------


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


# -- 13. a tuner's calls come from two of NNI's threads --------------------------------

#: The Tuner methods NNI's dispatcher calls (and the tuner's state, which a strategy reads).
TUNER_CALLS = ("update_search_space", "generate_parameters", "generate_multiple_parameters",
               "receive_trial_result", "trial_end", "import_data", "state_dict")


def serialized_tuner(cls: type) -> type:
    """Make each of :data:`TUNER_CALLS` that ``cls`` defines hold one re-entrant lock of the instance (fix 13)."""
    for name in TUNER_CALLS:
        method = cls.__dict__.get(name)
        if method is None:
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


# -- 14. the experiment ends when the tuner is done -----------------------------------------


def manager_url(channel: str | None = None) -> str | None:
    """The REST API of the manager that started this dispatcher (from ``NNI_TUNER_COMMAND_CHANNEL``,
    ``ws://localhost:PORT[/PREFIX]/tuner``); None outside NNI's dispatcher."""
    import os
    import re

    channel = os.environ.get("NNI_TUNER_COMMAND_CHANNEL") if channel is None else channel
    found = re.fullmatch(r"ws://localhost:(\d+)(/.*)?/tuner", channel or "")
    if found is None:
        return None
    # 127.0.0.1, not localhost: the manager may listen on IPv4 loopback alone (nni-hwaware create)
    return f"http://127.0.0.1:{found.group(1)}{found.group(2) or ''}/api/v1/nni"


def end_experiment_when_done(url: str | None = None, timeout: float = 10.0) -> bool:
    """Set the experiment's ``maxTrialNumber`` to the trials submitted so far (fix 14), so that NNI's manager
    ends it as DONE once they finish; False outside NNI or when the manager did not answer."""
    import json
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
