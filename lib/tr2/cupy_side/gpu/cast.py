"""Wrapper of kernels/cast.cu: float32 <-> bf16/fp16 bits, and rounding float32 to a half type."""
from __future__ import annotations

import numpy as np
import cupy as cp

from . import kernel_switch
from .halfbits import KIND_BF16, KIND_F16, KIND_F32
from .runtime import THREADS, blocks_for, f32, i32, i64, launch

FILE = "cast.cu"
# The widening casts four elements a load, four loads in flight a thread (cast.cu's _wide kernels: the same bits) where
# both buffers are 16-byte aligned; TR2_CAST_WIDE=0 one element a thread as before the thirty-first session.
WIDE = bool(kernel_switch("TR2_CAST_WIDE", 1))


def to_half(x: "cp.ndarray", kind: int, out: "cp.ndarray | None" = None) -> "cp.ndarray":
    """float32 -> uint16 bits of bf16 (kind 1) or fp16 (kind 2), round to nearest even."""
    n = x.size
    out = cp.empty(x.shape, dtype=np.uint16) if out is None else out
    name = {KIND_BF16: "cast_f32_to_bf16", KIND_F16: "cast_f32_to_f16"}[kind]
    launch(FILE, name, blocks_for(n), THREADS, (out, x, i64(n)))
    return out


def from_half(h: "cp.ndarray", kind: int, out: "cp.ndarray | None" = None) -> "cp.ndarray":
    n = h.size
    out = cp.empty(h.shape, dtype=np.float32) if out is None else out
    name = {KIND_BF16: "cast_bf16_to_f32", KIND_F16: "cast_f16_to_f32"}[kind]
    if WIDE and h.data.ptr % 16 == 0 and out.data.ptr % 16 == 0:
        launch(FILE, name + "_wide", blocks_for(n // 4), THREADS, (out, h, i64(n)))
    else:
        launch(FILE, name, blocks_for(n), THREADS, (out, h, i64(n)))
    return out


def round_f32(x: "cp.ndarray", kind: int, out: "cp.ndarray | None" = None) -> "cp.ndarray":
    """float32 rounded to the half type `kind` and back (out may be x)."""
    out = cp.empty_like(x) if out is None else out
    if kind == KIND_F32:
        if out is not x:
            out[...] = x
        return out
    launch(FILE, "round_f32", blocks_for(x.size), THREADS, (out, x, i64(x.size), i32(kind)))
    return out


def product_input(ctx, x: "cp.ndarray", name: str) -> "cp.ndarray":
    """x as a product reads it: itself for float32 builds and for half bits already, else its half-type bits in
    the workspace buffer `name`."""
    if not ctx.half or x.dtype == np.uint16:
        return x
    buf = ctx.ws.get(name, x.shape, np.uint16)
    return to_half(x, ctx.kind, out=buf)


def zero(out: "cp.ndarray") -> "cp.ndarray":
    """out set to zero bits in place by a memset on the current stream, compiling nothing at run time (CuPy's fill(0)
    compiles its kernel with NVRTC). Only a C-contiguous array (a memset of a strided view's nbytes would write between
    and past its elements)."""
    if not out.flags.c_contiguous:
        raise ValueError(f"zero: a C-contiguous array, not a strided view of shape {out.shape} and strides {out.strides}")
    out.data.memset_async(0, out.nbytes)
    return out


def fill_f32(out: "cp.ndarray", value) -> "cp.ndarray":
    """out (float32, C-contiguous) set to value in place by cast.cu's fill_f32: CuPy's fill() of a value other than 0
    compiles a kernel with NVRTC at run time, which a training run must not (tests/test_nvrtc_gpu.py)."""
    if out.dtype != np.float32 or not out.flags.c_contiguous:
        raise ValueError(f"fill_f32: a C-contiguous float32 array, not {out.dtype} (contiguous {out.flags.c_contiguous})")
    launch(FILE, "fill_f32", blocks_for(out.size), THREADS, (out, f32(value), i64(out.size)))
    return out

