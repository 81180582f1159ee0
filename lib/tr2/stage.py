"""The skeleton every protocol stage runs on: its results folder (`open_folder`) and its plan run piece by piece
(`run_plan`), each record appended and synced as it finishes (results.append_jsonl cuts a torn last line first): a
kill loses at most the piece in flight, and a rerun on the same folder repeats only that piece.
"""
from __future__ import annotations

import collections
import concurrent.futures
import datetime
import fcntl
import importlib.util
import json
import math
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable, Iterable, Optional

from . import REPO_ROOT, Tr2Error
from .cards import _is_int, check_held_card, dump_card, machine_gpu_mismatch
from .results import STAGES  # noqa: F401 - the stage list the skeleton runs (defined beside the folder names)
from .results import RETIRED, append_jsonl, new_results_dir, read_jsonl, results_folders, runs_file, write_json_atomic
from .results import write_text_atomic
from . import products_kept, sysinfo

FINISHED = ("ok", "oom")  # a record with one of these is a finished piece: never run again
RUNS = "runs.jsonl"


def finished_keys(runs_path) -> dict:
    """key -> last record of every finished piece in a runs.jsonl."""
    return {r["key"]: r for r in read_jsonl(runs_path) if r.get("status") in FINISHED}


class Folder:
    """A stage's results folder, held (locked) until closed, with the card it holds."""

    def __init__(self, path: Path, stage: str, lock, card: dict, commit: Optional[str] = None,
                 lib_digest: Optional[str] = None):
        # commit: what this process records for its session (sessions.jsonl); each record it appends carries it,
        # so that runs of one folder made at different commits (a resume after tr2.retire) can be told apart; and
        # lib_digest, the program that ran (the commit is the caller's word: sysinfo.lib_digest says why)
        self.path, self.stage, self._lock, self.card = path, stage, lock, card
        self.commit, self.lib_digest = commit, lib_digest

    def records(self, name: str = RUNS) -> list[dict]:
        return read_jsonl(self.path / name)

    def append(self, record: dict, name: str = RUNS) -> None:
        append_jsonl(self.path / name, record)

    def close(self) -> None:
        self._lock.close()  # closing the file drops the lock

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False


def _lock(d: Path, stage: str):
    f = open(d / ".lock", "a+")
    try:
        fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        f.seek(0)
        holder = f.read().strip() or "another process"
        f.close()
        raise Tr2Error(f"results_dir: {str(d)!r} is being worked on by {holder}; allowed: one stage at a time "
                       "in a folder") from None
    f.seek(0)
    f.truncate()
    f.write(f"stage {stage} (pid {os.getpid()})\n")
    f.flush()
    return f


def gpu_models(info) -> list[str]:
    """The GPU models a machine record names (sysinfo.machine_info's `gpus`), sorted, each once; [] where it names
    none (no nvidia-smi, a CPU machine, a record that could not be made)."""
    gpus = info.get("gpus") if isinstance(info, dict) else None
    return sorted({g["name"] for g in gpus or [] if isinstance(g, dict) and isinstance(g.get("name"), str)})


def held_machine(d: Path) -> Optional[dict]:
    """The machine record a results folder was started with (its machine.json), None where it has none readable."""
    try:
        return json.loads((Path(d) / "machine.json").read_text())
    except (OSError, ValueError):
        return None


def check_same_gpu_model(d: Path, card: dict, info: dict, key: str = "results_dir") -> None:
    """One line (Tr2Error, naming `key`) where a cuda card's folder, started on one GPU model (its machine.json),
    would go on here on another: an H100's runs beside an H200's would be two cards' step times, floors and kernel
    tables in one folder, and nothing downstream could tell them apart. Another machine of the same model is
    fine (the device tool lends a different one to each piece; sessions.jsonl names each GPU by its UUID). Nothing
    is checked where either record names no GPU (nvidia-smi missing) or the folder's cannot be read."""
    held = held_machine(d) if card.get("device") == "cuda" else None
    if held is None:
        return
    there, here = gpu_models(held), gpu_models(info)
    if there and here and there != here:
        raise Tr2Error(f"{key}: {str(d)!r} was started on {' + '.join(there)} (its machine.json) and this machine "
                       f"has {' + '.join(here)}; one folder holds one GPU model's runs; allowed: go on with it on "
                       f"{' + '.join(there)}, or start a new folder for this card here")


