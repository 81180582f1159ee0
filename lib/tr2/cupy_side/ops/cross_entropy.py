"""Mean cross-entropy of logits against targets (torch's F.cross_entropy, ignore_index=-1).

Runs in the logits' type (float32 in every build, float64 for the reference), as autocast runs
cross_entropy in float32. `saved` is the per-row log-sum-exp: backward rebuilds the softmax from it
instead of keeping an [N, V] array. `forward_backward` is both at once, what a training pass calls: the CUDA
kernel (kernels/cross_entropy.cu) computes the row's statistics and writes its gradient in one launch, so the
gradient needs dloss when the loss is computed, not after.
"""
from __future__ import annotations

import numpy as np

IGNORE_INDEX = -1


def forward(logits: np.ndarray, targets: np.ndarray):
    """logits [N, V], targets int[N] -> (loss: 0-d array, saved: lse [N])."""
    row_max = logits.max(axis=1)
    lse = np.log(np.sum(np.exp(logits - row_max[:, None]), axis=1)) + row_max
    valid = targets != IGNORE_INDEX
    picked = logits[np.arange(len(targets)), np.where(valid, targets, 0)]
    losses = np.where(valid, lse - picked, 0)
    # Mean over the counted rows; nothing counted gives nan, as torch's mean over zero elements.
    with np.errstate(invalid="ignore", divide="ignore"):
        loss = losses.sum() / logits.dtype.type(valid.sum())
    return np.asarray(loss, dtype=logits.dtype), lse


def backward(dloss, logits: np.ndarray, targets: np.ndarray, saved: np.ndarray) -> np.ndarray:
    """dlogits = (softmax(logits) - onehot(targets)) * dloss / count, zero on ignored rows."""
    lse = saved
    valid = targets != IGNORE_INDEX
    dlogits = np.exp(logits - lse[:, None])
    dlogits[np.arange(len(targets)), np.where(valid, targets, 0)] -= valid.astype(logits.dtype)
    dlogits[~valid] = 0
    dlogits *= np.asarray(dloss, dtype=logits.dtype) / logits.dtype.type(max(int(valid.sum()), 1))
    return dlogits


def forward_backward(logits: np.ndarray, targets: np.ndarray, dloss):
    """-> (loss, dlogits): forward's loss and backward's gradient times dloss, from one call."""
    loss, lse = forward(logits, targets)
    return loss, backward(dloss, logits, targets, lse)


LOG2E_F32 = np.float32(1.4426950408889634)


def probabilities_exp2(logits: np.ndarray, lse: np.ndarray) -> np.ndarray:
    """softmax = exp(x - lse) as kernels/cross_entropy.cu's EX2 gradient pass forms it (TR2_CE_GRAD_EX2), float64:
        p = 2 ** fl32(x * log2(e) - lse2),   lse2 = fl32(lse * log2(e))
    with its two float32 roundings (lse2 once a row; the fused multiply-add's result once an element) and exp2 exact:
    the special-function unit's own error (ex2.approx, ~2 ulp) is not modelled here. logits float32 [N, V], lse [N]."""
    lse2 = (np.asarray(lse, dtype=np.float32) * LOG2E_F32).astype(np.float32)
    # x * log2e is exact in float64 (24 x 24 bits); one rounding to float32 stands for the fma's
    arg = (logits.astype(np.float32).astype(np.float64) * np.float64(LOG2E_F32)
           - lse2.astype(np.float64)[:, None]).astype(np.float32)
    return np.exp2(arg.astype(np.float64))
