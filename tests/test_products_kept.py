"""The products record a cupy run read: its digest in the run's log, and the copy a stage keeps beside its runs
(tr2.products_kept, trainlog's record text). CPU only: the log lines are written as gpu/backend.py writes them."""
from __future__ import annotations

import hashlib
import json

from tr2 import products_kept, trainlog
from tr2.cupy_side import products


def _record(tmp_path, body=None):
    path = tmp_path / "cache" / "nvidia-h200-cublaslt130100.json"
    choice = {"algo": list(range(8)), "workspace": 0, "ms": 0.1}
    products.write_record(path, "NVIDIA H200", 130100, body or {products.key_text(
        (0, 1, 64, 64, 64, 14, 64, 14, 64, 14, 64, 68, 1, 256, 256, 256)): choice})
    return path


def _log(folder, text):
    (folder / "logs").mkdir(parents=True, exist_ok=True)
    (folder / "logs" / "r0.log").write_text(text)
    return "logs/r0.log"


def test_the_digest_is_that_of_the_bytes_read(tmp_path):
    path = _record(tmp_path)
    got, digest = products.read_record_digest(path)
    assert digest == hashlib.sha256(path.read_bytes()).hexdigest()
    assert got == products.read_record(path) and len(got) == 1
    assert products.read_record_digest(tmp_path / "none.json") == ({}, None)


def test_the_log_text_round_trips():
    d = "ab" * 32
    text = "cupy side: model x, backend CudaBackend('bfloat16', products bf16 through cuBLASLt, " \
           + trainlog.products_record_text("/w/.cache/products/r.json", 171, d) + "), device cuda"
    assert trainlog.parse_products_record(text) == [{"path": "/w/.cache/products/r.json", "products": 171, "sha256": d}]
    none = trainlog.products_record_text("/w/r.json", 0, None)
    assert none == "record /w/r.json (0 products timed, no file)"
    assert trainlog.parse_products_record(none) == [{"path": "/w/r.json", "products": 0, "sha256": None}]
    # a log of before the digest (the H200 edition's) still names its record
    old = "record /work/main/.cache/products/nvidia-h200-cublaslt130100.json (171 products timed)), device cuda"
    assert trainlog.parse_products_record(old)[0]["products"] == 171
    assert trainlog.parse_products_record(old)[0]["sha256"] is None


def test_a_stage_keeps_the_record_once_by_content(tmp_path):
    path = _record(tmp_path)
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    folder = tmp_path / "series-x"
    log = _log(folder, "cupy side: ... " + trainlog.products_record_text(path, 1, digest) + ")\niter 0: loss 1.0\n")
    got = products_kept.keep(folder, log)
    assert got == {"sha256": digest, "products": 1, "read_from": str(path),
                   "file": f"products/nvidia-h200-cublaslt130100-{digest[:12]}.json"}
    kept = folder / got["file"]
    assert kept.read_bytes() == path.read_bytes()
    kept.write_text("{}")   # kept once: a second run of the same record leaves the copy alone
    assert products_kept.keep(folder, log)["file"] == got["file"] and kept.read_text() == "{}"
    assert [p.name for p in (folder / "products").iterdir()] == [kept.name]   # no temporary left


def test_a_record_changed_after_the_run_is_not_kept(tmp_path):
    path = _record(tmp_path)
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    folder = tmp_path / "f"
    log = _log(folder, trainlog.products_record_text(path, 1, digest))
    body = json.loads(path.read_text())
    body["products"] = {}
    path.write_text(json.dumps(body))
    got = products_kept.keep(folder, log)
    assert got["file"] is None and "changed after the run read it" in got["not_kept"]
    assert not (folder / "products").exists()
    path.unlink()
    assert "could not be read" in products_kept.keep(folder, log)["not_kept"]


def test_runs_without_a_record_say_so_or_nothing(tmp_path):
    folder = tmp_path / "f"
    assert products_kept.keep(folder, None) is None
    assert products_kept.keep(folder, "logs/missing.log") is None
    assert products_kept.keep(folder, _log(folder, "iter 0: loss 1.0, time 3.00ms\n")) is None   # torch's side
    got = products_kept.keep(folder, _log(folder, trainlog.products_record_text("/c/r.json", 0, None)))
    assert got["file"] is None and "no record file" in got["not_kept"]
    got = products_kept.keep(folder, _log(folder, "record /c/r.json (171 products timed)), device"))
    assert got["file"] is None and "before 2026-12-05" in got["not_kept"]


def test_a_record_path_with_spaces_is_read_whole():
    d = "cd" * 32
    text = "backend CudaBackend(x through cuBLASLt, " + trainlog.products_record_text("/my work/.cache/r.json", 3, d) + ")"
    assert trainlog.parse_products_record(text) == [{"path": "/my work/.cache/r.json", "products": 3, "sha256": d}]
