"""The products records a stage's cupy runs read, kept in the stage's folder by their content.

A cupy GPU run chooses each matrix product's cuBLASLt algorithm from the card's products record (issue 9, item 3;
tr2.cupy_side.products), read from a cache outside results/ (.cache/products/, carried to the GPU machine). Its log
names the file and the sha256 of the bytes it read (trainlog.products_record_text). So that a folder says which
record each run used, and holds it, the stage copies every record its runs name into `products/` beside them, as
`<the record's name>-<12 hex of its sha256>.json`, once per content, and the run's record carries
`products_record` {"sha256", "file", "products"}. A record that changed or went between the run's reading and the
copy is not copied (the run's record says why): a copy is kept only where its bytes are the ones the run read.
"""
from __future__ import annotations

import hashlib
import os
import tempfile
from pathlib import Path
from typing import Optional

from .trainlog import parse_products_record

KEPT_DIR = "products"


def kept_name(path: str, sha256: str) -> str:
    return f"{Path(path).stem}-{sha256[:12]}.json"


def keep(folder, log: Optional[str]) -> Optional[dict]:
    """The products record the run whose log is `log` (relative to `folder`, as run records give it) read, kept in
    folder/products/ where it is not yet; None where the log names none (PyTorch's sides, the NumPy form, a run
    that ended before its backend was made, cublasGemmEx). A log naming several records (it should not) gives its
    last. Never raises for what the run or the cache did: the answer says what was kept or why not."""
    if not log:
        return None
    p = Path(folder) / log
    try:
        text = p.read_text(errors="replace")
    except OSError:
        return None
    found = parse_products_record(text)
    if not found:
        return None
    r = found[-1]
    out = {"sha256": r["sha256"], "products": r["products"], "read_from": r["path"]}
    if r["sha256"] is None:
        out["file"] = None
        out["not_kept"] = "the run read no record file (cuBLASLt's heuristic chose)" if r["products"] == 0 \
            else "the run's log gives no digest (a program from before 2026-12-05)"
        return out
    dest = Path(folder) / KEPT_DIR / kept_name(r["path"], r["sha256"])
    out["file"] = f"{KEPT_DIR}/{dest.name}"
    if dest.is_file():
        return out
    try:
        raw = Path(r["path"]).read_bytes()
    except OSError as e:
        return {**out, "file": None, "not_kept": f"{r['path']} could not be read after the run ({e.strerror or e})"}
    if hashlib.sha256(raw).hexdigest() != r["sha256"]:
        return {**out, "file": None, "not_kept": f"{r['path']} changed after the run read it (another sha256 now)"}
    dest.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=dest.parent, prefix=dest.name + ".", suffix=".tmp")
    with os.fdopen(fd, "wb") as f:
        f.write(raw)
    os.replace(tmp, dest)   # atomic: a folder never holds half a record
    return out
