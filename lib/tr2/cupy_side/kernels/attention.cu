// attention.cu: causal self-attention, forward and backward, fused in the flash-attention manner on
// tensor cores (mma.sync). The T x T scores are never stored: each warp keeps its rows' tile of them in
// registers. Reference: tr2/cupy_side/ops/attention.py (same formulas, whole arrays).
//
// Layout, read and written in place (no split, merge or transpose kernels):
//   qkv [B, T, 3C] float32, c_attn's output: q of head h at columns h*HS, k at C + h*HS, v at 2C + h*HS;
//   out [B, T, C] (c_proj's input), dout [B, T, C]; dqkv [B, T, 3C] like qkv; lse, D [B*H, T] float32.
//
// Algorithm (HS = head size, 32 or 64; 4 warps a block, each owning 16 * MT rows; Geometry<K> below):
//   forward, one block per (4 * 16 * MT queries, b*H + h), heaviest blocks first: loop over the key tiles
//     (BC keys each) up to the diagonal; S = q k^T by mma; causal mask on the tiles that cross the diagonal
//     or T only; online softmax in float32 (running max m of the raw scores, per-thread partial sums l);
//     Pd = exp(scale (s - m)) * keep / (1 - p) (dropout drawn here by the counter-based generator, element
//     (bh*T + i)*T + j of the site, as ops/attention.py indexes it; a tile's keep bits before its products,
//     one draw for two elements: Draw, below); O += Pd v by mma with O in registers;
//     at the end out = O / l and lse = scale m + log(l).
//     On Hopper (sm_90a, HS = 64, half roundings) the products run on wgmma (attention_forward_wg, rows of at most
//     256). Rows over 256 take the TMA forward with 128-key tiles resident, one block an SM taking the query blocks
//     by tickets (attention_forward_tma_resident, form 7; not the 64-key forms' bits: its maxima over 128 keys).
//   backward, exact half builds (under half roundings dS is stored instead, below): a small kernel first, the
//     row dot products D_i = sum_d dO_id O_id (dO as the products read it); then one block per
//     (4 * 16 * MT keys, bh), looping over the query tiles (BC queries) from the last down to the diagonal:
//     S^T = k q^T, P^T = exp(S^T * scale - lse) (recomputed, never stored), dPd^T = v dO^T,
//     dS^T = P^T (dPd^T * keep / (1 - p) - D), dV += Pd^T dO, dK += dS^T q, and the block's part of the
//     tile's dQ, dS k over its keys, added to the other key blocks' parts in a fixed order (the folded dQ,
//     below); dK *= scale, dQ *= scale. (Until 2026-12-01 dQ had a kernel of its own that recomputed S and
//     dPd, seven products where five do; 1.27 ms of gpt2-small bf16's 3.58 ms of attention a step,
//     results/h200-perf-20261201b/call1-7751049.)
//     Folded only where a head has at most two key blocks (T <= 256): each query tile's parts then pass
//     through dq_acc once. On the GPT-2 shapes (eight key blocks) the seven read-add-writes of a tile, each
//     waiting on its load, made the folded kernel slower than the two it replaces: 311 against 216 us a
//     layer of gpt2-small, 409 against 277 on gpt2-medium, but 149 against 204 on the char model (the
//     waits cost 2 us of the 311, the ordered adds 105; results/h200-perf-20261201b/call3-f1bcd7d).
//   backward with dS stored (the half builds under half roundings, every T): the row dots D, then
//     dK, dV as above without dQ, each warp also writing its dS^T rows, rounded as dK's operand, to a
//     [BH, T, ~T] half buffer; then dQ = scale dS k, one product, read back from it (attention_backward_dq_ds).
//     On Hopper (sm_90a, HS = 64) the dK/dV part runs on wgmma with a TMA producer instead, resident
//     (attention_backward_dkdv_tma_resident, below), with the same bits; on rows over 256 dQ too
//     (attention_backward_dq_tma, the mma.sync dQ's bits in every case tested). On rows of at most 256 (since the
//     sixty-second session; TR2_ATTN_DQ_CHAIN) one kernel instead and no buffer: each warpgroup's part of dQ added
//     to a running sum handed from item to item in a fixed order (attn_backward_dkdv_dqc_, "dQ chained through the
//     dK/dV kernel"; keys ascending since the sixty-fourth session, attn_backward_dkdv_dqa_, chain_turn_asc).
//   backward unfolded (the float32 builds, and the exact half builds past two key blocks): dQ first, one block per
//     (4 * 16 * MT queries, bh), which also writes D: a loop over the key tiles up to the diagonal, S = q k^T,
//     P, dPd = dO v^T, dS, dQ += dS k; dQ *= scale. Then dK, dV as above without dQ, the query tiles from
//     the diagonal down. (The float32 builds' fragments are twice as wide and the registers hold no more.)
//     On Hopper (sm_90a, HS = 64) the float32 builds' forward runs on wgmma (attention_forward_wgf), with one TF32
//     product dK/dV and dQ too past T = 256 (attention_backward_dkdv_wgf, TR2_ATTN_F32_WG_DKDV; attention_backward_
//     dq_wgf, TR2_ATTN_F32_WG_DQ).
//   Every sum runs in a fixed order: no float atomics, the same bits on every run.
//   A warp skips the mma of a tile where every key lies after every one of its queries (all masked: the
//   result would be unchanged, bit for bit).
//
// Forms measured slower than those above and removed on 2026-12-05 (docs/perf.md by session; their source and
// tests: before the removal, at ee6b673): the mma.sync forward compiled for three blocks an SM (forward3,
// fourteenth session); the wgmma forward pipelined (wgp1, wgp2: eleventh and fourteenth) and its two warpgroups in
// ping-pong (wgpp2: twelfth and twentieth); the TMA forward's forms 1-6 and 8 (tma, 64-key tiles: thirteenth; tmap,
// tmawp, tmaw3: twentieth; tmaw, 128-key tiles, not resident: twenty-fourth, where its resident form 7 took x0.86-0.87
// of it; tmawpp, ping-pong: twenty-second; tmawrt, turns at the exponentials: twenty-seventh); the dS kernels without
// the evict-first L2 policy and the dQ from dS at 64 queries a block (q64: ninth); the wgmma dK/dV kernels on cp.async
// (wg1, wg2 and their forms o, overlapped: tenth; d, row dots inside: eleventh; p, ping-pong: twelfth and
// fourteenth; t, three blocks an SM: fourteenth; wg1 and wg2 themselves against the TMA dK/dV: nineteenth); the TMA
// dK/dV's forms 0-4 (tma3, tmad, tmad3, tmar: twentieth; tma, not resident: twenty-fifth; the folded dQ, form 6, went
// before, thirty-sixth); the TMA dQ with the heads fastest (tma_: twenty-eighth) and resident (tmar_: twenty-fifth).
// Removed on 2026-12-06 (source and tests at e006cd8): the float32 kernels bounded to three blocks an SM (f32b3, tf32b3;
// TR2_ATTN_F32_BLOCKS=3), slower than the two-block kernels on both GPT-2 shapes in both builds (forty-sixth session).
// Removed on 2026-12-06 (source and tests at 6369b54): the float32 wgmma dQ's k^T written from the staged k rows
// (wgfk2_; TR2_ATTN_F32_DQ_KT=1; fifty-second session) and its resident grid (wgfr2_; TR2_ATTN_F32_DQ_RESIDENT=1;
// fifty-third), both slower than attention_backward_dq_wgf.
// Removed on 2026-12-06 (source and tests at 8cd4f2d): the TMA forward with three consumer warpgroups, 192 queries a
// block (tmawr3; TR2_ATTN_FWD_TMA_LONG=9; fifty-fourth session), form 7's bits and slower than it (x1.01-1.02).
// Removed on 2026-12-07 (source and tests at 3d2f362): dQ inside the resident TMA dK/dV kernel by ordered bulk
// reductions (tmarb_, tmarbk_; TR2_ATTN_DQ_BULK=1, 2; fifty-sixth and fifty-seventh sessions): no dS^T buffer and no dQ
// pass, each (key block, query tile)'s float32 part added by the copy engine (cp.reduce.async.bulk) in key-block order
// under a turn. Correct, and x1.29-1.37 of the default's backward on the GPT-2 rows; with no copies at all the one
// kernel took x0.93-0.97 of it, and with the copies unordered and never awaited x1.27-1.28 (results/h100-perf-20261207b):
// the float32 reductions (16 KB a 64 x 128 tile pair, in the L2) cost more than the dS^T round trip they replace.
// Removed on 2026-12-07 (source and tests at a05863e): the resident TMA dK/dV with 128-query tiles (tmarq; TR2_ATTN_
// DKDV_Q128=1; fifty-eighth session): S^T and dPd^T by m64n128k16, dS^T stored from its packed fragments, the default's
// bits, and slower: the backward alone x1.03-1.04 on the GPT-2 shapes and x1.23-1.25 on the char model, the second
// warpgroup's masked half of each diagonal tile costing more than the per-tile work it saved (results/h100-perf-
// 20261207c).
// Reverted on 2026-12-07 (source at d146431): the TMA dK/dV's lse and D of a query pair in one 16-byte load (the stage
// interleaved by pairs), the same bits with 4% fewer instructions and slower, x1.08 under Nsight Compute on gpt2-small
// (10.07 against 8.94 cycles an issued instruction; results/h100-perf-20261207c, call 2).
// Removed on 2026-12-07 (source and tests at 1a3ac90): the TMA forward with four stages of k and v (tmawrd;
// TR2_ATTN_FWD_TMA_LONG=10; fifty-fifth session): form 7's bits, x0.96 of it alone from a warm L2 but no faster in the
// step, three rounds on gpt2-small and gpt2-medium (results/h100-perf-20261207i, call 2); form 7 built for rows without
// dropout alone (tmawrn; TR2_ATTN_FWD_TMA_LONG=11): x1.006-1.010 of it alone (results/h100-perf-20261207b); the
// resident dK/dV with four stages of q and dO (tmarrd; TR2_ATTN_DKDV_DEEP=1; fifty-fifth session): the default's bits,
// its step measured in one round only before the grouped order, which it could not join, took its place.
// Removed on 2026-12-07 (source and tests at 97e8ecd): the descending chain's staggered order and lagged turns (dqs_,
// dqcl_, dqsl_; TR2_ATTN_DQ_CHAIN_STAGGER, TR2_ATTN_DQ_CHAIN_LAG; sixty-second session): the descending chain's bits,
// and the backward alone x1.001 / x1.019 (staggered) and x1.023 / x1.024 (lagged) of it on gpt2-small / gpt2-medium
// (results/h100-perf-20261207h, call 2).
// gpu/attention.py's comments and gpu.RETIRED name the switches that chose them (each refused if still set).
//
// Why two m16 tiles a warp in the half builds (MT = 2): a warp reads each B fragment (a k or v slice) from
// shared memory once and feeds two mma with it, which halves the shared-memory bytes per mma; with one tile
// a warp the kernels were bound by shared memory (1 mma per fragment read, ~100 TFLOP/s on the H200). B
// fragments come by ldmatrix.x4 (two n8 tiles per instruction), A fragments of staged tiles likewise.
// The float32 builds keep one m16 tile a warp: their fragments are twice as wide (two m16n8k8 per k16,
// and hi + lo pairs in the plain build), and two tiles would not fit the registers.
//
// Exponentials: the half and TF32 builds take exp2(s * scale log2(e) - m scale log2(e)), one FFMA and one
// MUFU.EX2 an element (FlashAttention's form; its error, a few float32 ulps, is far below the half types'
// rounding). The plain float32 build keeps expf(s * scale - m * scale) as the reference computes it.
//
// Element types (ops/precision.py's three roundings; K = the build's kind, SPLIT = the exact build):
//   bfloat16 / float16: q, k, v, dO are rounded to the half type when a tile is loaded (the products'
//     operands); mma m16n8k16 with float32 accumulation. The operands attention makes itself (Pd, dS:
//     "internal") are rounded to the half type with half roundings (FlashAttention's rounding); the
//     exact build (SPLIT) keeps them to about 16 significant bits as hi + lo, two half values, and two
//     mma (P = hi + lo exactly up to 2^-17 relative): "float32 as far as the product allows".
//   float32 with TF32: every operand, internal ones too, rounded to TF32 (nearest even), mma m16n8k8.
//   float32 plain (SPLIT): every operand as hi + lo TF32 pair, three mma per product (hi*hi + hi*lo +
//     lo*hi; the dropped lo*lo is below float32's rounding), about float32's accuracy on tensor cores.
//   out and dqkv are product outputs: written in the half type under half roundings (`out_kind`), else float32.
// Shared memory: rows are padded (72 halves, 68 floats) so fragment reads hit 32 banks; the half builds
// stream their tiles into two buffers by cp.async (the next tile loads while the current one computes).
#include "common.cuh"

#define NWARPS 4
#define NTHREADS (NWARPS * 32)
// Grid: (B * H, blocks a head). blockIdx.x, the index the hardware hands out fastest, runs over the heads and
// blockIdx.y ranks a head's blocks by their work, the heaviest first: every head's longest blocks start in
// the first waves and the short ones fill the tail (longest first). With the head's blocks in x instead, the
// last heads' longest blocks started last, and their tail left SMs idle (Nsight Compute, call 2 of
// results/h200-perf-20261130: 2.91 waves, "up to 33%" of the time in the partial wave).
#define LOG2E 1.4426950408889634f

// The softmax's scale 1 / sqrt(HS) as float32, from the double as the wrapper and the reference take it
// (float32(1 / sqrt(hs))); known at compile time, so scale * log2(e) is an immediate operand.
template <int HS> struct Scale;
template <> struct Scale<64> { static constexpr float value = (float)0.125; };
template <> struct Scale<32> { static constexpr float value = (float)0.17677669529663687; };

template <int K> struct Tile { typedef u16 E; static const int LD = 72; };
template <> struct Tile<KIND_F32> { typedef float E; static const int LD = 68; };

// MT: m16 tiles a warp (rows a block = 4 * 16 * MT); FWD, DQ, DKDV: rows of the streamed tiles in each
// kernel (keys, keys, queries). The backward streams 32 rows in the half builds: a warp holds its two
// accumulators (dK and dV, 2 x 32 x HS floats) and the tile's P and dS, and 64-row tiles would spill.
// gpu/attention.py reads this table from here (gpu.attention_geometry): keep each on one line.
template <int K> struct Geometry { static const int MT = 2, FWD = 64, DQ = 32, DKDV = 32; };
template <> struct Geometry<KIND_F32> { static const int MT = 1, FWD = 64, DQ = 64, DKDV = 64; };

// Fragments of one k16 slice: the half types take one m16n8k16 mma, float32 two m16n8k8 (R = 2).
template <int K> struct Pieces { static const int R = 1; };
template <> struct Pieces<KIND_F32> { static const int R = 2; };
template <int K> struct AFrag { u32 hi[4 * Pieces<K>::R]; u32 lo[4 * Pieces<K>::R]; };
template <int K> struct BFrag { u32 hi[2 * Pieces<K>::R]; u32 lo[2 * Pieces<K>::R]; };

// x rounded to TF32, ties to even, as ops/precision.round_to_tf32: the low 13 bits cleared after adding half their
// weight less one and the kept part's lowest bit (a carry into the exponent is the right rounding up to infinity).
__device__ __forceinline__ float tf32_rne_formula(float x) {
    u32 b = __float_as_uint(x);
    b += ((b >> 13) & 1u) + 0xFFFu;
    return __uint_as_float(b & 0xFFFFE000u);
}

// The rounding the kernels use. From sm_90 on PTX has it as one instruction (cvt.rn.tf32.f32, SASS F2FP.TF32.F32)
// where the formula takes four integer instructions; the exact float32 build splits every operand it reads from
// shared memory (two roundings an element, each read by four warps), which made those instructions the largest
// share of its loops (docs/perf.md, forty-sixth session). tf32_round_check below holds the two to the same bits on
// every float32 bit pattern that is not NaN (the instruction keeps NaN, where the formula loses some); elsewhere the
// formula itself.
__device__ __forceinline__ float tf32_rne(float x) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    u32 r;
    asm("cvt.rn.tf32.f32 %0, %1;" : "=r"(r) : "f"(x));
    return __uint_as_float(r);
#else
    return tf32_rne_formula(x);
#endif
}

template <int K> __device__ __forceinline__ float half_value(u16 h) { return load_from<K>(h); }

// A staged operand's value (half bits widened; float32 tiles hold it as the products read it already).
template <int K> __device__ __forceinline__ float operand_value(typename Tile<K>::E x) {
    if constexpr (K == KIND_F32) return x;
    else return half_value<K>(x);
}


// x as an operand register (and its remainder with SPLIT); for float32, x is first rounded to TF32
// unless it already is (operands staged in shared memory by a TF32 build are rounded when stored).
template <bool SPLIT, bool ROUND>
__device__ __forceinline__ void tf32_operand(float x, u32& hi, u32& lo) {
    if constexpr (SPLIT) {
        const float h = tf32_rne(x);
        hi = __float_as_uint(h);
        lo = __float_as_uint(tf32_rne(x - h));
    } else {
        hi = __float_as_uint(ROUND ? tf32_rne(x) : x);
    }
}

template <int K, bool SPLIT>
__device__ __forceinline__ void half_operand(float x0, float x1, u32& hi, u32& lo) {
    hi = pack2<K>(x0, x1);
    if constexpr (SPLIT) {
        const float h0 = half_value<K>((u16)(hi & 0xFFFFu)), h1 = half_value<K>((u16)(hi >> 16));
        lo = pack2<K>(x0 - h0, x1 - h1);
    }
}

template <int K>
__device__ __forceinline__ void mma_k16(float c[4], const u32* a, const u32* b) {
    if constexpr (K == KIND_BF16) {
        asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
            : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
            : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
    } else if constexpr (K == KIND_F16) {
        asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
            : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
            : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
    } else {
#pragma unroll
        for (int r = 0; r < 2; ++r)
            asm("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
                : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                : "r"(a[4 * r]), "r"(a[4 * r + 1]), "r"(a[4 * r + 2]), "r"(a[4 * r + 3]), "r"(b[2 * r]), "r"(b[2 * r + 1]));
    }
}

// c += a b over one k16 slice. A_INTERNAL: a was made in registers (Pd or dS), split in the exact build.
template <int K, bool SPLIT, bool A_INTERNAL>
__device__ __forceinline__ void mma_acc(float c[4], const AFrag<K>& a, const BFrag<K>& b) {
    if constexpr (K == KIND_F32 && SPLIT) {
        mma_k16<K>(c, a.lo, b.hi);
        mma_k16<K>(c, a.hi, b.lo);
    } else if constexpr (K != KIND_F32 && SPLIT && A_INTERNAL) {
        mma_k16<K>(c, a.lo, b.hi);
    }
    mma_k16<K>(c, a.hi, b.hi);
}

// ---- fragments from shared memory (tiles row-major [row][d], LD elements a row) ----
// mma's fragment layout: g = lane / 4, t = lane % 4; A rows g and g + 8; B column g; C (row g, cols
// 2t, 2t+1) and (row g + 8, same cols). ldmatrix.x4 reads four 8 x 8 half matrices, lanes 8q..8q+7
// giving the row addresses of matrix q, and hands lane l row l / 4, columns 2(l % 4), +1 of each: the
// fragment layout, so one instruction fills a whole A fragment or the B fragments of two n8 tiles.
__device__ __forceinline__ void ldmatrix_x4(u32 r[4], const u16* p) {
    const u32 addr = (u32)__cvta_generic_to_shared(p);
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(addr));
}
__device__ __forceinline__ void ldmatrix_x4_trans(u32 r[4], const u16* p) {
    const u32 addr = (u32)__cvta_generic_to_shared(p);
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(addr));
}

// A = tile rows m0..m0+15, columns k16*16..+15. Half builds: matrices (rows +0, cols +0), (+8, +0),
// (+0, +8), (+8, +8) are a0..a3.
template <int K, bool SPLIT>
__device__ __forceinline__ void load_a(AFrag<K>& a, const typename Tile<K>::E* s, int m0, int k16, int lane) {
    const int LD = Tile<K>::LD;
    if constexpr (K == KIND_F32) {
        const int g = lane >> 2, t = lane & 3;
#pragma unroll
        for (int r = 0; r < 2; ++r) {
            const float* p = (const float*)s + (m0 + g) * LD + k16 * 16 + 8 * r + t;
            tf32_operand<SPLIT, false>(p[0], a.hi[4 * r], a.lo[4 * r]);
            tf32_operand<SPLIT, false>(p[8 * LD], a.hi[4 * r + 1], a.lo[4 * r + 1]);
            tf32_operand<SPLIT, false>(p[4], a.hi[4 * r + 2], a.lo[4 * r + 2]);
            tf32_operand<SPLIT, false>(p[8 * LD + 4], a.hi[4 * r + 3], a.lo[4 * r + 3]);
        }
    } else {
        ldmatrix_x4(a.hi, (const u16*)s + (m0 + (lane & 15)) * LD + k16 * 16 + (lane >> 4) * 8);
    }
}

// B[k][n] = tile[n][k] (the tile's rows are B's columns), for S = q k^T etc.: the fragments of the two n8
// tiles n0..n0+7 and n0+8..n0+15, k16 slice. Half builds: matrices (rows +0, cols +0), (+0, +8) are b[0],
// (+8, +0), (+8, +8) are b[1].
template <int K, bool SPLIT>
__device__ __forceinline__ void load_b_rows(BFrag<K> b[2], const typename Tile<K>::E* s, int n0, int k16, int lane) {
    const int LD = Tile<K>::LD;
    if constexpr (K == KIND_F32) {
        const int g = lane >> 2, t = lane & 3;
#pragma unroll
        for (int q = 0; q < 2; ++q)
#pragma unroll
            for (int r = 0; r < 2; ++r) {
                const float* p = (const float*)s + (n0 + 8 * q + g) * LD + k16 * 16 + 8 * r + t;
                tf32_operand<SPLIT, false>(p[0], b[q].hi[2 * r], b[q].lo[2 * r]);
                tf32_operand<SPLIT, false>(p[4], b[q].hi[2 * r + 1], b[q].lo[2 * r + 1]);
            }
    } else {
        u32 r[4];
        ldmatrix_x4(r, (const u16*)s + (n0 + (lane & 7) + ((lane >> 4) << 3)) * LD + k16 * 16 + ((lane >> 3) & 1) * 8);
        b[0].hi[0] = r[0]; b[0].hi[1] = r[1]; b[1].hi[0] = r[2]; b[1].hi[1] = r[3];
    }
}

// B[k][n] = tile[k][n] (the tile's rows are B's k), for Pd v etc.: rows k16*16..+15, the two n8 tiles
// n0.. and n0+8... Half builds read it transposed: matrices (rows +0, cols +0), (+8, +0) are b[0],
// (+0, +8), (+8, +8) are b[1].
template <int K, bool SPLIT>
__device__ __forceinline__ void load_b_cols(BFrag<K> b[2], const typename Tile<K>::E* s, int n0, int k16, int lane) {
    const int LD = Tile<K>::LD;
    if constexpr (K == KIND_F32) {
        const int g = lane >> 2, t = lane & 3;
#pragma unroll
        for (int q = 0; q < 2; ++q)
#pragma unroll
            for (int r = 0; r < 2; ++r) {
                const float* p = (const float*)s + (k16 * 16 + 8 * r + t) * LD + n0 + 8 * q + g;
                tf32_operand<SPLIT, false>(p[0], b[q].hi[2 * r], b[q].lo[2 * r]);
                tf32_operand<SPLIT, false>(p[4 * LD], b[q].hi[2 * r + 1], b[q].lo[2 * r + 1]);
            }
    } else {
        u32 r[4];
        ldmatrix_x4_trans(r, (const u16*)s + (k16 * 16 + (lane & 15)) * LD + n0 + (lane >> 4) * 8);
        b[0].hi[0] = r[0]; b[0].hi[1] = r[1]; b[1].hi[0] = r[2]; b[1].hi[1] = r[3];
    }
}

// A from a warp's C registers (16 rows x 8 NT columns, v[nt][e]), k16 slice = column tiles 2*k16, 2*k16+1.
// The half types' C layout is their A layout; float32's A wants columns t and t + 4 of an n8 tile where
// C holds 2t and 2t + 1, so the values move between the four lanes of a row group by shuffles.
template <int K, bool SPLIT>
__device__ __forceinline__ void c_to_a(AFrag<K>& a, const float (*v)[4], int k16, int lane) {
    if constexpr (K == KIND_F32) {
        const int t = lane & 3;
        const int src0 = (lane & ~3) | (t >> 1), src1 = src0 + 2;
        const bool odd = t & 1;
#pragma unroll
        for (int r = 0; r < 2; ++r) {
            const float* c = v[2 * k16 + r];
            const float x0 = __shfl_sync(0xffffffffu, c[0], src0), x1 = __shfl_sync(0xffffffffu, c[1], src0);
            const float x2 = __shfl_sync(0xffffffffu, c[2], src0), x3 = __shfl_sync(0xffffffffu, c[3], src0);
            const float y0 = __shfl_sync(0xffffffffu, c[0], src1), y1 = __shfl_sync(0xffffffffu, c[1], src1);
            const float y2 = __shfl_sync(0xffffffffu, c[2], src1), y3 = __shfl_sync(0xffffffffu, c[3], src1);
            tf32_operand<SPLIT, true>(odd ? x1 : x0, a.hi[4 * r], a.lo[4 * r]);          // row g, col t
            tf32_operand<SPLIT, true>(odd ? x3 : x2, a.hi[4 * r + 1], a.lo[4 * r + 1]);  // row g + 8, col t
            tf32_operand<SPLIT, true>(odd ? y1 : y0, a.hi[4 * r + 2], a.lo[4 * r + 2]);  // row g, col t + 4
            tf32_operand<SPLIT, true>(odd ? y3 : y2, a.hi[4 * r + 3], a.lo[4 * r + 3]);  // row g + 8, col t + 4
        }
    } else {
        const float* c0 = v[2 * k16];
        const float* c1 = v[2 * k16 + 1];
        half_operand<K, SPLIT>(c0[0], c0[1], a.hi[0], a.lo[0]);
        half_operand<K, SPLIT>(c0[2], c0[3], a.hi[1], a.lo[1]);
        half_operand<K, SPLIT>(c1[0], c1[1], a.hi[2], a.lo[2]);
        half_operand<K, SPLIT>(c1[2], c1[3], a.hi[3], a.lo[3]);
    }
}

// ---- staging: ROWS rows x HS columns of a [B, T, stride] array into a padded tile ----
// Half builds read half-type q, k, v and dO (the wrapper hands them over as 16-bit buffers) and copy them
// by cp.async, 16 bytes a thread, into a buffer the current iteration does not read: loads overlap the
// mma of the current tile (two buffers). Float32 builds read float32 and round as they store (TF32; plain
// float32 stores exact values and splits later), one buffer, synchronously. Rows at or past T are zeros.
template <int K> struct Pipe { static const int NBUF = 2; };
template <> struct Pipe<KIND_F32> { static const int NBUF = 1; };

__device__ __forceinline__ void cp_async16(void* dst, const void* src) {
    const u32 d = (u32)__cvta_generic_to_shared(dst);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(d), "l"(src));
}
// The dS^T traffic of the _l2 kernels (below, store_ds_t and attention_backward_dq_ds with EVICT): an L2 policy
// that marks the lines it touches first to go. Each dS^T element is written once and read once, ~100 MB a layer
// of gpt2-small against the 50 MB L2, while the streamed q, dO, k tiles are read by many blocks and dqkv by the
// products right after. A policy (createpolicy, then .L2::cache_hint) rather than the .cs operator: cp.async,
// which reads ds_t back, takes no .cs, and one mechanism then covers both sides.
__device__ __forceinline__ u64 l2_evict_first() {
    u64 policy;
    asm("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(policy));
    return policy;
}
__device__ __forceinline__ void cp_async16_policy(void* dst, const void* src, u64 policy) {
    const u32 d = (u32)__cvta_generic_to_shared(dst);
    asm volatile("cp.async.cg.shared.global.L2::cache_hint [%0], [%1], 16, %2;" ::"r"(d), "l"(src), "l"(policy));
}
__device__ __forceinline__ void st_global16_policy(void* dst, uint4 v, u64 policy) {
    asm volatile("st.global.L2::cache_hint.v4.b32 [%0], {%1,%2,%3,%4}, %5;"
                 ::"l"(dst), "r"(v.x), "r"(v.y), "r"(v.z), "r"(v.w), "l"(policy));
}
__device__ __forceinline__ void cp_async4(void* dst, const void* src) {
    const u32 d = (u32)__cvta_generic_to_shared(dst);
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4;" ::"r"(d), "l"(src));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;"); }
template <int N> __device__ __forceinline__ void cp_async_wait() { asm volatile("cp.async.wait_group %0;" ::"n"(N)); }

template <int K, bool SPLIT, int HS, int ROWS, int NB = Pipe<K>::NBUF>
__device__ __forceinline__ void stage(typename Tile<K>::E* s, const typename Tile<K>::E* __restrict__ src, int row0,
                                      int T, int stride) {
    const int LD = Tile<K>::LD;
    // a fixed number of pieces a thread (no remainder loop for the compiler to guard)
    constexpr int PIECE = K == KIND_F32 ? 4 : 8, PER_ROW = HS / PIECE, EACH = ROWS * PER_ROW / NTHREADS;
    static_assert(ROWS * PER_ROW % NTHREADS == 0, "a staged tile splits evenly over the block's threads");
#pragma unroll
    for (int k = 0; k < EACH; ++k) {
        const int idx = threadIdx.x + k * NTHREADS, r = idx / PER_ROW, c = (idx % PER_ROW) * PIECE;
        if constexpr (K == KIND_F32 && NB == 2) {   // streamed: raw float32 by cp.async (land_tf32 rounds it after)
            float* d = s + r * LD + c;
            if (row0 + r < T) cp_async16(d, src + (i64)(row0 + r) * stride + c);
            else *(float4*)d = make_float4(0.f, 0.f, 0.f, 0.f);
        } else if constexpr (K == KIND_F32) {
            float4 x = make_float4(0.f, 0.f, 0.f, 0.f);
            if (row0 + r < T) x = *(const float4*)(src + (i64)(row0 + r) * stride + c);
            if (!SPLIT) x = make_float4(tf32_rne(x.x), tf32_rne(x.y), tf32_rne(x.z), tf32_rne(x.w));
            *(float4*)(s + r * LD + c) = x;
        } else {
            u16* d = s + r * LD + c;
            if (row0 + r < T) cp_async16(d, src + (i64)(row0 + r) * stride + c);
            else *(uint4*)d = make_uint4(0u, 0u, 0u, 0u);
        }
    }
}

// The streamed float32 builds (NB = 2) of the tf32 build: the tile stage() copied raw is rounded to TF32 in place, each
// thread the pieces it copied itself (stage's mapping), which cp.async.wait_group has made visible to that thread: the
// values the synchronous staging stores, so the products read the same operands. The exact build (SPLIT) keeps raw
// values and splits them where it reads them, as before.
template <int HS, int ROWS>
__device__ __forceinline__ void land_tf32(float* s) {
    constexpr int LD = Tile<KIND_F32>::LD, PER_ROW = HS / 4, EACH = ROWS * PER_ROW / NTHREADS;
#pragma unroll
    for (int k = 0; k < EACH; ++k) {
        const int idx = threadIdx.x + k * NTHREADS, r = idx / PER_ROW, c = (idx % PER_ROW) * 4;
        float4* p = (float4*)(s + r * LD + c);
        const float4 x = *p;
        *p = make_float4(tf32_rne(x.x), tf32_rne(x.y), tf32_rne(x.z), tf32_rne(x.w));
    }
}

// n floats of a row vector (zeros from T on) into shared memory, element tid of them (threads with tid outside
// 0..n-1 copy nothing): by cp.async in the half builds (the copy joins the tile's commit group, so no thread
// waits on a global load here), else by plain loads.
template <int K, int NB = Pipe<K>::NBUF>
__device__ __forceinline__ void stage_row(float* s, const float* __restrict__ src, int i0, int n, int T, int tid) {
    if (tid < 0 || tid >= n) return;
    if (i0 + tid >= T) s[tid] = 0.0f;
    else if constexpr (NB == 2) cp_async4(s + tid, src + i0 + tid);
    else s[tid] = src[i0 + tid];
}

