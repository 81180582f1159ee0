"""scripts/probes/energy_counter_probe.py's arithmetic without a GPU: the counter's changes, and what a window read
at its two ends makes of a counter that steps (the probe's table decides the joules rule for marked windows)."""
from pathlib import Path

import pytest

from conftest import load_script

SCRIPT = Path(__file__).resolve().parent.parent / "scripts" / "probes" / "energy_counter_probe.py"


@pytest.fixture
def probe():
    return load_script(SCRIPT, "energy_counter_probe_under_test")


def test_only_the_readings_that_change_are_kept(probe):
    assert probe.changes([(0.0, 5), (0.1, 5), (0.2, 7), (0.3, 7), (0.4, 9)]) == [(0.0, 5), (0.2, 7), (0.4, 9)]
    assert probe.changes([]) == []


def test_a_counter_read_off_its_steps_costs_a_short_window_more(probe):
    """700 W drawn steadily, the counter stepping by 87.5 J every 0.125 s: windows laid at its steps read the power
    exactly; readings that land half a step off, alternately, cost a window of five steps (0.625 s) half a step in
    five (10%) and one of 33 steps (4.125 s) half a step in 33, so the spread falls with the window's length."""
    points = [(i * 0.125, i * 87_500) for i in range(81)]   # 10 s
    short, long = probe.window_spread(points, 0.5), probe.window_spread(points, 4.0)
    assert short["whole_w"] == pytest.approx(700.0) and short["windows"] > long["windows"] > 0
    assert short["max_rel"] == pytest.approx(0.0, abs=1e-9) and long["max_rel"] == pytest.approx(0.0, abs=1e-9)
    jitter = [(t, e + (43_750 if i % 2 else 0)) for i, (t, e) in enumerate(points)]
    assert probe.window_spread(jitter, 0.625)["max_rel"] == pytest.approx(0.1, rel=0.01)
    assert probe.window_spread(jitter, 4.125)["max_rel"] == pytest.approx(1 / 66, rel=0.01)
    assert probe.window_spread(points[:3], 1.0) == {"window_s": 1.0, "windows": 0, "max_rel": None, "median_rel": None}
