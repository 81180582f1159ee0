"""The series (protocol §5, amendments 1, 5 and 8): step times of every configuration, in rounds.

A configuration is one side in one element type of one model: PyTorch in each mode of the card, and
the cupy side, built with and without the half roundings in the half types (once in float32). Each
configuration runs once, discarded (round 0, the warm round: it fills NVRTC's and Inductor's
caches), then once in each of the card's timed rounds 1..R. Round r runs every configuration, in the
card's order rotated to start at configuration r mod n, so heat and drift touch every configuration
alike. Each run is a fresh process of `python -m tr2.train` under the outside clock (tr2.clock),
trained with evaluation off.

Rules applied per run:
- before it, the card must hold no other process (NVML; not checked on a CPU card);
- during it, the card's clocks, temperature, power and memory are sampled every sample_interval_s;
- the cupy side's own reading must agree with the clock within 1%, or the run is void (PyTorch's own
  reading is recorded, never compared: protocol §5);
- a run out of memory is recorded, its configuration runs no further, and the series goes on
  (amendment 8); a run that fails in any other way (exit code, timeout, no window) is recorded with
  its log tail and its configuration runs no further either; the series goes on, and the summary
  gives that model and element type no verdict (amendment 8.4: such a failure is not a result).

Resumable: `runs.jsonl` holds one record per finished run, appended and synced; the plan is a
deterministic list computed from the card, a run is named by (round, configuration), and running the
stage again on the same folder continues from the first run it does not hold. A kill loses at most
the run in flight.
"""
from __future__ import annotations

import csv
import datetime
import fcntl
import io
import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Callable, Optional

import yaml

from . import Tr2Error, retry
from .cards import dump_card, held_card_difference, validate_card
from .clock import run_clocked
from .results import append_jsonl, read_jsonl, write_json_atomic, write_text_atomic

STAGE = "series"
OWN_TOLERANCE = 0.01  # the cupy side's own reading must agree with the clock within 1%
LEVEL_RATIO = 1.05  # level: our median less than 5% above PyTorch's
IDLE_WAIT_S = 120.0  # how long a run waits for the card to be free before the stage stops
FAILED = ("failed", "timeout", "no-window")


# ---------------------------------------------------------------------------------------------- plan

def configurations(card: dict) -> list[dict]:
    """Every configuration of the card, in the card's order: per model, per dtype, torch modes then cupy builds."""
    out = []
    for model in card["models"]:
        for dtype in card["dtypes"]:
            for mode in card["torch_modes"]:
                out.append(_config(model, dtype, "torch", mode=mode))
            if dtype == "float32":
                out.append(_config(model, dtype, "cupy", half_roundings=False))
            else:
                for hr in card["half_roundings"]:
                    out.append(_config(model, dtype, "cupy", half_roundings=hr))
    return out


def _config(model: str, dtype: str, side: str, mode=None, half_roundings=False) -> dict:
    build = f"torch-{mode}" if side == "torch" else ("cupy-hr" if half_roundings else "cupy")
    return {"id": f"{model}/{dtype}/{build}", "model": model, "dtype": dtype, "side": side,
            "mode": mode, "half_roundings": bool(half_roundings), "build": build}


def rotation(n: int, r: int) -> list[int]:
    """The order of round r over n configurations: starts at configuration r mod n."""
    k = r % n
    return list(range(k, n)) + list(range(k))


def plan(card: dict) -> list[tuple[int, dict]]:
    """(round, configuration) in running order: round 0 discarded, then the timed rounds 1..R."""
    confs = configurations(card)
    return [(r, confs[i]) for r in range(card["series"]["rounds"] + 1) for i in rotation(len(confs), r)]


def trainer_command(config: dict, card: dict) -> list[str]:
    """The trainer's command line for one run of `config` (eval off, the card's steps)."""
    cmd = [sys.executable, "-u", "-m", "tr2.train", "--side", config["side"], "--model", config["model"],
           "--dtype", config["dtype"], "--device", card["device"], "--steps", str(card["series"]["steps"]),
           "--eval-interval", "0", "--log-interval", "10"]
    if config["side"] == "torch":
        cmd += ["--mode", config["mode"]]
    if config["half_roundings"]:
        cmd += ["--half-roundings"]
    return cmd


