"""The residual+LayerNorm backward with each row held in registers against the general body, timed on the GPU at
the models' shapes (bf16 with half roundings, as the training step runs it): 50 launches recorded as one CUDA graph
and replayed (TR2_VARIANT_TIMING=graph, the default, as the step runs them) or issued back to back (eager).

    python scripts/ln_variants.py OUT.jsonl

A dev tool for docs/perf.md (branch lnreg's first measurement); it decides nothing by itself.
"""
from __future__ import annotations

import json
import os
import sys

import numpy as np
import cupy as cp

from tr2.cupy_side.gpu import layernorm as ln
from tr2.cupy_side.gpu.backend import CudaBackend
from tr2.cupy_side.gpu.cast import to_half
from tr2.models import load_model

from event_timing import timer

TIMING = os.environ.get("TR2_VARIANT_TIMING", "graph")
TIME = timer(TIMING)

def main(argv) -> int:
    rows = []
    for model in ("nanogpt", "gpt2-small", "gpt2-medium"):
        cfg = load_model(model)
        be = CudaBackend("bfloat16", tf32=True, half_roundings=True)
        N, C, p = cfg.batch_size * cfg.block_size, cfg.n_embd, cfg.dropout
        rs = np.random.default_rng(0)
        s = cp.asarray(rs.standard_normal((N, C), dtype=np.float32))
        dskip = cp.asarray(rs.standard_normal((N, C), dtype=np.float32))
        dy = to_half(cp.asarray(rs.standard_normal((N, C), dtype=np.float32)), be.ctx.kind)
        w = cp.asarray((1 + 0.1 * rs.standard_normal(C)).astype(np.float32))
        mean = s.mean(axis=1)
        rstd = 1.0 / cp.sqrt(s.var(axis=1) + 1e-5)
        for regs in (False, True):
            ln.register_rows = regs
            t = TIME(lambda: be.residual_layernorm_backward(dy, dskip, s, w, mean, rstd, p, 1337, 1 << 32), 50)
            rows.append({"model": model, "N": N, "C": C, "p": p, "register_rows": regs, "ms": t, "timing": TIMING})
            print(f"{model:12s} N={N} C={C} p={p} register_rows={regs!s:5s} {t * 1000:8.1f} us (with dw_final)",
                  flush=True)
    with open(argv[0], "w") as f:
        f.writelines(json.dumps(r) + "\n" for r in rows)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
