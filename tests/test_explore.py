"""tr2.explore: the committed results read back as the stages' own summaries state them, and small made-up
folders for what the committed ones do not show (a retried run, a torn line, a missing table, a comparison)."""
import json
from pathlib import Path

import pytest
import yaml

from tr2 import REPO_ROOT, RESULTS_DIR, results
import tr2.explore as ex

CPU = {st: RESULTS_DIR / name for st, name in [
    ("series", "series-20261129-092052-cpu"), ("method_a", "method_a-20261129-092650-cpu"),
    ("method_b", "method_b-20261129-092337-cpu"), ("families", "families-20261129-092501-cpu"),
    ("footprint", "footprint-20261129-092413-cpu")]}


def _summary(path):
    return json.loads((path / "summary.json").read_text())


def test_stage_of_reads_the_folder_name():
    assert ex.stage_of("results/method_a-20261129-092259-cpu") == "method_a"
    assert ex.stage_of("x/series-20261129-090624-h200-nanogpt") == "series"
    assert ex.stage_of("results/h200-checks-20261129") is None  # a folder of GPU calls, no stage's
    assert ex.stage_of("results/series-notes") is None  # no stamp


def test_folder_names_are_made_and_read_in_one_place(tmp_path):
    name = results.folder_name("method_b", "20261201-120000", "h200-quick", 2)
    assert name == "method_b-20261201-120000-h200-quick-2"
    assert results.parse_folder_name(tmp_path / name) == ("method_b", "20261201-120000", "h200-quick", 2, "h200-quick-2")
    assert results.parse_folder_name("series-20261201-120000-cpu") == ("series", "20261201-120000", "cpu", 1, "cpu")
    assert results.parse_folder_name("bench-20261201-120000-cpu") is None  # no stage's
    made = [results.new_results_dir("series", "cpu", root=tmp_path) for _ in range(2)]  # mostly within one second
    assert [results.folder_name(*results.parse_folder_name(p)[:4]) for p in made] == [p.name for p in made]
    assert results.results_folders(tmp_path) == made and results.results_folders(tmp_path, card="cpu") == made
    assert results.results_folders(tmp_path, stage="method_a") == [] and results.latest("series", "cpu", tmp_path) == made[1]
    for p, card in zip(made, ("cpu-2", "cpu")):  # the card a folder holds decides, not what its name can mean
        (p / "card.yaml").write_text(f"card: {card}\n")
    assert results.results_folders(tmp_path, card="cpu-2") == [made[0]]
    assert results.results_folders(tmp_path, card="cpu") == [made[1]]


def test_index_lists_the_committed_stage_folders_and_nothing_else():
    idx = ex.index()
    names = set(idx["folder"])
    assert {p.name for p in CPU.values()} <= names
    assert "h200-checks-20261129" not in names and "gpu-kernels-20261129" not in names
    row = idx[idx["folder"] == CPU["series"].name].iloc[0]
    assert (row["stage"], row["card"], row["models"], row["dtypes"]) == ("series", "cpu", ("tiny",), ("float32",))
    assert row["commit"].startswith("93a8409") and row["finished"]
    assert list(idx["stamp"]) == sorted(idx["stamp"])


def test_select_filters_by_card_model_type_and_commit():
    idx = ex.index()
    cpu = ex.select(idx, card="cpu")
    assert set(cpu["card"]) == {"cpu"} and len(cpu) >= 6
    assert set(ex.select(idx, model="gpt2-medium")["folder"]) >= {"method_b-20261129-100402-h200-methodb-gpt2-medium"}
    assert "tiny" not in {m for ms in ex.select(idx, model="nanogpt")["models"] for m in ms}
    by_commit = ex.select(idx, commit="ff0e049")
    assert len(by_commit) >= 5 and all(c.startswith("ff0e049") for c in by_commit["commit"])
    assert ex.select(idx, card="cpu", dtype="bfloat16").empty  # the CPU card measures float32 only
    assert list(ex.select(idx, stage="method_a", card="cpu")["stage"].unique()) == ["method_a"]


