"""Wrapper of kernels/residual_layernorm.cu: s = x + dropout(b) and y = LayerNorm(s) in one pass, and its backward
(the stream's gradient with the skip path's added, the branch's through the same mask, the weight's in a fixed
order: layernorm_backward.cuh's body, the plain LayerNorm's too)."""
from __future__ import annotations

import numpy as np
import cupy as cp

from . import REGISTER_ROW_SIZES, dropout as _dropout, layernorm
from .halfbits import KIND_F32
from .layernorm import ROWS_PER_BLOCK, rows_backward
from .runtime import NULL, f32, i32, launch

FILE = "residual_layernorm.cu"


def forward(ctx, x: "cp.ndarray", b: "cp.ndarray", w: "cp.ndarray", eps: float, p: float, seed: int, offset: int,
            offset_add=None):
    """-> (s float32, y, mean, rstd); y feeds a product only: the half type in the half builds."""
    N, C = x.shape
    s = cp.empty((N, C), dtype=np.float32)
    y = cp.empty((N, C), dtype=ctx.store_dtype)
    mean = cp.empty((N,), dtype=np.float32)
    rstd = cp.empty((N,), dtype=np.float32)
    grid = (N + ROWS_PER_BLOCK - 1) // ROWS_PER_BLOCK
    kernel = "residual_layernorm_forward"
    if layernorm.register_rows and C in REGISTER_ROW_SIZES:   # the same formulas with the row held in registers
        kernel = f"{kernel}_c{C}"
    launch(FILE, kernel, grid, 32 * ROWS_PER_BLOCK,
           (s, y, mean, rstd, x, b, w, i32(N), i32(C), f32(eps), i32(ctx.kind_of(b)), i32(ctx.kind_of(y)))
           + _dropout.kernel_args(p, seed, offset, offset_add))
    return s, y, mean, rstd


def backward(ctx, dy: "cp.ndarray", dskip, s: "cp.ndarray", w: "cp.ndarray", mean: "cp.ndarray", rstd: "cp.ndarray",
             p: float, seed: int, offset: int, offset_add=None, branch_float32: bool = False):
    """-> (ds float32, db, dw). db feeds the branch's product: the half type in the half builds, float32 where
    branch_float32 (the embedding's gradient, model.py's first LayerNorm); where it would equal ds (float32 without
    dropout) it is ds itself (nothing written)."""
    N, C = s.shape
    ds = cp.empty((N, C), dtype=np.float32)
    db_dtype = np.float32 if branch_float32 else ctx.store_dtype
    db = None if (np.dtype(db_dtype) == np.float32 and p == 0.0) else cp.empty((N, C), dtype=db_dtype)
    dw = rows_backward(ctx, FILE, "residual_layernorm_backward", "residual_layernorm_dw_final", N, C,
                       lambda part: (ds, NULL if db is None else db, part, dy, NULL if dskip is None else dskip, s, w,
                                     mean, rstd, i32(N), i32(C), i32(ctx.kind_of(dy)),
                                     i32(KIND_F32 if db is None else ctx.kind_of(db)))
                       + _dropout.kernel_args(p, seed, offset, offset_add), bulk_rows=(s, dskip, dy, mean, rstd))
    return ds, (ds if db is None else db), dw
