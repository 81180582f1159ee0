"""GELU forward and backward on a model's c_fc shape (bf16 under half roundings), twice, for Nsight Compute:
`ncu --launch-skip 4 --launch-count 2 -k regex:gelu_` sees the second pass (the first two gelu_ launches are the
computing kernels filling the bf16 tables, at the backend's construction). Form `table` (default): the bf16
table kernels, as a run takes them; `compute`: the computing kernels (gpu/gelu.py's USE_TABLE off).

    ncu --clock-control none -k regex:gelu_ --launch-skip 4 --launch-count 2 --section ... \
        python3 scripts/elementwise_ncu.py [model] [table|compute]
"""
from __future__ import annotations

import sys

import numpy as np
import cupy as cp

from tr2.cupy_side.gpu import gelu
from tr2.cupy_side.gpu.backend import CudaBackend
from tr2.cupy_side.gpu.cast import to_half
from tr2.models import load_model


def main(argv) -> int:
    model = argv[0] if argv else "nanogpt"
    form = argv[1] if len(argv) > 1 else "table"
    if form not in ("table", "compute"):
        raise SystemExit(f"form {form!r}: table or compute")
    gelu.USE_TABLE = form == "table"
    cfg = load_model(model)
    be = CudaBackend("bfloat16", tf32=True, half_roundings=True)
    rs = np.random.default_rng(0)
    n = cfg.batch_size * cfg.block_size
    h = to_half(cp.asarray(rs.standard_normal((n, 4 * cfg.n_embd), dtype=np.float32)), be.ctx.kind)
    dg = to_half(cp.asarray(rs.standard_normal((n, 4 * cfg.n_embd), dtype=np.float32)), be.ctx.kind)
    for _ in range(2):
        be.gelu_forward(h)
        be.gelu_backward(dg, h)
    cp.cuda.runtime.deviceSynchronize()
    print(f"gelu {model}: {n} x {4 * cfg.n_embd} bf16, {form} kernels")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
