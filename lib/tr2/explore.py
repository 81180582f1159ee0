"""Every stage's results folder as pandas DataFrames: the one reader of what the stages write.

The stage notebooks, notebooks/explore.ipynb and the report (tr2.report) read results through this module.
It reads the files the stages write (card.yaml, machine.json, summary.json, the runs files and each stage's
CSV tables) and writes nothing. `index` lists the folders with their conditions (card, models, types,
machine, versions, commit); `select` filters that list; each table function takes such a list, one folder or a
list of folders and returns one DataFrame, a row per record, with the folder's name, card and commit in front
so that folders can be set side by side. A folder that lacks a table (a stage stopped early) adds no rows.
"""
from __future__ import annotations

import datetime
import functools
from pathlib import Path
from typing import Optional

import pandas as pd

from .results import (EXTENDED, RETIRED, STAGES, conditions, parse_folder_name, read_json, read_jsonl, read_yaml,
                      results_folders, runs_file, stage_of)
from .retry import drop_retried
from . import Tr2Error, sysinfo

FOLDER_COLUMNS = ["folder", "card", "commit"]  # in front of every table's rows


def folder_row(path, stage=None) -> dict:
    """One folder's line of the index: its stage and stamp (from its name; `stage` for a folder named
    otherwise), its conditions (tr2.results.conditions), whether it is summarized, and its path."""
    p, name = Path(path), parse_folder_name(path)
    return {"folder": p.name, "stage": name.stage if name else stage, "stamp": name.stamp if name else None,
            **conditions(p), "finished": (p / "summary.json").is_file(), "path": p}


def index(root=None) -> pd.DataFrame:
    """Every stage's results folder under root (default results/), oldest first: one row each. A root that is no
    folder is an error (an empty table would read as "nothing has run")."""
    if root is not None and not Path(root).is_dir():
        raise Tr2Error(f"root: {str(root)!r} is not a folder; allowed: a folder of results folders, such as results/")
    rows = [folder_row(p) for p in results_folders(root)]
    columns = list(folder_row(Path(), "series"))  # a row's keys, for an index of no folder too
    return pd.DataFrame(rows, columns=columns).sort_values(["stamp", "folder"], ignore_index=True)


def select(idx: pd.DataFrame, stage=None, card=None, model=None, dtype=None, commit=None) -> pd.DataFrame:
    """The folders of the index that match every filter given: stage and card by name, model and dtype
    when the card lists them, commit by prefix (a short hash matches its full one)."""
    tests = {"stage": (stage, lambda s: s == stage), "card": (card, lambda c: c == card),  # column: (filter, test)
             "models": (model, lambda ms: model in ms), "dtypes": (dtype, lambda ts: dtype in ts),
             "commit": (commit, lambda c: isinstance(c, str) and c.startswith(commit))}
    if stage is not None and stage not in STAGES:   # a misspelt stage would select nothing, silently
        raise Tr2Error(f"stage: {stage!r} is not allowed; allowed: {' | '.join(STAGES)}")
    keep = pd.Series(True, index=idx.index)
    for column, (value, test) in tests.items():
        if value is not None:
            keep &= idx[column].map(test)
    return idx[keep].reset_index(drop=True)


def summary(path) -> dict:
    """A folder's summary.json as its stage wrote it ({} before the stage summarized)."""
    return read_json(Path(path) / "summary.json")


def condition_table(path) -> pd.DataFrame:
    """What a folder's numbers carry, one value a row: its conditions, the versions, and what its stage's
    summary adds (rounds, window, steps, caches, the dates of its first and last run)."""
    own = summary(path).get("conditions") or {}
    c = {**conditions(path), **{k: v for k, v in own.items() if k not in ("versions", "gpus")}}
    c.update(c.pop("versions"))
    return pd.Series(c, dtype=object).to_frame("value")


def _folders(where, stage) -> list[dict]:
    """The index rows of one stage from an index, one folder path, or a list of paths (a path the caller names
    counts as the stage's unless its name says another stage)."""
    if isinstance(where, pd.DataFrame):
        rows = where.to_dict("records")
    else:
        rows = [folder_row(p, stage) for p in ([where] if isinstance(where, (str, Path)) else where)]
    return [r for r in rows if r["stage"] == stage]


def _gather(where, stage, read, model=None, dtype=None) -> pd.DataFrame:
    """read(path) of each folder of the stage, the folder columns in front, then the model and dtype filters."""
    parts = []
    for r in _folders(where, stage):
        df = read(Path(r["path"]))
        if df is None or df.empty:
            continue
        for i, col in enumerate(FOLDER_COLUMNS):
            df.insert(i, col, r[col])
        parts.append(df)
    if not parts:
        return pd.DataFrame(columns=FOLDER_COLUMNS)
    out = pd.concat(parts, ignore_index=True)
    for col, value in (("model", model), ("dtype", dtype)):
        if value is not None and col in out:
            out = out[out[col] == value]
    return out.reset_index(drop=True)


