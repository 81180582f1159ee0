"""Wrapper of kernels/gelu.cu (exact erf GELU).

bfloat16 inputs go through the table kernels (gelu.cu's header says why they pay and why their bits are the
computing kernels'); float32 through the computing kernels, which also fill the tables. float16 takes the kernels
within an ulp (TR2_GELU_F16_FAST=1, the default since the thirtieth session: every output within one unit in the last
place of the computing kernels', by one exponential and one reciprocal an element; gelu.cu's "Within an ulp"
paragraph, ops/gelu.py's fast_*); with TR2_GELU_F16_FAST=0 the computing kernels. (float16 by table and by segment,
measured slower, were removed: gelu.cu's header and gpu.RETIRED.)
"""
from __future__ import annotations

import numpy as np
import cupy as cp

from . import gelu_table, kernel_define, kernel_switch
from .halfbits import KIND_BF16, KIND_F16, KIND_F32, KINDS
from .runtime import THREADS, blocks_for, i32, i64, launch, sm_count

FILE = "gelu.cu"
TABLE_THREADS = kernel_define(FILE, "GELU_TABLE_THREADS")
TABLE_BLOCKS_PER_SM = kernel_define(FILE, "GELU_TABLE_BLOCKS_PER_SM")

# False: bfloat16 takes the computing kernels too (the reference the table kernels are tested against).
USE_TABLE = True
# float16 within an ulp (TR2_GELU_F16_FAST): on by default (=1) since the thirtieth session (calls 8-11 of
# results/h200-perf-20261204f: every GPU test of the tail-exact form passed, on every float16 code and every (x, dy)
# pair of codes; forward 33.0 -> 28.4 and backward 52.7 -> 40.4 us a launch on nanogpt's shape; the char model's
# float16 step -0.108 ms; docs/perf.md, "float16 GELU within an ulp"). Every float16 output within one unit in the last
# place of the computing kernels' (the same bits on most codes), at ~19 / ~24 instructions an element against their
# ~32 / ~48; x <= -3.75 through the computing path (safe against erff's documented error). 0: the computing kernels.
# (Value 2, that tail on the fast path too, was refused by its GPU tests in the same calls and removed.)
F16_FAST = kernel_switch("TR2_GELU_F16_FAST", 1)
# The order GELU's kernels (computing, table, within an ulp) take their groups of eight in (TR2_GELU_REVERSE): 0 front
# to back; 1 from the last group down, so that the part of the input its product wrote last, which may still sit in
# the L2, is read first (gelu.cu's group_in_order says why); 2 the forward alone from the last down, 3 the backward
# alone. The same bits either way. Written in the forty-third session and measured on H100s
# (results/h100-perf-20261205j, the step against this tree with 0, two or three rounds a call, pairs by round): in
# calls 1-2 value 1 was faster in 20 of 21 pairs, bf16 nanogpt -0.059 and -0.068 ms, gpt2-small -0.039 and -0.025,
# gpt2-medium -0.132 and -0.131, gpt2-small float16 -0.045, with 2 and 3 each less than 1 on nanogpt and gpt2-medium;
# on (1) by default since. The computing kernels (float32's) took the order after those calls: nanogpt float32 -0.025
# to -0.040, gpt2-small float32 level (calls 3-4); float16 -0.007 on nanogpt, -0.065 on gpt2-medium (call 6).
REVERSE_SWITCH = kernel_switch("TR2_GELU_REVERSE", 1, (0, 1, 2, 3))
REVERSE_FORWARD = REVERSE_SWITCH in (1, 2)
REVERSE_BACKWARD = REVERSE_SWITCH in (1, 3)
# the fast kernels' `tail` argument (a float16 code, -3.75: x at or below it takes the computing path)
FAST_TAIL = kernel_define(FILE, "GELU_FAST_TAIL_X")
# gelu.cu's fast kernels index groups of eight in 32 bits: fewer elements than this (larger arrays take the others)
FAST_MAX_N = 1 << 34

# the half kind with table kernels (bfloat16), and its kernels
TABLE_KIND = KIND_BF16
TABLE_FORWARD, TABLE_BACKWARD = "gelu_forward_bf16_table", "gelu_backward_bf16_table"

# (device id, kind) -> (forward table: uint16 half bits, backward table: float32 t), built once by `tables`
_tables: dict[tuple[int, int], tuple["cp.ndarray", "cp.ndarray"]] = {}


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