def run_name(r: int, config: dict) -> str:
    return f"r{r}-{config['id'].replace('/', '_')}"


# ----------------------------------------------------------------------------------------------- run

def _repair_jsonl(path: Path) -> None:
    """Cut a torn last line (a kill mid-append) so the next record starts on a line of its own."""
    if not path.is_file():
        return
    data = path.read_bytes()
    if data and not data.endswith(b"\n"):
        cut = data.rfind(b"\n") + 1
        with open(path, "r+b") as f:
            f.truncate(cut)
            f.flush()
            os.fsync(f.fileno())


def _ensure_card(d: Path, card: dict) -> None:
    differs = held_card_difference(d, card)
    if differs:
        key, there, here = differs
        raise Tr2Error(f"results_dir: {str(d)!r} holds another card (key {key!r} differs: "
                       f"{there!r} there, {here!r} here); allowed: the card it was started with")
    if not (d / "card.yaml").is_file():
        write_text_atomic(d / "card.yaml", dump_card(card))


def _machine_info() -> dict:
    from .sysinfo import machine_info
    try:
        return machine_info()
    except Exception as e:  # a machine record is wanted, never worth a stopped series
        return {"error": str(e)}


def _stats(values):
    values = [v for v in values if v is not None]
    if not values:
        return None
    return {"min": min(values), "median": statistics.median(values), "max": max(values)}


def _gpu_summary(samples: list[dict]) -> Optional[dict]:
    if not samples:
        return None
    return {"samples": len(samples),
            "sm_mhz": _stats([s.get("sm_mhz") for s in samples]),
            "mem_mhz": _stats([s.get("mem_mhz") for s in samples]),
            "temp_c": _stats([s.get("temp_c") for s in samples]),
            "power_w": _stats([s.get("power_w") for s in samples]),
            "mem_used_bytes_max": max(s.get("mem_used_bytes", 0) for s in samples)}


def _wait_for_idle_card(probe, timeout_s: float = IDLE_WAIT_S) -> None:
    t_end = time.monotonic() + timeout_s
    while True:
        pids = [p for p in probe.other_processes() if p != os.getpid()]
        if not pids:
            return
        if time.monotonic() > t_end:
            raise Tr2Error(f"card: holds other processes {pids} after {timeout_s:g} s; allowed: an idle card "
                           "(protocol §5); end them and run the stage again on the same folder")
        time.sleep(2.0)


def own_check(config: dict, clock: dict) -> Optional[str]:
    """The 1% rule: why a finished run is void, or None. Applies to the cupy side only."""
    if config["side"] != "cupy" or clock["status"] != "ok":
        return None
    if clock.get("own_vs_clock") is None:
        return "no own reading in the window"
    if abs(clock["own_vs_clock"]) > OWN_TOLERANCE:
        return (f"own reading {clock['own_step_ms']:.4f} ms/step differs from the clock's {clock['step_ms']:.4f} "
                f"by {100 * clock['own_vs_clock']:+.2f}% (allowed: within {100 * OWN_TOLERANCE:g}%)")
    return None


def _env(d: Path) -> dict:
    env = dict(os.environ)
    env["PYTHONUNBUFFERED"] = "1"
    cache = d / "cache"
    # Inductor's, Triton's and NVRTC's caches stay with the series: the discarded run fills them.
    env.setdefault("TORCHINDUCTOR_CACHE_DIR", str(cache / "inductor"))
    env.setdefault("TRITON_CACHE_DIR", str(cache / "triton"))
    env.setdefault("CUPY_CACHE_DIR", str(cache / "cupy"))
    return env


