"""Issue 9, item 4: with the cubins built ahead (make kernels; gpu/cubins.py), a training run of the cupy side compiles
nothing at run time and never maps libnvrtc: not our kernels (cubins.COMPILED), not CuPy's own (an elementwise
operation, a copy into a strided view, a fill of a value other than 0: each compiles through NVRTC, and even one found
in CuPy's disk cache opens it). The trainer's last lines say so (gpu/nvrtc_watch.py, trainlog.nvrtc_line); the
footprint stage reads the same line. GPU only; the CPU counterpart (the line, its reader, the wrapper) is
tests/test_nvrtc_watch.py.

CuPy's cache is a fresh folder, as in the footprint's cold runs: a kernel of CuPy's used anywhere in the run (the
start, an evaluation, the graph's capture) shows here by name.
"""
from __future__ import annotations

import os
import subprocess
import sys

import pytest
from conftest import cuda_device_present

from tr2.trainlog import parse_nvrtc_line


pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not cuda_device_present(), reason="no CUDA device")]


# the char model pads its 65-row classifier to 72 (CudaBackend.classifier_weight); float16 runs the loss scaler;
# gpt2-small's rows of 1024 take the TMA attention and the dS-stored backward
@pytest.mark.parametrize("model, dtype, extra", [
    ("nanogpt", "bfloat16", ["--half-roundings", "--cuda-graph"]),
    ("nanogpt", "float32", []),
    ("nanogpt", "float16", ["--half-roundings", "--cuda-graph"]),
    ("gpt2-small", "bfloat16", ["--half-roundings", "--cuda-graph"]),
])
def test_a_training_run_compiles_nothing_and_never_maps_nvrtc(tmp_path, model, dtype, extra):
    env = dict(os.environ, PYTHONUNBUFFERED="1", CUPY_CACHE_DIR=str(tmp_path / "cupy-cache"))
    p = subprocess.run([sys.executable, "-m", "tr2.train", "--side", "cupy", "--model", model, "--dtype", dtype,
                        "--device", "cuda", "--steps", "6", "--eval-interval", "5", "--eval-iters", "2",
                        "--metrics", str(tmp_path / "m.jsonl"), *extra],
                       capture_output=True, text=True, timeout=600, env=env)
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-4000:]
    account = parse_nvrtc_line(p.stdout)
    assert account is not None, p.stdout[-2000:]
    assert account == {"mapped": False, "cupy": [], "tr2": []}, (account, p.stderr[-2000:])
