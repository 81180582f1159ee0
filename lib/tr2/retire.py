"""Retiring runs: `python -m tr2.runner STAGE --retire DIR --runs PATTERN [PATTERN ...] --reason TEXT`.

A program change that alters the bits of a few configurations only (docs/h200-edition.md, "Reusing method A runs
across commits") makes those runs describe an older program, while the folder's other runs still stand. Retiring
takes the former out of the stage's runs file, so that `--resume DIR` runs exactly them again at the new commit, and
deletes nothing:

- every record of the runs file whose `key` matches a pattern (fnmatch) is appended to DIR/retired.jsonl with
  `retired_at` (UTC), `retired_reason`, `retired_by_commit` and `retired_files` (each field naming a file -> where
  that file lies now);
- the files those records name (metrics, log, any field whose value is a file inside DIR that no kept record names)
  move to DIR/retired/<the same path>; a path already taken there (the same run retired before) gets -2, -3, ...
  before its suffix;
- the marks of a finished stage (summary.json, the executed notebook) move to retired/ likewise, so that
  results.is_finished, and with it the report's choice of folders, no longer takes the folder until the resume
  writes them again (its summary then covers the kept runs and the new ones). The stage's other tables
  (method_a.csv, ...) stay until that summary rewrites them.

Every check is made before anything moves (one line, exit 2, nothing changed). The runs file is replaced last and
atomically, under the folder's lock (no stage may run in it meanwhile).
"""
from __future__ import annotations

import datetime
import fnmatch
import json
from pathlib import Path

from . import Tr2Error
from .results import EXTENDED, RETIRED, append_jsonl, finish_marks, jsonl_line, read_jsonl, runs_file, write_text_atomic
from .stage import _lock
from .sysinfo import git_commit

RETIRED_DIR = "retired"
# the folder's own files: a record may name one (never, so far), but it is no run's to take away
OWN_FILES = ("card.yaml", "machine.json", "sessions.jsonl", "summary.json", RETIRED, EXTENDED, ".lock")


def select(records: list, patterns: list, runs_name: str, what: str = "record") -> list:
    """The records whose key matches a pattern; one line naming the pattern where one matches nothing (`what`: the
    records offered, as the line calls them)."""
    keys = [r.get("key") for r in records if isinstance(r.get("key"), str)]
    for pat in patterns:
        if not fnmatch.filter(keys, pat):
            shown = ", ".join(sorted(set(keys))[:4]) or f"none: it holds no such {what}"
            raise Tr2Error(f"--runs: {pat!r} matches no {what} of {runs_name}; allowed: fnmatch patterns of its "
                           f"keys (e.g. {shown})")
    return [r for r in records if isinstance(r.get("key"), str) and any(fnmatch.fnmatch(r["key"], p) for p in patterns)]


def named_files(record: dict, d: Path, runs_name: str) -> dict:
    """field -> path (relative to d) of every file inside d that the record names by a top-level string field."""
    own = set(OWN_FILES) | {runs_name}
    out = {}
    for field, value in record.items():
        if not isinstance(value, str) or not value or Path(value).is_absolute() or ".." in Path(value).parts:
            continue
        if value not in own and not value.startswith(RETIRED_DIR + "/") and (d / value).is_file():
            out[field] = value
    return out


def free_name(d: Path, rel: str, taken: set) -> str:
    """retired/<rel>, or with -2, -3, ... before its suffix where that is there already (or planned this time)."""
    base = Path(RETIRED_DIR) / rel
    cand, n = base, 1
    while (d / cand).exists() or str(cand) in taken:
        n += 1
        cand = base.with_name(f"{base.stem}-{n}{base.suffix}")
    taken.add(str(cand))
    return str(cand)


def plan_moves(d: Path, retired: list, kept: list, runs_name: str, marks: tuple) -> tuple[list, dict]:
    """(every move as (from, to) relative to d, and per retired record field -> its new path). A file a kept record
    also names stays: it is not the retired run's alone."""
    shared = {v for r in kept for v in named_files(r, d, runs_name).values()}
    taken, moved, moves, per_record = set(), {}, [], []
    for r in retired:
        files = {}
        for field, rel in named_files(r, d, runs_name).items():
            if rel in shared:
                continue
            if rel not in moved:
                moved[rel] = free_name(d, rel, taken)
                moves.append((rel, moved[rel]))
            files[field] = moved[rel]
        per_record.append(files)
    moves += [(m, free_name(d, m, taken)) for m in marks if (d / m).is_file()]
    return moves, per_record


