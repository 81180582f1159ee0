"""Token plus position embedding, with nanoGPT's embedding dropout after it:

    x[b, t] = dropout(wte[idx[b, t]] + wpe[t])      dropout: ops/dropout.py with the site's counters (p = 0: none)

Backward: the gradient of the sum (x's gradient through the same mask: dropout's backward, which model.py's first
LayerNorm backward applies), each row added to its token's row of dwte and its position's row of dwpe.

A lookup, not a product: it runs in the weights' type (float32, or float64 for the reference) in
every build, as autocast leaves nn.Embedding alone. The operations are the unfused model's in the same order, so the
numbers are theirs; the CUDA form (kernels/embedding.cu) applies the mask inside the lookup.
"""
from __future__ import annotations

import numpy as np

from . import dropout


def forward(idx: np.ndarray, wte: np.ndarray, wpe: np.ndarray, p: float = 0.0, seed: int = 0,
            offset: int = 0) -> np.ndarray:
    """idx int[B, T], wte [V, C], wpe [Tmax, C] -> x [B, T, C]."""
    T = idx.shape[1]
    return dropout.forward(wte[idx] + wpe[:T], p, seed, offset)


def backward(dx: np.ndarray, idx: np.ndarray, dwte: np.ndarray, dwpe: np.ndarray) -> None:
    """Accumulate dx [B, T, C], the gradient of the sum (already through the dropout's mask), into dwte [V, C] and
    dwpe [Tmax, C] in place.

    A token that occurs several times sums its rows. Sorting by token and summing runs with
    np.add.reduceat does that vectorized and in a fixed order (np.add.at would be the obvious form;
    this one is faster and its sums do not depend on scheduling).
    """
    B, T, C = dx.shape
    tokens = idx.reshape(-1)
    rows = dx.reshape(-1, C)
    order = np.argsort(tokens, kind="stable")
    sorted_tokens = tokens[order]
    starts = np.flatnonzero(np.r_[True, sorted_tokens[1:] != sorted_tokens[:-1]])
    dwte[sorted_tokens[starts]] += np.add.reduceat(rows[order], starts, axis=0)
    dwpe[:T] += dx.sum(axis=0)
