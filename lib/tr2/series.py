"""The series (docs/protocol.md, rules 8, 10-16 and 20-22): step times of every configuration, in rounds.

Round 0 runs every configuration once to fill the compile caches and is discarded; timed round r runs them in the
card's order rotated to start at configuration r mod n, so that heat and drift touch every configuration alike. Each
run is a fresh `python -m tr2.train` (evaluation off) under the outside clock (tr2.clock), on an idle GPU, sampled;
the cupy side's own reading must agree with the clock within 1% or the run is void. A run that is not ok ends its
configuration and the series goes on (rule 8). Resumable (tr2.stage): a kill loses at most the run in flight.
"""
from __future__ import annotations

import contextlib
import datetime
import json
import os
import statistics
import time
from pathlib import Path
from typing import Callable, Optional

from . import Tr2Error, configs, explore, retry
from . import explore_plots as plots
from .cards import validate_card
from .clock import run_clocked
from .configs import RunConfig, compile_caches
from .results import read_json, read_jsonl, write_json_atomic, write_text_atomic
from .stage import open_folder, run_plan
from .summary import finish, load_dir_card, save_figure, stats, write_csv
from .sysinfo import GpuSampler
from .trainargs import trainer_prefix
from .trainlog import parse_iter

STAGE = "series"
OWN_TOLERANCE = 0.01  # the cupy side's own reading must agree with the clock within 1%
LEVEL_RATIO = 1.05  # level: our median less than 5% above PyTorch's
IDLE_WAIT_S = 120.0  # how long a run waits for the card to be free before the stage stops


# ---------------------------------------------------------------------------------------------- plan

def configurations(card: dict) -> list[RunConfig]:
    """Every configuration of the card in its order (tr2.configs), nanoGPT's loop where the card's torch_loops lists it."""
    return configs.configurations(card, nanogpt=True)


def rotation(n: int, r: int) -> list[int]:
    """The order of round r over n configurations: starts at configuration r mod n."""
    k = r % n
    return list(range(k, n)) + list(range(k))


def plan(card: dict) -> list[tuple[int, dict]]:
    """(round, configuration) in running order: round 0 discarded, then the timed rounds 1..R."""
    confs = configurations(card)
    return [(r, confs[i]) for r in range(card["series"]["rounds"] + 1) for i in rotation(len(confs), r)]


def trainer_command(config: RunConfig, card: dict) -> list[str]:
    """The trainer's command line for one run of `config` (eval off, the card's steps)."""
    return trainer_prefix() + config.train_args(card["device"], card["series"]["steps"], eval_interval=0).to_argv()


# ----------------------------------------------------------------------------------------------- run

def _counter_readings(samples: list[dict]) -> list[dict]:
    """The samples that read the card's energy counter (energy_mj, GpuSampler) and carry their time."""
    return [s for s in samples if isinstance(s.get("energy_mj"), (int, float)) and isinstance(s.get("t"), (int, float))]


def counter_watts(samples: list[dict]) -> Optional[float]:
    """Mean power between the first and the last of the samples that read the card's energy counter (energy_mj,
    GpuSampler), in watts; None with fewer than two such samples, no time between them, or a counter that did not
    move forward. NVML's power reading is a recent average, sampled; the counter integrates every joule between two
    readings, so a window's energy a step is this times its step time."""
    read = _counter_readings(samples)
    if len(read) < 2:
        return None
    a, b = min(read, key=lambda s: s["t"]), max(read, key=lambda s: s["t"])
    dt, de = b["t"] - a["t"], b["energy_mj"] - a["energy_mj"]
    return de / 1000.0 / dt if dt > 0 and de > 0 else None


def counter_span(samples: list[dict]) -> Optional[float]:
    """Seconds between the first and the last of the samples that read the card's energy counter: the stretch of the
    window counter_watts averages over; None with fewer than two such samples."""
    t = [s["t"] for s in _counter_readings(samples)]
    return max(t) - min(t) if len(t) >= 2 else None


