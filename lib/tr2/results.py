"""Results folders and the atomic writes that make every stage resumable and crash-safe."""
from __future__ import annotations

import contextlib
import functools
import gzip
import json
import os
import re
import time
from pathlib import Path
from typing import NamedTuple, Optional

import yaml

from . import REPO_ROOT, RESULTS_DIR, Tr2Error

NAME = re.compile(r"^[A-Za-z0-9._-]+$")  # a card's name (tr2.cards), the tail of its results folders' names
STAGES = ("series", "method_a", "method_b", "footprint", "families")  # the protocol's stages, in `make all`'s order
RUNS_FILES = {"footprint": "footprint.jsonl"}  # each stage's records; the others: runs.jsonl
RETIRED = "retired.jsonl"  # records taken out of a runs file by tr2.retire, with when, why and at which commit
EXTENDED = "extended.jsonl"  # seeds added to a finished folder's card by tr2.extend, with when, why and at which commit


def runs_file(stage: str) -> str:
    """The name of the file a stage appends its run records to."""
    return RUNS_FILES.get(stage, "runs.jsonl")

# A results folder's name: <stage>-<YYYYmmdd-HHMMSS>-<card>, with -<n> after it for a second folder of the same
# stage, card and second. folder_name makes it and parse_folder_name reads it back: every listing of results
# folders (the runner, the report, tr2.explore) goes through results_folders below.
_FOLDER = re.compile(rf"^({'|'.join(STAGES)})-(\d{{8}}-\d{{6}})-((.+?)(?:-(\d+))?)$")


class FolderName(NamedTuple):
    stage: str
    stamp: str
    card: str  # as the name reads it: "x-2" is card x's second folder (card.yaml, when there, tells: folder_cards)
    n: int
    tail: str  # all after the stamp: the card and the folder's number


def folder_name(stage: str, stamp: str, card_name: str, n: int = 1) -> str:
    return f"{stage}-{stamp}-{card_name}" + (f"-{n}" if n > 1 else "")


def parse_folder_name(path) -> Optional[FolderName]:
    """The parts of a results folder's name (a path's last part), or None for any other folder."""
    m = _FOLDER.match(Path(path).name)
    return FolderName(m[1], m[2], m[4], int(m[5] or 1), m[3]) if m else None


def stage_of(path) -> Optional[str]:
    """The stage whose results folder this is, from its name; None for any other folder."""
    f = parse_folder_name(path)
    return f.stage if f else None


def folder_cards(path) -> set:
    """The card names a results folder answers to: its card.yaml's, else what its name can mean."""
    held = read_yaml(Path(path) / "card.yaml").get("card")
    f = parse_folder_name(path)
    return {held} if held else {f.card, f.tail}


def results_folders(root=None, stage=None, card=None) -> list[Path]:
    """The stages' results folders under root (default results/), oldest first (by stamp, then number); with
    stage or card given, only theirs."""
    root = Path(root) if root else RESULTS_DIR
    found = []
    for p in root.iterdir() if root.is_dir() else ():
        f = parse_folder_name(p)
        if f and p.is_dir() and stage in (None, f.stage) and (card is None or card in folder_cards(p)):
            found.append((f.stamp, f.n, p.name, p))
    return [p for *_, p in sorted(found)]


def finish_marks(stage: str) -> tuple:
    """The files whose presence says the stage ran to its end in a folder: its summary and its executed notebook."""
    return ("summary.json", f"{stage}.ipynb")


def is_finished(path) -> bool:
    """A stage ran to its end in the folder (finish_marks)."""
    return all((Path(path) / m).is_file() for m in finish_marks(stage_of(path)))


def latest(stage: str, card_name: str, root=None, finished: bool = False) -> Optional[Path]:
    """The newest results folder of stage and card (with `finished`: the newest a stage ran to its end), or None."""
    return next((p for p in reversed(results_folders(root, stage, card_name)) if not finished or is_finished(p)), None)


def stored_path(path) -> str:
    """A folder's path as a record stores it: relative to the repository's root where it lies inside it (a record
    names no machine's layout), else absolute."""
    p = Path(path).resolve()
    return str(p.relative_to(REPO_ROOT)) if p.is_relative_to(REPO_ROOT) else str(p)


def folder_path(stored) -> Path:
    """A stored path read back, either form: relative to the repository's root, or absolute (records made
    before paths were stored relative)."""
    p = Path(stored)
    return p if p.is_absolute() else REPO_ROOT / p


def new_results_dir(stage: str, card_name: str, root=None) -> Path:
    """results/<stage>-<YYYYmmdd-HHMMSS>-<card>/, created empty with logs/ inside."""
    if not NAME.match(card_name):
        raise Tr2Error(f"card: {card_name!r}; allowed: letters, digits, '.', '_' and '-'")
    root = Path(root) if root else RESULTS_DIR
    stamp = time.strftime("%Y%m%d-%H%M%S")
    n = 1
    while (root / folder_name(stage, stamp, card_name, n)).exists():  # two stages started in the same second
        n += 1
    path = root / folder_name(stage, stamp, card_name, n)
    (path / "logs").mkdir(parents=True)
    return path


