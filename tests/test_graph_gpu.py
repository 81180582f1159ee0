"""--cuda-graph: the captured, replayed step trains as the eager loop does (GPU only).

The CPU counterpart of what the graph relies on is in tests/test_cupy_model.py: the device step counter
numbers the dropout masks as the step argument does, and set_lr + apply_update is optimizer_step.

Tolerance: each step's loss within 1e-6 relative of the eager run's, steps 0..30. Not bit-equality:
the embedding backward adds into dwte with float atomics, so two eager runs already differ in the
last bits after a few steps (results/method_b-20261129-100402-h200-methodb-nanogpt-stacks: the cupy
side against itself 6.7e-8 at step 3, at most 9.4e-8 through step 40). A replay that read a stale
input would miss by far more: another batch changes the loss by percents, another dropout mask
(p = 0.2) by about 1e-2, and the step's learning rate moves the next loss by about 1e-3.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest


def _cuda_ok() -> bool:
    try:
        import cupy
        return cupy.cuda.runtime.getDeviceCount() > 0
    except Exception:
        return False


pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not _cuda_ok(), reason="no CUDA device")]

STEPS = 30
TOL = 1e-6


def _losses(path: Path) -> dict[int, float]:
    return {r["step"]: r["loss"] for r in map(json.loads, path.read_text().splitlines()) if r["kind"] == "loss"}


def _train(tmp_path: Path, name: str, *argv) -> tuple[dict, str]:
    metrics = tmp_path / f"{name}.jsonl"
    p = subprocess.run([sys.executable, "-m", "tr2.train", "--side", "cupy", "--device", "cuda", "--steps", str(STEPS),
                        "--dropout", "0.2", "--metrics", str(metrics), *argv],
                       capture_output=True, text=True, timeout=600, env=dict(os.environ, PYTHONUNBUFFERED="1"))
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-4000:]
    return _losses(metrics), p.stdout


@pytest.mark.parametrize("model, dtype", [("tiny", "float32"), ("nanogpt", "bfloat16"), ("nanogpt", "float32")])
def test_graph_replays_train_as_the_eager_loop(tmp_path, model, dtype):
    common = ["--model", model, "--dtype", dtype] + (["--half-roundings"] if dtype == "bfloat16" else [])
    eager, _ = _train(tmp_path, "eager", *common)
    graph, out = _train(tmp_path, "graph", *common, "--cuda-graph")
    assert "cuda graph:" in out
    assert sorted(eager) == sorted(graph) == list(range(STEPS + 1))
    rel = {s: abs(graph[s] - eager[s]) / abs(eager[s]) for s in eager}
    worst = max(rel, key=rel.get)
    print(f"{model} {dtype}: graph vs eager max rel {rel[worst]:.2e} at step {worst}; "
          f"loss {eager[0]:.4f} -> {eager[STEPS]:.4f}")
    assert rel[worst] <= TOL, (worst, eager[worst], graph[worst])
    assert eager[STEPS] < eager[0] - 0.2  # it trained: both curves fall, not two flat ones that agree