def test_step_times_are_the_runs_the_series_summary_counts():
    st = ex.step_times(CPU["series"])
    table = ex.series_table(CPU["series"])
    assert len(st) == table["runs"].sum() == 6  # 3 configurations, 2 timed rounds; round 0 left out
    assert (st["round"] > 0).all()
    med = st.groupby("config")["step_ms"].median()
    for _, row in table.iterrows():
        assert med[row["config"]] == pytest.approx(row["median_ms"], rel=1e-12)
    assert len(ex.runs(CPU["series"])) == 9  # the discarded runs are there


def test_bands_a_are_the_medians_and_ranges_method_a_judged():
    bands = ex.bands_a(ex.curves_a(CPU["method_a"]))
    cfg = _summary(CPU["method_a"])["configs"][0]
    for side in ("torch", "cupy"):
        final = cfg["final_val"][side]
        row = bands[(bands["side"] == side) & (bands["step"] == final["step"])].iloc[0]
        assert row["n"] == final["n"] == 5
        assert row["median"] == pytest.approx(final["median"]) and row["range"] == pytest.approx(final["range"])


def test_curves_b_carry_each_runs_difference_and_mark_the_floors():
    cb = ex.curves_b(CPU["method_b"])
    m = _summary(CPU["method_b"])["models"][0]
    rel = cb.groupby("run")["rel"].max()
    assert rel["cupy"] == pytest.approx(m["cupy"]["all_steps"]["max_rel"])
    assert rel["floor_once"] == pytest.approx(m["noise_floor"]["once"]["all_steps"]["max_rel"])
    assert rel["floor_every"] == pytest.approx(m["noise_floor"]["every"]["all_steps"]["max_rel"])
    assert set(cb.loc[cb["floor"], "run"]) == {"floor_none", "floor_once", "floor_every"}
    assert cb.loc[cb["run"] == "torch", "rel"].isna().all()  # the reference has no difference from itself
    assert len(cb[cb["run"] == "cupy"]) == 201  # steps 0..200


def test_families_and_footprint_tables():
    fam = ex.kernel_families(CPU["families"])
    assert set(fam["label"]) == {"torch eager", "torch default", "cupy"}
    for _, g in fam.groupby("key"):
        assert g["share"].sum() == pytest.approx(1.0)
    fp = ex.footprint(CPU["footprint"])
    assert len(fp["footprint"]) == 3 and len(fp["libraries"]) > 0 and len(fp["distributions"]) > 0
    assert set(fp["footprint"]["folder"]) == {CPU["footprint"].name}


def test_load_filters_rows_of_every_table():
    t = ex.load(model="nanogpt")
    assert len(t["step_times"]) > 0 and set(t["step_times"]["model"]) == {"nanogpt"}
    assert set(t["curves_b"]["model"]) == {"nanogpt"}
    # method A of nanogpt: the H200 quick card's folder (2026-12-01) is the first; the filter keeps its rows only
    assert len(t["curves_a"]) > 0 and set(t["curves_a"]["model"]) == {"nanogpt"}
    assert set(ex.load(model="tiny")["curves_a"]["model"]) == {"tiny"}


def _series_folder(root, name, commit, runs, medians):
    d = root / name
    (d / "logs").mkdir(parents=True)
    (d / "card.yaml").write_text(yaml.safe_dump({"card": name.split("-", 3)[3], "device": "cpu",
                                                 "models": ["tiny"], "dtypes": ["float32"]}))
    (d / "machine.json").write_text(json.dumps({"commit": commit, "gpus": []}))
    (d / "runs.jsonl").write_text("".join(json.dumps(r) + "\n" for r in runs))
    (d / "series.csv").write_text("config,model,dtype,median_ms\n"
                                  + "".join(f"{c},tiny,float32,{m}\n" for c, m in medians.items()))
    (d / "summary.json").write_text("{}")   # the stage's last file: the folder is finished
    return d


def _run(rnd, config, ms, status="ok", reason=None):
    return {"round": rnd, "config": config, "model": "tiny", "dtype": "float32", "status": status,
            "valid": status == "ok" and rnd > 0, "step_ms": ms, "reason": reason}


def test_a_retried_run_counts_once_and_a_torn_line_is_dropped(tmp_path):
    failed = _run(1, "tiny/float32/cupy", None, "failed", "data file train.bin not found")
    d = _series_folder(tmp_path, "series-20261201-000000-mine", "abc", [_run(0, "tiny/float32/cupy", 9.0), failed,
                                                                        _run(1, "tiny/float32/cupy", 5.0)], {})
    with open(d / "runs.jsonl", "a") as f:
        f.write('{"round": 2, "config": "tiny/fl')  # killed mid-append
    r = ex.runs(d)
    assert list(r["round"]) == [0, 1] and list(r["status"]) == ["ok", "ok"]
    assert list(ex.step_times(d)["step_ms"]) == [5.0]


