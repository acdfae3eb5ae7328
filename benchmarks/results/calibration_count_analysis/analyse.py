import json, sys, numpy as np
from scipy import stats
d = json.load(open(sys.argv[1]))
C, H = d["calib"], d["held"]
labels = list(C["samples"][0])
values = {l: sorted({repr(s[l]) for s in C["samples"] + H["samples"]}) for l in labels}
def onehot(samples):
    cols = [(l, v) for l in labels for v in values[l]]
    at = {c: j for j, c in enumerate(cols)}
    X = np.zeros((len(samples), len(cols)))
    for i, s in enumerate(samples):
        for l in labels: X[i, at[(l, repr(s[l]))]] = 1
    return X
def pairs(samples, adj=True):
    cols = {}
    rows = []
    for s in samples:
        r = []
        for a in range(len(labels) - 1):
            for b in ([a + 1] if adj else range(a + 1, len(labels))):
                key = (a, repr(s[labels[a]]), b, repr(s[labels[b]]))
                r.append(key)
        rows.append(r)
    return rows
def fit(Xc, yc, w, pen, Xh):
    A = Xc * w[:, None]; Y = yc * w
    beta = np.linalg.solve(A.T @ A + np.diag(pen), A.T @ Y)
    return Xh @ beta, Xc @ beta
def report(name, pred):
    m = np.array(H["measured"]); e = np.abs(pred - m) / m
    print(f"{name:40s} spearman {stats.spearmanr(pred, m).statistic:.4f}  mape {100*e.mean():.2f}  within10 {(e<=0.1).mean():.3f}")
m_h = np.array(H["measured"])
print("ceiling", round(stats.spearmanr(H["measured"], H["again"]).statistic, 4), "spread p90/p10", np.percentile(m_h, 90) / np.percentile(m_h, 10))
report("table (as profiled)", np.array(H["predicted"]))
report("summed leaves alone", np.array(H["summed"]))
yc = np.array(C["measured"]); unit = np.median(yc)
w = np.array(C["weights"]) / (yc / unit)
def base(samples, summed, wmb):
    X = onehot(samples)
    over = np.maximum(0, np.array(wmb) - C["cache_mb"])
    return np.column_stack([np.array(summed) / unit, np.ones(len(samples)), over, X])
Bc, Bh = base(C["samples"], C["summed"], C["weights_mb"]), base(H["samples"], H["summed"], H["weights_mb"])
for sh in (0.1, 0.3, 1.0, 3.0):
    pen = np.full(Bc.shape[1], sh); pen[:3] = 1e-9
    ph, pc = fit(Bc, yc / unit, w, pen, Bh)
    report(f"refit shrink {sh}", ph * unit)
    if sh == 1.0:
        res_c = yc / unit - pc
# residual vs features on held-out
pen = np.full(Bc.shape[1], 1.0); pen[:3] = 1e-9
ph, pc = fit(Bc, yc / unit, w, pen, Bh)
res = m_h / unit - ph
for name, f in (("summed", H["summed"]), ("weights_mb", H["weights_mb"]), ("flops", H["flops"]),
                ("n_skip", [sum(v == "skip" for v in s.values()) for s in H["samples"]])):
    print("residual corr with", name, round(stats.spearmanr(f, res).statistic, 3))
# per-label residual means: does any label's value explain held-out residual
# adjacent pair model
allp = pairs(C["samples"] + H["samples"])
keys = sorted({k for r in allp for k in r}); at = {k: j for j, k in enumerate(keys)}
P = np.zeros((len(allp), len(keys)))
for i, r in enumerate(allp):
    for k in r: P[i, at[k]] = 1
Pc, Ph = P[: len(C["samples"])], P[len(C["samples"]):]
for psh in (1.0, 3.0, 10.0):
    Bc2, Bh2 = np.column_stack([Bc, Pc]), np.column_stack([Bh, Ph])
    pen = np.concatenate([np.full(Bc.shape[1], 1.0), np.full(P.shape[1], psh)]); pen[:3] = 1e-9
    ph2, _ = fit(Bc2, yc / unit, w, pen, Bh2)
    report(f"+adjacent pairs shrink {psh}", ph2 * unit)
# log-multiplicative: log m = log(s*summed) ... use per-value multiplicative factors: m = summed * exp(sum b)
Lc = np.column_stack([np.ones(len(yc)), onehot(C["samples"])]); Lh = np.column_stack([np.ones(len(m_h)), onehot(H["samples"])])
for sh in (0.03, 0.1, 0.3):
    pen = np.full(Lc.shape[1], sh); pen[0] = 1e-9
    ph3, _ = fit(Lc, np.log(yc / np.array(C["summed"])), np.array(C["weights"]), pen, Lh)
    report(f"log ratio per value shrink {sh}", np.exp(ph3) * np.array(H["summed"]))
