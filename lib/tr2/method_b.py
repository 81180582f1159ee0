"""Method B (docs/protocol.md, rules 50-54): one shared start, one recorded batch order, step by step.

Per model, the plan: the start (the torch side's own initialization, `--save-init` before its single step), the
batch order (seed `method_b.seed`), then from them, with dropout 0 and float32 without TF32, every step's loss: the
torch side in `method_a.torch_mode` (the checks' mode), the cupy side, nanoGPT's own train.py where `torch_loops`
lists it (two PyTorch loops: a floor), the floor runs of `method_b.floors` (tr2.floor, `PERTURBATION`) and the runs
of `method_b.also` (`ALSO`), each read against its own side's run. `verdict` (rules 51-52) and `floor_window` (J = W,
issue 11) are pure functions. Resumable (tr2.stage), also in another call that lacks the start's file (a device call's
results come back without their .npz): the start is rebuilt and checked against the digest its first build recorded.
A shared start out of memory ends its model.
"""
from __future__ import annotations

import hashlib
import math
import sys
import time
from pathlib import Path

import numpy as np

from .cards import ALSO_NAMES, FLOOR_NAMES
from . import explore
from . import explore_plots as plots
from .clock import run_logged
from .configs import RunConfig
from .data import write_batch_order
from .models import load_model
from .stage import FINISHED, RUNS, finished_keys, open_folder, run_plan
from .summary import all_passed, finish, load_dir_card, save_figure, write_csv
from .trainargs import trainer_prefix
from .trainlog import read_metrics

STAGE = "method_b"
STEP0_REL = 1e-5
STEP_REL = 1e-2
PERTURBATION = ("every weight moved by exactly one unit in the last place (float32), towards +inf or -inf "
                "at random per element (torch.nextafter; direction from a seeded torch.Generator)")
FLOORS = FLOOR_NAMES  # the card's method_b.floors chooses among them
FLOOR_BAND = 5e-3  # issue 11: W is the last step up to which every floor run stays within 0.5%
MIN_JUDGED = 50    # a W below this, where the floors cut the run short: too chaotic on the card to judge past W
# The floor runs W is read from: name -> (the table's relative-difference column, the run it needs)
FLOOR_COLUMNS = {"rerun": ("rel_none_vs_trainer", "floor-none"), "once": ("rel_once", "floor-once"),
                 "every": ("rel_every", "floor-every"), "nanogpt": ("rel_nanogpt", "nanogpt")}


# An extra run of the card's method_b.also, name -> (side, torch mode, the run it is read against): cupy-again asks
# whether the cupy side is bit-reproducible; torch-<mode> how far another PyTorch stack (the compiler's kernels,
# summing in their own order) stands from eager.
ALSO = {n: (side, None if side == "cupy" else rest, side) for n in ALSO_NAMES for side, _, rest in [n.partition("-")]}


# ------------------------------------------------------------------------------------------------------ verdict

def rel_diff(ref: float, other: float) -> float:
    """|other - ref| / |ref|; inf where either is not finite or ref is 0 and they differ."""
    if ref is None or other is None or not (math.isfinite(ref) and math.isfinite(other)):
        return math.inf
    if ref == 0.0:
        return 0.0 if other == 0.0 else math.inf
    return abs(other - ref) / abs(ref)


def _window(ref: dict, other: dict, first: int, last: int, tol: float) -> dict:
    rels = {s: rel_diff(ref.get(s), other.get(s)) for s in range(first, last + 1)}
    missing = [s for s in range(first, last + 1) if s not in ref or s not in other]
    worst = max(rels, key=lambda s: rels[s]) if rels else None
    bad = [s for s, r in rels.items() if not r <= tol]
    return {"first": first, "last": last, "tol": tol, "max_rel": rels[worst] if worst is not None else None,
            "worst_step": worst, "failed_steps": bad[:20], "n_failed": len(bad), "missing": missing[:20],
            "ok": bool(rels) and not bad}


