"""Wrapper of kernels/cross_entropy.cu: fused softmax + loss (mean over counted rows, ignore_index -1) + the
logits' gradient."""
from __future__ import annotations

import numpy as np
import cupy as cp

from .halfbits import KIND_F32
from .runtime import i32, launch

FILE = "cross_entropy.cu"


def _threads(V: int) -> int:
    return 256 if V > 256 else max(32, (V + 31) // 32 * 32)


class CrossEntropySaved:
    """lse [N] and the counted rows (a device scalar)."""
    __slots__ = ("lse", "count")

    def __init__(self, lse, count):
        self.lse, self.count = lse, count


def forward(ctx, logits: "cp.ndarray", targets: "cp.ndarray"):
    """-> (mean loss as a 0-d float32 device array, saved)."""
    N, V = logits.shape
    losses = ctx.ws.get("ce_losses", (N,), np.float32)
    lse = cp.empty((N,), dtype=np.float32)
    launch(FILE, "cross_entropy_forward", N, _threads(V),
           (losses, lse, logits, targets, i32(N), i32(V), i32(ctx.kind_of(logits))))
    loss = cp.empty((), dtype=np.float32)
    count = cp.empty((1,), dtype=np.float32)
    launch(FILE, "cross_entropy_mean", 1, 1024, (loss, count, losses, targets, i32(N)))
    return loss, CrossEntropySaved(lse, count)


def backward(ctx, dloss, logits: "cp.ndarray", targets: "cp.ndarray", saved: CrossEntropySaved) -> "cp.ndarray":
    """dlogits = (softmax - onehot) * dloss / N; dloss a device scalar (read on the device) or a number.

    dlogits feeds the lm_head product only: the half type in the half builds, written over the logits when
    they are half-type already (nothing reads them after this), else a fresh array."""
    N, V = logits.shape
    if isinstance(dloss, cp.ndarray):
        d = dloss if (dloss.dtype == np.float32 and dloss.flags.c_contiguous) else dloss.astype(np.float32)
    else:
        d = ctx.ws.get("ce_dloss", (1,), np.float32)
        d.fill(np.float32(dloss))
    lk = ctx.kind_of(logits)
    if ctx.act_kind == KIND_F32:
        dlogits = cp.empty((N, V), dtype=np.float32)
    else:
        dlogits = logits if lk == ctx.act_kind else cp.empty((N, V), dtype=np.uint16)
    launch(FILE, "cross_entropy_backward", N, _threads(V),
           (dlogits, logits, saved.lse, targets, d, saved.count, i32(N), i32(V), i32(lk), i32(ctx.kind_of(dlogits))))
    return dlogits
