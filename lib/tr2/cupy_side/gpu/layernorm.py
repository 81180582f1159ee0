"""Wrapper of kernels/layernorm.cu (no bias)."""
from __future__ import annotations

import numpy as np
import cupy as cp

from . import REGISTER_ROW_SIZES, deferred_finals, kernel_switch
from .runtime import compute_capability, f32, i32, launch, sm_count

FILE = "layernorm.cu"
ROWS_PER_BLOCK = 8          # one warp per row
register_rows = True        # the models' widths hold a row in registers (REGISTER_ROW_SIZES); off: the general body
# (Removed, each measured: dw finished by the backward's own last blocks, TR2_LN_FINAL_IN_KERNEL, slower; the
# register-row backward with dskip loaded early, TR2_LN_BWD_PREFETCH, no gain; and at three blocks an SM,
# TR2_LN_BWD_BLOCKS=3, a loss: layernorm_backward.cuh's and residual_layernorm.cu's headers, gpu.RETIRED.)
# On: residual_layernorm's register-row backward fed by the copy engine (residual_layernorm_backward_c<C>_bulk: one
# block an SM taking the groups of eight rows in turn, each group's s, dskip and dy brought into a ring of shared
# memory stages ahead by cp.async.bulk; the plain kernel's operations, partials and so bits). Why: the plain kernels
# move 2.56 TB/s, 53% of the H200's DRAM peak, their warps waiting on the row's loads (call 8 of
# results/h200-perf-20261204). On since the twenty-seventh session: the plain kernels' bits at 384, 768 and 1024
# columns in every build (126 kernel cases, calls 6-7 of results/h200-perf-20261204c), c768 27.8 us against 33.7 and
# c1024 37.2 against 43.9 (Nsight Compute, call 6), the step beside PyTorch's reduce-overhead 16.33 -> 16.25 ms on
# gpt2-small bf16 and 42.56 -> 42.41 on gpt2-medium (call 7, two rounds). TR2_LN_BWD_BULK=0 turns it off for a run;
# 2 takes it at every width it is built for (384 too: a bench variant, below).
# Needs sm_90 and 16-byte aligned, contiguous rows; elsewhere the plain kernel runs.
BWD_BULK = kernel_switch("TR2_LN_BWD_BULK", 1, (0, 1, 2))
# On: the dw finals of a backward's LayerNorms in one launch at its end (gpu/deferred_finals.py; the same bits).
# On by default since the fortieth session: graph and eager 0.00e+00 from the run without it (nanogpt bf16 / f32,
# gpt2-small bf16), replays_train 6 cases 0.00e+00, the stacked kernel's tests passed; the step (two rounds) nanogpt
# bf16 4.175 -> 4.151 ms, gpt2-small 15.622 -> 15.598 (call 1) and 15.623 (one round) -> 15.594 (call 2), gpt2-medium
# 40.822 -> 40.765; peak +37.8 MB on nanogpt bf16 (under PyTorch's), -3.1 / -4.2 MB on gpt2-small / gpt2-medium
# (results/h200-perf-20261205f, calls 1-2).
# TR2_LN_DW_DEFER=0 turns it off for a run.
DEFER_FINALS = bool(kernel_switch("TR2_LN_DW_DEFER", 1))
_stack: deferred_finals.Stack | None = None
_last_deferred: tuple[int, int] | None = None   # (LayerNorms deferred, announced) of the last backward
BULK_MAX_STAGES = 4         # residual_layernorm.cu's LN_BULK_MAX_STAGES
# The widths it takes at 1: at 384 columns (the char model: 16384 rows of 1.5 KB) one block an SM took 40.1 us against
# the plain kernel's 30.3 (call 5 of results/h200-perf-20261204c, Nsight Compute): its eight warps an SM cannot hide a
# group's fixed costs (two barriers, the dw partial) over rows that short. Built since for two blocks an SM there
# (BULK_BLOCKS; written after the device time, NOT run on a GPU): taken at 2 only until measured.
BULK_SIZES = (768, 1024)
# Blocks an SM of the bulk kernel at each width (residual_layernorm.cu's LN_BULK_MIN_BLOCKS): each block's ring sized to
# its share of the SM's shared memory.
BULK_BLOCKS = {384: 2, 768: 1, 1024: 1}
BULK_SHARED_LIMIT = 227 * 1024   # the H100's and H200's dynamic shared memory a block, opted in
BULK_SM_SHARED = 228 * 1024      # an SM's, of which the driver keeps 1 KB a block