def run_one(r: int, config: dict, card: dict, d: Path, trainer: Callable = trainer_command, env=None) -> dict:
    """One run under the clock, with the card sampled; returns its record (not yet appended)."""
    s = card["series"]
    name = run_name(r, config)
    log = d / "logs" / f"{name}.log"
    cmd = trainer(config, card)
    sampler = None
    if card["device"] == "cuda":
        from .sysinfo import GpuSampler
        sampler = GpuSampler(interval=s["sample_interval_s"])
        if sampler.available:
            _wait_for_idle_card(sampler)
    started = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
    if sampler is not None and sampler.available:
        with sampler:
            clock = run_clocked(cmd, log, env=env, timeout_s=s["timeout_s"], window=tuple(s["window"]))
        samples = sampler.samples
        write_text_atomic(d / "logs" / f"{name}.gpu.jsonl", "".join(json.dumps(x) + "\n" for x in samples))
    else:
        clock = run_clocked(cmd, log, env=env, timeout_s=s["timeout_s"], window=tuple(s["window"]))
        samples = []
    void = own_check(config, clock)
    rec = {
        "round": r, "warm": r == 0, "config": config["id"], "model": config["model"], "dtype": config["dtype"],
        "side": config["side"], "mode": config["mode"], "half_roundings": config["half_roundings"],
        "build": config["build"], "status": clock["status"], "reason": clock["reason"],
        "returncode": clock["returncode"], "step_ms": clock["step_ms"], "own_step_ms": clock["own_step_ms"],
        "own_vs_clock": clock["own_vs_clock"], "own_compared": config["side"] == "cupy",
        "void": void, "valid": r > 0 and clock["status"] == "ok" and void is None,
        "peak_bytes": clock["peak_bytes"],
        "nvml_peak_bytes": max((x["mem_used_bytes"] for x in samples), default=None),
        "gpu": _gpu_summary(samples), "gpu_sampled": bool(samples),
        "wall_s": round(clock["wall_s"], 3), "iters": clock["iters"], "last_step": clock["last_step"],
        "log": str(log.relative_to(d)), "cmd": cmd, "started": started,
        "tail": clock["tail"] if clock["status"] != "ok" or void else None,
    }
    return rec


def _lock(d: Path):
    f = open(d / ".series.lock", "w")
    try:
        fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        f.close()
        raise Tr2Error(f"results_dir: {str(d)!r} is being worked on by another process; allowed: one at a time") from None
    return f


def run(card: dict, results_dir, *, trainer: Callable = trainer_command, on_record: Callable = None,
        progress: bool = True) -> None:
    """Run (or continue) the series of `card` in `results_dir`. `trainer(config, card) -> argv` and
    `on_record(record)` (called after each record is safely appended) are for tests."""
    card = validate_card(card)
    d = Path(results_dir)
    (d / "logs").mkdir(parents=True, exist_ok=True)
    lock = _lock(d)
    try:
        _ensure_card(d, card)
        info = _machine_info()
        if not (d / "machine.json").is_file():
            write_json_atomic(d / "machine.json", info)
        append_jsonl(d / "sessions.jsonl", {"stage": STAGE, "started": info.get("date"), "host": info.get("host"),
                                            "commit": info.get("commit"), "dirty": info.get("dirty")})
        runs_path = d / "runs.jsonl"
        _repair_jsonl(runs_path)
        records = retry.drop_retried(read_jsonl(runs_path), _key)
        again = {_key(x): retry.note(x) for x in records if retry.should_retry(x)}  # tr2.retry: the cause is gone
        records = [x for x in records if _key(x) not in again]
        done = {(x["round"], x["config"]) for x in records}
        stopped = {x["config"] for x in records if x["status"] == "oom" or x["status"] in FAILED}
        todo = plan(card)
        env = _env(d)
        before = {(r, c["id"]) for r, c in todo if (r, c["id"]) in done or c["id"] in stopped}
        bar = None
        if progress:
            from tqdm import tqdm
            bar = tqdm(total=len(todo), initial=len(before), desc="series runs", unit="run", file=sys.stderr,
                       dynamic_ncols=False, mininterval=0)
        try:
            for r, config in todo:
                key = (r, config["id"])
                if key in done or config["id"] in stopped:
                    if bar is not None and key not in before:
                        bar.update(1)  # a configuration that ran out of memory (or failed) in this session
                    continue
                rec = run_one(r, config, card, d, trainer=trainer, env=env)
                if key in again:
                    rec["retried"] = again[key]
                append_jsonl(runs_path, rec)
                done.add(key)
                if rec["status"] == "oom" or rec["status"] in FAILED:
                    stopped.add(config["id"])
                if bar is not None:
                    ms = f"{rec['step_ms']:.2f} ms" if rec["step_ms"] is not None else "-"
                    bar.set_postfix_str(f"last: round {r} {config['id']} {rec['status']} {ms}", refresh=False)
                    bar.update(1)
                if on_record is not None:
                    on_record(rec)
        finally:
            if bar is not None:
                bar.close()
    finally:
        lock.close()