// The streamed tiles of a loop of iterations 0..last. start() stages iteration 0 (two buffers: into
// buffer 0, in the commit group of whatever the block staged before); acquire(it) returns the buffer that
// holds iteration it, complete and visible to every thread, having first started the next iteration's
// copy into the other buffer (one buffer, NB = 1: staged synchronously into it); release() after the
// iteration's reads, before the next acquire may overwrite the buffer. stage_fn(it, buf) stages one;
// land_fn(it, buf), two buffers only, runs after iteration it's copies have landed and before the block's barrier
// (the streamed tf32 build rounds there what each thread copied: land_tf32).
struct NoLand {
    __device__ __forceinline__ void operator()(int, int) const {}
};
template <int K, typename StageFn, int NB = Pipe<K>::NBUF, typename LandFn = NoLand>
struct Stream {
    StageFn stage_fn;
    int last;
    LandFn land_fn;
    __device__ __forceinline__ void start() {
        if constexpr (NB == 2) {
            stage_fn(0, 0);
            cp_async_commit();
        }
    }
    __device__ __forceinline__ int acquire(int it) {
        if constexpr (NB == 2) {
            const int cur = it & 1;
            if (it < last) {
                stage_fn(it + 1, cur ^ 1);
                cp_async_commit();
                cp_async_wait<1>();
            } else {
                cp_async_wait<0>();
            }
            land_fn(it, cur);
            __syncthreads();
            return cur;
        } else {
            __syncthreads();
            stage_fn(it, 0);
            __syncthreads();
            return 0;
        }
    }
    __device__ __forceinline__ void release() {
        if constexpr (NB == 2) __syncthreads();
    }
};
template <int K, typename StageFn>
__device__ __forceinline__ Stream<K, StageFn> make_stream(StageFn f, int last) { return Stream<K, StageFn>{f, last}; }
template <int K, int NB, typename StageFn, typename LandFn>
__device__ __forceinline__ Stream<K, StageFn, NB, LandFn> make_stream(StageFn f, LandFn land, int last) {
    return Stream<K, StageFn, NB, LandFn>{f, last, land};
}

// Two adjacent output elements (idx even) in out_kind: float32, or the half type under half roundings.
__device__ __forceinline__ void store_pair(void* base, i64 idx, float a, float b, int kind) {
    if (kind == KIND_F32) *(float2*)((float*)base + idx) = make_float2(a, b);
    else if (kind == KIND_BF16) *(u32*)((u16*)base + idx) = pack2<KIND_BF16>(a, b);
    else *(u32*)((u16*)base + idx) = pack2<KIND_F16>(a, b);
}

// ---- dropout on the T x T probabilities ----
// The generator draws once for elements 2c and 2c + 1 of the flat [B, H, T, T] index (common.cuh), which are
// (i, j) and (i, j + 1) for even j when T is even. A thread holds its elements in pairs, registers 2r and
// 2r + 1 of an n8 tile, so it draws once a pair (Draw):
//   ROW_PAIRS   the pair is (i, j), (i, j + 1), j even: the forward and dQ, whose warp rows are queries;
//   LANE_PAIRS  the pair is (i, j), (i + 1, j), i even: dK/dV, whose warp rows are keys (the transpose). The
//               elements (i, j ^ 1), (i + 1, j ^ 1) that share their draws lie in lane ^ 4: of the two lanes,
//               the one with odd j draws the pair of row i + 1, the other the pair of row i, and each hands
//               its partner the keep bits of the partner's elements, one shuffle a tile;
//   EACH        T odd: the flat index of (i, j) has the parity of bh + i + j, so a draw's two elements may lie
//               in two rows; each element is drawn alone.
// A tile's draws are made before its products, into one bit a register (KeepBits), while the products'
// 64 registers of scores are not yet live: drawn next to the softmax they spilled the dK/dV accumulators.
enum Draw { EACH, ROW_PAIRS, LANE_PAIRS };

// Bit (mt * NT + n) * 4 + e of the words: register (mt, n, e) of a warp's block is kept.
template <int MT, int NT> struct KeepBits {
    u32 w[(MT * NT * 4 + 31) / 32];
    __device__ __forceinline__ bool operator()(int mt, int n, int e) const {
        const int b = (mt * NT + n) * 4 + e;
        return (w[b >> 5] >> (b & 31)) & 1u;
    }
};

struct Dropout {
    int use;
    u64 seed, off;
    u32 threshold;
    float scale;
    __device__ __forceinline__ u64 index(int bh, int i, int j, int T) const { return ((u64)bh * T + i) * (u64)T + j; }
    __device__ __forceinline__ u32 kept(u32 k) const { return k >= threshold ? 1u : 0u; }

    // The keep bits of a warp's block; at(mt, n, e, i, j) gives register (mt, n, e)'s query i and key j. EDGE
    // (the block may cross the diagonal): a draw whose elements all lie after their query is skipped (their
    // bits stay 0: the softmax zeroes them anyway). LANE_PAIRS: every lane of the warp calls it together.
    template <int DRAW, bool EDGE, int MT, int NT, typename At>
    __device__ __forceinline__ KeepBits<MT, NT> keep_bits_of(int bh, int T, At at) const {
        constexpr int WORDS = (MT * NT * 4 + 31) / 32;
        int i00, j00;   // register (0, 0, 0)'s element
        at(0, 0, 0, i00, j00);
        // LANE_PAIRS: for its register pair (i, j), (i + 1, j) a lane draws the pair of row i + odd, keys
        // j - odd and j - odd + 1, and of its elements keeps the one in that row, register 2r + odd.
        const int odd = DRAW == LANE_PAIRS ? j00 & 1 : 0;
        // The draws' flat indices lie at offsets (i - i00) T + (j - j00) from e00, and with pairs (T even, j - j00
        // even) their counters at half that from c00: the offsets are constants of the unrolled loops, so a draw
        // costs an add or two there instead of index()'s 64-bit products.
        const u64 e00 = index(bh, i00 + odd, j00 - odd, T), c00 = off + (e00 >> 1);
        const int half_T = T >> 1;
        u32 hi[WORDS], lo[WORDS];   // bit b: the keep bit of the high (low) field of register pair b's draw
#pragma unroll
        for (int w = 0; w < WORDS; ++w) hi[w] = lo[w] = 0u;
#pragma unroll
        for (int mt = 0; mt < MT; ++mt)
#pragma unroll
            for (int n = 0; n < NT; ++n)
#pragma unroll
                for (int r = 0; r < 2; ++r) {
                    const int b = (mt * NT + n) * 4 + 2 * r, w = b >> 5, bit = b & 31;
                    int i0, j0, i1, j1;
                    at(mt, n, 2 * r, i0, j0);
                    at(mt, n, 2 * r + 1, i1, j1);
                    if constexpr (DRAW == EACH) {
                        if (!EDGE || j0 <= i0)
                            hi[w] |= kept(rng_bits24(seed, off, e00 + (u64)(i0 - i00) * T + (j0 - j00))) << bit;
                        if (!EDGE || j1 <= i1)
                            hi[w] |= kept(rng_bits24(seed, off, e00 + (u64)(i1 - i00) * T + (j1 - j00))) << (bit + 1);
                    } else if (!EDGE || j0 - odd <= i0 + odd) {
                        const u64 z = rng_draw(seed, c00 + (u64)(i0 - i00) * half_T + (j0 - j00) / 2);
                        hi[w] |= kept(rng_field(z, false)) << bit;
                        lo[w] |= kept(rng_field(z, true)) << bit;
                    }
                }
        KeepBits<MT, NT> keep;
#pragma unroll
        for (int w = 0; w < WORDS; ++w) {
            if constexpr (DRAW == EACH) keep.w[w] = hi[w];
            else if constexpr (DRAW == ROW_PAIRS) keep.w[w] = hi[w] | lo[w] << 1;   // (i, j) high, (i, j + 1) low
            else {
                // this lane's element of its draw is the high field when odd = 0, else the low one; the partner's
                // element of it, the other field, is the partner's register 2r + odd as well (rows i, i + 1 the
                // same, its key's parity the other)
                const u32 mine = (odd ? lo[w] : hi[w]) << odd, theirs = (odd ? hi[w] : lo[w]) << odd;
                keep.w[w] = mine | __shfl_xor_sync(0xffffffffu, theirs, 4);
            }
        }
        return keep;
    }

    // PAIRS: the caller's layout, drawn so when T is even. A block inside the triangle draws every pair with no
    // branch; only edge blocks test their draws (T odd tests them everywhere: no hot shape has T odd).
    template <int PAIRS, int MT, int NT, typename At>
    __device__ __forceinline__ KeepBits<MT, NT> keep_bits(int bh, int T, bool edge, At at) const {
        if (T & 1) return keep_bits_of<EACH, true, MT, NT>(bh, T, at);
        if (edge) return keep_bits_of<PAIRS, true, MT, NT>(bh, T, at);
        return keep_bits_of<PAIRS, false, MT, NT>(bh, T, at);
    }
};

__device__ __forceinline__ Dropout make_dropout(int use, u64 seed, u64 offset, const u64* offset_add, u32 threshold,
                                                float scale) {
    Dropout d;
    d.use = use;
    d.seed = seed;
    d.off = use ? site_offset(offset, offset_add) : 0;
    d.threshold = threshold;
    d.scale = scale;
    return d;
}

// The softmax's exponential of scale * (s - m) for raw scores s and a row's m, handed over as mc = m * c:
// c = scale in the plain float32 build (expf of the scaled difference, as the reference), else
// c = scale * log2(e) and exp2 of one fused multiply-add.
template <bool EXACT> __device__ __forceinline__ float exp_c(float s, float c, float mc) {
    if constexpr (EXACT) return expf(s * c - mc);
    else return exp2f(fmaf(s, c, -mc));
}

// acc[mt][n] += a[mt] (16 x NT*8 in C registers) b (NT*8 x HS staged tile, k-major), for each of the MT tiles.
// Plain float32 (PROMOTE) sums each tile's product apart and adds it to acc with ordinary float adds: the
// tensor cores' own float32 accumulation is not IEEE-exact, and over a thousand keys it grew past 1e-5.
template <int K, bool SPLIT, int HS, int MT, int NT>
__device__ __forceinline__ void acc_product(float acc[MT][HS / 8][4], const float a[MT][NT][4],
                                            const typename Tile<K>::E* sb, int lane) {
    constexpr bool PROMOTE = (K == KIND_F32 && SPLIT);
    float part[PROMOTE ? MT : 1][PROMOTE ? HS / 8 : 1][4];
    if constexpr (PROMOTE) {
#pragma unroll
        for (int mt = 0; mt < MT; ++mt)
#pragma unroll
            for (int n = 0; n < HS / 8; ++n) part[mt][n][0] = part[mt][n][1] = part[mt][n][2] = part[mt][n][3] = 0.0f;
    }
#pragma unroll
    for (int k16 = 0; k16 < NT / 2; ++k16) {
        AFrag<K> fa[MT];
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) c_to_a<K, SPLIT>(fa[mt], a[mt], k16, lane);
#pragma unroll
        for (int np = 0; np < HS / 16; ++np) {
            BFrag<K> fb[2];
            load_b_cols<K, SPLIT>(fb, sb, np * 16, k16, lane);
#pragma unroll
            for (int mt = 0; mt < MT; ++mt)
#pragma unroll
                for (int q = 0; q < 2; ++q) {
                    if constexpr (PROMOTE) mma_acc<K, SPLIT, true>(part[mt][2 * np + q], fa[mt], fb[q]);
                    else mma_acc<K, SPLIT, true>(acc[mt][2 * np + q], fa[mt], fb[q]);
                }
        }
    }
    if constexpr (PROMOTE) {
#pragma unroll
        for (int mt = 0; mt < MT; ++mt)
#pragma unroll
            for (int n = 0; n < HS / 8; ++n)
#pragma unroll
                for (int e = 0; e < 4; ++e) acc[mt][n][e] += part[mt][n][e];
    }
}

// s[mt][n] = a(16 rows of tile sa from m0 + 16 mt) b^T(NT*8 rows of tile sb) over HS: a warp's scores-like block.
template <int K, bool SPLIT, int HS, int MT, int NT>
__device__ __forceinline__ void tile_product(float s[MT][NT][4], const typename Tile<K>::E* sa, int m0,
                                             const typename Tile<K>::E* sb, int lane) {
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
        for (int n = 0; n < NT; ++n) s[mt][n][0] = s[mt][n][1] = s[mt][n][2] = s[mt][n][3] = 0.0f;
#pragma unroll
    for (int k16 = 0; k16 < HS / 16; ++k16) {
        AFrag<K> fa[MT];
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) load_a<K, SPLIT>(fa[mt], sa, m0 + 16 * mt, k16, lane);
#pragma unroll
        for (int np = 0; np < NT / 2; ++np) {
            BFrag<K> fb[2];
            load_b_rows<K, SPLIT>(fb, sb, np * 16, k16, lane);
#pragma unroll
            for (int mt = 0; mt < MT; ++mt)
#pragma unroll
                for (int q = 0; q < 2; ++q) mma_acc<K, SPLIT, false>(s[mt][2 * np + q], fa[mt], fb[q]);
        }
    }
}

// ---------------------------------------------------------------------------------------------- forward
template <int K, bool SPLIT, int HS, bool DROP, int NB = Pipe<K>::NBUF>
__device__ void attention_forward(void* __restrict__ out, float* __restrict__ lse,
                                  const typename Tile<K>::E* __restrict__ qkv, int T, int H, int out_kind,
                                  Dropout drop) {
    constexpr float scale = Scale<HS>::value;
    constexpr int MT = Geometry<K>::MT, BC = Geometry<K>::FWD, NT = BC / 8;
    constexpr int RW = 16 * MT, BR = NWARPS * RW, LD = Tile<K>::LD;
    constexpr bool EXACT = (K == KIND_F32 && SPLIT);
    extern __shared__ __align__(16) unsigned char smem[];
    typedef typename Tile<K>::E E;
    E* sQ = (E*)smem;
    E* sKV = sQ + BR * LD;   // buffer b: K at sKV + 2b BC rows, V at sKV + (2b + 1) BC rows
    const int nqb = (T + BR - 1) / BR;
    const int qb = nqb - 1 - (int)blockIdx.y;   // the longest rows first (Grid, at the top)
    const int bh = blockIdx.x, b = bh / H, h = bh % H, C = H * HS;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    const int r0 = qb * BR + warp * RW;         // the warp's first query
    const E* base = qkv + (i64)b * T * 3 * C;
    const int last = min(qb * BR + BR - 1, T - 1) / BC;   // the last key tile a query of the block sees
    auto kv = make_stream<K, NB>([&](int kb, int buf) {
        stage<K, SPLIT, HS, BC, NB>(sKV + 2 * buf * BC * LD, base + C + h * HS, kb * BC, T, 3 * C);
        stage<K, SPLIT, HS, BC, NB>(sKV + (2 * buf + 1) * BC * LD, base + 2 * C + h * HS, kb * BC, T, 3 * C);
    }, [&](int kb, int buf) {
        if constexpr (K == KIND_F32 && !SPLIT && NB == 2) {   // q (in the first group) and the tile, to TF32
            if (kb == 0) land_tf32<HS, BR>((float*)sQ);
            land_tf32<HS, BC>((float*)(sKV + 2 * buf * BC * LD));
            land_tf32<HS, BC>((float*)(sKV + (2 * buf + 1) * BC * LD));
        }
    }, last);
    stage<K, SPLIT, HS, BR, NB>(sQ, base + h * HS, qb * BR, T, 3 * C);
    kv.start();

    constexpr float c = EXACT ? scale : scale * LOG2E;
    float o[MT][HS / 8][4];
    float mrow[MT][2], lrow[MT][2];
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) {
#pragma unroll
        for (int n = 0; n < HS / 8; ++n) o[mt][n][0] = o[mt][n][1] = o[mt][n][2] = o[mt][n][3] = 0.0f;
        mrow[mt][0] = mrow[mt][1] = NEG_INF;
        lrow[mt][0] = lrow[mt][1] = 0.0f;
    }

    for (int kb = 0; kb <= last; ++kb) {
        const int cur = kv.acquire(kb);
        if (kb * BC <= r0 + RW - 1) {   // else the warp's queries all come before the tile's keys
            const E* sK = sKV + 2 * cur * BC * LD;
            const E* sV = sK + BC * LD;
            auto at = [&](int mt, int n, int e, int& i, int& j) {   // register (mt, n, e): query i, key j
                i = r0 + 16 * mt + g + 8 * (e >> 1);
                j = kb * BC + n * 8 + 2 * t + (e & 1);
            };
            const bool edge = kb * BC + BC - 1 > r0 || kb * BC + BC > T;   // a tile across the diagonal or T
            KeepBits<MT, NT> keep{};
            if constexpr (DROP) keep = drop.keep_bits<ROW_PAIRS, MT, NT>(bh, T, edge, at);
            float s[MT][NT][4];
            tile_product<K, SPLIT, HS, MT, NT>(s, sQ, warp * RW, sK, lane);   // S = q k^T (raw)
            if (edge) {   // mask
#pragma unroll
                for (int mt = 0; mt < MT; ++mt)
#pragma unroll
                    for (int n = 0; n < NT; ++n)
#pragma unroll
                        for (int e = 0; e < 4; ++e) {
                            int i, j;
                            at(mt, n, e, i, j);
                            if (j > i || j >= T) s[mt][n][e] = NEG_INF;
                        }
            }
#pragma unroll
            for (int mt = 0; mt < MT; ++mt) {
                float mc[2];
#pragma unroll
                for (int r = 0; r < 2; ++r) {   // the running max of each of the thread's two rows
                    float mx = NEG_INF;
#pragma unroll
                    for (int n = 0; n < NT; ++n) mx = fmaxf(mx, fmaxf(s[mt][n][2 * r], s[mt][n][2 * r + 1]));
                    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
                    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
                    const float mnew = fmaxf(mrow[mt][r], mx);
                    mc[r] = (mnew == NEG_INF) ? 0.0f : mnew * c;   // a row with nothing visible yet
                    const float alpha = exp_c<EXACT>(mrow[mt][r], c, mc[r]);
                    mrow[mt][r] = mnew;
                    lrow[mt][r] *= alpha;
#pragma unroll
                    for (int n = 0; n < HS / 8; ++n) {
                        o[mt][n][2 * r] *= alpha;
                        o[mt][n][2 * r + 1] *= alpha;
                    }
                }
#pragma unroll
                for (int n = 0; n < NT; ++n)
#pragma unroll
                    for (int e = 0; e < 4; ++e) {
                        const float p = exp_c<EXACT>(s[mt][n][e], c, mc[e >> 1]);   // 0 where masked
                        lrow[mt][e >> 1] += p;
                        s[mt][n][e] = p;
                    }
            }
            if constexpr (DROP) {
#pragma unroll
                for (int mt = 0; mt < MT; ++mt)
#pragma unroll
                    for (int n = 0; n < NT; ++n)
#pragma unroll
                        for (int e = 0; e < 4; ++e) s[mt][n][e] *= keep(mt, n, e) ? drop.scale : 0.0f;
            }
            acc_product<K, SPLIT, HS, MT, NT>(o, s, sV, lane);   // O += Pd v
        }
        kv.release();
    }
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
        for (int r = 0; r < 2; ++r) {
            float l = lrow[mt][r];
            l += __shfl_xor_sync(0xffffffffu, l, 1);
            l += __shfl_xor_sync(0xffffffffu, l, 2);
            const int i = r0 + 16 * mt + g + 8 * r;
            if (i >= T) continue;
            const float inv = 1.0f / l;
            const i64 at = ((i64)b * T + i) * C + h * HS + 2 * t;
#pragma unroll
            for (int n = 0; n < HS / 8; ++n)
                store_pair(out, at + n * 8, o[mt][n][2 * r] * inv, o[mt][n][2 * r + 1] * inv, out_kind);
            if (t == 0) lse[(i64)bh * T + i] = mrow[mt][r] * scale + logf(l);
        }
}

// ---------------------------------------------------------------------------------------------- forward on wgmma
// The half builds under half roundings, HS = 64, on Hopper (the file is compiled for sm_90a there: gpu/cubins.py):
// the same algorithm as attention_forward, its products on warpgroup MMA (wgmma.mma_async). A block is one
// warpgroup (4 warps) owning 64 queries, warp w rows 16w..16w+15; it streams 64-key tiles. S = q k^T takes both
// q and k from shared memory; O += Pd v takes Pd from registers (the scores' accumulator layout is the A layout,
// as in mma.sync) and v from shared memory read transposed. The
// tensor cores read the tiles themselves (no ldmatrix of B fragments: the mma.sync kernel spent about half of its
// instructions on them), and the registers hold 64 rows a block instead of 128: more warps an SM hide latency.
// wgmma reads shared memory in 8 x 16-byte "core matrices": a staged k or v tile keeps each group of 8 rows x 8
// columns as 128 contiguous bytes (group (r / 8, c / 8) at ((r / 8) * HS / 8 + c / 8) * 128 bytes); for S the
// tile is B "K-major" (k's columns are the product's k), for Pd v "MN-major" (transposed).
// Accumulator fragment of m64nNk16, warp w: register 4n + e holds row 16w + g + 8 (e >> 1), column 8n + 2t + (e & 1):
// mma.sync's C layout for n8 tile n, so the softmax below is the mma.sync kernel's with MT = 1.
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define ATTN_WGMMA 1
#endif

// The warpgroup index, read back from lane 0 (ATTN_UNIFORM_WG, sixty-seventh session): the same number in every lane,
// so the same descriptors, products and bits. Why: computed from threadIdx.x the compiler cannot prove it warp-uniform,
// so every shared-memory address derived from it (the q, k, v, dO and dS^T boxes a warpgroup reads) is built in
// ordinary registers and moved to uniform ones (R2UR) before each warpgroup product, and the consumer loops branch as
// if divergent (BRA.DIV). Read back by a shuffle, the addresses stay on the uniform datapath: the key-tile loop of the
// TMA forward 610 -> 543 instructions, the resident dK/dV's 835 -> 751 (grouped: 750), the chained dK/dV's 1470 -> 1326,
// the one-warpgroup wgmma forward's 553 -> 525 (NVRTC 12.9's SASS, results/cpu-checks-20261208b/uniform_wg_sass.txt;
// not yet run on a GPU: docs/perf.md, sixty-seventh session). Off (0, the code as before) until a GPU call has run the
// kernel cases and the graph = eager test with it on and timed it; the build with it on is commit 19e270c's.
// ATTN_UNIFORM_WG_F32 does the same for the float32 wgmma kernels (attention_forward_wgf, attention_backward_dkdv_wgf,
// _dq_wgf; sixty-eighth session, results/cpu-checks-20261208d), apart so that each is turned on after its own check.
#define ATTN_UNIFORM_WG 0
#define ATTN_UNIFORM_WG_F32 0
template <bool UNIFORM>
__device__ __forceinline__ int warpgroup_index_if() {
    return UNIFORM ? __shfl_sync(0xffffffffu, (int)(threadIdx.x >> 7), 0) : (int)(threadIdx.x >> 7);
}
__device__ __forceinline__ int warpgroup_index() { return warpgroup_index_if<ATTN_UNIFORM_WG != 0>(); }
__device__ __forceinline__ int warpgroup_index_f32() { return warpgroup_index_if<ATTN_UNIFORM_WG_F32 != 0>(); }

// A shared-memory matrix descriptor without swizzle: start address, LBO and SBO (bytes, 16-byte units), layout 0.
__device__ __forceinline__ u64 wg_desc(const void* p, u32 lbo, u32 sbo) {
    const u64 addr = (u64)(u32)__cvta_generic_to_shared(p);
    return ((addr & 0x3FFFFu) >> 4) | ((u64)((lbo & 0x3FFFFu) >> 4) << 16) | ((u64)((sbo & 0x3FFFFu) >> 4) << 32);
}
__device__ __forceinline__ void wg_fence() { asm volatile("wgmma.fence.sync.aligned;" ::: "memory"); }
__device__ __forceinline__ void wg_commit() { asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory"); }
__device__ __forceinline__ void wg_wait_all() { asm volatile("wgmma.wait_group.sync.aligned 0;" ::: "memory"); }
// cp.async and ordinary stores write shared memory through the generic proxy, wgmma reads it through the async one
__device__ __forceinline__ void fence_proxy_async() { asm volatile("fence.proxy.async.shared::cta;" ::: "memory"); }
// After wgmma.wait_group: the accumulators are read no earlier than here.
template <int N> __device__ __forceinline__ void wg_hold(float (&v)[N][4]) {
#pragma unroll
    for (int n = 0; n < N; ++n)
#pragma unroll
        for (int e = 0; e < 4; ++e) asm volatile("" : "+f"(v[n][e])::"memory");
}

// Accumulators (the m64 C layout: register n holds columns 8n.., e its four elements) as wgmma A fragments in the
// half type K, k16 slice by slice (c_to_a's half case): how every wgmma kernel hands P, Pd or dS to its next product.
template <int K, int NT>
__device__ __forceinline__ void pack_a(u32 (&a)[NT / 2][4], const float (&v)[NT][4]) {
#pragma unroll
    for (int k16 = 0; k16 < NT / 2; ++k16) {
        a[k16][0] = pack2<K>(v[2 * k16][0], v[2 * k16][1]);
        a[k16][1] = pack2<K>(v[2 * k16][2], v[2 * k16][3]);
        a[k16][2] = pack2<K>(v[2 * k16 + 1][0], v[2 * k16 + 1][1]);
        a[k16][3] = pack2<K>(v[2 * k16 + 1][2], v[2 * k16 + 1][3]);
    }
}

#define WG_D32 "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, " \
               "%21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}"
#define WG_D32_ARGS(d)                                                                                         \
    "+f"(d[0][0]), "+f"(d[0][1]), "+f"(d[0][2]), "+f"(d[0][3]), "+f"(d[1][0]), "+f"(d[1][1]), "+f"(d[1][2]),   \
    "+f"(d[1][3]), "+f"(d[2][0]), "+f"(d[2][1]), "+f"(d[2][2]), "+f"(d[2][3]), "+f"(d[3][0]), "+f"(d[3][1]),   \
    "+f"(d[3][2]), "+f"(d[3][3]), "+f"(d[4][0]), "+f"(d[4][1]), "+f"(d[4][2]), "+f"(d[4][3]), "+f"(d[5][0]),   \
    "+f"(d[5][1]), "+f"(d[5][2]), "+f"(d[5][3]), "+f"(d[6][0]), "+f"(d[6][1]), "+f"(d[6][2]), "+f"(d[6][3]),   \
    "+f"(d[7][0]), "+f"(d[7][1]), "+f"(d[7][2]), "+f"(d[7][3])
#define WG_MMA(TYPE, TRANS)                                                                                    \
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"                                                 \
                 "wgmma.mma_async.sync.aligned.m64n64k16.f32." TYPE "." TYPE " " WG_D32                       \
                 ", {%32, %33, %34, %35}, %36, p, 1, 1, " #TRANS ";\n}\n"                                      \
                 : WG_D32_ARGS(d) : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc), "r"(accumulate))

// d (64 x 64, a warp's 16 rows as 8 n8 tiles) = a (64 x 16, registers) b (16 x 64, shared memory) + (accumulate ? d : 0).
// TRANS: b is stored MN-major (its rows are the product's k), else K-major.
template <int K, bool TRANS>
__device__ __forceinline__ void wg_mma(float (&d)[8][4], const u32 (&a)[4], u64 desc, int accumulate) {
#ifdef ATTN_WGMMA
    if constexpr (K == KIND_BF16) {
        if constexpr (TRANS) WG_MMA("bf16", 1); else WG_MMA("bf16", 0);
    } else {
        if constexpr (TRANS) WG_MMA("f16", 1); else WG_MMA("f16", 0);
    }
#endif
}

// d = a b + (accumulate ? d : 0) with a (64 x 16) in shared memory too, both K-major. (q as register fragments,
// loaded once before the loop, lost its registers to Pd's in ptxas's allocation: every tile after the first read
// Pd as q. Read from shared memory, q needs no registers at all.)
// TRANS: the transpose flags of a and b ("0, 0": both K-major; "1, 1": both MN-major, wg_mma_ss_tt).
#define WG_MMA_SS(TYPE, TRANS)                                                                                 \
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"                                                \
                 "wgmma.mma_async.sync.aligned.m64n64k16.f32." TYPE "." TYPE " " WG_D32                       \
                 ", %32, %33, p, 1, 1, " TRANS ";\n}\n"                                                       \
                 : WG_D32_ARGS(d) : "l"(desc_a), "l"(desc_b), "r"(accumulate))
template <int K>
__device__ __forceinline__ void wg_mma_ss(float (&d)[8][4], u64 desc_a, u64 desc_b, int accumulate) {
#ifdef ATTN_WGMMA
    if constexpr (K == KIND_BF16) WG_MMA_SS("bf16", "0, 0");
    else WG_MMA_SS("f16", "0, 0");
#endif
}
// d = a b + (accumulate ? d : 0), a (64 x 16) and b (16 x 64) in shared memory, both MN-major (transposed).
template <int K>
__device__ __forceinline__ void wg_mma_ss_tt(float (&d)[8][4], u64 desc_a, u64 desc_b, int accumulate) {
#ifdef ATTN_WGMMA
    if constexpr (K == KIND_BF16) WG_MMA_SS("bf16", "1, 1");
    else WG_MMA_SS("f16", "1, 1");
#endif
}

// ROWS rows x HS columns of a [B, T, stride] half array into the core-matrix layout (above), by cp.async. A warp's
// instruction copies 8 rows x 4 chunks: 64 contiguous bytes of each row read, and its eight-lane phases write
// eight different rows of a core matrix (distinct banks). Rows at or past T are zeros.
template <int HS, int ROWS, int THREADS>
__device__ __forceinline__ void stage_core(u16* s, const u16* __restrict__ src, int row0, int T, int stride) {
    constexpr int CH = HS / 8, EACH = ROWS * CH / THREADS;
    static_assert(CH % 4 == 0 && ROWS * CH % THREADS == 0, "whole warp instructions of 8 rows x 4 chunks");
#pragma unroll
    for (int k = 0; k < EACH; ++k) {
        const int idx = threadIdx.x + k * THREADS, rest = idx >> 5;
        const int r = (rest / (CH / 4)) * 8 + (idx & 7), c = (rest % (CH / 4)) * 4 + ((idx >> 3) & 3);
        u16* d = s + ((r >> 3) * CH + c) * 64 + (r & 7) * 8;
        if (row0 + r < T) cp_async16(d, src + (i64)(row0 + r) * stride + c * 8);
        else *(uint4*)d = make_uint4(0u, 0u, 0u, 0u);
    }
}

