"""Wrapper of kernels/layernorm.cu (no bias)."""
from __future__ import annotations

import numpy as np
import cupy as cp

from .runtime import f32, i32, launch

FILE = "layernorm.cu"
ROWS_PER_BLOCK = 8          # one warp per row
DW_ROWS_PER_GROUP = 256     # rows each dw partial block reduces


def forward(ctx, x: "cp.ndarray", w: "cp.ndarray", eps: float):
    """y feeds a product only: written in the half type in the half builds (how the product reads it)."""
    N, C = x.shape
    y = cp.empty((N, C), dtype=ctx.store_dtype)
    mean = cp.empty((N,), dtype=np.float32)
    rstd = cp.empty((N,), dtype=np.float32)
    grid = (N + ROWS_PER_BLOCK - 1) // ROWS_PER_BLOCK
    launch(FILE, "layernorm_forward", grid, 32 * ROWS_PER_BLOCK, (y, mean, rstd, x, w, i32(N), i32(C), f32(eps), i32(ctx.kind_of(y))))
    return y, mean, rstd


def backward(ctx, dy: "cp.ndarray", x: "cp.ndarray", w: "cp.ndarray", mean: "cp.ndarray", rstd: "cp.ndarray"):
    N, C = x.shape
    dx = cp.empty((N, C), dtype=np.float32)
    grid = (N + ROWS_PER_BLOCK - 1) // ROWS_PER_BLOCK
    launch(FILE, "layernorm_backward_dx", grid, 32 * ROWS_PER_BLOCK, (dx, dy, x, w, mean, rstd, i32(N), i32(C), i32(ctx.kind_of(dy))))
    return dx, weight_grad(ctx, dy, x, mean, rstd)


def weight_grad(ctx, dy: "cp.ndarray", x: "cp.ndarray", mean: "cp.ndarray", rstd: "cp.ndarray",
                pairs: bool = True) -> "cp.ndarray":
    """dw = sum over rows of dy * xhat, in a fixed order (partials per row group, then their sum); also the fused
    residual + LayerNorm's (gpu/residual_layernorm.py). Two columns a thread where C is even (the same sums, the
    same bits; pairs=False takes the one-column form, for the test that holds them equal)."""
    N, C = x.shape
    dw = cp.empty((C,), dtype=np.float32)
    G = (N + DW_ROWS_PER_GROUP - 1) // DW_ROWS_PER_GROUP
    part = ctx.ws.get("ln_dw_part", (G, C), np.float32)
    args = (part, dy, x, mean, rstd, i32(N), i32(C), i32(DW_ROWS_PER_GROUP), i32(ctx.kind_of(dy)))
    if pairs and C % 2 == 0:
        launch(FILE, "layernorm_backward_dw_partial_pairs", ((C // 2 + 31) // 32, G), (32, 8), args)
    else:
        launch(FILE, "layernorm_backward_dw_partial", ((C + 31) // 32, G), (32, 8), args)
    launch(FILE, "layernorm_backward_dw_final", ((C + 255) // 256,), (256,), (dw, part, i32(G), i32(C)))
    return dw