VERSIONS = ("python", "numpy", "torch", "torch_cuda", "cudnn", "cupy", "triton")
MACHINE = ("host", "platform", "cpu_model", "cpu_cores", "memory_bytes", "loadavg", "date", "commit")


def conditions(path) -> dict:
    """What every number of a results folder carries (docs/protocol.md, rule 4), from its card.yaml and
    machine.json: the card, the machine with its GPUs and driver, the versions, the date and the commit."""
    card, m = read_yaml(Path(path) / "card.yaml"), read_json(Path(path) / "machine.json")
    gpus = m.get("gpus") or []
    return {"card": card.get("card"), "machine": card.get("machine"), "device": card.get("device"),
            "models": tuple(card.get("models") or ()), "dtypes": tuple(card.get("dtypes") or ()),
            **{k: m.get(k) for k in MACHINE}, "gpu": ", ".join(g.get("name", "?") for g in gpus) or None,
            "gpu_memory_mib": ", ".join(str(g["memory_mib"]) for g in gpus if g.get("memory_mib")) or None,
            "driver": ", ".join(sorted({g["driver"] for g in gpus if g.get("driver")})) or None,
            # True, False, or None where machine.json does not say (dirty_state)
            "dirty": dirty_state(m.get("dirty")),
            "tr2_environment": tr2_environment_text(m.get("tr2_environment")),
            "versions": {k: m.get(k) for k in VERSIONS}}


# What a folder's working tree state (conditions' dirty) reads as wherever it is shown.
DIRTY_TEXT = {True: "uncommitted changes", False: "clean working tree",
              None: "working tree state not recorded: no git on the machine"}
_TRUE, _FALSE = ("true", "1", "yes"), ("false", "0", "no")


def dirty_state(value) -> Optional[bool]:
    """machine.json's dirty (sysinfo.git_commit) as True (uncommitted changes), False (clean, as git said) or None (not
    recorded): "unknown" where the machine's copy of the tree had no .git (the GPU machine's), or its commit was handed
    in without its state (TR2_GIT_COMMIT without TR2_GIT_DIRTY); a string where the GPU machine's environment once
    handed the flag over (2026-11-29); missing in a machine.json that holds no commit (an error's)."""
    if isinstance(value, bool):
        return value
    if isinstance(value, str):
        v = value.strip().lower()
        return True if v in _TRUE else False if v in _FALSE else None
    return None


def dirty_text(value) -> str:
    """A working tree state as the report says it (DIRTY_TEXT), from machine.json's value or conditions' state."""
    return DIRTY_TEXT[dirty_state(value)]


def tr2_environment_text(env) -> str | None:
    """machine.json's TR2_* variables (sysinfo.tr2_environment) as one line, the commit's two left out (the conditions
    show them as commit and dirty): "none" where none was set; None where the folder predates the record (before
    2026-12-04's thirtieth session: what ran with a kernel switch set cannot be told from the folder)."""
    if env is None:
        return None
    shown = {k: v for k, v in env.items() if k not in ("TR2_GIT_COMMIT", "TR2_GIT_DIRTY")}
    return ", ".join(f"{k}={v}" for k, v in sorted(shown.items())) or "none"


_SWITCH_READ = re.compile(r'kernel_switch\(\s*"(TR2_[A-Z0-9_]+)"')
_SWITCH_RETIRED = re.compile(r'^    "(TR2_[A-Z0-9_]+)": ', re.M)   # gpu/__init__.py's RETIRED, one key a line


@functools.cache
def kernel_switch_names() -> frozenset:
    """The kernel switches' names, read from the cupy side's sources (no CuPy needed): every `kernel_switch("TR2_...")`
    the modules read, and the retired ones (gpu.RETIRED), which a folder made before their removal may have set. The
    TR2_* variables outside it are the machine's (paths, the commit handed in, the deadline), not the program's."""
    root = REPO_ROOT / "lib" / "tr2" / "cupy_side"
    names = {n for path in root.rglob("*.py") for n in _SWITCH_READ.findall(path.read_text())}
    return frozenset(names | set(_SWITCH_RETIRED.findall((root / "gpu" / "__init__.py").read_text())))


def kernel_switches_set(path) -> Optional[dict]:
    """The kernel switches a folder's runs ran with (machine.json's tr2_environment, kernel_switch_names' keys only,
    blank values left out as kernel_switch reads them): {} where none was set, None where the folder predates the
    record (before the thirtieth session), so what it ran with cannot be told."""
    env = read_json(Path(path) / "machine.json").get("tr2_environment")
    if env is None:
        return None
    names = kernel_switch_names()
    return {k: str(v) for k, v in sorted(env.items()) if k in names and str(v).strip()}