# leave-one-out: measurement noise in calibration, what if calibration were perfect? use held-out CV as calib
from sklearn.model_selection import KFold
allS = C["samples"] + H["samples"]; allsum = C["summed"] + H["summed"]; allw = C["weights_mb"] + H["weights_mb"]
ally = np.concatenate([yc, m_h]); B = base(allS, allsum, allw)
preds = np.zeros(len(m_h))
n_c = len(yc)
for tr, te in KFold(5, shuffle=True, random_state=0).split(m_h):
    idx = np.concatenate([np.arange(n_c), n_c + tr])
    pen = np.full(B.shape[1], 1.0); pen[:3] = 1e-9
    wall = 1 / (ally[idx] / unit)
    preds[te], _ = fit(B[idx], ally[idx] / unit, wall, pen, B[n_c + te])
report("calib + 4/5 held-out (5-fold)", preds * unit)
print("---- what helps: count, distribution or session")
rng = np.random.default_rng(0)
def cv_heldout(extra_idx_fn, name, reps=5):
    out = []
    for rep in range(reps):
        preds = np.zeros(len(m_h))
        for tr, te in KFold(5, shuffle=True, random_state=rep).split(m_h):
            ci = extra_idx_fn(rep)
            idx = np.concatenate([ci, n_c + tr])
            pen = np.full(B.shape[1], 1.0); pen[:3] = 1e-9
            preds[te], _ = fit(B[idx], ally[idx] / unit, 1 / (ally[idx] / unit), pen, B[n_c + te])
        out.append(stats.spearmanr(preds, m_h).statistic)
    print(f"{name:40s} spearman {np.mean(out):.4f}")
cv_heldout(lambda r: np.array([], dtype=int), "held-out 4/5 alone (96 uniform, same session)")
cv_heldout(lambda r: rng.choice(n_c, 32, replace=False), "held-out 4/5 + 32 calib")
cv_heldout(lambda r: np.arange(n_c), "held-out 4/5 + all calib")
# calib subsets of size 96 + 0 held-out -> test held-out all
for size in (64, 96, 128):
    sp = []
    for rep in range(10):
        ci = rng.choice(n_c, min(size, n_c), replace=False)
        pen = np.full(B.shape[1], 1.0); pen[:3] = 1e-9
        p, _ = fit(B[ci], ally[ci] / unit, 1 / (ally[ci] / unit), pen, B[n_c:])
        sp.append(stats.spearmanr(p, m_h).statistic)
    print(f"calib subset {size:4d} -> held-out             spearman {np.mean(sp):.4f}")
print("n_calib", n_c, "median calib / median held", np.median(yc)/np.median(m_h))
# calibration's internal CV
pc_cv = np.zeros(n_c)
for tr, te in KFold(5, shuffle=True, random_state=0).split(yc):
    pen = np.full(B.shape[1], 1.0); pen[:3] = 1e-9
    pc_cv[te], _ = fit(B[tr], yc[tr] / unit, 1 / (yc[tr] / unit), pen, B[te])
e = np.abs(pc_cv * unit - yc) / yc
print("calib 5-fold internal: spearman", round(stats.spearmanr(pc_cv, yc).statistic, 4), "mape", round(100 * e.mean(), 2))
# session shift: held-out predicted by calib fit, ratio measured/pred by size
ph, _ = fit(B[:n_c], yc / unit, w, np.r_[np.full(3, 1e-9), np.full(B.shape[1] - 3, 1.0)], B[n_c:])
r = m_h / (ph * unit)
print("held-out measured/predicted: median", round(np.median(r), 4), "corr with size", round(stats.spearmanr(H["summed"], r).statistic, 3))
print("---- uniform half vs leaning half (first 64 uniform)")
half = (n_c - 2) // 2 + ((n_c - 2) % 2)
for name, ci in (("uniform 64", np.arange(64)), ("leaning 64", np.arange(64, 128)), ("all 129", np.arange(n_c))):
    pen = np.full(B.shape[1], 1.0); pen[:3] = 1e-9
    p, _ = fit(B[ci], ally[ci] / unit, 1 / (ally[ci] / unit), pen, B[n_c:])
    print(f"{name:12s} -> held-out spearman {stats.spearmanr(p, m_h).statistic:.4f}")
    # and on the leaning calib networks as a 'small networks' check (only fair for uniform)
    if name == "uniform 64":
        q, _ = fit(B[ci], ally[ci] / unit, 1 / (ally[ci] / unit), pen, B[64:128])
        e = np.abs(q * unit - yc[64:128]) / yc[64:128]
        print("   uniform-fit on leaning nets: mape", round(100 * e.mean(), 2), "within10", round((e <= .1).mean(), 3))
