"""Wrapper of kernels/gelu.cu (exact erf GELU)."""
from __future__ import annotations

import numpy as np
import cupy as cp

from .halfbits import KIND_F32
from .runtime import THREADS, blocks_for, i32, i64, launch

FILE = "gelu.cu"


def _empty(ctx, shape):
    """GELU's output and its input gradient feed only products: the half type in the half builds."""
    return cp.empty(shape, dtype=np.uint16 if ctx.act_kind != KIND_F32 else np.float32)


def forward(ctx, x: "cp.ndarray") -> "cp.ndarray":
    y = _empty(ctx, x.shape)
    launch(FILE, "gelu_forward", blocks_for(x.size), THREADS,
           (y, x, i64(x.size), i32(ctx.kind_of(x)), i32(ctx.kind_of(y))))
    return y


def backward(ctx, dy: "cp.ndarray", x: "cp.ndarray") -> "cp.ndarray":
    dx = _empty(ctx, x.shape)
    launch(FILE, "gelu_backward", blocks_for(x.size), THREADS,
           (dx, dy, x, i64(x.size), i32(ctx.kind_of(dy)), i32(ctx.kind_of(x)), i32(ctx.kind_of(dx))))
    return dx