def _table_blocks(n: int) -> int:
    """A persistent grid: each block copies its table into shared memory once, so no more blocks than stay
    resident together (TABLE_BLOCKS_PER_SM an SM; fewer where n is small)."""
    resident = sm_count(cp.cuda.Device().id) * TABLE_BLOCKS_PER_SM
    return blocks_for(max(n // 8, n % 8), TABLE_THREADS, resident)


def _kind_name(kind: int) -> str:
    return next((name for name, k in KINDS.items() if k == kind), f"kind {kind}")


def tables(kind: int = TABLE_KIND) -> tuple["cp.ndarray", "cp.ndarray"]:
    """This device's tables of half kind `kind` (bfloat16's, the one kind with tables), filled at the first call by the
    computing kernels themselves: gelu_forward on the tabulated codes, and gelu_backward on them with dy = 1 (1 * t is
    t exactly) into float32. The first call must run eagerly (it copies the codes from the host): CudaBackend makes it
    in the bfloat16 build, before any step."""
    spec = gelu_table.spec(kind)
    key = (cp.cuda.Device().id, kind)
    built = _tables.get(key)
    if built is not None:
        return built
    if cp.cuda.get_current_stream().is_capturing():
        raise RuntimeError(f"gelu: the {spec.name} tables are built at the first use, which must run eagerly, "
                           "not inside a CUDA graph capture (run the step once first: gpu/graph.py's warmup)")
    n = spec.size
    codes = cp.asarray(gelu_table.table_codes(kind))
    ones = cp.asarray(np.ones(n, dtype=np.float32))
    forward_table = cp.empty(n, dtype=np.uint16)
    backward_table = cp.empty(n, dtype=np.float32)
    launch(FILE, "gelu_forward", _blocks(n), THREADS, (forward_table, codes, i64(n), i32(kind), i32(kind), i32(0)))
    launch(FILE, "gelu_backward", _blocks(n), THREADS,
           (backward_table, ones, codes, i64(n), i32(KIND_F32), i32(kind), i32(KIND_F32), i32(0)))
    _tables[key] = built = (forward_table, backward_table)
    return built


def prepare(kind: int) -> None:
    """The tables the activations of this kind take by default, built now (eagerly, before any capture)."""
    if by_table_by_default(kind):
        tables(kind)


def _fast_choice(by_fast: bool | None, by_table: bool | None, applies: bool, n: int, what: str) -> bool:
    """by_fast None: the kernel within an ulp where it applies, F16_FAST is on, the caller named no other form and n
    fits its 32-bit group index (a test's by_table=False is the computing kernel, whatever the switch)."""
    if by_fast is None:
        return by_table is None and applies and bool(F16_FAST) and n < FAST_MAX_N
    if by_fast and not applies:
        raise ValueError(f"{what} within an ulp: {'x, dy and dx' if what.endswith('backward') else 'x and y'} must be "
                         "float16")
    if by_fast and by_table:
        raise ValueError(f"{what}: within an ulp and by table both asked for")
    if by_fast and n >= FAST_MAX_N:
        raise ValueError(f"{what} within an ulp: {n} elements, the kernel takes fewer than 2^34")
    return by_fast


def by_table_by_default(kind: int) -> bool:
    """Whether activations of this kind take the table kernels when the caller does not say (USE_TABLE, bfloat16)."""
    return USE_TABLE and kind == TABLE_KIND


def launch_forward(y: "cp.ndarray", x: "cp.ndarray", x_kind: int, y_kind: int, by_table: bool | None = None,
                   by_fast: bool | None = None, reverse: bool | None = None) -> None:
    """y = gelu(x); by_table None: the table kernel wherever it applies (x and y bfloat16, by_table_by_default);
    by_fast: the float16 kernel within an ulp (_fast_choice); reverse: the kernel takes their groups from the last
    down (None: REVERSE_FORWARD)."""
    n = x.size
    order = i32(REVERSE_FORWARD if reverse is None else reverse)
    if _fast_choice(by_fast, by_table, x_kind == y_kind == KIND_F16, n, "gelu_forward"):
        launch(FILE, "gelu_forward_f16_fast", _blocks(n), THREADS, (y, x, i64(n), np.uint32(FAST_TAIL), order))
        return
    applies = x_kind == y_kind == TABLE_KIND
    if by_table is None:
        by_table = applies and by_table_by_default(x_kind)
    elif by_table and not applies:
        raise ValueError(f"gelu_forward by table: x and y must be {_kind_name(TABLE_KIND)}, not "
                         f"{_kind_name(x_kind)} and {_kind_name(y_kind)}")
    if by_table:
        table = tables(x_kind)[0]
        launch(FILE, TABLE_FORWARD, _table_blocks(n), TABLE_THREADS, (y, x, table, i64(n), order))
    else:
        launch(FILE, "gelu_forward", _blocks(n), THREADS, (y, x, i64(n), i32(x_kind), i32(y_kind), order))


def launch_backward(dx: "cp.ndarray", dy: "cp.ndarray", x: "cp.ndarray", dy_kind: int, x_kind: int, dx_kind: int,
                    by_table: bool | None = None, by_fast: bool | None = None, reverse: bool | None = None) -> None:
    """dx = dy gelu'(x); by_table None: the table kernel wherever it applies (x bfloat16, by_table_by_default);
    by_fast: the float16 kernel within an ulp (x, dy and dx float16, the half roundings' kinds; _fast_choice); reverse
    as above (None: REVERSE_BACKWARD)."""
    n = x.size
    order = i32(REVERSE_BACKWARD if reverse is None else reverse)
    if _fast_choice(by_fast, by_table, dy_kind == x_kind == dx_kind == KIND_F16, n, "gelu_backward"):
        launch(FILE, "gelu_backward_f16_fast", _blocks(n), THREADS, (dx, dy, x, i64(n), np.uint32(FAST_TAIL), order))
        return
    applies = x_kind == TABLE_KIND
    if by_table is None:
        by_table = applies and by_table_by_default(x_kind)
    elif by_table and not applies:
        raise ValueError(f"gelu_backward by table: x must be {_kind_name(TABLE_KIND)}, not {_kind_name(x_kind)}")
    if by_table:
        table = tables(x_kind)[1]
        launch(FILE, TABLE_BACKWARD, _table_blocks(n), TABLE_THREADS,
               (dx, dy, x, table, i64(n), i32(dy_kind), i32(dx_kind), order))
    else:
        launch(FILE, "gelu_backward", _blocks(n), THREADS,
               (dx, dy, x, i64(n), i32(dy_kind), i32(x_kind), i32(dx_kind), order))


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
