"""Adding seeds to a finished method A folder: `python -m tr2.runner method_a --extend DIR --seeds S [S ...] --reason
TEXT`, then `python -m tr2.runner method_a --resume DIR`.

Method A judges families of seeds (docs/protocol.md, rules 40-42). A folder run with fewer seeds than the protocol's
five (the H200 edition's three: docs/h200-edition.md, "Adding seeds to a finished method A folder") can take more
without running again what it holds; a resume keeps the folder's card.yaml, so the seeds go into it here, on record:

- the card as it was moves to DIR/retired/card.yaml, and the marks of a finished stage (summary.json, the executed
  notebook) to retired/ likewise (-2, -3, ... before the suffix where a name is taken, as tr2.retire names its
  files), so that results.is_finished, and with it the report's choice of folders, passes the folder over until the
  resume writes them again;
- DIR/extended.jsonl gains one record: the card key, its seeds before, added and after, the runs the card then plans
  that the folder does not hold (`runs`), `extended_at` (UTC), `extended_reason`, `extended_by_commit` and
  `extended_files` (each file -> where it lies now);
- DIR/card.yaml is replaced last, atomically, by the card with the seeds appended in the order given.

`--resume DIR` then runs exactly those runs (method_a.remaining: both sides, every model and type of the card) and
summarizes every seed; the summary and the notebook carry the record, and the report's reproduce command replays the
extension. Every check is made before anything changes (one line, exit 2, nothing written), and the rewrite holds
the folder's lock (no stage may run in it meanwhile).
"""
from __future__ import annotations

import copy
import datetime
import re
from pathlib import Path

from . import Tr2Error
from .cards import BOUNDS, dump_card, read_card_file, validate_card
from .method_a import STAGE, remaining
from .results import EXTENDED, append_jsonl, finish_marks, write_text_atomic
from .retire import check_reason, free_name
from .stage import _lock
from .sysinfo import git_commit

CARD_KEY = "method_a.seeds"


def check_stage(stage: str) -> None:
    if stage != STAGE:
        raise Tr2Error(f"--extend: stage {stage!r} is not allowed; allowed: {STAGE} (the one stage whose card lists "
                       f"seeds, {CARD_KEY})")


def _next_free(taken) -> int:
    n = max(taken) + 1
    while n in taken:
        n += 1
    return n


def check_seeds(given, held: list) -> list[int]:
    """The seeds to add, as integers in the order given: each a whole number within the card's bounds, none twice
    and none the card lists already (its runs are in the folder: adding it again would run nothing, or judge a seed
    twice)."""
    if not given:
        raise Tr2Error(f"--seeds: missing; allowed: one or more integer seeds after --extend DIR, none of the card's "
                       f"{CARD_KEY} (e.g. --seeds {_next_free(set(held))})")
    lo, hi = BOUNDS[CARD_KEY]
    seeds = []
    for v in given:
        # written as digits only: int() would also take '+5', ' 5' or 1.0 from a caller, and True as 1
        text = v.strip() if isinstance(v, str) else str(v) if type(v) is int else ""
        if not re.fullmatch(r"[0-9]+", text) or not lo <= int(text) <= hi:
            raise Tr2Error(f"--seeds: {v!r} is not allowed; allowed: integers from {lo} to {hi} ({CARD_KEY})")
        seeds.append(int(text))
    for s in seeds:
        if seeds.count(s) > 1:
            raise Tr2Error(f"--seeds: {seeds!r} lists {s} twice; allowed: each seed once")
        if s in held:
            raise Tr2Error(f"--seeds: {s} is in the folder's card already ({CARD_KEY}: {list(held)!r}); allowed: "
                           f"seeds it does not list (e.g. {_next_free(set(held) | set(seeds))})")
    return seeds


def extended_card(held: dict, seeds: list) -> dict:
    """The folder's card as its card.yaml holds it with the seeds appended to method_a.seeds and nothing else
    changed (an optional key it leaves out stays out: the rewrite differs from it in the seeds alone); checked as
    every card is."""
    new = copy.deepcopy(held)
    new["method_a"]["seeds"] = list(held["method_a"]["seeds"]) + list(seeds)
    validate_card(new)
    return new


def _checked(d: Path, seeds) -> tuple[dict, list, dict]:
    """(the folder's card as written, the seeds to add, the card with them), or the one line that refuses the
    extension."""
    if not (d / "summary.json").is_file():
        raise Tr2Error(f"--extend: {str(d)!r} holds no summary.json, so its stage has not run to its end; allowed: a "
                       f"folder whose runs are done (finish them first with --resume {d})")
    held = read_card_file(d / "card.yaml")
    added = check_seeds(seeds, validate_card(held)["method_a"]["seeds"])
    return held, added, extended_card(held, added)


def extend(stage: str, d, seeds, reason) -> dict:
    """Add `seeds` to the card of `stage`'s folder d (already checked to be one: tr2.runner); returns the record
    appended to d/extended.jsonl."""
    check_stage(stage)
    d = Path(d)
    reason = check_reason(reason, "why seeds are added to this folder's card (what they are to decide)")
    _checked(d, seeds)   # a refusal before the lock: not even .lock changes
    lock = _lock(d, f"{stage} --extend")
    try:
        held, added, new = _checked(d, seeds)   # again, now that no stage can change the folder meanwhile
        old_text = (d / "card.yaml").read_text()
        taken: set = set()
        kept = free_name(d, "card.yaml", taken)
        moves = [(m, free_name(d, m, taken)) for m in finish_marks(stage) if (d / m).is_file()]
        record = {"card_key": CARD_KEY, "before": held["method_a"]["seeds"], "added": added,
                  "after": new["method_a"]["seeds"], "runs": [r["key"] for r in remaining(validate_card(new), d)],
                  "extended_at": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
                  "extended_reason": reason, "extended_by_commit": git_commit().get("commit"),
                  "extended_files": {"card.yaml": kept, **dict(moves)}}
        write_text_atomic(d / kept, old_text)   # a copy: card.yaml itself is never absent
        for src, dst in moves:
            (d / dst).parent.mkdir(parents=True, exist_ok=True)
            (d / src).rename(d / dst)
        append_jsonl(d / EXTENDED, record)
        write_text_atomic(d / "card.yaml", dump_card(new))
    finally:
        lock.close()
    return record
