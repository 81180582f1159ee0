"""Wrapper of kernels/attention.cu: causal attention fused on tensor cores, q/k/v read in place.

forward(qkv [B, T, 3C]) -> out [B, T, C] and AttentionSaved(out, lse [B, H, T], the kernels' qkv). backward
under half roundings (`stores_ds`): D = rowsum(dO * out), then dK/dV, which also writes dS^T to a [B*H, T, ~T]
half buffer, then dQ as one product over it; else folded (the exact half builds, T <= 256: `folds`): D (which also
zeroes the backward's counters), then one kernel for dK, dV and dQ (dQ's key-block parts added in a fixed order
through a float32 buffer [B*H, T, hs]); else dQ (which also writes D), then dK/dV. Each
kernel writes its own columns of one dqkv [B, T, 3C]. No T x T array of scores or probabilities exists anywhere
(the dS^T buffer is the one T x T array, and only where it is used).

The half builds' kernels read q, k, v and dO as half-type bits (every product reads them so rounded): under
half roundings c_attn and c_proj's backward hand them over so; otherwise (float32 products' outputs) qkv is
cast once in forward, kept for backward, and dO once in backward. out and dqkv are written in the half type
under half roundings (their consumers, products, read them so), else in float32. The build picks the kernel (attention.cu's header says
what each rounds): f32 (plain float32, TF32 pairs), tf32, bf16 / f16 (exact: the probabilities as two half
values), bf16r / f16r (half roundings). Head sizes: 32 and 64 (every model here has 64; `tiny` has 32).
"""
from __future__ import annotations

import numpy as np
import cupy as cp

from . import SwitchError, WG_DKDV_QUERY_TILE, attention_geometry, ds_row_halves, kernel_define, kernel_switch
from . import dropout as _dropout
from . import tma as _tma
from .cast import to_half
from . import runtime
from .runtime import NULL, i32, launch, u32

FILE = "attention.cu"
HEAD_SIZES = (32, 64)
THREADS = 128         # four warps
ROW_DOTS_THREADS = 256   # attn_row_dots: eight threads a row
# attn_row_dots_wide (each thread's elements in one load; the same bits): on since the sixtieth session's H100 measure,
# x0.92-0.95 of the loop's kernel under Nsight Compute (results/h100-perf-20261207d); row_dots_kernel
ROW_DOTS_WIDE = bool(kernel_switch("TR2_ATTN_ROW_DOTS_WIDE", 1))
# attention.cu's Geometry: m16 tiles a warp (a block owns 4 * 16 * mt rows), rows of each kernel's streamed tiles
GEOMETRY = attention_geometry()
_ROW_BYTES = {True: 72 * 2, False: 68 * 4}   # a staged row: half tiles, float32 tiles (padded)


class AttentionSaved:
    """What attention_forward hands to attention_backward (opaque to the model): its output and the
    per-row log-sum-exp of the scaled scores."""
    __slots__ = ("out", "lse", "qkv")

    def __init__(self, out, lse, qkv):
        self.out, self.lse, self.qkv = out, lse, qkv


# float32 with TF32 (the float32 element type, nanoGPT's allow_tf32): attention's operands as single TF32 values (the
# tf32 build, 0, the default), or as TF32 pairs, three mma a product (the plain build's f32 kernels, 1). PyTorch's
# float32 attention on these shapes is the memory-efficient kernels (fmha_cutlassF/B_f32, the families stage's
# tables), whose float products are CUTLASS's three-TF32 form whatever allow_tf32 says (PyTorch's
# mem_eff_attention/gemm_kernel_utils.h, DefaultGemmType for float at sm80 and above: OpMultiplyAddFastF32), so 1
# computes attention as PyTorch's float32 does and 0 more coarsely (docs/perf.md, forty-fourth session: on an H100,
# call 3 of results/h100-perf-20261205k, the step x1.38 and x1.40 of the default's on nanogpt and gpt2-small; its
# graph test passed there).
F32_PAIRS = bool(kernel_switch("TR2_ATTN_F32_PAIRS", 0))

# The float32 builds' tiles staged (0) synchronously into one buffer, each thread loading, rounding (tf32) and storing,
# or (1) streamed: copied raw by cp.async into two buffers, the next tile's copy in flight while the current one
# computes, and the tf32 build's tiles rounded in place where they land (attention.cu's land_tf32): the f32s and tf32s
# kernels, the same operands and products, so the same bits (tests/test_kernels_gpu.py, "float32_forms"). The
# kernels hold 255 registers a thread (ptxas), two blocks an SM, and the synchronous staging left each block's warps
# waiting on their loads every tile. Measured (docs/perf.md, forty-sixth session, an H100): slower with one TF32 product
# (x1.03 of attention on all three models), x0.94-0.95 with TF32 pairs on the GPT-2 shapes, about 2% of their steps:
# under the 3% the rule asked of a default, so off.
F32_STREAM = bool(kernel_switch("TR2_ATTN_F32_STREAM", 0))


# The float32 builds' forward on warpgroup MMA (attention.cu's attention_forward_wgf, attn_forward_wgf2_<f32|tf32>_hs64):
# head size 64 where attention.cu was built for sm_90a; two warpgroups of 64 queries a block (the switch's value; 0:
# the mma.sync forward). Its products in TF32 on wgmma (pairs in the exact build, as the f32 kernels), each staged
# element rounded or split once a block, Pd handed to the next product without shuffles (v's keys staged in the order
# that makes the scores' accumulator the A fragment). Not the mma.sync forward's bits (the tensor cores add a slice's
# products in another order): within the build's tolerance of the NumPy form (tests/test_kernels_gpu.py,
# "float32_forward_each_form"). Measured on H100s (docs/perf.md, forty-seventh and forty-eighth sessions;
# results/h100-perf-20261206b and -20261206c), the forward alone against the mma.sync kernels in one call at 73e0c3a
# (v landed 16 bytes a copy): gpt2-small 0.204 against 0.224 ms a layer with one TF32 product, 0.261 against 0.402
# with TF32 pairs; the step with one TF32 product -0.40 to -0.55 ms on gpt2-small and -0.62 to -1.55 on gpt2-medium
# (faster in every one of six and five rounds), nanogpt level (within 0.013 ms either way); with pairs -1.2 ms on
# gpt2-small and -3.4 on gpt2-medium. On by default (2) since the forty-eighth session; 0 is the mma.sync forward.
# One warpgroup a block (the value 1, the kernels attn_forward_wgf1_) ran slower than the mma.sync forward in every
# case measured and was removed.
F32_WG = kernel_switch("TR2_ATTN_F32_WG", 2, (0, 2))


