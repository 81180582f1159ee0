"""Wrapper of kernels/gelu.cu (exact erf GELU).

bfloat16 inputs go through the table kernels (gelu.cu's header says why they pay and why their bits are the
computing kernels'); float16 and float32 through the computing kernels, which also fill the tables.
"""
from __future__ import annotations

import functools

import numpy as np
import cupy as cp

from . import gelu_table, kernel_define
from .halfbits import KIND_BF16, KIND_F32
from .runtime import THREADS, blocks_for, i32, i64, launch

FILE = "gelu.cu"
TABLE_THREADS = kernel_define(FILE, "GELU_TABLE_THREADS")
TABLE_BLOCKS_PER_SM = kernel_define(FILE, "GELU_TABLE_BLOCKS_PER_SM")

# False: bfloat16 takes the computing kernels too (the reference the table kernels are tested against).
USE_TABLE = True

# device id -> (forward table: uint16 bf16 bits, backward table: float32 t), built once by `tables`
_tables: dict[int, tuple["cp.ndarray", "cp.ndarray"]] = {}


def _empty(ctx, shape):
    """GELU's output and its input gradient feed only products: the half type in the half builds."""
    return cp.empty(shape, dtype=ctx.store_dtype)


def _aligned(*arrays) -> None:
    """gelu.cu reads and writes in 16-byte pieces: every array must start on 16 bytes (fresh ones do)."""
    for a in arrays:
        if a.data.ptr % 16 or not a.flags.c_contiguous:
            raise ValueError(f"gelu: an array of shape {a.shape} is not contiguous from a 16-byte boundary")


def _blocks(n: int) -> int:
    """gelu.cu's threads take eight elements each (the last n % 8 one each, in the first block)."""
    return blocks_for(max(n // 8, n % 8))


@functools.cache
def _sm_count(device: int) -> int:
    return int(cp.cuda.Device(device).attributes["MultiProcessorCount"])


def _table_blocks(n: int) -> int:
    """A persistent grid: each block copies its table into shared memory once, so no more blocks than stay
    resident together (GELU_TABLE_BLOCKS_PER_SM an SM; fewer where n is small)."""
    resident = _sm_count(cp.cuda.Device().id) * TABLE_BLOCKS_PER_SM
    return blocks_for(max(n // 8, n % 8), TABLE_THREADS, resident)


def tables() -> tuple["cp.ndarray", "cp.ndarray"]:
    """This device's tables, filled at the first call by the computing kernels themselves: gelu_forward on the
    tabulated codes, and gelu_backward on them with dy = 1 (1 * t is t exactly) into float32. The first call must
    run eagerly (it copies the codes from the host): CudaBackend makes it in bfloat16 builds, before any step."""
    device = cp.cuda.Device().id
    built = _tables.get(device)
    if built is not None:
        return built
    if cp.cuda.get_current_stream().is_capturing():
        raise RuntimeError("gelu: the bfloat16 tables are built at the first use, which must run eagerly, "
                           "not inside a CUDA graph capture (run the step once first: gpu/graph.py's warmup)")
    n = gelu_table.SIZE
    codes = cp.asarray(gelu_table.table_codes())
    ones = cp.asarray(np.ones(n, dtype=np.float32))
    forward_table = cp.empty(n, dtype=np.uint16)
    backward_table = cp.empty(n, dtype=np.float32)
    launch(FILE, "gelu_forward", _blocks(n), THREADS, (forward_table, codes, i64(n), i32(KIND_BF16), i32(KIND_BF16)))
    launch(FILE, "gelu_backward", _blocks(n), THREADS,
           (backward_table, ones, codes, i64(n), i32(KIND_F32), i32(KIND_BF16), i32(KIND_F32)))
    _tables[device] = built = (forward_table, backward_table)
    return built


def launch_forward(y: "cp.ndarray", x: "cp.ndarray", x_kind: int, y_kind: int, by_table: bool | None = None) -> None:
    """y = gelu(x); by_table None: the table kernel wherever it applies (x and y bfloat16, USE_TABLE)."""
    n = x.size
    applies = x_kind == KIND_BF16 and y_kind == KIND_BF16
    if by_table is None:
        by_table = USE_TABLE and applies
    elif by_table and not applies:
        raise ValueError("gelu_forward_bf16_table: x and y must both be bfloat16")
    if by_table:
        launch(FILE, "gelu_forward_bf16_table", _table_blocks(n), TABLE_THREADS, (y, x, tables()[0], i64(n)))
    else:
        launch(FILE, "gelu_forward", _blocks(n), THREADS, (y, x, i64(n), i32(x_kind), i32(y_kind)))


def launch_backward(dx: "cp.ndarray", dy: "cp.ndarray", x: "cp.ndarray", dy_kind: int, x_kind: int, dx_kind: int,
                    by_table: bool | None = None) -> None:
    """dx = dy gelu'(x); by_table None: the table kernel wherever it applies (x bfloat16, USE_TABLE)."""
    n = x.size
    if by_table is None:
        by_table = USE_TABLE and x_kind == KIND_BF16
    elif by_table and x_kind != KIND_BF16:
        raise ValueError("gelu_backward_bf16_table: x must be bfloat16")
    if by_table:
        launch(FILE, "gelu_backward_bf16_table", _table_blocks(n), TABLE_THREADS,
               (dx, dy, x, tables()[1], i64(n), i32(dy_kind), i32(dx_kind)))
    else:
        launch(FILE, "gelu_backward", _blocks(n), THREADS,
               (dx, dy, x, i64(n), i32(dy_kind), i32(x_kind), i32(dx_kind)))


def forward(ctx, x: "cp.ndarray") -> "cp.ndarray":
    y = _empty(ctx, x.shape)
    _aligned(x)
    launch_forward(y, x, ctx.kind_of(x), ctx.kind_of(y))
    return y


def backward(ctx, dy: "cp.ndarray", x: "cp.ndarray") -> "cp.ndarray":
    dx = _empty(ctx, x.shape)
    _aligned(dy, x)
    launch_backward(dx, dy, x, ctx.kind_of(dy), ctx.kind_of(x), ctx.kind_of(dx))
    return dx
