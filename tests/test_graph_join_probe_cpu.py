"""scripts/probes/graph_join_probe.py: bad arguments refused in one line (exit 2) before CuPy is imported, so on any
machine; the probe itself runs on the GPU (results/h200-perf-20261205d, calls 7-8)."""
import pathlib
import subprocess
import sys

import pytest

PROBE = pathlib.Path(__file__).resolve().parents[1] / "scripts" / "probes" / "graph_join_probe.py"


@pytest.mark.parametrize("args", [["x"], ["0"], ["200", "-1"], ["1", "2", "3"]])
def test_bad_arguments_are_one_line_and_exit_2(args):
    r = subprocess.run([sys.executable, str(PROBE), *args], capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and r.stdout == ""
    assert "allowed: [REPS] [ROUNDS], whole numbers from 1" in r.stderr and len(r.stderr.strip().splitlines()) == 1