# The stretch the counter's readings must span for a window's mean power, and so its joules a step, to be compared:
# a sample pairs the counter with the host's clock to within a fraction of a second, so over about a second the mean
# is off by several percent. Seen: the char model's ~1.3 s windows sampled every second read 720 W (above the card's
# 700 W cap) and, for two programs within 1% of each other's step time, 720 and 663 W (results/h200-perf-20261204,
# call 3); the GPT-2 windows, whose readings span 4 s or more, read 678-699 W at the cap (call 2).
ENERGY_MIN_SPAN_S = 3.0
# The counter's own step: on the H200 it changed every 0.100 s under a steady load (median 0.1001 s, at most 0.1023;
# scripts/probes/energy_counter_probe.py, results/h200-perf-20261204e call 2), so a reading at either end of a window
# is up to one interval old, marked at the window's iter lines or not. Windows of 0.5 / 1 / 2 / 3 / 4 s read at their
# ends there differed from the whole run's mean power by at most 22.7 / 11.2 / 5.9 / 4.2 / 3.3%: the interval over
# the span, and about a percent of the load's own wobble. So marking the ends does not make a short window
# comparable, and ENERGY_MIN_SPAN_S stays; energy_bound states what a counted window is worth.
ENERGY_COUNTER_INTERVAL_S = 0.1


def energy_bound(span_s) -> Optional[float]:
    """The relative error of a window's mean power read from the counter over span_s seconds, from the counter's
    step alone (ENERGY_COUNTER_INTERVAL_S / span_s: the readings at the two ends each up to one interval old); None
    for an unknown or empty span. The load's wobble adds about a percent (the probe's windows, above)."""
    if not isinstance(span_s, (int, float)) or isinstance(span_s, bool) or not span_s > 0:
        return None
    return ENERGY_COUNTER_INTERVAL_S / float(span_s)


def energy_counts(span_s) -> bool:
    """Whether a window's energy reading spans enough of it to be compared (ENERGY_MIN_SPAN_S); an unknown span (a
    record from before the span was kept) does not."""
    return isinstance(span_s, (int, float)) and span_s >= ENERGY_MIN_SPAN_S


def counter_marked(samples: list[dict]) -> bool:
    """Whether the first and the last of the counter's readings are marks (GpuSampler.mark at the window's iter
    lines, window_marker): then counter_watts spans the timed window itself, not the stretch between two periodic
    samples inside it."""
    read = _counter_readings(samples)
    return len(read) >= 2 and all("mark" in s for s in (min(read, key=lambda s: s["t"]), max(read, key=lambda s: s["t"])))


def window_marker(sampler, window) -> Callable:
    """A run_clocked on_line that reads the card (GpuSampler.mark) at the iter lines of window[0] and window[1], the
    first of each: the energy counter at the timed window's own ends."""
    ends, marked = {int(window[0]), int(window[1])}, set()

    def on_line(t: float, line: str) -> None:
        it = parse_iter(line)
        if it is not None and it[0] in ends and it[0] not in marked:
            marked.add(it[0])
            sampler.mark(t, mark=it[0])
    return on_line


def _gpu_summary(samples: list[dict]) -> Optional[dict]:
    if not samples:
        return None
    lags = [s["read_lag_s"] for s in samples if "mark" in s and isinstance(s.get("read_lag_s"), (int, float))]
    return {"samples": len(samples),
            **{k: stats(s.get(k) for s in samples) for k in ("sm_mhz", "mem_mhz", "temp_c", "power_w")},
            "mem_used_bytes_max": max(s.get("mem_used_bytes", 0) for s in samples),
            "counter_w": counter_watts(samples), "counter_s": counter_span(samples),
            "counter_marked": counter_marked(samples), "mark_lag_s_max": max(lags) if lags else None}


