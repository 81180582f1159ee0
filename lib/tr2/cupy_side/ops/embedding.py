"""Token plus position embedding: x[b, t] = wte[idx[b, t]] + wpe[t].

A lookup, not a product: it runs in the weights' type (float32, or float64 for the reference) in
every build, as autocast leaves nn.Embedding alone.
"""
from __future__ import annotations

import numpy as np


def forward(idx: np.ndarray, wte: np.ndarray, wpe: np.ndarray) -> np.ndarray:
    """idx int[B, T], wte [V, C], wpe [Tmax, C] -> x [B, T, C]."""
    T = idx.shape[1]
    return wte[idx] + wpe[:T]


def backward(dx: np.ndarray, idx: np.ndarray, dwte: np.ndarray, dwpe: np.ndarray) -> None:
    """Accumulate dx [B, T, C] into dwte [V, C] and dwpe [Tmax, C] in place.

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