def _read_csv(path):
    return pd.read_csv(path) if path.is_file() and path.stat().st_size else None


def _csv_table(stage, name, doc):
    """A table function (where, model=None, dtype=None) of the stage's CSV file `name`, one per folder."""
    def table(where, model=None, dtype=None) -> pd.DataFrame:
        return _gather(where, stage, lambda path: _read_csv(path / name), model, dtype)
    table.__doc__ = doc
    return table


def _summary_rows(rows_of):
    """A reader of the rows rows_of(summary) makes of a folder's summary.json."""
    return lambda path: pd.DataFrame(rows_of(s)) if (s := summary(path)) else None


def kept_records(path, stage) -> list:
    """A folder's runs file as the tables read it: a failure retried on resume replaced by its rerun's record
    (tr2.retry), a torn last line (a kill mid-append) left out."""
    # the series' records before tr2.stage carried no key: a run is its round and configuration
    key = (lambda r: (r.get("round"), r.get("config"))) if stage == "series" else (lambda r: r.get("key"))
    return drop_retried(read_jsonl(Path(path) / runs_file(stage)), key)


def records(where, stage, model=None, dtype=None) -> pd.DataFrame:
    """Every record of each folder's runs file, as the stage appended it (kept_records). A record's own commit is
    its `run_commit` (the folder's first session's for a record from before records carried one); the `commit` in
    front stays the folder's, as in every table."""
    def read(path):
        recs = kept_records(path, stage)
        first = first_commit(path) if recs else None
        sessions = read_jsonl(Path(path) / "sessions.jsonl") if recs else []
        recs = [{**{k: v for k, v in r.items() if k != "commit"}, "run_commit": r.get("commit") or first,
                 "machine": machine_label(run_machine(sessions, r.get("started")))} for r in recs]
        return pd.DataFrame(recs) if recs else None
    return _gather(where, stage, read, model, dtype)


def machine_label(machine: Optional[tuple]) -> Optional[str]:
    """A machine (run_machine's GPUs) as a table shows it: each GPU's UUID to its first 12 characters ("GPU-32998b6d"),
    joined by "+"; "no GPU" for a machine without one; None where it was not recorded."""
    if machine is None:
        return None
    return "+".join(str(g)[:12] for g in machine) if machine else "no GPU"


def _span(r: dict) -> Optional[tuple]:
    a, b = r.get("started_unix"), r.get("ended_unix")
    if all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in (a, b)):
        return float(a), float(b)
    return None


def held_seconds(recs: list) -> float:
    """Seconds the runs held the machine: the union of the intervals [started_unix, ended_unix] of the records that
    ran beside others (run_plan's parallel), plus the wall seconds of every other record (one after another)."""
    alone = sum(float(r["wall_s"]) for r in recs if _span(r) is None and isinstance(r.get("wall_s"), (int, float)))
    union, reach = 0.0, None
    for a, b in sorted(s for s in map(_span, recs) if s is not None):
        start = a if reach is None else max(a, reach)
        union += max(b - start, 0.0)
        reach = b if reach is None else max(reach, b)
    return alone + union


def _run_records(p: Path, stage=None) -> list:
    return [r for r in read_jsonl(p / runs_file(stage or stage_of(p))) if isinstance(r, dict)]


def _retired_records(p: Path) -> list:
    return [r for r in read_jsonl(p / RETIRED) if isinstance(r, dict)]


def run_time(path, stage=None) -> dict:
    """What a folder's runs held the machine for: every record of its runs file (a failed run and a retried one
    included, as each held the machine) and of its retired.jsonl (tr2.retire: they held it too), their wall seconds
    and minutes, the retired records among them, and the calls (the lines of sessions.jsonl: one each time the stage
    started or resumed; None in folders from before it). Imports, compile caches and the stage's own notebook are
    outside the runs' wall times. Runs that shared the machine (method A's `parallel`) count once: see held_seconds."""
    p = Path(path)
    recs, retired = _run_records(p, stage), _retired_records(p)
    seconds = held_seconds(recs + retired)
    sessions = read_jsonl(p / "sessions.jsonl")
    return {"records": len(recs), "retired": len(retired), "seconds": round(seconds, 1), "minutes": round(seconds / 60, 1),
            "calls": len(sessions) if (p / "sessions.jsonl").is_file() else None, "machines": machine_count(sessions),
            "last_end": last_end(recs + retired)}