// NWG warpgroups a block (64 queries each) share the streamed k and v tiles. Measured (call 3 of
// results/h200-perf-20261201d, one process, against the mma.sync forward): nanogpt (T = 256) x0.82 with one, x0.87
// with two; gpt2-small and gpt2-medium (T = 1024) x1.48 and x1.12-1.13: on long rows each warpgroup waits on every
// product before the softmax that follows it (no product of the next tile in flight, as FlashAttention-3 keeps).
// v_lbo, v_sbo: the v tile's descriptor strides (the MN-major layout's two offsets; gpu/attention.py says which).
template <int K, int HS, int NWG, bool DROP>
__device__ void attention_forward_wg(void* __restrict__ out, float* __restrict__ lse, const u16* __restrict__ qkv,
                                     int T, int H, int out_kind, Dropout drop, u32 v_lbo, u32 v_sbo) {
#ifdef ATTN_WGMMA
    constexpr float scale = Scale<HS>::value, c = scale * LOG2E;
    constexpr int BR = 64 * NWG, BC = 64, NT = BC / 8, CH = HS / 8, TILE = BC * HS, THREADS = 128 * NWG;
    static_assert(HS == 64, "one m64n64k16 a k16 slice of the scores");
    extern __shared__ __align__(128) unsigned char smem[];
    u16* sKV = (u16*)smem;          // buffer b: k at sKV + 2b TILE, v at sKV + (2b + 1) TILE (core matrices)
    u16* sQ = sKV + 4 * TILE;       // core matrices too: the scores' A operand is read from shared memory
    const int nqb = (T + BR - 1) / BR;
    const int qb = nqb - 1 - (int)blockIdx.y;   // the longest rows first (Grid, at the top)
    const int bh = blockIdx.x, b = bh / H, h = bh % H, C = H * HS;
    const int wg = warpgroup_index(), warp = (threadIdx.x >> 5) & 3, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    const int q0 = qb * BR + wg * 64;           // the warpgroup's first query
    const int r0 = q0 + warp * 16;              // the warp's
    const u16* base = qkv + (i64)b * T * 3 * C;
    const int last = min(qb * BR + BR - 1, T - 1) / BC;   // the block's last key tile
    const int wg_last = min(q0 + 63, T - 1) / BC;        // the warpgroup's (its later ones are masked whole)
    const u16* sQw = sQ + wg * 8 * CH * 64;     // the warpgroup's 64 rows: eight row groups of core matrices
    auto stage_kv = [&](int kb, int buf) {
        stage_core<HS, BC, THREADS>(sKV + 2 * buf * TILE, base + C + h * HS, kb * BC, T, 3 * C);
        stage_core<HS, BC, THREADS>(sKV + (2 * buf + 1) * TILE, base + 2 * C + h * HS, kb * BC, T, 3 * C);
    };
    stage_core<HS, BR, THREADS>(sQ, base + h * HS, qb * BR, T, 3 * C);
    stage_kv(0, 0);
    cp_async_commit();
    float o[HS / 8][4];
    float mrow[2] = {NEG_INF, NEG_INF}, lrow[2] = {0.0f, 0.0f};
#pragma unroll
    for (int n = 0; n < HS / 8; ++n) o[n][0] = o[n][1] = o[n][2] = o[n][3] = 0.0f;

    for (int kb = 0; kb <= last; ++kb) {
        const int cur = kb & 1;
        if (kb < last) {   // the next tile loads while this one computes
            stage_kv(kb + 1, cur ^ 1);
            cp_async_commit();
            cp_async_wait<1>();
        } else {
            cp_async_wait<0>();
        }
        fence_proxy_async();
        __syncthreads();
        if (kb > wg_last) {   // the whole warpgroup's queries come before the tile's keys (uniform in the warpgroup)
            __syncthreads();
            continue;
        }
        const u16* sK = sKV + 2 * cur * TILE;
        const u16* sV = sK + TILE;
        auto at = [&](int, int n, int e, int& i, int& j) {   // register (n, e): query i, key j
            i = r0 + g + 8 * (e >> 1);
            j = kb * BC + n * 8 + 2 * t + (e & 1);
        };
        const bool edge = kb * BC + BC - 1 > r0 || kb * BC + BC > T;   // the warp's rows cross the diagonal or T
        KeepBits<1, NT> keep{};
        if constexpr (DROP) keep = drop.keep_bits<ROW_PAIRS, 1, NT>(bh, T, edge, at);
        float s[NT][4];
        wg_fence();
#pragma unroll
        for (int k16 = 0; k16 < HS / 16; ++k16)   // S = q k^T: k16 slice = core-matrix columns 2 k16, 2 k16 + 1
            wg_mma_ss<K>(s, wg_desc(sQw + 2 * k16 * 64, 128, CH * 128), wg_desc(sK + 2 * k16 * 64, 128, CH * 128), k16 > 0);
        wg_commit();
        wg_wait_all();
        wg_hold(s);
        if (edge) {
#pragma unroll
            for (int n = 0; n < NT; ++n)
#pragma unroll
                for (int e = 0; e < 4; ++e) {
                    int i, j;
                    at(0, n, e, i, j);
                    if (j > i || j >= T) s[n][e] = NEG_INF;
                }
        }
        float mc[2];
#pragma unroll
        for (int r = 0; r < 2; ++r) {
            float mx = NEG_INF;
#pragma unroll
            for (int n = 0; n < NT; ++n) mx = fmaxf(mx, fmaxf(s[n][2 * r], s[n][2 * r + 1]));
            mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
            mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
            const float mnew = fmaxf(mrow[r], mx);
            mc[r] = (mnew == NEG_INF) ? 0.0f : mnew * c;   // a row with nothing visible yet
            const float alpha = exp_c<false>(mrow[r], c, mc[r]);
            mrow[r] = mnew;
            lrow[r] *= alpha;
#pragma unroll
            for (int n = 0; n < HS / 8; ++n) {
                o[n][2 * r] *= alpha;
                o[n][2 * r + 1] *= alpha;
            }
        }
#pragma unroll
        for (int n = 0; n < NT; ++n)
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                const float p = exp_c<false>(s[n][e], c, mc[e >> 1]);   // 0 where masked
                lrow[e >> 1] += p;
                s[n][e] = p;
            }
        if constexpr (DROP) {
#pragma unroll
            for (int n = 0; n < NT; ++n)
#pragma unroll
                for (int e = 0; e < 4; ++e) s[n][e] *= keep(0, n, e) ? drop.scale : 0.0f;
        }
        u32 pf[NT / 2][4];   // Pd as A fragments, rounded to the half type (c_to_a's half case)
        pack_a<K, NT>(pf, s);
        wg_fence();
#pragma unroll
        for (int k16 = 0; k16 < NT / 2; ++k16)   // O += Pd v: k16 slice = keys 16 k16.. = core-matrix rows 2 k16, +1
            wg_mma<K, true>(o, pf[k16], wg_desc(sV + 2 * k16 * CH * 64, v_lbo, v_sbo), 1);
        wg_commit();
        wg_wait_all();
        wg_hold(o);
        __syncthreads();   // every warp's reads of this buffer are done before the next iteration refills it
    }
#pragma unroll
    for (int r = 0; r < 2; ++r) {
        float l = lrow[r];
        l += __shfl_xor_sync(0xffffffffu, l, 1);
        l += __shfl_xor_sync(0xffffffffu, l, 2);
        const int i = r0 + g + 8 * r;
        if (i >= T) continue;
        const float inv = 1.0f / l;
        const i64 at = ((i64)b * T + i) * C + h * HS + 2 * t;
#pragma unroll
        for (int n = 0; n < HS / 8; ++n) store_pair(out, at + n * 8, o[n][2 * r] * inv, o[n][2 * r + 1] * inv, out_kind);
        if (t == 0) lse[(i64)bh * T + i] = mrow[r] * scale + logf(l);
    }
#else
    __trap();   // launched only where the file was built for sm_90a (gpu/attention.py)
#endif
}

// ---------------------------------------------------------------------------------------------- float32 forward on wgmma
// The float32 builds (tf32: one TF32 product; f32: TF32 pairs, three products), HS = 64, on Hopper (sm_90a):
// attention_forward's algorithm and arithmetic order with its products on warpgroup MMA, m64n64k8 in TF32. NWG
// warpgroups a block, 64 queries each (warp w rows 16w..16w+15); the block streams 64-key tiles into two buffers.
// Why: the mma.sync float32 kernels were bound by their instructions, not the tensor cores (gpt2-small's forward on an
// H100, 0.222 ms a layer with one TF32 product, 58 TFLOP/s, and 0.365 with pairs: docs/perf.md, forty-sixth
// session): every warp loaded and split (pairs) or rounded each B element it read, the four warps of a block the same
// elements, and moved Pd between lanes by eight shuffles a slice. Here the tensor cores read the staged tiles
// themselves, each element is rounded or split once a block, where it is staged, and Pd needs no shuffles (below).
// TF32 wgmma reads both operands K-major only: q and k are staged as they lie (rows queries or keys, the product's
// k = d contiguous), v transposed (rows d, the product's k = keys contiguous). The transposed v puts key 2t of each
// 8-key group at position t and key 2t + 1 at position t + 4: a thread's accumulator holds keys 2t and 2t + 1 of an
// n8 tile (registers e = 0, 1; rows g and g + 8 in e = 2, 3), where the A fragment of a k8 slice wants columns t and
// t + 4, so in that key order the scores' accumulator is Pd's A fragment register for register (a0 = e0, a1 = e2,
// a2 = e1, a3 = e3). The order changes which products the tensor core adds within a slice, not which slices.
// Staged tiles hold TF32 values (the tf32 build's operands rounded, ties to even; the exact build's as hi and lo
// tiles, x = hi + lo), in core matrices (8 rows x 4 floats, 128 contiguous bytes; CH = 16 chunks of 16 bytes a row).
// The exact build sums each tile's Pd v apart and adds it to O with ordinary float adds, as acc_product does.
// The masks and the online softmax are attention_forward_wg's lines, repeated rather than shared: a function shared
// by the two changed attention_forward_wg's machine code (the char model's half-type forward; its two kernels 98560 ->
// 98432 bytes of SASS when tried in the forty-seventh session), as the TMA forward found before (its header, below).
// Shared memory: q (NP pieces), two buffers of k and v^T (NP pieces each), one landing buffer of a raw k and v tile.
// Measured (H100s, docs/perf.md, forty-seventh session): with pairs x0.64-0.81 of the mma.sync forward's time, with one
// TF32 product about level with it. Nsight Compute (gpt2-small, one TF32 product): the tensor pipe busy 18% of the
// time, one instruction issued in 22% of a scheduler's cycles; two warps a scheduler (registers: one block of 256
// threads an SM) wait on shared memory and the exponentials (short scoreboard), fixed latencies, the landing's
// 4-byte copies of v (the LSU queue; since replaced: LandCols) and the tile's barrier, each warp issuing about 610
// instructions a 64 x 64 tile.

__device__ __forceinline__ float4 tf32_hi(float4 x) {
    return make_float4(tf32_rne(x.x), tf32_rne(x.y), tf32_rne(x.z), tf32_rne(x.w));
}
__device__ __forceinline__ float4 tf32_lo(float4 x, float4 h) {
    return make_float4(tf32_rne(x.x - h.x), tf32_rne(x.y - h.y), tf32_rne(x.z - h.z), tf32_rne(x.w - h.w));
}

// Staging in two steps, so that the loads are in flight a whole tile ahead: land copies a tile's raw float32 by
// cp.async into a landing buffer, each thread the elements it will itself round later (q, k: laid out as the staged
// tile) or its warp will (v: the warp's rows, below), so no block barrier stands between the copy and the rounding
// (cp.async.wait_group makes a thread's own copies visible to it, __syncwarp its warp's); fill rounds (tf32) or
// splits (pairs) each landed element into the tiles the tensor cores read. Rows at or past T land as zeros. (Staging
// straight from global memory left the warps waiting on those loads every tile: 38% of the stalls of the first draft
// under Nsight Compute, gpt2-small, results/h100-perf-20261206b call 3.)
// Rows (q, k), K-major: thread idx's 16 bytes (row group (idx >> 3) / CH, chunk (idx >> 3) % CH, row idx & 7) lie at
// floats 4 idx, so a warp fills four whole core matrices, reading 64 contiguous bytes of each of eight rows. A thread's
// k-th 16 bytes (idx = tid + k THREADS) lie STEP rows below its first: its offsets are worked out once a kernel (the
// first draft's per-element address arithmetic was most of its loop's instructions), and only tiles that reach past
// T test their rows (FULL: the tile lies within T).
template <int HS, int ROWS, int THREADS>
struct LandRows {
    static constexpr int CH = HS / 4, EACH = ROWS * CH / THREADS, STEP = THREADS / CH;
    static_assert(ROWS * CH % THREADS == 0 && THREADS % (8 * CH) == 0, "whole row groups a round of the threads");
    int r0, off;   // the thread's first row, and its first element's offset from the tile's first
    __device__ __forceinline__ explicit LandRows(int stride) {
        r0 = ((threadIdx.x >> 3) / CH) * 8 + (threadIdx.x & 7);
        off = r0 * stride + 4 * ((threadIdx.x >> 3) % CH);
    }
    template <bool FULL>
    __device__ __forceinline__ void land(float* dst, const float* __restrict__ tile, int rows_left, int stride) const {
#pragma unroll
        for (int k = 0; k < EACH; ++k) {
            float* d = dst + 4 * (threadIdx.x + k * THREADS);
            if (FULL || r0 + k * STEP < rows_left) cp_async16(d, tile + off + k * STEP * stride);
            else *(float4*)d = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        }
    }
};
template <bool SPLIT, int HS, int ROWS, int THREADS>
__device__ __forceinline__ void fill_rows(float* hi, float* lo, const float* land) {
    constexpr int EACH = ROWS * (HS / 4) / THREADS;
#pragma unroll
    for (int k = 0; k < EACH; ++k) {
        const int idx = threadIdx.x + k * THREADS;
        const float4 x = *(const float4*)(land + 4 * idx);
        const float4 h = tf32_hi(x);
        *(float4*)(hi + 4 * idx) = h;
        if constexpr (SPLIT) *(float4*)(lo + 4 * idx) = tf32_lo(x, h);
    }
}
// v transposed: tile row d, position p of key j (the order above). A warp fills one core matrix an instruction,
// lane (d & 7) * 4 + (p & 3) at float 32 cm + lane (all 32 banks). Warp w's k-th core matrix is cm = w + k WARPS: d
// group k / R, chunk w + (k % R) WARPS of its row (R = CHK / WARPS), so the warp reads 4 R keys, key (w >> 1) 8 +
// 2 t' + (w & 1) + 4 WARPS m for t' < 4, m < R, and all HS columns of each. The warp lands those rows itself, 16 bytes
// a copy, into rows t' + 4 m of its own part of the landing buffer (pitch LDV = HS + 8 floats: its transposing reads,
// lanes over t' and d, hit 32 banks); so the fill needs the warp's own copies only (__syncwarp, no block barrier),
// and the next landing waits on nothing but the warp's fill. (Four-byte copies straight into the transposed layout,
// as first written, filled the LSU queue: 1.06 of the 7.4 cycles between a warp's issues, call 6 of
// results/h100-perf-20261206b.)
template <int HS, int ROWS, int THREADS>
struct LandCols {
    static constexpr int CHK = ROWS / 4, WARPS = THREADS / 32, R = CHK / WARPS, EACH = (HS / 8) * CHK / WARPS;
    static constexpr int LDV = HS + 8, WROWS = 4 * R, CPR = HS / 4;   // pitch; a warp's rows; 16-byte chunks a row
    static constexpr int LAND = WROWS * CPR / 32;                      // a lane's copies a tile
    static_assert(CHK % WARPS == 0 && WARPS % 2 == 0 && WROWS * CPR % 32 == 0, "whole rounds");
    static_assert(CPR == 16, "a lane's rows r0 + 2 i (r0 = lane / 16): row & 3 = r0 + 2 (i & 1), row >> 2 = i >> 1");
    int key, src0, dst0;   // a lane's first row: its key, its source (from the tile's row 0), its landing place
    __device__ __forceinline__ explicit LandCols(int stride) {
        const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, r0 = lane / CPR;
        key = (warp >> 1) * 8 + (warp & 1) + 2 * r0;   // the warp's first key, plus row r0's: 2 (r0 & 3)
        src0 = key * stride + 4 * (lane % CPR);
        dst0 = (warp * WROWS + r0) * LDV + 4 * (lane % CPR);
    }
    template <bool FULL>
    __device__ __forceinline__ void land(float* dst, const float* __restrict__ tile, int rows_left, int stride) const {
#pragma unroll
        for (int i = 0; i < LAND; ++i) {   // the lane's rows r0 + 2 i: keys 4 (i & 1) + 4 WARPS (i >> 1) past its first
            const int dkey = 4 * (i & 1) + 4 * WARPS * (i >> 1);
            float* d = dst + dst0 + 2 * i * LDV;
            if (FULL || key + dkey < rows_left) cp_async16(d, tile + src0 + dkey * stride);
            else *(float4*)d = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        }
    }
    // Lane (t', d & 7)'s element k: row t' + 4 (k % R), column (k / R) 8 + (lane >> 2), to the core matrix's float at
    // tid + k THREADS (as cm * 32 + lane).
    template <bool SPLIT>
    __device__ __forceinline__ void fill(float* hi, float* lo, const float* land) const {
        const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
        const float* src = land + warp * WROWS * LDV + (lane & 3) * LDV + (lane >> 2);
#pragma unroll
        for (int k = 0; k < EACH; ++k) {
            const int at = threadIdx.x + k * THREADS;
            const float x = src[(k % R) * 4 * LDV + (k / R) * 8], hx = tf32_rne(x);
            hi[at] = hx;
            if constexpr (SPLIT) lo[at] = tf32_rne(x - hx);
        }
    }
};
// The thread's copies landed (cp.async.wait_group, the compiler told that shared memory changed), then the warp's:
// the fill reads its own copies (q, k) and its warp's (v).
__device__ __forceinline__ void cp_async_landed() {
    asm volatile("cp.async.wait_group 0;" ::: "memory");
    __syncwarp();
}

// d (64 x 64) = a b + (accumulate ? d : 0), one k8 slice in TF32: a from shared memory (wg_mma_ss_tf32) or registers
// (wg_mma_tf32, the A fragment as described above), b from shared memory, both K-major.
#define WG_MMA_SS_TF32                                                                                          \
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"                                                \
                 "wgmma.mma_async.sync.aligned.m64n64k8.f32.tf32.tf32 " WG_D32 ", %32, %33, p, 1, 1;\n}\n"   \
                 : WG_D32_ARGS(d) : "l"(desc_a), "l"(desc_b), "r"(accumulate))
#define WG_MMA_RS_TF32                                                                                          \
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"                                                \
                 "wgmma.mma_async.sync.aligned.m64n64k8.f32.tf32.tf32 " WG_D32                                \
                 ", {%32, %33, %34, %35}, %36, p, 1, 1;\n}\n"                                                  \
                 : WG_D32_ARGS(d) : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(accumulate))
__device__ __forceinline__ void wg_mma_ss_tf32(float (&d)[8][4], u64 desc_a, u64 desc_b, int accumulate) {
#ifdef ATTN_WGMMA
    WG_MMA_SS_TF32;
#endif
}
__device__ __forceinline__ void wg_mma_tf32(float (&d)[8][4], const u32 (&a)[4], u64 desc_b, int accumulate) {
#ifdef ATTN_WGMMA
    WG_MMA_RS_TF32;
#endif
}

// d (64 x 64) = a b^T over HS = 64 columns, one TF32 product: a and b two staged K-major tiles of 64 rows (core
// matrices, 16 chunks a row), eight k8 slices in order. The backward's scores and their gradients (dK/dV, dQ).
__device__ __forceinline__ void wg_mma_rows_tf32(float (&d)[8][4], const float* a, const float* b) {
#pragma unroll
    for (int k8 = 0; k8 < 8; ++k8)
        wg_mma_ss_tf32(d, wg_desc(a + 2 * k8 * 32, 128, 16 * 128), wg_desc(b + 2 * k8 * 32, 128, 16 * 128), k8 > 0);
}

// The exact build's product of pieces, smallest first (as mma_acc): lo hi, hi lo, hi hi.
template <int HS, int NWG, bool SPLIT, bool DROP>
__device__ void attention_forward_wgf(float* __restrict__ out, float* __restrict__ lse, const float* __restrict__ qkv,
                                      int T, int H, Dropout drop) {
#ifdef ATTN_WGMMA
    constexpr bool EXACT = SPLIT;
    constexpr float scale = Scale<HS>::value, c = EXACT ? scale : scale * LOG2E;
    constexpr int BR = 64 * NWG, BC = 64, NT = BC / 8, CH = HS / 4, CHK = BC / 4, THREADS = 128 * NWG;
    constexpr int NP = SPLIT ? 2 : 1, QT = BR * HS, KT = BC * HS;   // pieces; floats of a q piece, of a k or v piece
    static_assert(HS == 64, "one m64n64k8 a k8 slice of the scores");
    extern __shared__ __align__(128) unsigned char smem[];
    float* sQ = (float*)smem;    // q piece p (0 hi, 1 lo) at sQ + p QT
    float* sKV = sQ + NP * QT;   // buffer b: k piece p at sKV + (2b NP + p) KT, v^T's at sKV + ((2b + 1) NP + p) KT
    float* sLand = sKV + 4 * NP * KT;   // the next tile's raw k (as staged), then v (its warps' rows, padded)
    const int nqb = (T + BR - 1) / BR;
    const int qb = nqb - 1 - (int)blockIdx.y;   // the longest rows first (Grid, at the top)
    const int bh = blockIdx.x, b = bh / H, h = bh % H, C = H * HS;
    const int wg = warpgroup_index_f32(), warp = (threadIdx.x >> 5) & 3, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    const int q0 = qb * BR + wg * 64;   // the warpgroup's first query
    const int r0 = q0 + warp * 16;      // the warp's
    const float* base = qkv + (i64)b * T * 3 * C;
    const int last = min(qb * BR + BR - 1, T - 1) / BC;   // the block's last key tile
    const int wg_last = min(q0 + 63, T - 1) / BC;        // the warpgroup's (its later ones are masked whole)
    const float* sQw = sQ + wg * 64 * HS;                 // the warpgroup's 64 rows: eight row groups of core matrices
    const LandRows<HS, BC, THREADS> krows(3 * C);
    const LandCols<HS, BC, THREADS> vcols(3 * C);
    auto land_kv = [&](int kb) {
        const float* k = base + (i64)kb * BC * 3 * C + C + h * HS;
        if (kb * BC + BC <= T) {
            krows.land<true>(sLand, k, BC, 3 * C);
            vcols.land<true>(sLand + KT, k + C, BC, 3 * C);
        } else {
            krows.land<false>(sLand, k, T - kb * BC, 3 * C);
            vcols.land<false>(sLand + KT, k + C, T - kb * BC, 3 * C);
        }
        cp_async_commit();
    };
    auto fill_kv = [&](int buf) {
        float* k = sKV + 2 * buf * NP * KT;
        fill_rows<SPLIT, HS, BC, THREADS>(k, k + KT, sLand);
        vcols.fill<SPLIT>(k + NP * KT, k + (NP + 1) * KT, sLand + KT);
    };
    LandRows<HS, BR, THREADS>(3 * C).land<false>(sQ + (NP - 1) * QT, base + (i64)qb * BR * 3 * C + h * HS,   // q lands
                                                  T - qb * BR, 3 * C);                                 // in its lo piece
    land_kv(0);
    cp_async_landed();
    fill_rows<SPLIT, HS, BR, THREADS>(sQ, sQ + QT, sQ + (NP - 1) * QT);   // in place: each element read, then written
    fill_kv(0);
    if (last > 0) land_kv(1);
    fence_proxy_async();
    __syncthreads();
    float o[HS / 8][4];
    float mrow[2] = {NEG_INF, NEG_INF}, lrow[2] = {0.0f, 0.0f};
#pragma unroll
    for (int n = 0; n < HS / 8; ++n) o[n][0] = o[n][1] = o[n][2] = o[n][3] = 0.0f;

    for (int kb = 0; kb <= last; ++kb) {
        const int cur = kb & 1;
        const float* sK = sKV + 2 * cur * NP * KT;
        const float* sV = sK + NP * KT;
        auto stage_next = [&]() {   // into the other buffer (its last reader waited at the end of kb - 1), then the
            if (kb < last) {        // tile after it starts landing
                cp_async_landed();
                fill_kv(cur ^ 1);
                if (kb + 1 < last) land_kv(kb + 2);
            }
        };
        if (kb > wg_last) {   // the warpgroup's queries all come before the tile's keys (uniform in the warpgroup)
            stage_next();
        } else {   // S = q k^T, in flight while the next tile is staged (one branch: no product in flight across a join)
            float s[NT][4];
            wg_fence();
#pragma unroll
            for (int k8 = 0; k8 < HS / 8; ++k8) {   // k8 slice = chunks 2 k8, 2 k8 + 1
                const u64 qh = wg_desc(sQw + 2 * k8 * 32, 128, CH * 128), kh = wg_desc(sK + 2 * k8 * 32, 128, CH * 128);
                if constexpr (SPLIT) {
                    const u64 ql = wg_desc(sQw + QT + 2 * k8 * 32, 128, CH * 128);
                    const u64 kl = wg_desc(sK + KT + 2 * k8 * 32, 128, CH * 128);
                    wg_mma_ss_tf32(s, ql, kh, k8 > 0);
                    wg_mma_ss_tf32(s, qh, kl, 1);
                    wg_mma_ss_tf32(s, qh, kh, 1);
                } else {
                    wg_mma_ss_tf32(s, qh, kh, k8 > 0);
                }
            }
            wg_commit();
            stage_next();
            wg_wait_all();
            wg_hold(s);
            auto at = [&](int, int n, int e, int& i, int& j) {   // register (n, e): query i, key j
                i = r0 + g + 8 * (e >> 1);
                j = kb * BC + n * 8 + 2 * t + (e & 1);
            };
            const bool edge = kb * BC + BC - 1 > r0 || kb * BC + BC > T;   // the warp's rows cross the diagonal or T
            KeepBits<1, NT> keep{};
            if constexpr (DROP) keep = drop.keep_bits<ROW_PAIRS, 1, NT>(bh, T, edge, at);
            if (edge) {
#pragma unroll
                for (int n = 0; n < NT; ++n)
#pragma unroll
                    for (int e = 0; e < 4; ++e) {
                        int i, j;
                        at(0, n, e, i, j);
                        if (j > i || j >= T) s[n][e] = NEG_INF;
                    }
            }
            float mc[2];
#pragma unroll
            for (int r = 0; r < 2; ++r) {
                float mx = NEG_INF;
#pragma unroll
                for (int n = 0; n < NT; ++n) mx = fmaxf(mx, fmaxf(s[n][2 * r], s[n][2 * r + 1]));
                mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
                mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
                const float mnew = fmaxf(mrow[r], mx);
                mc[r] = (mnew == NEG_INF) ? 0.0f : mnew * c;   // a row with nothing visible yet
                const float alpha = exp_c<EXACT>(mrow[r], c, mc[r]);
                mrow[r] = mnew;
                lrow[r] *= alpha;
#pragma unroll
                for (int n = 0; n < HS / 8; ++n) {
                    o[n][2 * r] *= alpha;
                    o[n][2 * r + 1] *= alpha;
                }
            }
#pragma unroll
            for (int n = 0; n < NT; ++n)
#pragma unroll
                for (int e = 0; e < 4; ++e) {
                    const float p = exp_c<EXACT>(s[n][e], c, mc[e >> 1]);   // 0 where masked
                    lrow[e >> 1] += p;
                    s[n][e] = p;
                }
            if constexpr (DROP) {
#pragma unroll
                for (int n = 0; n < NT; ++n)
#pragma unroll
                    for (int e = 0; e < 4; ++e) s[n][e] *= keep(0, n, e) ? drop.scale : 0.0f;
            }
            // Pd as A fragments, every slice's before the first product reads one (wgmma reads its registers late)
            u32 ah[NT][4], al[NT][4];
#pragma unroll
            for (int n = 0; n < NT; ++n) {
                const float x[4] = {s[n][0], s[n][2], s[n][1], s[n][3]};
#pragma unroll
                for (int e = 0; e < 4; ++e) tf32_operand<SPLIT, true>(x[e], ah[n][e], al[n][e]);
            }
            float part[SPLIT ? HS / 8 : 1][4];
            wg_fence();
#pragma unroll
            for (int n = 0; n < NT; ++n) {   // O += Pd v: k8 slice n = keys 8n.. = chunks 2n, 2n + 1 of v^T's rows
                const u64 vh = wg_desc(sV + 2 * n * 32, 128, CHK * 128);
                if constexpr (SPLIT) {
                    const u64 vl = wg_desc(sV + KT + 2 * n * 32, 128, CHK * 128);
                    wg_mma_tf32(part, al[n], vh, n > 0);
                    wg_mma_tf32(part, ah[n], vl, 1);
                    wg_mma_tf32(part, ah[n], vh, 1);
                } else {
                    wg_mma_tf32(o, ah[n], vh, 1);
                }
            }
            wg_commit();
            wg_wait_all();
            if constexpr (SPLIT) {
                wg_hold(part);
#pragma unroll
                for (int n = 0; n < HS / 8; ++n)
#pragma unroll
                    for (int e = 0; e < 4; ++e) o[n][e] += part[n][e];
            } else {
                wg_hold(o);
            }
        }
        fence_proxy_async();   // the next tile's stores, seen by the tensor cores' reads
        __syncthreads();       // and every warpgroup done with this buffer before it is refilled
    }
#pragma unroll
    for (int r = 0; r < 2; ++r) {
        float l = lrow[r];
        l += __shfl_xor_sync(0xffffffffu, l, 1);
        l += __shfl_xor_sync(0xffffffffu, l, 2);
        const int i = r0 + g + 8 * r;
        if (i >= T) continue;
        const float inv = 1.0f / l;
        const i64 at = ((i64)b * T + i) * C + h * HS + 2 * t;
#pragma unroll
        for (int n = 0; n < HS / 8; ++n) *(float2*)(out + at + n * 8) = make_float2(o[n][2 * r] * inv, o[n][2 * r + 1] * inv);
        if (t == 0) lse[(i64)bh * T + i] = mrow[r] * scale + logf(l);
    }
#else
    __trap();   // launched only where the file was built for sm_90a (gpu/attention.py)
#endif
}

// ---- the forward with a TMA producer (the design of attention_forward_tma_resident below; its first form, 64-key
// tiles, written in the twelfth session and removed since: the header) ----
// Why: every wgmma form above stages its tiles by cp.async from the warpgroups that also run the products and the
// softmax, into the unswizzled core-matrix layout; the sixth session's profile found the wgmma forward losing on the
// MIO queue, and each schedule since that kept this staging lost to its predecessor (docs/perf.md, twelfth
// session). The ninth session's probe (scripts/probes/tma_wgmma_probe.cu) ran the forward's two products alone at
// 417 TFLOP/s with FlashAttention-3's staging: one producer thread handing whole 64 x 64 boxes to the copy engine
// (TMA) in 128-byte-swizzled shared memory, mbarriers between it and the consumer warpgroups, no block barrier.
// Here: 384 threads and 128 queries of one head a block. Warpgroup 0 is the producer (its thread 0 issues every
// copy: q, then k and v of each key tile into a ring of stages); warpgroups 1 and 2 compute 64 queries each with
// attention_forward_wg's per-tile arithmetic in its order (the masks, the online softmax, the dropout's draws, Pd
// rounded to the half type); only where the operands lie in shared memory differs (the swizzled boxes, read through
// 128B descriptors). Those lines (tma_forward_tile) repeat attention_forward_wg's rather than share a function with
// it: a function shared with that kernel once changed its machine code (the tenth session), and it is the one the char
// model runs. A consumer whose queries end before a tile's keys
// still waits for the tile and releases it, so that both count every phase of the ring's barriers.
// The boxes come from a tensor map over qkv as a (B*T, 3C) matrix (gpu/attention.py encodes it at each launch):
// box rows past T belong to the next sequence (or, past B*T, read as zeros); the masks give them probability 0,
// as the other forms' zero rows.

// The driver's CUtensorMap: opaque, 128 bytes, 64-byte aligned.
struct alignas(64) TensorMap {
    u64 w[16];
};

#include "async_copy.cuh"
// One box at (column c0, row c1) of the map into shared memory, its bytes counted on bar.
__device__ __forceinline__ void tma_load_2d(void* dst, const TensorMap* tmap, u64* bar, int c0, int c1) {
    asm volatile(
        "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];"
        ::"r"(smem_u32(dst)), "l"((u64)tmap), "r"(c0), "r"(c1), "r"(smem_u32(bar)) : "memory");
}
// 128 keys of head h from qkv's map: k's two 64-row boxes at sK, sK + BOX and v's at sV, sV + BOX (rows row.. row+127),
// counted on bar (whose expected bytes the caller sets).
template <int HS>
__device__ __forceinline__ void tma_load_kv128(unsigned char* sK, unsigned char* sV, const TensorMap* tmap, u64* bar,
                                               int C, int h, int row) {
    constexpr int BOX = 64 * HS * 2;
    tma_load_2d(sK, tmap, bar, C + h * HS, row);
    tma_load_2d(sK + BOX, tmap, bar, C + h * HS, row + 64);
    tma_load_2d(sV, tmap, bar, 2 * C + h * HS, row);
    tma_load_2d(sV + BOX, tmap, bar, 2 * C + h * HS, row + 64);
}
// A shared-memory matrix descriptor with the 128-byte swizzle (layout type 1 in bits 62-63). Every box starts on a
// 1024-byte boundary and the k16 steps (+32 bytes K-major, +2048 bytes MN-major) leave address bits 7-9 alone, so
// the base offset stays 0.
__device__ __forceinline__ u64 wg_desc_sw128(u32 saddr, u32 lbo, u32 sbo) {
    return (u64)((saddr & 0x3FFFFu) >> 4) | ((u64)((lbo & 0x3FFFFu) >> 4) << 16) |
           ((u64)((sbo & 0x3FFFFu) >> 4) << 32) | (1ull << 62);
}
// K-major boxes (q, k: the product's k along the 128-byte rows): the leading offset is unused inside a swizzled row
// (16 by convention), 1024 bytes between 8-row groups. MN-major (v for Pd v): the probe's offsets (ninth session).
#define TMA_K_LBO 16
#define TMA_K_SBO 1024
#define TMA_V_LBO 8192
#define TMA_V_SBO 1024

