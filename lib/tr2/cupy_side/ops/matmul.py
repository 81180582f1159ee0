"""The bias-free Linear layer: y = x @ W.T with W [out, in], as nanoGPT's nn.Linear(bias=False).

The only place (with attention) where the build's element type shows: every product reads its inputs
through `prec.operand` (TF32 / bf16 / fp16 rounding, see precision.py), accumulates in the arrays'
type (float32; float64 for the reference), and hands its result through `prec.output`.
"""
from __future__ import annotations

import numpy as np

from .precision import EXACT, Precision


def forward(x: np.ndarray, w: np.ndarray, prec: Precision = EXACT) -> np.ndarray:
    """x [N, K], w [M, K] -> y [N, M]."""
    return prec.output(prec.operand(x) @ prec.operand(w).T)


def backward(dy: np.ndarray, x: np.ndarray, w: np.ndarray, prec: Precision = EXACT):
    """dy [N, M] -> (dx [N, K] = dy @ W, dw [M, K] = dy.T @ x)."""
    dy_r = prec.operand(dy)
    dx = prec.output(dy_r @ prec.operand(w))
    dw = prec.output(dy_r.T @ prec.operand(x))
    return dx, dw