def log_lines(path) -> Optional[list]:
    """A committed text file's lines (a GPU call's log the report cites beside its folders: params/evidence), bytes
    that are not UTF-8 replaced; None where it cannot be read."""
    try:
        return Path(path).read_bytes().decode("utf-8", "replace").splitlines()
    except OSError:
        return None


def last_end(records: list) -> Optional[str]:
    """When the last of these runs ended (ISO, UTC): each record's `ended` (tr2.stage, since 2026-12-05), else its
    `ended_unix` (parallel runs), else its `started` plus `wall_s` (the series'); None where no record carries a time
    (then a folder's end is not known from its files: git keeps no modification times)."""
    ends = []
    for r in records:
        try:
            if r.get("ended"):
                ends.append(datetime.datetime.fromisoformat(r["ended"]))
            elif r.get("ended_unix") is not None:
                ends.append(datetime.datetime.fromtimestamp(float(r["ended_unix"]), datetime.timezone.utc))
            elif r.get("started") and r.get("wall_s") is not None:
                ends.append(datetime.datetime.fromisoformat(r["started"]) + datetime.timedelta(seconds=float(r["wall_s"])))
        except (TypeError, ValueError):   # a damaged time: that record says nothing of the end
            continue
    ends = [e if e.tzinfo else e.replace(tzinfo=datetime.timezone.utc) for e in ends]
    return max(ends).astimezone(datetime.timezone.utc).isoformat(timespec="seconds") if ends else None


def session_machine(session: dict) -> Optional[tuple]:
    """A session's machine: the sorted UUIDs of its GPUs (() on a machine without one), None where its line predates
    the record (sessions.jsonl lines without "gpus")."""
    gpus = session.get("gpus")
    return None if gpus is None else tuple(sorted(str(g) for g in gpus))


def machine_count(sessions: list) -> Optional[int]:
    """How many machines a folder's sessions ran on; None where no session recorded its machine. Sessions that did
    not record it are not counted (a folder resumed across the change counts the recorded ones only)."""
    known = {m for m in map(session_machine, sessions) if m is not None}
    return len(known) if known else None


def machines_unrecorded(sessions: list) -> int:
    """How many of a folder's sessions did not record their machine (lines from before sessions.jsonl carried their
    GPUs): machine_count says nothing about them, so a count of machines over a folder resumed across the change is
    a count over its later sessions only."""
    return sum(1 for s in sessions if session_machine(s) is None)


def calls_without_machine(path) -> int:
    """A folder's calls (sessions.jsonl lines) that did not record their machine (machines_unrecorded)."""
    return machines_unrecorded(read_jsonl(Path(path) / "sessions.jsonl"))


def run_machine(sessions: list, started: Optional[str]) -> Optional[tuple]:
    """The machine a run ran on: that of the last session (sessions.jsonl, in file order) started at or before the
    run (ISO dates with their zone, as the stages write both); None where the run or that session has no record."""
    if not started:
        return None
    at = _instant(started)
    if at is None:
        return None
    found = None
    for s in sessions:
        t = _instant(s.get("started"))
        if t is not None and t <= at:
            found = s
    return None if found is None else session_machine(found)


def _instant(text):
    try:
        return datetime.datetime.fromisoformat(str(text))
    except ValueError:
        return None


def first_commit(path) -> Optional[str]:
    """The commit of a folder's first session (sessions.jsonl), else of its machine.json: the commit of its records
    from before each record carried its own."""
    sessions = read_jsonl(Path(path) / "sessions.jsonl")
    return (sessions[0].get("commit") if sessions else None) or conditions(path).get("commit")


def commit_runs(path, stage=None) -> list[dict]:
    """Every commit a folder names, in the order it first appears (its sessions, then its records): per commit the
    records of its runs file made there (`runs`), those of them retired since (`retired`), and its sessions
    (`calls`). A record without a commit (made before records carried one) counts at first_commit."""
    p = Path(path)
    first = first_commit(p)
    rows: dict = {}

    def row(commit):
        return rows.setdefault(commit, {"commit": commit, "runs": 0, "retired": 0, "calls": 0})
    for s in read_jsonl(p / "sessions.jsonl"):
        row(s.get("commit"))["calls"] += 1
    for name, recs in (("runs", _run_records(p, stage)), ("retired", _retired_records(p))):
        for r in recs:
            row(r.get("commit") or first)[name] += 1
    return list(rows.values())