// ---- named barriers of the consumers' turns (tma_forward_tile's TURNS; the ping-pong forms, removed, had more): ids
// as immediates (a register id makes ptxas reserve all sixteen); 0 is __syncthreads'.
#define PP_SCHED0 1
#define PP_SCHED1 2
template <int ID, int N> __device__ __forceinline__ void bar_sync_n() { asm volatile("bar.sync %0, %1;" ::"n"(ID), "n"(N) : "memory"); }
template <int ID, int N> __device__ __forceinline__ void bar_arrive_n() { asm volatile("bar.arrive %0, %1;" ::"n"(ID), "n"(N) : "memory"); }
// The warpgroup's turn to issue, then the other's.
__device__ __forceinline__ void pp_turn_begin(int wg) {
    if (wg == 0) bar_sync_n<PP_SCHED0, 256>();
    else bar_sync_n<PP_SCHED1, 256>();
}
__device__ __forceinline__ void pp_turn_end(int wg) {
    if (wg == 0) bar_arrive_n<PP_SCHED1, 256>();
    else bar_arrive_n<PP_SCHED0, 256>();
}

// ---- the TMA forward's 128-key tiles and register reallocation (form 3, tmaw, written in the eighteenth session;
// kept as its resident form 7 below) ----
// Why: the 64-key TMA form (form 1, removed) took x0.96-1.0 of the mma.sync forward on the GPT-2 shapes while cuDNN's
// forward takes x0.65 (48.7 against 74.5 us a layer of gpt2-small bf16, results/families-20261203-011243-h200-edition).
// Its consumers take 64-key tiles: per tile they pay the row maxima's shuffles, the rescale of O, an mbarrier round and
// two commit-wait rounds for 64 keys, and its S products are m64n64k16. FlashAttention-3's forward for head size 64
// streams 128-key tiles, whose scores and Pd take a consumer thread 48 registers more (122 registers in the 64-key
// form, 164 pipelined, against the 168 a thread of 384 may have), and gives the producer warpgroup's registers to the
// consumers (setmaxnreg: the ninth session's probe, 417 against 367 TFLOP/s for the products alone,
// scripts/probes/tma_wgmma_probe.cu).
// Here: the 64-key form's block (producer warpgroup 0, consumers 1 and 2 with 64 queries each, 128 queries a block,
// the longest rows first) with 128-key tiles, each two 64-key boxes of k and two of v side by side in a stage
// (so one 128B-swizzled descriptor spans the 128 keys: 16 groups of 8 rows at 1024 bytes), S = q k^T by m64n128k16,
// O += Pd v over 8 k16 slices, and setmaxnreg: the producer down to 40 registers, the consumers up to 232.
// Bits: not the 64-key forms'. The online softmax's maxima are taken over 128 keys at a time, so the running maximum,
// the rescale factors and the exponentials' roundings differ from a 64-key form's; out and lse stand within the
// type's tolerance of the NumPy form (tests/test_kernels_gpu.py, "forward_tma_wide"), and three runs give the same
// bits (every sum in a fixed order). The backward reads its lse and out as it reads any form's.
#define FWD_TMAW_STAGES 2

// d (64 x 128, a warp's 16 rows as 16 n8 tiles) = a b + (accumulate ? d : 0), a and b in shared memory, K-major.
#define WG_D64 "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, " \
               "%21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, " \
               "%40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, " \
               "%59, %60, %61, %62, %63}"
#define WG_D64_ROW(d, n) "+f"(d[n][0]), "+f"(d[n][1]), "+f"(d[n][2]), "+f"(d[n][3])
#define WG_D64_ARGS(d)                                                                                         \
    WG_D64_ROW(d, 0), WG_D64_ROW(d, 1), WG_D64_ROW(d, 2), WG_D64_ROW(d, 3), WG_D64_ROW(d, 4), WG_D64_ROW(d, 5), \
    WG_D64_ROW(d, 6), WG_D64_ROW(d, 7), WG_D64_ROW(d, 8), WG_D64_ROW(d, 9), WG_D64_ROW(d, 10),                 \
    WG_D64_ROW(d, 11), WG_D64_ROW(d, 12), WG_D64_ROW(d, 13), WG_D64_ROW(d, 14), WG_D64_ROW(d, 15)
#define WG_MMA_SS128(TYPE)                                                                                     \
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"                                                \
                 "wgmma.mma_async.sync.aligned.m64n128k16.f32." TYPE "." TYPE " " WG_D64                      \
                 ", %64, %65, p, 1, 1, 0, 0;\n}\n"                                                          \
                 : WG_D64_ARGS(d) : "l"(desc_a), "l"(desc_b), "r"(accumulate))
template <int K>
__device__ __forceinline__ void wg_mma_ss(float (&d)[16][4], u64 desc_a, u64 desc_b, int accumulate) {
#ifdef ATTN_WGMMA
    if constexpr (K == KIND_BF16) WG_MMA_SS128("bf16");
    else WG_MMA_SS128("f16");
#endif
}

// One key tile of the resident TMA forward's consumers (attention_forward_tma_resident; the removed TMA forms ran it
// too): S = q k^T, the mask, the online softmax and O += Pd v, each product awaited. q at aq and the stage's k at ak
// (64-query and 64-key boxes, 128B-swizzled), v after k's KB boxes. Inlined, the machine code of the forms it was
// taken from was unchanged (scripts/cubin_text_compare.py, results/cpu-checks-20261203j).
// TURNS (form 8, tmawrt: measured slower in the twenty-seventh session, its kernels removed, so no kernel is built with
// it now): where `turns`, the two consumer warpgroups take turns at the tile's exponentials, cuDNN's
// placement of FlashAttention-3's ping-pong (its fprop's source view, results/h200-perf-20261204b call 1: a bar.sync
// after the row maxima and the two rescale exponentials, a bar.arrive after the last exponential, before Pd v is
// issued; each warpgroup's products stay awaited one by one, as here). So while one warpgroup computes its 64
// exponentials a row pair, the other's Pd v and next S are on the tensor cores, and the MUFU pipe serves one
// warpgroup at a time. Only when the instructions run changes, not what they compute: form 7's bits.
template <int K, int HS, bool DROP, int BC, bool TURNS = false>
__device__ __forceinline__ void tma_forward_tile(float (&o)[HS / 8][4], float (&mrow)[2], float (&lrow)[2], u32 aq,
                                                 u32 ak, int kb, int r0, int g, int t, int T, int bh,
                                                 const Dropout& drop, bool turns = false, int cw = 0) {
    constexpr float c = Scale<HS>::value * LOG2E;
    constexpr int NT = BC / 8, KB = BC / 64, BOX = 64 * HS * 2;
    const u32 av = ak + KB * BOX;
    auto at = [&](int, int n, int e, int& i, int& j) {   // register (n, e): query i, key j
        i = r0 + g + 8 * (e >> 1);
        j = kb * BC + n * 8 + 2 * t + (e & 1);
    };
    const bool edge = kb * BC + BC - 1 > r0 || kb * BC + BC > T;
    KeepBits<1, NT> keep{};
    if constexpr (DROP) keep = drop.keep_bits<ROW_PAIRS, 1, NT>(bh, T, edge, at);
    float sc[NT][4];
    // The tile's three descriptors once, then each k16 slice's by adding its offset to the start-address field
    // (bytes / 16): that is the descriptor wg_desc_sw128 makes of the slice's address, since every box ends below
    // 256 KB and so no field overflows, at a third of the integer instructions a product (the source view of
    // results/h200-perf-20261204b call 1: ~9 of them around each HGMMA of this loop).
    const u64 dq = wg_desc_sw128(aq, TMA_K_LBO, TMA_K_SBO), dk = wg_desc_sw128(ak, TMA_K_LBO, TMA_K_SBO);
    const u64 dv = wg_desc_sw128(av, TMA_V_LBO, TMA_V_SBO);
    wg_fence();
    #pragma unroll
    for (int k16 = 0; k16 < HS / 16; ++k16)   // S = q k^T: a k16 slice is 32 bytes along the swizzled rows
        wg_mma_ss<K>(sc, dq + 32 / 16 * k16, dk + 32 / 16 * k16, k16 > 0);
    wg_commit();
    wg_wait_all();
    wg_hold(sc);
    if (edge) {
        // Key j of query i is masked where j > i or j >= T, that is where j > min(i, T - 1); with j = kb BC + n 8 + 2 t
        // + (e & 1), where the register's column n 8 + (e & 1), a constant of the unrolled loops, exceeds lim[r] of its
        // row: one compare and one select a score (the source view of call 1 of results/h200-perf-20261204b had the
        // diagonal tile and the epilogue at 550 instructions a warp against cuDNN's 390). The same masked set.
        int lim[2];
        #pragma unroll
        for (int r = 0; r < 2; ++r) lim[r] = min(r0 + g + 8 * r, T - 1) - kb * BC - 2 * t;
        #pragma unroll
        for (int n = 0; n < NT; ++n)
            #pragma unroll
            for (int e = 0; e < 4; ++e)
                if (n * 8 + (e & 1) > lim[e >> 1]) sc[n][e] = NEG_INF;
    }
    float mc[2];
    #pragma unroll
    for (int r = 0; r < 2; ++r) {
        float mx = NEG_INF;
        #pragma unroll
        for (int n = 0; n < NT; ++n) mx = fmaxf(mx, fmaxf(sc[n][2 * r], sc[n][2 * r + 1]));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
        const float mnew = fmaxf(mrow[r], mx);
        mc[r] = (mnew == NEG_INF) ? 0.0f : mnew * c;
        const float alpha = exp_c<false>(mrow[r], c, mc[r]);
        mrow[r] = mnew;
        lrow[r] *= alpha;
        #pragma unroll
        for (int n = 0; n < HS / 8; ++n) {
            o[n][2 * r] *= alpha;
            o[n][2 * r + 1] *= alpha;
        }
    }
    if constexpr (TURNS)
        if (turns) pp_turn_begin(cw);
    #pragma unroll
    for (int n = 0; n < NT; ++n)
        #pragma unroll
        for (int e = 0; e < 4; ++e) {
            const float p = exp_c<false>(sc[n][e], c, mc[e >> 1]);
            lrow[e >> 1] += p;
            sc[n][e] = p;
        }
    if constexpr (DROP) {
        #pragma unroll
        for (int n = 0; n < NT; ++n)
            #pragma unroll
            for (int e = 0; e < 4; ++e) sc[n][e] *= keep(0, n, e) ? drop.scale : 0.0f;
    }
    u32 pf[NT / 2][4];
    pack_a<K, NT>(pf, sc);
    if constexpr (TURNS)
        if (turns) pp_turn_end(cw);
    wg_fence();
    #pragma unroll
    for (int k16 = 0; k16 < NT / 2; ++k16)   // O += Pd v: a k16 slice is 16 keys, 2048 bytes of the v box
        wg_mma<K, true>(o, pf[k16], dv + 2048 / 16 * k16, 1);
    wg_commit();
    wg_wait_all();
    wg_hold(o);
}

// The resident kernels' work items (attention_forward_tma_resident, attention_backward_dkdv_tma_resident): a block's
// n-th item is its blockIdx.x first, then the next ticket of sched[0]
// after the grid's first items. resident_done, once the block has drawn its last ticket: the last block to count
// itself in sched[1] sets both back to zero, so the next launch, captured or not, starts from zero (the fence orders
// the block's draws before its count, as the threadfence reduction's last-block pattern).
__device__ __forceinline__ int resident_item(int* sched, int n) {
    return n == 0 ? (int)blockIdx.x : (int)gridDim.x + atomicAdd(&sched[0], 1);
}
__device__ __forceinline__ void resident_done(int* sched) {
    __threadfence();
    if (atomicAdd(&sched[1], 1) == (int)gridDim.x - 1) {
        atomicExch(&sched[0], 0);
        atomicExch(&sched[1], 0);
    }
}

// ---- form 7, tmawr: form 3 resident, one block an SM working through the heads' query blocks ----
// Why: form 3 (tmaw, the same block not resident, removed since) held an SM alone (168 registers x 384 threads), so
// between one of its blocks and the next the SM runs nothing: the block's q load, its first k and v and its first S
// wait with the tensor cores idle, and so do its last Pd v and the epilogue's stores of O and the log-sum-exp. On
// gpt2-medium that is 1024 blocks of 1 to 8 key tiles (4.5 on average) on 132 SMs. Here the grid is one block an SM
// (gpu/attention.py) and each block takes work items, the longest first, as the hardware's scheduler took form 3's
// blocks: item j is query block nqb - 1 - j / BH of head j % BH (form 3's blockIdx.y and .x), the block's first item
// its blockIdx.x and each later one the next ticket of sched[0] (gridDim.x + atomicAdd), so a block that finishes early
// takes the next longest. The producer draws the tickets and loads the next item's q into the other of two q buffers as
// soon as that buffer is released, then its k and v tiles into the ring, whose stage and phase run on across items: the
// next item's loads go on under this item's last products and epilogue. The item's index goes to the consumers beside
// its q (q_item, written before the arrival that q_full's phase waits for); -1 ends them. The last block to finish sets
// sched back to zero (sched[1] counts them), so each launch finds it zero (allocated zeroed, ctx.ws.zeros).
// Which block computes an item changes from run to run; what each item computes does not: every item is form 3's
// block, tile for tile (tma_forward_tile), so form 3's bits ("forward_tma_wide"). Written in the twenty-fourth
// session; its 36 kernel cases and its graph test passed on the H200, alone x0.872 / x0.859 of form 3 on gpt2-small
// / gpt2-medium (results/h200-perf-20261203j, calls 5-8): the default on rows over 256 since.
// TURNS (form 8, tmawrt, measured slower and removed: no kernel is built with it): the consumers take turns at each
// tile's exponentials (tma_forward_tile's TURNS), one alternation over all the block's items: consumer 1 hands consumer
// 0 the first turn before the first item and consumer 0 takes consumer 1's last hand-over after the last, so between
// items consumer 1's latest hand-over is the one arrival pending. Not item by item: consumer 1 can reach the next
// item's first hand-over while warps of consumer 0 are still on their way to take the last one, and a third arrival on
// a barrier of 256 threads would complete it without them (a hang). A turn is taken only after the other's hand-over,
// so no barrier ever holds two arrivals of one consumer. Where consumer 1 has no rows (q0 >= T, the last query block of
// a T that is not a multiple of 128) neither takes turns in that item, and the pending hand-over waits for the next.
template <int K, int HS, bool DROP, int WS, bool TURNS = false>
__device__ void attention_forward_tma_resident(void* __restrict__ out, float* __restrict__ lse, const TensorMap* tmap,
                                               int T, int H, int BH, int* sched, int out_kind, Dropout drop) {
#ifdef ATTN_WGMMA
    constexpr float scale = Scale<HS>::value;
    constexpr int BR = 128, BC = 128, BOX = 64 * HS * 2, S = WS, KB = 2;
    static_assert(HS == 64, "one 128-byte row a key or query: the 128B swizzle's row");
    extern __shared__ __align__(128) unsigned char smem[];
    __shared__ __align__(8) u64 bars[2 * S + 4];
    __shared__ int q_item[2];
    u64* full = bars;              // full[s]: the producer's arrival and the stage's 4 boxes
    u64* empty = bars + S;         // empty[s]: the 8 consumer warps are done with the stage
    u64* q_full = bars + 2 * S;    // q_full[b]: q buffer b's item index written and its 2 boxes arrived
    u64* q_empty = bars + 2 * S + 2;   // q_empty[b]: the 8 consumer warps are done with q buffer b
    unsigned char* base = smem + ((1024u - (smem_u32(smem) & 1023u)) & 1023u);   // the swizzle repeats every 1 KB
    unsigned char* sQ = base;              // q buffer b: consumer c's 64 queries at sQ + (2 b + c) BOX
    unsigned char* sKV = base + 4 * BOX;   // stage s: k at sKV + 4 s BOX, v at + 2 BOX
    const int nqb = (T + BR - 1) / BR, items = BH * nqb, C = H * HS;
    const int wg = warpgroup_index();
    if (threadIdx.x == 0) {
        for (int s = 0; s < S; ++s) {
            mbar_init(&full[s], 1);
            mbar_init(&empty[s], 8);
        }
        for (int b = 0; b < 2; ++b) {
            mbar_init(&q_full[b], 1);
            mbar_init(&q_empty[b], 8);
        }
        mbar_init_fence();
    }
    __syncthreads();
    if (wg == 0) {   // the producer
        asm volatile("setmaxnreg.dec.sync.aligned.u32 40;\n" ::: "memory");
        if (threadIdx.x != 0) return;
        int it = 0;   // key tiles loaded so far, over all items: the ring's stage and phase
        for (int n = 0;; ++n) {
            const int item = resident_item(sched, n);
            const int qs = n & 1;
            if (n >= 2) mbar_wait(&q_empty[qs], ((n >> 1) - 1) & 1);
            q_item[qs] = item < items ? item : -1;
            if (item >= items) {
                mbar_arrive(&q_full[qs]);   // no boxes: the phase completes on this arrival, and the consumers stop
                break;
            }
            const int qb = nqb - 1 - item / BH, bh = item % BH, b = bh / H, h = bh % H, row0 = b * T;
            const int last = min(qb * BR + BR - 1, T - 1) / BC;
            unsigned char* q = sQ + 2 * qs * BOX;
            mbar_expect_tx(&q_full[qs], 2 * BOX);
            tma_load_2d(q, tmap, &q_full[qs], h * HS, row0 + qb * BR);
            tma_load_2d(q + BOX, tmap, &q_full[qs], h * HS, row0 + qb * BR + 64);
            for (int kb = 0; kb <= last; ++kb, ++it) {
                const int s = it % S;
                if (it >= S) mbar_wait(&empty[s], ((it / S) - 1) & 1);
                unsigned char* sK = sKV + 2 * KB * s * BOX;
                mbar_expect_tx(&full[s], 2 * KB * BOX);
                tma_load_kv128<HS>(sK, sK + 2 * BOX, tmap, &full[s], C, h, row0 + kb * BC);
            }
        }
        resident_done(sched);   // every ticket this block will draw is drawn
        return;
    }
    asm volatile("setmaxnreg.inc.sync.aligned.u32 232;\n" ::: "memory");
    const int cw = wg - 1, warp = (threadIdx.x >> 5) & 3, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    if (TURNS && cw == 1) bar_arrive_n<PP_SCHED0, 256>();   // consumer 0 takes the first turn
    int it = 0;
    for (int n = 0;; ++n) {
        const int qs = n & 1;
        mbar_wait(&q_full[qs], (n >> 1) & 1);
        const int item = q_item[qs];
        if (item < 0) break;
        const int qb = nqb - 1 - item / BH, bh = item % BH, b = bh / H, h = bh % H;
        const int last = min(qb * BR + BR - 1, T - 1) / BC;
        const int q0 = qb * BR + cw * 64;           // the warpgroup's first query
        const int r0 = q0 + warp * 16;              // the warp's
        const int wg_last = min(q0 + 63, T - 1) / BC;
        const u32 aq = smem_u32(sQ + (2 * qs + cw) * BOX);
        float o[HS / 8][4];
        float mrow[2] = {NEG_INF, NEG_INF}, lrow[2] = {0.0f, 0.0f};
#pragma unroll
        for (int j = 0; j < HS / 8; ++j) o[j][0] = o[j][1] = o[j][2] = o[j][3] = 0.0f;
        const bool turns = TURNS && qb * BR + 64 < T;   // both consumers have rows, and so every tile
        for (int kb = 0; kb <= last; ++kb, ++it) {
            const int s = it % S;
            mbar_wait(&full[s], (it / S) & 1);
            if (q0 < T && kb <= wg_last)
                tma_forward_tile<K, HS, DROP, BC, TURNS>(o, mrow, lrow, aq, smem_u32(sKV + 2 * KB * s * BOX), kb, r0,
                                                         g, t, T, bh, drop, turns, cw);
            __syncwarp();
            if (lane == 0) mbar_arrive(&empty[s]);   // this warp is done with the stage
        }
        __syncwarp();
        if (lane == 0) mbar_arrive(&q_empty[qs]);   // and with the item's q (its last product has completed)
        if (q0 >= T) continue;
#pragma unroll
        for (int r = 0; r < 2; ++r) {
            float l = lrow[r];
            l += __shfl_xor_sync(0xffffffffu, l, 1);
            l += __shfl_xor_sync(0xffffffffu, l, 2);
            const int i = r0 + g + 8 * r;
            if (i >= T) continue;
            const float inv = 1.0f / l;
            const i64 at = ((i64)b * T + i) * C + h * HS + 2 * t;
#pragma unroll
            for (int j = 0; j < HS / 8; ++j)
                store_pair(out, at + j * 8, o[j][2 * r] * inv, o[j][2 * r + 1] * inv, out_kind);
            if (t == 0) lse[(i64)bh * T + i] = mrow[r] * scale + logf(l);
        }
    }
    if (TURNS && cw == 0) pp_turn_begin(0);   // consumer 1's last hand-over: every arrival met by a sync
#else
    __trap();   // launched only where the file was built for sm_90a (gpu/attention.py)
#endif
}

// ---------------------------------------------------------------------------------------------- backward
// The backward's recomputed probabilities of a warp's block and its score gradient, in place:
// on entry p = the raw scores (q k^T or its transpose) and ds = dPd (dO v^T or its transpose); on exit
// p = Pd = P * keep / (1 - p) and ds = dS = P (dPd * keep / (1 - p) - D), keep from the block's keep bits.
// coords(mt, n, e, i, j, Lc, Dq) gives element (mt, n, e)'s query i and key j, that query's log-sum-exp as
// exp_c wants it (Lc = lse * c / scale) and its row dot. `edge`: the block crosses the diagonal or T, and
// elements outside are zeroed.
template <bool EXACT, bool EDGE, bool DROP, int MT, int NT, typename Coords>
__device__ __forceinline__ void softmax_grad_of(float p[MT][NT][4], float ds[MT][NT][4], int T, float c,
                                                float dscale, const KeepBits<MT, NT>& keep, Coords coords) {
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
        for (int n = 0; n < NT; ++n)
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                int i, j;
                float Lc, Dq;
                coords(mt, n, e, i, j, Lc, Dq);
                const bool inside = !EDGE || (j <= i && i < T && j < T);
                // selected, not multiplied: a masked score may exceed its row's lse and overflow exp
                const float pv = inside ? exp_c<EXACT>(p[mt][n][e], c, Lc) : 0.0f;
                float f = inside ? 1.0f : 0.0f;
                if constexpr (DROP) f = inside && keep(mt, n, e) ? dscale : 0.0f;
                ds[mt][n][e] = pv * (ds[mt][n][e] * f - Dq);
                p[mt][n][e] = pv * f;
            }
}

// Which elements need the mask and the dropout draw is known per tile: one of four compiled bodies runs, so
// a tile inside the triangle without dropout spends an exponential and three float operations an element.
template <bool EXACT, bool DROP, int MT, int NT, typename Coords>
__device__ __forceinline__ void softmax_grad(float p[MT][NT][4], float ds[MT][NT][4], bool edge, int T, float c,
                                             const Dropout& drop, const KeepBits<MT, NT>& keep, Coords coords) {
    const float d = drop.scale;
    if (edge) {
        softmax_grad_of<EXACT, true, DROP, MT, NT>(p, ds, T, c, d, keep, coords);
    } else {
        softmax_grad_of<EXACT, false, DROP, MT, NT>(p, ds, T, c, d, keep, coords);
    }
}

template <int HS>
__device__ __forceinline__ void store_rows(void* dst, i64 at, const float acc[HS / 8][4], int r, float mul,
                                           int out_kind) {
#pragma unroll
    for (int n = 0; n < HS / 8; ++n) store_pair(dst, at + n * 8, acc[n][2 * r] * mul, acc[n][2 * r + 1] * mul, out_kind);
}

// The TMA dK/dV kernel's end: a warp's dK (times the scale) and dV rows, keys k0 + g and k0 + g + 8 (those before T),
// into dqkv's k and v columns of head h, in out_kind.
template <int HS>
__device__ __forceinline__ void store_dkdv(void* dqkv, const float dk[HS / 8][4], const float dv[HS / 8][4], int k0,
                                           int g, int t, int b, int h, int T, int C, int out_kind) {
#pragma unroll
    for (int r = 0; r < 2; ++r) {
        const int j = k0 + g + 8 * r;
        if (j >= T) continue;
        const i64 at = ((i64)b * T + j) * 3 * C + h * HS + 2 * t;
        store_rows<HS>(dqkv, at + C, dk, r, Scale<HS>::value, out_kind);
        store_rows<HS>(dqkv, at + 2 * C, dv, r, 1.0f, out_kind);
    }
}

// dQ of a warp's 16 MT query rows from r0, columns d0.. d0 + COLS - 1 (C registers, before the scale) into dqkv's q
// columns of head h.
template <int HS, int MT, int COLS = HS>
__device__ __forceinline__ void store_dq(void* dqkv, const float dq[MT][COLS / 8][4], int r0, int b, int h, int T,
                                         int C, int out_kind, int lane, int d0 = 0) {
    const int g = lane >> 2, t = lane & 3;
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
        for (int r = 0; r < 2; ++r) {
            const int i = r0 + 16 * mt + g + 8 * r;
            if (i < T) store_rows<COLS>(dqkv, ((i64)b * T + i) * 3 * C + h * HS + d0 + 2 * t, dq[mt], r,
                                        Scale<HS>::value, out_kind);
        }
}

