"""scripts/device_bench.py's table: both sides' step times over the rounds and, since the twenty-first session, the
card's SM clock inside each run's timed window (the GPT-2 steps draw the H200's 700 W limit, and each side's clock
falls with what it draws: docs/perf.md, "Both sides at the power limit")."""
import importlib.util
import json

from tr2 import REPO_ROOT

_spec = importlib.util.spec_from_file_location("device_bench", REPO_ROOT / "scripts" / "device_bench.py")
device_bench = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(device_bench)


def _rec(side, step_ms, mhz, rnd, watts=None, span=4.0, **kw):
    return {"phase": "bench", "round": rnd, "model": "gpt2-small", "dtype": "bfloat16", "side": side,
            "mode": None if side == "cupy" else "reduce-overhead", "cuda_graph": side == "cupy", "lib": None,
            "status": "ok", "step_ms": step_ms, "peak_bytes": 5_440_000_000,
            "gpu_window": None if mhz is None else {"samples": 16, "sm_mhz": {"median": mhz}, "counter_w": watts,
                                                    "counter_s": span},
            **kw}


def test_the_table_gives_each_sides_clock_inside_its_windows(tmp_path):
    path = tmp_path / "bench.jsonl"
    recs = [_rec("cupy", 16.1, 1620, 0), _rec("torch", 19.0, 1790, 0), _rec("cupy", 16.2, 1640, 1),
            _rec("torch", 18.9, 1800, 1)]
    path.write_text("".join(json.dumps(r) + "\n" for r in recs))
    header, row = device_bench.bench_table(path)
    assert header.split()[-8:] == ["cupy", "MHz", "torch", "MHz", "cupy", "J", "torch", "J"]
    cells = row.split()
    assert cells[:4] == ["gpt2-small", "bfloat16", "graph", "reduce-overhead"]
    assert cells[-4:-2] == ["1630", "1795"]   # the medians over the rounds
    assert cells[-2:] == ["-", "-"]           # no energy counter in these samples
    assert cells[8] == f"{16.15 / 18.95:.3f}"


def test_the_table_gives_each_sides_joules_a_step_by_the_energy_counter(tmp_path):
    path = tmp_path / "bench.jsonl"
    recs = [_rec("cupy", 16.0, 1620, 0, watts=690.0), _rec("torch", 19.0, 1790, 0, watts=694.0),
            _rec("cupy", 16.4, 1640, 1, watts=700.0), _rec("torch", 19.2, 1800, 1, watts=None)]
    path.write_text("".join(json.dumps(r) + "\n" for r in recs))
    _, row = device_bench.bench_table(path)
    # cupy: the median of 690 x 16.0 ms and 700 x 16.4 ms; torch: its one round with a counter
    assert row.split()[-2:] == [f"{(11.04 + 11.48) / 2:.2f}", f"{694.0 * 19.0 / 1000:.2f}"]


def test_a_run_without_samples_shows_a_dash(tmp_path):
    """The CPU machine (no NVML) and records from before the samples: '-' in the clock columns, the rest as before."""
    path = tmp_path / "bench.jsonl"
    old = _rec("cupy", 16.1, None, 0)
    del old["gpu_window"]
    path.write_text(json.dumps(old) + "\n" + json.dumps(_rec("torch", 19.0, None, 0)) + "\n")
    _, row = device_bench.bench_table(path)
    assert row.split()[-4:] == ["-", "-", "-", "-"] and row.split()[4] == "16.10"
    assert device_bench.window_gpu([], [0.0, 1.0]) is None


def test_joules_read_over_too_short_a_stretch_are_marked(tmp_path):
    """A window whose energy readings span under tr2.series.ENERGY_MIN_SPAN_S (the char model's ~1.3 s windows,
    sampled every second), or records from before the span was kept: the joules shown with '*' and a note under the
    table; the other side's, read over 4 s, unmarked."""
    path = tmp_path / "bench.jsonl"
    recs = [_rec("cupy", 4.28, 1905, 0, watts=720.0, span=1.0), _rec("torch", 5.44, 1980, 0, watts=620.0),
            _rec("cupy", 4.24, 1890, 1, watts=663.0, span=None), _rec("torch", 5.44, 1980, 1, watts=620.0, span=3.0)]
    path.write_text("".join(json.dumps(r) + "\n" for r in recs))
    lines = device_bench.bench_table(path)
    assert len(lines) == 3 and lines[2].lstrip().startswith("* joules from energy readings spanning under 3 s")
    assert lines[1].split()[-2:] == [f"{(720.0 * 4.28 + 663.0 * 4.24) / 2000:.2f}*", f"{620.0 * 5.44 / 1000:.2f}"]
    ok = [_rec("cupy", 16.0, 1620, 0, watts=690.0), _rec("torch", 19.0, 1790, 0, watts=694.0)]
    path.write_text("".join(json.dumps(r) + "\n" for r in ok))
    assert len(device_bench.bench_table(path)) == 2 and "*" not in device_bench.bench_table(path)[1]


