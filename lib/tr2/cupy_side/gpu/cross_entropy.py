"""Wrapper of kernels/cross_entropy.cu: the classifier's loss (mean over counted rows, ignore_index -1), and in
training the logits' gradient in the same kernel, written over the logits. Which kernels, threads and shared
memory a launch takes is gpu.cross_entropy_plan's choice, from the logits alone (GPT-2's half-type rows: the
shared-memory row, two 512-thread blocks an SM)."""
from __future__ import annotations

import numpy as np
import cupy as cp

from . import cross_entropy_plan, kernel_switch
from .cast import fill_f32
from .runtime import i32, launch

FILE = "cross_entropy.cu"
# (Training's shared-memory rows double-buffered, TR2_CE_SMEM_DB, measured x1.335 slower and removed: cross_entropy.cu's
# header, gpu.RETIRED.)
# Training's shared-memory rows with the gradient pass's probabilities by exp2 (cross_entropy_forward_backward_smem_ex2;
# the loss the expf kernel's bits, dlogits within a half-type ulp of them): on since the thirtieth session (call 6 of
# results/h200-perf-20261204f: x0.880 alone in bf16, gpt2-small bf16's step -0.09 ms); TR2_CE_GRAD_EX2=0 the expf
# kernel (cross_entropy_forward_backward_smem) as before.
GRAD_EX2 = bool(kernel_switch("TR2_CE_GRAD_EX2", 1))


def _plan(ctx, logits: "cp.ndarray") -> tuple[str, int, int]:
    """(kernel suffix, threads, shared bytes) of these logits' row: the same for evaluation and training."""
    return cross_entropy_plan(logits.shape[1], ctx.kind_of(logits), logits.data.ptr % 16 == 0)


def _rows(logits: "cp.ndarray", suffix: str) -> tuple["cp.ndarray", int]:
    """(logits, ld): the elements between rows. Rows further apart than V (the first columns of a padded product's
    output, gpu/matmul.py) are read in place by the warp row; any other form is made C-contiguous."""
    if logits.ndim != 2:
        raise ValueError(f"logits: 2-D [N, V] expected, got shape {logits.shape}")
    item = logits.itemsize
    if suffix == "_warp" and logits.strides[1] == item and logits.strides[0] % item == 0 \
            and logits.strides[0] >= logits.shape[1] * item:
        return logits, logits.strides[0] // item
    logits = logits if logits.flags.c_contiguous else cp.ascontiguousarray(logits)
    return logits, logits.shape[1]


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
    suffix, threads, shared = _plan(ctx, logits)
    logits, ld = _rows(logits, suffix)
    if suffix == "_warp":
        launch(FILE, "cross_entropy_forward_warp", (N + threads // 32 - 1) // (threads // 32), threads,
               (losses, logits, targets, i32(N), i32(V), i32(ld), i32(ctx.kind_of(logits))))
    else:
        launch(FILE, "cross_entropy_forward" + suffix, N, threads,
               (losses, logits, targets, i32(V), i32(ctx.kind_of(logits))), shared_mem=shared, prefer_shared=shared > 0)
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
        fill_f32(d, dloss)   # not d.fill: CuPy would compile its fill kernel with NVRTC at run time
    lk = ctx.kind_of(logits)
    suffix, threads, shared = _plan(ctx, logits)
    logits, ld = _rows(logits, suffix)
    # over the logits (rows ld apart) where the kinds match; else a fresh C-contiguous array, rows V apart
    dlogits = logits if lk == ctx.act_kind else cp.empty((N, V), dtype=ctx.store_dtype)
    ldd = ld if dlogits is logits else V
    count = _count(ctx, targets)
    losses = ctx.ws.get("ce_losses", (N,), np.float32)
    if suffix == "_warp":
        launch(FILE, "cross_entropy_forward_backward_warp", (N + threads // 32 - 1) // (threads // 32), threads,
               (losses, dlogits, logits, targets, d, count, i32(N), i32(V), i32(ld), i32(ldd), i32(lk),
                i32(ctx.kind_of(dlogits))))
    else:
        ex2 = "_ex2" if suffix == "_smem" and GRAD_EX2 else ""
        launch(FILE, "cross_entropy_forward_backward" + suffix + ex2, N, threads,
               (losses, dlogits, logits, targets, d, count, i32(V), i32(lk), i32(ctx.kind_of(dlogits))),
               shared_mem=shared, prefer_shared=shared > 0)
    return _mean(ctx, losses, count), dlogits
