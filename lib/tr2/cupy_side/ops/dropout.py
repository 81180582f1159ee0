"""Dropout with the counter-based generator (rng.py): y = x * keep / (1 - p).

The mask is a function of (seed, offset) alone, so backward regenerates it instead of keeping it.
Element i is x's row-major flat index. p = 0 returns the input itself (the model skips the call then).
"""
from __future__ import annotations

import numpy as np

from .. import rng


def _mask(shape, p: float, seed: int, offset: int, dtype) -> np.ndarray:
    """keep * 1/(1-p) in the arrays' type: 0 where dropped."""
    keep = rng.keep_mask(seed, offset, shape, p)
    return keep * rng.keep_scale(p, dtype)


def forward(x: np.ndarray, p: float, seed: int, offset: int) -> np.ndarray:
    if p == 0.0:
        return x
    return x * _mask(x.shape, p, seed, offset, x.dtype)


def backward(dy: np.ndarray, p: float, seed: int, offset: int) -> np.ndarray:
    if p == 0.0:
        return dy
    return dy * _mask(dy.shape, p, seed, offset, dy.dtype)