def forward(ctx, x: "cp.ndarray", w: "cp.ndarray", eps: float):
    """y feeds a product only: written in the half type in the half builds (how the product reads it)."""
    N, C = x.shape
    y = cp.empty((N, C), dtype=ctx.store_dtype)
    mean = cp.empty((N,), dtype=np.float32)
    rstd = cp.empty((N,), dtype=np.float32)
    grid = (N + ROWS_PER_BLOCK - 1) // ROWS_PER_BLOCK
    launch(FILE, "layernorm_forward", grid, 32 * ROWS_PER_BLOCK, (y, mean, rstd, x, w, i32(N), i32(C), f32(eps), i32(ctx.kind_of(y))))
    return y, mean, rstd


def backward(ctx, dy: "cp.ndarray", x: "cp.ndarray", w: "cp.ndarray", mean: "cp.ndarray", rstd: "cp.ndarray"):
    N, C = x.shape
    dx = cp.empty((N, C), dtype=np.float32)
    dw = rows_backward(ctx, FILE, "layernorm_backward", "layernorm_dw_final", N, C,
                       lambda part: (dx, part, dy, x, w, mean, rstd, i32(N), i32(C), i32(ctx.kind_of(dy))))
    return dx, dw


def _rows_kernel(kernel: str, C: int) -> str:
    """The register-row form of the kernel (the same formulas with the row held in registers) at the models'
    widths."""
    if not (register_rows and C in REGISTER_ROW_SIZES):
        return kernel
    return f"{kernel}_c{C}"


def _bulk_stage_bytes(C: int, dy_itemsize: int, has_skip: bool) -> int:
    """A stage of the bulk backward's ring (residual_layernorm.cu's layout): a group's s, dskip when given, dy, and
    its means and rstds."""
    return ROWS_PER_BLOCK * C * (4 + (4 if has_skip else 0) + dy_itemsize) + 2 * ROWS_PER_BLOCK * 4


def bulk_limit(C: int) -> int:
    """The shared memory a block of the bulk backward may take at width C: all a block may, or its share of the SM's
    where BULK_BLOCKS puts more than one block there."""
    blocks = BULK_BLOCKS.get(C, 1)
    return BULK_SHARED_LIMIT if blocks == 1 else BULK_SM_SHARED // blocks - 1024


