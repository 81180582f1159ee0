"""Wrapper of kernels/attention.cu with the four products per head in cuBLAS (strided batched).

Layout: q, k, v, y [B, H, T, hs] (split out of qkv [B, T, 3C]); scores S, P [B, H, T, T]. The
probabilities P (float32) are what the backward keeps; q, k, v and the dropped-out probabilities are
rebuilt in the backward from qkv and the generator.

Element types, as ops/attention.py: q, k, v and dout are product operands (the build's type); Pd and dS
are operands attention makes itself ("internal": TF32 under TF32, the half type only with half_roundings,
else float32); out and dqkv are product outputs (rounded only with half_roundings); S and dPd stay float32.
So the products run in one of three ways:
  float32 build:              float32 buffers, cuBLAS compute as the build (TF32 or plain float32);
  half build:                 float32 buffers holding the operands rounded to the half type, Pd and dS
                              unrounded, plain float32 compute (mixed half x float32 products, exact);
  half build, half roundings: half-type buffers, compute float32, out/dqkv products written in the half type.
"""
from __future__ import annotations

import math

import numpy as np
import cupy as cp

from . import blas
from . import dropout as _dropout
from .halfbits import KIND_BF16, KIND_F16, KIND_F32
from .matmul import gemm
from .runtime import NULL, THREADS, blocks_for, f32, i32, i64, launch, u32, u64

FILE = "attention.cu"
ROWS_PER_BLOCK = 8
_SUFFIX = {KIND_F32: "f32", KIND_BF16: "bf16", KIND_F16: "f16"}


class AttentionSaved:
    """What attention_forward hands to attention_backward (opaque to the model): P [B, H, T, T]."""
    __slots__ = ("P",)

    def __init__(self, P):
        self.P = P


class _Plan:
    """Storage kind of the attention's product buffers, the rounding applied to operands at the split,
    the cuBLAS input type and compute type, and the rounding of product outputs."""

    def __init__(self, ctx):
        if not ctx.half:
            self.store, self.operand_round = KIND_F32, KIND_F32
            self.in_type, self.compute, self.out_round = blas.CUDA_R_32F, ctx.compute, KIND_F32
        elif ctx.half_roundings:
            self.store, self.operand_round = ctx.kind, KIND_F32   # the store itself rounds
            self.in_type, self.compute, self.out_round = ctx.cuda_type, blas.COMPUTE_32F, ctx.kind
        else:
            self.store, self.operand_round = KIND_F32, ctx.kind
            self.in_type, self.compute, self.out_round = blas.CUDA_R_32F, blas.COMPUTE_32F, KIND_F32
        self.dtype = np.float32 if self.store == KIND_F32 else np.uint16
        self.suffix = _SUFFIX[self.store]


def _split(plan, dst, src, B, T, H, hs, src_stride, col0):
    launch(FILE, "attn_split_" + plan.suffix, blocks_for(dst.size), THREADS,
           (dst, src, i32(B), i32(T), i32(H), i32(hs), i32(src_stride), i32(col0), i32(plan.operand_round)))


def _merge(dst, src, B, T, H, hs, dst_stride, col0):
    launch(FILE, "attn_merge", blocks_for(src.size), THREADS,
           (dst, src, i32(B), i32(T), i32(H), i32(hs), i32(dst_stride), i32(col0)))


def _qkv(ctx, plan, qkv, B, T, H, hs):
    C = H * hs
    q = ctx.ws.get("att_q", (B, H, T, hs), plan.dtype)
    k = ctx.ws.get("att_k", (B, H, T, hs), plan.dtype)
    v = ctx.ws.get("att_v", (B, H, T, hs), plan.dtype)
    _split(plan, q, qkv, B, T, H, hs, 3 * C, 0)
    _split(plan, k, qkv, B, T, H, hs, 3 * C, C)
    _split(plan, v, qkv, B, T, H, hs, 3 * C, 2 * C)
    return q, k, v


def _dropout_args(p, seed, offset, offset_add):
    use = 1 if p > 0.0 else 0
    return (i32(use), u64(seed), u64(offset), NULL if offset_add is None else offset_add,
            u32(_dropout.threshold(p) if use else 0), f32(_dropout.scale(p) if use else 1.0))


def _bmm(ctx, plan, trans_a, trans_b, M, N, K, A, lda, Bm, ldb, out, ldc, batch, sa, sb, sc, *,
         rounded, alpha=1.0, name):
    gemm(ctx, trans_a, trans_b, M, N, K, A, lda, Bm, ldb, out, ldc, in_type=plan.in_type, compute=plan.compute,
         round_kind=plan.out_round if rounded else KIND_F32, alpha=alpha, batch=batch, stride_a=sa,
         stride_b=sb, stride_c=sc, out_name=name)