def check_reason(reason, why: str = "why these runs are retired (what changed in the program)") -> str:
    """The reason on one line; every retired record (or extension: tr2.extend) keeps it, so none may be left out or
    blank."""
    text = " ".join(str(reason or "").split())
    if not text:
        said = "missing" if reason is None else f"{reason!r} is empty"
        raise Tr2Error(f"--reason: {said}; allowed: a sentence saying {why}")
    return text


def differing(checks: list, source: str = "the identity check") -> list:
    """[(pattern, reason)] for the configurations an identity check (scripts/identity_check.py's lines: key,
    identical, first_difference, status, commit, recorded_commit) found changed: a run key MODEL/DTYPE/SIDE/SEED that
    differs from its record retires every seed of its configuration (MODEL/DTYPE/SIDE/*), since one program made
    them all; the reason names the check's commit, the record's, the first differing step and `source`. A rerun that
    did not end ok proves nothing either way: one line naming it, and nothing is retired."""
    out = {}
    for i, c in enumerate(checks, 1):
        key = c.get("key") if isinstance(c, dict) else None
        if not isinstance(key, str) or key.count("/") < 1:
            raise Tr2Error(f"{source}, line {i}: key {key!r}; allowed: a run key such as gpt2-small/bfloat16/cupy/1337")
        if c.get("status") != "ok":
            raise Tr2Error(f"{source}, line {i}: the rerun of {key} ended {c.get('status')!r} (returncode "
                           f"{c.get('returncode')!r}), so it shows neither a change nor none; allowed: checks whose "
                           "reruns ended ok (run the check again)")
        if c.get("identical") is True:
            continue
        if c.get("identical") is not False:
            raise Tr2Error(f"{source}, line {i}: identical is {c.get('identical')!r} for {key}; allowed: true or false")
        pattern = key.rsplit("/", 1)[0] + "/*"
        step = (c.get("first_difference") or {}).get("step")
        out.setdefault(pattern, f"the program at {c.get('commit')} no longer repeats {key} (recorded at "
                                f"{c.get('recorded_commit')}): first difference at step {step}, by {source}")
    return list(out.items())


def check_records(path: Path, flag: str = "--retire") -> None:
    """Every complete line of a runs file one JSON record (a mapping), or one line naming the first that is not: the
    rewrite keeps the records it reads, so a line read as none would be gone from the folder, in neither file. A torn
    last line (no newline after it: a kill mid-append) is not a record yet; append_jsonl would cut it too."""
    for n, line in enumerate(path.read_bytes().split(b"\n")[:-1], 1):
        if not line.strip():
            continue
        try:
            record = json.loads(line.decode("utf-8"))
        except ValueError:   # not JSON, or not UTF-8 (UnicodeDecodeError)
            record = None
        if not isinstance(record, dict):
            raise Tr2Error(f"{flag}: {path} line {n} is not a JSON record ({line[:60]!r}); allowed: a runs file of the "
                           "stage's records, one a line (mend or remove that line first; nothing was moved)")


def retire(stage: str, d, patterns: list, reason: str) -> dict:
    """Retire the runs of `stage`'s folder d (already checked to be one: tr2.runner) whose keys match `patterns`;
    returns what was done: keys, records, moves."""
    d = Path(d)
    reason = check_reason(reason)
    runs_name = runs_file(stage)
    if not (d / runs_name).is_file():
        raise Tr2Error(f"--retire: {str(d)!r} holds no {runs_name}, so it has no run to retire; allowed: a results "
                       f"folder of stage {stage} whose runs have started")
    check_records(d / runs_name)
    select(read_jsonl(d / runs_name), patterns, runs_name)   # a refusal before the lock: not even .lock changes
    lock = _lock(d, f"{stage} --retire")
    try:
        records = read_jsonl(d / runs_name)   # again, now that no stage can append meanwhile
        retired = select(records, patterns, runs_name)
        ids = {id(r) for r in retired}
        kept = [r for r in records if id(r) not in ids]
        moves, per_record = plan_moves(d, retired, kept, runs_name, finish_marks(stage))
        stamp = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
        commit = git_commit().get("commit")
        for src, dst in moves:
            (d / dst).parent.mkdir(parents=True, exist_ok=True)
            (d / src).rename(d / dst)
        for r, files in zip(retired, per_record):
            append_jsonl(d / RETIRED, {**r, "retired_at": stamp, "retired_reason": reason, "retired_by_commit": commit,
                                       "retired_files": files})
        write_text_atomic(d / runs_name, "".join(map(jsonl_line, kept)))
    finally:
        lock.close()
    return {"keys": sorted({r["key"] for r in retired}), "records": len(retired), "kept": len(kept), "moves": moves,
            "retired_at": stamp, "commit": commit}
