"""One residual + LayerNorm forward and backward at a model's shape for Nsight Compute, after a warm-up pass (so that
`ncu --launch-skip 3 --launch-count 3 -k regex:residual_layernorm` sees the second pass's forward, backward and dw
sum, loaded and with their workspace allocated). The inputs as the step has them under half roundings: the stream
x, its gradient from the next add dskip and the weight in float32, the branch b and the incoming gradient dy in the
half type.

    ncu --clock-control none -k regex:residual_layernorm --launch-skip 3 --launch-count 3 --section ... \
        python3 scripts/layernorm_ncu.py [model] [dtype]

Why: LayerNorm's backward moves its bytes at ~2.9 TB/s where the forward reaches ~3.9 (results/h200-perf-20261204,
calls 3-4: gpt2-small 34.5 us a launch for ~101 MB), and what stalls it decides the next form.
"""
from __future__ import annotations

import sys

import numpy as np
import cupy as cp

from tr2.cupy_side.gpu.backend import CudaBackend
from tr2.cupy_side.gpu.cast import to_half
from tr2.models import load_model


def main(argv) -> int:
    model = argv[0] if argv else "gpt2-small"
    dtype = argv[1] if len(argv) > 1 else "bfloat16"
    cfg = load_model(model)
    be = CudaBackend(dtype, tf32=True, half_roundings=True)
    B, T, C = cfg.batch_size, cfg.block_size, cfg.n_embd
    rs = np.random.default_rng(0)
    x = cp.asarray(rs.standard_normal((B * T, C), dtype=np.float32))
    dskip = cp.asarray(rs.standard_normal((B * T, C), dtype=np.float32))
    w = cp.asarray(1.0 + 0.1 * rs.standard_normal(C, dtype=np.float32))
    b = cp.asarray(rs.standard_normal((B * T, C), dtype=np.float32))
    dy = cp.asarray(rs.standard_normal((B * T, C), dtype=np.float32))
    if be.ctx.half:
        b, dy = to_half(b, be.ctx.kind), to_half(dy, be.ctx.kind)
    for _ in range(2):
        s, y, mean, rstd = be.residual_layernorm_forward(x, b, w, 1e-5, cfg.dropout, 1337, 1 << 32)
        be.residual_layernorm_backward(dy, dskip, s, w, mean, rstd, cfg.dropout, 1337, 1 << 32)
    cp.cuda.runtime.deviceSynchronize()
    print(f"residual layernorm {model} {dtype}: B={B} T={T} C={C} dropout={cfg.dropout}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
