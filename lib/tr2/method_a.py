"""Method A (protocol §7 A): families of runs, several seeds a side, compared as families.

For each model and element type of the card, each side trains the schedule (the card's
`method_a.steps`, or the model's `max_iters`) once per seed of `method_a.seeds`, evaluated every
`eval_interval` steps on `eval_iters` batches of each split (the trainer's `--metrics` file holds the
evaluations). The torch side runs in `method_a.torch_mode`; the cupy side in the half types runs with
`--half-roundings` (the build the verdict compares, amendment 4.2), in float32 without it.

Verdict (`verdict`, a pure function): A passes when, at every evaluation from `judge_from` on, the
two sides' median validation losses differ by no more than the larger of the two sides' ranges
(max - min over the seeds) at that step. With one seed a side there is no range: the curves are read
and published, and no verdict is given (amendment 7.1).

Resumable: every finished run (ok or out of memory) is one line of `runs.jsonl`; a rerun on the same
folder starts only the runs that line is missing for, and a run that was killed half-way starts over
(its partial metrics file is discarded). A run that fails in any other way is recorded and ends the
stage (amendment 8.4); a rerun tries it again.

This module also holds the few helpers the other correctness/profile stages share (`prepare_dir`,
`run_logged`, `trainer_command`, `conditions`, `stats`).
"""
from __future__ import annotations

import math
import os
import shlex
import sys
import time
from pathlib import Path

from . import REPO_ROOT, Tr2Error
from .models import load_model
from .results import append_jsonl, new_results_dir, read_jsonl, write_json_atomic, write_text_atomic
from .trainlog import read_metrics

STAGE = "method_a"
RUNS = "runs.jsonl"
FINISHED = ("ok", "oom")  # a run recorded with one of these is not run again


# ----------------------------------------------------------------------------------------------------
# helpers shared by method_a, method_b and families
# ----------------------------------------------------------------------------------------------------

def trainer_command() -> list[str]:
    """The trainer's command line prefix: $TR2_TRAINER (split like a shell) or `python -m tr2.train`."""
    env = os.environ.get("TR2_TRAINER")
    if env:
        return shlex.split(env)
    return [sys.executable, "-m", "tr2.train"]


def prepare_dir(card: dict, results_dir, stage: str) -> Path:
    """The stage's results folder (a fresh one when results_dir is None) with card.yaml and machine.json."""
    from .cards import dump_card
    if results_dir is None:
        d = new_results_dir(stage, card["card"]).resolve()
    else:
        d = Path(results_dir).resolve()
        (d / "logs").mkdir(parents=True, exist_ok=True)
    if not (d / "card.yaml").is_file():
        write_text_atomic(d / "card.yaml", dump_card(card))
    if not (d / "machine.json").is_file():
        from .sysinfo import machine_info
        write_json_atomic(d / "machine.json", machine_info())
    return d


def load_dir_card(results_dir) -> dict:
    from .cards import load_card
    return load_card(Path(results_dir) / "card.yaml")


def run_logged(cmd, log_path, env=None, timeout_s=None) -> dict:
    """Run one program under tr2.clock's reader (stamped log, process group, OOM detection).

    Returns {status: ok|oom|failed|timeout, returncode, wall_s, log, reason}. The log is the clock's
    stamped form (`<monotonic s>\\t<line>`). Interrupting the caller ends the program too.
    """
    from .clock import run_clocked
    full_env = dict(os.environ)
    if env:
        full_env.update(env)
    # Always find tr2 even when started from elsewhere (the editable install does that too).
    full_env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO_ROOT / "lib"), full_env.get("PYTHONPATH")) if p)
    res = run_clocked([str(c) for c in cmd], log_path, env=full_env, timeout_s=timeout_s, window=(0, 1),
                      cwd=str(REPO_ROOT))
    status = res["status"]
    reason = res.get("reason")
    if status == "no-window":  # these runs are not timed; a missing iter line means nothing here
        status, reason = "ok", None
    return {"status": status, "returncode": res["returncode"], "wall_s": round(res["wall_s"], 3),
            "log": str(log_path), "reason": reason}


def log_text(path) -> str:
    """The lines of a stamped log without their stamps."""
    out = []
    for raw in Path(path).read_text(errors="replace").splitlines():
        _t, sep, line = raw.partition("\t")
        out.append(line if sep else raw)
    return "\n".join(out)


def conditions(results_dir) -> dict:
    """What every number carries: card, machine and versions, date, commit (protocol rule 4)."""
    import json
    d = Path(results_dir)
    machine = json.loads((d / "machine.json").read_text()) if (d / "machine.json").is_file() else {}
    card = load_dir_card(d) if (d / "card.yaml").is_file() else None
    return {"card": card, "machine": machine, "date": machine.get("date"), "commit": machine.get("commit"),
            "dirty": machine.get("dirty"), "results_dir": str(d)}


