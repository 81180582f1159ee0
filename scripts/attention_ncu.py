"""One forward and one backward of our attention kernels for Nsight Compute, after a warm-up pass of each (so that
`ncu --launch-skip 3 --launch-count 3 -k regex:attn_` sees the forward, dQ and dK/dV kernels of the second pass,
loaded and with their workspace allocated).

    ncu --clock-control none -k regex:attn_ --launch-skip 3 --launch-count 3 --section ... \
        python3 scripts/attention_ncu.py [model] [dtype] [half_roundings 0/1]
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
    hr = (argv[2] != "0") if len(argv) > 2 else True
    cfg = load_model(model)
    be = CudaBackend(dtype, tf32=True, half_roundings=hr)
    B, T, C, H = cfg.batch_size, cfg.block_size, cfg.n_embd, cfg.n_head
    rs = np.random.default_rng(0)
    qkv = cp.asarray(rs.standard_normal((B, T, 3 * C), dtype=np.float32))
    dout = cp.asarray(rs.standard_normal((B, T, C), dtype=np.float32))
    if be.ctx.half:
        qkv, dout = to_half(qkv, be.ctx.kind), to_half(dout, be.ctx.kind)
    for _ in range(2):
        out, saved = be.attention_forward(qkv, H, cfg.dropout, 1337, 1 << 32)
        be.attention_backward(dout, qkv, saved, H, cfg.dropout, 1337, 1 << 32)
    cp.cuda.runtime.deviceSynchronize()
    print(f"attention {model} {dtype} hr={hr}: B={B} T={T} C={C} H={H} dropout={cfg.dropout}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