@functools.lru_cache(maxsize=None)
def committed_digest(commit: str) -> Optional[str]:
    """The lib/tr2 digest as committed at `commit` (sysinfo.commit_lib_digest), None where git here cannot give it (no
    git, or a commit this clone does not hold)."""
    try:
        return sysinfo.commit_lib_digest(commit)
    except (ValueError, OSError):
        return None


def program_digests(path, stage=None) -> list[dict]:
    """The programs a folder's records say ran, beside their commits' (a sceptic's check: on the GPU machine the commit
    is the caller's word, TR2_GIT_COMMIT, and the lib/tr2 digest is what ran): per (commit, recorded digest) pair that
    its machine.json, session lines and run records (kept and retired) name, in the order first seen, the number of
    records (`records`), and `same`: whether the digest equals lib/tr2 as committed at the commit (None where it cannot
    be told: no digest recorded, as in session lines and run records from before 2026-12-07 and machine.json files from
    before 2026-12-05, or git here cannot give the commit's)."""
    p = Path(path)
    first = first_commit(p)
    machine = read_json(p / "machine.json")   # {} where missing: nothing to count
    recs = ([machine] if machine else []) + read_jsonl(p / "sessions.jsonl") + _run_records(p, stage) \
        + _retired_records(p)
    rows: dict = {}
    for r in recs:
        commit = r.get("commit") or first
        row = rows.setdefault((commit, r.get("lib_digest")), {"commit": commit, "lib_digest": r.get("lib_digest"),
                                                              "records": 0})
        row["records"] += 1
    for row in rows.values():
        c, g = row["commit"], row["lib_digest"]
        want = committed_digest(c) if c and c != "unknown" and g else None
        row["committed_digest"] = want
        row["same"] = None if want is None else want == g
    return list(rows.values())


def _key_chains(retired: list, kept: list) -> dict:
    """Every record a run key has had, oldest first: its retired records in the order retired.jsonl holds them (each
    retirement appends), then the runs file's record. The record after a retired one is the rerun of that key."""
    chains: dict = {}
    for r in retired + kept:
        chains.setdefault(r.get("key"), []).append(r)
    return chains


def retired_runs(path) -> list[dict]:
    """A folder's retired records grouped by why, when and at which commit they were retired: reason, retired_at,
    by_commit, runs (records), run_keys, and rerun_commits: the commits of the records that ran those keys again
    right after this retirement (the resume, which need not be the retirement's commit), in order of first
    appearance. A key retired twice has its first rerun in retired.jsonl too: the record after the retired one in
    the key's chain (_key_chains), not the runs file's record, which is the rerun of the last retirement."""
    p = Path(path)
    first = first_commit(p)
    retired = _retired_records(p)
    chains = _key_chains(retired, _run_records(p))
    groups: dict = {}
    for r in retired:
        g = groups.setdefault((r.get("retired_reason"), r.get("retired_at"), r.get("retired_by_commit")),
                              {"reason": r.get("retired_reason"), "retired_at": r.get("retired_at"),
                               "by_commit": r.get("retired_by_commit"), "runs": 0, "run_keys": [], "_next": []})
        g["runs"] += 1
        g["run_keys"] += [r.get("key")] if r.get("key") not in g["run_keys"] else []
        chain = chains.get(r.get("key")) or []
        at = next((i for i, x in enumerate(chain) if x is r), None)
        if at is not None and at + 1 < len(chain):
            g["_next"].append(chain[at + 1])
    for g in groups.values():
        g["rerun_commits"] = list(dict.fromkeys(x.get("commit") or first for x in g.pop("_next")))
    return list(groups.values())


def extensions(path) -> list[dict]:
    """A folder's card extensions (tr2.extend: its extended.jsonl), oldest first, each with run_commits: the commits
    of the first records of the runs it added (the resume that ran them; a run retired since counts where it first
    ran, from retired.jsonl), in order of first appearance."""
    p = Path(path)
    first = first_commit(p)
    chains = _key_chains(_retired_records(p), _run_records(p))
    out = []
    for r in (r for r in read_jsonl(p / EXTENDED) if isinstance(r, dict)):
        made = [chains[k][0] for k in (r.get("runs") or ()) if chains.get(k)]
        out.append({**r, "run_commits": list(dict.fromkeys(x.get("commit") or first for x in made))})
    return out


SERIES_RUN_COLUMNS = ["round", "warm", "config", "model", "dtype", "side", "build", "mode", "half_roundings",
                      "cuda_graph", "status", "valid", "void", "step_ms", "own_step_ms", "own_vs_clock", "peak_bytes",
                      "nvml_peak_bytes", "gpu", "wall_s", "started", "machine", "reason", "log", "run_commit"]


