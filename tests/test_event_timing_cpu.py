"""scripts/event_timing.py's choice of timer for the variant scripts, without a GPU (CuPy stands in as an empty
module: the timers touch it only when they run)."""
import importlib.util
import sys
import types
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parent.parent / "scripts" / "event_timing.py"


@pytest.fixture
def event_timing(monkeypatch):
    if "cupy" not in sys.modules:
        monkeypatch.setitem(sys.modules, "cupy", types.ModuleType("cupy"))
    spec = importlib.util.spec_from_file_location("event_timing_under_test", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_graph_is_the_default_and_eager_the_old_timing(event_timing):
    assert event_timing.timer("graph") is event_timing.graph_ms
    assert event_timing.timer("eager") is event_timing.mean_ms


@pytest.mark.parametrize("value", ["", "Graph", "events"])
def test_another_value_stops_the_script_naming_it(event_timing, value):
    with pytest.raises(SystemExit, match=rf"^TR2_VARIANT_TIMING={value!r}: allowed values are graph, eager$"):
        event_timing.timer(value)


def test_the_variant_scripts_take_the_timer_from_the_environment():
    for name in ("attention_forward_variants.py", "attention_backward_variants.py", "ln_variants.py",
                 "gelu_bench.py"):
        src = (SCRIPT.parent / name).read_text()
        assert 'TIMING = os.environ.get("TR2_VARIANT_TIMING", "graph")' in src, name
        assert "mean_ms(" not in src.split("TIMING =", 1)[1], name   # every timing goes through the choice


def test_the_ring_hands_out_the_buffers_in_turn(event_timing):
    seen = []
    call = event_timing.cycling(lambda b: seen.append(b) or b, ["a", "b", "c"])
    assert [call() for _ in range(7)] == ["a", "b", "c", "a", "b", "c", "a"]
    assert seen == ["a", "b", "c", "a", "b", "c", "a"]


@pytest.mark.parametrize("raw, n", [(None, 1), ("", 1), (" 4 ", 4), ("1", 1)])
def test_the_ring_count_from_the_environment(event_timing, raw, n):
    assert event_timing.ring_count(raw) == n


@pytest.mark.parametrize("raw", ["0", "-2", "four", "2.5"])
def test_a_bad_ring_count_stops_the_script_naming_it(event_timing, raw):
    with pytest.raises(SystemExit, match=rf"^TR2_VARIANT_RING={raw!r}: allowed values are whole numbers from 1"):
        event_timing.ring_count(raw)


def test_energy_summary_takes_the_counter_difference_a_call(event_timing):
    samples = [{"sm_mhz": 1700, "power_w": 690.0}, {"sm_mhz": 1650, "power_w": 700.0},
               {"sm_mhz": 1755, "power_w": 695.0}]
    s = event_timing.energy_summary(1_000_000, 1_010_500, 1.5, 1490.0, 20_000, samples)
    assert s["ms"] == pytest.approx(1490.0 / 20_000)
    assert s["joules_a_call"] == pytest.approx(10.5 / 20_000)
    assert s["mean_w"] == pytest.approx(7.0)
    assert s["sm_mhz"] == 1700 and s["sm_mhz_range"] == [1650, 1755] and s["power_w"] == 695.0
    assert s["samples"] == 3 and s["calls"] == 20_000


@pytest.mark.parametrize("e1", [1_000_000, 999_000])
def test_a_counter_that_did_not_move_gives_no_energy(event_timing, e1):
    s = event_timing.energy_summary(1_000_000, e1, 1.5, 1490.0, 100, [])
    assert s["joules_a_call"] is None and s["mean_w"] is None
    assert s["sm_mhz"] is None and s["sm_mhz_range"] is None and s["ms"] == pytest.approx(14.9)


def test_probe_args_defaults_and_given_and_the_output_emptied(event_timing, tmp_path):
    out = tmp_path / "p.jsonl"
    out.write_text("an older call's row\n")
    assert event_timing.probe_args([str(out)], "x.jsonl", 20) == (
        str(out), 3, 20, ["gpt2-small", "gpt2-medium"], ["bfloat16", "float16"])
    assert out.read_text() == ""
    assert event_timing.probe_args([str(out), "5", "7", "nanogpt", "float16"], "x.jsonl", 20) == (
        str(out), 5, 7, ["nanogpt"], ["float16"])
