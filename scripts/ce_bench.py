"""The loss and its gradient on GPT-2's logits (8192 x 50304: gpt2-small's and gpt2-medium's, batch 8 x 1024), the
double-buffered shared-memory rows (TR2_CE_SMEM_DB's cross_entropy_forward_backward_smem2) against the one-row kernel
(cross_entropy_forward_backward_smem), under half roundings, bf16 and f16: the bits compared first (loss and dlogits
must be equal), then the µs a launch of each (`reps` launches recorded as one CUDA graph and replayed,
TR2_VARIANT_TIMING=graph, the default; or eager), the forms alternating over rounds in one process. The kernel writes
dlogits over the logits, so each timed launch reads the previous launch's output: the same bytes and the same
arithmetic, other values.

    PYTHONPATH=lib python3 scripts/ce_bench.py [OUT.jsonl] [rounds] [reps] [dtypes]
"""
from __future__ import annotations

import os
import sys

import numpy as np
import cupy as cp

from event_timing import graph_ms, median_ms, timer
from tr2.cupy_side.gpu import cross_entropy as gpu_ce
from tr2.cupy_side.gpu.backend import CudaBackend
from tr2.cupy_side.gpu.cast import to_half
from tr2.models import load_model
from tr2.results import jsonl_line

TIMING = os.environ.get("TR2_VARIANT_TIMING", "graph")
timer(TIMING)   # stops the script on a value other than graph or eager
TIME = graph_ms if TIMING == "graph" else median_ms
FORMS = ("double", "one-row")


def main(argv) -> int:
    out = argv[0] if argv else "ce_bench.jsonl"
    rounds = int(argv[1]) if len(argv) > 1 else 3
    reps = int(argv[2]) if len(argv) > 2 else 20
    dtypes = (argv[3] if len(argv) > 3 else "bfloat16,float16").split(",")
    cfg = load_model("gpt2-small")
    N, V = cfg.batch_size * cfg.block_size, cfg.vocab_size
    rs = np.random.default_rng(0)
    rows = []
    open(out, "w").close()   # each dtype's row is added as it is measured: a stopped call keeps the finished ones
    for dtype in dtypes:
        be = CudaBackend(dtype, tf32=True, half_roundings=True)
        logits = to_half(cp.asarray(rs.standard_normal((N, V), dtype=np.float32) * np.float32(3.0)), be.ctx.kind)
        targets = cp.asarray(rs.integers(0, V, size=N).astype(np.int64))
        dloss = be.to_device(1.0)
        outputs = {}
        for form in FORMS:
            gpu_ce.SMEM_DOUBLE_BUFFER = form == "double"
            lg = logits.copy()
            loss, dl = be.cross_entropy_forward_backward(lg, targets, dloss)
            outputs[form] = (cp.asnumpy(loss), cp.asnumpy(dl))
        same = all(np.array_equal(a, b) for a, b in zip(outputs["double"], outputs["one-row"]))
        times = {form: [] for form in FORMS}
        lg = logits.copy()
        for r in range(rounds):
            for form in (FORMS if r % 2 == 0 else FORMS[::-1]):
                gpu_ce.SMEM_DOUBLE_BUFFER = form == "double"
                times[form].append(1e3 * TIME(lambda: be.cross_entropy_forward_backward(lg, targets, dloss), reps))
        gpu_ce.SMEM_DOUBLE_BUFFER = False   # the default
        row = {"dtype": dtype, "shape": [N, V], "bits_equal": bool(same), "timing": TIMING,
               **{f"{form}_us": float(np.median(t)) for form, t in times.items()},
               **{f"{form}_rounds_us": t for form, t in times.items()}}
        rows.append(row)
        with open(out, "a") as f:
            f.write(jsonl_line(row))
        print(f"{dtype:9s} {N} x {V} bits equal {same}: one-row {row['one-row_us']:.1f} -> double-buffered "
              f"{row['double_us']:.1f} us a launch (x{row['double_us'] / row['one-row_us']:.3f})", flush=True)
    return 0 if all(r["bits_equal"] for r in rows) else 1


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