def window_gpu(samples: list[dict], window_t) -> Optional[dict]:
    """The card's samples taken inside the timed window (window_t: the clock's stamps of its two iter lines, on the
    samples' clock), summarized as a run's `gpu`; None without a window or without a sample in it. A run's `gpu` mixes
    in its start, its compiles and the steps outside the window; this is what the card did while the step time was
    measured (on the H200 the GPT-2 steps draw the card's 700 W cap and its clock falls with what each side draws)."""
    if not window_t:
        return None
    a, b = window_t
    return _gpu_summary([s for s in samples if isinstance(s.get("t"), (int, float)) and a <= s["t"] <= b])


def _wait_for_idle_card(probe, timeout_s: float = IDLE_WAIT_S) -> None:
    t_end = time.monotonic() + timeout_s
    while True:
        pids = [p for p in probe.other_processes() if p != os.getpid()]
        if not pids:
            return
        if time.monotonic() > t_end:
            raise Tr2Error(f"card: holds other processes {pids} after {timeout_s:g} s; allowed: an idle card "
                           "(protocol rules 10-16); end them and run the stage again on the same folder")
        time.sleep(2.0)


def own_check(config: RunConfig, clock: dict) -> Optional[str]:
    """The 1% rule: why a finished run is void, or None. Applies to the cupy side only."""
    if config.side != "cupy" or clock["status"] != "ok":
        return None
    if clock.get("own_vs_clock") is None:
        return "no own reading in the window"
    if abs(clock["own_vs_clock"]) > OWN_TOLERANCE:
        return (f"own reading {clock['own_step_ms']:.4f} ms/step differs from the clock's {clock['step_ms']:.4f} "
                f"by {100 * clock['own_vs_clock']:+.2f}% (allowed: within {100 * OWN_TOLERANCE:g}%)")
    return None


def _env(d: Path) -> dict:
    """This process's environment (run_clocked adds PYTHONUNBUFFERED) with CuPy's cache where it names none."""
    # The compile caches stay with the series (the discarded run fills them): CuPy's here, Inductor's and Triton's
    # a configuration apart (run_one, configs.compile_caches).
    return {"CUPY_CACHE_DIR": str(d / "cache" / "cupy"), **os.environ}


def _filled(d: Path) -> list:
    """The configurations that ran to their end in the folder's caches (<folder>/cache, git-ignored, kept between
    pieces where it travels with the folder): a machine resuming the series without them compiles cold again."""
    return read_json(d / "cache" / "filled.json").get("configs", [])


def _kind(config_key: str, cold: bool) -> str:
    """A run's kind for the plan's estimate: its configuration, and whether it compiles into empty caches."""
    return f"{config_key} ({'cold compile' if cold else 'caches warm'})"


def record_kind(rec: dict) -> str:
    """The kind of run a record measured (older records, without cold_compile: round 0 compiled cold)."""
    return _kind(rec["config"], rec.get("cold_compile", rec.get("round") == 0))


