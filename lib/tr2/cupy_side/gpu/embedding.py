"""Wrapper of kernels/embedding.cu."""
from __future__ import annotations

import numpy as np
import cupy as cp

from . import kernel_define
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


CHUNK = kernel_define(FILE, "EMB_CHUNK")   # rows per block of the counting sort
SCAN_THREADS = 1024  # embedding_sort_scan's block (its shared array)
WTE_RUN = kernel_define(FILE, "WTE_RUN")   # sorted positions a block of embedding_backward_wte looks at
WTE_THREADS = 128   # at least WTE_RUN: its first threads read the block's sorted positions


def backward(ws, dout: "cp.ndarray", idx: "cp.ndarray", dwte: "cp.ndarray", dwpe: "cp.ndarray") -> None:
    """Accumulates into dwte and dwpe in place, in a fixed order (the same bits on every run).

    ws: the workspace (runtime.Workspace) holding the sort's integer buffers, allocated once per shape.
    """
    B, T = idx.shape
    V, C = dwte.shape
    N = B * T
    G = (N + CHUNK - 1) // CHUNK
    counts = ws.get("emb_counts", (G, V), np.int32)
    total = ws.get("emb_total", (V,), np.int32)
    starts = ws.get("emb_starts", (V + 1,), np.int32)
    rows = ws.get("emb_sorted", (N,), np.int32)
    counts.fill(0)
    launch(FILE, "embedding_sort_count", G, THREADS, (counts, idx, i32(N), i32(V)))
    launch(FILE, "embedding_sort_total", blocks_for(V), THREADS, (total, counts, i32(G), i32(V)))
    launch(FILE, "embedding_sort_scan", 1, SCAN_THREADS, (starts, total, i32(V)))
    launch(FILE, "embedding_sort_base", blocks_for(V), THREADS, (counts, starts, i32(G), i32(V)))
    launch(FILE, "embedding_sort_place", G, CHUNK, (rows, counts, idx, i32(N), i32(V)))
    launch(FILE, "embedding_backward_wte", ((N + WTE_RUN - 1) // WTE_RUN, (C + WTE_THREADS - 1) // WTE_THREADS),
           WTE_THREADS, (dwte, dout, rows, starts, idx, i32(N), i32(C)))
    launch(FILE, "embedding_backward_wpe", blocks_for(T * C), THREADS, (dwpe, dout, i32(B), i32(T), i32(C)))
