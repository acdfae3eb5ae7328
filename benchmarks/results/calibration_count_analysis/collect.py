"""Collect digits calibration + held-out data (ORT) for offline model analysis."""
import json, sys, time
sys.path.insert(0, ".")
from nni_hwaware.cost_model import find_leaves, profile_model_space, space_cost_model
from nni_hwaware.cost_model import profile as profiling
from nni_hwaware.cost_model.calibration import fit_network_term
from nni_hwaware.cost_model.fidelity import check_fidelity
from nni_hwaware.spaces.resolve import resolve_space
from nni_hwaware.profiling.load import BackgroundLoad
import ast
seed, k, out, load = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], len(sys.argv) > 4
named = resolve_space("digits")
leaves = find_leaves(named.space, named.dummy_input())
fitted = {}
def keep_fit(*a, **kw):
    fitted.update(args=a, kwargs=kw); return fit_network_term(*a, **kw)
profiling.fit_network_term = keep_fit
ctx = BackgroundLoad(seed=0) if load else None
if ctx: ctx.__enter__()
t = time.time()
table = profile_model_space(named.space, named.dummy_input(), leaves=leaves, backend="onnxruntime", seed=seed,
                            progress=False, reference=named.baseline)
model = space_cost_model(leaves, table, backend="onnxruntime", name="digits")
bare = space_cost_model(leaves, table, backend="onnxruntime", name="digits", with_network_term=False)
figures, frame = check_fidelity(named.space, model, named.input_shape, k, seed=seed,
                                reference=named.baseline(model), max_seconds=2.0 * (2 * k + 1))
if ctx: ctx.__exit__(None, None, None)
samples, summed, measured = fitted["args"][:3]
held = [ast.literal_eval(s) for s in frame["sample"]]
data = {"calib": {"samples": list(samples), "summed": list(map(float, summed)), "measured": list(map(float, measured)),
                  "weights": list(map(float, fitted["kwargs"].get("weights") or [1.0] * len(samples))),
                  "weights_mb": list(map(float, fitted["kwargs"]["weights_mb"])), "cache_mb": fitted["kwargs"]["cache_mb"]},
        "held": {"samples": held, "summed": [bare.predict(s).latency_ms for s in held],
                 "weights_mb": [bare.predict(s).param_mb for s in held],
                 "predicted": list(frame.predicted_latency_ms), "measured": list(frame.measured_latency_ms),
                 "again": list(frame.measured_again_ms), "flops": list(map(float, frame.flops))},
        "figures": {k2: figures["latency"][k2] for k2 in ("spearman", "ceiling", "mape", "within10")},
        "seconds": time.time() - t}
json.dump(data, open(out, "w"))
print(json.dumps(data["figures"]))
