"""scripts/device_bench.py's loss check (issue 9's "what must hold" for the half types): the compared build's five
seeds against torch's five at step 400 by method A's rule, beside the single-run check it had before. The metrics
files here are written as the trainer writes them (tr2.trainlog), so the reading is the one the GPU run takes."""
import importlib.util
import json

from tr2 import REPO_ROOT

_spec = importlib.util.spec_from_file_location("device_bench", REPO_ROOT / "scripts" / "device_bench.py")
device_bench = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(device_bench)

SEEDS = device_bench.LOSSCHECK_SEEDS


def _metrics(path, val, step=400, train=1.72):
    lines = [{"kind": "loss", "step": step, "loss": train}]
    if val is not None:
        lines.append({"kind": "eval", "step": step, "train": train, "val": val})
    path.write_text("".join(json.dumps(x) + "\n" for x in lines))


def _families(d, torch_vals, cupy_vals, dtype="float16"):
    for s, v in zip(SEEDS, torch_vals):
        _metrics(d / f"torch-{dtype}-{s}.jsonl", v)
    for s, v in zip(SEEDS, cupy_vals):
        if v is not None:
            _metrics(d / f"{device_bench.losscheck_name(dtype, 'hr-graph', s)}.jsonl", v)


def test_seed_1337_keeps_the_name_the_single_run_check_reads():
    assert device_bench.losscheck_name("float16", "hr-graph", 1337) == "cupy-float16-hr-graph"
    assert device_bench.losscheck_name("float16", "hr-graph", 1340) == "cupy-float16-hr-graph-1340"
    assert SEEDS == (1337, 1338, 1339, 1340, 1341)


def test_a_family_inside_the_torch_spread_passes(tmp_path):
    # this call's torch float16 vals (results/h100-perf-20261206c), our seed 1337 outside their range, the family not
    torch = [1.82047, 1.83458, 1.83403, 1.8278, 1.79963]
    cupy = [1.83805, 1.8201, 1.8305, 1.8122, 1.8262]
    _families(tmp_path, torch, cupy)
    fam = device_bench.losscheck_family(tmp_path, "float16")
    v = fam["verdict"]
    assert v["passed"] is True and v["seeds"] == {"torch": 5, "cupy": 5}
    row = v["steps"][0]
    assert row["step"] == 400 and abs(row["torch_median"] - 1.8278) < 1e-12 and abs(row["cupy_median"] - 1.8262) < 1e-12
    assert abs(row["allowed"] - (1.83458 - 1.79963)) < 1e-12
    assert fam["cupy_val"][1337] == 1.83805 and fam["torch_val"][1341] == 1.79963
    line = device_bench.losscheck_family_line(fam)
    assert "float16 hr-graph" in line and ": passed (" in line and "median 1.82780" in line


def test_a_family_shifted_past_the_larger_range_fails(tmp_path):
    torch = [1.820, 1.825, 1.830, 1.822, 1.828]
    cupy = [1.850, 1.852, 1.849, 1.851, 1.853]   # medians 0.026 apart, ranges 0.010 and 0.004
    _families(tmp_path, torch, cupy)
    fam = device_bench.losscheck_family(tmp_path, "float16")
    assert fam["verdict"]["passed"] is False
    line = device_bench.losscheck_family_line(fam)
    assert ": FAILED (failed at step(s) 400" in line and "difference 0.02600" in line


def test_a_run_without_the_evaluation_fails_the_family(tmp_path):
    torch = [1.820, 1.825, 1.830, 1.822, 1.828]
    _families(tmp_path, torch, [1.823, 1.824, None, 1.826, 1.827])   # seed 1339's run left no metrics
    v = device_bench.losscheck_family(tmp_path, "float16")["verdict"]
    assert v["passed"] is False and "lack this evaluation" in v["steps"][0]["why"]


def test_no_evaluation_anywhere_is_a_failure_not_a_blank(tmp_path):
    fam = device_bench.losscheck_family(tmp_path, "bfloat16")
    assert fam["verdict"]["passed"] is False and "no run holds an evaluation at step 400" in fam["verdict"]["reason"]
    assert "FAILED" in device_bench.losscheck_family_line(fam) and "median -" in device_bench.losscheck_family_line(fam)


def test_the_phase_runs_five_seeds_of_the_compared_build_and_one_of_the_others(tmp_path, monkeypatch):
    seen = {}

    def fake_parallel(jobs, out, budget):
        seen.update(jobs)
        return {name: 0 for name in jobs}
    monkeypatch.setattr(device_bench, "parallel", fake_parallel)
    table = []
    device_bench.phase_losscheck(tmp_path, 60.0, table)
    for dtype in ("bfloat16", "float16"):
        assert {n for n in seen if n.startswith(f"torch-{dtype}-")} == {f"torch-{dtype}-{s}" for s in SEEDS}
        assert {n for n in seen if n.startswith(f"cupy-{dtype}-hr-graph")} == {
            device_bench.losscheck_name(dtype, "hr-graph", s) for s in SEEDS}
        for build in ("hr", "exact"):
            assert [n for n in seen if n.startswith(f"cupy-{dtype}-{build}") and "graph" not in n] == [
                f"cupy-{dtype}-{build}"]
        cmd = seen[device_bench.losscheck_name(dtype, "hr-graph", 1340)]
        assert cmd[cmd.index("--seed") + 1] == "1340" and "--cuda-graph" in cmd and "--half-roundings" in cmd
    assert len(seen) == 2 * (5 + 3 + 4)
    recs = [json.loads(x) for x in (tmp_path / "losscheck.jsonl").read_text().splitlines()]
    assert [r["phase"] for r in recs] == ["losscheck"] * 3 + ["losscheck_family"] + ["losscheck"] * 3 + ["losscheck_family"]
    # nothing ran, so nothing passed: every record says so
    assert not any(r.get("val_within_spread") for r in recs) and all(
        r["verdict"]["passed"] is False for r in recs if r["phase"] == "losscheck_family")
    assert sum("FAILED" in line for line in table) == 2