def run_one(r: int, config: RunConfig, card: dict, d: Path, trainer: Callable = trainer_command, env=None) -> dict:
    """One run under the clock, with the card sampled; returns its record (not yet appended). `cold_compile`: the
    caches held no finished run of its configuration (round 0's discarded run, or the first after a resume
    without them)."""
    s = card["series"]
    filled = _filled(d)
    name = f"r{r}-{config.slug}"
    log = d / "logs" / f"{name}.log"
    cmd = trainer(config, card)
    sampler = GpuSampler(interval=s["sample_interval_s"]) if card["device"] == "cuda" else None
    if sampler is not None and sampler.available:
        _wait_for_idle_card(sampler)
    else:
        sampler = None
    started = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
    with sampler or contextlib.nullcontext():
        clock = run_clocked(cmd, log, env={**(os.environ if env is None else env), **compile_caches(config.slug, d / "cache")},
                            timeout_s=s["timeout_s"], window=tuple(s["window"]),
                            on_line=window_marker(sampler, s["window"]) if sampler is not None else None)
    samples = sampler.samples if sampler is not None else []
    if sampler is not None:
        write_text_atomic(d / "logs" / f"{name}.gpu.jsonl", "".join(json.dumps(x) + "\n" for x in samples))
    void = own_check(config, clock)
    if clock["status"] == "ok" and config.key not in filled:
        write_json_atomic(d / "cache" / "filled.json", {"configs": filled + [config.key]})
    return {
        "round": r, "warm": r == 0, "cold_compile": config.key not in filled, "config": config.key,
        **{k: getattr(config, k) for k in ("model", "dtype", "side", "mode", "half_roundings", "cuda_graph", "build")},
        **{k: clock[k] for k in ("status", "reason", "returncode", "step_ms", "own_step_ms", "own_vs_clock", "peak_bytes",
                                 "iters", "last_step")},
        "own_compared": config.side == "cupy", "void": void, "valid": r > 0 and clock["status"] == "ok" and void is None,
        "reserved_bytes": clock.get("reserved_bytes"),   # absent from logs before both sides printed it
        "nvml_peak_bytes": max((x["mem_used_bytes"] for x in samples), default=None),
        "gpu": _gpu_summary(samples), "gpu_window": window_gpu(samples, clock.get("window_t")),
        "gpu_sampled": bool(samples), "wall_s": round(clock["wall_s"], 3),
        "log": str(log.relative_to(d)), "cmd": cmd, "started": started,
        "tail": clock["tail"] if clock["status"] != "ok" or void else None,
    }


def run(card: dict, results_dir, *, trainer: Callable = trainer_command, on_record: Callable = None,
        progress: bool = True) -> None:
    """Run (or continue) the series of `card` in `results_dir`; a failure whose cause was the machine (tr2.retry) runs
    again. `trainer(config, card) -> argv` and `on_record(record)` (after each record is appended) are for tests."""
    card = validate_card(card)
    with open_folder(STAGE, card, results_dir) as folder:
        env = _env(folder.path)
        filled = set(_filled(folder.path))

        def kind(p):  # called in running order: a configuration's first run to go compiles cold if its caches are empty
            cold = p[1].key not in filled
            filled.add(p[1].key)
            return _kind(p[1].key, cold)
        run_plan(folder, plan(card), lambda p: run_one(p[0], p[1], card, folder.path, trainer=trainer, env=env),
                 desc="series runs", key=lambda p: f"r{p[0]}/{p[1].key}", finished=lambda rec: True,
                 group=lambda p: p[1].key, ends_group=lambda rec: rec["status"] != "ok", on_record=on_record,
                 retry=retry.should_retry, note=retry.note, show=progress, kind=kind,
                 record_kind=record_kind)


# ------------------------------------------------------------------------------------------ summary

def compare(ours: list, theirs: dict) -> dict:
    """The verdict rule (protocol rules 20-21) on step times in ms.

    ours: our valid timed runs. theirs: PyTorch mode -> its valid timed runs (empty or None: the mode
    has no time, e.g. it ran out of memory). The comparison is against the mode with the lowest median
    among those with times. faster: our slowest run is faster than that mode's fastest run; level: not
    faster and our median less than 5% above its median; slower: 5% or more above.
    """
    ran = {m: list(t) for m, t in theirs.items() if t}
    out = {"verdict": None, "mode": None, "ratio": None, "ours": _range(ours), "theirs": None,
           "modes_without_time": [m for m, t in theirs.items() if not t]}
    if not ours or not ran:
        out["reason"] = "our side has no time" if not ours else "no PyTorch mode has a time"
        return out
    mode = min(ran, key=lambda m: statistics.median(ran[m]))
    t = ran[mode]
    ratio = statistics.median(ours) / statistics.median(t)
    v = "faster" if max(ours) < min(t) else "level" if ratio < LEVEL_RATIO else "slower"
    out.update(verdict=v, mode=mode, ratio=ratio, theirs=_range(t), reason=None)
    return out


