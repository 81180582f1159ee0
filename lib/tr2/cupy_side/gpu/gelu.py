"""Wrapper of kernels/gelu.cu (exact erf GELU)."""
from __future__ import annotations

import cupy as cp

from .runtime import THREADS, blocks_for, i32, i64, launch

FILE = "gelu.cu"


def _empty(ctx, shape):
    """GELU's output and its input gradient feed only products: the half type in the half builds."""
    return cp.empty(shape, dtype=ctx.store_dtype)


def _aligned(*arrays) -> None:
    """gelu.cu reads and writes in 16-byte pieces: every array must start on 16 bytes (fresh ones do)."""
    for a in arrays:
        if a.data.ptr % 16 or not a.flags.c_contiguous:
            raise ValueError(f"gelu: an array of shape {a.shape} is not contiguous from a 16-byte boundary")


def _blocks(n: int) -> int:
    """gelu.cu's threads take eight elements each (the last n % 8 one each, in the first block)."""
    return blocks_for(max(n // 8, n % 8))


def forward(ctx, x: "cp.ndarray") -> "cp.ndarray":
    y = _empty(ctx, x.shape)
    _aligned(x)
    launch(FILE, "gelu_forward", _blocks(x.size), THREADS,
           (y, x, i64(x.size), i32(ctx.kind_of(x)), i32(ctx.kind_of(y))))
    return y


def backward(ctx, dy: "cp.ndarray", x: "cp.ndarray") -> "cp.ndarray":
    dx = _empty(ctx, x.shape)
    _aligned(dy, x)
    launch(FILE, "gelu_backward", _blocks(x.size), THREADS,
           (dx, dy, x, i64(x.size), i32(ctx.kind_of(dy)), i32(ctx.kind_of(x)), i32(ctx.kind_of(dx))))
    return dx
