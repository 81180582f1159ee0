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
from . import switch_given
from . import dropout as _dropout
from . import tma as _tma
from .cast import to_half
from . import runtime
from .runtime import NULL, i32, launch, u32

FILE = "attention.cu"
HEAD_SIZES = (32, 64)
THREADS = 128         # four warps
ROW_DOTS_THREADS = 256   # attn_row_dots: eight threads a row
# attention.cu's Geometry: m16 tiles a warp (a block owns 4 * 16 * mt rows), rows of each kernel's streamed tiles
GEOMETRY = attention_geometry()
_ROW_BYTES = {True: 72 * 2, False: 68 * 4}   # a staged row: half tiles, float32 tiles (padded)


class AttentionSaved:
    """What attention_forward hands to attention_backward (opaque to the model): its output and the
    per-row log-sum-exp of the scaled scores."""
    __slots__ = ("out", "lse", "qkv")

    def __init__(self, out, lse, qkv):
        self.out, self.lse, self.qkv = out, lse, qkv


def build_name(ctx) -> str:
    if not ctx.half:
        return "tf32" if ctx.tf32 else "f32"
    base = "bf16" if ctx.dtype == "bfloat16" else "f16"
    return base + ("r" if ctx.half_roundings else "")


def _geometry(ctx) -> dict:
    return GEOMETRY["half" if ctx.half else "float32"]


def block_rows(ctx) -> int:
    """Rows (queries, or keys in dK/dV) a block of each kernel owns."""
    return 4 * 16 * _geometry(ctx)["mt"]


def shared_bytes(ctx, kernel: str) -> int:
    """attention.cu's shared memory of one block: the block's own tiles, the streamed tiles in each staging
    buffer (two in the half builds, cp.async), and dK/dV's staged lse and D; the half builds' backward
    ("backward": dK/dV with dQ) also its dS^T, [rows][streamed + 8] halves, twice in the exact build."""
    geometry = "backward_dkdv" if kernel == "backward" else kernel
    rows, streamed, nbuf = block_rows(ctx), _geometry(ctx)[geometry], 2 if ctx.half else 1
    own = {"forward": 1, "backward_dq": 2, "backward_dkdv": 2}[geometry]
    extra = nbuf * 2 * streamed * 4 if geometry == "backward_dkdv" else 0
    if kernel == "backward":
        extra += rows * (streamed + 8) * 2 * (1 if ctx.half_roundings else 2)
    return (own * rows + nbuf * 2 * streamed) * _ROW_BYTES[ctx.half] + extra