// ---- the float32 dK/dV on wgmma (attention_backward_dkdv_wgf; one TF32 product) ----
// Why: the float32 backward's mma.sync kernels are 590 of the 743 us a layer of gpt2-small's float32 attention once
// the forward runs on wgmma (docs/perf.md, forty-eighth session), and each of their warps loads and rounds every B
// fragment it multiplies. Here the dK/dV half of it: attention_backward_dkdv's arithmetic per (key, query tile) in
// its order (S^T = k q^T, dPd^T = v dO^T, softmax_grad, dV += Pd^T dO, dK += dS^T q), the products on m64n64k8 TF32
// wgmma. NWG warpgroups a block, 64 keys each (a warp's 16 keys and their registers as in the mma.sync kernel, whose
// dropout draws and masks it repeats); the query tiles of 64 from the block's diagonal to the end.
// TF32 wgmma reads K-major operands only, so the tile's q and dO are staged twice: as rows (B of S^T and dPd^T, as the
// forward stages k) and transposed (B of dV and dK, as the forward stages v: queries ordered 0 2 4 6 1 3 5 7 within
// each eight, so that Pd^T's and dS^T's accumulators are the A fragments register for register). k and v, the block's
// own, are the A tiles of S^T and dPd^T (K-major, as the forward's q).
// Staging in two halves a tile, each in flight under the products that do not read it: the rows of tile it + 1 are
// filled while dV and dK of tile it run (they read the transposed tiles), and the transposed tiles of tile it while
// S^T and dPd^T run (they read the rows). Each half has its own landing buffer, copied a tile ahead (rows as LandRows
// lays them, so a thread fills its own; transposed as LandCols, a warp its own), with the tile's lse and D in the rows'
// group; so a fill waits on its thread's (warp's) own copies only and one block barrier a half-tile publishes it.
// Shared memory with two warpgroups: k and v 64 KB, the four filled tiles 64 KB, the landings 32 + 36 KB, lse and D
// 1 KB: 197 KB, one block an SM. TF32 pairs (the exact build) would double every tile (over the 227 KB a block may
// take): one TF32 product only. Not the mma.sync kernel's bits (the tensor cores add a slice's products in another
// order): within the build's tolerance of the NumPy form (tests/test_kernels_gpu.py, "float32_dkdv_wgmma").
template <int HS, int NWG, bool DROP>
__device__ void attention_backward_dkdv_wgf(void* __restrict__ dqkv, const float* __restrict__ qkv,
                                            const float* __restrict__ dout, const float* __restrict__ lse,
                                            const float* __restrict__ Dvec, int T, int H, int out_kind, Dropout drop) {
#ifdef ATTN_WGMMA
    constexpr float scale = Scale<HS>::value, c = scale * LOG2E;   // one TF32 product: exp2, as the tf32 kernels
    constexpr int BR = 64 * NWG, BC = 64, NT = BC / 8, CHK = BC / 4, THREADS = 128 * NWG;
    constexpr int KT = BR * HS, QT = BC * HS;   // floats of the block's k (or v), of a query tile
    static_assert(HS == 64, "one m64n64k8 a k8 slice of S^T");
    typedef LandRows<HS, BC, THREADS> RowsLand;
    typedef LandCols<HS, BC, THREADS> ColsLand;
    extern __shared__ __align__(128) unsigned char smem[];
    float* sK = (float*)smem;               // the block's k, then v: K-major, eight-row groups of core matrices
    float* sV = sK + KT;
    float* sQr = sV + KT;                   // the tile's q rows, dO rows, q^T, dO^T
    float* sOr = sQr + QT;
    float* sQt = sOr + QT;
    float* sOt = sQt + QT;
    float* sLandR = sOt + QT;               // the next rows' landing: q, then dO (as the fill reads them)
    float* sLandC = sLandR + 2 * QT;        // the next transposed tiles' landing: q, then dO (their warps' rows)
    float* sLD = sLandC + 2 * BC * ColsLand::LDV;   // buffer b: lse at 2b BC, D at (2b + 1) BC
    const int nqt = (T + BC - 1) / BC;
    const int kb = (int)blockIdx.y, bh = (int)blockIdx.x;   // the first key blocks see the most queries: launched first
    const int b = bh / H, h = bh % H, C = H * HS;
    const int wg = warpgroup_index_f32(), warp = (threadIdx.x >> 5) & 3, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    const int k0w = kb * BR + wg * 64;   // the warpgroup's first key
    const int k0 = k0w + warp * 16;      // the warp's
    const int first = (kb * BR) / BC, niter = nqt - first;
    const float* base = qkv + (i64)b * T * 3 * C + h * HS;
    const float* obase = dout + (i64)b * T * C + h * HS;
    const RowsLand qrows(3 * C), orows(C);
    const ColsLand qcols(3 * C), ocols(C);
    // lse and D of tile it, one element a thread (rows past T as 0): cp.async of 4 bytes, in the rows' group
    auto land_ld = [&](int it) {
        const int qt = first + it, e = (int)threadIdx.x;
        if (e < 2 * BC) {
            const int i = qt * BC + (e % BC);
            float* d = sLD + 2 * (it & 1) * BC + e;
            const float* src = (e < BC ? lse : Dvec) + (i64)bh * T + i;
            if (i < T) cp_async4(d, src);
            else *d = 0.0f;
        }
    };
    auto land_rows = [&](int it) {   // committed whether or not a tile is left, so the groups count alike
        if (it < niter) {
            const int qt = first + it, left = T - qt * BC;
            if (left >= BC) {
                qrows.land<true>(sLandR, base + (i64)qt * BC * 3 * C, BC, 3 * C);
                orows.land<true>(sLandR + QT, obase + (i64)qt * BC * C, BC, C);
            } else {
                qrows.land<false>(sLandR, base + (i64)qt * BC * 3 * C, left, 3 * C);
                orows.land<false>(sLandR + QT, obase + (i64)qt * BC * C, left, C);
            }
            land_ld(it);
        }
        cp_async_commit();
    };
    auto land_cols = [&](int it) {
        if (it < niter) {
            const int qt = first + it, left = T - qt * BC;
            if (left >= BC) {
                qcols.land<true>(sLandC, base + (i64)qt * BC * 3 * C, BC, 3 * C);
                ocols.land<true>(sLandC + BC * ColsLand::LDV, obase + (i64)qt * BC * C, BC, C);
            } else {
                qcols.land<false>(sLandC, base + (i64)qt * BC * 3 * C, left, 3 * C);
                ocols.land<false>(sLandC + BC * ColsLand::LDV, obase + (i64)qt * BC * C, left, C);
            }
        }
        cp_async_commit();
    };
    auto fill_rows_tile = [&]() {   // from the thread's own landed copies (waited before)
        fill_rows<false, HS, BC, THREADS>(sQr, nullptr, sLandR);
        fill_rows<false, HS, BC, THREADS>(sOr, nullptr, sLandR + QT);
    };
    auto fill_cols_tile = [&]() {   // from the warp's own landed rows (waited and __syncwarp before)
        qcols.fill<false>(sQt, nullptr, sLandC);
        ocols.fill<false>(sOt, nullptr, sLandC + BC * ColsLand::LDV);
    };
    {   // k and v land in place and are rounded there (each element read, then written, by the thread that copied it)
        const LandRows<HS, BR, THREADS> kv(3 * C);
        const int left = T - kb * BR;
        kv.land<false>(sK, base + (i64)kb * BR * 3 * C + C, left, 3 * C);
        kv.land<false>(sV, base + (i64)kb * BR * 3 * C + 2 * C, left, 3 * C);
    }
    land_rows(0);   // group: k, v, rows of tile 0
    land_cols(0);   // group: tile 0's transposed tiles
    cp_async_wait<1>();   // k, v and tile 0's rows landed (the thread's own copies)
    fill_rows<false, HS, BR, THREADS>(sK, nullptr, sK);
    fill_rows<false, HS, BR, THREADS>(sV, nullptr, sV);
    fill_rows_tile();
    land_rows(1);   // group: rows of tile 1, into the landing just read (by this thread only)
    fence_proxy_async();
    __syncthreads();
    float dk[HS / 8][4], dv[HS / 8][4];
#pragma unroll
    for (int n = 0; n < HS / 8; ++n)
#pragma unroll
        for (int e = 0; e < 4; ++e) dk[n][e] = dv[n][e] = 0.0f;
    const float* sKw = sK + wg * 64 * HS;   // the warpgroup's 64 keys: eight row groups of core matrices
    const float* sVw = sV + wg * 64 * HS;

    // Each half-tile's products are issued and awaited inside one branch, its staging in both (no product's
    // accumulators live across a join: ptxas would otherwise wait on them early and serialize the products).
    auto stage_cols = [&](int it) {   // this tile's transposed tiles from their landing, then the next's copies
        cp_async_wait<1>();           // landed (the next rows may still be in flight)
        __syncwarp();
        fill_cols_tile();
        __syncwarp();   // the warp's lanes done reading its landed rows before any lane copies the next over them
        land_cols(it + 1);
    };
    auto stage_rows = [&](int it) {   // the next tile's rows from their landing, then the copies of the one after
        cp_async_wait<1>();           // landed (the next transposed tiles may still be in flight)
        if (it + 1 < niter) fill_rows_tile();
        land_rows(it + 2);
    };
    for (int it = 0; it < niter; ++it) {
        const int qt = first + it;
        // the warpgroup's keys all come after the tile's queries: every product would add zeros (uniform in it)
        const bool skip = qt * BC + BC - 1 < k0w;
        u32 ap[NT][4], as[NT][4];   // Pd^T and dS^T as A fragments (keys x queries, queries in the staged order)
        if (skip) {
            stage_cols(it);
        } else {   // S^T = k q^T and dPd^T = v dO^T, in flight while the transposed tiles are filled
            float p[1][NT][4], ds[1][NT][4];
            wg_fence();
            wg_mma_rows_tf32(p[0], sKw, sQr);
            wg_mma_rows_tf32(ds[0], sVw, sOr);
            wg_commit();
            stage_cols(it);
            wg_wait_all();
            wg_hold(p[0]);
            wg_hold(ds[0]);
            const float* sL = sLD + 2 * (it & 1) * BC;
            const float* sD = sL + BC;
            auto at = [&](int, int n, int e, int& i, int& j) {   // register (n, e): query i, key j
                i = qt * BC + n * 8 + 2 * t + (e & 1);
                j = k0 + g + 8 * (e >> 1);
            };
            const bool edge = qt * BC < k0 + 16 - 1 || qt * BC + BC > T;   // the warp's keys cross the tile's diagonal
            KeepBits<1, NT> keep{};
            if constexpr (DROP) keep = drop.keep_bits<LANE_PAIRS, 1, NT>(bh, T, edge, at);
            softmax_grad<false, DROP, 1, NT>(p, ds, edge, T, c, drop, keep,
                                             [&](int mt, int n, int e, int& i, int& j, float& Lc, float& Dq) {
                at(mt, n, e, i, j);
                const int il = n * 8 + 2 * t + (e & 1);
                Lc = sL[il] * LOG2E;
                Dq = sD[il];
            });
#pragma unroll
            for (int n = 0; n < NT; ++n) {
                const float x[4] = {p[0][n][0], p[0][n][2], p[0][n][1], p[0][n][3]};
                const float y[4] = {ds[0][n][0], ds[0][n][2], ds[0][n][1], ds[0][n][3]};
#pragma unroll
                for (int e = 0; e < 4; ++e) {
                    u32 lo;
                    tf32_operand<false, true>(x[e], ap[n][e], lo);
                    tf32_operand<false, true>(y[e], as[n][e], lo);
                }
            }
        }
        fence_proxy_async();   // the transposed tiles, seen by the tensor cores' reads
        __syncthreads();       // and every warpgroup done reading the rows, before the next tile's are filled
        if (skip) {
            stage_rows(it);
        } else {   // dV += Pd^T dO, dK += dS^T q, in flight while the next tile's rows are filled
            wg_fence();
#pragma unroll
            for (int n = 0; n < NT; ++n)   // k8 slice n = queries 8n.. = chunks 2n, 2n + 1 of the transposed rows
                wg_mma_tf32(dv, ap[n], wg_desc(sOt + 2 * n * 32, 128, CHK * 128), 1);
#pragma unroll
            for (int n = 0; n < NT; ++n)
                wg_mma_tf32(dk, as[n], wg_desc(sQt + 2 * n * 32, 128, CHK * 128), 1);
            wg_commit();
            stage_rows(it);
            wg_wait_all();
            wg_hold(dv);
            wg_hold(dk);
        }
        fence_proxy_async();   // the next rows, seen by the tensor cores' reads
        __syncthreads();       // and every warpgroup done reading the transposed tiles, before the next are filled
    }
    cp_async_wait<0>();
    store_dkdv<HS>(dqkv, dk, dv, k0, g, t, b, h, T, C, out_kind);
#else
    __trap();   // launched only where the file was built for sm_90a (gpu/attention.py)
#endif
}

// The float32 wgmma dQ's pieces (attention_backward_dq_wgf, below): its O loads and row dots.
// A warp's rows' O for D: the output is float32 here (the float32 builds' kind; gpu/attention.py launches that kernel
// in float32 only), 16 bytes a load (a lane's 16 columns start 64 bytes apart: C is a multiple of HS, and
// gpu/attention.py checks the alignment); rows past T as zeros.
template <int HS>
__device__ __forceinline__ void dq_load_o(float4 (&ol)[2][HS / 16], const void* __restrict__ out, int b, int h, int T,
                                          int C, int r0, int g, int t) {
#pragma unroll
    for (int r = 0; r < 2; ++r) {
        const int i = r0 + g + 8 * r;
        const i64 at = ((i64)b * T + min(i, T - 1)) * C + h * HS + t * (HS / 4);
#pragma unroll
        for (int q = 0; q < HS / 16; ++q)
            ol[r][q] = i < T ? *(const float4*)((const float*)out + at + 4 * q) : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    }
}
// D, the mma.sync kernel's sums: lane t's columns 16 t.. 16 t + 15 of dO rounded to TF32 times O, in order, then the
// butterfly over t. The rounded dO is the staged tile's sO (LandRows' layout; rows past T landed as zeros, so 0) whose
// first row is query row0; reloading it from global memory after the copies cost 11% of the default kernel's
// warp-stall samples, the loads queued behind the copies and their sums waiting on them (Nsight Compute's source view,
// results/h100-perf-20261206f call 2). Written to Dvec for the dK/dV kernel after, which so reads the values it read
// before.
template <int HS>
__device__ __forceinline__ void dq_row_dots(float (&Dr)[2], float* __restrict__ Dvec, const float* sO,
                                            const float4 (&ol)[2][HS / 16], int bh, int T, int r0, int row0, int g,
                                            int t) {
#pragma unroll
    for (int r = 0; r < 2; ++r) {
        const int i = r0 + g + 8 * r, lr = i - row0;   // the row in the block's staged tiles
        float acc = 0.0f;
#pragma unroll
        for (int q = 0; q < HS / 16; ++q) {   // the row's 16 bytes of chunk 4 t + q (LandRows' layout)
            const float4 d = *(const float4*)(sO + 4 * ((((lr >> 3) * (HS / 4) + 4 * t + q) << 3) + (lr & 7)));
            acc += d.x * ol[r][q].x;
            acc += d.y * ol[r][q].y;
            acc += d.z * ol[r][q].z;
            acc += d.w * ol[r][q].w;
        }
        acc += __shfl_xor_sync(0xffffffffu, acc, 1);
        acc += __shfl_xor_sync(0xffffffffu, acc, 2);
        Dr[r] = acc;
        if (t == 0 && i < T) Dvec[(i64)bh * T + i] = acc;
    }
}

// ---- the float32 dQ on wgmma (attention_backward_dq_wgf; one TF32 product) ----
// Why: with the forward and the dK/dV on wgmma, the mma.sync dQ is the largest float32 attention kernel left (263 us
// a layer of gpt2-small on an H100, 133 of nanogpt: results/h100-perf-20261206d, call 8). Here attention_backward_dq's
// arithmetic per (query, key tile) in its order (S = q k^T, dPd = dO v^T, softmax_grad from the row's lse and D,
// dQ += dS k), the products on m64n64k8 TF32 wgmma, laid out as attention_forward_wgf: NWG warpgroups a block, 64
// queries each (a warp's 16 queries and their registers as in the mma.sync kernel, whose dropout draws and masks it
// repeats), the key tiles of 64 from 0 to the block's diagonal. q and dO, the block's own, are staged once as the
// A tiles of S and dPd (K-major rows, as the forward's q); each key tile's k and v as rows (B of S and dPd, as the
// forward's k), and k again transposed (B of dQ += dS k, as the forward's v: keys ordered 0 2 4 6 1 3 5 7 within each
// eight, so that dS's accumulator is the A fragment register for register). Two buffers of the three tiles: the next
// tile's are filled from their landing while the products of this one run, and the one after starts landing (each
// thread, or warp, fills what it landed itself: LandRows, LandCols). Shared memory with two warpgroups: q and dO 64 KB,
// two buffers of k, v and k^T 96 KB, the landing 50 KB: 210 KB, one block an SM.
// The masks and the dropout draws are attention_forward_wgf's lines, repeated rather than shared (a function shared
// with the half-type forward changed that kernel's machine code: attention_forward_wgf's header).
// D (the row dots dO . O) is the mma.sync kernel's to the bit: each lane t sums its row's columns 16 t.. 16 t + 15 of
// dO rounded to TF32 (what that kernel staged) times O, in order, then the butterfly over t; it is written to Dvec for
// the dK/dV kernel after, which so reads the values it read before. dQ is not the mma.sync kernel's bits (the tensor
// cores add a slice's products in another order): within the build's tolerance of the NumPy form
// (tests/test_kernels_gpu.py, "float32_dq_wgmma", which also holds dK and dV to the mma.sync dQ's run to the bit).
// Measured on an H100 (results/h100-perf-20261206e): x0.90 of the mma.sync dQ at T = 1024, x1.17 at 256 (too few key
// tiles a block to repay the staging), so gpu/attention.py takes it past T = 256 only (TR2_ATTN_F32_WG_DQ=2). D summed
// from the staged dO (below) since: x0.94-0.95 of that kernel at T = 1024 (results/h100-perf-20261206f, call 3). The
// prologue still holds 30% of the warp-stall samples there, waiting on its copies (one block an SM: nothing overlaps);
// a resident grid that landed each item's copies under the previous item's tiles hid half of that and cost the loop
// more, x1.01-1.05 of this kernel in three forms (fifty-third session, results/h100-perf-20261206i; removed).
template <int HS, int NWG, bool DROP>
__device__ void attention_backward_dq_wgf(void* __restrict__ dqkv, const float* __restrict__ qkv,
                                          const float* __restrict__ dout, const float* __restrict__ lse,
                                          float* __restrict__ Dvec, const void* __restrict__ out, int T, int H,
                                          int out_kind, Dropout drop) {
#ifdef ATTN_WGMMA
    constexpr float scale = Scale<HS>::value, c = scale * LOG2E;   // one TF32 product: exp2, as the tf32 kernels
    constexpr int BR = 64 * NWG, BC = 64, NT = BC / 8, CHK = BC / 4, THREADS = 128 * NWG;
    constexpr int QT = BR * HS, KT = BC * HS;   // floats of the block's q (or dO), of a k, v or k^T tile
    static_assert(HS == 64, "one m64n64k8 a k8 slice of S");
    typedef LandCols<HS, BC, THREADS> ColsLand;
    extern __shared__ __align__(128) unsigned char smem[];
    float* sQ = (float*)smem;        // the block's q, then dO: K-major, eight-row groups of core matrices
    float* sO = sQ + QT;
    float* sKV = sO + QT;            // buffer b: k at sKV + 3b KT, v at + KT, k^T at + 2 KT
    float* sLand = sKV + 6 * KT;     // the next tile's raw k and v (as staged), then k^T (its warps' rows, padded)
    const int nqb = (T + BR - 1) / BR;
    const int qb = nqb - 1 - (int)blockIdx.y;   // the longest rows first
    const int bh = blockIdx.x, b = bh / H, h = bh % H, C = H * HS;
    const int wg = warpgroup_index_f32(), warp = (threadIdx.x >> 5) & 3, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    const int q0 = qb * BR + wg * 64;   // the warpgroup's first query
    const int r0 = q0 + warp * 16;      // the warp's
    const float* base = qkv + (i64)b * T * 3 * C + h * HS;
    const int last = min(qb * BR + BR - 1, T - 1) / BC;   // the block's last key tile
    const int wg_last = min(q0 + 63, T - 1) / BC;        // the warpgroup's (its later ones are masked whole)
    const float* sQw = sQ + wg * 64 * HS;                 // the warpgroup's 64 rows
    const float* sOw = sO + wg * 64 * HS;
    const LandRows<HS, BC, THREADS> kvrows(3 * C);
    const ColsLand kcols(3 * C);
    auto land_kv = [&](int kb) {
        const float* k = base + (i64)kb * BC * 3 * C + C;
        if (kb * BC + BC <= T) {
            kvrows.land<true>(sLand, k, BC, 3 * C);
            kvrows.land<true>(sLand + KT, k + C, BC, 3 * C);
            kcols.land<true>(sLand + 2 * KT, k, BC, 3 * C);
        } else {
            kvrows.land<false>(sLand, k, T - kb * BC, 3 * C);
            kvrows.land<false>(sLand + KT, k + C, T - kb * BC, 3 * C);
            kcols.land<false>(sLand + 2 * KT, k, T - kb * BC, 3 * C);
        }
        cp_async_commit();
    };
    auto fill_kv = [&](int buf) {
        float* k = sKV + 3 * buf * KT;
        fill_rows<false, HS, BC, THREADS>(k, nullptr, sLand);
        fill_rows<false, HS, BC, THREADS>(k + KT, nullptr, sLand + KT);
        kcols.fill<false>(k + 2 * KT, nullptr, sLand + 2 * KT);
    };
    // The warp's rows' O, for D below, issued before the copies fill the LSU queue.
    if (out_kind != KIND_F32) __trap();
    float4 ol[2][HS / 16];
    dq_load_o<HS>(ol, out, b, h, T, C, r0, g, t);
    {   // q and dO land in place and are rounded there (each element read, then written, by the thread that copied it)
        const LandRows<HS, BR, THREADS> qrows(3 * C), orows(C);
        qrows.land<false>(sQ, base + (i64)qb * BR * 3 * C, T - qb * BR, 3 * C);
        orows.land<false>(sO, dout + ((i64)b * T + qb * BR) * C + h * HS, T - qb * BR, C);
    }
    land_kv(0);
    float L[2], Dr[2];
#pragma unroll
    for (int r = 0; r < 2; ++r) {
        const int i = r0 + g + 8 * r;
        L[r] = i < T ? lse[(i64)bh * T + i] * LOG2E : 0.0f;
    }
    cp_async_landed();
    fill_rows<false, HS, BR, THREADS>(sQ, nullptr, sQ);
    fill_rows<false, HS, BR, THREADS>(sO, nullptr, sO);
    fill_kv(0);
    __syncwarp();   // the warp's lanes done reading its landed k^T rows before any lane copies the next over them
    if (last > 0) land_kv(1);
    fence_proxy_async();
    __syncthreads();
    dq_row_dots<HS>(Dr, Dvec, sO, ol, bh, T, r0, qb * BR, g, t);   // D, from the staged dO
    float dq[1][HS / 8][4];
#pragma unroll
    for (int n = 0; n < HS / 8; ++n) dq[0][n][0] = dq[0][n][1] = dq[0][n][2] = dq[0][n][3] = 0.0f;

    for (int kb = 0; kb <= last; ++kb) {
        const int cur = kb & 1;
        const float* sK = sKV + 3 * cur * KT;
        const float* sV = sK + KT;
        const float* sKt = sK + 2 * KT;
        auto stage_next = [&]() {   // into the other buffer (its last readers passed the barrier ending kb - 1), then
            if (kb < last) {        // the tile after it starts landing
                cp_async_landed();
                fill_kv(cur ^ 1);
                __syncwarp();
                if (kb + 1 < last) land_kv(kb + 2);
            }
        };
        if (kb > wg_last) {   // the warpgroup's queries all come before the tile's keys (uniform in the warpgroup)
            stage_next();
        } else {   // S = q k^T and dPd = dO v^T, in flight while the next tile is staged
            float p[1][NT][4], ds[1][NT][4];
            wg_fence();
            wg_mma_rows_tf32(p[0], sQw, sK);
            wg_mma_rows_tf32(ds[0], sOw, sV);
            wg_commit();
            stage_next();
            wg_wait_all();
            wg_hold(p[0]);
            wg_hold(ds[0]);
            auto at = [&](int, int n, int e, int& i, int& j) {   // register (n, e): query i, key j
                i = r0 + g + 8 * (e >> 1);
                j = kb * BC + n * 8 + 2 * t + (e & 1);
            };
            const bool edge = kb * BC + BC - 1 > r0 || kb * BC + BC > T;   // the warp's rows cross the diagonal or T
            KeepBits<1, NT> keep{};
            if constexpr (DROP) keep = drop.keep_bits<ROW_PAIRS, 1, NT>(bh, T, edge, at);
            softmax_grad<false, DROP, 1, NT>(p, ds, edge, T, c, drop, keep,
                                             [&](int mt, int n, int e, int& i, int& j, float& Lc, float& Dq) {
                at(mt, n, e, i, j);
                Lc = L[e >> 1];
                Dq = Dr[e >> 1];
            });
            u32 as[NT][4];   // dS as A fragments, every slice's before the first product reads one
#pragma unroll
            for (int n = 0; n < NT; ++n) {
                const float y[4] = {ds[0][n][0], ds[0][n][2], ds[0][n][1], ds[0][n][3]};
#pragma unroll
                for (int e = 0; e < 4; ++e) {
                    u32 lo;
                    tf32_operand<false, true>(y[e], as[n][e], lo);
                }
            }
            wg_fence();
#pragma unroll
            for (int n = 0; n < NT; ++n)   // dQ += dS k: k8 slice n = keys 8n.. = chunks 2n, 2n + 1 of k^T's rows
                wg_mma_tf32(dq[0], as[n], wg_desc(sKt + 2 * n * 32, 128, CHK * 128), 1);
            wg_commit();
            wg_wait_all();
            wg_hold(dq[0]);
        }
        fence_proxy_async();   // the next tile's stores, seen by the tensor cores' reads
        __syncthreads();       // and every warpgroup done with this buffer before it is refilled
    }
    store_dq<HS, 1>(dqkv, dq, r0, b, h, T, C, out_kind, lane);
#else
    __trap();   // launched only where the file was built for sm_90a (gpu/attention.py)
#endif
}

