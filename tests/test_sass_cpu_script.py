"""scripts/sass_cpu.sh's refusals, on the CPU and without the network: a file that is not a kernel file, a kernel
file whose cubin of this tree's source is not built, and an unknown output form each stop it with the reason, before
it fetches NVIDIA's tools (the SASS itself needs the cubin and the wheels: run by hand, docs/perf.md)."""
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parent.parent / "scripts" / "sass_cpu.sh"


def run(tmp_path, *args):
    env = {"PATH": "/usr/bin:/bin", "PYTHON": sys.executable, "TR2_KERNEL_CACHE": str(tmp_path / "cubins"),
           "TR2_SASS_TOOLS": str(tmp_path / "tools")}
    return subprocess.run(["bash", str(SCRIPT), *args], capture_output=True, text=True, env=env)


@pytest.mark.parametrize("args, said", [
    (("nope.cu", "k"), "'nope.cu' is not a kernel file"),
    (("gelu.cu", "gelu_forward"), "no cubin of this tree's gelu.cu"),
    (("gelu.cu", "gelu_forward", "ptx"), "'ptx': sass_loops, main_path or raw"),
])
def test_it_refuses_before_fetching_anything(tmp_path, args, said):
    r = run(tmp_path, *args)
    assert r.returncode == 2 and said in r.stderr, r.stderr
    assert not (tmp_path / "tools").exists()