# The float32 dK/dV on wgmma (attention.cu's attention_backward_dkdv_wgf, attn_backward_dkdv_wgf2_tf32_hs64): head size
# 64, one TF32 product (TF32 pairs would double every staged tile, past the shared memory a block may take), where
# attention.cu was built for sm_90a; 1 takes it at every sequence length, 0 never (the mma.sync dK/dV), 2 (the default
# since the forty-ninth session) where T > F32_WG_DKDV_MIN_T. Measured on an H100 in one call each against the mma.sync
# kernel (docs/perf.md, forty-ninth session; results/h100-perf-20261206d): Nsight Compute 324.5 -> 272.2 us a layer on
# gpt2-small and 426.9 -> 353.9 on gpt2-medium (T = 1024), the step -0.21 to -0.42 ms a round on gpt2-small and -1.36 to
# -1.53 on gpt2-medium, faster in all 5 rounds of each; but at nanogpt's T = 256 the kernel took 145.7 -> 149.8 us and the
# step +0.033 ms, slower in 3 of 3 rounds: its 128-key blocks see 4 or 2 query tiles there, too few to repay the
# staging of k and v and the block's two barriers a tile. Lengths between 256 and 1024 were not measured; the cut
# sits at the one length seen to lose.
F32_WG_DKDV = kernel_switch("TR2_ATTN_F32_WG_DKDV", 2, (0, 1, 2))
F32_WG_DKDV_MIN_T = 256


def uses_f32_wg_dkdv(ctx, hs: int, T: int) -> bool:
    return _past_the_cut(F32_WG_DKDV, F32_WG_DKDV_MIN_T, T) and _f32_wg_backward_built(ctx, hs)


def _past_the_cut(switch: int, min_t: int, T: int) -> bool:
    """A float32 wgmma backward switch's rule: 1 at every T, 2 where T > min_t, 0 never."""
    return switch == 1 or (switch == 2 and T > min_t)


def _f32_wg_backward_built(ctx, hs: int) -> bool:
    """Where the float32 backward kernels on wgmma exist: one TF32 product, head size 64, attention.cu built for
    sm_90a."""
    return not ctx.half and _float32_build(ctx) == "tf32" and hs == 64 and runtime.built_for(FILE) == "sm_90a"


# The float32 dQ on wgmma (attention.cu's attention_backward_dq_wgf, attn_backward_dq_wgf2_tf32_hs64): head size 64, one
# TF32 product (pairs would double the staged tiles past a block's shared memory), where attention.cu was built for
# sm_90a; 1 takes it at every sequence length, 0 never (the mma.sync dQ), 2 (the default since the fiftieth session)
# where T > F32_WG_DQ_MIN_T. Its D (the row dots the dK/dV kernel reads) is the mma.sync dQ's to the bit, so dK and dV
# keep theirs. Measured on an H100 in one call each against the mma.sync kernel (docs/perf.md, fiftieth session;
# results/h100-perf-20261206e): Nsight Compute 263.6 -> 237.8 us a layer on gpt2-small and 348.1 -> 306.0 on
# gpt2-medium (T = 1024), the step -0.25 ms on gpt2-small (one round against the tree) and -0.82, -0.92 on gpt2-medium;
# at nanogpt's T = 256 the kernel took 134.7 -> 156.9 us (x1.17): as with the dK/dV, too few key tiles a block there to
# repay the staging. The cut sits where the dK/dV's does, at the one length measured to lose.
F32_WG_DQ = kernel_switch("TR2_ATTN_F32_WG_DQ", 2, (0, 1, 2))
F32_WG_DQ_MIN_T = 256

# Its forms measured slower and removed (gpu.RETIRED refuses their switches; the code and tests at 6369b54): k^T written
# from the staged k rows (TR2_ATTN_F32_DQ_KT=1, fifty-second session) and a resident grid landing each item's copies
# under the previous item's tiles (TR2_ATTN_F32_DQ_RESIDENT=1, fifty-third): docs/perf.md.


def uses_f32_wg_dq(ctx, hs: int, T: int) -> bool:
    return _past_the_cut(F32_WG_DQ, F32_WG_DQ_MIN_T, T) and _f32_wg_backward_built(ctx, hs)


def f32_wg_dq_shared_bytes(hs: int = 64) -> int:
    """attention_backward_dq_wgf's dynamic shared memory (two warpgroups, 128 queries): the block's q and dO, two
    buffers of a key tile's k, v and k^T, and the next tile's landing (k and v raw as staged, k^T's warps' rows padded
    to hs + 8 floats)."""
    queries, tile = 128, 64
    return (2 * queries * hs + 6 * tile * hs + 2 * tile * hs + tile * (hs + 8)) * 4


def f32_wg_dkdv_shared_bytes(hs: int = 64) -> int:
    """attention_backward_dkdv_wgf's dynamic shared memory (two warpgroups, 128 keys): the block's k and v, the query
    tile's q and dO as rows and transposed, the next rows' landing (q, dO), the next transposed tiles' landing (their
    warps' rows, padded to hs + 8 floats), and two buffers of the tile's lse and D."""
    keys, tile = 128, 64
    return (2 * keys * hs + 6 * tile * hs + 2 * tile * (hs + 8) + 4 * tile) * 4


def f32_wg_shared_bytes(nwg: int, split: bool, hs: int = 64) -> int:
    """attention_forward_wgf's dynamic shared memory: the block's q (64 nwg rows) and two buffers of a k and a
    transposed v tile (64 keys), hs floats a row, twice over (hi and lo) in the exact build; and the landing buffer
    of the next k and v tile, raw (v's rows padded to hs + 8 floats: attention.cu's LandCols)."""
    pieces = 2 if split else 1
    return (64 * nwg + 4 * 64) * hs * pieces * 4 + 64 * (2 * hs + 8) * 4