def floor_window(floors: dict, steps: int) -> dict:
    """W, the steps method B judges (issue 11, docs/protocol.md rule 52), from the floor runs alone.

    floors: name -> {step: relative difference of that floor run from its reference}. W is the last step s
    (at most `steps`) such that every floor stays within FLOOR_BAND at each of steps 0..s; a step a floor lacks
    or a difference that is not finite ends its stretch there. A floor over the band at step 0 leaves W = 0
    (step 0 judged alone). No floor at all: W = steps, said in `no_floors`. `too_chaotic`: W below MIN_JUDGED
    where the floors, not the run's length, set it."""
    per = {}
    for name, rel in floors.items():
        over = next((st for st in range(steps + 1) if not (rel.get(st) is not None and rel[st] <= FLOOR_BAND)), None)
        per[name] = {"first_over": over, "last_within": steps if over is None else over - 1,
                     "max_rel": max((v for v in rel.values() if v is not None and math.isfinite(v)), default=None)}
    w = max(0, min((f["last_within"] for f in per.values()), default=steps))
    for f, rel in zip(per.values(), floors.values()):
        f["max_rel_to_W"] = max((rel[st] for st in range(w + 1) if rel.get(st) is not None), default=None)
    limiting = sorted(n for n, f in per.items() if f["last_within"] <= w)
    return {"W": w, "steps": steps, "band": FLOOR_BAND, "floors": per, "limited_by": limiting if w < steps else [],
            "no_floors": not floors, "too_chaotic": w < min(MIN_JUDGED, steps),
            "rule": f"W = the last step up to which every floor run stays within {FLOOR_BAND:.1%} (at most {steps})"}


def window_said(fw: dict) -> str:
    """The window rule's outcome in one sentence, for the verdict's reason and the report."""
    if fw["no_floors"]:
        return f"W = {fw['W']} (no floor run: the whole run)"
    text = f"W = {fw['W']} of {fw['steps']}" + (f", set by {', '.join(fw['limited_by'])}" if fw["limited_by"] else "")
    # the floors themselves, published with W (issue 11): each one's largest difference up to W and where it left
    # the band
    text += f"; floors (max to W, first step over {fw['band']:.1%}): " + ", ".join(
        f"{name} {'-' if f['max_rel_to_W'] is None else format(f['max_rel_to_W'], '.3g')} "
        f"({'never' if f['first_over'] is None else f['first_over']})" for name, f in fw["floors"].items())
    if fw["too_chaotic"]:
        text += (f"; W below {MIN_JUDGED}: the model is too chaotic on this card for method B to judge past "
                 f"step {fw['W']}")
    return text


def verdict(torch_losses: dict, cupy_losses: dict, steps: int, judge_steps=None) -> dict:
    """Method B (protocol rules 51-52) from the two sides' per-step losses, {step: loss}.

    Step 0 within 1e-5 relative, each of steps 1..J within 1% relative, J = judge_steps or steps.
    `passed` is the verdict under J; `full` gives the verdict over all steps 1..steps beside it.
    """
    last = steps if judge_steps is None else min(int(judge_steps), steps)
    step0 = _window(torch_losses, cupy_losses, 0, 0, STEP0_REL)
    window = _window(torch_losses, cupy_losses, 1, last, STEP_REL) if last >= 1 else {"ok": True, "last": 0, "max_rel": None}
    full = _window(torch_losses, cupy_losses, 1, steps, STEP_REL) if steps >= 1 else window
    passed = step0["ok"] and window["ok"]

    def said(w, tol):
        if w.get("max_rel") is None:
            return "nothing to judge"
        what = f"max {w['max_rel']:.3g} at step {w['worst_step']}"
        if w.get("missing"):
            what += f", {len(w['missing'])} step(s) missing"
        return what + (f" (within {tol:g})" if w["ok"] else f" (over {tol:g} at {w['n_failed']} step(s))")
    out = {"passed": passed, "reason": f"step 0: {said(step0, STEP0_REL)}; steps 1..{last}: {said(window, STEP_REL)}",
           "step0": step0, "window": window, "judge_last_step": last, "steps": steps,
           "rule": f"step 0 within {STEP0_REL:g} relative, steps 1..{last} each within {STEP_REL:.0%} relative"}
    if last < steps:
        out["reason"] += f"; steps 1..{steps}, stated beside, judging nothing (protocol rule 52): {said(full, STEP_REL)}"
        out["full"] = {**full, "passed": step0["ok"] and full["ok"],
                       "rule": f"method B as first written: steps 1..{steps} each within {STEP_REL:.0%} (protocol rule 52)"}
    return out