def _range(times) -> Optional[dict]:
    if not times:
        return None
    return {"runs": len(times), "median": statistics.median(times), "fastest": min(times), "slowest": max(times)}


def config_summary(config: RunConfig, recs: list[dict], rounds: int) -> dict:
    """One configuration's row: status, median and range of its valid timed runs, memory, own reading."""
    recs = sorted(recs, key=lambda x: x["round"])
    timed = [x for x in recs if not x["warm"]]
    bad = next((x for x in recs if x["status"] == "oom"), None) or next((x for x in recs if x["status"] in retry.FAILED), None)
    valid = [x for x in timed if x["valid"]]
    times = [x["step_ms"] for x in valid]
    row = config.as_record()
    row.update(config=config.key, planned=rounds, runs=len(times), void=sum(1 for x in timed if x.get("void")),
               status="ok", reason=None, run_times_ms=times)
    if bad is not None:
        where = "warm run" if bad["warm"] else f"round {bad['round']}"
        row.update(status=bad["status"], reason=f"{where}: {bad['reason']}", log=bad["log"])
        times = []  # protocol rule 8: a configuration out of memory (or failed) has no time
    elif len(timed) < rounds:
        row.update(status="incomplete", reason=f"{len(timed)} of {rounds} timed runs done")
    elif row["void"]:
        row.update(status="void", reason="; ".join(f"round {x['round']}: {x['void']}" for x in timed if x.get("void")))
    rng = _range(times)
    row.update(median_ms=rng and rng["median"], fastest_ms=rng and rng["fastest"], slowest_ms=rng and rng["slowest"],
               times_ms=times)
    owns = [x["own_step_ms"] for x in valid if x.get("own_step_ms") is not None]
    row["own_median_ms"] = statistics.median(owns) if owns else None
    row["own_vs_clock_max"] = max((x["own_vs_clock"] for x in timed if x.get("own_vs_clock") is not None), key=abs,
                                  default=None)
    for k in ("peak_bytes", "nvml_peak_bytes"):
        row[k] = max((x[k] for x in timed if x.get(k) is not None), default=None)
    return row


def verdicts(card: dict, rows: dict) -> list[dict]:
    """Per model, dtype and cupy build, the verdict against PyTorch's fastest mode that ran."""
    out = []
    for model in card["models"]:
        for dtype in card["dtypes"]:
            # every PyTorch loop of the card in every mode: the verdict takes the fastest, whichever loop it is
            # (docs/protocol.md, rule 20); our torch loop's modes keep their plain names, nanoGPT's are nanogpt-<mode>
            torch_rows = {(m if lp == "torch" else f"{lp}-{m}"): rows[f"{model}/{dtype}/{lp}-{m}"]
                          for lp in card["torch_loops"] for m in card["torch_modes"]}
            for hr in configs.cupy_builds(card, dtype):  # the primary build: the one the verdict compares
                build, primary = RunConfig(model, dtype, "cupy", half_roundings=hr).build, hr == configs.compared_build(card, dtype)
                ours = rows[f"{model}/{dtype}/{build}"]
                res = compare(ours["times_ms"], {m: r["times_ms"] for m, r in torch_rows.items()})
                notes = []
                oom_modes = [m for m, r in torch_rows.items() if r["status"] == "oom"]
                if oom_modes:
                    notes.append("out of memory: " + ", ".join(torch_rows[m]["build"] for m in oom_modes))
                failed = [f"{r['build']} {r['status']} ({r['reason']})" for r in [ours, *torch_rows.values()]
                          if r["status"] in retry.FAILED]
                incomplete = [r["config"] for r in [ours, *torch_rows.values()] if r["status"] in ("incomplete", "void")]
                verdict, reason = res["verdict"], res.get("reason")
                if ours["status"] == "oom":
                    verdict, reason = None, f"{build} ran out of memory: no time, no verdict (a deficit)"
                if failed:
                    verdict, reason = None, "failed: " + "; ".join(failed)
                if incomplete and verdict is not None:
                    notes.append("incomplete or void runs: " + ", ".join(incomplete))
                best = torch_rows.get(res["mode"], {})  # the PyTorch row compared with, where one is
                out.append({
                    "model": model, "dtype": dtype, "build": build, "primary": primary, "verdict": verdict,
                    "reason": reason, "torch_mode": best.get("mode"), "torch_loop": best.get("side"),
                    "torch_build": best.get("build"), "ratio": res["ratio"],
                    "ours": res["ours"], "theirs": res["theirs"], "oom_modes": oom_modes,
                    "modes_without_time": res["modes_without_time"], "complete": not incomplete and not failed,
                    "notes": notes,
                })
    return out


