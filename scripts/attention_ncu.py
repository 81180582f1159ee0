"""One forward and one backward of our attention kernels for Nsight Compute, after a warm-up pass of each: the second
pass runs between cudaProfilerStart and cudaProfilerStop, so that `ncu --profile-from-start off -k regex:attn_` sees
every attention kernel of that pass, loaded and with its workspace allocated, however many the build launches (the
half builds under half roundings four, the float32 builds three: a fixed --launch-skip 4 passed the float32 forward
by, call 2 of results/h100-perf-20261206b).

    ncu --clock-control none -k regex:attn_ --profile-from-start off --section ... \
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
    for profiled in (False, True):
        if profiled:
            cp.cuda.runtime.deviceSynchronize()
            cp.cuda.profiler.start()
        out, saved = be.attention_forward(qkv, H, cfg.dropout, 1337, 1 << 32)
        be.attention_backward(dout, qkv, saved, H, cfg.dropout, 1337, 1 << 32)
    cp.cuda.runtime.deviceSynchronize()
    cp.cuda.profiler.stop()
    print(f"attention {model} {dtype} hr={hr}: B={B} T={T} C={C} H={H} dropout={cfg.dropout}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
