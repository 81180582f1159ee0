"""Wrapper of kernels/cross_entropy.cu: the classifier's loss (mean over counted rows, ignore_index -1), and in
training the logits' gradient in the same kernel, written over the logits."""
from __future__ import annotations

import numpy as np
import cupy as cp

from .runtime import i32, launch

FILE = "cross_entropy.cu"


def _threads(V: int) -> int:
    # Wide rows take 1024 threads: the kernel's vectorized row then holds GPT-2's 50304 columns in 8 (half
    # types) or 16 (float32) 16-byte vectors a thread.
    return 1024 if V > 16384 else 256 if V > 256 else max(32, (V + 31) // 32 * 32)


def _count(ctx, targets: "cp.ndarray") -> "cp.ndarray":
    """The counted rows (target not -1), a float32 [1] device array (the workspace's: read in this call only)."""
    count = ctx.ws.get("ce_count", (1,), np.float32)
    launch(FILE, "cross_entropy_count", 1, 1024, (count, targets, i32(targets.size)))
    return count


def _mean(ctx, losses: "cp.ndarray", count: "cp.ndarray") -> "cp.ndarray":
    loss = cp.empty((), dtype=np.float32)
    launch(FILE, "cross_entropy_mean", 1, 1024, (loss, losses, count, i32(losses.size)))
    return loss


def forward(ctx, logits: "cp.ndarray", targets: "cp.ndarray") -> "cp.ndarray":
    """Evaluation: the mean loss as a 0-d float32 device array; the logits are left as they are."""
    N, V = logits.shape
    count = _count(ctx, targets)
    losses = ctx.ws.get("ce_losses", (N,), np.float32)
    launch(FILE, "cross_entropy_forward", N, _threads(V), (losses, logits, targets, i32(V), i32(ctx.kind_of(logits))))
    return _mean(ctx, losses, count)


def forward_backward(ctx, logits: "cp.ndarray", targets: "cp.ndarray", dloss):
    """Training: (mean loss, dlogits) from one kernel over the rows, dlogits = (softmax - onehot) * dloss / count;
    dloss a device scalar (read on the device when the kernel runs) or a number.

    dlogits feed the lm_head product only: the build's activation type (the half type in the half builds), written
    over the logits where those are of that type already (nothing reads them after this), else a fresh array."""
    N, V = logits.shape
    if isinstance(dloss, cp.ndarray):
        d = dloss if (dloss.dtype == np.float32 and dloss.flags.c_contiguous) else dloss.astype(np.float32)
    else:
        d = ctx.ws.get("ce_dloss", (1,), np.float32)
        d.fill(np.float32(dloss))
    lk = ctx.kind_of(logits)
    dlogits = logits if lk == ctx.act_kind else cp.empty((N, V), dtype=ctx.store_dtype)
    count = _count(ctx, targets)
    losses = ctx.ws.get("ce_losses", (N,), np.float32)
    launch(FILE, "cross_entropy_forward_backward", N, _threads(V),
           (losses, dlogits, logits, targets, d, count, i32(V), i32(lk), i32(ctx.kind_of(dlogits))))
    return _mean(ctx, losses, count), dlogits
