"""Wrapper of kernels/adamw.cu: one launch updates every parameter (multi-tensor), scalars from `hyper`, and
rewrites the half copies the products read (GpuContext.keep_half_copy) from the new masters. Gradients are float32
or, the products' dW under half roundings, the build's half type (read as written)."""
from __future__ import annotations

import numpy as np
import cupy as cp

from .runtime import i32, launch
from .tensors import CHUNK, THREADS, table_for

FILE = "adamw.cu"


def update(ctx, params, grads, ms, vs, hyper) -> None:
    """In place. hyper: device array [lr, beta1, beta2, eps, weight_decay, bias_corr1, bias_corr2, grad_scale,
    skip] (ops/adamw.HYPER)."""
    if len(params) == 0:
        return
    h = hyper if isinstance(hyper, cp.ndarray) else cp.asarray(hyper)
    if h.dtype != np.float32:
        h = h.astype(np.float32)
    t = table_for(params, grads, ms, vs, [ctx.half_copy(p) for p in params], ctx.kind)
    launch(FILE, "adamw_update", t.n_blocks, THREADS,
           (t.table, t.chunk_tensor, t.chunk_start, i32(CHUNK), h, i32(ctx.kind)))