def test_a_folder_without_a_table_adds_no_rows(tmp_path):
    d = tmp_path / "families-20261201-000000-mine"
    d.mkdir()
    assert ex.kernel_families(d).empty and ex.curves_b(d).empty
    assert list(ex.index(tmp_path)["finished"]) == [False]


def test_compare_two_commits_of_a_series(tmp_path):
    a = _series_folder(tmp_path, "series-20261201-000000-mine", "aaa", [], {"x": 10.0, "y": 4.0})
    b = _series_folder(tmp_path, "series-20261202-000000-mine", "bbb", [], {"x": 5.0, "z": 1.0})
    cmp = ex.compare(a, b).set_index("config")
    assert cmp.loc["x", "b_over_a"] == 0.5 and cmp.loc["x", "b_minus_a"] == -5.0
    assert cmp.loc["y"].isna()["b"] and cmp.loc["z"].isna()["a"]  # rows only one folder holds stay
    assert cmp.attrs["stage"] == "series" and cmp.attrs["b"] == b.name
    idx = ex.index(tmp_path)
    assert ex.pair(idx) == (a, b)
    assert list(ex.select(idx, commit="bb")["folder"]) == [b.name]
    with pytest.raises(ValueError, match="not results folders of one stage"):
        ex.compare(a, CPU["method_b"])
    # a newer folder whose stage has not finished (no summary, no table) is not paired, and comparing it says why
    c = tmp_path / "series-20261203-000000-mine"
    (c / "logs").mkdir(parents=True)
    (c / "card.yaml").write_text((a / "card.yaml").read_text())
    (c / "machine.json").write_text(json.dumps({"commit": "ccc", "gpus": []}))
    (c / "runs.jsonl").write_text("")
    assert ex.pair(ex.index(tmp_path)) == (a, b)
    with pytest.raises(ValueError, match=r"^compare: 'series-20261203-000000-mine' holds no series table yet"):
        ex.compare(b, c)


def test_pair_needs_two_folders_for_the_same_models():
    """The committed CPU folders of 2026-11-29 (two of method A, one of every other stage) and the CPU editions remade
    since (one of each a remake, by `make all` on a machine without a GPU): the newest two of the first stage in
    STAGES' order that has two. Each remake adds a folder a stage, so the newest two are read from the names."""
    idx = ex.select(ex.index(), card="cpu")
    newest = {st: sorted(RESULTS_DIR.glob(f"{st}-2026*-cpu"))[-2:] for st in ("series", "method_a")}
    assert len(newest["series"]) == 2 and CPU["series"] not in newest["series"]
    assert ex.pair(idx) == tuple(newest["series"])
    first = idx[idx["path"].map(lambda p: Path(p).name.split("-")[1] == "20261129")]
    assert ex.pair(first) == (RESULTS_DIR / "method_a-20261129-092259-cpu", CPU["method_a"])
    assert ex.pair(ex.select(first, stage="series")) is None
    assert ex.pair(ex.select(idx, stage="method_a")) == tuple(newest["method_a"])


def test_the_notebooks_and_the_report_read_results_through_explore():
    """Issue 10: one loader. The stage notebooks, explore.ipynb and the report's verdict table read results only
    through tr2.explore (the stage notebooks call their stage, then show what the loader reads back)."""
    readers = ("read_csv", "read_json", "json.load", "read_text", "open(", "read_jsonl", "yaml.safe_load")
    for nb in (REPO_ROOT / "notebooks").glob("*.ipynb"):
        code = "\n".join("".join(c["source"]) for c in json.loads(nb.read_text())["cells"] if c["cell_type"] == "code")
        assert "import tr2.explore as ex" in code, nb.name
        assert not [r for r in readers if r in code], nb.name
    verdicts = (REPO_ROOT / "lib" / "tr2" / "report" / "verdicts.py").read_text()
    assert "explore." in verdicts and not [r for r in readers if r in verdicts]


