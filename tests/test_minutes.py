"""scripts/h200_minutes.py (issue 11, item 6): the GPU seconds each kind of run costs on the H200, read from
committed results folders only; the table in docs/ is what the committed folders give, to the character."""
import importlib.util
import json
import subprocess
import sys

import pytest

from tr2 import REPO_ROOT, RESULTS_DIR, Tr2Error, series
from tr2.cards import load_card

_spec = importlib.util.spec_from_file_location("h200_minutes", REPO_ROOT / "scripts" / "h200_minutes.py")
minutes = importlib.util.module_from_spec(_spec)
sys.modules["h200_minutes"] = minutes   # its dataclasses look their module up there
_spec.loader.exec_module(minutes)


def _bench(path, records):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in records))


def _rec(side, mode=None, step_ms=5.0, wall_s=4.0, steps=400, status="ok", graph=True, hr=True, dtype="bfloat16"):
    return {"phase": "bench", "model": "nanogpt", "dtype": dtype, "side": side, "mode": mode, "status": status,
            "half_roundings": hr and side == "cupy", "cuda_graph": graph and side == "cupy", "steps": steps,
            "window": [100, steps], "step_ms": step_ms, "wall_s": wall_s, "peak_bytes": 2_000_000_000}


@pytest.fixture
def synthetic(tmp_path, monkeypatch):
    """A results root holding one bench file: the cupy graph (one run, cold), torch reduce-overhead (a cold run and
    a warm one), and runs the model must not read (the cupy side without its graph, a timed-out run)."""
    rel = "h200-x/call1-abc/bench/bench.jsonl"
    _bench(tmp_path / rel, [
        _rec("cupy", step_ms=5.0, wall_s=4.0),
        _rec("torch", "reduce-overhead", step_ms=5.5, wall_s=30.0),
        _rec("cupy", graph=False, step_ms=7.0, wall_s=9.0),
        _rec("torch", "eager", status="timeout", wall_s=99.0),
        _rec("torch", "reduce-overhead", step_ms=5.5, wall_s=22.0),
    ])
    monkeypatch.setattr(minutes, "BENCH", {rel: ("cupy", "torch")})
    monkeypatch.setattr(minutes, "QUICK", {**minutes.QUICK, "series": "no-such-folder"})
    return minutes.Model(minutes.observations(tmp_path), tmp_path)


def test_a_runs_start_is_its_wall_time_less_its_steps(synthetic):
    c = synthetic.cost("nanogpt", "bfloat16", "cupy-hr")
    assert (c.basis, c.step_ms, c.cold_s, c.n) == ("measured", 5.0, pytest.approx(2.0), 1)  # 4 s - 400 x 5 ms
    r = synthetic.cost("nanogpt", "bfloat16", "torch-reduce-overhead")
    assert (r.cold_s, r.warm_s, r.warm_measured) == (pytest.approx(27.8), pytest.approx(19.8), True)
    assert r.run_s(400, cold=False) == pytest.approx(22.0)
    assert synthetic.measured("nanogpt", "bfloat16", "torch-eager") is None  # a timed-out run measures nothing
    assert [o.cold for o in synthetic.obs] == [True, True, False]              # no graph: not the series' cupy side


def test_a_variant_library_is_left_out_and_a_machine_left_warm_starts_warm(tmp_path, monkeypatch):
    """A run with a variant library ("lib") is not the program's; a call on the machine an earlier call left
    (WARM_MACHINE) starts warm in the configurations that call ran, cold in the others."""
    first, second = "h200-x/call1-abc/bench/bench.jsonl", "h200-x/call2-abc/bench/bench.jsonl"
    _bench(tmp_path / first, [_rec("cupy", step_ms=5.0, wall_s=4.0) | {"lib": "pdl"},
                              _rec("torch", "reduce-overhead", step_ms=5.5, wall_s=30.0)])
    _bench(tmp_path / second, [_rec("torch", "reduce-overhead", step_ms=5.5, wall_s=22.0),
                               _rec("torch", "reduce-overhead", dtype="float16", step_ms=6.0, wall_s=31.0),
                               _rec("cupy", step_ms=4.0, wall_s=3.0) | {"lib": None}])
    monkeypatch.setattr(minutes, "BENCH", {first: ("cupy", "torch"), second: ("cupy", "torch")})
    monkeypatch.setattr(minutes, "WARM_MACHINE", {second: first})
    monkeypatch.setattr(minutes, "QUICK", {**minutes.QUICK, "series": "no-such-folder"})
    obs = minutes.observations(tmp_path)
    assert [(o.dtype, o.build, o.cold, o.step_ms) for o in obs] == [
        ("bfloat16", "torch-reduce-overhead", True, 5.5), ("bfloat16", "torch-reduce-overhead", False, 5.5),
        ("float16", "torch-reduce-overhead", True, 6.0), ("bfloat16", "cupy-hr", True, 4.0)]


def test_what_was_never_timed_is_estimated_from_what_was_and_says_so(synthetic):
    ma = synthetic.cost("nanogpt", "bfloat16", "torch-max-autotune")
    assert ma.cold_s == pytest.approx(27.8 + minutes.MAX_AUTOTUNE_COMPILE_S) and ma.warm_s == pytest.approx(19.8)
    assert ma.basis.startswith("estimated: reduce-overhead's step")
    ng = synthetic.cost("nanogpt", "bfloat16", "nanogpt-reduce-overhead")
    assert (ng.step_ms, ng.cold_s) == (5.5, pytest.approx(27.8)) and "as our torch loop" in ng.basis
    with pytest.raises(Tr2Error, match="no committed H200 run of nanogpt/float32/cupy"):
        synthetic.cost("nanogpt", "float16", "cupy")   # the exact build is estimated from float32's, never timed here


