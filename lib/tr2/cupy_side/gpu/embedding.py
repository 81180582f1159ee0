"""Wrapper of kernels/embedding.cu."""
from __future__ import annotations

import numpy as np
import cupy as cp

from .runtime import THREADS, blocks_for, i32, launch

FILE = "embedding.cu"


def forward(idx: "cp.ndarray", wte: "cp.ndarray", wpe: "cp.ndarray") -> "cp.ndarray":
    B, T = idx.shape
    C = wte.shape[1]
    if T > wpe.shape[0]:
        raise ValueError(f"sequence length {T} exceeds the position table's {wpe.shape[0]}")
    out = cp.empty((B, T, C), dtype=np.float32)
    launch(FILE, "embedding_forward", blocks_for(B * T * C), THREADS, (out, idx, wte, wpe, i32(B * T), i32(T), i32(C)))
    return out


def backward(dout: "cp.ndarray", idx: "cp.ndarray", dwte: "cp.ndarray", dwpe: "cp.ndarray") -> None:
    """Accumulates into dwte and dwpe in place."""
    B, T = idx.shape
    C = dwte.shape[1]
    launch(FILE, "embedding_backward_wte", blocks_for(B * T * C), THREADS, (dwte, dout, idx, i32(B * T), i32(C)))
    launch(FILE, "embedding_backward_wpe", blocks_for(T * C), THREADS, (dwpe, dout, i32(B), i32(T), i32(C)))
