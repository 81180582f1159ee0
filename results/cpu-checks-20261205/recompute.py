"""The H200 report's numbers recomputed from the committed raw files alone (the logs' stamped iter lines, the runs'
metrics files, runs.jsonl / retired.jsonl), with pandas, without tr2's summaries: run from the repository's root,
`.venv/bin/python results/cpu-checks-20261205/recompute.py > results/cpu-checks-20261205/recompute.txt`."""
import glob
import json
import os
import re

import pandas as pd

pd.set_option("display.width", 250)
pd.set_option("display.max_columns", 30)
S = "results/series-20261204-212532-h200-edition"
A = "results/method_a-20261202-170258-h200-edition"
R = "results/method_a-20261203-011610-h200-methoda-nanogpt-f32-replication"
B = "results/method_b-20261203-002057-h200-edition"
BM = "results/method_b-20261203-070510-h200-methodb-gpt2-medium-floors"
TOKENS = {"nanogpt": 64 * 256, "gpt2-small": 8 * 1024}


def jsonl(p):
    return [json.loads(x) for x in open(p)] if os.path.exists(p) else []


print("== series: step time from each log's stamps, (t[iter 400] - t[iter 100]) / 300, steps 100-400 ==")
runs = pd.DataFrame(jsonl(f"{S}/runs.jsonl"))


def from_log(log):
    t = {}
    for line in open(f"{S}/{log}"):
        m = re.match(r"([\d.]+)\titer (\d+): loss", line)
        if m:
            t[int(m.group(2))] = float(m.group(1))
    return (t[400] - t[100]) / 300 * 1000


runs["log_ms"] = runs["log"].map(from_log)
print("largest |log - runs.jsonl step_ms| over all 32 runs, ms:", (runs["log_ms"] - runs["step_ms"]).abs().max())
timed = runs[runs["round"] > 0]
g = timed.groupby("config")["log_ms"].agg(runs="count", median="median", fastest="min", slowest="max")
g["mad_pct"] = timed.groupby("config")["log_ms"].apply(lambda x: 100 * (x - x.median()).abs().median() / x.median())
g["tokens_per_s"] = [TOKENS[c.split("/")[0]] / (m / 1000) for c, m in zip(g.index, g["median"])]
print(g.round(4).to_string())
for (m, dt), x in timed.groupby(["model", "dtype"], sort=False):
    cu, to = x[x.side == "cupy"]["log_ms"], x[x.side == "torch"]["log_ms"]
    ratio = cu.median() / to.median()
    verdict = "faster" if cu.max() < to.min() else ("level" if ratio < 1.05 else "slower")
    print(f"{m} {dt}: ratio {ratio:.4f} ({verdict}); bar {cu.min() / to.max():.4f}-{cu.max() / to.min():.4f}")
w = pd.DataFrame([{"config": x["config"], **{k: (x.get("gpu_window") or {}).get(k, {}).get("median")
                                             for k in ("sm_mhz", "power_w")}} for x in jsonl(f"{S}/runs.jsonl") if x["round"] > 0])
print("SM clock and power in the timed windows (median of the runs' medians):")
print(w.groupby("config").agg(sm=("sm_mhz", "median"), sm_lo=("sm_mhz", "min"), sm_hi=("sm_mhz", "max"),
                              power=("power_w", "median")).to_string())