def uses_f32_wg(ctx, hs: int) -> bool:
    return bool(F32_WG) and not ctx.half and hs == 64 and runtime.built_for(FILE) == "sm_90a"


def _float32_build(ctx) -> str:
    """The float32 builds' arithmetic: "tf32" (one TF32 product) or "f32" (TF32 pairs: plain float32, or TF32 with
    F32_PAIRS)."""
    return "tf32" if ctx.tf32 and not F32_PAIRS else "f32"


def build_name(ctx) -> str:
    if not ctx.half:
        return _float32_build(ctx) + ("s" if F32_STREAM else "")
    base = "bf16" if ctx.dtype == "bfloat16" else "f16"
    return base + ("r" if ctx.half_roundings else "")


def _geometry(ctx) -> dict:
    return GEOMETRY["half" if ctx.half else "float32"]


def block_rows(ctx) -> int:
    """Rows (queries, or keys in dK/dV) a block of each kernel owns."""
    return 4 * 16 * _geometry(ctx)["mt"]


def shared_bytes(ctx, kernel: str) -> int:
    """attention.cu's shared memory of one block: the block's own tiles, the streamed tiles in each staging
    buffer (two in the half builds and the streamed float32 ones, cp.async), and dK/dV's staged lse and D; the half
    builds' backward ("backward": dK/dV with dQ) also its dS^T, [rows][streamed + 8] halves, twice in the exact build."""
    geometry = "backward_dkdv" if kernel == "backward" else kernel
    rows, streamed, nbuf = block_rows(ctx), _geometry(ctx)[geometry], 2 if ctx.half or F32_STREAM else 1
    own = {"forward": 1, "backward_dq": 2, "backward_dkdv": 2}[geometry]
    extra = nbuf * 2 * streamed * 4 if geometry == "backward_dkdv" else 0
    if kernel == "backward":
        extra += rows * (streamed + 8) * 2 * (1 if ctx.half_roundings else 2)
    return (own * rows + nbuf * 2 * streamed) * _ROW_BYTES[ctx.half] + extra


