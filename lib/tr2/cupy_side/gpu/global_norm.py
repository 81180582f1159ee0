"""Wrapper of kernels/global_norm.cu: sqrt of the sum of squares of many tensors, left on the device."""
from __future__ import annotations

import numpy as np
import cupy as cp

from . import kernel_switch
from .runtime import i32, launch
from .tensors import CHUNK, THREADS, table_for

FILE = "global_norm.cu"
# The _wide kernels: the same sums in the same order, a block's loads issued before its first add (kernels/global_norm.cu's
# header); TR2_GLOBAL_NORM_WIDE=0 the one-load-a-turn kernels as before the thirty-first session.
WIDE = bool(kernel_switch("TR2_GLOBAL_NORM_WIDE", 1))


def global_norm(ctx, grads) -> "cp.ndarray":
    """0-d float32 device array. grads: float32, or the build's half type (uint16 bits)."""
    out = cp.empty((), dtype=np.float32)
    if len(grads) == 0:
        out.data.memset_async(0, out.nbytes)   # not fill(0): CuPy's fill kernel compiles with NVRTC at run time
        return out
    t = table_for(None, grads, half_kind=ctx.kind)
    part = ctx.ws.get("gn_partial", (t.n_blocks,), np.float32)
    wide = "_wide" if WIDE else ""
    launch(FILE, "global_norm_partial" + wide, t.n_blocks, THREADS,
           (part, t.table, t.chunk_tensor, t.chunk_start, i32(CHUNK)))
    launch(FILE, "global_norm_final" + wide, 1, 1024, (out, part, i32(t.n_blocks)))
    return out