def stats(values) -> dict:
    """n, median, min, max and range of a list of numbers (NaN and inf kept out, counted)."""
    vals = [float(v) for v in values if v is not None and math.isfinite(float(v))]
    bad = len(list(values)) - len(vals)
    if not vals:
        return {"n": 0, "median": None, "min": None, "max": None, "range": None, "nonfinite": bad}
    s = sorted(vals)
    n = len(s)
    med = s[n // 2] if n % 2 else 0.5 * (s[n // 2 - 1] + s[n // 2])
    return {"n": n, "median": med, "min": s[0], "max": s[-1], "range": s[-1] - s[0], "nonfinite": bad}


def finished_keys(runs_path) -> dict:
    """key -> last record of every finished run in a runs.jsonl."""
    out = {}
    for r in read_jsonl(runs_path):
        if r.get("status") in FINISHED:
            out[r["key"]] = r
    return out


def progress(total: int, desc: str, initial: int = 0):
    try:
        try:
            import ipywidgets  # noqa: F401 - a notebook widget where it can draw one
            from tqdm.auto import tqdm
        except ImportError:
            from tqdm import tqdm  # text bar (tqdm.auto would warn that it cannot draw a widget)
        return tqdm(total=total, desc=desc, initial=initial, unit="run")
    except Exception:  # noqa: BLE001 - no tqdm: a silent stand-in
        class _Bar:
            def update(self, n=1): pass
            def set_postfix_str(self, s): pass
            def close(self): pass
        return _Bar()


# ----------------------------------------------------------------------------------------------------
# method A
# ----------------------------------------------------------------------------------------------------

def schedule(card: dict, model: str) -> dict:
    """steps, eval_interval, eval_iters for one model under the card (null: the model's own)."""
    cfg = load_model(model)
    a = card["method_a"]
    return {"steps": a["steps"] if a["steps"] is not None else cfg.max_iters,
            "eval_interval": a["eval_interval"] if a["eval_interval"] is not None else cfg.eval_interval,
            "eval_iters": a["eval_iters"] if a["eval_iters"] is not None else cfg.eval_iters}


def plan(card: dict) -> list[dict]:
    """Every run of the stage, in the order they run: model, type, seed, then the two sides."""
    a = card["method_a"]
    runs = []
    for model in card["models"]:
        sch = schedule(card, model)
        for dtype in card["dtypes"]:
            for seed in a["seeds"]:
                for side in ("torch", "cupy"):
                    hr = side == "cupy" and dtype != "float32"
                    mode = a["torch_mode"] if side == "torch" else None
                    key = f"{model}/{dtype}/{side}/{seed}"
                    runs.append({"key": key, "model": model, "dtype": dtype, "side": side, "seed": seed, "mode": mode,
                                 "half_roundings": hr, **sch})
    return runs


def _slug(key: str) -> str:
    return key.replace("/", "_")


def command(run: dict, device: str, metrics_path) -> list[str]:
    cmd = trainer_command() + ["--side", run["side"], "--model", run["model"], "--dtype", run["dtype"],
                               "--device", device, "--steps", str(run["steps"]), "--seed", str(run["seed"]),
                               "--eval-interval", str(run["eval_interval"]), "--eval-iters", str(run["eval_iters"]),
                               "--metrics", str(metrics_path)]
    if run["side"] == "torch":
        cmd += ["--mode", run["mode"]]
    if run["half_roundings"]:
        cmd += ["--half-roundings"]
    return cmd


def run(card: dict, results_dir=None) -> Path:
    """Train every run of the card that the folder does not hold yet; returns the folder."""
    d = prepare_dir(card, results_dir, STAGE)
    todo = plan(card)
    done = finished_keys(d / RUNS)
    bar = progress(len(todo), "method A", initial=sum(1 for r in todo if r["key"] in done))
    try:
        for r in todo:
            if r["key"] in done:
                continue
            metrics = d / "runs" / f"{_slug(r['key'])}.metrics.jsonl"
            log = d / "logs" / f"{STAGE}-{_slug(r['key'])}.log"
            metrics.parent.mkdir(parents=True, exist_ok=True)
            if metrics.exists():
                metrics.unlink()  # a killed run's partial metrics: the run starts over
            cmd = command(r, card["device"], metrics)
            bar.set_postfix_str(r["key"])
            res = run_logged(cmd, log)
            m = read_metrics(metrics) if metrics.is_file() else {"loss": {}, "eval": {}}
            last = max(m["eval"]) if m["eval"] else None
            rec = {**r, **res, "cmd": cmd, "metrics": str(metrics.relative_to(d)), "log": str(log.relative_to(d)),
                   "n_evals": len(m["eval"]), "final_step": last,
                   "final_val": m["eval"][last][1] if last is not None else None,
                   "finished_at": time.strftime("%Y-%m-%dT%H:%M:%S")}
            append_jsonl(d / RUNS, rec)
            bar.update(1)
            if res["status"] not in FINISHED:
                raise Tr2Error(f"method A: run {r['key']} {res['status']} ({res['reason']}); log {log}. "
                               "A failure other than out of memory ends the stage (amendment 8.4); rerun to retry it")
    finally:
        bar.close()
    return d


def verdict(torch_curves: dict, cupy_curves: dict, judge_from: int) -> dict:
    """§7 A's verdict from two families of validation curves, {seed: {step: val_loss}} per side.

    Judged: every evaluation step >= judge_from that any run holds. At each, both sides' medians and
    ranges over their seeds; the step passes when |median_torch - median_cupy| <= max(range_torch,
    range_cupy). A step some run lacks, or a non-finite loss, fails the step. `passed` is True/False,
    or None when a side has fewer than two seeds (no range: read, not judged) or nothing was judged.
    """
    steps = sorted({s for c in list(torch_curves.values()) + list(cupy_curves.values()) for s in c if s >= judge_from})
    rows = []
    for s in steps:
        t_vals = [c.get(s) for c in torch_curves.values()]
        c_vals = [c.get(s) for c in cupy_curves.values()]
        t, c = stats(t_vals), stats(c_vals)
        missing = (sum(v is None for v in t_vals) + sum(v is None for v in c_vals)
                   + t["nonfinite"] + c["nonfinite"])
        if missing or t["n"] == 0 or c["n"] == 0:
            rows.append({"step": s, "torch_median": t["median"], "cupy_median": c["median"],
                         "torch_range": t["range"], "cupy_range": c["range"], "diff": None, "allowed": None,
                         "ok": False, "why": f"{missing} run(s) lack this evaluation or hold a non-finite loss"})
            continue
        diff = abs(t["median"] - c["median"])
        allowed = max(t["range"], c["range"])
        rows.append({"step": s, "torch_median": t["median"], "cupy_median": c["median"], "torch_range": t["range"],
                     "cupy_range": c["range"], "diff": diff, "allowed": allowed, "ok": diff <= allowed, "why": None})
    n_t, n_c = len(torch_curves), len(cupy_curves)
    if n_t < 2 or n_c < 2:
        passed, reason = None, (f"{n_t} torch and {n_c} cupy seed(s): a side of one seed has no range, so the "
                                "curves are read and published, not judged (amendment 7.1)")
    elif not rows:
        passed, reason = None, f"no evaluation at or after step {judge_from}"
    else:
        passed = all(r["ok"] for r in rows)
        bad = [r["step"] for r in rows if not r["ok"]]
        reason = ("at every evaluation from step %d on, the medians differ by no more than the larger range" % judge_from
                  if passed else f"failed at step(s) {', '.join(map(str, bad))}")
    worst = max((r for r in rows if r["diff"] is not None),
                key=lambda r: (r["diff"] / r["allowed"]) if r["allowed"] else (math.inf if r["diff"] else 0.0),
                default=None)
    return {"passed": passed, "reason": reason, "judge_from": judge_from, "seeds": {"torch": n_t, "cupy": n_c},
            "steps": rows, "worst_step": worst["step"] if worst else None}


def curves(results_dir) -> list[dict]:
    """Every evaluation of every finished run: model, dtype, side, seed, step, train, val."""
    d = Path(results_dir)
    rows = []
    for r in finished_keys(d / RUNS).values():
        path = d / r["metrics"]
        if not path.is_file():
            continue
        for step, (tr, va) in sorted(read_metrics(path)["eval"].items()):
            rows.append({"model": r["model"], "dtype": r["dtype"], "side": r["side"], "seed": r["seed"],
                         "mode": r.get("mode"), "half_roundings": r.get("half_roundings"), "step": step,
                         "train": tr, "val": va})
    rows.sort(key=lambda x: (x["model"], x["dtype"], x["side"], x["seed"], x["step"]))
    return rows


def summarize(results_dir) -> dict:
    """summary.json (verdicts with their conditions), method_a.csv (every evaluation) and method_a.png."""
    import csv
    import io
    d = Path(results_dir)
    card = load_dir_card(d)
    runs = finished_keys(d / RUNS)
    allruns = read_jsonl(d / RUNS)
    rows = curves(d)
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=["model", "dtype", "side", "mode", "half_roundings", "seed", "step", "train", "val"])
    w.writeheader()
    for r in rows:
        w.writerow({k: r[k] for k in w.fieldnames})
    write_text_atomic(d / "method_a.csv", buf.getvalue())

    configs = []
    for model in card["models"]:
        sch = schedule(card, model)
        for dtype in card["dtypes"]:
            fam, final, status = {}, {}, {}
            for side in ("torch", "cupy"):
                recs = [runs.get(f"{model}/{dtype}/{side}/{s}") for s in card["method_a"]["seeds"]]
                status[side] = {str(s): (rec["status"] if rec else "missing")
                                for s, rec in zip(card["method_a"]["seeds"], recs)}
                fam[side] = {}
                for s, rec in zip(card["method_a"]["seeds"], recs):
                    if rec and rec["status"] == "ok":
                        ev = read_metrics(d / rec["metrics"])["eval"]
                        fam[side][s] = {k: v[1] for k, v in ev.items()}
                last = sch["steps"] - sch["steps"] % sch["eval_interval"]
                final[side] = {**stats([c.get(last) for c in fam[side].values()]), "step": last}
            oom = [f"{side} seed {s}" for side in status for s, st in status[side].items() if st == "oom"]
            missing = [f"{side} seed {s}" for side in status for s, st in status[side].items() if st == "missing"]
            v = verdict(fam["torch"], fam["cupy"], card["method_a"]["judge_from"])
            if oom:
                v["passed"], v["reason"] = None, f"out of memory: {', '.join(oom)} (amendment 8): no verdict"
            elif missing:
                v["passed"], v["reason"] = None, f"runs missing: {', '.join(missing)}: no verdict yet"
            configs.append({"model": model, "dtype": dtype, "torch_mode": card["method_a"]["torch_mode"],
                            "cupy_half_roundings": dtype != "float32", "seeds": card["method_a"]["seeds"],
                            **sch, "runs": status, "verdict": v, "final_val": final})
    judged = [c["verdict"]["passed"] for c in configs]
    summary = {
        "stage": STAGE,
        "rule": "§7 A: at every evaluation from judge_from on, |median_torch - median_cupy| <= max(range_torch, range_cupy)"
                " of the validation loss over the seeds; one seed a side: read, no verdict (amendment 7.1)",
        "passed": (None if any(p is None for p in judged) else all(judged)) if judged else None,
        "configs": configs,
        "runs": {"finished": len(runs), "planned": len(plan(card)), "records": len(allruns)},
        "wall_s": round(sum(r.get("wall_s") or 0 for r in runs.values()), 1),
        **conditions(d),
    }
    return write_summary(d, summary, lambda: plot(d, rows, card))


