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