# ------------------------------------------------------------------------------------------ summary

def compare(ours: list, theirs: dict) -> dict:
    """The verdict rule (protocol §10, amendment 1) on step times in ms.

    ours: our valid timed runs. theirs: PyTorch mode -> its valid timed runs (empty or None: the mode
    has no time, e.g. it ran out of memory). The comparison is against the mode with the lowest median
    among those with times. faster: our slowest run is faster than that mode's fastest run; level: not
    faster and our median less than 5% above its median; slower: 5% or more above.
    """
    ran = {m: list(t) for m, t in theirs.items() if t}
    out = {"verdict": None, "mode": None, "ratio": None, "ours": _range(ours), "theirs": None,
           "modes_without_time": [m for m, t in theirs.items() if not t]}
    if not ours:
        out["reason"] = "our side has no time"
        return out
    if not ran:
        out["reason"] = "no PyTorch mode has a time"
        return out
    mode = min(ran, key=lambda m: statistics.median(ran[m]))
    t = ran[mode]
    ratio = statistics.median(ours) / statistics.median(t)
    if max(ours) < min(t):
        v = "faster"
    elif ratio < LEVEL_RATIO:
        v = "level"
    else:
        v = "slower"
    out.update(verdict=v, mode=mode, ratio=ratio, theirs=_range(t), reason=None)
    return out


def _range(times) -> Optional[dict]:
    if not times:
        return None
    return {"runs": len(times), "median": statistics.median(times), "fastest": min(times), "slowest": max(times)}


def _key(record: dict) -> tuple:
    return record.get("round"), record.get("config")


def _first_records(records: list[dict]) -> list[dict]:
    seen, out = set(), []
    for x in records:
        k = (x.get("round"), x.get("config"))
        if k not in seen:
            seen.add(k)
            out.append(x)
    return out


def config_summary(config: dict, recs: list[dict], rounds: int) -> dict:
    """One configuration's row: status, median and range of its valid timed runs, memory, own reading."""
    recs = sorted(recs, key=lambda x: x["round"])
    timed = [x for x in recs if not x["warm"]]
    bad = next((x for x in recs if x["status"] == "oom"), None) or next((x for x in recs if x["status"] in FAILED), None)
    valid = [x for x in timed if x["valid"]]
    times = [x["step_ms"] for x in valid]
    row = dict(config)
    row.pop("id")
    row.update(config=config["id"], planned=rounds, runs=len(times), void=sum(1 for x in timed if x.get("void")),
               status="ok", reason=None, run_times_ms=times)
    if bad is not None:
        row["status"] = bad["status"]
        where = "warm run" if bad["warm"] else f"round {bad['round']}"
        row["reason"] = f"{where}: {bad['reason']}"
        row["log"] = bad["log"]
        times = []  # amendment 8: a configuration out of memory (or failed) has no time
    elif len(timed) < rounds:
        row["status"] = "incomplete"
        row["reason"] = f"{len(timed)} of {rounds} timed runs done"
    elif row["void"]:
        row["status"] = "void"
        row["reason"] = "; ".join(f"round {x['round']}: {x['void']}" for x in timed if x.get("void"))
    rng = _range(times)
    row.update(median_ms=rng and rng["median"], fastest_ms=rng and rng["fastest"], slowest_ms=rng and rng["slowest"],
               times_ms=times)
    owns = [x["own_step_ms"] for x in valid if x.get("own_step_ms") is not None]
    diffs = [x["own_vs_clock"] for x in timed if x.get("own_vs_clock") is not None]
    row["own_median_ms"] = statistics.median(owns) if owns else None
    row["own_vs_clock_max"] = max(diffs, key=abs) if diffs else None
    peaks = [x["peak_bytes"] for x in timed if x.get("peak_bytes") is not None]
    nvml = [x["nvml_peak_bytes"] for x in timed if x.get("nvml_peak_bytes") is not None]
    row["peak_bytes"] = max(peaks) if peaks else None
    row["nvml_peak_bytes"] = max(nvml) if nvml else None
    return row