def program_conflict(earlier: Iterable[dict], commit, digest, dirty) -> Optional[dict]:
    """The first of a folder's earlier records (its machine.json, then its sessions.jsonl lines) that names the same
    commit as this process but another lib/tr2 digest, where neither tree says it was dirty; None where there is none.
    Why: the commit a record carries is the caller's word (TR2_GIT_COMMIT on the GPU machine, which has no .git) and
    the digest is the program that ran (sysinfo.lib_digest); the same name over two programs would put one program's
    runs in a folder under another's name. A dirty tree records that it is not its commit's program; records without a
    commit or a digest (from before either was kept) are not compared. One commit may be named in full and abbreviated
    (at least 7 hex digits): a prefix of the other names the same commit."""
    if not commit or commit == "unknown" or not digest or dirty is True:
        return None
    return next((e for e in earlier if isinstance(e, dict) and same_commit(e.get("commit"), commit)
                 and e.get("lib_digest") and e["lib_digest"] != digest and e.get("dirty") is not True), None)


def same_commit(a, b) -> bool:
    """Whether two commit names name one commit: equal, or one an abbreviation (7 or more characters) of the other."""
    if not isinstance(a, str) or not isinstance(b, str) or min(len(a), len(b)) < 7:
        return a == b
    return a.startswith(b) or b.startswith(a)


def check_same_program(d: Path, info: dict, key: str = "results_dir") -> None:
    """One line (Tr2Error, naming `key`) where this process names a commit the folder's records ran at with another
    lib/tr2 (program_conflict)."""
    earlier = [m for m in [held_machine(d)] if m is not None] + read_jsonl(Path(d) / "sessions.jsonl")
    commit = info.get("commit")
    hit = program_conflict(earlier, commit, info.get("lib_digest"), info.get("dirty"))
    if hit is not None:
        raise Tr2Error(f"{key}: {str(d)!r} holds records made at {commit[:12]} with lib/tr2 digest {hit['lib_digest']}, "
                       f"and this process names the same commit while lib/tr2 here has digest {info['lib_digest']}: "
                       f"its runs would carry {commit[:12]}'s name over another program; allowed: lib/tr2 as at "
                       f"{commit[:12]} (git restore --source={commit[:12]} -- lib/tr2), or the name of the commit "
                       "whose lib/tr2 is here (TR2_GIT_COMMIT, or commit the change)")


def hold_card(d: Path, card: dict, key: str = "results_dir") -> dict:
    """The folder holds `card` (the one it was started with, else one line) and was started on this machine's GPU
    model (`check_same_gpu_model`), and goes on under its commit's name only with that commit's program
    (`check_same_program`); card.yaml and machine.json (each written once, when missing); returns this
    machine's record. The runner calls it before the notebook starts, so that a folder it made can be resumed even
    if the notebook stops before its stage opens it; both checks come before card.yaml, machine.json or
    sessions.jsonl is written (the lock file and logs/ may already be there)."""
    check_held_card(d, card, key)
    try:
        info = sysinfo.machine_info()
    except Exception as e:  # noqa: BLE001 - a machine record is wanted, never worth a stopped stage
        info = {"error": str(e)}
    check_same_gpu_model(d, card, info, key)
    check_same_program(d, info, key)
    if not (d / "card.yaml").is_file():
        write_text_atomic(d / "card.yaml", dump_card(card))
    if not (d / "machine.json").is_file():
        write_json_atomic(d / "machine.json", info)
    return info


def open_folder(stage: str, card: dict, results_dir=None) -> Folder:
    """The stage's results folder (a fresh one when results_dir is None), locked (a second stage on it is refused in
    one line), holding its card (`hold_card`), with a line in sessions.jsonl."""
    d = (new_results_dir(stage, card["card"]) if results_dir is None else Path(results_dir)).resolve()
    (d / "logs").mkdir(parents=True, exist_ok=True)
    lock = _lock(d, stage)
    try:
        info = hold_card(d, card)
        append_jsonl(d / "sessions.jsonl", {"stage": stage, "started": info.get("date"), "host": info.get("host"),
                                            "commit": info.get("commit"), "dirty": info.get("dirty"),
                                            "lib_digest": info.get("lib_digest"),
                                            "gpus": [g.get("uuid") for g in info.get("gpus") or []]})
    except BaseException:
        lock.close()
        raise
    return Folder(d, stage, lock, card, info.get("commit"), info.get("lib_digest"))