// ---- dQ folded into the dK/dV kernel (the half builds): fixed-order sums of the key blocks' parts ----
// A key block's part of a query tile's dQ is dS k over the block's keys. The parts of one tile are added in
// key-block order, 0 first, through a float32 buffer dq_acc [BH, T, HS]: block 0 writes its part, block kb
// waits until sync[bh, qt] says kb (blocks 0..kb-1 have added theirs), adds its own and hands on kb + 1;
// the tile's last key block (the one holding its diagonal) writes scale * dQ into dqkv instead. So every
// element's sum runs in one order whatever the schedule: the same bits on every run, no float atomics.
// Blocks take their (key block, head) from a ticket (atomicAdd on sync[BH * nqt], zeroed with the counters
// by the row-dots kernel before): the tickets go out key block by key block, so a block only ever waits on
// blocks that took a ticket before it, which are running or done; block scheduling order is never assumed.
// Each block walks its query tiles from the last down: block kb reaches a tile one iteration after block
// kb - 1 did, so it waits about one iteration at its start and hardly after.
__device__ __forceinline__ int ld_acquire(const int* p) {
    int v;
    asm volatile("ld.acquire.gpu.global.b32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
    return v;
}
__device__ __forceinline__ void st_release(int* p, int v) {
    asm volatile("st.release.gpu.global.b32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}

// A fragment (rows m0..m0+15, k slice ks) of A = S^T for a tile S stored [k][m] (LDS halves a row): the
// transposed ldmatrix of the 8 x 8 blocks (k +0, m +0), (k +0, m +8), (k +8, m +0), (k +8, m +8) = a0..a3.
template <int LDS>
__device__ __forceinline__ void load_a_trans(u32 a[4], const u16* s, int m0, int ks, int lane) {
    ldmatrix_x4_trans(a, s + (ks * 16 + (lane & 7) + ((lane >> 4) << 3)) * LDS + m0 + ((lane >> 3) & 1) * 8);
}

__device__ __forceinline__ void stmatrix_x4(u16* p, const u32 r[4]) {
    const u32 addr = (u32)__cvta_generic_to_shared(p);
    asm volatile("stmatrix.sync.aligned.m8n8.x4.shared.b16 [%0], {%1,%2,%3,%4};"
                 :: "r"(addr), "r"(r[0]), "r"(r[1]), "r"(r[2]), "r"(r[3]) : "memory");
}

// A warp's dS^T block (16 MT keys x 8 NT queries, C registers) to global memory, rows dst + j ldq for its keys
// j < rows_left: through the warp's own rows of shared memory (LDS halves a row), written by stmatrix (the C
// layout is stmatrix's: one instruction stores an m16 tile's half of four n8 tiles) and read back 16 bytes a lane,
// so each global store writes eight rows of 16 bytes a lane, whole 32-byte sectors. Stored directly from the
// registers (4 bytes a lane and instruction, half sectors, rows 2 KB apart) they made the dK/dV kernel 37 us
// slower a layer of gpt2-small (123 -> 160 us, call 3 of results/h200-perf-20261201f); this way 23 (146, call 4).
// EVICT: the stores carry the evict-first L2 policy (l2_evict_first); the bits stored are the same.
template <int K, int MT, int NT, int LDS, bool EVICT = false>
__device__ __forceinline__ void store_ds_t(u16* __restrict__ dst, int ldq, int rows_left, u16* sw,
                                           const float ds[MT][NT][4], int lane) {
    static_assert(NT % 4 == 0, "one stmatrix.x4 an m16 tile's half of four n8 tiles");
    __syncwarp();   // the warp's reads of the last tile's rows are done
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
        for (int r = 0; r < 2; ++r)
#pragma unroll
            for (int q = 0; q < NT / 4; ++q) {
                u32 w[4], lo;
#pragma unroll
                for (int n = 0; n < 4; ++n)
                    half_operand<K, false>(ds[mt][4 * q + n][2 * r], ds[mt][4 * q + n][2 * r + 1], w[n], lo);
                // lanes 8i..8i+7 address the rows of matrix i (n8 tile 4 q + i): keys 16 mt + 8 r + 0..7, queries
                // 32 q + 8 i..
                stmatrix_x4(sw + (16 * mt + 8 * r + (lane & 7)) * LDS + 32 * q + (lane >> 3) * 8, w);
            }
    __syncwarp();
    constexpr int PIECES = NT * 8 / 8;   // 16-byte pieces a row
#pragma unroll
    for (int k = 0; k < 16 * MT * PIECES / 32; ++k) {
        const int row = k * (32 / PIECES) + lane / PIECES, c = (lane % PIECES) * 8;
        const uint4 v = *(const uint4*)(sw + row * LDS + c);
        if (row < rows_left) {
            if constexpr (EVICT) st_global16_policy(dst + (i64)row * ldq + c, v, l2_evict_first());
            else *(uint4*)(dst + (i64)row * ldq + c) = v;
        }
    }
}

// dK and dV of 4 * 16 * MT keys of one head. Warp rows are keys; the streamed tiles hold BC queries.
// DQ (the half builds): dQ too, as above; the query tiles run from the last down. Else from the diagonal
// down, and attention_backward_dq makes dQ.
// DS (half roundings, unfolded): each warp also writes its dS^T rows of every tile it computes to ds_t (below,
// attention_backward_dq_ds), rounded as dK's operand; EVICT: those stores marked evict-first in L2.
template <int K, bool SPLIT, int HS, bool DQ, bool DROP, bool DS = false, bool EVICT = false, int NB = Pipe<K>::NBUF>
__device__ void attention_backward_dkdv(void* __restrict__ dqkv, const typename Tile<K>::E* __restrict__ qkv,
                                        const typename Tile<K>::E* __restrict__ dout, const float* __restrict__ lse,
                                        const float* __restrict__ Dvec, float* __restrict__ dq_acc,
                                        int* __restrict__ sync, int T, int H, int out_kind, Dropout drop,
                                        u16* __restrict__ ds_t = nullptr, int ldq = 0) {
    constexpr float scale = Scale<HS>::value;
    constexpr int MT = Geometry<K>::MT, BC = Geometry<K>::DKDV, NT = BC / 8;
    constexpr int RW = 16 * MT, BR = NWARPS * RW, LD = Tile<K>::LD;
    constexpr bool EXACT = (K == KIND_F32 && SPLIT);
    constexpr int NBUF = NB;
    // dS^T of the block (BR keys x BC queries, half bits; the exact build's remainders after it)
    constexpr int LDS = BC + 8;
    static_assert(!DQ || (K != KIND_F32 && BC % RW == 0 && BR % BC == 0 && BC == 32 && HS % 32 == 0),
                  "the folded dQ: half builds; a warp's keys lie wholly inside or past a tile's queries; "
                  "four warps of 16 queries x HS / 2 columns");
    static_assert(!DS || (!DQ && K != KIND_F32 && !SPLIT && BC == RW),
                  "dS stored: the half builds under half roundings, unfolded; a warp's key chunk as wide as a tile");
    extern __shared__ __align__(16) unsigned char smem[];
    __shared__ int ticket;
    typedef typename Tile<K>::E E;
    E* sK = (E*)smem;
    E* sV = sK + BR * LD;
    E* sQO = sV + BR * LD;                          // buffer b: q at 2b BC rows, dO at (2b + 1) BC rows
    float* sLD = (float*)(sQO + 2 * NBUF * BC * LD);  // buffer b: lse at 2b * BC, D at (2b + 1) * BC
    u16* sdS = (u16*)(sLD + 2 * NBUF * BC);         // DQ: [BR][LDS], then the remainders (SPLIT); DS: the same
    const int nqt = (T + BC - 1) / BC;
    int kb = (int)blockIdx.y, bh = (int)blockIdx.x;   // the first key blocks see the most queries: launched first
    if constexpr (DQ) {
        if (threadIdx.x == 0) ticket = atomicAdd(sync + (i64)gridDim.x * nqt, 1);
        __syncthreads();
        kb = ticket / (int)gridDim.x;
        bh = ticket % (int)gridDim.x;
    }
    const int b = bh / H, h = bh % H, C = H * HS;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    const int k0 = kb * BR + warp * RW;   // the warp's first key
    const int first = (kb * BR) / BC;     // the query tiles from the diagonal (first) to the end
    const int niter = nqt - first;
    constexpr float c = EXACT ? scale : scale * LOG2E, lmul = EXACT ? 1.0f : LOG2E;
    const E* base = qkv + (i64)b * T * 3 * C;
    const E* gbase = dout + (i64)b * T * C;
    auto tile_of = [&](int it) { return DQ ? nqt - 1 - it : first + it; };
    auto qo = make_stream<K, NB>([&](int it, int buf) {
        const int qt = tile_of(it);
        stage<K, SPLIT, HS, BC, NB>(sQO + 2 * buf * BC * LD, base + h * HS, qt * BC, T, 3 * C);
        stage<K, SPLIT, HS, BC, NB>(sQO + (2 * buf + 1) * BC * LD, gbase + h * HS, qt * BC, T, C);
        float* l = sLD + 2 * buf * BC;   // lse and D as stored (lse times lmul where read)
        stage_row<K, NB>(l, lse + (i64)bh * T, qt * BC, BC, T, threadIdx.x);
        stage_row<K, NB>(l + BC, Dvec + (i64)bh * T, qt * BC, BC, T, (int)threadIdx.x - BC);
    }, [&](int it, int buf) {
        if constexpr (K == KIND_F32 && !SPLIT && NB == 2) {   // k and v (in the first group), q and dO, to TF32
            if (it == 0) {
                land_tf32<HS, BR>((float*)sK);
                land_tf32<HS, BR>((float*)sV);
            }
            land_tf32<HS, BC>((float*)(sQO + 2 * buf * BC * LD));
            land_tf32<HS, BC>((float*)(sQO + (2 * buf + 1) * BC * LD));
        }
    }, niter - 1);
    stage<K, SPLIT, HS, BR, NB>(sK, base + C + h * HS, kb * BR, T, 3 * C);
    stage<K, SPLIT, HS, BR, NB>(sV, base + 2 * C + h * HS, kb * BR, T, 3 * C);
    qo.start();
    float dk[MT][HS / 8][4], dv[MT][HS / 8][4];
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
        for (int n = 0; n < HS / 8; ++n)
#pragma unroll
            for (int e = 0; e < 4; ++e) dk[mt][n][e] = dv[mt][n][e] = 0.0f;

    for (int it = 0; it < niter; ++it) {
        const int qt = tile_of(it);
        const int cur = qo.acquire(it);
        const E* sQ = sQO + 2 * cur * BC * LD;
        if (qt * BC + BC - 1 >= k0) {   // else the tile's queries all come before the warp's keys
            const E* sO = sQ + BC * LD;
            const float* sL = sLD + 2 * cur * BC;
            const float* sD = sL + BC;
            auto at = [&](int mt, int n, int e, int& i, int& j) {   // register (mt, n, e): query i, key j
                i = qt * BC + n * 8 + 2 * t + (e & 1);
                j = k0 + 16 * mt + g + 8 * (e >> 1);
            };
            const bool edge = qt * BC < k0 + RW - 1 || qt * BC + BC > T;
            KeepBits<MT, NT> keep{};
            if constexpr (DROP) keep = drop.keep_bits<LANE_PAIRS, MT, NT>(bh, T, edge, at);
            float p[MT][NT][4], ds[MT][NT][4];
            tile_product<K, SPLIT, HS, MT, NT>(p, sK, warp * RW, sQ, lane);    // S^T = k q^T
            tile_product<K, SPLIT, HS, MT, NT>(ds, sV, warp * RW, sO, lane);   // dPd^T = v dO^T
            softmax_grad<EXACT, DROP, MT, NT>(p, ds, edge, T, c, drop, keep,
                                        [&](int mt, int n, int e, int& i, int& j, float& Lc, float& Dq) {
                at(mt, n, e, i, j);
                const int il = n * 8 + 2 * t + (e & 1);
                Lc = sL[il] * lmul;
                Dq = sD[il];
            });
            acc_product<K, SPLIT, HS, MT, NT>(dv, p, sO, lane);    // dV += Pd^T dO
            if constexpr (DS) store_ds_t<K, MT, NT, LDS, EVICT>(ds_t + ((i64)bh * T + k0) * ldq + qt * BC, ldq, T - k0,
                                                         sdS + warp * RW * LDS, ds, lane);
            if constexpr (DQ) {   // the warp's dS^T rows for the block's dQ product, rounded as dK's operand
#pragma unroll
                for (int mt = 0; mt < MT; ++mt)
#pragma unroll
                    for (int n = 0; n < NT; ++n)
#pragma unroll
                        for (int r = 0; r < 2; ++r) {
                            u32 hi, lo;
                            half_operand<K, SPLIT>(ds[mt][n][2 * r], ds[mt][n][2 * r + 1], hi, lo);
                            const int at = (warp * RW + 16 * mt + g + 8 * r) * LDS + n * 8 + 2 * t;
                            *(u32*)(sdS + at) = hi;
                            if constexpr (SPLIT) *(u32*)(sdS + BR * LDS + at) = lo;
                        }
            }
            acc_product<K, SPLIT, HS, MT, NT>(dk, ds, sQ, lane);   // dK += dS^T q
        }
        if constexpr (DQ) {
            __syncthreads();   // dS^T of every warp that has keys at or before the tile's queries is staged
            // The warp's part: queries qr..qr+15 of the tile, columns d0..d0+HS/2-1, over the block's keys up to
            // the tile's last query (the rows of the warps that skipped the tile lie past them).
            const int qr = (warp & 1) * 16, d0 = (warp >> 1) * (HS / 2);
            const int nks = min(BR, qt * BC + BC - kb * BR) / 16;
            float part[HS / 16][4];
#pragma unroll
            for (int n = 0; n < HS / 16; ++n) part[n][0] = part[n][1] = part[n][2] = part[n][3] = 0.0f;
#pragma unroll
            for (int ks = 0; ks < BR / 16; ++ks) {
                if (ks < nks) {
                    AFrag<K> fa;
                    load_a_trans<LDS>(fa.hi, sdS, qr, ks, lane);
                    if constexpr (SPLIT) load_a_trans<LDS>(fa.lo, sdS + BR * LDS, qr, ks, lane);
#pragma unroll
                    for (int np = 0; np < HS / 32; ++np) {
                        BFrag<K> fb[2];
                        load_b_cols<K, SPLIT>(fb, sK, d0 + np * 16, ks, lane);   // B[key][d] = k
#pragma unroll
                        for (int q = 0; q < 2; ++q) mma_acc<K, SPLIT, true>(part[2 * np + q], fa, fb[q]);
                    }
                }
            }
            const int last_kb = min(qt * BC + BC - 1, T - 1) / BR;   // the block holding the tile's diagonal
            int* turn = sync + (i64)bh * nqt + qt;
            if (kb > 0) {
                // a turn that never comes is a bug: stop the kernel (an error the caller sees) after ~a second
                if (threadIdx.x == 0)
                    for (u32 spins = 0; ld_acquire(turn) != kb; ++spins) {
                        if (spins == (1u << 25)) __trap();
                        __nanosleep(32);
                    }
                __syncthreads();
            }
#pragma unroll
            for (int r = 0; r < 2; ++r) {
                const int i = qt * BC + qr + g + 8 * r;
                if (i >= T) continue;
                float* acc = dq_acc + ((i64)bh * T + i) * HS + d0 + 2 * t;
                const i64 at = ((i64)b * T + i) * 3 * C + h * HS + d0 + 2 * t;
#pragma unroll
                for (int n = 0; n < HS / 16; ++n) {
                    float x0 = part[n][2 * r], x1 = part[n][2 * r + 1];
                    if (kb > 0) {   // the blocks before, then this one
                        const float2 s = __ldcg((const float2*)(acc + n * 8));
                        x0 = s.x + x0;
                        x1 = s.y + x1;
                    }
                    if (kb == last_kb) store_pair(dqkv, at + n * 8, x0 * scale, x1 * scale, out_kind);
                    else __stcg((float2*)(acc + n * 8), make_float2(x0, x1));
                }
            }
            if (kb < last_kb) {
                __syncthreads();   // every thread's part is in dq_acc
                if (threadIdx.x == 0) st_release(turn, kb + 1);
            }
        }
        qo.release();
    }
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
        for (int r = 0; r < 2; ++r) {
            const int j = k0 + 16 * mt + g + 8 * r;
            if (j >= T) continue;
            const i64 at = ((i64)b * T + j) * 3 * C + h * HS + 2 * t;
            store_rows<HS>(dqkv, at + C, dk[mt], r, scale, out_kind);
            store_rows<HS>(dqkv, at + 2 * C, dv[mt], r, 1.0f, out_kind);
        }
}

// The row dot products D[bh, i] = sum_d dO[b, i, h HS + d] out[b, i, h HS + d] of the half builds' backward (dO
// as the products read it, out as the forward wrote it, in out_kind), eight threads a row, each HS / 8 columns
// in order, their sums added in one butterfly; and sync (n_sync ints: the dK/dV kernel's counters and ticket)
// zeroed, since that kernel runs next. Rows r = (b T + i) H + h, the order of the memory.
// WIDE (attn_row_dots_wide_, TR2_ATTN_ROW_DOTS_WIDE=1, the default since the sixtieth session: x0.92-0.95 of the
// loop's kernel on an H100 under Nsight Compute, results/h100-perf-20261207d): a thread's HS / 8 elements of dO
// and of out read in one load each (two for a float32 out at HS 64), 16 bytes a load at HS 64 where the loop issues
// sixteen 2-byte loads (10.5 us a layer of gpt2-small under Nsight Compute, results/h200-perf-20261202d call 3: about
// 2.4 TB/s of the 25 MB it reads); the products added in the loop's order by the same expression, so the same bits;
// dout and out must start on 16 bytes (gpu/attention.py checks; the loop otherwise); the row's place by 32-bit
// divisions (rows is an int).
template <int PER> struct alignas(2 * PER) HalfRun { u16 h[PER]; };
template <int PER> struct alignas(16) FloatRun { float f[PER]; };

template <int K, int HS, bool WIDE = false>
__device__ void attention_row_dots(float* __restrict__ Dvec, int* __restrict__ sync, int n_sync,
                                   const u16* __restrict__ dout, const void* __restrict__ out, int rows, int T, int H,
                                   int out_kind) {
    const i64 id = (i64)blockIdx.x * blockDim.x + threadIdx.x;
    for (i64 s = id; s < n_sync; s += (i64)gridDim.x * blockDim.x) sync[s] = 0;
    constexpr int PER = HS / 8;
    const i64 r = id / 8;
    float acc = 0.0f;
    if (r < rows) {
        const i64 at = r * HS + (id % 8) * PER;
        if constexpr (WIDE) {
            const HalfRun<PER> d = *(const HalfRun<PER>*)(dout + at);
            float o[PER];
            if (out_kind == KIND_F32) {
                const FloatRun<PER> v = *(const FloatRun<PER>*)((const float*)out + at);
#pragma unroll
                for (int e = 0; e < PER; ++e) o[e] = v.f[e];
            } else {
                const HalfRun<PER> v = *(const HalfRun<PER>*)((const u16*)out + at);
#pragma unroll
                for (int e = 0; e < PER; ++e)
                    o[e] = out_kind == KIND_BF16 ? bf16_bits_to_f32(v.h[e]) : f16_bits_to_f32(v.h[e]);
            }
#pragma unroll
            for (int e = 0; e < PER; ++e) acc += load_from<K>(d.h[e]) * o[e];
        } else {
#pragma unroll
            for (int e = 0; e < PER; ++e) acc += load_from<K>(dout[at + e]) * load_kind(out, at + e, out_kind);
        }
    }
    acc += __shfl_xor_sync(0xffffffffu, acc, 4);
    acc += __shfl_xor_sync(0xffffffffu, acc, 2);
    acc += __shfl_xor_sync(0xffffffffu, acc, 1);
    if (r < rows && id % 8 == 0) {
        if constexpr (WIDE) {
            const int ri = (int)r, h = ri % H, i = (ri / H) % T, b = ri / (H * T);
            Dvec[((i64)b * H + h) * T + i] = acc;
        } else {
            const int h = (int)(r % H), i = (int)((r / H) % T), b = (int)(r / ((i64)H * T));
            Dvec[((i64)b * H + h) * T + i] = acc;
        }
    }
}

// dQ of 4 * 16 * MT queries of one head. Warp rows are queries; the streamed tiles hold BC keys.
// out: the forward's output, in out_kind (as dqkv is written); Dvec: written here, read by dK/dV after.
template <int K, bool SPLIT, int HS, bool DROP, int NB = Pipe<K>::NBUF>
__device__ void attention_backward_dq(void* __restrict__ dqkv, const typename Tile<K>::E* __restrict__ qkv,
                                      const typename Tile<K>::E* __restrict__ dout, const float* __restrict__ lse,
                                      float* __restrict__ Dvec, const void* __restrict__ out, int T, int H,
                                      int out_kind, Dropout drop) {
    constexpr float scale = Scale<HS>::value;
    constexpr int MT = Geometry<K>::MT, BC = Geometry<K>::DQ, NT = BC / 8;
    constexpr int RW = 16 * MT, BR = NWARPS * RW, LD = Tile<K>::LD;
    constexpr bool EXACT = (K == KIND_F32 && SPLIT);
    extern __shared__ __align__(16) unsigned char smem[];
    typedef typename Tile<K>::E E;
    E* sQ = (E*)smem;
    E* sO = sQ + BR * LD;    // dO
    E* sKV = sO + BR * LD;   // buffer b: k at 2b BC rows, v at (2b + 1) BC rows
    const int nqb = (T + BR - 1) / BR;
    const int qb = nqb - 1 - (int)blockIdx.y;
    const int bh = blockIdx.x, b = bh / H, h = bh % H, C = H * HS;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    const int r0 = qb * BR + warp * RW;   // the warp's first query
    const int last = min(qb * BR + BR - 1, T - 1) / BC;
    constexpr float c = EXACT ? scale : scale * LOG2E, lmul = EXACT ? 1.0f : LOG2E;
    const E* base = qkv + (i64)b * T * 3 * C;
    auto kv = make_stream<K, NB>([&](int kb, int buf) {
        stage<K, SPLIT, HS, BC, NB>(sKV + 2 * buf * BC * LD, base + C + h * HS, kb * BC, T, 3 * C);
        stage<K, SPLIT, HS, BC, NB>(sKV + (2 * buf + 1) * BC * LD, base + 2 * C + h * HS, kb * BC, T, 3 * C);
    }, [&](int kb, int buf) {
        if constexpr (K == KIND_F32 && !SPLIT && NB == 2) {   // q and dO (in the first group) and the tile, to TF32
            if (kb == 0) {
                land_tf32<HS, BR>((float*)sQ);
                land_tf32<HS, BR>((float*)sO);
            }
            land_tf32<HS, BC>((float*)(sKV + 2 * buf * BC * LD));
            land_tf32<HS, BC>((float*)(sKV + (2 * buf + 1) * BC * LD));
        }
    }, last);
    stage<K, SPLIT, HS, BR, NB>(sQ, base + h * HS, qb * BR, T, 3 * C);
    stage<K, SPLIT, HS, BR, NB>(sO, dout + (i64)b * T * C + h * HS, qb * BR, T, C);
    kv.start();
    float L[MT][2], Dr[MT][2];
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
        for (int r = 0; r < 2; ++r) {
            const int i = r0 + 16 * mt + g + 8 * r;
            L[mt][r] = i < T ? lse[(i64)bh * T + i] * lmul : 0.0f;
        }
    float dq[MT][HS / 8][4];
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
        for (int n = 0; n < HS / 8; ++n) dq[mt][n][0] = dq[mt][n][1] = dq[mt][n][2] = dq[mt][n][3] = 0.0f;

    for (int kb = 0; kb <= last; ++kb) {
        const int cur = kv.acquire(kb);
        if (kb == 0) {   // the staged dO is complete from here: D of the warp's rows, the four lanes of a
                         // row group each taking HS / 4 columns, their sums added in a fixed butterfly
#pragma unroll
            for (int mt = 0; mt < MT; ++mt)
#pragma unroll
                for (int r = 0; r < 2; ++r) {
                    const int il = warp * RW + 16 * mt + g + 8 * r, i = qb * BR + il;
                    float acc = 0.0f;
                    if (i < T) {
                        const E* d = sO + il * LD + t * (HS / 4);
                        const i64 at = ((i64)b * T + i) * C + h * HS + t * (HS / 4);
#pragma unroll
                        for (int e = 0; e < HS / 4; ++e) acc += operand_value<K>(d[e]) * load_kind(out, at + e, out_kind);
                    }
                    acc += __shfl_xor_sync(0xffffffffu, acc, 1);
                    acc += __shfl_xor_sync(0xffffffffu, acc, 2);
                    Dr[mt][r] = acc;
                    if (t == 0 && i < T) Dvec[(i64)bh * T + i] = acc;
                }
        }
        if (kb * BC <= r0 + RW - 1) {   // else the warp's queries all come before the tile's keys
            const E* sK = sKV + 2 * cur * BC * LD;
            const E* sV = sK + BC * LD;
            auto at = [&](int mt, int n, int e, int& i, int& j) {   // register (mt, n, e): query i, key j
                i = r0 + 16 * mt + g + 8 * (e >> 1);
                j = kb * BC + n * 8 + 2 * t + (e & 1);
            };
            const bool edge = kb * BC + BC - 1 > r0 || kb * BC + BC > T;
            KeepBits<MT, NT> keep{};
            if constexpr (DROP) keep = drop.keep_bits<ROW_PAIRS, MT, NT>(bh, T, edge, at);
            float p[MT][NT][4], ds[MT][NT][4];
            tile_product<K, SPLIT, HS, MT, NT>(p, sQ, warp * RW, sK, lane);    // S = q k^T
            tile_product<K, SPLIT, HS, MT, NT>(ds, sO, warp * RW, sV, lane);   // dPd = dO v^T
            softmax_grad<EXACT, DROP, MT, NT>(p, ds, edge, T, c, drop, keep,
                                        [&](int mt, int n, int e, int& i, int& j, float& Lc, float& Dq) {
                at(mt, n, e, i, j);
                Lc = L[mt][e >> 1];
                Dq = Dr[mt][e >> 1];
            });
            acc_product<K, SPLIT, HS, MT, NT>(dq, ds, sK, lane);   // dQ += dS k
        }
        kv.release();
    }
    store_dq<HS, MT>(dqkv, dq, r0, b, h, T, C, out_kind, lane);
}

// ---- dQ from the stored dS^T (the half builds under half roundings) ----
// dQ = scale dS k with dS read back from ds_t [BH, T, ldq] (row j = key, column i = query; ldq = the dK/dV
// kernel's query tiles times their width), which the dK/dV kernel wrote with DS: for every pair of a warp's
// RW-key chunk and a BC-query tile (RW = BC) whose chunk starts at or before the tile's last query, i.e. where
// it computed them; the rest of ds_t is never written. Here a warp owns RW queries (one such tile) and takes a
// k16 slice of keys only if it starts at or before the warp's last query: exactly the chunks written (chunks
// and tiles both start at multiples of RW). One block per (QB queries, bh), heaviest first; streamed: DSQ_KEYS
// keys of ds_t (QB + 8 halves a staged row) and of k. Keys run in order and each product sums in the tensor
// cores' float32: the same bits every run. Where dS would be recomputed instead (attention_backward_dq: S and
// dPd again, three products where this takes one) the step paid 109 us a layer of gpt2-small bf16 (1310 us a
// step, results/h200-perf-20261201c/call6-c32f18f).
// QB = BR (128 queries a block, the kernels built): each warp all HS columns of its queries. QB = BR / 2 (64; its
// kernels, measured no faster in the ninth session, were removed): two warps a query chunk, each HS / 2 columns. The
// causal rows make a head's last block read T / DSQ_KEYS key tiles and its first one; at 128 queries gpt2-small's 96
// heaviest blocks (16 tiles) ran alone at the end of a 1.45-wave grid (Nsight Compute: 86% of the cycles with an SM
// active, call 3 of results/h200-perf-20261201f); at 64 they are half as heavy, twice as many and fill the tail, while
// each block stages the same k tiles for half the queries (k's L2 reads up from half of dS's bytes to as many) and
// fewer registers let six blocks share an SM instead of four. Every dQ element sums the same k16 slices in the same
// order either way, each in one mma chain: the same bits. The 64-query form also leaves unstaged the ds_t pieces whose
// key chunk lies past their query chunk (never written, never read by a warp): the diagonal tiles' DRAM reads of memory
// nothing wrote.
// EVICT: ds_t read with the evict-first L2 policy (l2_evict_first), k as before: the same bits.
#define DSQ_KEYS 64
template <int K, int HS, int QB, bool EVICT = false>
__device__ void attention_backward_dq_ds(void* __restrict__ dqkv, const u16* __restrict__ qkv,
                                         const u16* __restrict__ ds_t, int ldq, int T, int H, int out_kind) {
    constexpr int MT = Geometry<K>::MT, RW = 16 * MT, BR = NWARPS * RW, LD = Tile<K>::LD;
    constexpr int BK = DSQ_KEYS, LDS = QB + 8, PIECES = QB / 8;
    constexpr int CHUNKS = QB / RW, COLS = HS * CHUNKS / NWARPS;   // query chunks a block; dQ columns a warp
    static_assert(K != KIND_F32 && RW == Geometry<K>::DKDV && BK % 16 == 0, "half builds; warp rows = dK/dV's tiles");
    static_assert((QB == BR || QB == BR / 2) && COLS % 16 == 0, "a warp: one query chunk, whole k16 column pairs");
    extern __shared__ __align__(16) unsigned char smem[];
    u16* sbuf = (u16*)smem;   // buffer b: dS^T [BK][LDS], then k [BK][LD]
    const int nqb = (T + QB - 1) / QB;
    const int qb = nqb - 1 - (int)blockIdx.y;
    const int bh = blockIdx.x, b = bh / H, h = bh % H, C = H * HS;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int chunk = CHUNKS == NWARPS ? warp : warp % CHUNKS, d0 = CHUNKS == NWARPS ? 0 : warp / CHUNKS * COLS;
    const int r0 = qb * QB + chunk * RW;   // the warp's first query
    const int last = min(qb * QB + QB - 1, T - 1) / BK;
    const u16* kbase = qkv + (i64)b * T * 3 * C + C + h * HS;
    const u16* dsb = ds_t + (i64)bh * T * ldq;
    auto st = make_stream<K>([&](int kt, int buf) {
        u16* s = sbuf + buf * BK * (LDS + LD);
#pragma unroll
        for (int e = 0; e < BK * PIECES / NTHREADS; ++e) {   // keys past T and queries past ldq: zeros
            const int idx = threadIdx.x + e * NTHREADS, r = idx / PIECES, c = (idx % PIECES) * 8;
            const int j = kt * BK + r, i = qb * QB + c;
            u16* d = s + r * LDS + c;
            if (j < T && i < ldq) {
                if (QB == BR || j / RW <= i / RW) {
                    if constexpr (EVICT) cp_async16_policy(d, dsb + (i64)j * ldq + i, l2_evict_first());
                    else cp_async16(d, dsb + (i64)j * ldq + i);
                }
            } else {
                *(uint4*)d = make_uint4(0u, 0u, 0u, 0u);
            }
        }
        stage<K, false, HS, BK>(s + BK * LDS, kbase, kt * BK, T, 3 * C);
    }, last);
    st.start();
    float dq[MT][COLS / 8][4];
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
        for (int n = 0; n < COLS / 8; ++n) dq[mt][n][0] = dq[mt][n][1] = dq[mt][n][2] = dq[mt][n][3] = 0.0f;
    for (int kt = 0; kt <= last; ++kt) {
        const int cur = st.acquire(kt);
        const u16* sD = sbuf + cur * BK * (LDS + LD);
        const u16* sK = sD + BK * LDS;
#pragma unroll
        for (int ks = 0; ks < BK / 16; ++ks) {
            if (kt * BK + ks * 16 <= r0 + RW - 1) {   // else: keys past the warp's queries, never written
                AFrag<K> fa[MT];
#pragma unroll
                for (int mt = 0; mt < MT; ++mt) load_a_trans<LDS>(fa[mt].hi, sD, chunk * RW + 16 * mt, ks, lane);
#pragma unroll
                for (int np = 0; np < COLS / 16; ++np) {
                    BFrag<K> fb[2];
                    load_b_cols<K, false>(fb, sK, d0 + np * 16, ks, lane);   // B[key][d] = k
#pragma unroll
                    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
                        for (int q = 0; q < 2; ++q) mma_acc<K, false, true>(dq[mt][2 * np + q], fa[mt], fb[q]);
                }
            }
        }
        st.release();
    }
    store_dq<HS, MT, COLS>(dqkv, dq, r0, b, h, T, C, out_kind, lane, d0);
}

// ---- dK/dV with dS stored, on a TMA producer with register reallocation (written in the eighteenth session, the
// default since the nineteenth; resident below) ----
// Why: the wgmma dK/dV kernel on cp.async (attention_backward_dkdv_wg, removed since: the header) with two warpgroups
// (gpt2-small bf16: 150.9 us a layer against the 124.5 of cuDNN's whole backward kernel, dQ included;
// results/families-20261203-011243-h200-edition) stages each q and dO tile by cp.async from its own warpgroups and
// holds its block at a barrier around every tile (Nsight Compute: barrier the largest stall, 1.10 cycles an issued
// instruction; 8 warps an SM at 252 registers, the tensor pipe 21% busy: call 1 of results/h200-perf-20261202e), so
// both warpgroups issue, wait and run their softmax gradients in step while the tensor cores idle. FlashAttention-3's
// backward hands the tiles to the copy engine from a producer warpgroup and lets the consumers run apart. Here: 384
// threads and 128 keys of one head a block. Warpgroup 0 produces: its thread 0 issues the copies (k and v of the
// block's keys once, as two 64-row boxes each; then each 64-query tile's q and dO boxes into a ring of DKDV_TMA_STAGES
// stages) and its warp 1 copies the tile's lse and D rows (zeros past T) into the stage, each arriving on the stage's
// barrier; setmaxnreg gives its registers to the consumers (24 kept, 240 theirs, FlashAttention-3's split: 128 x 24 +
// 256 x 240 = 64,512 of 65,536). ptxas (NVRTC 12.9) then builds the consumers in 240 registers with 8 bytes spilled
// (232: 32 bytes; none: 88; at 256 threads a block, 246 registers and no spill:
// results/cpu-checks-20261203b/ptxas-new-attention-kernels.txt). Warpgroups 1 and 2 own 64 keys each and compute that
// kernel's tile (two warpgroups, evict-first ds_t stores) operation for operation on the same operands: S^T = k q^T and
// dPd^T = v dO^T with both operands K-major from the 128B-swizzled boxes, the softmax gradient, dS^T stored to ds_t, dV
// += Pd^T dO and dK += dS^T q with q and dO read MN-major (the forward's v descriptors); so its bits, which were the
// mma.sync kernel's (attention_backward_dkdv with DS; the GPU test "wgmma_backward_is_the_mma_sync_bits" asks for them
// now). A consumer whose keys all lie after a tile's queries awaits and releases it unread, so that both count every
// phase of the ring. Box rows past T hold the next sequence's q and dO (or zeros past the last): the mask gives them
// probability 0, as the other forms' zero rows.
#define DKDV_TMA_STAGES 2

// One 64-query tile of the TMA dK/dV kernel (attention_backward_dkdv_tma_resident; its plain form, removed, ran it
// too): S^T and dPd^T, the softmax gradient, dS^T stored, dV and dK accumulated, each product awaited. k and v at ak
// and av, stage s's q and dO boxes in sQO and its lse and D rows in sLD. Inlined, the machine code of the kernels it
// was taken from was unchanged (scripts/cubin_text_compare.py, results/cpu-checks-20261203j).
// The TMA dK/dV kernel's lse/D warp: query tile qt's lse and D rows (zeros past T) into stage s (lse at 2 s BC, D at
// (2 s + 1) BC of sLD), then its arrival on full[s] (a release: the warp's stores before it). WITH_D false: lse only
// (form 4, whose producer warps made D; removed).
template <int BC, bool WITH_D = true>
__device__ __forceinline__ void stage_lse_d(float* sLD, u64* full, int s, int qt, const float* __restrict__ lse,
                                            const float* __restrict__ Dvec, int bh, int T, int lane) {
    float* l = sLD + 2 * s * BC;
    for (int k = lane; k < BC; k += 32) {
        const int i = qt * BC + k;
        l[k] = i < T ? lse[(i64)bh * T + i] : 0.0f;
        if constexpr (WITH_D) l[BC + k] = i < T ? Dvec[(i64)bh * T + i] : 0.0f;
    }
    __syncwarp();
    if (lane == 0) mbar_arrive(&full[s]);
}

// The head of a TMA dK/dV tile (tma_dkdv_tile): S^T = k q^T and dPd^T = v dO^T from the stage's
// boxes, awaited, then the softmax gradient: p leaves as Pd^T, ds as dS^T (C registers, float32).
template <int K, int HS, bool DROP>
__device__ __forceinline__ void tma_dkdv_scores(float (&p)[1][8][4], float (&ds)[1][8][4], u32 ak, u32 av, u32 aq,
                                                u32 ao, const float* sL, int qt, int k0, int g, int t, int T, int bh,
                                                const Dropout& drop) {
    constexpr float c = Scale<HS>::value * LOG2E;
    constexpr int BC = 64, NT = BC / 8;
    static_assert(NT == 8, "64-query tiles");
    const float* sD = sL + BC;
    auto at = [&](int, int n, int e, int& i, int& j) {   // register (n, e): query i, key j
        i = qt * BC + n * 8 + 2 * t + (e & 1);
        j = k0 + g + 8 * (e >> 1);
    };
    const bool edge = qt * BC < k0 + 15 || qt * BC + BC > T;   // the warp's block crosses the diagonal or T
    KeepBits<1, NT> keep{};
    if constexpr (DROP) keep = drop.keep_bits<LANE_PAIRS, 1, NT>(bh, T, edge, at);
    auto coords = [&](int mt, int n, int e, int& i, int& j, float& Lc, float& Dq) {
        at(mt, n, e, i, j);
        const int il = n * 8 + 2 * t + (e & 1);
        Lc = sL[il] * LOG2E;
        Dq = sD[il];
    };
    // Each box's descriptor once, each k16 slice's by its offset in the start-address field (tma_forward_tile says
    // why that is the same descriptor): the K-major ones step 32 bytes a slice.
    const u64 dk_k = wg_desc_sw128(ak, TMA_K_LBO, TMA_K_SBO), dq_k = wg_desc_sw128(aq, TMA_K_LBO, TMA_K_SBO);
    const u64 dv_k = wg_desc_sw128(av, TMA_K_LBO, TMA_K_SBO), do_k = wg_desc_sw128(ao, TMA_K_LBO, TMA_K_SBO);
    wg_fence();
#pragma unroll
    for (int k16 = 0; k16 < HS / 16; ++k16)   // S^T = k q^T: a k16 slice is 32 bytes along the swizzled rows
        wg_mma_ss<K>(p[0], dk_k + 32 / 16 * k16, dq_k + 32 / 16 * k16, k16 > 0);
#pragma unroll
    for (int k16 = 0; k16 < HS / 16; ++k16)   // dPd^T = v dO^T
        wg_mma_ss<K>(ds[0], dv_k + 32 / 16 * k16, do_k + 32 / 16 * k16, k16 > 0);
    wg_commit();
    wg_wait_all();
    wg_hold(p[0]);
    wg_hold(ds[0]);
    softmax_grad<false, DROP, 1, NT>(p, ds, edge, T, c, drop, keep, coords);
}

// A TMA dK/dV tile's accumulating products, issued (the caller commits and waits): dV += Pd^T dO and dK += dS^T q,
// 16 queries a slice, the A fragments from registers, the dO and q boxes MN-major (2048 bytes a slice).
template <int K, int HS>
__device__ __forceinline__ void tma_dkdv_issue(float (&dv)[HS / 8][4], float (&dk)[HS / 8][4], const u32 (&pf)[4][4],
                                               const u32 (&df)[4][4], u64 do_mn, u64 dq_mn) {
#pragma unroll
    for (int k16 = 0; k16 < 4; ++k16)   // dV += Pd^T dO
        wg_mma<K, true>(dv, pf[k16], do_mn + 2048 / 16 * k16, 1);
#pragma unroll
    for (int k16 = 0; k16 < 4; ++k16)   // dK += dS^T q
        wg_mma<K, true>(dk, df[k16], dq_mn + 2048 / 16 * k16, 1);
}

template <int K, int HS, bool DROP, bool EVICT = true>
__device__ __forceinline__ void tma_dkdv_tile(float (&dk)[HS / 8][4], float (&dv)[HS / 8][4], u32 ak, u32 av,
                                              unsigned char* sQO, float* sLD, int s, int qt, int k0, int g, int t,
                                              int T, int bh, const Dropout& drop, u16* __restrict__ ds_t, int ldq,
                                              u16* sdS, int cwarp, int lane) {
    constexpr int BC = 64, NT = BC / 8, BOX = 64 * HS * 2, LDS = BC + 8;
    const u32 aq = smem_u32(sQO + 2 * s * BOX), ao = aq + BOX;
    float p[1][NT][4], ds[1][NT][4];
    tma_dkdv_scores<K, HS, DROP>(p, ds, ak, av, aq, ao, sLD + 2 * s * BC, qt, k0, g, t, T, bh, drop);
    // the MN-major descriptors (dO and q as the B of dV and dK) step 2048 bytes a slice
    const u64 do_mn = wg_desc_sw128(ao, TMA_V_LBO, TMA_V_SBO), dq_mn = wg_desc_sw128(aq, TMA_V_LBO, TMA_V_SBO);
    u32 pf[NT / 2][4], df[NT / 2][4];   // Pd^T and dS^T as A fragments, rounded to the half type
    pack_a<K, NT>(pf, p[0]);   // first: P^T's registers are free while dS^T is stored (ptxas: fewer spills)
    store_ds_t<K, 1, NT, LDS, EVICT>(ds_t + ((i64)bh * T + k0) * ldq + qt * BC, ldq, T - k0,
                                    sdS + cwarp * 16 * LDS, ds, lane);
    pack_a<K, NT>(df, ds[0]);
    wg_fence();
    tma_dkdv_issue<K, HS>(dv, dk, pf, df, do_mn, dq_mn);
    wg_commit();
    wg_wait_all();
    wg_hold(dv);
    wg_hold(dk);
}


// ---- the TMA dK/dV resident (form 5, tmarr): the plain TMA form above, one block an SM ----
// Why: as the forward's form 7 (attention_forward_tma_resident, which took 13-14% off form 3 alone): the plain form
// (attention_backward_dkdv_tma, removed since) held an SM alone (240 registers for its consumers), so each of its
// blocks starts with the tensor cores idle while k, v and the first q and dO tiles load, and ends with its dK and dV
// stores behind nothing; gpt2-medium has 1024 blocks of 2 to 16 query tiles (128 heads x 8 key blocks), gpt2-small 768.
// Here one block an SM takes items (a head's 128 keys; item j is key block j / BH of head j % BH, the plain form's grid
// in its launch order: the first key blocks, which see the most queries, first), its first by blockIdx.x and the rest
// by tickets (sched[0]; the last block to finish leaves both tickets at zero, as form 7's). k and v go to two buffers,
// so the next item's load as soon as a buffer is free; the item's index goes with them (kv_item, written before the
// arrival kv_full waits for; -1 ends the block). The ring of q, dO, lse and D stages runs on across items: the producer
// thread and the lse/D warp count the same tiles as the consumers. Every item is the plain form's block, tile for tile
// (tma_dkdv_tile): its bits. Written in the twenty-fourth session; run in the twenty-fifth
// (results/h200-perf-20261204): its kernel cases and whole-run graph test the plain form's bits, the whole backward
// alone x0.939 / x0.972 / x0.974 of it on nanogpt / gpt2-small / gpt2-medium; the default since.
// The resident dK/dV's item as (key block kb, head bh). ORDER 0 (tmarr): key block by key block over all heads, the
// longest items first. ORDER 1 (tmarrg, TR2_ATTN_DS_GROUPED=1, written in the sixtieth session, the default on long
// rows since the sixty-first): the heads in groups of G = ceil(grid / nkb), about one item a block, group after group
// and key block by key block within a group; the grouped form stores ds_t without the evict-first policy and the TMA
// dQ after it takes the heads newest first (attention_backward_dq_tma's NEWEST). Why: ds_t (~107 MB a layer of gpt2-small) is stored evict-first, so the
// dQ pass reads all of it from DRAM (twenty-ninth session: L2 hit rate 25-27%, ~126 MB read); the evict-first policy
// was there to keep ds_t from pushing out the q and dO tiles that key-block-major items reread across the whole
// kernel (ninth session). Grouped, a head's q and dO are reread only within its group's wave, so the policy can go,
// and the last groups' ds_t (about the L2's size) is still in the L2 when the dQ pass, newest heads first, reads it.
// The twenty-ninth session's groups of batches did not find ds_t in the L2, but they stored it evict-first.
// Every item computes what it computes in ORDER 0: the same bits. Measured (H100, results/h100-perf-20261207f): on
// gpt2-medium the dK/dV's L2 hit rate 61% -> 79%, the kernel 152.6 -> 142.0 us, the dQ 72.7 -> 69.4 us.
// ORDER 2 (the descending chain's, attn_backward_dkdv_dqc_): ORDER 1's groups with the key blocks taken from the last
// (the shortest) down, so that an item's turns in the chain wait only on items with earlier tickets.
// ORDER 0 with CHAIN (attn_backward_dkdv_dqa_, TR2_ATTN_DQ_CHAIN_ASC, the chain's default): the chain keys ascending,
// whose turns wait on key block kb - 1, which ORDER 0 tickets earlier (chain_turn_asc).
template <int ORDER>
__device__ __forceinline__ void dkdv_item(int item, int BH, int nkb, int& kb, int& bh) {
    if constexpr (ORDER == 0) {
        kb = item / BH;
        bh = item % BH;
    } else {
        const int G = ((int)gridDim.x + nkb - 1) / nkb, per = G * nkb, grp = item / per, r = item - grp * per;
        const int in_group = min(G, BH - grp * G);   // the last group may be smaller
        kb = ORDER == 2 ? nkb - 1 - r / in_group : r / in_group;
        bh = grp * G + r % in_group;
    }
}

// ---- dQ chained through the dK/dV kernel (attn_backward_dkdv_dqc_, TR2_ATTN_DQ_CHAIN; built in the sixty-first
// session; by default on rows of at most 256 since the sixty-second, results/h100-perf-20261207g) ----
// Why: after the grouped dK/dV the TMA dQ pass still reads ds_t back, ~110 MB a layer of gpt2-small from DRAM (52.99
// us on an H100, beside 110.37 us of dK/dV; results/h100-perf-20261207f), and the dK/dV kernel's ds_t stores are 117 of
// the 166 MB it moves. Here no ds_t and no dQ pass: each consumer warpgroup stages its dS^T tile in shared memory,
// laid as a TMA box of ds_t lands (stage_ds_t_swizzled), and multiplies it by its own k box (chain_dq_part: the TMA
// dQ's product, m64n64k16 on both operands MN-major): its 64 keys' part of the query tile's dQ, from zero. The parts
// are added in a fixed order, the keys descending: the tile's sum starts at the warpgroup holding its diagonal and
// ends at key 0's, whose warpgroup (key block 0's first) writes dQ. Between items the running float32 sum goes
// through global memory (dq_acc: a 64 x 64 slot a head and query tile, in the accumulators' register order, read
// through the L2 only: an SM may meet the same slot in two items) and a counter a head and tile (dq_turn: the parts
// added so far, zeroed by the row dots before the launch); between a block's two warpgroups through shared memory
// (two named barriers, CHAIN_FULL and CHAIN_EMPTY). An item waits only for the item of the next key block of its
// head, which ORDER 2 tickets earlier; scripts/probes/dq_chain_sim.py models that order: an item meets its turn
// about two tiles after the one before it took it, so a handoff of up to ~3 tiles' time is hidden, and the price is
// the added product (~0.9 of today's dK/dV + dQ at a quarter of a tile's work; above 1.0 from about 0.35). dK and dV:
// the grouped kernel's arithmetic, tile for tile, so its bits; dQ: a new fixed order of the same float32 parts.
// Measured on an H100 (the backward alone, bf16): x0.916 of the TMA dK/dV and mma.sync dQ on the char model's rows of
// 256, but x1.010 / x0.983 of the grouped dK/dV and TMA dQ on gpt2-small / gpt2-medium's rows of 1024; one hop of the
// sum between two blocks took ~1.4 us (scripts/probes/dq_handoff_probe.py), ~0.7 of a tile's work as modelled.
#define CHAIN_FULL 5    // warpgroup 1's running sum in the handoff buffer (1 arrives, 0 waits)
#define CHAIN_EMPTY 6   // warpgroup 0 has read it (0 arrives, 1 waits before writing the next)
#define CHAIN_WG0 3     // warpgroup 0's own barrier (its dS^T rows written; its slot written before the counter)
#define CHAIN_WG1 4     // warpgroup 1's (its dS^T rows written; the turn seen before its loads)

// The warp's dS^T rows (keys 16 warp + g and + 8, as dK's A fragments df hold them: pack_a's roundings, which
// store_ds_t's are) into the warpgroup's 64 x 64 tile at sT as a 128B-swizzled TMA box lands: 16-byte piece c of
// row r at piece c ^ (r & 7) (r & 7 is g here). A warp's 32 lanes write 32 distinct banks.
template <int NT>
__device__ __forceinline__ void stage_ds_t_swizzled(unsigned char* sT, const u32 (&df)[NT / 2][4], int warp, int g,
                                                    int t) {
#pragma unroll
    for (int n = 0; n < NT; ++n)
#pragma unroll
        for (int h = 0; h < 2; ++h)
            *(u32*)(sT + (16 * warp + g + 8 * h) * 128 + ((n ^ g) << 4) + 4 * t) = df[n >> 1][2 * (n & 1) + h];
}

// part = dS k over the warpgroup's 64 keys (issued; the caller commits and waits): the staged dS^T at a_ds and the
// warpgroup's k box at ak, both MN-major, 16 keys (2048 bytes of each) a slice, the first slice overwriting.
template <int K, int HS>
__device__ __forceinline__ void chain_dq_part(float (&part)[HS / 8][4], u32 a_ds, u32 ak) {
    const u64 dd = wg_desc_sw128(a_ds, TMA_V_LBO, TMA_V_SBO), dk = wg_desc_sw128(ak, TMA_V_LBO, TMA_V_SBO);
#pragma unroll
    for (int k16 = 0; k16 < 4; ++k16) wg_mma_ss_tt<K>(part, dd + 2048 / 16 * k16, dk + 2048 / 16 * k16, k16 > 0);
}

// A chained dK/dV tile: tma_dkdv_tile's products and roundings, dS^T staged in shared memory instead of stored to
// ds_t, and the warpgroup's dQ part (dS k) issued with dV and dK.
template <int K, int HS, bool DROP>
__device__ __forceinline__ void tma_dkdv_chain_tile(float (&dk)[HS / 8][4], float (&dv)[HS / 8][4],
                                                    float (&part)[HS / 8][4], u32 ak, u32 av, unsigned char* sQO,
                                                    float* sLD, int s, int qt, int k0, int g, int t, int T, int bh,
                                                    const Dropout& drop, unsigned char* sT, int cw, int warp) {
    constexpr int BC = 64, NT = BC / 8, BOX = 64 * HS * 2;
    const u32 aq = smem_u32(sQO + 2 * s * BOX), ao = aq + BOX;
    float p[1][NT][4], ds[1][NT][4];
    tma_dkdv_scores<K, HS, DROP>(p, ds, ak, av, aq, ao, sLD + 2 * s * BC, qt, k0, g, t, T, bh, drop);
    const u64 do_mn = wg_desc_sw128(ao, TMA_V_LBO, TMA_V_SBO), dq_mn = wg_desc_sw128(aq, TMA_V_LBO, TMA_V_SBO);
    u32 pf[NT / 2][4], df[NT / 2][4];
    pack_a<K, NT>(pf, p[0]);
    pack_a<K, NT>(df, ds[0]);
    stage_ds_t_swizzled<NT>(sT, df, warp, g, t);   // the last tile's dQ part has completed (its wait_group)
    fence_proxy_async();                            // the rows, seen by the tensor cores' reads
    if (cw == 0) bar_sync_n<CHAIN_WG0, 128>();      // the warpgroup's four warps' rows
    else bar_sync_n<CHAIN_WG1, 128>();
    wg_fence();
    tma_dkdv_issue<K, HS>(dv, dk, pf, df, do_mn, dq_mn);
    chain_dq_part<K, HS>(part, smem_u32(sT), ak);
    wg_commit();
    wg_wait_all();
    wg_hold(dv);
    wg_hold(dk);
    wg_hold(part);
}

// The running sum's slot of (head bh, query tile qt) in dq_acc: a warpgroup's 128 threads' 32 floats, thread-fastest
// in float4s, so each warp's loads and stores are 512 contiguous bytes.
__device__ __forceinline__ float4* chain_slot(float* dq_acc, int bh, int nqt, int qt) {
    return (float4*)(dq_acc + ((i64)bh * nqt + qt) * 4096) + (threadIdx.x & 127);
}

// The pieces of a turn. chain_wait: thread 0 polls the tile's counter until it reads `want` (a turn that never comes
// is a bug: the kernel stops, an error the caller sees, after ~a second of polls), then the warpgroup's barrier BAR.
// chain_add: the running sum read from src (dq_acc's slot through the L2, or the handoff buffer) added to v.
// chain_hand: v into the handoff buffer for the block's other warpgroup, once it has read the last one.
// chain_pass: v to dq_acc's slot and, once every thread's part is there, the counter at `count`.
template <int BAR>
__device__ __forceinline__ void chain_wait(const int* turn, int want) {
    if ((threadIdx.x & 127) == 0)
        for (u32 spins = 0; ld_acquire(turn) != want; ++spins) {
            if (spins == (1u << 25)) __trap();
            __nanosleep(32);
        }
    bar_sync_n<BAR, 128>();
}

template <int HS, bool GLOBAL>
__device__ __forceinline__ void chain_add(float (&v)[HS / 8][4], const float4* src) {
#pragma unroll
    for (int n = 0; n < HS / 8; ++n) {
        const float4 a = GLOBAL ? __ldcg(src + 128 * n) : src[128 * n];
        v[n][0] += a.x;
        v[n][1] += a.y;
        v[n][2] += a.z;
        v[n][3] += a.w;
    }
}

template <int HS>
__device__ __forceinline__ void chain_hand(const float (&v)[HS / 8][4], float4* sHand, bool& handed) {
    if (handed) bar_sync_n<CHAIN_EMPTY, 256>();   // the other warpgroup has read the last one
#pragma unroll
    for (int n = 0; n < HS / 8; ++n)
        sHand[128 * n + (threadIdx.x & 127)] = make_float4(v[n][0], v[n][1], v[n][2], v[n][3]);
    bar_arrive_n<CHAIN_FULL, 256>();
    handed = true;
}

template <int HS, int BAR>
__device__ __forceinline__ void chain_pass(const float (&v)[HS / 8][4], float4* slot, int* turn, int count) {
#pragma unroll
    for (int n = 0; n < HS / 8; ++n) __stcg(slot + 128 * n, make_float4(v[n][0], v[n][1], v[n][2], v[n][3]));
    bar_sync_n<BAR, 128>();   // every thread's part of the sum is in dq_acc
    if ((threadIdx.x & 127) == 0) st_release(turn, count);
}

// The warpgroup's turn in query tile qt's chain, its part made: warpgroup cw of key block kb holds 64-key step
// j = 2 kb + cw, and tile qt's parts go j = qt, qt - 1, .., 0. Warpgroup 1 adds the sum so far (from key block kb + 1's
// warpgroup 0 through dq_acc, once the tile's counter says qt - j parts are in) unless it starts the sum, and hands the
// result to warpgroup 0; warpgroup 0 adds its part to that (or starts the sum, on its diagonal tile) and writes the
// sum to dq_acc with the counter at qt - j + 1, or, holding key 0, writes dQ.
template <int HS>
__device__ __forceinline__ void chain_turn(float (&part)[1][HS / 8][4], void* dqkv, float* dq_acc, int* dq_turn,
                                           float4* sHand, bool& handed, int cw, int kb, int qt, int bh, int nqt, int b,
                                           int h, int T, int C, int out_kind, int warp, int lane) {
    const int j = 2 * kb + cw;
    int* turn = dq_turn + (i64)bh * nqt + qt;
    float (&v)[HS / 8][4] = part[0];
    if (cw == 1) {
        if (j < qt) {   // key block kb + 1's warpgroup 0 had its turn before
            chain_wait<CHAIN_WG1>(turn, qt - j);
            chain_add<HS, true>(v, chain_slot(dq_acc, bh, nqt, qt));
        }
        chain_hand<HS>(v, sHand, handed);
        return;
    }
    if (j < qt) {   // warpgroup 1 of this item had the turn before
        bar_sync_n<CHAIN_FULL, 256>();
        chain_add<HS, false>(v, sHand + (threadIdx.x & 127));
        bar_arrive_n<CHAIN_EMPTY, 256>();
    }
    if (kb == 0) {   // key 0: the last part
        store_dq<HS, 1>(dqkv, part, qt * 64 + warp * 16, b, h, T, C, out_kind, lane);
        return;
    }
    chain_pass<HS, CHAIN_WG0>(v, chain_slot(dq_acc, bh, nqt, qt), turn, qt - j + 1);
}

// The ascending chain's turn (ORDER 0, attn_backward_dkdv_dqa_; TR2_ATTN_DQ_CHAIN_ASC, sixty-third session): tile
// qt's parts go j = 0, 1, .., qt, so within an item warpgroup 0 (step 2 kb) comes first. It adds the sum so far (from
// key block kb - 1's warpgroup 1 through dq_acc, once the tile's counter says j parts are in) unless it holds key 0, and
// hands the result to warpgroup 1, or, on the item's first tile (qt = 2 kb: its diagonal, where warpgroup 1 has no
// part), writes dQ. Warpgroup 1 adds its part to that and writes dQ on its diagonal (qt = 2 kb + 1), else the sum to
// dq_acc with the counter at j + 1. The item a turn waits for (key block kb - 1) has the earlier ticket in ORDER 0.
// Why the other direction: the descending chain needs each head's key blocks shortest first, so every order of its
// tickets ends on long items and the blocks idle at the end (Nsight Compute, results/h100-perf-20261207h: the SMs
// active 83% of the chained kernel's cycles against 90% of the grouped one's); ascending, the tickets go longest first.
// Measured on an H100 (results/h100-perf-20261207h, the backward alone, bf16): x0.938 of the descending chain on the
// char model's rows of 256, but x1.006 / x1.040 of the grouped default on gpt2-small / gpt2-medium (the model that
// chose it counts no memory: these tickets reread each head's q and dO at every key block; on gpt2-medium its L2 hit
// rate 52% against the descending chain's 80%, its SMs idle 3.7% of its cycles against 14.5%, Nsight Compute,
// results/h100-perf-20261207i call 1). The char model's step with it: -0.025 ms bf16, -0.023 f16, faster in 6 of 6
// rounds (the same call). So the chain's default (gpu/attention.py's DQ_CHAIN_ASC).
template <int HS>
__device__ __forceinline__ void chain_turn_asc(float (&part)[1][HS / 8][4], void* dqkv, float* dq_acc, int* dq_turn,
                                               float4* sHand, bool& handed, int cw, int kb, int qt, int bh, int nqt,
                                               int b, int h, int T, int C, int out_kind, int warp, int lane) {
    const int j = 2 * kb + cw;
    int* turn = dq_turn + (i64)bh * nqt + qt;
    float (&v)[HS / 8][4] = part[0];
    if (cw == 0) {
        if (j > 0) {   // key block kb - 1's warpgroup 1 had its turn before
            chain_wait<CHAIN_WG0>(turn, j);
            chain_add<HS, true>(v, chain_slot(dq_acc, bh, nqt, qt));
        }
        if (j == qt)   // the diagonal, warpgroup 1 with no part of the tile: the last part
            store_dq<HS, 1>(dqkv, part, qt * 64 + warp * 16, b, h, T, C, out_kind, lane);
        else
            chain_hand<HS>(v, sHand, handed);
        return;
    }
    bar_sync_n<CHAIN_FULL, 256>();   // warpgroup 0's sum: it always has a part before this one (2 kb < j <= qt)
    chain_add<HS, false>(v, sHand + (threadIdx.x & 127));
    bar_arrive_n<CHAIN_EMPTY, 256>();
    if (j == qt)   // the diagonal: the last part
        store_dq<HS, 1>(dqkv, part, qt * 64 + warp * 16, b, h, T, C, out_kind, lane);
    else
        chain_pass<HS, CHAIN_WG1>(v, chain_slot(dq_acc, bh, nqt, qt), turn, j + 1);
}

// CHAIN (ORDER 2, keys descending; ORDER 0, ascending: chain_turn_asc): dQ chained through the items instead of ds_t
// (above); dq_acc and dq_turn its slots and counters.
template <int K, int HS, bool DROP, int S = DKDV_TMA_STAGES, int ORDER = 0, bool CHAIN = false>
__device__ void attention_backward_dkdv_tma_resident(void* __restrict__ dqkv, const TensorMap* tq, const TensorMap* tdo,
                                                     const float* __restrict__ lse, const float* __restrict__ Dvec,
                                                     u16* __restrict__ ds_t, int ldq, int T, int H, int BH, int* sched,
                                                     int out_kind, Dropout drop, float* __restrict__ dq_acc = nullptr,
                                                     int* __restrict__ dq_turn = nullptr) {
#ifdef ATTN_WGMMA
    constexpr float scale = Scale<HS>::value;
    constexpr int BR = 128, BC = 64, BOX = 64 * HS * 2;
    static_assert(HS == 64, "one 128-byte row a key or query: the 128B swizzle's row");
    extern __shared__ __align__(128) unsigned char smem[];
    __shared__ __align__(8) u64 bars[2 * S + 4];
    __shared__ int kv_item[2];
    u64* full = bars;                  // full[s]: the q and dO boxes' arrival with their bytes, and the lse/D rows'
    u64* empty = bars + S;             // empty[s]: the 8 consumer warps are done with the stage
    u64* kv_full = bars + 2 * S;       // kv_full[b]: buffer b's item index written and its k and v boxes arrived
    u64* kv_empty = bars + 2 * S + 2;  // kv_empty[b]: the 8 consumer warps are done with buffer b
    unsigned char* base = smem + ((1024u - (smem_u32(smem) & 1023u)) & 1023u);   // the swizzle repeats every 1 KB
    unsigned char* sKV = base;                      // buffer b: consumer c's 64 keys at sKV + (4 b + c) BOX, v + 2 BOX
    unsigned char* sQO = base + 8 * BOX;            // stage s: q at sQO + 2 s BOX, dO at + BOX
    float* sLD = (float*)(sQO + 2 * S * BOX);       // stage s: lse at 2 s BC, D at (2 s + 1) BC
    u16* sdS = (u16*)(sLD + 2 * S * BC);            // consumer warp w: 16 rows of BC + 8 halves
    // CHAIN, in sdS's place (on 1 KB: 8 BOX + S (2 BOX + 2 BC floats)): consumer c's swizzled dS^T tile at
    // sChain + c BOX, then the handoff buffer of warpgroup 1's running sum (64 x 64 floats)
    unsigned char* sChain = (unsigned char*)sdS;
    float4* sHand = (float4*)(sChain + 2 * BOX);
    const int nkb = (T + BR - 1) / BR, nqt = (T + BC - 1) / BC, items = BH * nkb, C = H * HS;
    const int wg = warpgroup_index(), lane = threadIdx.x & 31;
    if (threadIdx.x == 0) {
        for (int s = 0; s < S; ++s) {
            mbar_init(&full[s], 2);   // the copies' arrival, the lse/D warp's
            mbar_init(&empty[s], 8);
        }
        for (int b = 0; b < 2; ++b) {
            mbar_init(&kv_full[b], 1);
            mbar_init(&kv_empty[b], 8);
        }
        mbar_init_fence();
    }
    __syncthreads();
    if (wg == 0) {   // the producer: its registers go to the consumers
        asm volatile("setmaxnreg.dec.sync.aligned.u32 24;\n" ::: "memory");
        if (threadIdx.x == 0) {
            int it = 0;   // query tiles loaded so far, over all items: the ring's stage and phase
            for (int n = 0;; ++n) {
                const int item = resident_item(sched, n);
                const int kvs = n & 1;
                if (n >= 2) mbar_wait(&kv_empty[kvs], ((n >> 1) - 1) & 1);
                kv_item[kvs] = item < items ? item : -1;
                if (item >= items) {
                    mbar_arrive(&kv_full[kvs]);   // no boxes: the phase completes on this arrival; all stop
                    break;
                }
                int kb, bh;
                dkdv_item<ORDER>(item, BH, nkb, kb, bh);
                const int b = bh / H, h = bh % H, row0 = b * T;
                const int first = (kb * BR) / BC;
                unsigned char* sK = sKV + 4 * kvs * BOX;
                mbar_expect_tx(&kv_full[kvs], 4 * BOX);
                tma_load_kv128<HS>(sK, sK + 2 * BOX, tq, &kv_full[kvs], C, h, row0 + kb * BR);
                for (int qt = first; qt < nqt; ++qt, ++it) {
                    const int s = it % S;
                    if (it >= S) mbar_wait(&empty[s], ((it / S) - 1) & 1);
                    mbar_expect_tx(&full[s], 2 * BOX);
                    tma_load_2d(sQO + 2 * s * BOX, tq, &full[s], h * HS, row0 + qt * BC);
                    tma_load_2d(sQO + (2 * s + 1) * BOX, tdo, &full[s], h * HS, row0 + qt * BC);
                }
            }
            resident_done(sched);   // every ticket this block will draw is drawn
        } else if ((threadIdx.x >> 5) == 1) {   // the tiles' lse and D rows, as the plain form stages them
            int it = 0;
            for (int n = 0;; ++n) {
                const int kvs = n & 1;
                mbar_wait(&kv_full[kvs], (n >> 1) & 1);   // the item's index (and its k and v, which it does not read)
                const int item = kv_item[kvs];
                if (item < 0) break;
                int kb, bh;
                dkdv_item<ORDER>(item, BH, nkb, kb, bh);
                for (int qt = (kb * BR) / BC; qt < nqt; ++qt, ++it) {
                    const int s = it % S;
                    if (it >= S) mbar_wait(&empty[s], ((it / S) - 1) & 1);
                    stage_lse_d<BC>(sLD, full, s, qt, lse, Dvec, bh, T, lane);
                }
            }
        }
        return;
    }
    asm volatile("setmaxnreg.inc.sync.aligned.u32 240;\n" ::: "memory");
    const int cw = wg - 1, warp = (threadIdx.x >> 5) & 3, cwarp = (threadIdx.x >> 5) - 4, g = lane >> 2, t = lane & 3;
    int it = 0;
    bool handed = false;   // CHAIN: the warpgroup has filled the handoff buffer before (it waits for its reading)
    for (int n = 0;; ++n) {
        const int kvs = n & 1;
        mbar_wait(&kv_full[kvs], (n >> 1) & 1);
        const int item = kv_item[kvs];
        if (item < 0) break;
        int kb, bh;
        dkdv_item<ORDER>(item, BH, nkb, kb, bh);
        const int b = bh / H, h = bh % H;
        const int first = (kb * BR) / BC;
        const int K0 = kb * BR + cw * 64;         // the warpgroup's first key
        const int k0 = K0 + warp * 16;            // the warp's
        const u32 ak = smem_u32(sKV + (4 * kvs + cw) * BOX), av = smem_u32(sKV + (4 * kvs + 2 + cw) * BOX);
        float dk[HS / 8][4], dv[HS / 8][4];
#pragma unroll
        for (int j = 0; j < HS / 8; ++j)
#pragma unroll
            for (int e = 0; e < 4; ++e) dk[j][e] = dv[j][e] = 0.0f;
        for (int qt = first; qt < nqt; ++qt, ++it) {
            const int s = it % S;
            mbar_wait(&full[s], (it / S) & 1);
            const bool active = qt * BC + BC - 1 >= K0;   // else every query of the tile comes before the warpgroup's keys
            if constexpr (CHAIN) {
                float part[1][HS / 8][4];   // store_dq's layout: one m16 tile of queries a warp
                if (active)
                    tma_dkdv_chain_tile<K, HS, DROP>(dk, dv, part[0], ak, av, sQO, sLD, s, qt, k0, g, t, T, bh, drop,
                                                     sChain + cw * BOX, cw, warp);
                __syncwarp();
                if (lane == 0) mbar_arrive(&empty[s]);   // this warp is done with the stage
                if (active) {
                    if constexpr (ORDER == 0) {
                        chain_turn_asc<HS>(part, dqkv, dq_acc, dq_turn, sHand, handed, cw, kb, qt, bh, nqt, b, h, T,
                                           C, out_kind, warp, lane);
                    } else {
                        chain_turn<HS>(part, dqkv, dq_acc, dq_turn, sHand, handed, cw, kb, qt, bh, nqt, b, h, T, C,
                                       out_kind, warp, lane);
                    }
                }
                continue;
            }
            if (active)
                tma_dkdv_tile<K, HS, DROP, ORDER == 0>(dk, dv, ak, av, sQO, sLD, s, qt, k0, g, t, T, bh, drop, ds_t,
                                                       ldq, sdS, cwarp, lane);
            __syncwarp();
            if (lane == 0) mbar_arrive(&empty[s]);   // this warp is done with the stage
        }
        __syncwarp();
        if (lane == 0) mbar_arrive(&kv_empty[kvs]);   // and with the item's k and v (its last product has completed)
        store_dkdv<HS>(dqkv, dk, dv, k0, g, t, b, h, T, C, out_kind);
    }
    // the handoff's writer waits for its last reading (warpgroup 1's descending, 0's ascending): arrivals even
    if (CHAIN && cw == (ORDER == 0 ? 0 : 1) && handed) bar_sync_n<CHAIN_EMPTY, 256>();
#else
    __trap();   // launched only where the file was built for sm_90a (gpu/attention.py)
#endif
}

// The resident dK/dV kernels' body (ATTN_DKDV_TMA_KERNEL, ATTN_DKDV_TMA_CHAIN): the dropout made from the launch's
// arguments, and the form compiled with it or without (DROP) chosen per launch.
template <int K, int HS, int STAGES, int ORDER, bool CHAIN = false>
__device__ __forceinline__ void dkdv_tma_entry(void* dqkv, const TensorMap* tq, const TensorMap* tdo, const float* lse,
                                               const float* Dvec, u16* ds_t, int ldq, int T, int H, int BH,
                                               int* sched, int out_kind, int use_dropout, u64 seed, u64 offset,
                                               const u64* offset_add, u32 threshold, float dscale,
                                               float* dq_acc = nullptr, int* dq_turn = nullptr) {
    const Dropout d = make_dropout(use_dropout, seed, offset, offset_add, threshold, dscale);
    if (use_dropout)
        attention_backward_dkdv_tma_resident<K, HS, true, STAGES, ORDER, CHAIN>(dqkv, tq, tdo, lse, Dvec, ds_t, ldq, T,
                                                                                H, BH, sched, out_kind, d, dq_acc,
                                                                                dq_turn);
    else
        attention_backward_dkdv_tma_resident<K, HS, false, STAGES, ORDER, CHAIN>(dqkv, tq, tdo, lse, Dvec, ds_t, ldq, T,
                                                                                 H, BH, sched, out_kind, d, dq_acc,
                                                                                 dq_turn);
}

// ---- dQ from the stored dS^T on a TMA producer and wgmma (gpu/attention.py's DQ_TMA; written in the eighteenth
// session, on rows over 256 by default since the twentieth) ----
// Why: attention_backward_dq_ds moves about 100 MB of dS^T a layer of gpt2-small bf16 into registers by cp.async and
// ldmatrix from the warps that also run its mma.sync products, 47.6 us a layer (Nsight Compute: DRAM 57% busy, memory
// 77%; call 1 of results/h200-perf-20261202e), where reading those bytes alone takes about 29 us at 3.9 TB/s. Here the
// copy engine streams them: a producer thread hands each 64-key step's k box and the two consumers' dS^T boxes to it
// (a ring of DQ_TMA_STAGES stages, 96 KB in flight a block), and two consumer warpgroups of 64 queries each make
// dQ = scale dS k on wgmma, both operands from shared memory read MN-major (dS^T's rows are keys, k's rows are keys:
// wgmma's transposed A and B, m64n64k16), the keys' k16 slices in order. dS^T comes through a three-dimensional map of
// ds_t ([B*H, T, ldq]) so that key rows past T read as zeros (ds_t's rows there were never written); k's box rows past
// T hold the next sequence's keys, finite, times those zeros. Only ds_t pieces the wgmma dK/dV kernel writes are read:
// a consumer takes key steps up to the one holding its last query, and that kernel writes every (key, query) pair of
// each 64 x 64 tile it computes (zeros where masked); the box a step loads for a consumer that does not take it is
// never read. Bits: a fixed order, so three runs alike; against attention_backward_dq_ds's mma.sync sums the tensor
// cores' rounding might differ, and did in none of the cases tested (88 in call 7 of results/h200-perf-20261203e; the
// GPU test "wgmma_backward_is_the_mma_sync_bits" asks for the mma.sync dQ's bits).
#define DQ_TMA_STAGES 4

// One box at (c0, c1, c2) of a three-dimensional map into shared memory, its bytes counted on bar.
__device__ __forceinline__ void tma_load_3d(void* dst, const TensorMap* tmap, u64* bar, int c0, int c1, int c2) {
    asm volatile(
        "cp.async.bulk.tensor.3d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3, %4}], [%5];"
        ::"r"(smem_u32(dst)), "l"((u64)tmap), "r"(c0), "r"(c1), "r"(c2), "r"(smem_u32(bar)) : "memory");
}

// One key step of the TMA dQ (attention_backward_dq_tma): dQ += dS k for consumer cw's 64
// queries from stage s (k's box, then the two consumers' dS^T boxes), awaited; the first step (kt 0) overwrites.
template <int K, int HS>
__device__ __forceinline__ void tma_dq_step(float (&dq)[HS / 8][4], unsigned char* base, int s, int cw, int kt) {
    constexpr int BK = 64, BOX = 64 * HS * 2;
    const u32 ak = smem_u32(base + 3 * s * BOX), ad = ak + (1 + cw) * BOX;
    // the two boxes' descriptors once, each slice's by its offset (tma_forward_tile says why: the same descriptors)
    const u64 dd = wg_desc_sw128(ad, TMA_V_LBO, TMA_V_SBO), dk = wg_desc_sw128(ak, TMA_V_LBO, TMA_V_SBO);
    wg_fence();
#pragma unroll
    for (int k16 = 0; k16 < BK / 16; ++k16)   // dQ += dS k: 16 keys a slice, 2048 bytes of each box
        wg_mma_ss_tt<K>(dq, dd + 2048 / 16 * k16, dk + 2048 / 16 * k16, kt > 0 || k16 > 0);
    wg_commit();
    wg_wait_all();
    wg_hold(dq);
}

// QFAST (attn_backward_dq_ds_tmaqf_, the one grid built: the heads-fastest one, attn_backward_dq_ds_tma_, measured
// slower in the twenty-eighth session and removed): the grid's x the query blocks and y the heads, so that the blocks
// running together are one head's query blocks (all of them, heaviest first) instead of one query block of many heads.
// Why (a hypothesis, twenty-seventh session): the pass waits on its dS^T loads (49% of its stall samples on the ring's
// full barrier, DRAM-bound: ds_t is stored evict-first), and with the heads fastest each 2 KB row of ds_t is read in
// 256-byte pieces by eight blocks far apart in time; a head's blocks together read a key row's pieces at about the same
// time and its k boxes from L2. The same blocks, the same arithmetic: the same bits.
// NEWEST (attn_backward_dq_ds_tmaqn_, after the grouped dK/dV only, TR2_ATTN_DS_GROUPED=1): the heads taken last
// first, so the ds_t the grouped dK/dV wrote last, still in the L2, is read before the pass's own loads push it out.
template <int K, int HS, bool QFAST = false, bool NEWEST = false>
__device__ void attention_backward_dq_tma(void* __restrict__ dqkv, const TensorMap* tds, const TensorMap* tq, int T,
                                          int H, int out_kind) {
#ifdef ATTN_WGMMA
    constexpr int BR = 128, BK = 64, BOX = 64 * HS * 2, S = DQ_TMA_STAGES;
    static_assert(HS == 64, "one 128-byte row a key: the 128B swizzle's row");
    extern __shared__ __align__(128) unsigned char smem[];
    __shared__ __align__(8) u64 bars[2 * S];
    u64* full = bars;            // full[s]: the stage's 3 BOX bytes
    u64* empty = bars + S;       // empty[s]: the 8 consumer warps are done with the stage
    unsigned char* base = smem + ((1024u - (smem_u32(smem) & 1023u)) & 1023u);   // the swizzle repeats every 1 KB
    // stage s at base + 3 s BOX: k's 64 keys, then consumer 0's and consumer 1's dS^T (64 keys x 64 queries each)
    const int nqb = (T + BR - 1) / BR;
    const int qb = nqb - 1 - (int)(QFAST ? blockIdx.x : blockIdx.y);   // the longest rows first
    const int bh = QFAST ? (NEWEST ? (int)(gridDim.y - 1 - blockIdx.y) : (int)blockIdx.y) : (int)blockIdx.x;
    const int b = bh / H, h = bh % H, C = H * HS;
    const int last = min(qb * BR + BR - 1, T - 1) / BK;   // the block's last key step
    const int wg = warpgroup_index();
    if (threadIdx.x == 0) {
        for (int s = 0; s < S; ++s) {
            mbar_init(&full[s], 1);
            mbar_init(&empty[s], 8);
        }
        mbar_init_fence();
    }
    __syncthreads();
    if (wg == 0) {   // the producer
        if (threadIdx.x != 0) return;
        for (int kt = 0; kt <= last; ++kt) {
            const int s = kt % S;
            if (kt >= S) mbar_wait(&empty[s], ((kt / S) - 1) & 1);
            unsigned char* st = base + 3 * s * BOX;
            mbar_expect_tx(&full[s], 3 * BOX);
            tma_load_2d(st, tq, &full[s], C + h * HS, b * T + kt * BK);
            tma_load_3d(st + BOX, tds, &full[s], qb * BR, kt * BK, bh);
            tma_load_3d(st + 2 * BOX, tds, &full[s], qb * BR + 64, kt * BK, bh);
        }
        return;
    }
    const int cw = wg - 1, warp = (threadIdx.x >> 5) & 3, lane = threadIdx.x & 31;
    const int q0 = qb * BR + cw * 64;           // the warpgroup's first query
    const int wg_last = min(q0 + 63, T - 1) / BK;   // its last key step (q0 < T: see the guard below)
    float dq[1][HS / 8][4];   // store_dq's layout: one m16 tile a warp
#pragma unroll
    for (int n = 0; n < HS / 8; ++n) dq[0][n][0] = dq[0][n][1] = dq[0][n][2] = dq[0][n][3] = 0.0f;
    for (int kt = 0; kt <= last; ++kt) {
        const int s = kt % S;
        mbar_wait(&full[s], (kt / S) & 1);
        if (q0 < T && kt <= wg_last) tma_dq_step<K, HS>(dq[0], base, s, cw, kt);
        __syncwarp();
        if (lane == 0) mbar_arrive(&empty[s]);   // this warp is done with the stage
    }
    if (q0 >= T) return;
    store_dq<HS, 1>(dqkv, dq, q0 + warp * 16, b, h, T, C, out_kind, lane);
#else
    __trap();   // launched only where the file was built for sm_90a (gpu/attention.py)
#endif
}

// ---- the instantiations ----
// builds: f32 (plain float32, split), tf32, bf16 (exact, split), bf16r (half roundings), f16, f16r.
// q, k, v and dO arrive as float32 in the float32 builds and as 16-bit half-type bits in the half builds.
// Each kernel runs one of two compiled bodies, with dropout or without (DROP): the keep bits a tile draws before
// its products are live across them, and with the choice made per launch instead, the bodies without dropout
// ran slower on the GPT-2 shapes (p = 0): +70, +39 and +67 us a step of gpt2-small in dK/dV, dQ and the
// forward (results/h200-perf-20261201c/call6-c32f18f against results/h200-perf-20261201b/call1-7751049).
// Every build: attn_forward_<build>_hs<HS>; the backward unfolded, attn_backward_dq_ (which writes D), then
// attn_backward_dkdv_. The half builds also fold it: attn_row_dots_<bf16|f16>_hs<HS> (D, and the counters
// zeroed), then attn_backward_<build>_hs<HS> (dK, dV and dQ); gpu/attention.py picks the form (FOLD_KEY_BLOCKS).
#define ATTN_FORWARD(BUILD, K, SPLIT, HS) ATTN_FORWARD_NB(BUILD, K, SPLIT, HS, Pipe<K>::NBUF)
#define ATTN_FORWARD_NB(BUILD, K, SPLIT, HS, NB)                                                                \
    extern "C" __global__ void __launch_bounds__(NTHREADS) attn_forward_##BUILD##_hs##HS(                       \
        void* out, float* lse, const Tile<K>::E* qkv, int T, int H, int out_kind, int use_dropout, u64 seed,   \
        u64 offset, const u64* offset_add, u32 threshold, float dscale) {                                      \
        grid_dependency_entry();                                                                               \
        const Dropout d = make_dropout(use_dropout, seed, offset, offset_add, threshold, dscale);              \
        if (use_dropout) attention_forward<K, SPLIT, HS, true, NB>(out, lse, qkv, T, H, out_kind, d);          \
        else attention_forward<K, SPLIT, HS, false, NB>(out, lse, qkv, T, H, out_kind, d);                     \
    }
// The forward on wgmma (half roundings, HS = 64): attn_forward_wg<NWG>_<bf16r|f16r>_hs64 (NWG warpgroups a block),
// arguments as attn_forward_ plus the v tile's descriptor strides.
#define ATTN_FORWARD_WG_N(NWG, BUILD, K, HS)                                                                    \
    extern "C" __global__ void __launch_bounds__(128 * NWG, 4 / NWG) attn_forward_wg##NWG##_##BUILD##_hs##HS(   \
        void* out, float* lse, const u16* qkv, int T, int H, int out_kind, int use_dropout, u64 seed,          \
        u64 offset, const u64* offset_add, u32 threshold, float dscale, u32 v_lbo, u32 v_sbo) {                \
        grid_dependency_entry();                                                                               \
        const Dropout d = make_dropout(use_dropout, seed, offset, offset_add, threshold, dscale);              \
        if (use_dropout) attention_forward_wg<K, HS, NWG, true>(out, lse, qkv, T, H, out_kind, d, v_lbo, v_sbo); \
        else attention_forward_wg<K, HS, NWG, false>(out, lse, qkv, T, H, out_kind, d, v_lbo, v_sbo);          \
    }
// One warpgroup a block: two (ATTN_FORWARD_WG_N(2, ...)) ran slower on the char model (x0.87 of mma.sync against
// x0.82), and both slower than mma.sync on the GPT-2 shapes (call 3 of results/h200-perf-20261201d);
// gpu/attention.py takes this kernel only for rows of at most 256.
#define ATTN_FORWARD_WG1(BUILD, K, HS) ATTN_FORWARD_WG_N(1, BUILD, K, HS)
// The float32 forward on wgmma (attention_forward_wgf, HS = 64): attn_forward_wgf<NWG>_<f32|tf32>_hs64, NWG warpgroups
// a block, arguments as attn_forward_'s (out_kind unread: the float32 builds write float32). Built with two warpgroups
// only: one (a block of 64 queries staging its own k and v) ran slower than the mma.sync forward in every case measured
// (docs/perf.md, forty-seventh session).
#define ATTN_FORWARD_WGF(NWG, BUILD, SPLIT, HS)                                                                 \
    extern "C" __global__ void __launch_bounds__(128 * NWG, 1) attn_forward_wgf##NWG##_##BUILD##_hs##HS(       \
        float* out, float* lse, const float* qkv, int T, int H, int out_kind, int use_dropout, u64 seed,       \
        u64 offset, const u64* offset_add, u32 threshold, float dscale) {                                      \
        grid_dependency_entry();                                                                               \
        const Dropout d = make_dropout(use_dropout, seed, offset, offset_add, threshold, dscale);              \
        if (use_dropout) attention_forward_wgf<HS, NWG, SPLIT, true>(out, lse, qkv, T, H, d);                  \
        else attention_forward_wgf<HS, NWG, SPLIT, false>(out, lse, qkv, T, H, d);                             \
    }
