"""LayerNorm without bias over the last axis: y = (x - mean) * rstd * w, rstd = 1/sqrt(var + eps).

Runs in the activations' type (float32 in every build, float64 for the reference): autocast keeps
layer_norm in float32 too. The variance is the biased one (divided by C), as torch's.
"""
from __future__ import annotations

import numpy as np


def forward(x: np.ndarray, w: np.ndarray, eps: float):
    """x [N, C], w [C] -> (y [N, C], mean [N], rstd [N])."""
    dt = x.dtype.type
    mean = x.mean(axis=1)
    xc = x - mean[:, None]
    var = np.mean(xc * xc, axis=1)
    rstd = dt(1.0) / np.sqrt(var + dt(eps))
    y = xc * rstd[:, None]
    y *= w
    return y, mean, rstd


def backward(dy: np.ndarray, x: np.ndarray, w: np.ndarray, mean: np.ndarray, rstd: np.ndarray):
    """-> (dx [N, C], dw [C]).

    With xhat = (x - mean) * rstd and g = dy * w, the normalization's Jacobian gives
    dx = rstd * (g - mean(g) - xhat * mean(g * xhat)) per row.
    """
    xhat = (x - mean[:, None]) * rstd[:, None]
    dw = np.sum(dy * xhat, axis=0)
    g = dy * w
    dx = g - g.mean(axis=1, keepdims=True)
    dx -= xhat * np.mean(g * xhat, axis=1, keepdims=True)
    dx *= rstd[:, None]
    return dx, dw