def runs(where, model=None, dtype=None) -> pd.DataFrame:
    """Every run of every series (round 0 is the discarded one), as runs.jsonl records it."""
    r = records(where, "series", model, dtype)
    return r.reindex(columns=FOLDER_COLUMNS + SERIES_RUN_COLUMNS) if not r.empty else r


def step_times(where, model=None, dtype=None) -> pd.DataFrame:
    """The step times the series' statistics use: the valid timed runs (ms per step by the outside clock)."""
    r = runs(where, model, dtype)
    if r.empty:
        return r
    return r[(r["round"] > 0) & (r["valid"] == True)].reset_index(drop=True)  # noqa: E712 - None is not valid


def run_window_gpu(folder, rec: dict, window=None) -> Optional[dict]:
    """One series run's `gpu_window` (tr2.series.window_gpu: the card's samples while its step time was measured):
    its record's, else read again from its stamped log and its samples file (logs/<run>.gpu.jsonl), for runs recorded
    before records carried it, over `window` (default: the folder's card's). None without a window or samples."""
    if "gpu_window" in rec:
        return rec["gpu_window"]
    from .clock import analyze, read_stamped_log
    from .series import window_gpu   # here: tr2.series (the stage) need not load for a folder's tables
    log = Path(folder) / str(rec.get("log") or "")
    samples_file = log.with_name(log.name[:-len(".log")] + ".gpu.jsonl") if log.name.endswith(".log") else None
    if samples_file is None or not log.is_file() or not samples_file.is_file():
        return None
    window = window or series_window(folder)
    window_t = analyze(read_stamped_log(log), window)["window_t"]
    return window_gpu([x for x in read_jsonl(samples_file) if isinstance(x, dict)], window_t)


def series_window(folder) -> tuple:
    """The steps a series folder's clock timed (its card's series.window)."""
    return tuple((read_yaml(Path(folder) / "card.yaml").get("series") or {}).get("window") or (100, 400))


def timed_clocks(where, model=None, dtype=None) -> pd.DataFrame:
    """Per configuration of each series: the card's SM clock and power while its timed runs were measured (the
    medians of each run's in-window samples: median over the runs, their range, and the samples in all), the
    conditions under which each side's step time was taken; and the joules a step (the median over the runs of the
    window's mean power by the energy counter times the run's step time; NaN where the counter was not read) with
    its relative bound (series.energy_bound of the readings' span, the median over the runs counted)."""
    from .series import energy_bound, energy_counts   # here, as run_window_gpu's window_gpu

    def read(path):
        rows, window = [], series_window(path)
        for rec in kept_records(path, "series"):
            if not (isinstance(rec, dict) and (rec.get("round") or 0) > 0 and rec.get("valid") is True):
                continue
            g = run_window_gpu(path, rec, window) or {}
            sm, pw = (g.get(k) or {} for k in ("sm_mhz", "power_w"))
            if sm.get("median") is None:
                continue
            # a step's energy: the window's mean power by the card's energy counter times the step time (records
            # and samples from before the counter was read have none; a reading over too short a stretch of the
            # window, series.energy_counts, none either)
            cw, step = g.get("counter_w"), rec.get("step_ms")
            cw = cw if energy_counts(g.get("counter_s")) else None
            counted = cw is not None and step
            rows.append({k: rec.get(k) for k in ("config", "model", "dtype", "side", "build", "mode")}
                        | {"samples": g.get("samples", 0), "sm_mhz": sm["median"], "power_w": pw.get("median"),
                           "joules_step": cw * step / 1000.0 if counted else None,
                           "joules_bound": energy_bound(g.get("counter_s")) if counted else None})
        if not rows:
            return None
        df = pd.DataFrame(rows)
        keys = ["config", "model", "dtype", "side", "build", "mode"]
        out = df.groupby(keys, dropna=False, sort=False).agg(
            runs=("sm_mhz", "size"), samples=("samples", "sum"), sm_mhz=("sm_mhz", "median"),
            sm_mhz_min=("sm_mhz", "min"), sm_mhz_max=("sm_mhz", "max"), power_w=("power_w", "median"),
            joules_step=("joules_step", "median"), joules_bound=("joules_bound", "median"))
        return out.reset_index()
    return _gather(where, "series", read, model, dtype)


series_table = _csv_table("series", "series.csv",
                          "series.csv of each series: per configuration median, range, own reading, memory.")
series_verdicts = _csv_table("series", "verdicts.csv", "verdicts.csv of each series: per model, type and cupy "
                             "build, against PyTorch's fastest mode.")
curves_a = _csv_table("method_a", "method_a.csv", "Method A: every evaluation of every seed (method_a.csv): train "
                      "and validation loss per step.")