def verdicts(card: dict, rows: dict) -> list[dict]:
    """Per model, dtype and cupy build, the verdict against PyTorch's fastest mode that ran."""
    out = []
    for model in card["models"]:
        for dtype in card["dtypes"]:
            torch_rows = {m: rows[f"{model}/{dtype}/torch-{m}"] for m in card["torch_modes"]}
            builds = ["cupy"] if dtype == "float32" else [("cupy-hr" if hr else "cupy") for hr in card["half_roundings"]]
            primary = builds[-1] if dtype == "float32" else ("cupy-hr" if "cupy-hr" in builds else builds[0])
            for build in builds:
                ours = rows[f"{model}/{dtype}/{build}"]
                res = compare(ours["times_ms"], {m: r["times_ms"] for m, r in torch_rows.items()})
                notes = []
                oom_modes = [m for m, r in torch_rows.items() if r["status"] == "oom"]
                if oom_modes:
                    notes.append("out of memory: " + ", ".join(f"torch-{m}" for m in oom_modes))
                failed = [f"torch-{m} {r['status']} ({r['reason']})" for m, r in torch_rows.items() if r["status"] in FAILED]
                if ours["status"] in FAILED:
                    failed.insert(0, f"{build} {ours['status']} ({ours['reason']})")
                incomplete = [r["config"] for r in [ours, *torch_rows.values()] if r["status"] in ("incomplete", "void")]
                verdict = res["verdict"]
                reason = res.get("reason")
                if ours["status"] == "oom":
                    verdict, reason = None, f"{build} ran out of memory: no time, no verdict (a deficit)"
                if failed:
                    verdict, reason = None, "failed: " + "; ".join(failed)
                if incomplete and verdict is not None:
                    notes.append("incomplete or void runs: " + ", ".join(incomplete))
                out.append({
                    "model": model, "dtype": dtype, "build": build, "primary": build == primary,
                    "verdict": verdict, "reason": reason, "torch_mode": res["mode"], "ratio": res["ratio"],
                    "ours": res["ours"], "theirs": res["theirs"], "oom_modes": oom_modes,
                    "modes_without_time": res["modes_without_time"], "complete": not incomplete and not failed,
                    "notes": notes,
                })
    return out


CSV_COLUMNS = ["config", "model", "dtype", "side", "build", "mode", "half_roundings", "status", "runs", "planned",
               "void", "median_ms", "fastest_ms", "slowest_ms", "own_median_ms", "own_vs_clock_max", "peak_bytes",
               "nvml_peak_bytes", "reason"]
VERDICT_COLUMNS = ["model", "dtype", "build", "primary", "verdict", "ratio", "torch_mode", "ours_median_ms",
                   "ours_fastest_ms", "ours_slowest_ms", "torch_median_ms", "torch_fastest_ms", "torch_slowest_ms",
                   "oom_modes", "complete", "reason"]


def _csv(rows: list[dict], columns: list[str]) -> str:
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=columns, extrasaction="ignore", lineterminator="\n")
    w.writeheader()
    for row in rows:
        w.writerow({k: ("" if row.get(k) is None else row.get(k)) for k in columns})
    return buf.getvalue()


def _verdict_row(v: dict) -> dict:
    o, t = v["ours"] or {}, v["theirs"] or {}
    return {**v, "ours_median_ms": o.get("median"), "ours_fastest_ms": o.get("fastest"),
            "ours_slowest_ms": o.get("slowest"), "torch_median_ms": t.get("median"),
            "torch_fastest_ms": t.get("fastest"), "torch_slowest_ms": t.get("slowest"),
            "oom_modes": " ".join(v["oom_modes"])}


