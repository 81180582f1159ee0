"""Method A's chance of failing two families of one distribution over a whole run, with the evaluations as
correlated as measured. The rule at one evaluation is scale-free (the medians' difference against the ranges), so
only the correlation of a seed's deviations across evaluations matters. It is estimated from a method A folder: each
run's validation loss minus its family's mean (per model, type and side) at each judged evaluation, divided by that
family's spread there; the correlation of these residuals between evaluations k apart, pooled over runs. Then
families are drawn from a Gaussian process with that correlation, and the rule applied over all judged evaluations.

    python scripts/method_a_null_rate_correlated.py results/method_a-...  [--model nanogpt]
"""
import argparse
import sys
from pathlib import Path

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "lib"))
from tr2 import method_a  # noqa: E402

ap = argparse.ArgumentParser()
ap.add_argument("folder")
ap.add_argument("--model", default="nanogpt")
ap.add_argument("--judge-from", type=int, default=1000)
ap.add_argument("--draws", type=int, default=100_000)
args = ap.parse_args()

rows = pd.DataFrame(method_a.curves(args.folder))
rows = rows[(rows.model == args.model) & (rows.step >= args.judge_from)]
steps = sorted(rows.step.unique())
resid = []
for (dtype, side), fam in rows.groupby(["dtype", "side"]):
    wide = fam.pivot_table(index="seed", columns="step", values="val")[steps]
    if len(wide) < 2:
        continue
    z = (wide - wide.mean()) / wide.std(ddof=1)
    resid += [r for r in z.to_numpy()]
    print(f"{args.model} {dtype} {side}: {len(wide)} runs")
R = np.array(resid)                     # runs x evaluations
K = len(steps)
lag_corr = []
for k in range(K):
    a, b = R[:, : K - k].ravel(), R[:, k:].ravel()
    lag_corr.append(float(np.mean(a * b) / np.sqrt(np.mean(a * a) * np.mean(b * b))))
print(f"{len(R)} runs, {K} judged evaluations ({steps[0]}..{steps[-1]}); residual correlation by lag: "
      + ", ".join(f"{k}:{c:+.2f}" for k, c in enumerate(lag_corr[:8])))
# a Toeplitz correlation from the pooled lags, made positive definite by clipping its eigenvalues
C = np.array([[lag_corr[abs(i - j)] for j in range(K)] for i in range(K)])
w, V = np.linalg.eigh(C)
C = (V * np.clip(w, 1e-6, None)) @ V.T
d = np.sqrt(np.diag(C))
C = C / np.outer(d, d)
L = np.linalg.cholesky(C)
gen = np.random.default_rng(0)
for n in (3, 5):
    a = gen.standard_normal((args.draws, n, K)) @ L.T
    b = gen.standard_normal((args.draws, n, K)) @ L.T
    fails = np.abs(np.median(a, 1) - np.median(b, 1)) > np.maximum(np.ptp(a, 1), np.ptp(b, 1))
    one = method_a.chance_of_failing(n, n, K)
    print(f"{n} seeds a side: any of the {K} evaluations fails {fails.any(1).mean():.3f} with this correlation "
          f"(independent: {one['any_step_bound']:.3f}; one evaluation: {fails.mean():.4f})")