// The float32 dK/dV on wgmma (attention_backward_dkdv_wgf, HS = 64, one TF32 product): attn_backward_dkdv_wgf2_tf32_hs64,
// two warpgroups a block (128 keys), arguments as attn_backward_dkdv_tf32_'s.
#define ATTN_BACKWARD_DKDV_WGF(NWG, HS)                                                                         \
    extern "C" __global__ void __launch_bounds__(128 * NWG, 1) attn_backward_dkdv_wgf##NWG##_tf32_hs##HS(      \
        void* dqkv, const float* qkv, const float* dout, const float* lse, const float* Dvec, int T, int H,    \
        int out_kind, int use_dropout, u64 seed, u64 offset, const u64* offset_add, u32 threshold,             \
        float dscale) {                                                                                        \
        grid_dependency_entry();                                                                               \
        const Dropout d = make_dropout(use_dropout, seed, offset, offset_add, threshold, dscale);              \
        if (use_dropout) attention_backward_dkdv_wgf<HS, NWG, true>(dqkv, qkv, dout, lse, Dvec, T, H, out_kind, d); \
        else attention_backward_dkdv_wgf<HS, NWG, false>(dqkv, qkv, dout, lse, Dvec, T, H, out_kind, d);      \
    }
// The float32 dQ on wgmma (attention_backward_dq_wgf, HS = 64, one TF32 product): attn_backward_dq_wgf2_tf32_hs64, two
// warpgroups a block (128 queries), arguments as attn_backward_dq_tf32_'s. Its forms measured slower and removed (the
// code and tests at 6369b54): k^T written from the staged k rows (attn_backward_dq_wgfk2_, x1.007-1.012 of this kernel,
// fifty-second session) and a resident grid landing each item's copies under the previous item's tiles
// (attn_backward_dq_wgfr2_, three forms, x1.01-1.05, fifty-third session): docs/perf.md.
#define ATTN_BACKWARD_DQ_WGF(NWG, HS)                                                                           \
    extern "C" __global__ void __launch_bounds__(128 * NWG, 1) attn_backward_dq_wgf##NWG##_tf32_hs##HS(        \
        void* dqkv, const float* qkv, const float* dout, const float* lse, float* Dvec, const void* out, int T, \
        int H, int out_kind, int use_dropout, u64 seed, u64 offset, const u64* offset_add, u32 threshold,      \
        float dscale) {                                                                                        \
        grid_dependency_entry();                                                                               \
        const Dropout d = make_dropout(use_dropout, seed, offset, offset_add, threshold, dscale);              \
        if (use_dropout) attention_backward_dq_wgf<HS, NWG, true>(dqkv, qkv, dout, lse, Dvec, out, T, H, out_kind, d); \
        else attention_backward_dq_wgf<HS, NWG, false>(dqkv, qkv, dout, lse, Dvec, out, T, H, out_kind, d);   \
    }
