"""Wrapper of kernels/gelu.cu (exact erf GELU)."""
from __future__ import annotations

import cupy as cp

from .runtime import THREADS, blocks_for, i64, launch

FILE = "gelu.cu"


def forward(x: "cp.ndarray") -> "cp.ndarray":
    y = cp.empty_like(x)
    launch(FILE, "gelu_forward", blocks_for(x.size), THREADS, (y, x, i64(x.size)))
    return y


def backward(dy: "cp.ndarray", x: "cp.ndarray") -> "cp.ndarray":
    dx = cp.empty_like(x)
    launch(FILE, "gelu_backward", blocks_for(x.size), THREADS, (dx, dy, x, i64(x.size)))
    return dx