def read_json(path) -> dict:
    """A JSON file's contents; {} where it is missing or unreadable (a stage stopped before writing it)."""
    try:
        return json.loads(Path(path).read_text())
    except (OSError, ValueError):   # ValueError: not JSON, or not UTF-8 text (UnicodeDecodeError)
        return {}


def read_yaml(path) -> dict:
    """A YAML file's mapping, unchecked; {} where it is missing or unreadable."""
    try:
        return yaml.safe_load(Path(path).read_text()) or {}
    except (OSError, UnicodeDecodeError, yaml.YAMLError):
        return {}


def write_text_atomic(path, text: str) -> Path:
    """The text written whole or not at all; a path ending in .gz is gzip-compressed (no time stamp inside, so
    the same text gives the same bytes): pandas and zcat read it as it is."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    data = text.encode()
    if path.suffix == ".gz":
        data = gzip.compress(data, mtime=0)
    try:
        with open(tmp, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)   # "whole or not at all": no .tmp file left beside it either (path a folder, a kill)
        raise
    return path


def write_json_atomic(path, obj) -> Path:
    return write_text_atomic(path, json.dumps(obj, indent=1, sort_keys=True, default=str) + "\n")


def write_yaml_atomic(path, obj) -> Path:
    return write_text_atomic(path, yaml.safe_dump(obj, sort_keys=False))


def jsonl_line(record: dict) -> str:
    """A record as a runs file holds it: one line, keys sorted."""
    return json.dumps(record, sort_keys=True, default=str) + "\n"


def append_jsonl(path, record: dict) -> None:
    """One record per line, flushed and synced: a kill loses at most the line being written. A torn last line (a
    kill mid-append) is cut first: appended after it, the new record would merge into an unreadable line and be lost."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    line = jsonl_line(record).encode()
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
    """Every complete record (a JSON mapping a line); a torn last line (a kill mid-write) is dropped, not an error, and
    so is a line that holds no record (bytes that are not UTF-8, a list: every reader calls .get on a record)."""
    path = Path(path)
    if not path.is_file():
        return []
    out = []
    for line in path.read_bytes().decode("utf-8", "replace").splitlines():
        with contextlib.suppress(json.JSONDecodeError):  # also a blank line
            record = json.loads(line)
            if isinstance(record, dict):
                out.append(record)
    return out


def products_read(path) -> list[dict]:
    """The cuBLASLt products records a folder's runs read (amendment 4.3; tr2.products_kept), kept and retired runs
    alike, one entry a record: {"name": the file the runs read (under .cache/products/ or $TR2_PRODUCTS_DIR),
    "sha256": the digest its bytes had (None where the log is from before 2026-12-05 and gives none), "products": how
    many it held (0 with no digest: there was no file, cuBLASLt's heuristic chose), "kept": the folder's copy
    (products/<name>-<12 hex>.json, relative to the folder) or None, "not_kept": why none where the run's record says,
    "runs": how many runs read it}; in the order first read. From each run's products_record, else from its log
    (trainlog.parse_products_record: its last record). [] where no run names one (PyTorch's sides, the NumPy form,
    a log that does not say: the families stage's profiled runs)."""
    from .products_kept import KEPT_DIR, kept_name   # here: products_kept reads logs through trainlog, which reads results
    from .trainlog import parse_products_record
    path = Path(path)
    stage = stage_of(path)
    found: dict = {}
    for rec in read_jsonl(path / runs_file(stage)) + read_jsonl(path / RETIRED):
        pr = rec.get("products_record")
        if not isinstance(pr, dict):
            log = (rec.get("retired_files") or {}).get("log") if rec.get("retired_at") else rec.get("log")
            try:
                named = parse_products_record((path / log).read_text(errors="replace")) if log else []
            except OSError:
                named = []
            if not named:
                continue
            pr = {"read_from": named[-1]["path"], "sha256": named[-1]["sha256"], "products": named[-1]["products"]}
        name, sha = Path(str(pr.get("read_from") or "")).name, pr.get("sha256")
        if not name:
            continue
        entry = found.setdefault((name, sha, pr.get("products")), {"name": name, "sha256": sha,
                                                                   "products": pr.get("products"), "kept": None,
                                                                   "not_kept": None, "runs": 0})
        entry["runs"] += 1
        copy = pr.get("file") or (f"{KEPT_DIR}/{kept_name(name, sha)}" if sha else None)
        if entry["kept"] is None and copy and (path / copy).is_file():
            entry["kept"] = copy
        entry["not_kept"] = entry["not_kept"] or pr.get("not_kept")
    return list(found.values())
