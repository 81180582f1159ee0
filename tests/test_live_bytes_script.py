"""scripts/live_bytes.py: the NumPy form of a training step under tracemalloc; bad input refused in one line."""
import os
import pathlib
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]


def _run(*args):
    env = dict(os.environ, PYTHONPATH=str(ROOT / "lib"))
    return subprocess.run([sys.executable, str(ROOT / "scripts" / "live_bytes.py"), *args], capture_output=True,
                          text=True, env=env, timeout=300)


@pytest.mark.parametrize("args, says", [
    (("nosuch",), "model: 'nosuch' is not a known model"),
    (("tiny", "float33"), "dtype: 'float33'; allowed:"),
    (("tiny", "float32", "maybe"), "tf32 'maybe'; allowed: on, off"),
    (("tiny", "float32", "off", "extra"), "4 arguments; at most 3"),
])
def test_bad_input_is_one_line_and_exit_2(args, says):
    r = _run(*args)
    assert r.returncode == 2 and r.stdout == ""
    assert says in r.stderr and len(r.stderr.strip().splitlines()) == 1


def test_the_tiny_model_reports_forward_and_backward():
    r = _run("tiny", "float32", "off")
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("tiny float32 tf32 off: forward ") and "backward " in r.stdout.splitlines()[-1]
