"""GELU's faster forms against the computing kernels on the models' c_fc shapes, under half roundings: bf16 by table
(mode bf16, the default) or f16 within an ulp (mode f16fast: gelu_forward_f16_fast / gelu_backward_f16_fast,
TR2_GELU_F16_FAST=1). The bits compared first (they must be equal; f16fast: within one ulp, the share moved reported),
then the µs a launch of each kernel (`reps` launches recorded as one CUDA graph and replayed, TR2_VARIANT_TIMING=graph,
the default, as the step runs them; or eager: the median of `reps` launches each between its own two events, as
before), the forms alternating over rounds in one process. x ~ N(0, scale^2) (GELU_BENCH_SCALE, default 1: the
groups the fast kernels send through the computing path grow with it), dy ~ N(0, 1). (Mode f16seg, float16 by segment,
went with that form: gelu.cu's header.)

    PYTHONPATH=lib python3 scripts/gelu_bench.py [OUT.jsonl] [rounds] [reps] [models] [bf16|f16fast]
"""
from __future__ import annotations

import json
import os
import sys

import numpy as np
import cupy as cp

from event_timing import graph_ms, median_ms, timer
from tr2.cupy_side.gpu import gelu
from tr2.cupy_side.gpu.backend import CudaBackend
from tr2.cupy_side.gpu.cast import to_half
from tr2.models import load_model

TIMING = os.environ.get("TR2_VARIANT_TIMING", "graph")
timer(TIMING)   # stops the script on a value other than graph or eager
TIME = graph_ms if TIMING == "graph" else median_ms   # eager: the median of single launches, as before


def _use_table(on: bool) -> None:
    gelu.USE_TABLE = on


def _use_fast(on: bool) -> None:
    gelu.F16_FAST = 1 if on else 0


# mode -> (build dtype, the fast form's name, its switch)
MODES = {"bf16": ("bfloat16", "table", _use_table), "f16fast": ("float16", "fast", _use_fast)}


def _ulps(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Units in the last place between float16 bits (uint16 arrays); different signs count 2^16, NaN against NaN 0."""
    a, b = a.astype(np.int64), b.astype(np.int64)
    nan = ((a & 0x7FFF) > 0x7C00) & ((b & 0x7FFF) > 0x7C00)
    return np.where(nan, 0, np.where((a >> 15) == (b >> 15), np.abs(a - b), 1 << 16))


def main(argv) -> int:
    out = argv[0] if argv else "gelu_bench.jsonl"
    rounds = int(argv[1]) if len(argv) > 1 else 3
    reps = int(argv[2]) if len(argv) > 2 else 20
    models = (argv[3] if len(argv) > 3 else "nanogpt,gpt2-small,gpt2-medium").split(",")
    mode = argv[4] if len(argv) > 4 else "bf16"
    dtype, fast, use = MODES[mode]
    scale = float(os.environ.get("GELU_BENCH_SCALE", "1"))
    be = CudaBackend(dtype, tf32=True, half_roundings=True)
    forms = (fast, "compute")
    rs = np.random.default_rng(0)
    rows = []
    for model in models:
        cfg = load_model(model)
        shape = (cfg.batch_size * cfg.block_size, 4 * cfg.n_embd)
        x = to_half(cp.asarray(rs.standard_normal(shape, dtype=np.float32) * np.float32(scale)), be.ctx.kind)
        dy = to_half(cp.asarray(rs.standard_normal(shape, dtype=np.float32)), be.ctx.kind)
        outputs = {}
        for form in forms:
            use(form == fast)
            outputs[form] = (cp.asnumpy(be.gelu_forward(x)), cp.asnumpy(be.gelu_backward(dy, x)))
        same = all(np.array_equal(a, b) for a, b in zip(outputs[fast], outputs["compute"]))
        steps = [_ulps(a, b) for a, b in zip(outputs[fast], outputs["compute"])]
        within = {"max_ulps": [int(d.max()) for d in steps], "moved_share": [float((d > 0).mean()) for d in steps]}
        ok = same or (mode == "f16fast" and max(within["max_ulps"]) <= 1)
        times = {(form, way): [] for form in forms for way in ("forward", "backward")}
        for r in range(rounds):
            for form in (forms if r % 2 == 0 else forms[::-1]):
                use(form == fast)
                times[form, "forward"].append(1e3 * TIME(lambda: be.gelu_forward(x), reps))
                times[form, "backward"].append(1e3 * TIME(lambda: be.gelu_backward(dy, x), reps))
        use(True)   # the switch back to its default (on)
        row = {"model": model, "mode": mode, "f16_fast": 1 if mode == "f16fast" else 0, "scale": scale,
               "shape": list(shape), "bits_equal": bool(same),
               "within_an_ulp": bool(ok), **within, "timing": TIMING,
               **{f"{way}_{form}_us": float(np.median(t)) for (form, way), t in times.items()}}
        rows.append(row)
        print(f"{model:12s} {mode} {shape[0]} x {shape[1]} scale {scale} bits equal {same} (max ulps "
              f"{within['max_ulps']}, moved {within['moved_share']}): forward "
              f"{row['forward_compute_us']:.1f} -> {row[f'forward_{fast}_us']:.1f} us, backward "
              f"{row['backward_compute_us']:.1f} -> {row[f'backward_{fast}_us']:.1f} us a launch", flush=True)
    with open(out, "w") as f:
        for row in rows:
            f.write(json.dumps(row) + "\n")
    return 0 if all(r["within_an_ulp"] for r in rows) else 1


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