def bulk_stages(C: int, dy_itemsize: int, has_skip: bool, limit: int | None = None) -> int:
    """Stages of the bulk backward's ring that fit in `limit` bytes of shared memory (default bulk_limit(C)) beside
    its dw rows, w and barriers, at most BULK_MAX_STAGES; 0 where fewer than two fit (then the plain kernel runs)."""
    limit = bulk_limit(C) if limit is None else limit
    n = min(BULK_MAX_STAGES, (limit - C * 4 - bulk_shared_bytes(C, dy_itemsize, has_skip, 0) - 8 * BULK_MAX_STAGES)
            // _bulk_stage_bytes(C, dy_itemsize, has_skip))
    return n if n >= 2 else 0


def bulk_shared_bytes(C: int, dy_itemsize: int, has_skip: bool, stages: int) -> int:
    """The bulk backward's dynamic shared memory: the ring, dw's rows, the stages' barriers (w, C floats, is its
    static shared memory, which counts against the same limit)."""
    return stages * _bulk_stage_bytes(C, dy_itemsize, has_skip) + ROWS_PER_BLOCK * C * 4 + 8 * stages


def _bulk_rows(kernel: str, C: int, rows) -> bool:
    """Whether the bulk form takes this launch: switched on, residual_layernorm's backward at one of BULK_SIZES (at
    every register-row width where BWD_BULK is 2), and every array the copy engine reads (s, dskip, dy, mean, rstd)
    contiguous at a 16-byte aligned address."""
    sizes = BULK_SIZES if BWD_BULK == 1 else REGISTER_ROW_SIZES if BWD_BULK == 2 else ()
    if not (kernel == "residual_layernorm_backward" and register_rows and C in sizes):
        return False
    return all(a is None or (a.flags.c_contiguous and a.data.ptr % 16 == 0) for a in rows)


def rows_backward(ctx, filename: str, kernel: str, final: str, N: int, C: int, args_of_part,
                  bulk_rows=None) -> "cp.ndarray":
    """Launches a backward kernel on layernorm_backward.cuh's body (a warp a row, ROWS_PER_BLOCK rows a block, the
    block's dw partial into `part`, its arguments args_of_part(part)), then `final`, which adds the partials in
    order; -> dw. Shared by the plain LayerNorm and residual_layernorm. bulk_rows: residual_layernorm's (s, dskip
    or None, dy, mean, rstd), for the bulk form (_bulk_rows)."""
    grid = (N + ROWS_PER_BLOCK - 1) // ROWS_PER_BLOCK
    taken = _stack.take(grid, C) if _stack is not None else None   # DEFER_FINALS, inside a backward
    part = taken[0] if taken else ctx.ws.get("ln_dw_part", (grid, C), np.float32)
    stages = 0
    if bulk_rows is not None and _bulk_rows(kernel, C, bulk_rows) and compute_capability(cp.cuda.Device().id) >= 90:
        _, dskip, dy, _, _ = bulk_rows
        stages = bulk_stages(C, dy.dtype.itemsize, dskip is not None)
    if stages:
        blocks = min(grid, BULK_BLOCKS.get(C, 1) * sm_count(cp.cuda.Device().id))
        launch(filename, f"{kernel}_c{C}_bulk", blocks, 32 * ROWS_PER_BLOCK, args_of_part(part) + (i32(stages),),
               shared_mem=bulk_shared_bytes(C, dy.dtype.itemsize, dskip is not None, stages))
    else:
        launch(filename, _rows_kernel(kernel, C), grid, 32 * ROWS_PER_BLOCK, args_of_part(part),
               shared_mem=ROWS_PER_BLOCK * C * 4)
    if taken:
        return taken[1]   # written by finish_deferred, at the backward's end
    dw = cp.empty((C,), dtype=np.float32)
    launch(filename, final, ((C + 31) // 32,), (32, 32), (dw, part, i32(grid), i32(C)))
    return dw


def begin_deferred(count: int) -> None:
    """A backward of `count` LayerNorms starts: with DEFER_FINALS their dw finals wait for finish_deferred."""
    global _stack
    _stack = deferred_finals.Stack(count, lambda shape: cp.empty(shape, dtype=np.float32)) if DEFER_FINALS else None


def finish_deferred() -> None:
    """The backward has ended: every deferred LayerNorm's dw in one launch (layernorm_dw_final_stacked)."""
    global _stack, _last_deferred
    stack, _stack = _stack, None
    if stack is None:
        return
    _last_deferred = (stack.used, stack.count)
    if stack.used:
        launch(FILE, "layernorm_dw_final_stacked", ((stack.C + 31) // 32, stack.used), (32, 32),
               (stack.dws, stack.parts, i32(stack.G), i32(stack.C)))


def deferred_line() -> str | None:
    """The train log's account of the deferral (None where TR2_LN_DW_DEFER is off): how many LayerNorms of the last
    backward left their dw to the one launch, of those the model announced."""
    if not DEFER_FINALS:
        return None
    used, count = _last_deferred or (0, 0)
    return f"LayerNorm dw finals deferred (TR2_LN_DW_DEFER=1): {used} of {count} LayerNorms in one launch"