def _launch(ctx, kernel: str, hs: int, T: int, BH: int, args, form: str = "") -> None:
    """attn_<kernel><form>_<build>_hs<hs>; form "3": the kernel compiled for three blocks an SM (FWD_BLOCKS)."""
    name = f"attn_{kernel}{form}_{build_name(ctx)}_hs{hs}"
    nbytes = shared_bytes(ctx, kernel)
    rows = block_rows(ctx)
    launch(FILE, name, (BH, (T + rows - 1) // rows), THREADS, args, shared_mem=nbytes,   # attention.cu: Grid
           prefer_shared=bool(form))


def _half(ctx, a, out=None):
    """What the kernels read: float32 in the float32 builds, half bits in the half builds (cast if need be)."""
    if not ctx.half or a.dtype == np.uint16:
        return a
    return to_half(a, ctx.kind, out=out)


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


# The pipelined wgmma forward (attention.cu's attention_forward_wgp): the next tile's scores in flight beside each
# Pd v product, its softmax while that product runs, a ring of FWD_WGP_STAGES k/v tiles loading ahead; the same
# arithmetic in the same order as attention_forward_wg, so the same bits (tests/test_kernels_gpu.py,
# "forward_pipelined"). On, it takes every T (WG_MAX_T no longer applies), one warpgroup a block for rows of at most
# 256, else two (TR2_ATTN_FWD_WGP_NWG=1 or 2 fixes it). Its test passed in call 1 of results/h200-perf-20261202b, and
# it is slower there (ms a layer alone, bf16): nanogpt wgp1 0.0568 against wg1's 0.0474, gpt2-small wgp2 0.0757 and
# gpt2-medium 0.0961 against mma.sync's 0.0651 and 0.0816: off. Found in the thirteenth session: ptxas had built that
# form with every wgmma serialized (C7520: the next tile's scores issued under a run-time condition), so the overlap
# it was written for never ran; its tile is now two constant-condition copies, built unserialized
# (tests/test_wgmma_serialization.py), NOT yet run on a GPU.
WG_FORWARD_PIPELINED = bool(kernel_switch("TR2_ATTN_FWD_WGP", 0))
WG_FORWARD_NWG = kernel_switch("TR2_ATTN_FWD_WGP_NWG", 0, (0, 1, 2))   # 0: wg_forward_warpgroups(T)
FWD_WGP_STAGES = kernel_define(FILE, "FWD_WGP_STAGES")
# The forward's two warpgroups in ping-pong (attention.cu's attention_forward_wg_pp, attn_forward_wgpp2_): turns to
# issue, a tile's Pd v with the next tile's scores in one group, three k/v buffers, no block barrier a tile; the
# same bits as attention_forward_wg (tests/test_kernels_gpu.py, "forward_pingpong"). On, rows over 256 take it (those
# of at most 256 keep attn_forward_wg1_). Its test passed in call 1 of results/h200-perf-20261202c, and it is slower
# there (ms a layer alone, bf16): gpt2-small 0.0805 and gpt2-medium 0.1021 against mma.sync's 0.0656 and 0.0832: off.
# As the pipelined forward's, that build had every wgmma serialized by ptxas (C7520); rewritten in the thirteenth
# session (constant-condition copies, each turn's products waited for at its end, one block an SM: 220 registers, no
# spill), built unserialized (tests/test_wgmma_serialization.py). Since timed alone in CUDA graphs (call 1 of
# results/h200-perf-20261203f): x1.32 / x1.68 / x1.71 of mma.sync (nanogpt / gpt2-small / gpt2-medium, bf16): off.
WG_FORWARD_PINGPONG = bool(kernel_switch("TR2_ATTN_FWD_PINGPONG", 0))
# The forward with a TMA producer (attention.cu's attention_forward_tma, attn_forward_tma_): one thread of a third
# warpgroup hands the q, k and v boxes to the copy engine in 128-byte-swizzled shared memory (gpu/tma.py's tensor map
# of qkv), the two consumer warpgroups wait on mbarriers instead of staging (FlashAttention-3's form, the ninth
# session's probe: 417 TFLOP/s for the products alone); attention_forward_wg's arithmetic, so the same bits
# (tests/test_kernels_gpu.py, "forward_tma"). On, every T takes it. Its 36 tests pass on the H200 (no hang, the wg
# forward's bits), and it is off: ms a layer alone, bf16, against mma.sync's: nanogpt 0.0943 against 0.0650,
# gpt2-small 0.0980 against 0.0658, gpt2-medium 0.0824 against 0.0829 (call 2 of results/h200-perf-20261202d).
# 2: the same with attention_forward_wgp's overlap in each consumer warpgroup (attn_forward_tmap_: tile kb + 1's
# scores in flight beside tile kb's Pd v, its softmax while that runs; the same bits, "forward_tma_pipelined"), 164
# registers, no spill, no wgmma serialized. Written in the thirteenth session after its device time; since timed
# alone in CUDA graphs (call 1 of results/h200-perf-20261203f): x0.93 / x1.00 / x1.02 of mma.sync: off.
# 3: 128-key tiles and setmaxnreg (attention.cu's attention_forward_tma with WIDE, attn_forward_tmaw_): the producer
# warpgroup down to 40 registers, the consumers up to 232; S by m64n128k16, each stage two k and two v boxes. Not the
# other forms' bits (maxima over 128 keys at a time): within the type's tolerance of the NumPy form, three runs the
# same bits ("forward_tma_wide"). Written in the eighteenth session; its tests passed in call 1 of
# results/h200-perf-20261203e, and FWD_TMA_LONG below gives it the rows over 256 by default.
# 4: the same with attention_forward_tma's PIPE schedule in each consumer (attn_forward_tmawp_: tile kb + 1's scores
# in flight beside tile kb's Pd v; form 3's bits, "forward_tma_wide").
# 5: form 3 with three stages of k and v in the ring (attn_forward_tmaw3_; form 3's bits, "forward_tma_wide").
# Written in the nineteenth session after its device time; its 36 cases passed in call 1 of
# results/h200-perf-20261203f, alone in graphs x1.025 / x1.017 of form 3 on gpt2-small / gpt2-medium: not used.
# 6: form 4 with its two consumers in ping-pong (attn_forward_tmawpp_: they take turns issuing their products, so
# that one's softmax runs under the other's; form 4's bits, hence form 3's, "forward_tma_wide"). Written in the
# twenty-first session after its device time: NOT run on a GPU (docs/perf.md, "Twenty-first session").
# 7: form 3 resident (attn_forward_tmawr_: one block an SM taking the heads' query blocks, the longest first, by
# tickets; the next block's q and first tiles load under this one's last products and epilogue; form 3's bits,
# "forward_tma_wide"). Written in the twenty-fourth session; the default for rows over 256 since (FWD_TMA_LONG).
# 8: form 7 with the two consumers taking turns at each tile's exponentials (attn_forward_tmawrt_: a named barrier
# before them and a hand-over after, where cuDNN's fprop has its own, results/h200-perf-20261204b call 1; each
# consumer's products still awaited one by one; form 7's bits, hence form 3's, "forward_tma_wide"). Written in the
# twenty-sixth session after its device time: NOT run on a GPU, off.
WG_FORWARD_TMA = kernel_switch("TR2_ATTN_FWD_TMA", 0, (0, 1, 2, 3, 4, 5, 6, 7, 8))
# The same forms for rows over WG_MAX_T only (the GPT-2 shapes), where WG_FORWARD_TMA is 0: the rows up to it keep the
# one-warpgroup wgmma forward. Measured alone in CUDA graphs (ms a layer, bf16, call 6 of results/h200-perf-20261203e):
# tmaw 0.0562 and 0.0731 against mma.sync's 0.0617 and 0.0783 on gpt2-small and gpt2-medium. Its graph test
# (tests/test_graph_gpu.py, "wide_tma_forward": graph = eager to the bit, forms 3 and 4) and the 36 kernel cases of
# form 5 passed in call 1 of results/h200-perf-20261203f; with the TMA dQ (DQ_TMA 2) the step went 16.46 -> 16.23 ms
# (gpt2-small bf16) and 42.82 -> 42.39 (gpt2-medium) in call 2 there, beside PyTorch's reduce-overhead. On (3) by
# default since the twentieth session; a form of the forward asked for otherwise (TR2_ATTN_FWD_WGP=1,
# TR2_ATTN_FWD_PINGPONG=1) wins over the default, over this switch set explicitly it is a clash (_launch_wg).
# Form 7 (tmawr, form 3 resident) since the twenty-fourth session: its 36 kernel cases gave form 3's bits and its
# graph replayed its eager loop to the bit; alone x0.872 / x0.859 of form 3 (0.0491 against 0.0563, 0.0629 against
# 0.0732 ms a layer on gpt2-small / gpt2-medium); the step, medians of three rounds, 16.387 -> 16.366 ms and 42.842
# -> 42.743 (results/h200-perf-20261203j, calls 5-8). The same bits as form 3, so no training number moves.
FWD_TMA_LONG = kernel_switch("TR2_ATTN_FWD_TMA_LONG", 7, (0, 1, 2, 3, 4, 5, 6, 7, 8))
FWD_TMA_LONG_ASKED = switch_given("TR2_ATTN_FWD_TMA_LONG")
FWD_TMA_STAGES = kernel_define(FILE, "FWD_TMA_STAGES")
FWD_TMAW_STAGES = kernel_define(FILE, "FWD_TMAW_STAGES")
TMA_FORMS = {1: "tma", 2: "tmap", 3: "tmaw", 4: "tmawp", 5: "tmaw3", 6: "tmawpp", 7: "tmawr", 8: "tmawrt"}
RESIDENT_FORMS = frozenset((7, 8))   # one block an SM, launched with the heads and a ticket pair (resident_grid)


# Blocks an SM the mma.sync forward is compiled for, under half roundings at head size 64: 2 (attn_forward_, 255
# registers) or 3 (attn_forward3_: 168 registers, spilling inside its loop; the same PTX, so the same bits: tests
# "forward_three_blocks" passed). Written in the fourteenth session after Nsight Compute's stall reasons
# (latency-bound at 8 warps an SM); measured slower (ms a layer alone, bf16, call 2 of results/h200-perf-20261202e):
# gpt2-small 0.0835 and gpt2-medium 0.1115 against 0.0657 and 0.0830: off.
FWD_BLOCKS = kernel_switch("TR2_ATTN_FWD_BLOCKS", 2, (2, 3))


def forward_tma_form(T: int) -> int:
    """The TMA forward's form that rows of T take (TMA_FORMS' keys), 0 for none: WG_FORWARD_TMA, else FWD_TMA_LONG
    for rows over WG_MAX_T (by default only where no other forward form is asked for)."""
    if WG_FORWARD_TMA or T <= WG_MAX_T:
        return WG_FORWARD_TMA
    if not FWD_TMA_LONG_ASKED and (WG_FORWARD_PIPELINED or WG_FORWARD_PINGPONG):
        return 0
    return FWD_TMA_LONG


def uses_wgmma(ctx, hs: int, T: int) -> bool:
    return (USE_WGMMA and ctx.half and ctx.half_roundings and hs == 64
            and (T <= WG_MAX_T or WG_FORWARD_PIPELINED or WG_FORWARD_PINGPONG or forward_tma_form(T))
            and runtime.built_for(FILE) == "sm_90a")


def wg_forward_warpgroups(T: int) -> int:
    return WG_FORWARD_NWG or (1 if T <= 256 else 2)


def wgp_shared_bytes(hs: int, nwg: int) -> int:
    """attention_forward_wgp's shared memory: the ring of FWD_WGP_STAGES k and v tiles and the block's q, 64 x hs
    halves each (64 queries a warpgroup)."""
    return (2 * FWD_WGP_STAGES + nwg) * 64 * hs * 2


def wgpp_shared_bytes(hs: int) -> int:
    """attention_forward_wg_pp's shared memory: three k and v tile pairs and the block's q of two warpgroups, 64 x hs
    halves each."""
    return (2 * 3 + 2) * 64 * hs * 2


def tma_shared_bytes(hs: int, form: int = 1) -> int:
    """attention_forward_tma's dynamic shared memory: the two consumers' q boxes and FWD_TMA_STAGES k and v pairs,
    64 x hs halves each, and 1 KB to put the first on a 1024-byte boundary (the 128B swizzle's period); forms 3 and 4
    (attention_forward_tma with WIDE) and 6: FWD_TMAW_STAGES stages of two k and two v boxes; form 5: three such
    stages; forms 7 and 8 (resident): form 3's stages and two buffers of the two q boxes."""
    stages = 4 * FWD_TMAW_STAGES if form in (3, 4, 6, 7, 8) else (4 * 3 if form == 5 else 2 * FWD_TMA_STAGES)
    q_boxes = 4 if form in RESIDENT_FORMS else 2   # the resident form's two q buffers
    return (q_boxes + stages) * 64 * hs * 2 + 1024


def resident_grid(BH: int, T: int, sms: int) -> int:
    """A resident form's blocks: one an SM, or one a work item (a head's 128 queries, or 128 keys for the dK/dV
    kernel's form 5) where there are fewer."""
    return max(1, min(int(sms), BH * -(-T // 128)))


def _resident(ctx, BH: int, T: int, tickets: str, per_sm: int = 1) -> tuple:
    """A resident kernel's extra arguments (the heads, and its ticket pair: two ints the kernel leaves at zero, zeroed
    once here, before any capture) and its grid (per_sm blocks an SM, or one a work item)."""
    sms = per_sm * runtime.sm_count(cp.cuda.Device().id)
    return (i32(BH), ctx.ws.zeros(tickets, (2,), np.int32)), (resident_grid(BH, T, sms),)


def _launch_wg(ctx, T: int, hs: int, BH: int, name: str, args) -> None:
    strides = (u32(V_STRIDES[0]), u32(V_STRIDES[1]))
    form = forward_tma_form(T)
    if sum(map(bool, (WG_FORWARD_PIPELINED, WG_FORWARD_PINGPONG, form))) > 1:
        raise SwitchError("TR2_ATTN_FWD_WGP=1, TR2_ATTN_FWD_PINGPONG=1 and TR2_ATTN_FWD_TMA=1 to 8 (or "
                         "TR2_ATTN_FWD_TMA_LONG on rows over 256): allowed is one at most")
    if form:
        qkv = args[2]
        rows, cols = qkv.size // qkv.shape[-1], qkv.shape[-1]
        tmap = _tma.encode(qkv, rows, cols, ctx.dtype)   # in qkv's place; no v strides (the boxes are swizzled)
        targs, grid = args[:2] + (tmap,) + args[3:], (BH, -(-T // 128))
        if form in RESIDENT_FORMS:
            extra, grid = _resident(ctx, BH, T, "att_fwd_tickets")
            targs += extra
        launch(FILE, f"attn_forward_{TMA_FORMS[form]}_{name}_hs{hs}", grid, 384, targs,
               shared_mem=tma_shared_bytes(hs, form), prefer_shared=True)
        return
    if WG_FORWARD_PINGPONG and wg_forward_warpgroups(T) == 2:
        launch(FILE, f"attn_forward_wgpp2_{name}_hs{hs}", (BH, -(-T // 128)), 256, args + strides,
               shared_mem=wgpp_shared_bytes(hs), prefer_shared=True)
        return
    if WG_FORWARD_PIPELINED:
        nwg = wg_forward_warpgroups(T)
        launch(FILE, f"attn_forward_wgp{nwg}_{name}_hs{hs}", (BH, -(-T // (64 * nwg))), 128 * nwg, args + strides,
               shared_mem=wgp_shared_bytes(hs, nwg), prefer_shared=True)
        return
    rows = 64   # one warpgroup a block: attention.cu instantiates attention_forward_wg in that form only
    launch(FILE, f"attn_forward_wg1_{name}_hs{hs}", (BH, -(-T // rows)), 128, args + strides,
           shared_mem=(rows + 4 * 64) * hs * 2, prefer_shared=True)


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
    else:
        three = FWD_BLOCKS == 3 and ctx.half and ctx.half_roundings and hs == 64   # attention.cu builds those only
        _launch(ctx, "forward", hs, T, B * H, args, "3" if three else "")
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
USE_DS = True
DSQ_KEYS = kernel_define(FILE, "DSQ_KEYS")   # the keys of ds_t and k a block of attn_backward_dq_ds_ stages at a time
# Queries a block of the dQ-from-dS kernel: 128 (attn_backward_dq_ds_) or 64 (attn_backward_dq_ds_q64_: a head's
# heaviest block half as heavy, twice the blocks, k staged twice as often; attention.cu's comment weighs them).
# Both give dQ the same bits (each element sums the same slices in the same order). 128 until 64 is measured
# faster (scripts/attention_backward_variants.py's ds64): the 128-query kernel's L2 was 81% busy (call 3 of
# results/h200-perf-20261201f), and 64 adds k reads there (gpt2-small: ~47 MB a layer, L2 hits) to fill its tail.
DQ_DS_QUERIES = kernel_switch("TR2_ATTN_DQ_DS_QUERIES", 128, (128, 64))   # the environment's for a bench variant
# The _l2 forms of the two dS kernels (attn_backward_dkdv_ds_l2_, attn_backward_dq_ds_l2_ / _q64_l2_): ds_t's
# stores and loads marked evict-first in L2, the same bits (tests/test_kernels_gpu.py, "evict_first"). ~100 MB of
# ds_t a layer (gpt2-small, against the 50 MB L2) evicted the tiles the dK/dV kernel rereads and the dqkv the c_attn
# backward products read next. On since the ninth session: medians of 3 runs against the plain forms, one H200,
# bf16, graph (results/h200-perf-20261201h, calls 1-2): nanogpt 4.611 -> 4.612 ms a step, gpt2-small 17.252 ->
# 17.173, gpt2-medium 44.876 -> 44.784. TR2_ATTN_DS_EVICT_FIRST=0 gives the plain forms (a bench variant).
DS_EVICT_FIRST = bool(kernel_switch("TR2_ATTN_DS_EVICT_FIRST", 1))


# dK/dV with dS stored on warpgroup MMA (attention.cu's attention_backward_dkdv_wg): the half builds under half
# roundings, head size 64, where attention.cu was built for sm_90a; ds_t's rows padded to a multiple of 64 queries.
# The same bits as the mma.sync kernel at every shape tested (tests/test_kernels_gpu.py, "dkdv_on_wgmma"). Measured
# alone (the backward, call 3 of results/h200-perf-20261201h, against the mma.sync form): nanogpt x0.92 with one
# warpgroup a block (x1.06 with two), gpt2-small x0.96 with two (x1.01 with one), gpt2-medium x0.97 with two (x1.02
# with one); hence warpgroups(T): one for rows of at most 256, else two (64 keys each, sharing the query tiles).
# TR2_ATTN_WG_DKDV=0 gives the mma.sync kernel, TR2_ATTN_WG_DKDV_NWG=1 or 2 fixes the warpgroups (bench variants).
USE_WG_DKDV = bool(kernel_switch("TR2_ATTN_WG_DKDV", 1))
WG_DKDV_WARPGROUPS = kernel_switch("TR2_ATTN_WG_DKDV_NWG", 0, (0, 1, 2))   # 0: warpgroups(T)
# The OVERLAP form (attention.cu: P^T's exponentials while dPd^T's products run, ds_t's stores while dV's and dK's
# run; the same bits), built with the evict-first ds_t traffic only. Its tests pass (tests/test_kernels_gpu.py,
# "dkdv_on_wgmma", 88 cases) but it is slower (call 1 of results/h200-perf-20261202, ms a layer alone against the
# plain wgmma form: nanogpt 0.1273 / 0.1256, gpt2-small 0.2216 / 0.2030, gpt2-medium 0.2826 / 0.2589): off.
WG_DKDV_OVERLAP = bool(kernel_switch("TR2_ATTN_WG_DKDV_OVERLAP", 0))
# The DIN form (attention.cu's attn_backward_dkdv_ds_wg<NWG>d_l2_): each warpgroup computes its tile's row dots D
# itself from the staged dO tile and out while S^T's and dPd^T's products run (row_dots_tile: attn_row_dots's
# arithmetic, so the same bits), and attn_row_dots is not launched (9-10 us a layer of nanogpt and gpt2-small,
# call 2 of results/h200-perf-20261202). Built with the evict-first ds_t traffic only. Its test ("dkdv_row_dots")
# passed in call 1 of results/h200-perf-20261202b, and it is far slower (each key block recomputes D for every query
# tile it visits; ms a layer alone: gpt2-small wg2d 0.3276 against wg2's 0.2017, nanogpt wg1d 0.1533 against wg1's
# 0.1303): off.
WG_DKDV_ROW_DOTS = bool(kernel_switch("TR2_ATTN_WG_DKDV_ROW_DOTS", 0))
# The ping-pong form (attention.cu's attn_backward_dkdv_ds_wg2p_l2_, two warpgroups a block): each warpgroup issues
# a tile's dV and dK with the next tile's S^T and dPd^T in one group and runs its softmax gradient while the other's
# group runs, the two taking turns to issue; three q/dO buffers, no block-wide barrier a tile. The same arithmetic,
# so the same bits (tests/test_kernels_gpu.py, "dkdv_pingpong"). Where two warpgroups run (rows over 256, or
# TR2_ATTN_WG_DKDV_NWG=2). Its test passed in call 1 of results/h200-perf-20261202c, and it is slower there (the whole
# backward, ms a layer alone, bf16): gpt2-small wg2p 0.2533 and gpt2-medium 0.3253 against wg2's 0.2084 and 0.2657:
# off. That build had every wgmma serialized by ptxas (C7520); rewritten in the thirteenth session (constant-condition
# copies, each turn's products waited for at its end, the first tile's S^T and dPd^T issued even where no query of it
# sees the block's keys), built unserialized with no spill (tests/test_wgmma_serialization.py), NOT yet run on a GPU.
WG_DKDV_PINGPONG = bool(kernel_switch("TR2_ATTN_WG_DKDV_PINGPONG", 0))
# Blocks an SM the one-warpgroup form is compiled for: 2 (attn_backward_dkdv_ds_wg1_l2_, 255 registers) or 3
# (attn_backward_dkdv_ds_wg1t_l2_: 168 registers, spilling inside its loop; the same PTX, so the same bits: tests
# "dkdv_three_blocks" passed). Where one warpgroup runs (rows of at most 256, or TR2_ATTN_WG_DKDV_NWG=1), evict-first
# ds_t, neither OVERLAP nor DIN. Measured (the whole backward alone, bf16, call 2 of results/h200-perf-20261202e):
# nanogpt 0.1338 against 0.1326 ms a layer; with one warpgroup on gpt2-small 0.2578 against wg2's 0.2070: off.
WG_DKDV_BLOCKS = kernel_switch("TR2_ATTN_WG_DKDV_BLOCKS", 2, (2, 3))
# The TMA form (attention.cu's attention_backward_dkdv_tma, attn_backward_dkdv_ds_tma_l2_): a producer warpgroup hands
# the q and dO tiles to the copy engine (tensor maps of qkv and dO) and gives its registers to two consumer
# warpgroups of 64 keys each (setmaxnreg 24 / 240), which run apart on mbarriers instead of meeting at a block barrier
# every tile; the two-warpgroup form's arithmetic, so its bits ("dkdv_tma"). On, every T takes it (128 keys a block),
# with evict-first dS^T stores and none of the forms above. Its tests ("dkdv_tma", 44 cases) passed in call 1 of
# results/h200-perf-20261203e. The whole backward alone (bf16, ms a layer, each form's calls in a CUDA graph, call 6
# there): nanogpt 0.1067 against wg1's 0.1151, gpt2-small 0.1572 against wg2's 0.1954, gpt2-medium 0.2067 against
# 0.2521. (Timed back to back without a graph, call 1, nanogpt read 0.1824 against 0.1279: the host, encoding two
# tensor maps a call, fell behind the GPU.) The default 2 takes it wherever the wgmma dK/dV runs and no other form is
# asked for (TR2_ATTN_WG_DKDV_NWG, _OVERLAP, _ROW_DOTS, _PINGPONG, _BLOCKS=3, TR2_ATTN_DS_EVICT_FIRST=0); 1 takes it
# always (those switches then stop the run), 0 never.
WG_DKDV_TMA = kernel_switch("TR2_ATTN_WG_DKDV_TMA", 2, (0, 1, 2))
DKDV_TMA_STAGES = kernel_define(FILE, "DKDV_TMA_STAGES")
# The TMA dK/dV kernel's form (attention.cu, before attention_backward_dkdv_tma; written in the nineteenth session
# after its device time, run in the twentieth: below): 0 the plain one (attn_backward_dkdv_ds_tma_l2_), 1 three stages (tma3),
# 2 each tile's dV and dK products issued with the next tile's S^T and dPd^T and waited for once (tmad), 3 both
# (tmad3), 4 the row dots D made by the producer warpgroup's idle warps from the dO boxes, attn_row_dots not launched
# (tmar). The same operations in the same order: the plain form's bits (tests/test_kernels_gpu.py,
# "dkdv_tma_forms"). ptxas (NVRTC 12.9): 168 registers each; spills 8 / 16 / 72 / 68 / 56 bytes (the deferred forms
# hold the next tile's scores beside the A fragments and dK/dV: about 20 local loads a tile, against 3).
# Run in the twentieth session (call 1 of results/h200-perf-20261203f): 176 cases passed, each form the plain one's
# bits; the whole backward alone in graphs (ms a layer, bf16, nanogpt / gpt2-small / gpt2-medium) tma 0.1062 / 0.1579 /
# 0.2063, tma3 0.1065 / 0.1535 / 0.1992, tmad 0.1198 / 0.1911 / 0.2505, tmad3 0.1164 / 0.1741 / 0.2243, tmar 0.1752 /
# 0.3746 / 0.5213. In the step (call 2) tma3 moved nothing past the rounds' spread (gpt2-small 16.26 against 16.23
# ms): all stay off, 0 the default.
# 5: the plain form resident (attention.cu's attention_backward_dkdv_tma_resident, attn_backward_dkdv_ds_tmarr_l2_):
# one block an SM taking the heads' key blocks by tickets, as the forward's form 7; two k and v buffers, so the next
# key block's load under this one's last tiles. The plain form's bits ("dkdv_tma_forms"). ptxas: 168 registers, no
# spill. Written in the twenty-fourth session; run in the twenty-fifth (results/h200-perf-20261204): its 88 kernel
# cases (with the dQ resident's) and its whole-run graph test passed, the plain form's bits; the whole backward alone
# in graphs with the TMA dQ (ms a layer, bf16, call 1) 0.1009 / 0.1478 / 0.1975 against 0.1074 / 0.1521 / 0.2027
# (x0.939 / x0.972 / x0.974, nanogpt / gpt2-small / gpt2-medium); the step (graph, medians of rounds beside PyTorch's
# reduce-overhead, calls 2-3) 4.28 -> 4.24 ms (3 rounds, each below the plain form's), 16.26 -> 16.26, 42.47 -> 42.39
# (2 rounds). On (5) by default since; 0 takes the plain form.
# (A sixth form, dQ folded into the plain form by ordered reductions, was correct and slower: the backward alone
# x1.461 of the default on gpt2-small, results/h200-perf-20261205. Removed; docs/perf.md, "The folded dQ removed".)
DKDV_TMA_FORM = kernel_switch("TR2_ATTN_DKDV_TMA_FORM", 5, (0, 1, 2, 3, 4, 5))
DKDV_TMA_FORMS = {0: ("tma", DKDV_TMA_STAGES), 1: ("tma3", 3), 2: ("tmad", DKDV_TMA_STAGES), 3: ("tmad3", 3),
                  4: ("tmar", DKDV_TMA_STAGES), 5: ("tmarr", DKDV_TMA_STAGES)}
DKDV_RESIDENT_FORMS = frozenset((5,))


def dkdv_tma_shared_bytes(hs: int, stages: int = DKDV_TMA_STAGES, resident: bool = False) -> int:
    """attention_backward_dkdv_tma's dynamic shared memory: k and v of the block's 128 keys (four 64 x hs boxes; the
    resident form two such buffers), `stages` stages of a q and a dO box and their lse and D rows (64 floats each),
    each consumer warp's 16 rows of dS^T (72 halves), and 1 KB to put the boxes on a 1024-byte boundary (the 128B
    swizzle's period)."""
    box = 64 * hs * 2
    return (8 if resident else 4) * box + stages * (2 * box + 2 * 64 * 4) + 8 * 16 * 72 * 2 + 1024


def dkdv_tma_runs(T: int, din: bool) -> bool:
    """Whether the wgmma dK/dV kernel runs on the TMA producer (WG_DKDV_TMA's 0, 1 and 2 above); din: the DIN form
    is asked for."""
    if WG_DKDV_TMA == 2:
        return (WG_DKDV_WARPGROUPS == 0 and DS_EVICT_FIRST and WG_DKDV_BLOCKS == 2
                and not (WG_DKDV_OVERLAP or din or WG_DKDV_PINGPONG))
    return bool(WG_DKDV_TMA)


def uses_wg_dkdv(ctx, hs: int) -> bool:
    return (USE_WG_DKDV and stores_ds(ctx, 0) and hs == 64 and runtime.built_for(FILE) == "sm_90a")


def wg_dkdv_warpgroups(T: int) -> int:
    return WG_DKDV_WARPGROUPS or (1 if T <= 256 else 2)


def wg_dkdv_shared_bytes(hs: int, nwg: int, row_dots: bool = False, buffers: int = 2) -> int:
    """attention_backward_dkdv_wg's shared memory: k and v of the block's keys, `buffers` buffers (two; the
    ping-pong form three) of a q and a dO tile (64 x hs halves each) and of their lse and D (64 floats each), and
    each warp's 16 rows of dS^T (72 halves); with row_dots (the DIN form) also each warpgroup's D of its tile."""
    return (2 * 64 * nwg * hs * 2 + buffers * 2 * 64 * hs * 2 + buffers * 2 * 64 * 4 + 4 * nwg * 16 * 72 * 2
            + (nwg * 64 * 4 if row_dots else 0))


def _ds_form() -> str:
    return "l2_" if DS_EVICT_FIRST else ""


def stores_ds(ctx, T: int) -> bool:
    return USE_DS and ctx.half and ctx.half_roundings


def ds_shape(ctx, B: int, H: int, T: int, hs: int) -> tuple:
    """ds_t's shape: [B*H, T, ldq], ldq as gpu.ds_row_halves gives it for the dK/dV kernel that runs."""
    return (B * H, T, ds_row_halves(T, uses_wg_dkdv(ctx, hs)))


# dQ from the stored dS^T on a TMA producer and wgmma (attention.cu's attention_backward_dq_tma,
# attn_backward_dq_ds_tma_): the copy engine streams dS^T (a three-dimensional map of ds_t, key rows past T as zeros)
# and k, two consumer warpgroups of 64 queries make dQ on wgmma with both operands transposed from shared memory. After
# the wgmma dK/dV kernels only (their 64 x 64 tiles are written whole). Fixed order; the mma.sync dQ's bits only if the
# tensor cores round both alike ("dq_tma" records it). Written in the eighteenth session after its device time: NOT
# run on a GPU.
# Its kernel tests (88 cases) passed in call 7 of results/h200-perf-20261203e, every case with the mma.sync dQ's bits.
# Alone in CUDA graphs after the TMA dK/dV (the whole backward, ms a layer, bf16, call 6 there): nanogpt 0.1074 against
# 0.1067, gpt2-small 0.1522 against 0.1572, gpt2-medium 0.2028 against 0.2067. 1: at every T (the wgmma dK/dV kernels
# must run); 2: rows over WG_MAX_T (the GPT-2 shapes) wherever the wgmma dK/dV kernels run; 0: never. Its graph test
# (tests/test_graph_gpu.py, "tma_dq": whole runs with TR2_ATTN_DQ_TMA=1 against 0, gpt2-small bf16 and nanogpt f16,
# the same bits eager and graph) passed in call 1 of results/h200-perf-20261203f; on (2) by default since the
# twentieth session (the step: FWD_TMA_LONG above).
DQ_TMA = kernel_switch("TR2_ATTN_DQ_TMA", 2, (0, 1, 2))
DQ_TMA_STAGES = kernel_define(FILE, "DQ_TMA_STAGES")
# Where the TMA dQ runs, its resident form (attention.cu's attention_backward_dq_tma_resident, attn_backward_dq_ds_tmar_:
# blocks taking the heads' query blocks by tickets, each stage of the ring tagged with its item, so the next item's
# first steps load under this one's last; the plain kernel's bits, "dq_tma"). The plain kernel already holds two
# blocks an SM (58 registers, 97 KB of shared memory), so the resident one launches two an SM too (DQ_RESIDENT_PER_SM).
# Written in the twenty-fourth session; run in the twenty-fifth: its kernel cases and graph test passed (the plain
# kernel's bits), but alone it lost (the whole backward, ms a layer, bf16, call 1 of results/h200-perf-20261204:
# tmaqr 0.1547 / 0.2062 against tmaq's 0.1521 / 0.2027 on gpt2-small / gpt2-medium; tmarrqr against tmarrq alike):
# off. The second block an SM already covered the block changes.
DQ_TMA_RESIDENT = bool(kernel_switch("TR2_ATTN_DQ_TMA_RESIDENT", 0))
DQ_RESIDENT_PER_SM = 2
# The plain TMA dQ's grid order: 0 the heads fastest (grid (BH, query blocks), attn_backward_dq_ds_tma_), 1 the query
# blocks fastest (grid (query blocks, BH), attn_backward_dq_ds_tmaqf_: a head's query blocks run together and read
# the rows of its dS^T at about the same time; the same bits). Why: the pass waits on its dS^T loads, DRAM-bound
# (its source view, call 1 of results/h200-perf-20261204c). Written in the twenty-seventh session; run in the
# twenty-eighth (results/h200-perf-20261204d): its 44 kernel cases the plain kernel's bits; the backward alone (ms a
# layer, bf16) x0.976 / x0.989 / x0.973 of the heads-fastest grid on nanogpt / gpt2-small / gpt2-medium (call 1); the
# step, both rounds faster (gpt2-medium 41.79 -> 41.70 ms, call 2): on (1). The resident form takes items by tickets
# and ignores it.
DQ_TMA_ORDER = kernel_switch("TR2_ATTN_DQ_TMA_ORDER", 1)
# dK/dV and dQ a group of whole batches at a time (the TMA kernels of both, as they are, launched on the group's rows:
# dK/dV of group 0, its dQ, dK/dV of group 1, ...; ds_t holds one group's planes and is written again by the next).
# Why: the dQ pass is DRAM-bound on its dS^T reads (call 1 of results/h200-perf-20261204d, gpt2-small bf16: 38.9 us
# a layer at 3.48 TB/s, 72% of the DRAM's peak, L2 hit rate 27%); a layer's dS^T (about T^2 bytes a head, 100 MB on
# gpt2-small) is twice the L2, so the whole launch's dQ reads it back from DRAM. A group whose planes fit in the L2
# is read back from there, and the dS^T buffer shrinks to one group's. The same bits by construction: every kernel
# computes each head as before; the dropout counters of a group's heads are shifted to where the whole launch draws
# them (offset + b0 H T^2 / 2, exact where that is an integer; ds_groups falls back to one group elsewhere).
# DS_GROUP_BATCHES batches a group, 0 all at once (one group). Written in the twenty-eighth session after its device
# time: NOT run on a GPU, off (0).
DS_GROUP_BATCHES = kernel_switch("TR2_ATTN_DS_GROUP_BATCHES", 0, tuple(range(0, 65)))


def ds_groups(B: int, H: int, T: int, p: float, batches: int) -> list:
    """The (first, end) batches of each group the TMA backward runs at a time: `batches` a group, one group of all B
    where batches is 0 or at least B, or where the dropout counters cannot be shifted to a group's first head exactly
    (p > 0 with H T^2 odd: the kernels draw counter offset + ((bh T + i) T + j) // 2)."""
    if batches < 0:
        raise ValueError(f"ds_groups: batches = {batches}; 0 (all at once) or more")
    if batches == 0 or batches >= B or (p > 0.0 and (H * T * T) % 2):
        return [(0, B)]
    return [(b, min(b + batches, B)) for b in range(0, B, batches)]


def dq_tma_runs(T: int, wg: bool) -> bool:
    """Whether dQ runs on the TMA producer for rows of T (DQ_TMA's 0, 1 and 2 above); wg: the wgmma dK/dV kernels
    run (the TMA dQ reads ds_t as they write it)."""
    if DQ_TMA == 1 and not wg:
        raise SwitchError("TR2_ATTN_DQ_TMA=1 reads ds_t as the wgmma dK/dV kernels write it; allowed with them only "
                         "(head size 64, half roundings, a Hopper GPU, TR2_ATTN_WG_DKDV=1)")
    return DQ_TMA == 1 or (DQ_TMA == 2 and T > WG_MAX_T and wg)


def dq_tma_grid(T: int, BH: int) -> tuple:
    """The plain TMA dQ's grid and kernel form for BH heads of rows of T (128 queries a block), in DQ_TMA_ORDER."""
    blocks = -(-T // 128)
    return ((blocks, BH), "tmaqf") if DQ_TMA_ORDER == 1 else ((BH, blocks), "tma")


def dq_tma_shared_bytes(hs: int) -> int:
    """attention_backward_dq_tma's dynamic shared memory: DQ_TMA_STAGES stages of a k box and two dS^T boxes (64 x hs
    halves each) and 1 KB to put them on a 1024-byte boundary."""
    return DQ_TMA_STAGES * 3 * 64 * hs * 2 + 1024


def dq_ds_kernel(ctx, hs: int) -> tuple:
    """(the dQ-from-dS kernel's name, queries a block of it), as DQ_DS_QUERIES picks."""
    if DQ_DS_QUERIES not in (128, 64):
        raise ValueError(f"DQ_DS_QUERIES = {DQ_DS_QUERIES}: 128 or 64")
    form = ("q64_" if DQ_DS_QUERIES == 64 else "") + _ds_form()
    return f"attn_backward_dq_ds_{form}{build_name(ctx)}_hs{hs}", DQ_DS_QUERIES


def dq_ds_shared_bytes(queries: int) -> int:
    """attn_backward_dq_ds_'s shared memory: two buffers of DSQ_KEYS rows of ds_t (a block's queries + 8 halves)
    and of k (72 halves)."""
    return 2 * DSQ_KEYS * (queries + 8 + 72) * 2


def _launch_dkdv_wg(ctx, hs: int, T: int, BH: int, name: str, args: tuple, din: bool, saved) -> None:
    """attention_backward_dkdv_wg in the form the switches above pick (warpgroups, overlap, row dots, ping-pong,
    three blocks an SM)."""
    nwg, o = wg_dkdv_warpgroups(T), "o" if WG_DKDV_OVERLAP else ("d" if din else "")
    pp = WG_DKDV_PINGPONG and nwg == 2
    if pp and (WG_DKDV_OVERLAP or din or not DS_EVICT_FIRST):   # attention.cu builds it alone, evict-first
        raise SwitchError("TR2_ATTN_WG_DKDV_PINGPONG=1 needs TR2_ATTN_DS_EVICT_FIRST=1 and neither "
                         "TR2_ATTN_WG_DKDV_OVERLAP=1 nor TR2_ATTN_WG_DKDV_ROW_DOTS=1")
    three = WG_DKDV_BLOCKS == 3 and nwg == 1
    if three and (WG_DKDV_OVERLAP or din or not DS_EVICT_FIRST):   # attention.cu builds it plain, evict-first
        raise SwitchError("TR2_ATTN_WG_DKDV_BLOCKS=3 needs TR2_ATTN_DS_EVICT_FIRST=1 and neither "
                         "TR2_ATTN_WG_DKDV_OVERLAP=1 nor TR2_ATTN_WG_DKDV_ROW_DOTS=1")
    o = "p" if pp else ("t" if three else o)
    launch(FILE, f"attn_backward_dkdv_ds_wg{nwg}{o}_{_ds_form()}{name}_hs{hs}", (BH, -(-T // (64 * nwg))),
           128 * nwg, args + (u32(V_STRIDES[0]), u32(V_STRIDES[1])) + ((saved.out,) if din else ()),
           shared_mem=wg_dkdv_shared_bytes(hs, nwg, din, 3 if pp else 2), prefer_shared=True)


def _dq_tma(ctx, dqkv, ds_t, qkv, T: int, H: int, C: int, ldq: int, hs: int, name: str) -> None:
    """dQ from the stored dS^T on the TMA producer (its plain or resident form) for the batches of dqkv and qkv (all
    of them, or one group of DS_GROUP_BATCHES), ds_t holding their heads' planes."""
    Bg = dqkv.shape[0]
    BH = Bg * H
    tds = _tma.encode(ds_t[:BH], T, ldq, ctx.dtype, planes=BH)
    tq = _tma.encode(qkv, Bg * T, 3 * C, ctx.dtype)
    qargs = (dqkv, tds, tq, i32(T), i32(H), i32(ctx.round_kind))
    grid, kernel = dq_tma_grid(T, BH)
    if DQ_TMA_RESIDENT:
        extra, grid = _resident(ctx, BH, T, "att_dq_tickets", DQ_RESIDENT_PER_SM)
        qargs, kernel = qargs + extra, "tmar"
    launch(FILE, f"attn_backward_dq_ds_{kernel}_{name}_hs{hs}", grid, 384, qargs,
           shared_mem=dq_tma_shared_bytes(hs), prefer_shared=True)


def check_tma_dkdv_switches(asked: str) -> None:
    """The TMA dK/dV kernels are built evict-first and without the wgmma kernel's other forms: `asked` (the setting
    that selected one) is refused beside a switch they do not have."""
    if (WG_DKDV_OVERLAP or WG_DKDV_ROW_DOTS or WG_DKDV_PINGPONG or not DS_EVICT_FIRST
            or (WG_DKDV_BLOCKS == 3 and WG_DKDV_TMA == 1)):
        raise ValueError(f"{asked} needs TR2_ATTN_DS_EVICT_FIRST=1 and none of TR2_ATTN_WG_DKDV_OVERLAP=1, "
                         "TR2_ATTN_WG_DKDV_ROW_DOTS=1, TR2_ATTN_WG_DKDV_PINGPONG=1, TR2_ATTN_WG_DKDV_BLOCKS=3")


def _row_dots(ctx, D, sync, kdout, saved, rows: int, T: int, H: int, kind: str, hs: int) -> None:
    """attn_row_dots: D of every row; with sync (an int32 array, or None) its ints zeroed for the kernel after it."""
    launch(FILE, f"attn_row_dots_{kind}_hs{hs}", -(-8 * rows // ROW_DOTS_THREADS), ROW_DOTS_THREADS,
           (D, NULL if sync is None else sync, i32(0 if sync is None else sync.size), kdout, saved.out, i32(rows),
            i32(T), i32(H), i32(ctx.round_kind)))


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
        din = wg and WG_DKDV_ROW_DOTS   # the dK/dV kernel computes D itself
        tma_dkdv = wg and dkdv_tma_runs(T, din)
        pd = tma_dkdv and DKDV_TMA_FORM == 4   # the TMA kernel's producer warps compute D
        dq_tma = dq_tma_runs(T, wg)
        groups = ds_groups(B, H, T, p, DS_GROUP_BATCHES if tma_dkdv and dq_tma else 0)
        ds_t = cp.empty(ds_shape(ctx, groups[0][1] - groups[0][0], H, T, hs), dtype=np.uint16)   # one group's
        ldq, rows = ds_t.shape[2], B * T * H
        if not (din or pd):
            _row_dots(ctx, D, None, kdout, saved, rows, T, H, kind, hs)
        name, args = build_name(ctx), (dqkv, saved.qkv, kdout, saved.lse, D, ds_t, i32(ldq), i32(T), i32(H)) + tail
        if wg:
            if ldq % WG_DKDV_QUERY_TILE:   # the kernel stores its query tiles whole
                raise RuntimeError(f"attention: ds_t rows of {ldq} halves for the wgmma dK/dV kernel")
            if (WG_DKDV_OVERLAP or din) and not DS_EVICT_FIRST:   # attention.cu builds these forms with it only
                key = "TR2_ATTN_WG_DKDV_OVERLAP" if WG_DKDV_OVERLAP else "TR2_ATTN_WG_DKDV_ROW_DOTS"
                raise ValueError(f"{key}=1 needs TR2_ATTN_DS_EVICT_FIRST=1 (TR2_ATTN_DS_EVICT_FIRST=0 given)")
            if WG_DKDV_OVERLAP and din:   # attention.cu has no form with both
                raise SwitchError("TR2_ATTN_WG_DKDV_OVERLAP=1 and TR2_ATTN_WG_DKDV_ROW_DOTS=1 together: allowed is one")
            if tma_dkdv:
                check_tma_dkdv_switches("TR2_ATTN_WG_DKDV_TMA=1")
                form, stages = DKDV_TMA_FORMS[DKDV_TMA_FORM]
                resident = DKDV_TMA_FORM in DKDV_RESIDENT_FORMS
                for b0, b1 in groups:   # one group of all B unless DS_GROUP_BATCHES takes fewer batches at a time
                    BHg = (b1 - b0) * H
                    tq = _tma.encode(saved.qkv[b0:b1], (b1 - b0) * T, 3 * C, ctx.dtype)
                    tdo = _tma.encode(kdout[b0:b1], (b1 - b0) * T, C, ctx.dtype)
                    # the dropout counters of the group's heads where the whole launch would draw them
                    gtail = tail if b0 == 0 else ((i32(ctx.round_kind),)
                                                  + _dropout_args(p, seed, offset + b0 * H * T * T // 2, offset_add))
                    targs = ((dqkv[b0:b1], tq, tdo, saved.lse[b0:b1], D[b0:b1], ds_t, i32(ldq), i32(T), i32(H))
                             + gtail + ((saved.out[b0:b1],) if pd else ()))
                    grid = (BHg, -(-T // 128))
                    if resident:
                        extra, grid = _resident(ctx, BHg, T, "att_dkdv_tickets")
                        targs += extra
                    launch(FILE, f"attn_backward_dkdv_ds_{form}_l2_{name}_hs{hs}", grid, 384, targs,
                           shared_mem=dkdv_tma_shared_bytes(hs, stages, resident), prefer_shared=True)
                    if len(groups) > 1:   # this group's dQ while its dS^T is in the L2
                        _dq_tma(ctx, dqkv[b0:b1], ds_t, saved.qkv[b0:b1], T, H, C, ldq, hs, name)
                if len(groups) > 1:
                    return dqkv
            else:
                _launch_dkdv_wg(ctx, hs, T, B * H, name, args, din, saved)
        else:
            launch(FILE, f"attn_backward_dkdv_ds_{_ds_form()}{name}_hs{hs}", (B * H, -(-T // block_rows(ctx))),
                   THREADS, args, shared_mem=shared_bytes(ctx, "backward"))   # the folded kernel's layout likewise
        if dq_tma:
            _dq_tma(ctx, dqkv, ds_t, saved.qkv, T, H, C, ldq, hs, name)
            return dqkv
        dq_name, queries = dq_ds_kernel(ctx, hs)
        launch(FILE, dq_name, (B * H, -(-T // queries)), THREADS,
               (dqkv, saved.qkv, ds_t, i32(ldq), i32(T), i32(H), i32(ctx.round_kind)),
               shared_mem=dq_ds_shared_bytes(queries))
        return dqkv
    if not folds(ctx, T):
        _launch(ctx, "backward_dq", hs, T, B * H, (dqkv, saved.qkv, kdout, saved.lse, D, saved.out, i32(T), i32(H))
                + tail)
        _launch(ctx, "backward_dkdv", hs, T, B * H, (dqkv, saved.qkv, kdout, saved.lse, D, i32(T), i32(H)) + tail)
        return dqkv
    n_tiles = -(-T // _geometry(ctx)["backward_dkdv"])
    sync = ctx.ws.get("att_sync", (B * H * n_tiles + 1,), np.int32)   # a counter a (head, query tile), a ticket
    dq_acc = ctx.ws.get("att_dq_acc", (B * H, T, hs), np.float32)     # dQ's key-block parts, summed in order
    kind = "bf16" if ctx.dtype == "bfloat16" else "f16"
    _row_dots(ctx, D, sync, kdout, saved, B * T * H, T, H, kind, hs)
    _launch(ctx, "backward", hs, T, B * H, (dqkv, saved.qkv, kdout, saved.lse, D, dq_acc, sync, i32(T), i32(H)) + tail)
    return dqkv