# -------------------------------------------------------------------------------------------------------- stage

def _trained(card: dict) -> tuple:
    """The names of the training runs of each model, in the order they run."""
    b = card["method_b"]
    return ("torch", "cupy", *(("nanogpt",) if "nanogpt" in card["torch_loops"] else ()),
            *(f"floor-{f}" for f in FLOORS if f in b["floors"]), *(f"also-{a}" for a in ALSO if a in b["also"]))


def plan(card: dict) -> list[dict]:
    return [{"key": f"{model}/{what}", "model": model, "what": what}
            for model in card["models"] for what in ("init", "order", *_trained(card))]


def _paths(d: Path, model: str) -> dict:
    base = d / "runs" / model
    return {"init": base / "init.npz", "order": base / "order.npy", "base": base,
            **{w: base / f"{w}.metrics.jsonl" for w in ("torch", "cupy", "nanogpt", *(f"floor-{f}" for f in FLOORS),
                                                          *(f"also-{a}" for a in ALSO))}}


def command(card: dict, r: dict, p: dict) -> list[str] | None:
    """The command of one piece of the plan (None for the batch order, written in this process)."""
    b, model, what = card["method_b"], r["model"], r["what"]
    mode = card["method_a"]["torch_mode"]
    start = dict(seed=b["seed"], tf32=False, dropout=0.0)  # every piece: the one start, plain float32, dropout 0
    if what == "order":
        return None
    if what == "init":  # the torch side's initialization, saved before its single step
        return trainer_prefix() + RunConfig(model, "float32", "torch", mode="eager").train_args(
            card["device"], 0, save_init=str(p["init"]), **start).to_argv()
    # the torch side and its floors in the checks' mode; nanoGPT's own train.py, launched from the card's checkout
    side, run_mode = {"cupy": ("cupy", None), "nanogpt": ("nanogpt", mode)}.get(what, ("torch", mode))
    if what.startswith("also-"):
        side, run_mode, _ = ALSO[what[len("also-"):]]
    checkout = card["nanogpt_path"] if side == "nanogpt" else None
    args = RunConfig(model, "float32", side, mode=run_mode, checkout=checkout).train_args(
        card["device"], b["steps"], init=str(p["init"]), batches=str(p["order"]), metrics=str(p[what]), **start).to_argv()
    if what.startswith("floor-"):
        return [sys.executable, "-m", "tr2.floor", "--perturb", what[len("floor-"):], "--perturb-seed", str(b["seed"])] + args
    return trainer_prefix() + args


