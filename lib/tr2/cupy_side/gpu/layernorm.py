"""Wrapper of kernels/layernorm.cu (no bias)."""
from __future__ import annotations

import numpy as np
import cupy as cp

from . import REGISTER_ROW_SIZES, SwitchError, deferred_finals, dw_order, kernel_switch, switch_given
from .runtime import compute_capability, f32, i32, launch, sm_count

FILE = "layernorm.cu"
ROWS_PER_BLOCK = 8          # one warp per row
register_rows = True        # the models' widths hold a row in registers (REGISTER_ROW_SIZES); off: the general body
# On: the backward's own last blocks finish dw (the *_backward_dwsum kernels, layernorm_backward.cuh's
# layernorm_dw_finish), one launch instead of two, in another fixed order (other bits, the same every run). Off until
# the GPU tests have passed on the H200 (tests/test_kernels_gpu.py, "dwsum"): the *_dw_final kernel, as before.
# TR2_LN_FINAL_IN_KERNEL=1 in the environment turns it on for a run (a bench variant).
FINAL_IN_KERNEL = bool(kernel_switch("TR2_LN_FINAL_IN_KERNEL", 0))
# On: residual_layernorm's register-row backward loads dskip's row with dy's and s's, before the row's means
# (residual_layernorm_backward_c<C>_pf; the same bits). Its bit tests passed in call 1 of results/h200-perf-20261202c,
# and the step did not gain in call 2 (ms, one round, off / on: nanogpt 4.28 / 4.33, gpt2-small 16.55 / 16.52,
# gpt2-medium 43.12 / 43.27): off.
PREFETCH_SKIP = bool(kernel_switch("TR2_LN_BWD_PREFETCH", 0))
# 3: residual_layernorm's register-row backward at 768 and 1024 columns built for three blocks an SM
# (residual_layernorm_backward_c<C>_o3: at most 80 registers where the plain kernels take 94 and 124; ptxas, NVRTC
# 12.9: spills 40 and 248 bytes; the same bits). Why: Nsight Compute found the plain kernels at two blocks an SM, their
# warps waiting on the row's loads (call 8 of results/h200-perf-20261204). Written in the twenty-fifth session after
# its device time: NOT run on a GPU, off (2).
BWD_BLOCKS = kernel_switch("TR2_LN_BWD_BLOCKS", 2, (2, 3))
THREE_BLOCK_SIZES = (768, 1024)
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
    """The register-row form of the kernel (the same formulas with the row held in registers) at the models' widths;
    with PREFETCH_SKIP, residual_layernorm's that loads dskip early; with BWD_BLOCKS 3, residual_layernorm's built
    for three blocks an SM (at THREE_BLOCK_SIZES)."""
    if not (register_rows and C in REGISTER_ROW_SIZES):
        return kernel
    if kernel != "residual_layernorm_backward":
        return f"{kernel}_c{C}"
    if PREFETCH_SKIP and BWD_BLOCKS == 3:
        raise SwitchError("TR2_LN_BWD_PREFETCH=1 and TR2_LN_BWD_BLOCKS=3 name two forms of one kernel: one of them")
    if BWD_BLOCKS == 3 and C in THREE_BLOCK_SIZES:
        return f"{kernel}_c{C}_o3"
    return f"{kernel}_c{C}{'_pf' if PREFETCH_SKIP else ''}"


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
    every register-row width where BWD_BULK is 2),
    dw by the final kernel, and every array the copy engine reads (s, dskip, dy, mean, rstd) contiguous at a
    16-byte aligned address."""
    sizes = BULK_SIZES if BWD_BULK == 1 else REGISTER_ROW_SIZES if BWD_BULK == 2 else ()
    if not (kernel == "residual_layernorm_backward" and register_rows and C in sizes):
        return False
    if PREFETCH_SKIP or BWD_BLOCKS == 3:   # a form asked for by name wins over the default
        if switch_given("TR2_LN_BWD_BULK"):
            raise SwitchError("TR2_LN_BWD_BULK=1 and TR2_LN_BWD_PREFETCH=1 / TR2_LN_BWD_BLOCKS=3 name two forms of one "
                             "kernel: one of them")
        return False
    return not FINAL_IN_KERNEL and all(a is None or (a.flags.c_contiguous and a.data.ptr % 16 == 0) for a in rows)


def rows_backward(ctx, filename: str, kernel: str, final: str, N: int, C: int, args_of_part,
                  bulk_rows=None) -> "cp.ndarray":
    """Launches a backward kernel on layernorm_backward.cuh's body (a warp a row, ROWS_PER_BLOCK rows a block, the
    block's dw partial into `part`, its arguments args_of_part(part)), then `final`, which adds the partials in
    order; -> dw. Shared by the plain LayerNorm and residual_layernorm. With FINAL_IN_KERNEL, one launch of
    `kernel`_dwsum, which takes (dw, group sums, counters) after those arguments and sums the partials itself.
    bulk_rows: residual_layernorm's (s, dskip or None, dy, mean, rstd), for the bulk form (_bulk_rows)."""
    grid = (N + ROWS_PER_BLOCK - 1) // ROWS_PER_BLOCK
    if FINAL_IN_KERNEL:
        part = ctx.ws.get("ln_dw_part", (grid, C), np.float32)
        return _rows_backward_dwsum(ctx, filename, kernel, grid, C, args_of_part(part))
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


def _rows_backward_dwsum(ctx, filename: str, kernel: str, grid: int, C: int, args: tuple) -> "cp.ndarray":
    """The backward and dw's sum in one launch. The counters live in the workspace, zeroed at their first use (the
    eager first step, before any capture) and left zero by every launch; one set a grid size, shared by the launches
    of the step, which run one after another on one stream (as they share ln_dw_part already)."""
    groups = len(dw_order.groups_of(grid))
    group_sums = ctx.ws.get("ln_dw_group_sums", (groups, C), np.float32)
    counters = ctx.ws.zeros("ln_dw_counters", (groups + 1,), np.int32)
    dw = cp.empty((C,), dtype=np.float32)
    launch(filename, _rows_kernel(f"{kernel}_dwsum", C), grid, 32 * ROWS_PER_BLOCK, args + (dw, group_sums, counters),
           shared_mem=ROWS_PER_BLOCK * C * 4)
    return dw
