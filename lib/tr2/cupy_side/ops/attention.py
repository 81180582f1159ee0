"""Causal multi-head self-attention on c_attn's output, with dropout on the attention weights.

    q, k, v = split(qkv, 3)                     each [B, T, C] -> heads [B, H, T, hs], hs = C / H
    S = q @ k.T / sqrt(hs), causal (key <= query)
    P = softmax(S) over the keys; lse = log(sum(exp(S))) per row, saved with the output for backward
    Pd = P * keep / (1 - p)                     nanoGPT's attn_dropout; keep from rng (seed, offset)
    out = Pd @ v, heads re-assembled to [B, T, C]

Backward, in the flash-attention form the CUDA kernels compute (the probabilities are recomputed from
lse, and the softmax's row sums come from the output instead of the T x T products):

    P = exp(S - lse);  D = rowsum(dout * out)   (= sum_j P dP, since out = Pd v)
    dv = Pd.T @ dout;  dP = (dout @ v.T) * keep / (1 - p);  dS = P * (dP - D)
    dq = dS @ k / sqrt(hs);  dk = dS.T @ q / sqrt(hs)

The dropout mask is indexed over the full [B, H, T, T] array, row-major (entries above the diagonal
included), so that any kernel layout can regenerate element (b, h, i, j) on its own.

Precision (precision.py): q, k, v and the incoming gradient are product operands (`prec.operand`);
Pd and the score gradient dS are operands the kernel makes itself (`prec.internal`: rounded under
TF32, and in the half builds only with half_roundings, as FlashAttention does); out and dqkv are
product outputs (`prec.output`). Softmax and its gradient run in the arrays' type. D reads the output
as forward returned it (rounded with half roundings), as the kernel does.
"""
from __future__ import annotations

import math
from functools import lru_cache

import numpy as np

from .. import rng
from .precision import EXACT, Precision


@lru_cache(maxsize=8)
def _future(T: int) -> np.ndarray:
    """bool [T, T]: True above the diagonal, the keys a query may not see."""
    return np.triu(np.ones((T, T), dtype=bool), k=1)


def _heads(qkv: np.ndarray, n_head: int):
    """[B, T, 3C] -> q, k, v as [B, H, T, hs] views."""
    B, T, C3 = qkv.shape
    C = C3 // 3
    hs = C // n_head
    split = qkv.reshape(B, T, 3, n_head, hs)
    return (split[:, :, i].transpose(0, 2, 1, 3) for i in range(3))


def _merge(y: np.ndarray) -> np.ndarray:
    """[B, H, T, hs] -> [B, T, H * hs]."""
    B, H, T, hs = y.shape
    return y.transpose(0, 2, 1, 3).reshape(B, T, H * hs)


def _dropout_factor(shape, p: float, seed: int, offset: int, dtype):
    """keep / (1 - p) over [B, H, T, T] in the arrays' type, or None without dropout."""
    if p == 0.0:
        return None
    return rng.keep_mask(seed, offset, shape, p) * rng.keep_scale(p, dtype)


def _scores(q: np.ndarray, k: np.ndarray) -> np.ndarray:
    """S = q k^T / sqrt(hs), -inf above the diagonal, [B, H, T, T] in the arrays' type."""
    dt = q.dtype.type
    T, hs = q.shape[2], q.shape[3]
    scores = q @ k.transpose(0, 1, 3, 2)
    scores *= dt(1.0 / math.sqrt(hs))
    scores[..., _future(T)] = -np.inf
    return scores


def forward(qkv: np.ndarray, n_head: int, p: float, seed: int, offset: int, prec: Precision = EXACT):
    """qkv [B, T, 3C] -> (out [B, T, C], saved = (out, lse [B, H, T]))."""
    q, k, v = _heads(prec.operand(qkv), n_head)
    scores = _scores(q, k)
    mx = scores.max(axis=-1, keepdims=True)   # the diagonal is always visible: the max is finite
    probs = np.exp(scores - mx)
    total = probs.sum(axis=-1, keepdims=True)
    lse = (mx + np.log(total))[..., 0]
    probs /= total
    factor = _dropout_factor(probs.shape, p, seed, offset, probs.dtype)
    dropped = probs if factor is None else probs * factor
    out = prec.output(_merge(prec.internal(dropped) @ v))
    return out, (out, lse)


def backward(dout: np.ndarray, qkv: np.ndarray, saved, n_head: int, p: float, seed: int,
             offset: int, prec: Precision = EXACT) -> np.ndarray:
    """dout [B, T, C] -> dqkv [B, T, 3C]."""
    out, lse = saved
    q, k, v = _heads(prec.operand(qkv), n_head)
    dt = q.dtype.type
    B, H, T, hs = q.shape
    probs = np.exp(_scores(q, k) - lse[..., None])
    dy = prec.operand(dout).reshape(B, T, H, hs).transpose(0, 2, 1, 3)
    rowdot = np.sum(dy * np.asarray(out, dtype=dy.dtype).reshape(B, T, H, hs).transpose(0, 2, 1, 3), axis=-1)
    factor = _dropout_factor(probs.shape, p, seed, offset, probs.dtype)
    dropped = probs if factor is None else probs * factor

    dv = prec.internal(dropped).transpose(0, 1, 3, 2) @ dy
    dprobs = dy @ v.transpose(0, 1, 3, 2)  # gradient of the dropped probabilities
    if factor is not None:
        dprobs *= factor                  # ... and of the probabilities before dropout
    dscores = prec.internal(probs * (dprobs - rowdot[..., None]))
    scale = dt(1.0 / math.sqrt(hs))
    dq = (dscores @ k) * scale
    dk = (dscores.transpose(0, 1, 3, 2) @ q) * scale
    dqkv = np.concatenate([_merge(dq), _merge(dk), _merge(dv)], axis=2)
    return prec.output(dqkv)