def run_one(r: dict, card: dict, d: Path) -> dict:
    model, what = r["model"], r["what"]
    p = _paths(d, model)
    p["base"].mkdir(parents=True, exist_ok=True)
    if what == "order":
        t0 = time.monotonic()
        _write_order(card, model, p)
        res = {"status": "ok", "returncode": 0, "wall_s": round(time.monotonic() - t0, 3), "log": None,
               "reason": None, "cmd": None, "order_sha256": file_digest(p["order"])}
    elif what != "init" and (why := _restore_start(card, model, p, d)):
        res = {"status": "failed", "returncode": None, "wall_s": None, "reason": why, "cmd": None, "log": None}
    else:
        rebuilt = sorted(w for w in ("init", "order") if p.pop(f"{w}_rebuilt", False))
        p[what].unlink(missing_ok=True)  # a killed run's partial file: the piece starts over
        cmd = command(card, r, p)
        log = d / "logs" / f"{STAGE}-{model}-{what}.log"
        res = {**run_logged(cmd, log), "cmd": cmd, "log": str(log.relative_to(d))}
        if rebuilt:
            res["rebuilt"] = rebuilt
        if what == "init" and res["status"] == "ok":
            if p["init"].is_file():
                res["init_sha256"] = weights_digest(p["init"])
            else:
                res.update(status="failed", reason="the torch side wrote no --save-init file")
    rec = {**r, **res, "finished_at": time.strftime("%Y-%m-%dT%H:%M:%S")}
    if what not in ("init", "order"):
        rec["metrics"] = str(p[what].relative_to(d))
    return rec


def weights_digest(path) -> str:
    """sha256 over an .npz's arrays, names sorted (each name, dtype, shape, then its bytes): what makes two files the
    same start, whatever their zip headers."""
    h = hashlib.sha256()
    with np.load(path) as f:
        for name in sorted(f.files):
            a = np.ascontiguousarray(f[name])
            h.update(f"{name}|{a.dtype.str}|{a.shape}|".encode())
            h.update(a.tobytes())
    return h.hexdigest()