def bands_a(curves: pd.DataFrame) -> pd.DataFrame:
    """Method A's families: per folder, model, type, side and step the median and range of the validation loss
    over the seeds (what rule 41 compares: medians against the larger range)."""
    keys = ["folder", "card", "commit", "model", "dtype", "side", "step"]
    if curves.empty:
        return pd.DataFrame(columns=keys + ["n", "median", "min", "max", "range"])
    g = curves.groupby(keys, dropna=False)["val"]
    out = g.agg(n="count", median="median", min="min", max="max").reset_index()
    out["range"] = out["max"] - out["min"]
    return out


def verdicts_a(where, model=None, dtype=None) -> pd.DataFrame:
    """Method A's verdict per model and element type, with its seeds, schedule and reason."""
    def row(c):
        v = c.get("verdict") or {}
        return {"model": c["model"], "dtype": c["dtype"], "torch_mode": c.get("torch_mode"),
                "seeds": len(c.get("seeds") or ()), "steps": c.get("steps"), "judge_from": v.get("judge_from"),
                "passed": v.get("passed"), "worst_step": v.get("worst_step"), "reason": v.get("reason")}
    return _gather(where, "method_a", _summary_rows(lambda s: [row(c) for c in s.get("configs", [])]), model, dtype)


def judged_a(where, model=None, dtype=None) -> pd.DataFrame:
    """Method A's judged evaluations: the two medians, the two ranges, their difference and what is allowed."""
    return _gather(where, "method_a", _summary_rows(lambda s: [
        {"model": c["model"], "dtype": c["dtype"], **r} for c in s.get("configs", [])
        for r in (c.get("verdict") or {}).get("steps") or ()]),   # a verdict without judged steps adds no rows
        model, dtype)


# method_b.csv names a run's relative difference from the torch run rel_<x>; most x are the run's column
# name, the floors' are shortened (tr2.method_b writes them so)
_REL_OF = {"rel_once": "floor_once", "rel_every": "floor_every", "rel_none_vs_trainer": "floor_none"}


def _method_b_long(path):
    wide = _read_csv(path / "method_b.csv")
    if wide is None:
        return None
    rel_cols = [c for c in wide if c.startswith("rel_")]
    loss = wide.drop(columns=rel_cols).melt(["model", "step"], var_name="run", value_name="loss")
    rel = wide[["model", "step", *rel_cols]].melt(["model", "step"], var_name="run", value_name="rel")
    rel["run"] = rel["run"].map(lambda c: _REL_OF.get(c, c[len("rel_"):]))
    out = loss.merge(rel, on=["model", "step", "run"], how="left").dropna(subset=["loss"])
    out["floor"] = out["run"].str.startswith("floor_")
    return out.sort_values(["model", "run", "step"], ignore_index=True)


def curves_b(where, model=None) -> pd.DataFrame:
    """Method B in long form: per model, run and step the loss and its relative difference from the torch
    run of the same start; `floor` marks the torch side against itself (the noise floor the cupy run is read
    against), the other runs are the cupy side and the card's extra runs."""
    return _gather(where, "method_b", _method_b_long, model)


def verdicts_b(where, model=None) -> pd.DataFrame:
    """Method B's verdict per model: step 0, the judged steps 1..J (J = W of the floors, or the card's fixed
    window), the largest difference over every step and the verdict over them, stated beside."""
    def rows(s):
        for m in s.get("models", []):
            v, cupy = m.get("verdict") or {}, m.get("cupy") or {}
            yield {"model": m["model"], "torch_mode": m.get("torch_mode"), "passed": v.get("passed"),
                   "judged_through": m.get("judge_last_step"), "steps": m.get("steps"),
                   "W": (m.get("window") or {}).get("W"),
                   "step0_rel": (cupy.get("step0") or {}).get("max_rel"),
                   "window_max_rel": (cupy.get("window") or {}).get("max_rel"),
                   "worst_step": (cupy.get("window") or {}).get("step"),
                   "all_steps_max_rel": (cupy.get("all_steps") or {}).get("max_rel"),
                   "all_steps_passed": (v.get("full") or v).get("passed"), "reason": v.get("reason")}
    return _gather(where, "method_b", _summary_rows(lambda s: list(rows(s))), model)