def test_default_in_bfloat16_never_timed_is_an_error_not_an_endless_loop(synthetic):
    """Default mode's other types are estimated from its bfloat16 runs; with none of those, one line (found
    2026-12-04: a device tree without the sources recursed until Python stopped it)."""
    with pytest.raises(Tr2Error, match="no committed H200 run of nanogpt/bfloat16/torch-default"):
        synthetic.cost("nanogpt", "bfloat16", "torch-default")
    with pytest.raises(Tr2Error, match="no committed H200 run of nanogpt/bfloat16/torch-default"):
        synthetic.cost("nanogpt", "float32", "torch-default")


def test_a_tree_without_the_sources_gives_no_model(tmp_path, monkeypatch):
    """A device tree made slim holds none of the committed folders: load says so instead of modelling from none."""
    (tmp_path / minutes.SOURCES[0]).parent.mkdir(parents=True)
    (tmp_path / minutes.SOURCES[0]).write_text("")
    with pytest.raises(Tr2Error, match=rf"^h200_minutes: {len(minutes.SOURCES) - 1} of its {len(minutes.SOURCES)} "
                                       rf"sources are not under .*\(first: {minutes.SOURCES[1]}\).*slim"):
        minutes.load(tmp_path)
    monkeypatch.setattr(minutes, "RESULTS_DIR", tmp_path)
    with pytest.raises(Tr2Error, match="sources are not under"):
        minutes.stage_total(load_card("h200-edition"), "method_a")


def test_a_series_kind_is_its_start_plus_its_steps(synthetic):
    card = load_card("h200-edition")
    warm = minutes.kind_run(synthetic, card, "series", "nanogpt/bfloat16/torch-reduce-overhead (caches warm)")
    cold = minutes.kind_run(synthetic, card, "series", "nanogpt/bfloat16/torch-reduce-overhead (cold compile)")
    assert (warm.seconds, cold.seconds) == (pytest.approx(19.8 + 2.2), pytest.approx(27.8 + 2.2))


def test_every_source_is_a_committed_file_or_folder():
    tracked = subprocess.run(["git", "-C", str(RESULTS_DIR), "ls-files", "--", "."], capture_output=True, text=True)
    if tracked.returncode != 0:
        pytest.skip("no git here to tell what is committed")
    files = set(tracked.stdout.splitlines())
    for src in minutes.SOURCES:
        assert src in files or any(f.startswith(src + "/") for f in files), src


def test_sources_lists_every_source_under_results(capsys):
    assert minutes.main(["sources"]) == 0
    assert capsys.readouterr().out.splitlines() == [f"results/{s}" for s in minutes.SOURCES]


def test_the_committed_table_is_what_the_committed_folders_give():
    """docs/h200-minutes.csv is written by `python scripts/h200_minutes.py table` from results/ alone: rerunning it on the
    committed tree gives the same bytes (a new committed folder that changes a number changes the table too)."""
    assert minutes.csv_text(minutes.table(load_card("h200"))) == (REPO_ROOT / "docs" / "h200-minutes.csv").read_text()


def test_the_fresh_plan_names_the_kinds_the_stages_name():
    card = load_card("h200-edition")
    kinds = minutes.fresh_kinds(card, "series")
    assert len(kinds) == len(series.plan(card)) == 8 * 4
    assert sum(k.endswith("(cold compile)") for k in kinds) == 8   # round 0 of each configuration
    assert minutes.fresh_kinds(card, "method_a")[:2] == ["nanogpt/float32/torch", "nanogpt/float32/cupy"]
    rec = {"config": "nanogpt/float32/cupy", "round": 2, "cold_compile": False}
    assert series.record_kind(rec) == "nanogpt/float32/cupy (caches warm)" and series.record_kind(rec) in kinds


def test_the_edition_fits_its_sessions_in_commands_under_nine_minutes():
    card = load_card("h200-edition")
    cmds = minutes.pieces(card)
    assert all(c["seconds"] <= minutes.PIECE_S for c in cmds) and cmds[-1]["session"] <= 3
    for st in minutes.DESC:   # every run in exactly one command, in running order
        spans = [c["stages"][st] for c in cmds if st in c["stages"]]
        assert spans[0][0] == 1 and spans[-1][1] == len(minutes.fresh_kinds(card, st))
        assert all(a[1] + 1 == b[0] for a, b in zip(spans, spans[1:]))
    assert len([c for c in cmds if "method_b" in c["stages"]]) == 1   # its runs read the start its first run wrote
    per_session = {}
    for c in cmds:
        per_session[c["session"]] = per_session.get(c["session"], 0.0) + c["seconds"]
    assert max(per_session.values()) <= minutes.SESSION_S


def test_the_plan_prints_every_kind_with_its_estimate():
    text = minutes.plan_text(load_card("h200-edition"), "method_b")
    assert text.startswith("method B: 14 runs\n") and text.rstrip().split("\n")[-1].startswith("  estimate: ")