def progress(total: int, desc: str, initial: int = 0, enabled: bool = True):
    """A progress bar: a widget in a notebook that can draw one, text elsewhere, nothing without tqdm."""
    class _Silent:
        def update(self, n=1): pass
        def set_postfix_str(self, s, refresh=True): pass
        def close(self): pass
    try:
        try:
            import ipywidgets  # noqa: F401 - tqdm.auto would warn where it cannot draw a widget
            from tqdm.auto import tqdm
        except ImportError:
            from tqdm import tqdm
        return tqdm(total=total, desc=desc, initial=initial, unit="run", file=sys.stderr, mininterval=0, disable=not enabled)
    except Exception:  # noqa: BLE001 - no tqdm: the stage runs without a bar
        return _Silent()


def _committed(root: Path):
    """The names of the folders under root that git tracks, or None where git cannot tell (no repository)."""
    try:
        p = subprocess.run(["git", "-C", str(root), "ls-files", "-z", "--", "."], capture_output=True, text=True,
                           timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return {Path(f).parts[0] for f in p.stdout.split("\0") if f} if p.returncode == 0 else None


def reference_folder(folder: Folder) -> tuple:
    """(folder, what it is) whose runs estimate this folder's where it has none of a kind: the newest other folder
    of the same stage and card beside it that git tracks, else the newest such folder at all, named as such;
    (None, None) where there is none."""
    others = [p for p in results_folders(folder.path.parent, folder.stage, folder.card["card"]) if p != folder.path]
    tracked = _committed(folder.path.parent)
    committed = [p for p in others if p.name in (tracked or ())]
    if committed:
        return committed[-1], "committed"
    what = "not committed" if tracked is not None else "no git here to tell whether it is committed"
    return (others[-1], f"{what}: the newest other folder of this stage and card") if others else (None, None)


def _times(records, kind) -> dict:
    """kind -> the wall times (s) of the runs of that kind that finished ok."""
    out = {}
    for r in records:
        if r.get("status") == "ok" and isinstance(r.get("wall_s"), (int, float)):
            out.setdefault(kind(r), []).append(r["wall_s"])
    return out


RETIRED_SOURCE = "the runs retired from this folder"


def _retired_times(folder: Folder, runs: str, kind) -> dict:
    """kind -> the wall times of the runs tr2.retire took out of this folder's runs file: measured here, by an older
    program (retire does not change a run's speed by much: it follows a change of bits), so they estimate the reruns
    better than nothing (found 2026-12-04: a retired configuration's five reruns started with no estimate)."""
    if runs != runs_file(folder.stage):
        return {}
    return _times(read_jsonl(folder.path / RETIRED), kind)


DEADLINE_ENV = "TR2_DEADLINE"
# a run starts only if its estimate times this fits before the deadline: a kind's runs spread by about a tenth
# (method A's gpt2-small float32 torch runs: 135-161 s, results/method_a-20261202-170258-h200-edition)
DEADLINE_FACTOR = 1.2


class DeadlineReached(Tr2Error):
    """A stage stopped before a run that its estimate says would end past TR2_DEADLINE; the folder resumes it."""


def deadline() -> Optional[float]:
    """TR2_DEADLINE: the Unix time (s) by which a stage's runs must end (a device call's limit), or None."""
    v = os.environ.get(DEADLINE_ENV, "").strip()
    if not v:
        return None
    try:
        end = float(v)
    except ValueError:
        end = math.nan
    if not (math.isfinite(end) and end > 0):   # nan would stop every run with an estimate, -5 is no time at all
        raise Tr2Error(f"{DEADLINE_ENV}: {v!r} is not allowed; allowed: a Unix time in seconds (e.g. "
                       "$(( $(date +%s) + 540 ))), or unset")
    return end


def _duration(seconds: float) -> str:
    return f"{seconds:.1f} s" if seconds < 90 else (f"{seconds / 60:.1f} min" if seconds < 5400 else f"{seconds / 3600:.1f} h")


def plan_text(folder: Folder, kinds: list, planned: int, desc: str, record_kind: Callable, runs: str) -> str:
    """The plan as the stage prints it before its first run: each kind of run still to go (`kinds`, in running
    order) with its time, the median wall time of the runs of that kind that finished ok, measured in this folder,
    else in the runs retired from it, else in `reference_folder`'s (a kind measured in none has no estimate, and none
    is invented); then the total."""
    here = _times(folder.records(runs), record_kind)
    gone = _retired_times(folder, runs, record_kind)
    ref, what = reference_folder(folder)
    there = _times(read_jsonl(ref / runs), record_kind) if ref is not None else {}
    lines = [f"{desc}: {len(kinds)} of {planned} runs to go"]
    seconds, known, sources = 0.0, 0, set()
    for k, n in collections.Counter(kinds).items():
        found = next(((s, times[k]) for s, times in (("this folder", here), (RETIRED_SOURCE, gone), (ref and ref.name, there))
                      if times.get(k)), None)
        if found is None:
            lines.append(f"  {n:4d} x {k}: no estimate")
            continue
        source, each = found[0], statistics.median(found[1])
        seconds, known, sources = seconds + n * each, known + n, sources | {source}
        lines.append(f"  {n:4d} x {k}: {_duration(each)} each, measured in {source}")
    if not known:
        lines.append("  estimate: no estimate (no finished run of these kinds in this folder or in another folder of "
                     "its stage and card)" if kinds else "  nothing to run")
        if kinds and (modelled := model_estimate(folder)):
            lines.append(modelled)
    else:
        unit = "GPU minutes" if folder.card["device"] == "cuda" else "minutes of the CPU"
        named = ", ".join(s if s in ("this folder", RETIRED_SOURCE) else f"results folder {s} ({what})"
                          for s in sorted(sources))
        lines.append(f"  estimate: {seconds / 60:.1f} {unit} ({_duration(seconds)}) for {known} of the "
                     f"{len(kinds)} runs, from the runs measured in {named}"
                     + (f"; no estimate for the other {len(kinds) - known}" if known < len(kinds) else ""))
    return "\n".join(lines)


MINUTES_SCRIPT = REPO_ROOT / "scripts" / "h200_minutes.py"


def _minutes_module():
    """scripts/h200_minutes.py as a module (loaded once a process)."""
    minutes = sys.modules.get("tr2_h200_minutes")
    if minutes is None:
        spec = importlib.util.spec_from_file_location("tr2_h200_minutes", MINUTES_SCRIPT)
        minutes = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = minutes   # its dataclasses look their module up there
        try:
            spec.loader.exec_module(minutes)
        except BaseException:
            del sys.modules[spec.name]
            raise
    return minutes


def on_h200(folder: Folder) -> bool:
    """A card for the H200 (its `machine`) in a folder started on one (its machine.json; a record without GPU names
    counts as one): where scripts/h200_minutes.py's model of the committed H200 runs can estimate its runs."""
    if folder.card.get("machine") != "nvidia-h200":
        return False
    return machine_gpu_mismatch("nvidia-h200", gpu_models(held_machine(folder.path))) is None


def modelled_seconds(folder: Folder) -> Optional[Callable]:
    """For a card on the H200: kind -> the seconds scripts/h200_minutes.py models for one run of that kind alone
    (None where it models none); None off the H200, or where the script is not there or gives no model."""
    if not on_h200(folder) or not MINUTES_SCRIPT.is_file():
        return None
    try:
        minutes = _minutes_module()
        m = minutes.load()
    except Exception:  # noqa: BLE001 - an estimate never stops a stage
        return None

    def seconds(kind) -> Optional[float]:
        try:
            return float(minutes.kind_seconds(m, folder.card, folder.stage, kind)[0])
        except Exception:  # noqa: BLE001 - a kind the model does not know has no estimate
            return None
    return seconds


def model_estimate(folder: Folder) -> Optional[str]:
    """For a card on the H200 whose runs no folder has measured yet: the stage's GPU minutes on a fresh folder of
    the card by scripts/h200_minutes.py, the committed model of the H200 runs of other cards (a line saying why not
    where it gives none; None off the H200 or where the script is not there)."""
    if not on_h200(folder) or not MINUTES_SCRIPT.is_file():
        return None
    try:
        total = _minutes_module().stage_total(folder.card, folder.stage)
    except Exception as e:  # noqa: BLE001 - an estimate never stops a stage
        return f"  scripts/h200_minutes.py gave no estimate either ({type(e).__name__}: {' '.join(str(e).split())[:200]})"
    return (f"  modelled instead: {total['seconds'] / 60:.1f} GPU minutes for all {total['runs']} runs of this stage "
            f"on a fresh folder of card {folder.card['card']}, by scripts/h200_minutes.py from the committed H200 runs "
            f"of other cards (`python scripts/h200_minutes.py plan --card {folder.card['card']}` gives each run's basis)")


def _never(_record) -> bool:
    return False


def run_plan(folder: Folder, plan: Iterable, run_one: Callable, *, desc: str, key: Callable = lambda p: p["key"],
             finished: Callable = lambda r: r.get("status") in FINISHED, retry: Callable = _never,
             note: Optional[Callable] = None, group: Optional[Callable] = None, ends_group: Callable = _never,
             ends_stage: Callable = _never, on_record: Optional[Callable] = None, show: bool = True,
             runs: str = RUNS, kind: Optional[Callable] = None, record_kind: Callable = lambda r: r.get("key"),
             parallel: int = 1) -> list[dict]:
    """Run every piece of `plan` the folder does not hold yet; returns the records appended.

    run_one(piece) -> record (a dict; the skeleton adds the piece's key and this session's commit). A piece is done
    when a record of its key satisfies `finished` and not `retry` (the hook for failures whose cause is gone:
    tr2.retry.should_retry); a piece run again so gets `retried`: note(the record it replaces), when `note` is given.
    A piece whose record tr2.retire moved out of the runs file is not done: it runs again. With `group(piece)`, a record
    satisfying `ends_group` skips the later pieces of its group (no record). A record satisfying `ends_stage` stops
    the stage with one line, after it is appended (rerun to retry it). `on_record(record)` is called after each
    append (tests kill the stage there). Before the first piece the plan is printed with its estimate: kind(piece),
    called once per piece to run in running order (default: its key), and record_kind(record) name the kind of run
    whose measured times estimate it. Where TR2_DEADLINE is set, a piece whose estimate (times DEADLINE_FACTOR) would
    end past it is not started: the stage stops with DeadlineReached, and the next call resumes it. A piece of a kind
    never measured is estimated, on an H200 card, by scripts/h200_minutes.py's model of a run alone (times `parallel`);
    elsewhere, or where the model knows no such run, it has no estimate and runs (a device call's timeout still
    stops it).

    With `parallel` > 1, up to that many pieces run at once (threads, each waiting on its own process), started in
    plan order; each record is appended as its piece ends (so in the order they end) and carries `parallel`,
    `started_unix` and `ended_unix`, from which explore.run_time counts the machine's time once. A stop (ends_stage,
    the deadline) starts nothing more, waits for the pieces in flight and appends their records, then raises. Groups
    decide by records already in, so they run one piece at a time only.
    """
    if not _is_int(parallel) or parallel < 1:
        raise Tr2Error(f"run_plan: parallel {parallel!r} is not allowed; allowed: an integer >= 1")
    if parallel > 1 and group is not None:
        raise Tr2Error("run_plan: parallel > 1 with groups is not allowed; allowed: parallel 1 where pieces have groups")
    plan = list(plan)
    held = folder.records(runs)
    done = {r.get("key") for r in held if finished(r) and not retry(r)}
    ended = {r.get("group") for r in held if group is not None and ends_group(r) and not retry(r)}
    reopened = {r.get("key"): r for r in held if retry(r)}
    skip = lambda p: key(p) in done or (group is not None and group(p) in ended)  # noqa: E731
    skipped = {key(p) for p in plan if skip(p)}
    kinds = [(kind or key)(p) for p in plan if key(p) not in skipped]
    print(plan_text(folder, kinds, len(plan), desc, record_kind, runs), flush=True)
    end = deadline()
    if end is not None:   # the reference folder's and the retired runs' times, read once: the stage changes neither
        ref, _ = reference_folder(folder)
        there = {**(_times(read_jsonl(ref / runs), record_kind) if ref is not None else {}),
                 **_retired_times(folder, runs, record_kind)}
        modelled = modelled_seconds(folder)
    bar = progress(len(plan), desc, initial=len(skipped), enabled=show)
    out = []

    def too_late(piece) -> Optional[Callable]:
        """None where the piece may start; else what to raise (a function of the runs done by then)."""
        if end is None:
            return None
        # this folder's runs (held at the start and appended since) first, then its retired ones, then the reference
        # folder's, as plan_text's estimates; a kind measured in none, modelled (H200 cards): the runs' times alone,
        # times `parallel`, since runs sharing the card gained no throughput where it was measured
        # (docs/h200-edition.md, "Not in the plan")
        k = (kind or key)(piece)
        times = {**there, **_times(held + out, record_kind)}.get(k)
        each = statistics.median(times) if times else None
        said = f"take {_duration(each)}" if each is not None else ""
        if each is None and modelled is not None and (alone := modelled(k)) is not None:
            each = alone * parallel
            said = (f"are modelled at {_duration(each)} by scripts/h200_minutes.py"
                    + (f" ({parallel} x {_duration(alone)} alone, {parallel} runs sharing the card)" if parallel > 1 else ""))
        left = end - time.time()
        if each is None or DEADLINE_FACTOR * each <= left:
            return None
        return lambda: DeadlineReached(f"{desc}: stopped before {key(piece)}: its runs {said} and "
                                       f"{DEADLINE_ENV} leaves {max(left, 0):.0f} s; {len(out)} run(s) done in this "
                                       "call; the folder resumes with the rest")

    def record(piece, rec) -> Optional[Tr2Error]:
        """Append a finished piece's record; returns the error that ends the stage, if it does."""
        # when the run ended (a report's "measured to"; records from before 2026-12-05 carry none but the series'
        # start times and parallel runs' ended_unix)
        rec = {**rec, "key": key(piece), "commit": folder.commit, "lib_digest": folder.lib_digest,
               "ended": rec.get("ended") or datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")}
        # which products record a cupy GPU run read, and a copy of it in the folder (tr2.products_kept)
        kept = products_kept.keep(folder.path, rec.get("log"))
        if kept is not None:
            rec["products_record"] = kept
        if note is not None and key(piece) in reopened:
            rec["retried"] = note(reopened[key(piece)])
        if group is not None:
            rec["group"] = group(piece)
        folder.append(rec, runs)
        out.append(rec)
        bar.update(1)
        if on_record is not None:
            on_record(rec)
        if group is not None and ends_group(rec):
            ended.add(rec["group"])
        if ends_stage(rec):
            return Tr2Error(f"{desc}: {key(piece)} {rec.get('status')} ({rec.get('reason')}); log "
                            f"{rec.get('log')}. A failure other than out of memory ends the stage "
                            "(docs/protocol.md, rule 8.4); run the stage again on the folder to retry it")
        return None

    try:
        if parallel == 1:
            for piece in plan:
                if skip(piece):
                    if key(piece) not in skipped:
                        bar.update(1)  # its group ended during this session
                    continue
                stop = too_late(piece)
                if stop is not None:
                    raise stop()
                bar.set_postfix_str(key(piece), refresh=False)
                err = record(piece, run_one(piece))
                if err is not None:
                    raise err
        else:
            _run_parallel([p for p in plan if not skip(p)], run_one, parallel, too_late, record, bar, key)
    finally:
        bar.close()
    return out


def _run_parallel(todo: list, run_one: Callable, parallel: int, too_late: Callable, record: Callable, bar,
                  key: Callable) -> None:
    """run_plan's pieces, up to `parallel` at once; a stop waits for the pieces in flight before it is raised."""
    def timed(piece):
        t0 = time.time()
        rec = run_one(piece)
        return {**rec, "parallel": parallel, "started_unix": round(t0, 3), "ended_unix": round(time.time(), 3)}

    stop = None   # what ends the stage once the pieces in flight are in: a callable giving the exception
    with concurrent.futures.ThreadPoolExecutor(max_workers=parallel) as pool:
        flight, queue = {}, collections.deque(todo)
        while flight or (queue and stop is None):
            while queue and stop is None and len(flight) < parallel:
                late = too_late(queue[0])
                if late is not None:
                    stop = late
                    break
                piece = queue.popleft()
                bar.set_postfix_str(key(piece), refresh=False)
                flight[pool.submit(timed, piece)] = piece
            if not flight:
                break
            ended, _ = concurrent.futures.wait(flight, return_when=concurrent.futures.FIRST_COMPLETED)
            for fut in sorted(ended, key=lambda f: todo.index(flight[f])):   # ties in plan order
                err = record(flight.pop(fut), fut.result())
                if err is not None and stop is None:
                    stop = lambda err=err: err   # noqa: E731
    if stop is not None:
        raise stop()