def file_digest(path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()   # the batch order: a few hundred offsets


def _write_order(card: dict, model: str, p: dict) -> None:
    cfg = load_model(model)
    write_batch_order(p["order"], cfg.dataset, cfg.block_size, cfg.batch_size, card["method_b"]["steps"],
                      card["method_b"]["seed"])


def _restore_start(card: dict, model: str, p: dict, d: Path):
    """Where a resumed stage lacks the shared start (init.npz) or the batch order (order.npy), build them again and
    check each against the digest its first build recorded; None when both hold (p then says which were rebuilt),
    else why not: the piece fails with that reason and the stage stops."""
    runs = None   # runs.jsonl is read only where a file is missing, not before every piece
    for what, digest, key in (("init", weights_digest, "init_sha256"), ("order", file_digest, "order_sha256")):
        if p[what].is_file():
            continue
        runs = finished_keys(d / RUNS) if runs is None else runs
        want = (runs.get(f"{model}/{what}") or {}).get(key)
        if not want:
            return (f"{p[what].name} is missing, and the {what} record holds no {key} to check a rebuilt one against "
                    "(a folder from before the digests): run the stage afresh")
        if what == "order":
            _write_order(card, model, p)
        else:
            log = d / "logs" / f"{STAGE}-{model}-init-rebuilt.log"
            res = run_logged(command(card, {"model": model, "what": "init"}, p), log)
            if res["status"] != "ok" or not p["init"].is_file():
                return (f"init.npz is missing, and building it again failed ({res['reason'] or res['status']}; "
                        f"see logs/{log.name})")
        got = digest(p[what])
        if got != want:
            p[what].unlink()
            return (f"{p[what].name} built again, but its sha256 {got[:16]} is not the recorded {want[:16]}: "
                    "not the one the earlier pieces ran from")
        p[f"{what}_rebuilt"] = True
    return None


def run(card: dict, results_dir=None) -> Path:
    with open_folder(STAGE, card, results_dir) as folder:
        run_plan(folder, plan(card), lambda r: run_one(r, card, folder.path), desc="method B",
                 group=lambda r: r["model"], ends_group=lambda rec: rec["what"] == "init" and rec["status"] == "oom",
                 ends_stage=lambda rec: rec["status"] not in FINISHED)
    return folder.path


def _losses(d: Path, rec) -> dict:
    if not rec or rec.get("status") != "ok" or not rec.get("metrics"):
        return {}
    return read_metrics(d / rec["metrics"])["loss"]


# method_b.csv's columns (tr2.explore reads them by these names): each run's loss under its column, and rel_<x>,
# a run's relative difference from the run it is read against: column -> (run, reference run)
LOSSES = {col: col.replace("_", "-") for col in ("torch", "cupy", "floor_none", "floor_once", "floor_every", "nanogpt")}
RELS = {"rel_cupy": ("cupy", "torch"), "rel_once": ("floor-once", "floor-none"), "rel_every": ("floor-every", "floor-none"),
        "rel_none_vs_trainer": ("floor-none", "torch"), "rel_nanogpt": ("nanogpt", "torch")}
CSV_COLUMNS = ["model", "step", "torch", "cupy", "rel_cupy", "floor_none", "floor_once", "floor_every", "rel_once",
               "rel_every", "rel_none_vs_trainer", "nanogpt", "rel_nanogpt"]  # then each extra run's two


def table(results_dir, card=None) -> list[dict]:
    """One row per model and step: every run's loss and the relative differences."""
    d = Path(results_dir)
    card = card or load_dir_card(d)
    runs = finished_keys(d / RUNS)
    also = card["method_b"]["also"]
    losses = {**LOSSES, **{a: f"also-{a}" for a in also}}
    rels = {**RELS, **{f"rel_{a}": (f"also-{a}", ALSO[a][2]) for a in also}}
    rows = []
    for model in card["models"]:
        curve = {run: _losses(d, runs.get(f"{model}/{run}")) for run in losses.values()}
        for s in range(card["method_b"]["steps"] + 1):
            row = {"model": model, "step": s, **{col: curve[run].get(s) for col, run in losses.items()}}
            for col, (run, ref) in rels.items():
                pair = curve[ref].get(s), curve[run].get(s)
                row[col] = None if None in pair else rel_diff(*pair)
            rows.append(row)
    return rows


def judged_window(card: dict, model: str, mrows: list) -> tuple:
    """(J, the floor window or None): the last judged step of `model` under the card's method_b.window. With
    floors, W of `floor_window` over the floor runs the card ran (their columns of `table`'s rows)."""
    b, steps = card["method_b"], card["method_b"]["steps"]
    if b["window"] != "floors":
        judge = b["judge_steps"].get(model)
        return (steps if judge is None else min(judge, steps)), None
    planned = set(_trained(card))
    floors = {name: {r["step"]: r[col] for r in mrows if r[col] is not None}
              for name, (col, run) in FLOOR_COLUMNS.items() if run in planned}
    fw = floor_window(floors, steps)
    return fw["W"], fw


def _stretches(rows, key, last, steps, **extra) -> dict:
    """The largest of column `key` at step 0, over the judged steps 1..last, and over all steps 1..steps."""
    return {**extra, "step0": _max_over(rows, key, 0, 0), "window": _max_over(rows, key, 1, last),
            "all_steps": _max_over(rows, key, 1, steps)}


def _max_over(rows, key, first, last):
    vals = [(r[key], r["step"]) for r in rows if first <= r["step"] <= last and r[key] is not None]
    if not vals:
        return None
    v, s = max(vals)
    return {"max_rel": v, "step": s, "first": first, "last": last}


def summarize(results_dir) -> dict:
    d = Path(results_dir)
    card = load_dir_card(d)
    runs = finished_keys(d / RUNS)
    rows = table(d, card)
    also = card["method_b"]["also"]
    write_csv(d / "method_b.csv", rows, CSV_COLUMNS + also + [f"rel_{a}" for a in also])
    steps = card["method_b"]["steps"]
    models = []
    for model in card["models"]:
        status = {w: (runs[f"{model}/{w}"]["status"] if f"{model}/{w}" in runs else "missing")
                  for w in ("init", "order", *_trained(card))}
        mrows = [r for r in rows if r["model"] == model]
        last, fw = judged_window(card, model, mrows)
        t = {r["step"]: r["torch"] for r in mrows if r["torch"] is not None}
        c = {r["step"]: r["cupy"] for r in mrows if r["cupy"] is not None}
        floors_missing = [w for w in status if (w.startswith("floor-") or w == "nanogpt") and status[w] != "ok"]
        if any(status[w] == "oom" for w in ("torch", "cupy", "init")):
            v = {"passed": None, "reason": "out of memory (protocol rule 8): no verdict; see runs"}
        elif status["torch"] != "ok" or status["cupy"] != "ok":
            v = {"passed": None, "reason": "runs missing: no verdict yet"}
        elif fw is not None and floors_missing:  # W is read from every floor run: none may be missing
            v = {"passed": None, "reason": f"floor runs not finished ({', '.join(floors_missing)}): no window W, no verdict"}
        else:
            v = verdict(t, c, steps, last)
            if fw is not None:
                v.update(reason=f"{window_said(fw)}; {v['reason']}", window_rule=fw)
        models.append({
            "model": model, "runs": status, "verdict": v, "judge_last_step": last, "steps": steps,
            "window": fw,  # issue 11's rule (method_b.window: floors): W, the floors' stretches; None: judge_steps
            "nanogpt": _stretches(mrows, "rel_nanogpt", last, steps, against="torch") if "nanogpt" in status else None,
            "torch_mode": card["method_a"]["torch_mode"], "seed": card["method_b"]["seed"],
            "cupy": _stretches(mrows, "rel_cupy", last, steps),
            "noise_floor": {f: _stretches(mrows, f"rel_{f}", last, steps) for f in ("once", "every")},
            "floor_copy_vs_trainer": _max_over(mrows, "rel_none_vs_trainer", 0, steps),
            "also": {a: _stretches(mrows, f"rel_{a}", last, steps, against=ALSO[a][2]) for a in also},
            "final_loss": {"torch": t.get(steps), "cupy": c.get(steps)},
        })
    judged = [m["verdict"].get("passed") for m in models]
    summary = {
        "stage": STAGE,
        "rule": f"protocol rules 50-52: same start (torch side's init), same recorded batches, dropout 0, float32 without TF32; "
                f"step 0 within {STEP0_REL:g} relative, each of steps 1..J within {STEP_REL:.0%} relative to the torch "
                f"side's loss, J = " + (f"W, the last step every floor run stays within {FLOOR_BAND:.1%} (issue 11)"
                                         if card["method_b"]["window"] == "floors" else
                                         "method_b.judge_steps[model] or all steps (protocol rule 52)"),
        "perturbation": PERTURBATION,
        "noise_floor_runs": "the torch side's loop (python -m tr2.floor) unperturbed, perturbed once at the start, "
                            "and perturbed after every optimizer step; differences relative to the unperturbed run",
        "floors": card["method_b"]["floors"],
        "also_runs": {a: f"the {ALSO[a][0]} side{' in mode ' + ALSO[a][1] if ALSO[a][1] else ''} from the same start "
                         f"and batches, set against the stage's {ALSO[a][2]} run" for a in card["method_b"]["also"]},
        "passed": all_passed(judged),
        "models": models,
    }
    lines = [(f"{STEP_REL:.0%} (steps 1..J)", STEP_REL), (f"{STEP0_REL:g} (step 0)", STEP0_REL)]
    if card["method_b"]["window"] == "floors":
        lines.append((f"{FLOOR_BAND:.1%}: the floors' band for W", FLOOR_BAND))
    return finish(d, summary, runs.values(), lambda: save_figure(
        plots.method_b(explore.curves_b(d), explore.verdicts_b(d), lines), d / "method_b.png",
        "Method B: both sides' loss from one start and one batch order\n(float32 without TF32, dropout 0)"))