def write_summary(d: Path, summary: dict, draw) -> dict:
    """summary.json first, then the stage's plot: a plot that fails records why and never loses the numbers."""
    write_json_atomic(d / "summary.json", summary)
    try:
        draw()
    except Exception as e:  # noqa: BLE001
        summary["plot_error"] = repr(e)
        write_json_atomic(d / "summary.json", summary)
    return summary


def plot(results_dir, rows=None, card=None):
    """method_a.png: every validation curve, both sides, all seeds, one panel per model and type."""
    import matplotlib
    if "ipykernel" not in sys.modules:
        matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    d = Path(results_dir)
    card = card or load_dir_card(d)
    rows = rows if rows is not None else curves(d)
    panels = [(m, t) for m in card["models"] for t in card["dtypes"]]
    fig, axes = plt.subplots(1, len(panels), figsize=(5.5 * len(panels), 4), squeeze=False)
    colors = {"torch": "tab:blue", "cupy": "tab:orange"}
    for ax, (m, t) in zip(axes[0], panels):
        for side in ("torch", "cupy"):
            seeds = sorted({r["seed"] for r in rows if (r["model"], r["dtype"], r["side"]) == (m, t, side)})
            for i, s in enumerate(seeds):
                pts = [(r["step"], r["val"]) for r in rows if (r["model"], r["dtype"], r["side"], r["seed"]) == (m, t, side, s)]
                if pts:
                    xs, ys = zip(*pts)
                    ax.plot(xs, ys, color=colors[side], alpha=0.8, lw=1.2, marker=".",
                            label=f"{side} ({len(seeds)} seeds)" if i == 0 else None)
        ax.axvline(card["method_a"]["judge_from"], color="grey", ls=":", lw=1, label="judge_from")
        ax.set_title(f"{m}, {t}")
        ax.set_xlabel("step")
        ax.set_ylabel("validation loss")
        ax.legend(fontsize=8)
    fig.suptitle("Method A: validation loss, every seed of both sides")
    fig.tight_layout()
    fig.savefig(d / "method_a.png", dpi=110)
    plt.close(fig)
    return d / "method_a.png"