// Form 7 (attention_forward_tma_resident without TURNS, a ring of STAGES): attn_forward_tmawr_<bf16r|f16r>_hs64,
// arguments as attn_forward_'s with the tensor map of qkv in qkv's place, then the heads BH and
// sched, two ints zero at launch (left zero); one block an SM.
#define ATTN_FORWARD_TMA_RESIDENT(NAME, BUILD, K, HS, TURNS, STAGES)                                            \
    extern "C" __global__ void __launch_bounds__(384, 1) attn_forward_##NAME##_##BUILD##_hs##HS(               \
        void* out, float* lse, const __grid_constant__ TensorMap tm, int T, int H, int out_kind,               \
        int use_dropout, u64 seed, u64 offset, const u64* offset_add, u32 threshold, float dscale, int BH,     \
        int* sched) {                                                                                          \
        grid_dependency_entry();                                                                               \
        const Dropout d = make_dropout(use_dropout, seed, offset, offset_add, threshold, dscale);              \
        if (use_dropout)                                                                                       \
            attention_forward_tma_resident<K, HS, true, STAGES, TURNS>(out, lse, &tm, T, H, BH, sched, out_kind, \
                                                                       d);                                     \
        else                                                                                                   \
            attention_forward_tma_resident<K, HS, false, STAGES, TURNS>(out, lse, &tm, T, H, BH, sched, out_kind, \
                                                                        d);                                    \
    }
#define ATTN_UNFOLDED(BUILD, K, SPLIT, HS) ATTN_UNFOLDED_NB(BUILD, K, SPLIT, HS, Pipe<K>::NBUF)
#define ATTN_UNFOLDED_NB(BUILD, K, SPLIT, HS, NB)                                                               \
    extern "C" __global__ void __launch_bounds__(NTHREADS) attn_backward_dkdv_##BUILD##_hs##HS(                 \
        void* dqkv, const Tile<K>::E* qkv, const Tile<K>::E* dout, const float* lse, const float* Dvec,        \
        int T, int H, int out_kind, int use_dropout, u64 seed, u64 offset, const u64* offset_add,              \
        u32 threshold, float dscale) {                                                                         \
        grid_dependency_entry();                                                                               \
        const Dropout d = make_dropout(use_dropout, seed, offset, offset_add, threshold, dscale);              \
        if (use_dropout)                                                                                       \
            attention_backward_dkdv<K, SPLIT, HS, false, true, false, false, NB>(dqkv, qkv, dout, lse, Dvec, nullptr, \
                                                                                 nullptr, T, H, out_kind, d);  \
        else                                                                                                   \
            attention_backward_dkdv<K, SPLIT, HS, false, false, false, false, NB>(dqkv, qkv, dout, lse, Dvec, nullptr, \
                                                                                  nullptr, T, H, out_kind, d); \
    }                                                                                                          \
    extern "C" __global__ void __launch_bounds__(NTHREADS) attn_backward_dq_##BUILD##_hs##HS(                   \
        void* dqkv, const Tile<K>::E* qkv, const Tile<K>::E* dout, const float* lse, float* Dvec,              \
        const void* out, int T, int H, int out_kind, int use_dropout, u64 seed, u64 offset,                    \
        const u64* offset_add, u32 threshold, float dscale) {                                                  \
        grid_dependency_entry();                                                                               \
        const Dropout d = make_dropout(use_dropout, seed, offset, offset_add, threshold, dscale);              \
        if (use_dropout) attention_backward_dq<K, SPLIT, HS, true, NB>(dqkv, qkv, dout, lse, Dvec, out, T, H, out_kind, d); \
        else attention_backward_dq<K, SPLIT, HS, false, NB>(dqkv, qkv, dout, lse, Dvec, out, T, H, out_kind, d); \
    }
#define ATTN_KERNELS_F32(BUILD, SPLIT, HS)                                                                      \
    ATTN_FORWARD(BUILD, KIND_F32, SPLIT, HS)                                                                   \
    ATTN_UNFOLDED(BUILD, KIND_F32, SPLIT, HS)
// The float32 builds streamed (attn_*_f32s_, attn_*_tf32s_): the tiles copied raw by cp.async into two buffers, the
// next one's copy in flight while the current one computes (NB = 2), as the half builds stream theirs; the same
// operands and products as the synchronous kernels above, so their bits (tests/test_kernels_gpu.py asks for them).
#define ATTN_KERNELS_F32_STREAMED(BUILD, SPLIT, HS)                                                             \
    ATTN_FORWARD_NB(BUILD, KIND_F32, SPLIT, HS, 2)                                                             \
    ATTN_UNFOLDED_NB(BUILD, KIND_F32, SPLIT, HS, 2)
#define ATTN_KERNELS_HALF(BUILD, K, SPLIT, HS)                                                                  \
    ATTN_FORWARD(BUILD, K, SPLIT, HS)                                                                          \
    ATTN_UNFOLDED(BUILD, K, SPLIT, HS)                                                                         \
    extern "C" __global__ void __launch_bounds__(NTHREADS) attn_backward_##BUILD##_hs##HS(                      \
        void* dqkv, const u16* qkv, const u16* dout, const float* lse, const float* Dvec, float* dq_acc,       \
        int* sync, int T, int H, int out_kind, int use_dropout, u64 seed, u64 offset, const u64* offset_add,   \
        u32 threshold, float dscale) {                                                                         \
        grid_dependency_entry();                                                                               \
        const Dropout d = make_dropout(use_dropout, seed, offset, offset_add, threshold, dscale);              \
        if (use_dropout)                                                                                       \
            attention_backward_dkdv<K, SPLIT, HS, true, true>(dqkv, qkv, dout, lse, Dvec, dq_acc, sync, T, H, out_kind, d); \
        else                                                                                                   \
            attention_backward_dkdv<K, SPLIT, HS, true, false>(dqkv, qkv, dout, lse, Dvec, dq_acc, sync, T, H, out_kind, d); \
    }
// The half builds under half roundings, unfolded with dS stored: attn_row_dots_ (D), attn_backward_dkdv_ds_l2_
// (dK, dV and ds_t), attn_backward_dq_ds_l2_ (dQ from ds_t, 128 queries a block; four blocks an SM: 128 registers,
// no spill, where ptxas took 160 unbounded); gpu/attention.py picks them (stores_ds). Built in the l2_ form (FORM)
// only: ds_t's stores and loads marked evict-first in L2 (EVICT; on since the ninth session: ds_t pushed out of L2
// what the kernels around it read again; -0.08 and -0.09 ms a step of gpt2-small and gpt2-medium), the same
// arithmetic as the plain forms, so their bits (the plain forms, and the 64-query dQ, were removed: the header).
#define ATTN_DS_FORM(FORM, EVICT, BUILD, K, HS)                                                                 \
    extern "C" __global__ void __launch_bounds__(NTHREADS) attn_backward_dkdv_ds_##FORM##BUILD##_hs##HS(       \
        void* dqkv, const u16* qkv, const u16* dout, const float* lse, const float* Dvec, u16* ds_t, int ldq,  \
        int T, int H, int out_kind, int use_dropout, u64 seed, u64 offset, const u64* offset_add,              \
        u32 threshold, float dscale) {                                                                         \
        grid_dependency_entry();                                                                               \
        const Dropout d = make_dropout(use_dropout, seed, offset, offset_add, threshold, dscale);              \
        if (use_dropout)                                                                                       \
            attention_backward_dkdv<K, false, HS, false, true, true, EVICT>(dqkv, qkv, dout, lse, Dvec, nullptr, \
                                                                            nullptr, T, H, out_kind, d, ds_t, ldq); \
        else                                                                                                   \
            attention_backward_dkdv<K, false, HS, false, false, true, EVICT>(dqkv, qkv, dout, lse, Dvec, nullptr, \
                                                                             nullptr, T, H, out_kind, d, ds_t, ldq); \
    }                                                                                                          \
    extern "C" __global__ void __launch_bounds__(NTHREADS, 4) attn_backward_dq_ds_##FORM##BUILD##_hs##HS(      \
        void* dqkv, const u16* qkv, const u16* ds_t, int ldq, int T, int H, int out_kind) {                    \
        grid_dependency_entry();                                                                               \
        attention_backward_dq_ds<K, HS, NWARPS * 16 * Geometry<K>::MT, EVICT>(dqkv, qkv, ds_t, ldq, T, H, out_kind); \
    }
#define ATTN_DS(BUILD, K, HS) ATTN_DS_FORM(l2_, true, BUILD, K, HS)
// attn_backward_dkdv_ds_tmarr_l2_<bf16r|f16r>_hs64: the TMA dK/dV resident (attention_backward_dkdv_tma_
// resident) with a ring of DKDV_TMA_STAGES; arguments as attn_backward_dkdv_ds_l2_'s with the tensor maps of qkv and dO in their
// places, then the heads BH and sched (two ints zero at launch, left zero); one block an SM.
#define ATTN_DKDV_TMA_RESIDENT(BUILD, K, HS)                                                                    \
    ATTN_DKDV_TMA_KERNEL(attn_backward_dkdv_ds_tmarr_l2_##BUILD##_hs##HS, K, HS, DKDV_TMA_STAGES, 0)
// The grouped resident dK/dV (ORDER 1, ds_t stored without the evict-first policy): attn_backward_dkdv_ds_tmarrg_
// <bf16r|f16r>_hs64, the same arguments.
#define ATTN_DKDV_TMA_GROUPED(BUILD, K, HS)                                                                     \
    ATTN_DKDV_TMA_KERNEL(attn_backward_dkdv_ds_tmarrg_##BUILD##_hs##HS, K, HS, DKDV_TMA_STAGES, 1)
#define ATTN_DKDV_TMA_KERNEL(KERNEL, K, HS, STAGES, ORDER)                                                      \
    extern "C" __global__ void __launch_bounds__(384, 1) KERNEL(                                               \
        void* dqkv, const __grid_constant__ TensorMap tq, const __grid_constant__ TensorMap tdo,               \
        const float* lse, const float* Dvec, u16* ds_t, int ldq, int T, int H, int out_kind, int use_dropout,  \
        u64 seed, u64 offset, const u64* offset_add, u32 threshold, float dscale, int BH, int* sched) {        \
        grid_dependency_entry();                                                                               \
        dkdv_tma_entry<K, HS, STAGES, ORDER>(dqkv, &tq, &tdo, lse, Dvec, ds_t, ldq, T, H, BH, sched, out_kind, \
                                             use_dropout, seed, offset, offset_add, threshold, dscale);        \
    }
// The descending chain's dK/dV (ORDER 2, CHAIN; TR2_ATTN_DQ_CHAIN_ASC=0): attn_backward_dkdv_dqc_<bf16r|f16r>_hs64,
// the grouped kernel's arguments with dq_acc (float32, a 64 x 64 slot a head and query tile) and dq_turn (an int a head
// and query tile, zero at launch) in ds_t's and ldq's places; it writes dQ too.
#define ATTN_DKDV_TMA_CHAIN(BUILD, K, HS) ATTN_DKDV_TMA_CHAIN_KERNEL(attn_backward_dkdv_dqc_##BUILD##_hs##HS, K, HS, 2)
// The ascending chain (ORDER 0, chain_turn_asc; TR2_ATTN_DQ_CHAIN_ASC, the chain's default since the sixty-fourth
// session): attn_backward_dkdv_dqa_<bf16r|f16r>_hs64, the same arguments.
#define ATTN_DKDV_TMA_CHAIN_ASC(BUILD, K, HS)                                                                   \
    ATTN_DKDV_TMA_CHAIN_KERNEL(attn_backward_dkdv_dqa_##BUILD##_hs##HS, K, HS, 0)
#define ATTN_DKDV_TMA_CHAIN_KERNEL(KERNEL, K, HS, ORDER)                                                        \
    extern "C" __global__ void __launch_bounds__(384, 1) KERNEL(                                               \
        void* dqkv, const __grid_constant__ TensorMap tq, const __grid_constant__ TensorMap tdo,               \
        const float* lse, const float* Dvec, float* dq_acc, int* dq_turn, int T, int H, int out_kind,          \
        int use_dropout, u64 seed, u64 offset, const u64* offset_add, u32 threshold, float dscale, int BH,     \
        int* sched) {                                                                                          \
        grid_dependency_entry();                                                                               \
        dkdv_tma_entry<K, HS, DKDV_TMA_STAGES, ORDER, true>(dqkv, &tq, &tdo, lse, Dvec, nullptr, 0, T, H, BH,   \
                                                            sched, out_kind, use_dropout, seed, offset, offset_add, \
                                                            threshold, dscale, dq_acc, dq_turn);                  \
    }
// The TMA dQ (attention_backward_dq_tma with QFAST): attn_backward_dq_ds_tmaqf_<bf16r|f16r>_hs64, grid (query blocks,
// BH); arguments dqkv, the tensor maps of ds_t (planes) and qkv, T, H, out_kind. With NEWEST, after the grouped dK/dV:
// attn_backward_dq_ds_tmaqn_<bf16r|f16r>_hs64, the same arguments and grid.
#define ATTN_DQ_TMA_QF(BUILD, K, HS) ATTN_DQ_TMA_KERNEL(attn_backward_dq_ds_tmaqf_##BUILD##_hs##HS, K, HS, false)
#define ATTN_DQ_TMA_QN(BUILD, K, HS) ATTN_DQ_TMA_KERNEL(attn_backward_dq_ds_tmaqn_##BUILD##_hs##HS, K, HS, true)
#define ATTN_DQ_TMA_KERNEL(KERNEL, K, HS, NEWEST)                                                               \
    extern "C" __global__ void __launch_bounds__(384, 1) KERNEL(                                               \
        void* dqkv, const __grid_constant__ TensorMap tds, const __grid_constant__ TensorMap tq, int T, int H, \
        int out_kind) {                                                                                        \
        grid_dependency_entry();                                                                               \
        attention_backward_dq_tma<K, HS, true, NEWEST>(dqkv, &tds, &tq, T, H, out_kind);                       \
    }
#define ATTN_ROW_DOTS(NAME, K, HS)                                                                              \
    extern "C" __global__ void attn_row_dots_##NAME##_hs##HS(float* Dvec, int* sync, int n_sync, const u16* dout, \
                                                            const void* out, int rows, int T, int H, int out_kind) { \
        grid_dependency_entry();                                                                                     \
        attention_row_dots<K, HS>(Dvec, sync, n_sync, dout, out, rows, T, H, out_kind);                        \
    }                                                                                                          \
    extern "C" __global__ void attn_row_dots_wide_##NAME##_hs##HS(float* Dvec, int* sync, int n_sync,          \
                                                                 const u16* dout, const void* out, int rows, int T, \
                                                                 int H, int out_kind) {                        \
        grid_dependency_entry();                                                                               \
        attention_row_dots<K, HS, true>(Dvec, sync, n_sync, dout, out, rows, T, H, out_kind);                  \
    }

ATTN_KERNELS_F32(f32, true, 64)
ATTN_KERNELS_F32(tf32, false, 64)
ATTN_KERNELS_F32_STREAMED(f32s, true, 64)
ATTN_KERNELS_F32_STREAMED(tf32s, false, 64)
ATTN_KERNELS_HALF(bf16, KIND_BF16, true, 64)
ATTN_KERNELS_HALF(bf16r, KIND_BF16, false, 64)
ATTN_KERNELS_HALF(f16, KIND_F16, true, 64)
ATTN_KERNELS_HALF(f16r, KIND_F16, false, 64)
ATTN_ROW_DOTS(bf16, KIND_BF16, 64)
ATTN_ROW_DOTS(f16, KIND_F16, 64)
ATTN_KERNELS_F32(f32, true, 32)
ATTN_KERNELS_F32(tf32, false, 32)
ATTN_KERNELS_F32_STREAMED(f32s, true, 32)
ATTN_KERNELS_F32_STREAMED(tf32s, false, 32)
ATTN_KERNELS_HALF(bf16, KIND_BF16, true, 32)
ATTN_KERNELS_HALF(bf16r, KIND_BF16, false, 32)
ATTN_KERNELS_HALF(f16, KIND_F16, true, 32)
ATTN_KERNELS_HALF(f16r, KIND_F16, false, 32)
ATTN_ROW_DOTS(bf16, KIND_BF16, 32)
ATTN_ROW_DOTS(f16, KIND_F16, 32)
ATTN_DS(bf16r, KIND_BF16, 64)
ATTN_DS(f16r, KIND_F16, 64)
ATTN_DS(bf16r, KIND_BF16, 32)
ATTN_DS(f16r, KIND_F16, 32)
ATTN_FORWARD_WG1(bf16r, KIND_BF16, 64)
ATTN_FORWARD_WG1(f16r, KIND_F16, 64)
ATTN_FORWARD_WGF(2, f32, true, 64)
ATTN_FORWARD_WGF(2, tf32, false, 64)
ATTN_BACKWARD_DKDV_WGF(2, 64)
ATTN_BACKWARD_DQ_WGF(2, 64)
ATTN_FORWARD_TMA_RESIDENT(tmawr, bf16r, KIND_BF16, 64, false, FWD_TMAW_STAGES)
ATTN_FORWARD_TMA_RESIDENT(tmawr, f16r, KIND_F16, 64, false, FWD_TMAW_STAGES)
ATTN_DKDV_TMA_RESIDENT(bf16r, KIND_BF16, 64)
ATTN_DKDV_TMA_RESIDENT(f16r, KIND_F16, 64)
ATTN_DQ_TMA_QF(bf16r, KIND_BF16, 64)
ATTN_DQ_TMA_QF(f16r, KIND_F16, 64)
ATTN_DKDV_TMA_GROUPED(bf16r, KIND_BF16, 64)
ATTN_DKDV_TMA_GROUPED(f16r, KIND_F16, 64)
ATTN_DQ_TMA_QN(bf16r, KIND_BF16, 64)
ATTN_DQ_TMA_QN(f16r, KIND_F16, 64)
ATTN_DKDV_TMA_CHAIN(bf16r, KIND_BF16, 64)
ATTN_DKDV_TMA_CHAIN(f16r, KIND_F16, 64)
ATTN_DKDV_TMA_CHAIN_ASC(bf16r, KIND_BF16, 64)
ATTN_DKDV_TMA_CHAIN_ASC(f16r, KIND_F16, 64)

// tf32_rne against tf32_rne_formula on the float32 bit patterns first .. first + count - 1 (count at most 2^32 - first),
// adding to counts: [0] the patterns that are not NaN where the two results differ in any bit (each also takes a slot
// of examples, its pattern, while slots 0 .. max_examples - 1 last; which ones land there depends on timing), [1] the
// NaN patterns tf32_rne does not keep NaN, [2] those the formula does not keep NaN (its carry runs through a NaN's
// payload into the sign: the canonical NaN 0x7FFFFFFF becomes -0.0; ops/precision.round_to_tf32 keeps NaN), [3] the
// patterns seen. Why a kernel: where tf32_rne is the instruction, the float32 builds' bits rest on it giving the
// formula's result on every value.
extern "C" __global__ void tf32_round_check(unsigned long long* counts, u32* examples, int max_examples, u32 first,
                                            unsigned long long count) {
    grid_dependency_entry();
    unsigned long long nan_lost = 0, nan_lost_formula = 0, seen = 0;
    const unsigned long long stride = (unsigned long long)gridDim.x * blockDim.x;
    for (unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x; i < count; i += stride) {
        const u32 bits = first + (u32)i;
        const float x = __uint_as_float(bits);
        const float a = tf32_rne(x), b = tf32_rne_formula(x);
        ++seen;
        if (x != x) {
            nan_lost += (a == a);
            nan_lost_formula += (b == b);
        } else if (__float_as_uint(a) != __float_as_uint(b)) {
            const unsigned long long slot = atomicAdd(&counts[0], 1ull);
            if (slot < (unsigned long long)max_examples) examples[slot] = bits;
        }
    }
    if (nan_lost) atomicAdd(&counts[1], nan_lost);
    if (nan_lost_formula) atomicAdd(&counts[2], nan_lost_formula);
    atomicAdd(&counts[3], seen);
}