def forward(ctx, qkv: "cp.ndarray", n_head: int, p: float, seed: int, offset: int, offset_add=None):
    B, T, C3 = qkv.shape
    C = C3 // 3
    H = n_head
    hs = C // H
    BH = B * H
    scale = 1.0 / math.sqrt(hs)
    plan = _Plan(ctx)
    q, k, v = _qkv(ctx, plan, qkv, B, T, H, hs)
    S = ctx.ws.get("att_S", (B, H, T, T), np.float32)
    _bmm(ctx, plan, False, True, T, T, hs, q, hs, k, hs, S, T, BH, T * hs, T * hs, T * T,
         rounded=False, name="att_S")                                                  # S = q k^T
    P = cp.empty((B, H, T, T), dtype=np.float32)
    Pd = ctx.ws.get("att_Pd", (B, H, T, T), plan.dtype)
    rows = BH * T
    launch(FILE, "attn_softmax_forward_" + plan.suffix, (rows + ROWS_PER_BLOCK - 1) // ROWS_PER_BLOCK,
           32 * ROWS_PER_BLOCK, (P, Pd, S, i32(rows), i32(T), f32(scale)) + _dropout_args(p, seed, offset, offset_add))
    y = ctx.ws.get("att_y", (B, H, T, hs), np.float32)
    _bmm(ctx, plan, False, False, T, hs, T, Pd, T, v, hs, y, hs, BH, T * T, T * hs, T * hs,
         rounded=True, name="att_y")                                                   # y = Pd v
    out = cp.empty((B, T, C), dtype=np.float32)
    _merge(out, y, B, T, H, hs, C, 0)
    return out, AttentionSaved(P)


def backward(ctx, dout: "cp.ndarray", qkv: "cp.ndarray", saved: AttentionSaved, n_head: int, p: float,
             seed: int, offset: int, offset_add=None) -> "cp.ndarray":
    B, T, C3 = qkv.shape
    C = C3 // 3
    H = n_head
    hs = C // H
    BH = B * H
    scale = 1.0 / math.sqrt(hs)
    plan = _Plan(ctx)
    P = saved.P
    q, k, v = _qkv(ctx, plan, qkv, B, T, H, hs)
    dy = ctx.ws.get("att_dy", (B, H, T, hs), plan.dtype)
    _split(plan, dy, dout, B, T, H, hs, C, 0)
    dargs = _dropout_args(p, seed, offset, offset_add)
    Pd = ctx.ws.get("att_Pd", (B, H, T, T), plan.dtype)
    launch(FILE, "attn_dropout_probs_" + plan.suffix, blocks_for(P.size), THREADS, (Pd, P, i64(P.size)) + dargs)
    dPd = ctx.ws.get("att_dPd", (B, H, T, T), np.float32)
    _bmm(ctx, plan, False, True, T, T, hs, dy, hs, v, hs, dPd, T, BH, T * hs, T * hs, T * T,
         rounded=False, name="att_dPd")                                                # dPd = dy v^T
    dv = ctx.ws.get("att_dv", (B, H, T, hs), np.float32)
    _bmm(ctx, plan, True, False, T, hs, T, Pd, T, dy, hs, dv, hs, BH, T * T, T * hs, T * hs,
         rounded=True, name="att_dv")                                                  # dv = Pd^T dy
    dS = ctx.ws.get("att_dS", (B, H, T, T), plan.dtype)
    rows = BH * T
    launch(FILE, "attn_softmax_backward_" + plan.suffix, (rows + ROWS_PER_BLOCK - 1) // ROWS_PER_BLOCK,
           32 * ROWS_PER_BLOCK, (dS, dPd, P, i32(rows), i32(T)) + dargs)
    dq = ctx.ws.get("att_dq", (B, H, T, hs), np.float32)
    dk = ctx.ws.get("att_dk", (B, H, T, hs), np.float32)
    _bmm(ctx, plan, False, False, T, hs, T, dS, T, k, hs, dq, hs, BH, T * T, T * hs, T * hs,
         rounded=True, alpha=scale, name="att_dq")                                     # dq = scale dS k
    _bmm(ctx, plan, True, False, T, hs, T, dS, T, q, hs, dk, hs, BH, T * T, T * hs, T * hs,
         rounded=True, alpha=scale, name="att_dk")                                     # dk = scale dS^T q
    dqkv = cp.empty((B, T, 3 * C), dtype=np.float32)
    _merge(dqkv, dq, B, T, H, hs, 3 * C, 0)
    _merge(dqkv, dk, B, T, H, hs, 3 * C, C)
    _merge(dqkv, dv, B, T, H, hs, 3 * C, 2 * C)
    return dqkv
