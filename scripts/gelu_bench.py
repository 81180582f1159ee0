"""bf16 GELU by table against the computing kernels on the models' c_fc shapes (bf16 under half roundings): the bits
compared first (they must be equal), then the µs a launch of each kernel (`reps` launches recorded as one CUDA graph
and replayed, TR2_VARIANT_TIMING=graph, the default, as the step runs them; or eager: the median of `reps` launches
each between its own two events, as before), the forms alternating over rounds in one process.

    PYTHONPATH=lib python3 scripts/gelu_bench.py [OUT.jsonl] [rounds] [reps] [models]
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


def main(argv) -> int:
    out = argv[0] if argv else "gelu_bench.jsonl"
    rounds = int(argv[1]) if len(argv) > 1 else 3
    reps = int(argv[2]) if len(argv) > 2 else 20
    models = (argv[3] if len(argv) > 3 else "nanogpt,gpt2-small,gpt2-medium").split(",")
    be = CudaBackend("bfloat16", tf32=True, half_roundings=True)
    rs = np.random.default_rng(0)
    rows = []
    for model in models:
        cfg = load_model(model)
        shape = (cfg.batch_size * cfg.block_size, 4 * cfg.n_embd)
        x = to_half(cp.asarray(rs.standard_normal(shape, dtype=np.float32)), be.ctx.kind)
        dy = to_half(cp.asarray(rs.standard_normal(shape, dtype=np.float32)), be.ctx.kind)
        outputs = {}
        for form in ("table", "compute"):
            gelu.USE_TABLE = form == "table"
            outputs[form] = (cp.asnumpy(be.gelu_forward(x)), cp.asnumpy(be.gelu_backward(dy, x)))
        same = all(np.array_equal(a, b) for a, b in zip(outputs["table"], outputs["compute"]))
        times = {(form, way): [] for form in ("table", "compute") for way in ("forward", "backward")}
        for r in range(rounds):
            for form in (("table", "compute") if r % 2 == 0 else ("compute", "table")):
                gelu.USE_TABLE = form == "table"
                times[form, "forward"].append(1e3 * TIME(lambda: be.gelu_forward(x), reps))
                times[form, "backward"].append(1e3 * TIME(lambda: be.gelu_backward(dy, x), reps))
        gelu.USE_TABLE = True
        row = {"model": model, "shape": list(shape), "bits_equal": bool(same), "timing": TIMING,
               **{f"{way}_{form}_us": float(np.median(t)) for (form, way), t in times.items()}}
        rows.append(row)
        print(f"{model:12s} {shape[0]} x {shape[1]} bits equal {same}: forward {row['forward_compute_us']:.1f} -> "
              f"{row['forward_table_us']:.1f} us, backward {row['backward_compute_us']:.1f} -> "
              f"{row['backward_table_us']:.1f} us a launch", flush=True)
    with open(out, "w") as f:
        for row in rows:
            f.write(json.dumps(row) + "\n")
    return 0 if all(r["bits_equal"] for r in rows) else 1


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