def _launch(ctx, kernel: str, hs: int, T: int, BH: int, args) -> None:
    """attn_<kernel>_<build>_hs<hs>, a block a (4 * 16 * mt rows, head)."""
    name = f"attn_{kernel}_{build_name(ctx)}_hs{hs}"
    nbytes = shared_bytes(ctx, kernel)
    rows = block_rows(ctx)
    # the streamed float32 kernels (87-106 KB a block, two blocks an SM) fit only with the largest carveout
    launch(FILE, name, (BH, (T + rows - 1) // rows), THREADS, args, shared_mem=nbytes,   # attention.cu: Grid
           prefer_shared=not ctx.half and F32_STREAM)


def _half(ctx, a, out=None):
    """What the kernels read: float32 in the float32 builds, half bits in the half builds (cast if need be)."""
    if not ctx.half or a.dtype == np.uint16:
        return a
    return to_half(a, ctx.kind, out=out)


def _aligned16(reader: str, **arrays) -> None:
    """The kernel reads these arrays 16 bytes a load: each must start on a 16-byte boundary (fresh ones do)."""
    for name, a in arrays.items():
        if a.data.ptr % 16:
            raise ValueError(f"attention: {name} (shape {a.shape}) starts at {a.data.ptr:#x}, not on the 16 bytes "
                             f"{reader} reads it in")


def _shape(qkv, n_head: int):
    B, T, C3 = qkv.shape
    C = C3 // 3
    if C3 != 3 * C or C % n_head:
        raise ValueError(f"attention: qkv of shape {tuple(qkv.shape)} does not split into 3 x {n_head} heads")
    hs = C // n_head
    if hs not in HEAD_SIZES:
        raise ValueError(f"attention: head size {hs}; the CUDA kernels are built for {HEAD_SIZES}")
    return B, T, C, hs


_dropout_args = _dropout.kernel_args


# Forms of these kernels measured slower than the ones below and removed, with the switches that selected them (each
# refused if still set: gpu.RETIRED): the forward's three-blocks-an-SM build (TR2_ATTN_FWD_BLOCKS), pipelined and
# ping-pong wgmma forwards (TR2_ATTN_FWD_WGP, _WGP_NWG, TR2_ATTN_FWD_PINGPONG), the TMA forward's forms 1-6 and 8
# (TR2_ATTN_FWD_TMA, and those values of TR2_ATTN_FWD_TMA_LONG); the dS kernels without the evict-first L2 policy
# (TR2_ATTN_DS_EVICT_FIRST) and the 64-query dQ (TR2_ATTN_DQ_DS_QUERIES); the wgmma dK/dV kernels on cp.async and their
# forms (TR2_ATTN_WG_DKDV_NWG, _OVERLAP, _ROW_DOTS, _PINGPONG, _BLOCKS, TR2_ATTN_WG_DKDV_TMA), the TMA dK/dV's forms 0-4
# (TR2_ATTN_DKDV_TMA_FORM); the TMA dQ resident and with the heads fastest (TR2_ATTN_DQ_TMA_RESIDENT,
# TR2_ATTN_DQ_TMA_ORDER); the backward a group of batches at a time (TR2_ATTN_DS_GROUP_BATCHES). attention.cu's header
# names each with the docs/perf.md session that measured it; their code and tests: before the removal, at ee6b673.
# Later: the TMA forward's form 9, three consumer warpgroups (TR2_ATTN_FWD_TMA_LONG=9, fifty-fourth session; at 8cd4f2d);
# its forms 10 (four stages of k and v) and 11 (no dropout path) and the TMA dK/dV's four-stage ring (TR2_ATTN_DKDV_DEEP;
# fifty-fifth session; no faster in the step, or alone; at 1a3ac90).


# The forward on warpgroup MMA (attention.cu's attention_forward_wg): the half builds under half roundings, head
# size 64, where attention.cu was built for sm_90a, and rows of at most WG_MAX_T (USE_WGMMA = False: the mma.sync
# kernel everywhere, for comparisons). Measured in one process against the mma.sync forward (results/
# h200-perf-20261201d/call3-a32e5b6, scripts/attention_forward_variants.py): nanogpt (T = 256) x0.82; gpt2-small
# and gpt2-medium (T = 1024) x1.48 with one warpgroup a block, x1.12-1.13 with two. On long rows the wgmma kernel
# waits on each product before the softmax that follows it; the mma.sync kernel keeps more in flight. One warpgroup
# of 128 threads a block, 64 queries; shared memory: the block's q and two buffers of a k and a v tile, 64 x hs
# halves each, no padding (core matrices).
USE_WGMMA = True
WG_MAX_T = 256
# The v tile's descriptor strides (LBO, SBO) in bytes for its MN-major (transposed) read: 8-key row groups lie
# 1024 bytes apart, 8-column chunks 128. The other order gives errors of order 1 (scripts/attention_wg_probe.py,
# results/h200-perf-20261201d/call2-7e74e5f/probe.log).
V_STRIDES = (1024, 128)


# Rows over WG_MAX_T (the GPT-2 shapes) take the TMA forward with 128-key tiles, resident (attention.cu's
# attention_forward_tma_resident, attn_forward_tmawr_, form 7): one thread of a producer warpgroup hands the q, k and
# v boxes to the copy engine in 128-byte-swizzled shared memory (gpu/tma.py's tensor map of qkv), two consumer
# warpgroups of 64 queries each wait on mbarriers, setmaxnreg gives the producer's registers to them, and one block an
# SM takes the heads' query blocks by tickets, the longest first. Not the 64-key forms' bits (its online softmax's
# maxima over 128 keys at a time): within the type's tolerance of the NumPy form, every run the same bits
# (tests/test_kernels_gpu.py, "forward_tma_wide"). Its plain form (3, tmaw) alone in CUDA graphs (ms a layer, bf16,
# call 6 of results/h200-perf-20261203e): 0.0562 and 0.0731 against mma.sync's 0.0617 and 0.0783 on gpt2-small and
# gpt2-medium, on by default since the twentieth session; form 7 since the twenty-fourth: form 3's bits, alone x0.872 /
# x0.859 of form 3, the step, medians of three rounds, 16.387 -> 16.366 ms and 42.842 -> 42.743
# (results/h200-perf-20261203j, calls 5-8). TR2_ATTN_FWD_TMA_LONG=0 gives those rows the mma.sync forward (a bench
# variant); 7, the default, this one. (Its forms 10 and 11, the values 10 and 11, were removed on 2026-12-07: above.)
FWD_TMA_LONG = kernel_switch("TR2_ATTN_FWD_TMA_LONG", 7, (0, 7))
FWD_TMAW_STAGES = kernel_define(FILE, "FWD_TMAW_STAGES")


def forward_tma_form(T: int) -> int:
    """The TMA forward's form that rows of T take, 0 for none: FWD_TMA_LONG (7, attn_forward_tmawr_, unless a bench
    variant sets 0) for rows over WG_MAX_T."""
    return FWD_TMA_LONG if T > WG_MAX_T else 0


def uses_wgmma(ctx, hs: int, T: int) -> bool:
    return (USE_WGMMA and ctx.half and ctx.half_roundings and hs == 64
            and (T <= WG_MAX_T or forward_tma_form(T))
            and runtime.built_for(FILE) == "sm_90a")


def tma_shared_bytes(hs: int) -> int:
    """attention_forward_tma_resident's dynamic shared memory: FWD_TMAW_STAGES stages of two k and two v boxes, two
    buffers of the two consumers' q boxes, 64 x hs halves each, and 1 KB to put the first on a 1024-byte boundary (the
    128B swizzle's period)."""
    return (4 + 4 * FWD_TMAW_STAGES) * 64 * hs * 2 + 1024


def resident_grid(BH: int, T: int, sms: int) -> int:
    """A resident kernel's blocks: one an SM, or one a work item (a head's 128 queries, or 128 keys for the dK/dV
    kernel) where there are fewer."""
    return max(1, min(int(sms), BH * -(-T // 128)))


def _resident(ctx, BH: int, T: int, tickets: str) -> tuple:
    """A resident kernel's extra arguments (the heads, and its ticket pair: two ints the kernel leaves at zero, zeroed
    once here, before any capture) and its grid (one block an SM, or one a work item)."""
    sms = runtime.sm_count(cp.cuda.Device().id)
    return (i32(BH), ctx.ws.zeros(tickets, (2,), np.int32)), (resident_grid(BH, T, sms),)


def _launch_wg(ctx, T: int, hs: int, BH: int, name: str, args) -> None:
    form = forward_tma_form(T)
    if form:
        qkv = args[2]
        rows, cols = qkv.size // qkv.shape[-1], qkv.shape[-1]
        tmap = _tma.encode(qkv, rows, cols, ctx.dtype)   # in qkv's place; no v strides (the boxes are swizzled)
        extra, grid = _resident(ctx, BH, T, "att_fwd_tickets")
        launch(FILE, f"attn_forward_tmawr_{name}_hs{hs}", grid, 384, args[:2] + (tmap,) + args[3:] + extra,
               shared_mem=tma_shared_bytes(hs), prefer_shared=True)
        return
    rows = 64   # one warpgroup a block: attention.cu instantiates attention_forward_wg in that form only
    launch(FILE, f"attn_forward_wg1_{name}_hs{hs}", (BH, -(-T // rows)), 128,
           args + (u32(V_STRIDES[0]), u32(V_STRIDES[1])), shared_mem=(rows + 4 * 64) * hs * 2, prefer_shared=True)


def forward(ctx, qkv: "cp.ndarray", n_head: int, p: float, seed: int, offset: int, offset_add=None):
    B, T, C, hs = _shape(qkv, n_head)
    H = n_head
    out = cp.empty((B, T, C), dtype=ctx.out_dtype)
    lse = cp.empty((B, H, T), dtype=np.float32)
    kqkv = _half(ctx, qkv)
    # the softmax's scale 1 / sqrt(hs) is attention.cu's Scale<hs>, a compile-time constant
    args = (out, lse, kqkv, i32(T), i32(H), i32(ctx.round_kind)) + _dropout_args(p, seed, offset, offset_add)
    if uses_wgmma(ctx, hs, T):
        _launch_wg(ctx, T, hs, B * H, build_name(ctx), args)
    elif uses_f32_wg(ctx, hs):
        build = _float32_build(ctx)
        launch(FILE, f"attn_forward_wgf{F32_WG}_{build}_hs{hs}", (B * H, -(-T // (64 * F32_WG))), 128 * F32_WG, args,
               shared_mem=f32_wg_shared_bytes(F32_WG, build == "f32", hs), prefer_shared=True)
    else:
        _launch(ctx, "forward", hs, T, B * H, args)
    return out, AttentionSaved(out, lse, kqkv)


# The half builds that do not store dS (below: the exact ones) fold dQ into the dK/dV kernel where a head has at
# most this many key blocks (T <= 256): measured
# faster there (the char model: 149 against 204 us a layer) and slower at eight (gpt2-small 311 against 216),
# results/h200-perf-20261201b/call3-f1bcd7d; attention.cu's header says why.
FOLD_KEY_BLOCKS = 2


def folds(ctx, T: int) -> bool:
    return ctx.half and -(-T // block_rows(ctx)) <= FOLD_KEY_BLOCKS


# The half builds under half roundings: the dK/dV kernel also writes dS^T, rounded as dK's operand, to a
# [B*H, T, ldq] half buffer, and dQ is one product over it (attention.cu's attention_backward_dq_ds) instead of a
# kernel that recomputes S and dPd (three products) or the fold's ordered adds. The buffer is T x T halves a head
# (gpt2-small bf16: 192 MB; nanogpt 50 MB), taken from the pool for the call and given back: the MLP's activations
# of the same block, dead by then, leave room for it. USE_DS = False: the fold or the recomputing kernel, for
# comparisons. Measured per layer alone (call 4 of results/h200-perf-20261201f): nanogpt 171 us recomputing, 146
# folded, 141 with dS stored; gpt2-small 232 recomputing, 212 with dS stored; the step, three models, in perf.md.
# Both dS kernels are built in their _l2 form only (attn_backward_dkdv_ds_l2_, attn_backward_dq_ds_l2_): ds_t's stores
# and loads marked evict-first in L2, the plain forms' bits. ~100 MB of ds_t a layer (gpt2-small, against the 50 MB
# L2) evicted the tiles the dK/dV kernel rereads and the dqkv the c_attn backward products read next; measured
# against the plain forms in the ninth session (medians of 3 runs, one H200, bf16, graph, results/h200-perf-20261201h,
# calls 1-2): nanogpt 4.611 -> 4.612 ms a step, gpt2-small 17.252 -> 17.173, gpt2-medium 44.876 -> 44.784.
USE_DS = True
DSQ_KEYS = kernel_define(FILE, "DSQ_KEYS")   # the keys of ds_t and k a block of attn_backward_dq_ds_l2_ stages at a time
DQ_DS_QUERIES = 128   # queries a block of attn_backward_dq_ds_l2_ (the 64-query form, no faster in the ninth session)


# dK/dV with dS stored on warpgroup MMA with a TMA producer, resident (attention.cu's
# attention_backward_dkdv_tma_resident, attn_backward_dkdv_ds_tmarr_l2_): the half builds under half roundings, head
# size 64, where attention.cu was built for sm_90a; ds_t's rows padded to a multiple of 64 queries. A producer
# warpgroup hands the q and dO tiles to the copy engine (tensor maps of qkv and dO) and gives its registers to two
# consumer warpgroups of 64 keys each (setmaxnreg 24 / 240), which run apart on mbarriers; one block an SM takes the
# heads' 128-key blocks by tickets. The bits of the mma.sync kernel (attn_backward_dkdv_ds_l2_), dS^T included, at
# every shape tested, through the chain of forms it came from (the wgmma kernel on cp.async, ninth session; its TMA
# form, nineteenth; that form resident, twenty-fifth: docs/perf.md); tests/test_kernels_gpu.py asks for them
# ("wgmma_backward_is_the_mma_sync_bits"). The whole backward alone in graphs with the TMA dQ (ms a layer, bf16,
# call 1 of results/h200-perf-20261204): 0.1009 / 0.1478 / 0.1975 on nanogpt / gpt2-small / gpt2-medium, x0.939 /
# x0.972 / x0.974 of the plain TMA form, which had taken x0.93 / x0.80 / x0.82 of the wgmma kernel on cp.async
# (call 6 of results/h200-perf-20261203e). TR2_ATTN_WG_DKDV=0 gives the mma.sync kernels (a bench variant).
USE_WG_DKDV = bool(kernel_switch("TR2_ATTN_WG_DKDV", 1))
DKDV_TMA_STAGES = kernel_define(FILE, "DKDV_TMA_STAGES")
# TR2_ATTN_DS_GROUPED=1 (built in the sixtieth session, on since the sixty-first): where the TMA dQ runs after the
# resident dK/dV, the dK/dV takes the heads in groups of about one item a block (key block by key block within a group,
# attention.cu's dkdv_item ORDER 1, attn_backward_dkdv_ds_tmarrg_) and stores ds_t without the evict-first policy, and
# the dQ takes the heads newest first (attn_backward_dq_ds_tmaqn_), so that the last groups' ds_t is read from the L2.
# Every item and block computes what it does in the ungrouped form: the same bits. On an H100
# (results/h100-perf-20261207f) the backward alone x0.972 / x0.933 of the ungrouped form on gpt2-small / gpt2-medium,
# the step -0.055 / -0.245 ms (bf16, three rounds).
DS_GROUPED = bool(kernel_switch("TR2_ATTN_DS_GROUPED", 1))
# TR2_ATTN_DQ_CHAIN (built in the sixty-first session; 2, the default, since the sixty-second): where the resident TMA
# dK/dV runs (half roundings, head size 64, sm_90a), one kernel instead of it, the dQ pass and ds_t (attention.cu's
# attn_backward_dkdv_dqc_): each warpgroup's 64-key part of a query tile's dQ (its staged dS^T times its k) added to a
# running float32 sum handed from item to item (dq_acc, a 64 x 64 slot a head and query tile; dq_turn, a counter each,
# zeroed by the row dots), as first built the keys descending with the items in groups, the shortest key block first
# (chain_items; the keys ascending by default since the sixty-fourth session: DQ_CHAIN_ASC below). dK and dV: the
# grouped kernel's bits; dQ: a new fixed order (within the type's tolerance of the NumPy form; three runs alike). 1: on
# rows of any length; 2: where the TMA dQ would not follow (rows of at most WG_MAX_T, unless TR2_ATTN_DQ_TMA=1), in
# place of the TMA dK/dV and the mma.sync dQ; 0: never. On an H100 (results/h100-perf-20261207g; bf16, graphs, three
# rounds) the backward alone against the default before it: x0.916 on the char model's rows of 256 (the step -0.069 ms
# bf16, -0.067 f16, faster in every round), x1.010 on gpt2-small's rows of 1024 and x0.983 on gpt2-medium's (its step
# +0.027 ms): so 2. Rows between 257 and 1023 were not measured.
DQ_CHAIN = kernel_switch("TR2_ATTN_DQ_CHAIN", 2, (0, 1, 2))
# TR2_ATTN_DQ_CHAIN_ASC (built in the sixty-third session; 1, the default, since the sixty-fourth): wherever the chained
# dQ runs, the chain keys ascending (attention.cu's chain_turn_asc, attn_backward_dkdv_dqa_) on key-block-major tickets,
# the longest items first (ORDER 0); 0: keys descending on the grouped tickets shortest first (attn_backward_dkdv_dqc_).
# Why: Nsight Compute of the descending chain (results/h100-perf-20261207h) finds the SMs active 83-85% of its cycles
# against 90% of the grouped dK/dV's, as scripts/probes/dq_chain_sim.py models (15.5% idle against 9.7%): a descending
# chain must end on long items. dK and dV the unchained bits; dQ its own order (the keys ascending). Measured (H100,
# the backward alone, bf16, results/h100-perf-20261207h call 7): x0.938 of the descending chain on the char model's rows
# of 256, but x1.006 / x1.040 of the grouped default on gpt2-small / gpt2-medium (the model counts no memory: these
# tickets reread each head's q and dO from the L2 at every key block: on gpt2-medium an L2 hit rate of 52% against the
# descending chain's 80%, with 3.7% of its cycles idle against 14.5%, results/h100-perf-20261207i call 1). The char
# model's step, three rounds against the descending chain: -0.025 ms bf16, -0.023 ms f16, faster in 6 of 6 (the same
# call). The default chain (DQ_CHAIN 2) runs only on rows of at most 256, so there it is the ascending one.
# (The descending chain's staggered order and lagged turns, TR2_ATTN_DQ_CHAIN_STAGGER and _LAG, were removed on
# 2026-12-07: gpu.RETIRED.)
DQ_CHAIN_ASC = bool(kernel_switch("TR2_ATTN_DQ_CHAIN_ASC", 1))


def dkdv_tma_shared_bytes(hs: int) -> int:
    """attention_backward_dkdv_tma_resident's dynamic shared memory: two buffers of k and v of the block's 128 keys
    (four 64 x hs boxes each), DKDV_TMA_STAGES stages of a q and a dO box and their lse and D rows (64 floats each), each
    consumer warp's 16 rows of dS^T (72 halves), and 1 KB to put the boxes on a 1024-byte boundary (the 128B swizzle's
    period)."""
    box = 64 * hs * 2
    return 8 * box + DKDV_TMA_STAGES * (2 * box + 2 * 64 * 4) + 8 * 16 * 72 * 2 + 1024


def grouped_items(BH: int, nkb: int, grid: int) -> list:
    """(key block, head) of each item of the grouped dK/dV in ticket order, as attention.cu's dkdv_item<1> computes
    it: G = ceil(grid / nkb) heads a group (the last group what is left), key block by key block within a group."""
    G = -(-grid // nkb)
    order = []
    for item in range(BH * nkb):
        grp, r = divmod(item, G * nkb)
        in_group = min(G, BH - grp * G)
        order.append((r // in_group, grp * G + r % in_group))
    return order


def chain_items(BH: int, nkb: int, grid: int) -> list:
    """(key block, head) of each item of the chained dQ's dK/dV in ticket order, as attention.cu's dkdv_item<2>
    computes it: grouped_items' groups with the key blocks from the last down, so that the item a chain turn waits for
    (the head's next key block) always has the earlier ticket."""
    return [(nkb - 1 - kb, bh) for kb, bh in grouped_items(BH, nkb, grid)]


def dkdv_chain_shared_bytes(hs: int) -> int:
    """attn_backward_dkdv_dqc_'s dynamic shared memory: dkdv_tma_shared_bytes' k, v and ring, then (in the dS^T rows'
    place) each consumer's swizzled 64 x 64 dS^T tile and the 64 x 64 float32 handoff buffer, and the 1 KB."""
    box = 64 * hs * 2
    return 8 * box + DKDV_TMA_STAGES * (2 * box + 2 * 64 * 4) + 2 * box + 64 * 64 * 4 + 1024


def dkdv_tma_kernel(name: str, hs: int, grouped: bool = False) -> tuple[str, int]:
    """The resident TMA dK/dV kernel, or the grouped one (DS_GROUPED, where the TMA dQ follows), and its shared
    memory."""
    if grouped:
        return f"attn_backward_dkdv_ds_tmarrg_{name}_hs{hs}", dkdv_tma_shared_bytes(hs)
    return f"attn_backward_dkdv_ds_tmarr_l2_{name}_hs{hs}", dkdv_tma_shared_bytes(hs)


def uses_wg_dkdv(ctx, hs: int) -> bool:
    return (USE_WG_DKDV and stores_ds(ctx, 0) and hs == 64 and runtime.built_for(FILE) == "sm_90a")


def stores_ds(ctx, T: int) -> bool:
    return USE_DS and ctx.half and ctx.half_roundings


def ds_shape(ctx, B: int, H: int, T: int, hs: int) -> tuple:
    """ds_t's shape: [B*H, T, ldq], ldq as gpu.ds_row_halves gives it for the dK/dV kernel that runs."""
    return (B * H, T, ds_row_halves(T, uses_wg_dkdv(ctx, hs)))


# dQ from the stored dS^T on a TMA producer and wgmma (attention.cu's attention_backward_dq_tma with QFAST,
# attn_backward_dq_ds_tmaqf_): the copy engine streams dS^T (a three-dimensional map of ds_t, key rows past T as zeros)
# and k, two consumer warpgroups of 64 queries make dQ on wgmma with both operands transposed from shared memory; the
# grid's x the query blocks, so that a head's query blocks run together and read the rows of its dS^T at about the same
# time. After the wgmma dK/dV kernel only (its 64 x 64 tiles are written whole). Fixed order; its kernel tests found
# the mma.sync dQ's bits in every case (88 in call 7 of results/h200-perf-20261203e; the query-blocks-fastest grid the
# heads-fastest one's in its 44, results/h200-perf-20261204d). Alone in CUDA graphs after the TMA dK/dV (the whole
# backward, ms a layer, bf16, call 6 of results/h200-perf-20261203e): nanogpt 0.1074 against 0.1067, gpt2-small 0.1522
# against 0.1572, gpt2-medium 0.2028 against 0.2067; the swapped grid x0.976 / x0.989 / x0.973 of the heads-fastest one
# (the twenty-eighth session). 1: at every T (the wgmma dK/dV kernel must run); 2: rows over WG_MAX_T (the GPT-2
# shapes) wherever the wgmma dK/dV kernel runs; 0: never. Its graph test (tests/test_graph_gpu.py, "tma_dq": whole runs
# with TR2_ATTN_DQ_TMA=1 against 0, the same bits eager and graph) passed in call 1 of results/h200-perf-20261203f; on
# (2) by default since the twentieth session.
DQ_TMA = kernel_switch("TR2_ATTN_DQ_TMA", 2, (0, 1, 2))
DQ_TMA_STAGES = kernel_define(FILE, "DQ_TMA_STAGES")


def dq_tma_runs(T: int, wg: bool) -> bool:
    """Whether dQ runs on the TMA producer for rows of T (DQ_TMA's 0, 1 and 2 above); wg: the wgmma dK/dV kernel
    runs (the TMA dQ reads ds_t as it writes it)."""
    if DQ_TMA == 1 and not wg:
        raise SwitchError("TR2_ATTN_DQ_TMA=1 reads ds_t as the wgmma dK/dV kernel writes it; allowed with it only "
                         "(head size 64, half roundings, a Hopper GPU, TR2_ATTN_WG_DKDV=1)")
    return DQ_TMA == 1 or (DQ_TMA == 2 and T > WG_MAX_T and wg)


def dq_tma_grid(T: int, BH: int) -> tuple:
    """The TMA dQ's grid for BH heads of rows of T (128 queries a block): the query blocks the grid's x."""
    return (-(-T // 128), BH)


def dq_tma_shared_bytes(hs: int) -> int:
    """attention_backward_dq_tma's dynamic shared memory: DQ_TMA_STAGES stages of a k box and two dS^T boxes (64 x hs
    halves each) and 1 KB to put them on a 1024-byte boundary."""
    return DQ_TMA_STAGES * 3 * 64 * hs * 2 + 1024


def dq_ds_kernel(ctx, hs: int) -> tuple:
    """(the dQ-from-dS kernel's name, queries a block of it)."""
    return f"attn_backward_dq_ds_l2_{build_name(ctx)}_hs{hs}", DQ_DS_QUERIES


def dq_ds_shared_bytes(queries: int) -> int:
    """attn_backward_dq_ds_l2_'s shared memory: two buffers of DSQ_KEYS rows of ds_t (a block's queries + 8 halves)
    and of k (72 halves)."""
    return 2 * DSQ_KEYS * (queries + 8 + 72) * 2


def row_dots_kernel(kind: str, hs: int, dout_ptr: int, out_ptr: int) -> str:
    """The row dots' kernel: with TR2_ATTN_ROW_DOTS_WIDE=1 (the default) the one reading a thread's elements in one
    load each where dO and out start on 16 bytes (fresh arrays do), else the loop of 2-byte loads; the same bits."""
    wide = ROW_DOTS_WIDE and dout_ptr % 16 == 0 and out_ptr % 16 == 0
    return f"attn_row_dots{'_wide' if wide else ''}_{kind}_hs{hs}"


def _row_dots(ctx, D, sync, kdout, saved, rows: int, T: int, H: int, kind: str, hs: int) -> None:
    """attn_row_dots: D of every row; with sync (an int32 array, or None) its ints zeroed for the kernel after it."""
    launch(FILE, row_dots_kernel(kind, hs, kdout.data.ptr, saved.out.data.ptr), -(-8 * rows // ROW_DOTS_THREADS),
           ROW_DOTS_THREADS,
           (D, NULL if sync is None else sync, i32(0 if sync is None else sync.size), kdout, saved.out, i32(rows),
            i32(T), i32(H), i32(ctx.round_kind)))


def dq_chain_runs(T: int, wg: bool) -> bool:
    """Whether the chained dQ kernel (DQ_CHAIN above) takes the backward of rows of T; wg: the wgmma dK/dV kernel runs
    (the chain is built on it)."""
    return wg and (DQ_CHAIN == 1 or (DQ_CHAIN == 2 and not dq_tma_runs(T, wg)))


def _backward_chained(ctx, dqkv, D, kdout, saved, B: int, T: int, H: int, C: int, hs: int, kind: str, name: str,
                      tail: tuple) -> "cp.ndarray":
    """DQ_CHAIN's backward: the row dots (zeroing the chain's counters), then attn_backward_dkdv_dqa_ (keys ascending;
    attn_backward_dkdv_dqc_, keys descending, where DQ_CHAIN_ASC is 0), which writes dQ, dK and dV; no ds_t."""
    nqt = -(-T // 64)
    turns = ctx.ws.get("att_dq_turns", (B * H * nqt,), np.int32)           # parts added so far, a head and tile
    # the running sums, a 64 x hs slot each: from the pool for this launch only, as ds_t is (every slot a turn reads was
    # written by an earlier turn of the same launch, so nothing needs zeroing), not a workspace kept between layers
    # (kept, it added its 25 MB to the char model's peak, results/h100-perf-20261207g)
    dq_acc = cp.empty((B * H * nqt, 64 * hs), dtype=np.float32)
    _row_dots(ctx, D, turns, kdout, saved, B * T * H, T, H, kind, hs)
    tq = _tma.encode(saved.qkv, B * T, 3 * C, ctx.dtype)
    tdo = _tma.encode(kdout, B * T, C, ctx.dtype)
    extra, grid = _resident(ctx, B * H, T, "att_dkdv_tickets")
    kernel = "dqa" if DQ_CHAIN_ASC else "dqc"
    launch(FILE, f"attn_backward_dkdv_{kernel}_{name}_hs{hs}", grid, 384,
           (dqkv, tq, tdo, saved.lse, D, dq_acc, turns, i32(T), i32(H)) + tail + extra,
           shared_mem=dkdv_chain_shared_bytes(hs), prefer_shared=True)
    return dqkv


def backward(ctx, dout: "cp.ndarray", qkv: "cp.ndarray", saved: AttentionSaved, n_head: int, p: float,
             seed: int, offset: int, offset_add=None) -> "cp.ndarray":
    B, T, C, hs = _shape(qkv, n_head)
    H = n_head
    D = ctx.ws.get("att_D", (B, H, T), np.float32)   # the row dots, read by dK/dV's kernel
    dqkv = cp.empty((B, T, 3 * C), dtype=ctx.out_dtype)
    kdout = _half(ctx, dout, ctx.ws.get("att_dout_half", dout.shape, np.uint16))
    tail = (i32(ctx.round_kind),) + _dropout_args(p, seed, offset, offset_add)   # the scale: attention.cu's Scale
    if stores_ds(ctx, T):
        kind = "bf16" if ctx.dtype == "bfloat16" else "f16"
        wg = uses_wg_dkdv(ctx, hs)
        dq_tma = dq_tma_runs(T, wg)
        name = build_name(ctx)
        if dq_chain_runs(T, wg):
            return _backward_chained(ctx, dqkv, D, kdout, saved, B, T, H, C, hs, kind, name, tail)
        ds_t = cp.empty(ds_shape(ctx, B, H, T, hs), dtype=np.uint16)
        ldq, rows = ds_t.shape[2], B * T * H
        _row_dots(ctx, D, None, kdout, saved, rows, T, H, kind, hs)
        if wg:
            if ldq % WG_DKDV_QUERY_TILE:   # the kernel stores its query tiles whole
                raise RuntimeError(f"attention: ds_t rows of {ldq} halves for the wgmma dK/dV kernel")
            tq = _tma.encode(saved.qkv, B * T, 3 * C, ctx.dtype)
            tdo = _tma.encode(kdout, B * T, C, ctx.dtype)
            extra, grid = _resident(ctx, B * H, T, "att_dkdv_tickets")
            kernel, nbytes = dkdv_tma_kernel(name, hs, grouped=DS_GROUPED and dq_tma)
            launch(FILE, kernel, grid, 384, (dqkv, tq, tdo, saved.lse, D, ds_t, i32(ldq), i32(T), i32(H)) + tail + extra,
                   shared_mem=nbytes, prefer_shared=True)
        else:
            launch(FILE, f"attn_backward_dkdv_ds_l2_{name}_hs{hs}", (B * H, -(-T // block_rows(ctx))), THREADS,
                   (dqkv, saved.qkv, kdout, saved.lse, D, ds_t, i32(ldq), i32(T), i32(H)) + tail,
                   shared_mem=shared_bytes(ctx, "backward"))   # the folded kernel's layout likewise
        if dq_tma:
            tds = _tma.encode(ds_t, T, ldq, ctx.dtype, planes=B * H)
            tq = _tma.encode(saved.qkv, B * T, 3 * C, ctx.dtype)
            dq_form = "tmaqn" if DS_GROUPED else "tmaqf"   # the heads newest first after the grouped dK/dV
            launch(FILE, f"attn_backward_dq_ds_{dq_form}_{name}_hs{hs}", dq_tma_grid(T, B * H), 384,
                   (dqkv, tds, tq, i32(T), i32(H), i32(ctx.round_kind)), shared_mem=dq_tma_shared_bytes(hs),
                   prefer_shared=True)
            return dqkv
        dq_name, queries = dq_ds_kernel(ctx, hs)
        launch(FILE, dq_name, (B * H, -(-T // queries)), THREADS,
               (dqkv, saved.qkv, ds_t, i32(ldq), i32(T), i32(H), i32(ctx.round_kind)),
               shared_mem=dq_ds_shared_bytes(queries))
        return dqkv
    if not folds(ctx, T):
        dq_args = (dqkv, saved.qkv, kdout, saved.lse, D, saved.out, i32(T), i32(H)) + tail
        if uses_f32_wg_dq(ctx, hs, T):
            _aligned16("the float32 wgmma dQ", dout=kdout, out=saved.out)
            launch(FILE, f"attn_backward_dq_wgf2_tf32_hs{hs}", (B * H, -(-T // 128)), 256, dq_args,
                   shared_mem=f32_wg_dq_shared_bytes(hs), prefer_shared=True)
        else:
            _launch(ctx, "backward_dq", hs, T, B * H, dq_args)
        args = (dqkv, saved.qkv, kdout, saved.lse, D, i32(T), i32(H)) + tail
        if uses_f32_wg_dkdv(ctx, hs, T):
            launch(FILE, f"attn_backward_dkdv_wgf2_tf32_hs{hs}", (B * H, -(-T // 128)), 256, args,
                   shared_mem=f32_wg_dkdv_shared_bytes(hs), prefer_shared=True)
        else:
            _launch(ctx, "backward_dkdv", hs, T, B * H, args)
        return dqkv
    n_tiles = -(-T // _geometry(ctx)["backward_dkdv"])
    sync = ctx.ws.get("att_sync", (B * H * n_tiles + 1,), np.int32)   # a counter a (head, query tile), a ticket
    dq_acc = ctx.ws.get("att_dq_acc", (B * H, T, hs), np.float32)     # dQ's key-block parts, summed in order
    kind = "bf16" if ctx.dtype == "bfloat16" else "f16"
    _row_dots(ctx, D, sync, kdout, saved, B * T * H, T, H, kind, hs)
    _launch(ctx, "backward", hs, T, B * H, (dqkv, saved.qkv, kdout, saved.lse, D, dq_acc, sync, i32(T), i32(H)) + tail)
    return dqkv
