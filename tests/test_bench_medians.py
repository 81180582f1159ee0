"""scripts/bench_medians.py: the medians of a results folder's bench runs, each run listed with its call, a failed
run listed and left out of the median, the ratio to the same model and type's fastest torch mode; and the table of
the committed thirteenth-session folder is the one committed beside it."""
import importlib.util
import json
import sys

from tr2 import REPO_ROOT

_spec = importlib.util.spec_from_file_location("bench_medians", REPO_ROOT / "scripts" / "bench_medians.py")
medians = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(medians)


def _write(folder, records):
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "bench.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))


def _rec(side, ms, status="ok", lib=None, mode=None, dtype="bfloat16", peak=1_000_000_000):
    return {"model": "nanogpt", "dtype": dtype, "side": side, "lib": lib, "mode": mode, "cuda_graph": side == "cupy",
            "status": status, "step_ms": ms if status == "ok" else None, "peak_bytes": peak}


def test_medians_ratios_and_failed_runs(tmp_path):
    _write(tmp_path / "call1-abc" / "bench", [_rec("cupy", 4.0), _rec("torch", 5.0, mode="reduce-overhead"),
                                              _rec("torch", 9.0, mode="eager"), _rec("cupy", None, "failed", "pdl")])
    _write(tmp_path / "call2-abc" / "x" / "bench", [_rec("cupy", 4.4), _rec("torch", 5.2, mode="reduce-overhead"),
                                                    _rec("cupy", 4.1, lib="pdl")])
    _write(tmp_path / "call3-abc" / "bench", [_rec("cupy", 4.2)])
    lines = medians.table(medians.collect(tmp_path))
    row = {line.split()[2]: line for line in lines[1:]}
    assert set(row) == {"cupy-graph", "cupy-graph@pdl", "torch-reduce-overhead", "torch-eager"}
    graph = row["cupy-graph"].split()
    assert float(graph[3]) == 4.2 and graph[4] == "3"              # the median of 4.0, 4.4, 4.2; three runs
    assert float(graph[5]) == round(4.2 / 5.1, 3)                  # against reduce-overhead's median, the fastest
    assert "1:4.000" in row["cupy-graph"] and "2:4.400" in row["cupy-graph"] and "3:4.200" in row["cupy-graph"]
    pdl = row["cupy-graph@pdl"].split()
    assert float(pdl[3]) == 4.1 and pdl[4] == "1" and "1:failed" in row["cupy-graph@pdl"]
    assert row["torch-eager"].split()[5] == "-"                    # torch rows carry no ratio


def test_a_type_without_torch_has_no_ratio(tmp_path):
    _write(tmp_path / "call1" / "bench", [_rec("cupy", 40.0, dtype="float32")])
    (line,) = medians.table(medians.collect(tmp_path))[1:]
    assert line.split()[5] == "-"


def test_the_committed_table_is_the_folders(tmp_path):
    folder = REPO_ROOT / "results" / "h200-perf-20261202d"
    expected = (folder / "medians.txt").read_text().rstrip("\n").splitlines()
    assert medians.table(medians.collect(folder)) == expected


def test_usage(capsys, monkeypatch, tmp_path):
    monkeypatch.setattr(sys, "argv", ["bench_medians.py", str(tmp_path / "absent")])
    try:
        exec(compile((REPO_ROOT / "scripts" / "bench_medians.py").read_text(), "bench_medians.py", "exec"),
             {"__name__": "__main__"})
    except SystemExit as e:
        assert "usage" in str(e.code)
    else:
        raise AssertionError("no usage error for a folder that is not there")
