"""Wrapper of kernels/embedding.cu."""
from __future__ import annotations

import numpy as np
import cupy as cp

from . import dropout as _dropout, kernel_define
from .cast import zero
from .runtime import THREADS, blocks_for, i32, launch

FILE = "embedding.cu"
ROWS = kernel_define(FILE, "EMB_ROWS")   # rows a block of the forward with dropout: a warp each


def _aligned(n: int, *arrays) -> bool:
    return all(a.data.ptr % n == 0 for a in arrays)


def forward(idx: "cp.ndarray", wte: "cp.ndarray", wpe: "cp.ndarray", p: float = 0.0, seed: int = 0, offset: int = 0,
            offset_add=None) -> "cp.ndarray":
    """x = dropout(wte[idx] + wpe[:T]) [B, T, C] float32; p = 0: no dropout (embedding_forward, no generator)."""
    B, T = idx.shape
    C = wte.shape[1]
    if T > wpe.shape[0]:
        raise ValueError(f"sequence length {T} exceeds the position table's {wpe.shape[0]}")
    out = cp.empty((B, T, C), dtype=np.float32)
    if p == 0.0:
        launch(FILE, "embedding_forward", blocks_for(B * T * C), THREADS,
               (out, idx, wte, wpe, i32(B * T), i32(T), i32(C)))
        return out
    N = B * T
    kernel = "embedding_dropout_forward_v4" if C % 4 == 0 and _aligned(16, out, wte, wpe) else "embedding_dropout_forward"
    launch(FILE, kernel, (N + ROWS - 1) // ROWS, 32 * ROWS,
           (out, idx, wte, wpe, i32(N), i32(T), i32(C)) + _dropout.kernel_args(p, seed, offset, offset_add)[1:])   # p > 0 here
    return out


CHUNK = kernel_define(FILE, "EMB_CHUNK")   # rows per block of the counting sort
SCAN_THREADS = kernel_define(FILE, "SCAN_THREADS")   # embedding_sort_scan's one block
WTE_SEG = kernel_define(FILE, "WTE_SEG")   # sorted positions a block of embedding_backward_wte sums
WTE_THREADS = 128   # channels a block; at least WTE_SEG: its first threads read the segment's sorted positions


def backward(ws, dout: "cp.ndarray", idx: "cp.ndarray", dwte: "cp.ndarray", dwpe: "cp.ndarray",
             sums: bool = False) -> "cp.ndarray":
    """Accumulates into dwte and dwpe in place, in a fixed order (the same bits on every run). dout is the gradient
    of the embedding's sum: with dropout, already through its mask (model.py's first LayerNorm applies it).
    sums: dwte receives each present token's sum alone (embedding_backward_wte_sums: dwte[v] = sum, written only on
    the rows of the batch's tokens) instead of adding it. Returns the sort's starts (int32 [V + 1], in `ws`: token v
    is present where starts[v + 1] > starts[v]), valid until the next call.

    ws: the workspace (runtime.Workspace) holding the sort's integer buffers, allocated once per shape.
    """
    B, T = idx.shape
    V, C = dwte.shape
    N = B * T
    G = (N + CHUNK - 1) // CHUNK
    S = (N + WTE_SEG - 1) // WTE_SEG          # segments of the sorted rows
    Y = (C + WTE_THREADS - 1) // WTE_THREADS  # channel slices
    # the sort's counts[G][V], then embedding_backward_wte's arrivals[S][Y]: both zeroed by the one fill
    counts = ws.get("emb_counts", (G * V + S * Y,), np.int32)
    arrived = counts[G * V:]
    part = ws.get("emb_partials", (S, 2, C), np.float32)   # the pieces of runs crossing a segment's edge
    total = ws.get("emb_total", (V,), np.int32)
    starts = ws.get("emb_starts", (V + 1,), np.int32)
    rows = ws.get("emb_sorted", (N,), np.int32)
    zero(counts)   # not fill(0): CuPy compiles its fill kernel with NVRTC at run time
    launch(FILE, "embedding_sort_count", G, THREADS, (counts, idx, i32(N), i32(V)))
    launch(FILE, "embedding_sort_total", blocks_for(V), THREADS, (total, counts, i32(G), i32(V)))
    launch(FILE, "embedding_sort_scan", 1, SCAN_THREADS, (starts, total, i32(V)))
    launch(FILE, "embedding_sort_base", blocks_for(V), THREADS, (counts, starts, i32(G), i32(V)))
    launch(FILE, "embedding_sort_place", G, CHUNK, (rows, counts, idx, i32(N), i32(V)))
    launch(FILE, "embedding_backward_wte_sums" if sums else "embedding_backward_wte", (S, Y), WTE_THREADS,
           (dwte, part, arrived, dout, rows, starts, idx, i32(N), i32(C)))
    launch(FILE, "embedding_backward_wpe", blocks_for(T * C), THREADS, (dwpe, dout, i32(B), i32(T), i32(C)))
    return starts