def test_run_time_sums_every_record_and_counts_the_calls(tmp_path):
    d = tmp_path / "method_b-20261202-120000-test"
    d.mkdir()
    recs = [{"key": "a", "status": "ok", "wall_s": 60.0}, {"key": "b", "status": "failed", "wall_s": 30.5},
            {"key": "b", "status": "ok", "wall_s": 29.5, "retried": True}, {"key": "order", "status": "ok", "wall_s": None}]
    (d / "runs.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs))
    (d / "sessions.jsonl").write_text('{"stage": "method_b"}\n{"stage": "method_b"}\n')
    assert ex.run_time(d) == {"records": 4, "retired": 0, "seconds": 120.0, "minutes": 2.0, "calls": 2,
                              "machines": None, "last_end": None}   # sessions from before they recorded their GPUs
    (d / "retired.jsonl").write_text(json.dumps({"key": "c", "status": "ok", "wall_s": 30.0, "retired_reason": "x"}) + "\n")
    # a retired run held the machine too: its time counts, beside the runs file's records
    assert ex.run_time(d) == {"records": 4, "retired": 1, "seconds": 150.0, "minutes": 2.5, "calls": 2,
                              "machines": None, "last_end": None}
    f = tmp_path / "footprint-20261202-120000-test"
    f.mkdir()
    (f / "footprint.jsonl").write_text(json.dumps({"key": "x", "wall_s": 6.0}) + "\n")
    assert ex.run_time(f) == {"records": 1, "retired": 0, "seconds": 6.0, "minutes": 0.1, "calls": None,
                              "machines": None, "last_end": None}  # no sessions.jsonl: no end time either


def test_runs_that_shared_the_machine_count_once(tmp_path):
    """Method A's parallel runs: the union of their intervals, not the sum of their wall times; a run alone (no
    interval) still adds its wall time."""
    recs = [{"key": "a", "wall_s": 10.0, "started_unix": 100.0, "ended_unix": 110.0},
            {"key": "b", "wall_s": 8.0, "started_unix": 104.0, "ended_unix": 112.0},   # overlaps a: +2
            {"key": "c", "wall_s": 3.0, "started_unix": 105.0, "ended_unix": 108.0},   # inside a: +0
            {"key": "d", "wall_s": 1.0, "started_unix": 120.0, "ended_unix": 121.0},   # after a gap: +1
            {"key": "e", "wall_s": 5.0}]                                               # one at a time: +5
    assert ex.held_seconds(recs) == pytest.approx(10 + 2 + 0 + 1 + 5)
    assert ex.held_seconds(recs[:1] + [{"key": "x", "wall_s": None}, {"key": "y", "started_unix": True,
                                                                        "ended_unix": 3, "wall_s": 2.0}]) == 12.0
    d = tmp_path / "method_a-20261203-120000-test"
    d.mkdir()
    (d / "runs.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs))
    assert ex.run_time(d) == {"records": 5, "retired": 0, "seconds": 18.0, "minutes": 0.3, "calls": None,
                              "machines": None, "last_end": "1970-01-01T00:02:01+00:00"}   # d's ended_unix


def test_a_runs_machine_is_its_sessions_and_the_machines_are_counted(tmp_path):
    """sessions.jsonl's GPUs (stage.open_folder records them): a run ran on the machine of the last session started
    at or before it; sessions without the record count for nothing (None where none has it); () is a machine
    without a GPU."""
    s = [{"started": "2026-12-04T14:23:05+00:00", "gpus": ["GPU-b", "GPU-a"]},
         {"started": "2026-12-04T14:33:20+00:00", "gpus": ["GPU-c"]}, {"started": "2026-12-04T15:00:00+00:00"}]
    assert ex.run_machine(s, "2026-12-04T14:23:05+00:00") == ("GPU-a", "GPU-b")
    assert ex.run_machine(s, "2026-12-04T14:33:19+00:00") == ("GPU-a", "GPU-b")
    assert ex.run_machine(s, "2026-12-04T14:40:00+00:00") == ("GPU-c",)
    assert ex.run_machine(s, "2026-12-04T15:10:00+00:00") is None     # that session recorded no machine
    assert ex.run_machine(s, "2026-12-04T14:00:00+00:00") is None     # before every session
    assert ex.run_machine(s, None) is None and ex.run_machine(s, "yesterday") is None
    assert ex.machine_count(s) == 2 and ex.machine_count(s[2:]) is None and ex.machine_count([]) is None
    assert ex.machine_count([{"gpus": []}, {"gpus": []}]) == 1
    d = tmp_path / "series-20261204-142303-test"
    d.mkdir()
    (d / "sessions.jsonl").write_text("".join(json.dumps(x) + "\n" for x in s))
    assert ex.run_time(d)["machines"] == 2


def test_every_run_names_its_machine_where_its_session_recorded_it(tmp_path):
    """ex.runs' `machine`: the GPU of the session a run started in (a series resumed on another machine shows which
    runs ran where); None in folders whose sessions predate the record."""
    runs = [dict(_run(1, "tiny/float32/cupy", 10.0), started="2026-12-04T14:30:00+00:00"),
            dict(_run(1, "tiny/float32/torch-eager", 12.0), started="2026-12-04T14:35:00+00:00")]
    d = _series_folder(tmp_path, "series-20261204-142303-test", "aaa", runs, {"tiny/float32/cupy": 10.0})
    (d / "sessions.jsonl").write_text("".join(json.dumps(s) + "\n" for s in [
        {"stage": "series", "started": "2026-12-04T14:23:05+00:00", "gpus": ["GPU-32998b6d-4502-c305-1489-667dc0cbc29d"]},
        {"stage": "series", "started": "2026-12-04T14:33:20+00:00", "gpus": ["GPU-8a44e872-0000", "GPU-11112222-0000"]}]))
    assert ex.runs(d)["machine"].tolist() == ["GPU-32998b6d", "GPU-11112222+GPU-8a44e872"]
    assert ex.machine_label(()) == "no GPU" and ex.machine_label(None) is None
    (d / "sessions.jsonl").write_text(json.dumps({"stage": "series", "started": "2026-12-04T14:23:05+00:00"}) + "\n")
    assert ex.runs(d)["machine"].isna().all()


def test_a_folders_conditions_say_which_tr2_variables_were_set(tmp_path):
    """machine.json's tr2_environment (sysinfo.tr2_environment) reaches the conditions every stage notebook shows:
    the variables one line, sorted, the commit's two left out (shown as commit and dirty); "none" where none was set;
    None for a folder made before the record, which cannot say."""
    (tmp_path / "card.yaml").write_text(yaml.safe_dump({"card": "demo"}))
    machine = {"commit": "c" * 40, "gpus": [], "tr2_environment": {
        "TR2_GELU_F16_FAST": "0", "TR2_CE_GRAD_EX2": "0", "TR2_GIT_COMMIT": "c" * 40, "TR2_GIT_DIRTY": "false"}}
    (tmp_path / "machine.json").write_text(json.dumps(machine))
    assert results.conditions(tmp_path)["tr2_environment"] == "TR2_CE_GRAD_EX2=0, TR2_GELU_F16_FAST=0"
    assert ex.condition_table(tmp_path).loc["tr2_environment", "value"] == "TR2_CE_GRAD_EX2=0, TR2_GELU_F16_FAST=0"
    machine["tr2_environment"] = {"TR2_GIT_COMMIT": "c" * 40}
    (tmp_path / "machine.json").write_text(json.dumps(machine))
    assert results.conditions(tmp_path)["tr2_environment"] == "none"
    del machine["tr2_environment"]
    (tmp_path / "machine.json").write_text(json.dumps(machine))
    assert results.conditions(tmp_path)["tr2_environment"] is None


def test_a_root_that_is_no_folder_and_a_misspelt_stage_are_refused(tmp_path):
    """Both used to give an empty table, read as "nothing has run" (results/cpu-checks-20261205/bad-input-audit.md)."""
    from tr2 import Tr2Error
    with pytest.raises(Tr2Error, match=r"^root: .*none' is not a folder; allowed: a folder of results folders"):
        ex.index(tmp_path / "none")
    (tmp_path / "afile").write_text("x")
    with pytest.raises(Tr2Error, match="is not a folder"):
        ex.load(tmp_path / "afile")
    idx = ex.index(tmp_path)
    assert idx.empty   # an empty folder: an empty index, no error
    with pytest.raises(Tr2Error, match=r"^stage: 'dance' is not allowed; allowed: series \| method_a"):
        ex.select(idx, stage="dance")
    assert ex.select(idx, stage="series").empty
