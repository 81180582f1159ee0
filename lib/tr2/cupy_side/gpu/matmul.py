"""The matrix products of the backend (y = x W^T and its gradients), through gpu/blas.py.

Row-major throughout: x [N, K], W [M, K], y [N, M]. As ops/matmul.py: every product reads its inputs as
the build's operands (float32, TF32 inside cuBLAS, or the half type: inputs already held as half bits are
read as they are, a weight with a half copy (GpuContext.keep_half_copy, refreshed by AdamW) through its copy,
other float32 ones are cast into workspace buffers) and accumulates in float32. With
half_roundings cuBLAS writes the half type (and may reduce in it): y, dx and dW are handed on as half bits
(products read y and dx so; AdamW and the global norm read dW so, widening it exactly as they read it: no cast
kernel for the 48-96 weight gradients of a GPT-2 step)."""
from __future__ import annotations

import numpy as np
import cupy as cp

from . import blas
from .cast import from_half, product_input
from .halfbits import KIND_F32


def gemm(ctx, trans_a: bool, trans_b: bool, M: int, N: int, K: int, A, lda: int, B, ldb: int,
         out: "cp.ndarray", ldc: int, *, in_type: int, compute: int, round_kind: int = KIND_F32,
         alpha: float = 1.0, batch: int = 1, stride_a: int = 0, stride_b: int = 0, stride_c: int = 0,
         out_name: str = "gemm_out") -> "cp.ndarray":
    """out (float32, row-major [batch, M, N]) = alpha op(A) op(B), A and B already of cuBLAS type in_type.

    round_kind (bf16/fp16): cuBLAS writes that half type into a workspace buffer, widened into out."""
    cb = ctx.cublas
    if out.dtype == np.uint16:   # the half type itself, handed on as bits
        out_type = blas.CUDA_R_16BF if round_kind == 1 else blas.CUDA_R_16F
        cb.gemm_rm(trans_a, trans_b, M, N, K, A, in_type, lda, B, in_type, ldb, out, out_type, ldc, compute,
                   alpha=alpha, batch=batch, stride_a=stride_a, stride_b=stride_b, stride_c=stride_c)
    elif round_kind != KIND_F32:
        tmp = ctx.ws.get(out_name + "_half", out.shape, np.uint16)
        out_type = blas.CUDA_R_16BF if round_kind == 1 else blas.CUDA_R_16F
        cb.gemm_rm(trans_a, trans_b, M, N, K, A, in_type, lda, B, in_type, ldb, tmp, out_type, ldc, compute,
                   alpha=alpha, batch=batch, stride_a=stride_a, stride_b=stride_b, stride_c=stride_c)
        from_half(tmp, round_kind, out=out)
    else:
        cb.gemm_rm(trans_a, trans_b, M, N, K, A, in_type, lda, B, in_type, ldb, out, blas.CUDA_R_32F, ldc, compute,
                   alpha=alpha, batch=batch, stride_a=stride_a, stride_b=stride_b, stride_c=stride_c)
    return out


def _mm(ctx, *args, **kw):
    return gemm(ctx, *args, in_type=ctx.cuda_type, compute=ctx.compute, round_kind=ctx.round_kind, **kw)


def _weight(ctx, w: "cp.ndarray") -> "cp.ndarray":
    """The weight as the product reads it: its half copy where it has one, else as product_input gives it."""
    copy = ctx.half_copy(w)
    return copy if copy is not None else product_input(ctx, w, "mm_w")


def padded_rows(w: "cp.ndarray") -> "cp.ndarray":
    """w with the zero rows below it where w is the top rows of a larger C-contiguous buffer of its width (the
    char model's classifier weight, CudaBackend.classifier_weight, and its half copy), else w itself."""
    b = w.base
    if (b is not None and b.ndim == 2 and w.ndim == 2 and b.flags.c_contiguous and w.flags.c_contiguous
            and b.data.ptr == w.data.ptr and b.dtype == w.dtype and b.shape[1] == w.shape[1] and b.shape[0] > w.shape[0]):
        return b
    return w


def column_base(y: "cp.ndarray", width: int) -> "cp.ndarray | None":
    """The C-contiguous [N, width] buffer whose first columns the view y [N, M] is (the padded logits forward
    hands on, and the dlogits written over them), or None where y is no such view."""
    b = y.base
    if (b is not None and b.ndim == 2 and b.flags.c_contiguous and b.shape == (y.shape[0], width)
            and b.data.ptr == y.data.ptr and b.dtype == y.dtype and y.strides == b.strides):
        return b
    return None


def forward(ctx, x: "cp.ndarray", w: "cp.ndarray") -> "cp.ndarray":
    """y = x w^T. Where w has zero rows below it (padded_rows: M to Mp, a multiple of 8), the product runs over all
    Mp rows into an [N, Mp] buffer and y is its first M columns, a view with rows Mp apart. Why: with M = 65 (the
    char model's vocabulary) the rows of y start on 2-byte boundaries and cuBLAS takes its align1 kernels for the
    classifier's three products (cutlass_75 ..._align1: 69.8 us a step of nanogpt bf16, call 2 of
    results/h200-perf-20261202); padded, every row is 16-byte aligned. The extra columns hold x 0 = 0."""
    N, K = x.shape
    M = w.shape[0]
    xa = product_input(ctx, x, "mm_x")
    wa = padded_rows(_weight(ctx, w))
    Mp = wa.shape[0]
    y = cp.empty((N, Mp), dtype=ctx.out_dtype)
    _mm(ctx, False, True, N, Mp, K, xa, K, wa, K, y, Mp, out_name="mm_y")
    return y if Mp == M else y[:, :M]


def backward(ctx, dy: "cp.ndarray", x: "cp.ndarray", w: "cp.ndarray"):
    """(dx, dW). dy may be forward's padded view (or a gradient written over it): then both products run over the
    Mp padded rows (the padding's columns of dy are x 0 = 0, its rows of w zero: they add exact zeros) and dW is the
    first M rows of an [Mp, K] buffer; a C-contiguous dy takes the M rows as they are."""
    N, K = x.shape
    M = w.shape[0]
    wa = _weight(ctx, w)
    wp = padded_rows(wa)
    dyp = column_base(dy, wp.shape[0]) if wp is not wa else None
    if dyp is not None:
        wa, dy, M = wp, dyp, wp.shape[0]
    dya = product_input(ctx, dy, "mm_dy")
    xa = product_input(ctx, x, "mm_x")
    dx = cp.empty((N, K), dtype=ctx.out_dtype)
    dw = cp.empty((M, K), dtype=ctx.out_dtype)

    _mm(ctx, True, False, M, K, N, dya, M, xa, K, dw, K, out_name="mm_dw")   # dW = dy^T x
    _mm(ctx, False, False, N, K, M, dya, M, wa, K, dx, K, out_name="mm_dx")   # dx = dy W
    return dx, (dw if dyp is None else dw[:w.shape[0]])