def floors_b(where, model=None) -> pd.DataFrame:
    """Method B's window W per model and floor run (issue 11's rule): the first step over the band (None:
    never), the largest difference up to W and over all steps, which floors set W, and whether W is too short."""
    return _gather(where, "method_b", _summary_rows(lambda s: [
        {"model": m["model"], "W": m["window"]["W"], "floor": name, "first_over": f["first_over"],
         "max_rel_to_W": f["max_rel_to_W"], "max_rel": f["max_rel"], "limited_by": ", ".join(m["window"]["limited_by"]),
         "too_chaotic": m["window"]["too_chaotic"]}
        for m in s.get("models", []) if m.get("window") for name, f in m["window"]["floors"].items()]), model)


def differences_b(where, model=None) -> pd.DataFrame:
    """Method B's runs from the one start, each against the run it is read against: the cupy side and
    nanoGPT's loop against the torch side, the perturbed floors against the unperturbed one, the unperturbed
    floor against the trainer's torch run, the card's extra runs against their own side's run."""
    def rows(s):
        for m in s.get("models", []):
            runs = {"cupy": {"against": "torch", **(m.get("cupy") or {})},
                    **{f"floor_{f}": {"against": "floor_none", **r} for f, r in (m.get("noise_floor") or {}).items()},
                    "floor_none": {"against": "torch", "all_steps": m.get("floor_copy_vs_trainer")},
                    **({"nanogpt": m["nanogpt"]} if m.get("nanogpt") else {}), **(m.get("also") or {})}
            for run, r in runs.items():
                yield {"model": m["model"], "run": run, "against": r.get("against"),
                       **{f"{w}_rel": (r.get(w) or {}).get("max_rel") for w in ("step0", "window", "all_steps")},
                       "worst_step": (r.get("all_steps") or {}).get("step")}
    return _gather(where, "method_b", _summary_rows(lambda s: list(rows(s))), model)


def footprint(where, model=None, dtype=None) -> dict:
    """The footprint's tables: footprint (bytes by category per run), libraries, distributions."""
    return {name: _csv_table("footprint", f"{name}.csv", None)(where, model, dtype)
            for name in ("footprint", "libraries", "distributions")}


def footprint_sides(where) -> pd.DataFrame:
    """Per side: its runs, NVIDIA's libraries over all runs, NVRTC, and the bytes of its largest run-time set."""
    return _gather(where, "footprint", _summary_rows(lambda s: [
        {"side": side, "runs": v["runs"], "runs_ok": v["runs_ok"], "nvidia_libraries": ", ".join(v["nvidia_libraries"]),
         "nvrtc": v["nvrtc"], "total_bytes": v["total_bytes"], "image_bytes": v["image_bytes"]}
        for side, v in s.get("sides", {}).items()]))


def nvidia_libraries(where) -> pd.DataFrame:
    """NVIDIA's libraries by run: a column per run, 'main' or 'child' where the run (or only a process it
    started) mapped it; the driver's are marked as such."""
    df = footprint(where)["libraries"]
    df = df[df["nvidia"].fillna("") != ""] if "nvidia" in df else df
    if df.empty:
        return pd.DataFrame({"library": [], "nvidia": []})
    df = df.assign(run=df["side"] + " " + df["dtype"] + (" " + df["mode"].fillna("")).str.rstrip())
    return df.pivot_table(index=["library", "nvidia"], columns="run", values="process", aggfunc="first", fill_value="")


def install_sets(where) -> pd.DataFrame:
    """The install sets measured where Docker does not run: per side the interpreter, each distribution pip
    brings and tr2's own files, in MB; the side's total is their sum."""
    def rows(s):
        sets = s.get("install_sets") or {}
        interp = sets.get("interpreter", {})
        for side, st in sets.get("sides", {}).items():
            yield {"side": side, "what": f"Python {interp.get('python')} (slim: no tests, no caches)",
                   "version": interp.get("python"), "MB": interp.get("bytes", 0) / 1e6}
            for d in st["distributions"]:
                yield {"side": side, "what": d["distribution"], "version": d["version"], "MB": d["bytes"] / 1e6}
            yield {"side": side, "what": "tr2 (lib/tr2, params/models.yaml)", "version": "",
                   "MB": sets.get("tr2", {}).get("bytes", 0) / 1e6}
            for m in st.get("missing", []):
                yield {"side": side, "what": f"{m} (not installed here)", "version": "", "MB": float("nan")}
    return _gather(where, "footprint", _summary_rows(lambda s: list(rows(s))))


kernel_families = _csv_table("families", "families.csv", "families.csv of each families stage: microseconds and "
                             "launches per step of each kernel family.")
kernels = _csv_table("families", "kernels.csv", "kernels.csv: every kernel name with its family, time and launches "
                     "per step.")
kernel_gaps = _csv_table("families", "gaps.csv", "gaps.csv (CUDA runs of folders made since the twenty-eighth session): "
                         "the device's idle time between kernels a step, by the pair of kernels around it.")