def summarize(results_dir) -> dict:
    """Per configuration median and range, memory; per model and dtype the verdicts. Writes summary.json,
    series.csv, verdicts.csv and series.png in the folder, and returns the summary."""
    d = Path(results_dir)
    if not (d / "card.yaml").is_file():
        raise Tr2Error(f"results_dir: {str(d)!r} holds no card.yaml; allowed: a folder the series ran in")
    card = validate_card(yaml.safe_load((d / "card.yaml").read_text()))
    machine = json.loads((d / "machine.json").read_text()) if (d / "machine.json").is_file() else {}
    records = _first_records(retry.drop_retried(read_jsonl(d / "runs.jsonl"), _key))
    rounds = card["series"]["rounds"]
    rows = {}
    for c in configurations(card):
        rows[c["id"]] = config_summary(c, [x for x in records if x["config"] == c["id"]], rounds)
    vs = verdicts(card, rows)
    started = [x["started"] for x in records if x.get("started")]
    n_plan = len(plan(card))
    summary = {
        "stage": STAGE,
        "conditions": {
            "card": card["card"], "machine": card["machine"], "device": card["device"],
            "rounds": rounds, "steps": card["series"]["steps"], "window": card["series"]["window"],
            "clock": "outside clock (tr2.clock): time from the iter line of window[0] to that of window[1], "
                     "divided by the steps between",
            "versions": {k: machine.get(k) for k in ("python", "numpy", "torch", "torch_cuda", "cudnn", "cupy", "triton")},
            "gpus": machine.get("gpus"), "host": machine.get("host"),
            "gpu": ((machine.get("gpus") or [{}])[0].get("name") if card["device"] == "cuda" else None),
            "commit": machine.get("commit"), "dirty": machine.get("dirty"),
            "date": machine.get("date"), "first_run": min(started) if started else None,
            "last_run": max(started) if started else None,
            "runs_recorded": len(records), "runs_planned": n_plan,
            "logs": "logs/",
        },
        "complete": all(r["status"] in ("ok", "oom") for r in rows.values()),
        "configurations": list(rows.values()),
        "verdicts": vs,
    }
    write_json_atomic(d / "summary.json", summary)
    write_text_atomic(d / "series.csv", _csv(list(rows.values()), CSV_COLUMNS))
    write_text_atomic(d / "verdicts.csv", _csv([_verdict_row(v) for v in vs], VERDICT_COLUMNS))
    try:
        plot(d, card, records, rows)
    except ImportError:
        pass
    return summary


def plot(d: Path, card: dict, records: list[dict], rows: dict) -> Path:
    """series.png: per model a panel, per configuration its runs as dots and its median as a bar."""
    from matplotlib.figure import Figure
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    models = card["models"]
    confs = configurations(card)
    width = max(6.0, 0.55 * max(sum(1 for c in confs if c["model"] == m) for m in models) + 2)
    fig = Figure(figsize=(width, 3.2 * len(models)))
    FigureCanvasAgg(fig)
    axes = fig.subplots(len(models), 1, squeeze=False)[:, 0]
    for ax, model in zip(axes, models):
        cs = [c for c in confs if c["model"] == model]
        for i, c in enumerate(cs):
            row = rows[c["id"]]
            runs = [x for x in records if x["config"] == c["id"] and not x["warm"]]
            color = "tab:orange" if c["side"] == "cupy" else "tab:blue"
            ok = [x["step_ms"] for x in runs if x["valid"]]
            ax.plot([i] * len(ok), ok, "o", color=color, alpha=0.6, markersize=4)
            void = [x["step_ms"] for x in runs if x.get("void") and x["step_ms"] is not None]
            ax.plot([i] * len(void), void, "x", color="tab:red", markersize=5)
            warm = [x["step_ms"] for x in records if x["config"] == c["id"] and x["warm"] and x["step_ms"] is not None]
            ax.plot([i] * len(warm), warm, "o", markerfacecolor="none", color="grey", markersize=4)
            if row["median_ms"] is not None:
                ax.hlines(row["median_ms"], i - 0.3, i + 0.3, color=color, linewidth=2)
            if row["status"] not in ("ok",):
                ax.annotate(row["status"], (i, 0), xycoords=("data", "axes fraction"), xytext=(0, 4),
                            textcoords="offset points", ha="center", va="bottom", fontsize=7, color="tab:red",
                            rotation=90)
        ax.set_xlim(-0.6, len(cs) - 0.4)
        ax.set_xticks(range(len(cs)))
        ax.set_xticklabels([f"{c['dtype']}\n{c['build']}" for c in cs], fontsize=7)
        ax.set_ylabel("ms per step")
        ax.set_title(f"{model}, card {card['card']}: ms per step by the outside clock\n"
                     "dots: timed runs, bar: median, x: void runs, circles: discarded runs", fontsize=8)
        ax.set_ylim(bottom=0)
        ax.grid(axis="y", alpha=0.3)
    fig.tight_layout()
    path = d / "series.png"
    tmp = d / ".series.png.tmp.png"
    fig.savefig(tmp, dpi=110)
    os.replace(tmp, path)
    return path
