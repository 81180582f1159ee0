"""Wrapper of kernels/adamw.cu: one launch updates every parameter (multi-tensor), scalars from `hyper`, and
rewrites the half copies the products read (GpuContext.keep_half_copy) from the new masters. Gradients are float32
or, the products' dW under half roundings, the build's half type (read as written), or the tied wte's TiedGradient
(tensors.py: a second launch, adamw_update_tied, over its chunks). One launch before it writes the
step's scalars into `hyper` (ops/adamw.scalars' arithmetic); one after it, in float16 builds, the loss scale's
update (ops/loss_scale.update)."""
from __future__ import annotations

import numpy as np
import cupy as cp

from . import kernel_switch
from .runtime import NULL, f32, i32, launch
from .tensors import CHUNK, THREADS, table_for

FILE = "adamw.cu"
# The float16 loss scale's update as one kernel (loss_scale_update) rather than CuPy's ten launches on 0-d arrays.
# On since the thirteenth session: its kernel test and the float16 graph test (the step's bits unchanged) passed on
# the H200, and nanogpt's float16 step was faster in both rounds of call 4 of results/h200-perf-20261202d (4.575 and
# 4.564 ms against 4.582 and 4.593: 0.007-0.029 ms, small beside the noise) with ten launches fewer a step.
# TR2_LOSS_SCALE_KERNEL=0 gives back CuPy's launches.
LOSS_SCALE_KERNEL = bool(kernel_switch("TR2_LOSS_SCALE_KERNEL", 1))


def update(ctx, params, grads, ms, vs, hyper) -> None:
    """In place. hyper: device array [lr, beta1, beta2, eps, weight_decay, bias_corr1, bias_corr2, grad_scale,
    skip] (ops/adamw.HYPER)."""
    if len(params) == 0:
        return
    h = hyper if isinstance(hyper, cp.ndarray) else cp.asarray(hyper)
    if h.dtype != np.float32:
        h = h.astype(np.float32)
    t = table_for(params, grads, ms, vs, [ctx.half_copy(p) for p in params], ctx.kind)
    launch(FILE, "adamw_update", t.n_blocks, THREADS,
           (t.table, t.chunk_tensor, t.chunk_start, i32(CHUNK), h, i32(ctx.kind)))
    for first, blocks in t.tied:   # a TiedGradient's chunks, which adamw_update leaves (adamw.cu)
        launch(FILE, "adamw_update_tied", blocks, THREADS,
               (t.table, t.chunk_tensor, t.chunk_start, i32(CHUNK), h, i32(ctx.kind), i32(first)))


def _scalar(a, dtype, what: str, kernel: str = "adamw_scalars", optional: bool = True):
    if a is None and optional:
        return None
    if not (isinstance(a, cp.ndarray) and a.dtype == dtype and a.size == 1):
        raise TypeError(f"{kernel}: {what} must be a one-element {np.dtype(dtype).name} CuPy array"
                        + (" or None" if optional else ""))
    return a


def scalars(hyper, t, gnorm, scale, max_norm: float, beta1: float, beta2: float) -> None:
    """In place: hyper's grad_scale, bias corrections (and skip where scale is given), and the step count t; see
    ops/adamw.scalars. hyper float32 [len(HYPER)], t float64 0-d, gnorm and scale float32 0-d or None (gnorm may be
    None only where max_norm is 0)."""
    if not (isinstance(hyper, cp.ndarray) and hyper.dtype == np.float32 and hyper.size == 9 and hyper.flags.c_contiguous):
        raise TypeError("adamw_scalars: hyper must be a C-contiguous float32 CuPy array of 9 elements")
    t = _scalar(t, np.float64, "t")
    gnorm, scale = _scalar(gnorm, np.float32, "gnorm"), _scalar(scale, np.float32, "scale")
    if t is None or (gnorm is None and (max_norm != 0.0 or scale is not None)):
        raise ValueError("adamw_scalars: t is required, and gnorm wherever max_norm is not 0 or a scale is given")
    launch(FILE, "adamw_scalars", 1, 32, (hyper, t, NULL if gnorm is None else gnorm, NULL if scale is None else scale,
                                          f32(max_norm), np.float64(beta1), np.float64(beta2)))


def loss_scale_update(scale, good_steps, found_inf, growth_factor: float, backoff_factor: float,
                      growth_interval: int) -> None:
    """In place: the float16 loss scale and its run of good steps after a step (ops/loss_scale.update), one launch.
    scale, good_steps, found_inf: one-element float32 CuPy arrays (found_inf: AdamW.skipped(), hyper's skip)."""
    for what, a in (("scale", scale), ("good_steps", good_steps), ("found_inf", found_inf)):
        _scalar(a, np.float32, what, "loss_scale_update", optional=False)
    if float(np.float32(growth_interval)) != growth_interval:
        raise ValueError(f"loss_scale_update: growth_interval {growth_interval} is not exact in float32")
    launch(FILE, "loss_scale_update", 1, 32,
           (scale, good_steps, found_inf, f32(growth_factor), f32(backoff_factor), f32(growth_interval)))