def method_a(folder):
    rows = []
    for f in glob.glob(f"{folder}/runs/*.metrics.jsonl"):
        m, dt, side, seed = os.path.basename(f).replace(".metrics.jsonl", "").split("_")
        rows += [dict(model=m, dtype=dt, side=side, seed=int(seed), step=r["step"], val=r["val"])
                 for r in jsonl(f) if r["kind"] == "eval"]
    df = pd.DataFrame(rows)
    gg = df.groupby(["model", "dtype", "step", "side"])["val"].agg(["median", "min", "max", "count"]).reset_index()
    gg["range"] = gg["max"] - gg["min"]
    wide = gg.pivot_table(index=["model", "dtype", "step"], columns="side", values=["median", "range", "count"])
    wide.columns = [f"{a}_{b}" for a, b in wide.columns]
    wide = wide.reset_index()
    wide["diff"] = (wide.median_cupy - wide.median_torch).abs()
    wide["allowed"] = wide[["range_cupy", "range_torch"]].max(axis=1)
    j = wide[wide.step >= 1000]
    for (m, dt), x in j.groupby(["model", "dtype"]):
        worst = x.loc[(x["diff"] / x["allowed"]).idxmax()]
        last = x.iloc[-1]
        print(f"{m} {dt}: seeds {int(x.count_cupy.min())}/{int(x.count_torch.min())}, "
              f"{'passed' if (x['diff'] <= x['allowed']).all() else 'FAILED'} over {len(x)} evaluations; nearest the "
              f"limit at step {int(worst.step)}: {worst['diff']:.4f} of {worst.allowed:.4f} ({worst['diff'] / worst.allowed:.0%}); "
              f"last: cupy {last.median_cupy:.4f} torch {last.median_torch:.4f}")


print("\n== method A from the runs' metrics files (judged from step 1000) ==")
method_a(A)
print("-- the replication beside it --")
method_a(R)


def method_b(folder, model):
    def losses(p):
        return {r["step"]: r["loss"] for r in jsonl(p) if r["kind"] == "loss"}
    d = f"{folder}/runs/{model}"
    L = {k: losses(f"{d}/{k}.metrics.jsonl") for k in ("torch", "cupy", "floor-none", "floor-once", "floor-every")}
    rel = lambda a, b: {s: abs(L[a][s] - L[b][s]) / abs(L[b][s]) for s in L[b] if s in L[a]}  # noqa: E731
    steps = max(L["torch"])
    floors = {"rerun": rel("floor-none", "torch"), "once": rel("floor-once", "floor-none"), "every": rel("floor-every", "floor-none")}
    W, info = steps, {}
    for k, r in floors.items():
        over = next((s for s in range(steps + 1) if not (s in r and r[s] <= 5e-3)), None)
        info[k] = over
        W = min(W, steps if over is None else over - 1)
    rc = rel("cupy", "torch")
    j = max(range(1, W + 1), key=lambda s: rc[s])
    a = max(range(1, steps + 1), key=lambda s: rc[s])
    print(f"{model}: W {W}; floors (first step over 0.5%, max to W): "
          + ", ".join(f"{k} ({info[k]}, {max(r[s] for s in range(W + 1)):.3g})" for k, r in floors.items())
          + f"; step 0 {rc[0]:.3g}; steps 1..W max {rc[j]:.3g} at {j}; all steps max {rc[a]:.3g} at {a}, "
          f"{sum(rc[s] > 0.01 for s in range(1, steps + 1))} over 1%; passed {rc[0] <= 1e-5 and all(rc[s] <= 0.01 for s in range(1, W + 1))}")


print("\n== method B from the runs' metrics files ==")
method_b(B, "nanogpt")
method_b(B, "gpt2-small")
method_b(BM, "gpt2-medium")

print("\n== GPU minutes of runs: wall_s of every record, runs file and retired.jsonl ==")
total = 0.0
for d, f in ((S, "runs.jsonl"), (A, "runs.jsonl"), (B, "runs.jsonl"), ("results/footprint-20261203-010902-h200-edition", "footprint.jsonl"),
             ("results/families-20261204-213720-h200-edition", "runs.jsonl")):
    recs = jsonl(f"{d}/{f}") + jsonl(f"{d}/retired.jsonl")
    s = sum(r.get("wall_s") or 0 for r in recs)
    total += s
    sessions = jsonl(f"{d}/sessions.jsonl")
    print(f"{os.path.basename(d)}: {len(recs)} records, {s / 60:.2f} min; {len(sessions)} calls, "
          f"{sum('gpus' in x for x in sessions)} of them with their GPUs recorded")
print(f"all: {total / 60:.1f} min")
