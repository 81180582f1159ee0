"""GELU forward and backward on a model's c_fc shape (bf16 under half roundings), twice, for Nsight Compute:
`ncu --launch-skip 2 --launch-count 2 -k regex:gelu_` sees the second pass.

    ncu --clock-control none -k regex:gelu_ --launch-skip 2 --launch-count 2 --section ... \
        python3 scripts/elementwise_ncu.py [model]
"""
from __future__ import annotations

import sys

import numpy as np
import cupy as cp

from tr2.cupy_side.gpu.backend import CudaBackend
from tr2.cupy_side.gpu.cast import to_half
from tr2.models import load_model


def main(argv) -> int:
    model = argv[0] if argv else "nanogpt"
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
    print(f"gelu {model}: {n} x {4 * cfg.n_embd} bf16")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
