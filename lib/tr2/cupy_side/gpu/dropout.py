"""Wrapper of kernels/dropout.cu: the counter-based generator of docs/architecture.md on the device.

`threshold(p)` and `scale(p)` are the host-side constants the kernels take; they follow
tr2.cupy_side.rng's comparison (u >= p, p as float32) and scaling (1/(1-p) in double, held as float32)
exactly, so masks and outputs are bit-identical to ops/dropout.py."""
from __future__ import annotations

import numpy as np
import cupy as cp

from .halfbits import dropout_threshold
from .runtime import NULL, THREADS, blocks_for, f32, i32, i64, launch, u32, u64

FILE = "dropout.cu"


def threshold(p: float) -> int:
    """rng.keep_mask compares u >= float32(p): the least kept 24-bit draw for that test."""
    return dropout_threshold(p, float32_compare=True)


def scale(p: float) -> np.float32:
    """1/(1-p), computed in float64 and rounded once to float32."""
    return np.float32(1.0 / (1.0 - p))


def kernel_args(p: float, seed: int, offset: int, offset_add) -> tuple:
    """The dropout arguments the fused kernels take (attention.cu, residual_layernorm.cu, embedding.cu), in their
    order: (use, seed, offset, offset_add or NULL, threshold, scale); p = 0: use 0, threshold 0, scale 1, so the
    generator is never run."""
    use = 1 if p > 0.0 else 0
    return (i32(use), u64(seed), u64(offset), NULL if offset_add is None else offset_add,
            u32(threshold(p) if use else 0), f32(scale(p) if use else 1.0))


def forward(x: "cp.ndarray", p: float, seed: int, offset: int, offset_add=None, x_kind: int = 0) -> "cp.ndarray":
    """y = x * keep / (1 - p), float32; x float32 or half bits (x_kind)."""
    if p == 0.0:
        return x
    y = cp.empty(x.shape, dtype=np.float32)
    launch(FILE, "dropout_apply", blocks_for(x.size), THREADS,
           (y, x, i64(x.size), u64(seed), u64(offset), NULL if offset_add is None else offset_add,
            u32(threshold(p)), f32(scale(p)), i32(x_kind)))
    return y


def backward(dy: "cp.ndarray", p: float, seed: int, offset: int, offset_add=None, dy_kind: int = 0) -> "cp.ndarray":
    return forward(dy, p, seed, offset, offset_add, dy_kind)


def mask(n: int, p: float, seed: int, offset: int) -> "cp.ndarray":
    """uint8 [n]: 1 where element i of the site is kept."""
    m = cp.empty((n,), dtype=np.uint8)
    launch(FILE, "dropout_mask", blocks_for(n), THREADS,
           (m, i64(n), u64(seed), u64(offset), NULL, u32(threshold(p))))
    return m


def bits(n: int, seed: int, offset: int) -> "cp.ndarray":
    """uint32 [n]: the generator's 24-bit integers k of elements 0..n-1 (u = k * 2^-24)."""
    b = cp.empty((n,), dtype=np.uint32)
    launch(FILE, "dropout_bits", blocks_for(n), THREADS, (b, i64(n), u64(seed), u64(offset)))
    return b
