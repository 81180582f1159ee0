"""The products record (tr2.cupy_side.products) on the CPU: keys, the choice rule, the file and bad inputs.
Its GPU half (every cuBLASLt candidate against NumPy, a record built and read back) is tests/test_products_gpu.py."""
from __future__ import annotations

import json
import math

import pytest

from tr2.cupy_side import products

KEY = (0, 1, 8192, 2304, 768, 14, 768, 14, 768, 14, 2304, 68, 1, 256, 256, 256)


def test_key_text_round_trips_and_names_every_field():
    text = products.key_text(KEY)
    assert text.startswith("ta=0 tb=1 M=8192 N=2304 K=768 ")
    assert products.parse_key(text) == KEY
    with pytest.raises(ValueError, match="16 fields"):
        products.key_text(KEY[:-1])
    with pytest.raises(ValueError, match="expected the fields"):
        products.parse_key(text.replace("ta=0 tb=1", "tb=1 ta=0"))


def test_fastest_skips_candidates_that_did_not_run():
    assert products.fastest([0.3, None, 0.1, math.nan, 0.2]) == 2
    with pytest.raises(products.RecordError, match="no candidate"):
        products.fastest([None, math.nan])


def test_record_path_is_per_card_and_version(tmp_path, monkeypatch):
    monkeypatch.setenv("TR2_PRODUCTS_DIR", str(tmp_path))
    assert products.record_path("NVIDIA H200", 130100) == tmp_path / "nvidia-h200-cublaslt130100.json"
    assert products.record_path("NVIDIA H200", 130200) != products.record_path("NVIDIA H100 80GB HBM3", 130100)


def test_record_written_atomically_and_read_back(tmp_path):
    path = tmp_path / "sub" / "card.json"
    assert products.read_record(path) == {}          # no file: no record, the heuristic's choices
    choice = {"algo": list(range(8)), "workspace": 1024, "ms": 0.1}
    products.write_record(path, "card", 7, {products.key_text(KEY): choice})
    assert products.read_record(path) == {products.key_text(KEY): choice}
    assert json.loads(path.read_text())["cublaslt_version"] == 7
    assert [p.name for p in path.parent.iterdir()] == ["card.json"]   # no temporary file left


@pytest.mark.parametrize("body, says", [
    ("{", "JSONDecodeError"),
    ('{"products": []}', "'products' is not a mapping"),
    ('{"products": {"ta=0": {"algo": [1], "workspace": 0}}}', "expected the fields"),
    ('{"products": {"%s": {"algo": [1, 2], "workspace": 0}}}' % products.key_text(KEY), "8 words"),
    ('{"products": {"%s": {"workspace": 0}}}' % products.key_text(KEY), "KeyError"),
])
def test_a_damaged_record_stops_the_run_naming_the_file(tmp_path, body, says):
    path = tmp_path / "card.json"
    path.write_text(body)
    with pytest.raises(products.RecordError, match=f"products record {path}: not a record .*{says}"):
        products.read_record(path)


def test_builds_and_models_are_checked_by_name(capsys):
    assert products.parse_builds("bf16r,tf32") == ["bf16r", "tf32"]
    with pytest.raises(ValueError, match=r"--builds: 'bf16r,bf32' is not allowed; allowed: .*f32, tf32, bf16, bf16r, f16, f16r"):
        products.parse_builds("bf16r,bf32")
    for argv, said in ((["--models", "gpt3"], "--models: 'gpt3' is not allowed; allowed: a comma-separated list of "),
                       (["--builds", "bf32"], "--builds: 'bf32' is not allowed; allowed: a comma-separated list of ")):
        with pytest.raises(SystemExit) as e:
            products.main(argv)
        err = capsys.readouterr().err.strip().splitlines()
        assert e.value.code == 2 and len(err) == 1 and err[0].startswith("tr2.cupy_side.products: error: " + said), err
