"""A block's residual add, with nanoGPT's residual dropout on the branch before it, and the LayerNorm that reads the
sum (ln_2 after the attention's add; the next block's ln_1, or ln_f, after the MLP's):

    s = x + dropout(b)          the residual stream (dropout: ops/dropout.py with its site's counters)
    y = layernorm(s, w)         ops/layernorm.py: the next sub-block's input

Backward, dskip being the gradient s receives from its other reader (the next block's residual add; None after
the last block, where only ln_f reads s):

    ds = layernorm_backward(dy)[dx] + dskip       the stream's gradient: x receives it
    db = dropout_backward(ds)                     the branch's gradient (the same mask)
    dw = layernorm_backward(dy)[dw]

The operations of the unfused model in the same order and types, so the numbers are theirs; the CUDA form
(kernels/residual_layernorm.cu) does it in one pass forward and one backward.
"""
from __future__ import annotations

import numpy as np

from . import dropout, layernorm, residual


def forward(x: np.ndarray, b: np.ndarray, w: np.ndarray, eps: float, p: float, seed: int, offset: int):
    """x [N, C], b [N, C], w [C] -> (s [N, C], y [N, C], mean [N], rstd [N])."""
    s = residual.forward(x, dropout.forward(b, p, seed, offset))
    y, mean, rstd = layernorm.forward(s, w, eps)
    return s, y, mean, rstd


def backward(dy: np.ndarray, dskip, s: np.ndarray, w: np.ndarray, mean: np.ndarray, rstd: np.ndarray, p: float,
             seed: int, offset: int):
    """-> (ds [N, C], db [N, C], dw [C]); dskip an array or None."""
    ds, dw = layernorm.backward(dy, s, w, mean, rstd)
    if dskip is not None:
        ds = residual.forward(dskip, ds)
    return ds, dropout.backward(ds, p, seed, offset), dw
