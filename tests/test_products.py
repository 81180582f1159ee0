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


# ------------------------------------------------------------------ the record where a run must read it, and its name
RECORD_BODY = {"card": "NVIDIA H200", "cublaslt_version": 130100,
               "products": {products.key_text(KEY): {"algo": list(range(8)), "workspace": 0, "ms": 0.1}}}


@pytest.mark.parametrize("value, run, stage", [("", False, True), ("0", False, False), ("1", True, True),
                                               (" 1 ", True, True)])
def test_the_requirement_is_read_from_the_environment(monkeypatch, value, run, stage):
    """Unset: off for a single run (products.check_required), on for a GPU card's stage (cards.check_products_record)."""
    monkeypatch.setenv("TR2_REQUIRE_PRODUCTS", value)
    assert products.required() is run
    assert products.required(default=True) is stage


def test_a_bad_requirement_value_is_refused_naming_what_is_allowed(monkeypatch):
    monkeypatch.setenv("TR2_REQUIRE_PRODUCTS", "yes")
    with pytest.raises(products.RecordError, match=r"^TR2_REQUIRE_PRODUCTS: 'yes' is not allowed; allowed: 1 "):
        products.required()


def test_a_required_record_that_is_missing_stops_the_run_naming_the_file_and_the_folder(tmp_path, monkeypatch):
    # the fifty-ninth session's carry: the record under its kept name (digest appended), which no run looks for
    (tmp_path / "nvidia-h200-cublaslt130100-35893974ed25.json").write_text(json.dumps(RECORD_BODY))
    path = tmp_path / "nvidia-h200-cublaslt130100.json"
    monkeypatch.delenv("TR2_REQUIRE_PRODUCTS", raising=False)
    products.check_required(path, None, "NVIDIA H200", 130100)   # not required: the heuristic chooses, no word
    monkeypatch.setenv("TR2_REQUIRE_PRODUCTS", "1")
    products.check_required(path, "ab" * 32, "NVIDIA H200", 130100)   # a record was read: nothing to say
    with pytest.raises(products.RecordError) as e:
        products.check_required(path, None, "NVIDIA H200", 130100)
    assert str(e.value) == (
        f"TR2_REQUIRE_PRODUCTS=1 and there is no products record at {path} (card 'NVIDIA H200', cuBLASLt 130100); "
        f"{tmp_path} holds nvidia-h200-cublaslt130100-35893974ed25.json; allowed: the record under that name "
        "(`python -m tr2.cupy_side.products --place FILE` puts a record under the name its content gives; "
        "`python -m tr2.cupy_side.products` builds one), or TR2_REQUIRE_PRODUCTS=0 to let cuBLASLt's heuristic "
        "choose")
    assert products.folder_listing(tmp_path / "none") == f"{tmp_path / 'none'} does not exist"
    (tmp_path / "empty").mkdir()
    assert products.folder_listing(tmp_path / "empty") == f"{tmp_path / 'empty'} is empty"
    for i in range(8):
        (tmp_path / "empty" / f"f{i}.json").write_text("{}")
    assert products.folder_listing(tmp_path / "empty").endswith("holds f0.json, f1.json, f2.json, f3.json, f4.json, "
                                                                "f5.json and 2 more")


def test_place_puts_each_record_under_the_name_its_content_gives(tmp_path, monkeypatch):
    kept = tmp_path / "kept" / "nvidia-h200-cublaslt130100-35893974ed25.json"
    kept.parent.mkdir()
    kept.write_text(json.dumps(RECORD_BODY))
    other = tmp_path / "kept" / "anything.json"
    other.write_text(json.dumps(dict(RECORD_BODY, card="NVIDIA H100 80GB HBM3")))
    cache = tmp_path / "cache"
    monkeypatch.setenv("TR2_PRODUCTS_DIR", str(cache))
    assert products.canonical_name(kept) == "nvidia-h200-cublaslt130100.json"
    assert products.main(["--place", str(kept), str(other)]) == 0
    assert sorted(p.name for p in cache.iterdir()) == ["nvidia-h100-80gb-hbm3-cublaslt130100.json",
                                                       "nvidia-h200-cublaslt130100.json"]
    # the name the runs look for now holds the record, byte for byte
    assert products.record_path("NVIDIA H200", 130100).read_bytes() == kept.read_bytes()
    assert products.records_for("NVIDIA H200") == [cache / "nvidia-h200-cublaslt130100.json"]
    (cache / kept.name).write_bytes(kept.read_bytes())   # a kept copy's name beside it is no record a run reads
    assert products.records_for("NVIDIA H200") == [cache / "nvidia-h200-cublaslt130100.json"]
    assert products.records_for("NVIDIA H100 PCIe") == []


def test_place_refuses_two_records_of_one_name_and_a_file_that_is_not_one(tmp_path, monkeypatch, capsys):
    a, b, bad = tmp_path / "a.json", tmp_path / "b.json", tmp_path / "bad.json"
    a.write_text(json.dumps(RECORD_BODY))
    b.write_text(json.dumps(dict(RECORD_BODY, products={})))
    bad.write_text(json.dumps({"products": {}}))   # a record without its card: no name to give it
    cache = tmp_path / "cache"
    with pytest.raises(products.RecordError, match=f"^products records {a} and {b} both name "
                                                   "nvidia-h200-cublaslt130100.json and differ"):
        products.place([a, b], cache)
    assert not cache.exists()   # refused before anything was copied
    with pytest.raises(products.RecordError, match=f"^products record {bad}: its 'card' and 'cublaslt_version' "
                                                   "give no name .KeyError"):
        products.place([bad], cache)
    with pytest.raises(products.RecordError, match=f"^products record {tmp_path / 'no.json'}: not a file"):
        products.place([tmp_path / "no.json"], cache)
    monkeypatch.setenv("TR2_PRODUCTS_DIR", str(cache))
    with pytest.raises(SystemExit) as e:
        products.main(["--place", str(a), str(b)])
    assert e.value.code == 2 and "both name nvidia-h200-cublaslt130100.json and differ" in capsys.readouterr().err


@pytest.mark.parametrize("card, models, builds", [
    ("h200", "nanogpt,gpt2-small,gpt2-medium", "tf32,bf16,bf16r,f16,f16r,f32"),   # the exact builds too (rule 22)
    ("h200-edition", "nanogpt,gpt2-small", "tf32,bf16r,f32"),
    ("h200-quick", "nanogpt", "bf16r,f32"),   # method B's plain float32 on every card (rule 54)
])
def test_a_card_names_the_models_and_builds_its_cupy_runs_take(card, models, builds):
    from tr2.cards import load_card
    assert products.card_builds(load_card(card)) == (models, builds)
    assert products.parse_builds(builds)   # every build a name the timing knows


def test_card_is_refused_beside_models_or_builds_and_a_bad_card_in_one_line(capsys):
    with pytest.raises(SystemExit) as e:
        products.main(["--card", "h200-quick", "--builds", "bf16r"])
    assert e.value.code == 2
    assert "--card: 'h200-quick' with --models or --builds is not allowed; allowed: --card alone" in capsys.readouterr().err
    with pytest.raises(SystemExit) as e:
        products.main(["--card", "no-such-card"])
    err = capsys.readouterr().err.strip().splitlines()
    assert e.value.code == 2 and err == [f"tr2.cupy_side.products: error: card file: 'no-such-card' does not exist; "
                                         f"{err[0].split('does not exist; ', 1)[1]}"], err
    assert "allowed: a YAML file such as params/cards/cpu.yaml, or a name: cpu | h200 |" in err[0]