def profiled(where, model=None, dtype=None) -> pd.DataFrame:
    """The families' profiled runs: per configuration its status, kernel time and launches per step, the device's
    idle time between kernels a step (CUDA, folders made since it was recorded), the attention that ran and the
    attention backends PyTorch allowed (CUDA)."""
    return _gather(where, "families", _summary_rows(lambda s: [
        {"key": c["key"], "model": c["model"], "dtype": c["dtype"], "label": c["label"], "status": c["status"],
         "kernel_us_per_step": c.get("kernel_us_per_step"), "launches_per_step": c.get("launches_per_step"),
         "idle_us_per_step": c.get("idle_us_per_step"), "attention": ", ".join(c.get("attention") or []),
         "sdp_allowed": c.get("sdp_backends_allowed"),
         "log": c.get("log"), "reason": c.get("reason")} for c in s.get("configs", [])]), model, dtype)


def graph_breaks(where, model=None, dtype=None) -> pd.DataFrame:
    """Graph breaks and recompiles per model, type and compiled mode (the profiled runs' TORCH_LOGS)."""
    cols = ("key", "model", "dtype", "mode", "status", "graph_breaks", "recompiles", "break_sites",
            "recompiled_functions", "log", "reason")
    return _gather(where, "families", _summary_rows(lambda s: [{k: g.get(k) for k in cols} for g in s.get("graphs", [])]),
                   model, dtype)


def load(root=None, stage=None, card=None, model=None, dtype=None, commit=None) -> dict:
    """Every table of the folders that match the filters: name -> DataFrame (footprint's three included)."""
    idx = select(index(root), stage=stage, card=card, model=model, dtype=dtype, commit=commit)
    return {"index": idx, "runs": runs(idx, model, dtype), "step_times": step_times(idx, model, dtype),
            "series": series_table(idx, model, dtype), "verdicts": series_verdicts(idx, model, dtype),
            "curves_a": (ca := curves_a(idx, model, dtype)), "bands_a": bands_a(ca),
            "verdicts_a": verdicts_a(idx, model, dtype), "curves_b": curves_b(idx, model),
            "verdicts_b": verdicts_b(idx, model), **footprint(idx, model, dtype),
            "families": kernel_families(idx, model, dtype), "kernels": kernels(idx, model, dtype)}


# What two folders of one stage are compared by: the table, the columns that name a row, the number
_COMPARED = {
    "series": (series_table, ["config"], "median_ms"),
    "method_a": (curves_a, ["model", "dtype", "side", "seed", "step"], "val"),
    "method_b": (curves_b, ["model", "run", "step"], "loss"),
    "footprint": (lambda w: footprint(w)["footprint"], ["side", "model", "dtype", "mode", "half_roundings"],
                  "bytes_total"),
    "families": (kernel_families, ["key", "family"], "us_per_step"),
}


def compare(a, b) -> pd.DataFrame:
    """Two results folders of one stage row by row (e.g. the series of two commits): the stage's number in
    each (columns a and b), b/a and the difference. Rows only one folder holds stay, with the other empty."""
    sa, sb = stage_of(a), stage_of(b)
    if sa is None or sa != sb:
        raise ValueError(f"compare: {Path(a).name!r} and {Path(b).name!r} are not results folders of one stage")
    table, keys, value = _COMPARED[sa]
    ta, tb = (table(p) for p in (a, b))
    for p, t in ((a, ta), (b, tb)):
        if t.empty:
            raise ValueError(f"compare: {Path(p).name!r} holds no {sa} table yet (its stage has not finished)")
    ta, tb = ta[keys + [value]], tb[keys + [value]]
    out = ta.merge(tb, on=keys, how="outer", suffixes=("_a", "_b")).rename(
        columns={f"{value}_a": "a", f"{value}_b": "b"})
    out["b_over_a"] = out["b"] / out["a"]
    out["b_minus_a"] = out["b"] - out["a"]
    out.attrs.update(stage=sa, value=value, a=Path(a).name, b=Path(b).name)
    return out


def pair(idx: pd.DataFrame, stages=STAGES):
    """Two folders worth comparing: the newest two finished folders (summary written) of the first stage (in
    `stages`' order) that has two for the same models, oldest first, as paths; None when no stage has."""
    for st in stages:
        rows = idx[(idx["stage"] == st) & idx["finished"].astype(bool)]
        if len(rows) < 2:
            continue
        same = rows[rows["models"] == rows["models"].iloc[-1]]
        if len(same) >= 2:
            return Path(same["path"].iloc[-2]), Path(same["path"].iloc[-1])
    return None
