"""Results folders and the atomic writes that make every stage resumable and crash-safe."""
from __future__ import annotations

import json
import os
import re
import time
from pathlib import Path

import yaml

from . import RESULTS_DIR, Tr2Error

_NAME = re.compile(r"^[A-Za-z0-9._-]+$")


# A results folder's name: <stage>-<YYYYmmdd-HHMMSS>-<card>[-<n>], made by new_results_dir; STAMP_RE reads
# back what follows "<stage>-" (the stage is told by the caller: stage names hold '_', cards may hold '-').
STAMP_RE = re.compile(r"^(\d{8}-\d{6})-(.+?)(?:-(\d+))?$")


def new_results_dir(stage: str, card_name: str, root=None) -> Path:
    """results/<stage>-<YYYYmmdd-HHMMSS>-<card>/, created empty with logs/ inside."""
    if not _NAME.match(card_name):
        raise Tr2Error(f"card: {card_name!r}; allowed: letters, digits, '.', '_' and '-'")
    root = Path(root) if root else RESULTS_DIR
    stamp = time.strftime("%Y%m%d-%H%M%S")
    path = root / f"{stage}-{stamp}-{card_name}"
    n = 1
    while path.exists():  # two stages started in the same second
        n += 1
        path = root / f"{stage}-{stamp}-{card_name}-{n}"
    (path / "logs").mkdir(parents=True)
    return path


def write_text_atomic(path, text: str) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    with open(tmp, "w") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    return path


def write_json_atomic(path, obj) -> Path:
    return write_text_atomic(path, json.dumps(obj, indent=1, sort_keys=True, default=str) + "\n")


def write_yaml_atomic(path, obj) -> Path:
    return write_text_atomic(path, yaml.safe_dump(obj, sort_keys=False))


def append_jsonl(path, record: dict) -> None:
    """One record per line, flushed and synced: a kill loses at most the line being written.

    A torn last line (a kill mid-append) is cut first: appended after it, the new record would merge into
    an unreadable line and be lost too.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    line = (json.dumps(record, sort_keys=True, default=str) + "\n").encode()
    with open(path, "a+b") as f:  # a+: created when missing; writes land at the end
        end = f.seek(0, os.SEEK_END)
        if end:
            f.seek(end - 1)
            if f.read(1) != b"\n":
                f.seek(0)
                f.truncate(f.read().rfind(b"\n") + 1)
        f.write(line)
        f.flush()
        os.fsync(f.fileno())


def read_jsonl(path) -> list[dict]:
    """Every complete record; a torn last line (a kill mid-write) is dropped, not an error."""
    path = Path(path)
    if not path.is_file():
        return []
    out = []
    for line in path.read_text().splitlines():
        if not line.strip():
            continue
        try:
            out.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return out
