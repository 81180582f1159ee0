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