def test_each_variant_is_set_against_this_trees_runs_round_by_round(tmp_path):
    """A variant's runs (TR2_BENCH_CUPY_LIBS: `lib` in the record) against the tree's of the same model and type: the
    medians, their change, and each round's pair (the variant less the tree), where a round lacks one side no pair;
    every session's variant comparison was read off this by hand before (results/h200-edition-20261205i)."""
    path = tmp_path / "bench.jsonl"
    recs = [_rec("cupy", 15.706, None, 0), _rec("cupy", 15.812, None, 0, lib="zk"),
            _rec("cupy", 15.697, None, 1), _rec("cupy", 15.740, None, 1, lib="zk"),
            _rec("cupy", 15.650, None, 2, lib="zk")]   # round 2 stopped before the tree's run
    path.write_text("".join(json.dumps(r) + "\n" for r in recs))
    lines = device_bench.bench_table(path)
    assert lines[1].split()[:3] == ["model", "type", "variant"]
    cells = lines[2].split()
    assert cells[:3] == ["gpt2-small", "bfloat16", "graph@zk"]
    assert cells[3:8] == ["15.740", "3", f"{(15.706 + 15.697) / 2:.3f}", "2", f"{15.740 - 15.7015:+.3f}"]
    assert cells[8:10] == [f"{15.812 - 15.706:+.3f}", f"{15.740 - 15.697:+.3f}"]
    assert lines[2].endswith("(faster in 0 of 2)") and len(lines) == 3


def test_a_variant_without_a_timed_run_gives_no_line(tmp_path):
    """A variant whose runs all failed (no step time) has nothing to set against the tree: the torch table only."""
    path = tmp_path / "bench.jsonl"
    failed = {**_rec("cupy", 16.0, None, 0, lib="x"), "status": "failed", "step_ms": None}
    path.write_text(json.dumps(_rec("cupy", 16.1, None, 0)) + "\n" + json.dumps(failed) + "\n")
    assert device_bench.bench_table(path) == device_bench.bench_table(path)[:1]


def test_a_run_that_cannot_finish_in_the_time_left_is_not_started():
    assert device_bench.too_long_to_start(None, 31.0) is None           # not run yet in this call: no estimate
    assert device_bench.too_long_to_start(13.0, 37.0) is None
    why = device_bench.too_long_to_start(77.1, 37.3)
    assert why == "its last run took 77 s, 37 s left"
    assert device_bench.too_long_to_start(32.0, 37.0) is None           # 5 s kept for the run's start and end
    assert device_bench.too_long_to_start(32.1, 37.0) is not None


def test_the_bench_skips_the_long_run_and_runs_the_short_one_after_it(tmp_path, monkeypatch):
    """Call 3 of results/h100-perf-20261206e, replayed with a stand-in clock: a round whose next run took longer than
    what is left goes on to the runs that still fit, instead of starting one its timeout would kill."""
    now = [0.0]
    walls = {"torch": 60.0, "cupy": 12.0}
    started = []

    def run_clocked(cmd, log, env=None, timeout_s=None, window=None, on_line=None):
        side = "torch" if "torch" in cmd else "cupy"
        started.append((side, round(timeout_s)))
        now[0] += walls[side]
        return {"status": "ok", "step_ms": 10.0, "wall_s": walls[side], "peak_bytes": 1}

    class _Sampler:
        available, samples = False, []

        def __init__(self, interval):
            pass

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return False

    monkeypatch.setattr(device_bench.time, "monotonic", lambda: now[0])
    monkeypatch.setattr(device_bench.clock, "run_clocked", run_clocked)
    monkeypatch.setattr(device_bench, "GpuSampler", _Sampler)
    monkeypatch.setattr(device_bench, "BENCH", [("gpt2-small", "float32", 200, (100, 200))])
    monkeypatch.setattr(device_bench, "SELECT", set())
    monkeypatch.setattr(device_bench, "CUPY_VARIANTS", ["graph"])
    monkeypatch.setattr(device_bench, "CUPY_LIBS", {})
    monkeypatch.setattr(device_bench, "TORCH_MODES", ["default"])
    monkeypatch.setattr(device_bench, "ROUNDS", 2)
    monkeypatch.setattr(device_bench, "ROUND0", 0)
    monkeypatch.setattr(device_bench, "train_cmd", lambda side, *a, **k: [side])
    table = []
    # round 0: cupy (12 s), torch (60 s); round 1 rotated: torch first, with 110 - 72 = 38 s left: not started;
    # then cupy, which fits
    device_bench.phase_bench(tmp_path, 110.0, table)
    assert [s for s, _ in started] == ["cupy", "torch", "cupy"]
    assert "bench r1 gpt2-small-float32-torch-default: not started (its last run took 60 s, 38 s left)" in table
    assert any(line.startswith("bench r1 gpt2-small-float32-cupy-graph: ok") for line in table)