CSV_COLUMNS = ["config", "model", "dtype", "side", "build", "mode", "half_roundings", "cuda_graph", "status", "runs", "planned",
               "void", "median_ms", "fastest_ms", "slowest_ms", "own_median_ms", "own_vs_clock_max", "peak_bytes",
               "nvml_peak_bytes", "reason"]
VERDICT_COLUMNS = ["model", "dtype", "build", "primary", "verdict", "ratio", "torch_mode", "torch_loop", "ours_median_ms",
                   "ours_fastest_ms", "ours_slowest_ms", "torch_median_ms", "torch_fastest_ms", "torch_slowest_ms",
                   "oom_modes", "complete", "reason"]


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
    card = load_dir_card(d)
    # a retried failure (tr2.retry) stays in runs.jsonl before the record of its rerun: the last one counts
    records = retry.drop_retried(read_jsonl(d / "runs.jsonl"), lambda r: (r.get("round"), r.get("config")))
    rounds = card["series"]["rounds"]
    rows = {c.key: config_summary(c, [x for x in records if x["config"] == c.key], rounds) for c in configurations(card)}
    vs = verdicts(card, rows)
    started = [x["started"] for x in records if x.get("started")]
    write_csv(d / "series.csv", list(rows.values()), CSV_COLUMNS)
    write_csv(d / "verdicts.csv", [_verdict_row(v) for v in vs], VERDICT_COLUMNS)
    summary = {"stage": STAGE, "complete": all(r["status"] in ("ok", "oom") for r in rows.values()),
               "configurations": list(rows.values()), "verdicts": vs}
    return finish(d, summary, records, lambda: save_figure(
        plots.step_time_boxes(explore.runs(d)), d / "series.png", f"Card {card['card']}: ms per step by the outside clock"),
        rounds=rounds, steps=card["series"]["steps"], window=card["series"]["window"],
        clock="outside clock (tr2.clock): time from the iter line of window[0] to that of window[1], divided by "
              "the steps between",
        first_run=min(started) if started else None, last_run=max(started) if started else None,
        runs_recorded=len(records), runs_planned=len(plan(card)), logs="logs/",
        cold_timed_runs=[f"r{x['round']}/{x['config']}" for x in records if x["round"] and x.get("cold_compile")],
        **machines_of(read_jsonl(d / "sessions.jsonl"), records))


def machines_of(sessions: list, records: list) -> dict:
    """Which machines the series' runs ran on (each by its session's GPUs, explore.run_machine): `machines`, how many
    (None where the sessions did not record theirs), and `rounds_across_machines`, the timed rounds whose runs ran on
    more than one machine (clocks are not locked and machines differ, so a round split so compares across them; the
    verdict's medians are over rounds)."""
    per_round: dict = {}
    for x in records:
        m = explore.run_machine(sessions, x.get("started"))
        if m is not None and x.get("round"):
            per_round.setdefault(x["round"], set()).add(m)
    return {"machines": explore.machine_count(sessions),
            "rounds_across_machines": sorted(r for r, ms in per_round.items() if len(ms) > 1)}
