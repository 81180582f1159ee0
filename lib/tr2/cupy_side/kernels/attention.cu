// attention.cu: causal self-attention, forward and backward, fused in the flash-attention manner on
// tensor cores (mma.sync). The T x T scores are never stored: each block keeps one tile of them in
// registers. Reference: tr2/cupy_side/ops/attention.py (same formulas, whole arrays).
//
// Layout, read and written in place (no split, merge or transpose kernels):
//   qkv [B, T, 3C] float32, c_attn's output: q of head h at columns h*HS, k at C + h*HS, v at 2C + h*HS;
//   out [B, T, C] (c_proj's input), dout [B, T, C]; dqkv [B, T, 3C] like qkv; lse, D [B*H, T] float32.
//
// Algorithm (HS = head size, 32 or 64; tiles of 64 rows by 64 columns; 4 warps, 16 rows each):
//   forward, one block per (64 queries, b*H + h), heaviest blocks first: loop over the key tiles up to
//     the diagonal; S = q k^T by mma; s = S * scale, causal mask; online softmax in float32 (running max
//     m and per-thread partial sums l); Pd = exp(s - m) * keep / (1 - p) (dropout drawn here by the
//     counter-based generator, element (bh*T + i)*T + j of the site, as ops/attention.py indexes it);
//     O += Pd v by mma with O in registers; at the end out = O / l and lse = m + log(l).
//   backward, a small kernel first: D_i = sum_d dO_id * O_id (the row dot products), then
//     dK, dV: one block per (64 keys, bh), loop over the query tiles from the diagonal down:
//       S^T = k q^T, P^T = exp(S^T * scale - lse) (recomputed, never stored), dV += Pd^T dO,
//       dP^T = v dO^T, dS^T = P^T (dP^T * keep / (1 - p) - D), dK += dS^T q; dK *= scale.
//     dQ: one block per (64 queries, bh), loop over the key tiles up to the diagonal:
//       S, P, dP = dO v^T and dS again, dQ += dS k; dQ *= scale.
//   dQ has its own pass (the two recomputed products cost less than a second sweep of memory) so that
//   every sum runs in a fixed order: no atomics, the same bits on every run.
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
// Tile sizes: 64 x 64 with 4 warps keeps a warp's 16 x 64 scores, its output rows and two staged tiles
// (K and V, or Q and dO) within 255 registers and at most ~70 KB of shared memory (float32 tiles), so
// several blocks share an SM; rows are padded (72 halves, 68 floats) so fragment reads hit 32 banks.
#include "common.cuh"

#define BR 64          // rows of a block's tile (queries, or keys in dK/dV)
#define BC 64          // columns of a staged tile (keys, or queries in dK/dV)
#define NWARPS 4
#define NTHREADS (NWARPS * 32)
#define SNT (BC / 8)   // n8 tiles across a warp's 16 x 64 scores

template <int K> struct Tile { typedef u16 E; static const int LD = 72; };
template <> struct Tile<KIND_F32> { typedef float E; static const int LD = 68; };

// Fragments of one k16 slice: the half types take one m16n8k16 mma, float32 two m16n8k8 (R = 2).
template <int K> struct Pieces { static const int R = 1; };
template <> struct Pieces<KIND_F32> { static const int R = 2; };
template <int K> struct AFrag { u32 hi[4 * Pieces<K>::R]; u32 lo[4 * Pieces<K>::R]; };
template <int K> struct BFrag { u32 hi[2 * Pieces<K>::R]; u32 lo[2 * Pieces<K>::R]; };

__device__ __forceinline__ float tf32_rne(float x) {  // as ops/precision.round_to_tf32 (ties to even)
    u32 b = __float_as_uint(x);
    b += ((b >> 13) & 1u) + 0xFFFu;
    return __uint_as_float(b & 0xFFFFE000u);
}

template <int K> __device__ __forceinline__ u16 half_bits(float x) { return store_as<K>(x); }
template <int K> __device__ __forceinline__ float half_value(u16 h) { return load_from<K>(h); }

template <int K> __device__ __forceinline__ u32 pack2(float lo_col, float hi_col) {
    return (u32)half_bits<K>(lo_col) | ((u32)half_bits<K>(hi_col) << 16);
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
// 2t, 2t+1) and (row g + 8, same cols).

// A = tile rows m0..m0+15, columns k16*16..+15.
template <int K, bool SPLIT>
__device__ __forceinline__ void load_a(AFrag<K>& a, const typename Tile<K>::E* s, int m0, int k16, int lane) {
    const int g = lane >> 2, t = lane & 3, LD = Tile<K>::LD;
    if constexpr (K == KIND_F32) {
#pragma unroll
        for (int r = 0; r < 2; ++r) {
            const float* p = (const float*)s + (m0 + g) * LD + k16 * 16 + 8 * r + t;
            tf32_operand<SPLIT, false>(p[0], a.hi[4 * r], a.lo[4 * r]);
            tf32_operand<SPLIT, false>(p[8 * LD], a.hi[4 * r + 1], a.lo[4 * r + 1]);
            tf32_operand<SPLIT, false>(p[4], a.hi[4 * r + 2], a.lo[4 * r + 2]);
            tf32_operand<SPLIT, false>(p[8 * LD + 4], a.hi[4 * r + 3], a.lo[4 * r + 3]);
        }
    } else {
        const u16* p = (const u16*)s + (m0 + g) * LD + k16 * 16 + 2 * t;
        a.hi[0] = *(const u32*)p;
        a.hi[1] = *(const u32*)(p + 8 * LD);
        a.hi[2] = *(const u32*)(p + 8);
        a.hi[3] = *(const u32*)(p + 8 * LD + 8);
    }
}

// B[k][n] = tile[n][k] (the tile's rows are B's columns): n0..n0+7, k16 slice. For S = q k^T etc.
template <int K, bool SPLIT>
__device__ __forceinline__ void load_b_rows(BFrag<K>& b, const typename Tile<K>::E* s, int n0, int k16, int lane) {
    const int g = lane >> 2, t = lane & 3, LD = Tile<K>::LD;
    if constexpr (K == KIND_F32) {
#pragma unroll
        for (int r = 0; r < 2; ++r) {
            const float* p = (const float*)s + (n0 + g) * LD + k16 * 16 + 8 * r + t;
            tf32_operand<SPLIT, false>(p[0], b.hi[2 * r], b.lo[2 * r]);
            tf32_operand<SPLIT, false>(p[4], b.hi[2 * r + 1], b.lo[2 * r + 1]);
        }
    } else {
        const u16* p = (const u16*)s + (n0 + g) * LD + k16 * 16 + 2 * t;
        b.hi[0] = *(const u32*)p;
        b.hi[1] = *(const u32*)(p + 8);
    }
}

// B[k][n] = tile[k][n] (the tile's rows are B's k): rows k16*16..+15, columns n0..n0+7. For Pd v etc.
// The half types read it transposed by ldmatrix.trans.
template <int K, bool SPLIT>
__device__ __forceinline__ void load_b_cols(BFrag<K>& b, const typename Tile<K>::E* s, int n0, int k16, int lane) {
    const int g = lane >> 2, t = lane & 3, LD = Tile<K>::LD;
    if constexpr (K == KIND_F32) {
#pragma unroll
        for (int r = 0; r < 2; ++r) {
            const float* p = (const float*)s + (k16 * 16 + 8 * r + t) * LD + n0 + g;
            tf32_operand<SPLIT, false>(p[0], b.hi[2 * r], b.lo[2 * r]);
            tf32_operand<SPLIT, false>(p[4 * LD], b.hi[2 * r + 1], b.lo[2 * r + 1]);
        }
    } else {
        const u16* p = (const u16*)s + (k16 * 16 + (lane & 15)) * LD + n0;
        const u32 addr = (u32)__cvta_generic_to_shared(p);
        asm volatile("ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 {%0,%1}, [%2];"
                     : "=r"(b.hi[0]), "=r"(b.hi[1]) : "r"(addr));
    }
}

// A from a warp's C registers (16 rows x 64 columns, v[nt][e]), k16 slice = column tiles 2*k16, 2*k16+1.
// The half types' C layout is their A layout; float32's A wants columns t and t + 4 of an n8 tile where
// C holds 2t and 2t + 1, so the values move between the four lanes of a row group by shuffles.
template <int K, bool SPLIT>
__device__ __forceinline__ void c_to_a(AFrag<K>& a, const float v[SNT][4], int k16, int lane) {
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

// ---- staging: 64 rows x HS columns of a [B, T, stride] array into a padded tile ----
// Half builds read half-type q, k, v and dO (the wrapper hands them over as 16-bit buffers) and copy them
// by cp.async, 16 bytes a thread, into a tile the next loop iteration does not read: loads overlap the mma
// of the current tile (two buffers). Float32 builds read float32 and round as they store (TF32; plain
// float32 stores exact values and splits later), one buffer, synchronously. Rows at or past T are zeros.
template <int K> struct Pipe { static const int NBUF = 2; };
template <> struct Pipe<KIND_F32> { static const int NBUF = 1; };

__device__ __forceinline__ void cp_async16(void* dst, const void* src) {
    const u32 d = (u32)__cvta_generic_to_shared(dst);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(d), "l"(src));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;"); }
template <int N> __device__ __forceinline__ void cp_async_wait() { asm volatile("cp.async.wait_group %0;" ::"n"(N)); }

template <int K, bool SPLIT, int HS>
__device__ __forceinline__ void stage(typename Tile<K>::E* s, const typename Tile<K>::E* __restrict__ src, int row0,
                                      int T, int stride) {
    const int LD = Tile<K>::LD;
    if constexpr (K == KIND_F32) {
        const int V4 = HS / 4;
        for (int idx = threadIdx.x; idx < BR * V4; idx += NTHREADS) {
            const int r = idx / V4, c = (idx % V4) * 4;
            float4 x = make_float4(0.f, 0.f, 0.f, 0.f);
            if (row0 + r < T) x = *(const float4*)(src + (i64)(row0 + r) * stride + c);
            if (!SPLIT) x = make_float4(tf32_rne(x.x), tf32_rne(x.y), tf32_rne(x.z), tf32_rne(x.w));
            *(float4*)(s + r * LD + c) = x;
        }
    } else {
        const int V8 = HS / 8;
        for (int idx = threadIdx.x; idx < BR * V8; idx += NTHREADS) {
            const int r = idx / V8, c = (idx % V8) * 8;
            u16* d = s + r * LD + c;
            if (row0 + r < T) cp_async16(d, src + (i64)(row0 + r) * stride + c);
            else *(uint4*)d = make_uint4(0u, 0u, 0u, 0u);
        }
    }
}

template <int K> __device__ __forceinline__ constexpr int tile_elems() { return BR * Tile<K>::LD; }

// Two adjacent output elements (idx even) in out_kind: float32, or the half type under half roundings.
__device__ __forceinline__ void store_pair(void* base, i64 idx, float a, float b, int kind) {
    if (kind == KIND_F32) *(float2*)((float*)base + idx) = make_float2(a, b);
    else if (kind == KIND_BF16) *(u32*)((u16*)base + idx) = pack2<KIND_BF16>(a, b);
    else *(u32*)((u16*)base + idx) = pack2<KIND_F16>(a, b);
}

struct Dropout {
    int use;
    u64 seed, off;
    u32 threshold;
    float scale;
    // keep / (1 - p) for element (row i, column j) of head bh's T x T probabilities
    __device__ __forceinline__ float factor(int bh, int i, int j, int T) const {
        if (!use) return 1.0f;
        return rng_keep(seed, off, ((u64)bh * T + i) * (u64)T + j, threshold) ? scale : 0.0f;
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

// acc[n] += a(16 x 64 in C registers) b(64 x HS staged tile, k-major) over the four k16 slices.
// Plain float32 (PROMOTE) sums each tile's product apart and adds it to acc with ordinary float adds: the
// tensor cores' own float32 accumulation is not IEEE-exact, and over a thousand keys it grew past 1e-5.
template <int K, bool SPLIT, int HS>
__device__ __forceinline__ void acc_product(float acc[HS / 8][4], const float a[SNT][4],
                                            const typename Tile<K>::E* sb, int lane) {
    constexpr bool PROMOTE = (K == KIND_F32 && SPLIT);
    float part[PROMOTE ? HS / 8 : 1][4];
    if constexpr (PROMOTE) {
#pragma unroll
        for (int n = 0; n < HS / 8; ++n) part[n][0] = part[n][1] = part[n][2] = part[n][3] = 0.0f;
    }
#pragma unroll
    for (int k16 = 0; k16 < BC / 16; ++k16) {
        AFrag<K> fa;
        c_to_a<K, SPLIT>(fa, a, k16, lane);
#pragma unroll
        for (int n = 0; n < HS / 8; ++n) {
            BFrag<K> fb;
            load_b_cols<K, SPLIT>(fb, sb, n * 8, k16, lane);
            if constexpr (PROMOTE) mma_acc<K, SPLIT, true>(part[n], fa, fb);
            else mma_acc<K, SPLIT, true>(acc[n], fa, fb);
        }
    }
    if constexpr (PROMOTE) {
#pragma unroll
        for (int n = 0; n < HS / 8; ++n)
#pragma unroll
            for (int e = 0; e < 4; ++e) acc[n][e] += part[n][e];
    }
}

// s[n] = a(16 rows of tile sa, from m0) b^T(64 rows of tile sb) over HS: a warp's 16 x 64 scores-like block.
template <int K, bool SPLIT, int HS>
__device__ __forceinline__ void tile_product(float s[SNT][4], const typename Tile<K>::E* sa, int m0,
                                             const typename Tile<K>::E* sb, int lane) {
#pragma unroll
    for (int n = 0; n < SNT; ++n) s[n][0] = s[n][1] = s[n][2] = s[n][3] = 0.0f;
#pragma unroll
    for (int k16 = 0; k16 < HS / 16; ++k16) {
        AFrag<K> fa;
        load_a<K, SPLIT>(fa, sa, m0, k16, lane);
#pragma unroll
        for (int n = 0; n < SNT; ++n) {
            BFrag<K> fb;
            load_b_rows<K, SPLIT>(fb, sb, n * 8, k16, lane);
            mma_acc<K, SPLIT, false>(s[n], fa, fb);
        }
    }
}

// ---------------------------------------------------------------------------------------------- forward
template <int K, bool SPLIT, int HS>
__device__ void attention_forward(void* __restrict__ out, float* __restrict__ lse,
                                  const typename Tile<K>::E* __restrict__ qkv, int T, int H, float scale,
                                  int out_kind, Dropout drop) {
    extern __shared__ __align__(16) unsigned char smem[];
    typedef typename Tile<K>::E E;
    constexpr int NBUF = Pipe<K>::NBUF;
    E* sQ = (E*)smem;
    E* sKV = sQ + tile_elems<K>();   // buffer b: K at sKV + 2b tiles, V at sKV + (2b + 1) tiles
    const int nqb = (T + BR - 1) / BR;
    const int qb = nqb - 1 - (int)blockIdx.x;   // the longest rows first
    const int bh = blockIdx.y, b = bh / H, h = bh % H, C = H * HS;
    const int lane = threadIdx.x & 31, m0 = (threadIdx.x >> 5) * 16, g = lane >> 2, t = lane & 3;
    const E* base = qkv + (i64)b * T * 3 * C;
    auto stage_kv = [&](int kb, int buf) {
        stage<K, SPLIT, HS>(sKV + 2 * buf * tile_elems<K>(), base + C + h * HS, kb * BC, T, 3 * C);
        stage<K, SPLIT, HS>(sKV + (2 * buf + 1) * tile_elems<K>(), base + 2 * C + h * HS, kb * BC, T, 3 * C);
    };
    stage<K, SPLIT, HS>(sQ, base + h * HS, qb * BR, T, 3 * C);
    if constexpr (NBUF == 2) {
        stage_kv(0, 0);
        cp_async_commit();
    }

    const int rows[2] = {qb * BR + m0 + g, qb * BR + m0 + g + 8};
    float o[HS / 8][4];
#pragma unroll
    for (int n = 0; n < HS / 8; ++n) o[n][0] = o[n][1] = o[n][2] = o[n][3] = 0.0f;
    float mrow[2] = {NEG_INF, NEG_INF}, lrow[2] = {0.0f, 0.0f};

    for (int kb = 0; kb <= qb; ++kb) {
        const int cur = (NBUF == 2) ? (kb & 1) : 0;
        if constexpr (NBUF == 2) {
            if (kb < qb) {
                stage_kv(kb + 1, cur ^ 1);
                cp_async_commit();
                cp_async_wait<1>();
            } else {
                cp_async_wait<0>();
            }
            __syncthreads();
        } else {
            __syncthreads();
            stage_kv(kb, 0);
            __syncthreads();
        }
        const E* sK = sKV + 2 * cur * tile_elems<K>();
        const E* sV = sK + tile_elems<K>();
        float s[SNT][4];
        tile_product<K, SPLIT, HS>(s, sQ, m0, sK, lane);   // S = q k^T
        // scale, mask, the running max of each of the thread's two rows
        float mx[2] = {NEG_INF, NEG_INF};
#pragma unroll
        for (int n = 0; n < SNT; ++n)
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                const int i = rows[e >> 1], j = kb * BC + n * 8 + 2 * t + (e & 1);
                const float v = (j <= i && j < T) ? s[n][e] * scale : NEG_INF;
                s[n][e] = v;
                mx[e >> 1] = fmaxf(mx[e >> 1], v);
            }
        float alpha[2], muse[2];
#pragma unroll
        for (int r = 0; r < 2; ++r) {
            mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 1));
            mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 2));
            const float mnew = fmaxf(mrow[r], mx[r]);
            muse[r] = (mnew == NEG_INF) ? 0.0f : mnew;   // a row with nothing visible yet (past T)
            alpha[r] = expf(mrow[r] - muse[r]);
            mrow[r] = mnew;
            lrow[r] *= alpha[r];
        }
#pragma unroll
        for (int n = 0; n < HS / 8; ++n) {
            o[n][0] *= alpha[0]; o[n][1] *= alpha[0];
            o[n][2] *= alpha[1]; o[n][3] *= alpha[1];
        }
#pragma unroll
        for (int n = 0; n < SNT; ++n)
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                const int r = e >> 1, i = rows[r], j = kb * BC + n * 8 + 2 * t + (e & 1);
                const float p = expf(s[n][e] - muse[r]);   // exp(-inf) = 0 where masked
                lrow[r] += p;
                s[n][e] = (p != 0.0f) ? p * drop.factor(bh, i, j, T) : 0.0f;
            }
        acc_product<K, SPLIT, HS>(o, s, sV, lane);   // O += Pd v
        if constexpr (NBUF == 2) __syncthreads();     // the next iteration stages into this buffer
    }
#pragma unroll
    for (int r = 0; r < 2; ++r) {
        lrow[r] += __shfl_xor_sync(0xffffffffu, lrow[r], 1);
        lrow[r] += __shfl_xor_sync(0xffffffffu, lrow[r], 2);
    }
#pragma unroll
    for (int r = 0; r < 2; ++r) {
        const int i = rows[r];
        if (i >= T) continue;
        const float inv = 1.0f / lrow[r];
        const i64 at = ((i64)b * T + i) * C + h * HS + 2 * t;
#pragma unroll
        for (int n = 0; n < HS / 8; ++n) store_pair(out, at + n * 8, o[n][2 * r] * inv, o[n][2 * r + 1] * inv, out_kind);
        if (t == 0) lse[(i64)bh * T + i] = mrow[r] + logf(lrow[r]);
    }
}

// ---------------------------------------------------------------------------------------------- backward
// D[bh*T + i] = sum_d dO[b, i, h*HS + d] * O[b, i, h*HS + d], dO rounded as the products read it
// (op_round: 0 none, 1 bfloat16, 2 float16, 3 TF32); dO and O held in dout_kind, out_kind. One warp per (b, i, h).
extern "C" __global__ void attn_backward_dot(float* __restrict__ D, const void* __restrict__ dout,
                                             const void* __restrict__ out, int B, int T, int H, int hs,
                                             int dout_kind, int out_kind, int op_round) {
    const i64 w = ((i64)blockIdx.x * blockDim.x + threadIdx.x) >> 5;
    const int lane = threadIdx.x & 31;
    if (w >= (i64)B * T * H) return;
    const int h = (int)(w % H);
    const i64 bt = w / H;
    const int b = (int)(bt / T), i = (int)(bt % T);
    const i64 at = bt * H * hs + (i64)h * hs;
    float acc = 0.0f;
    for (int d = lane; d < hs; d += 32) {
        float g = load_kind(dout, at + d, dout_kind);
        g = (op_round == 3) ? tf32_rne(g) : round_to_kind(g, op_round);
        acc += g * load_kind(out, at + d, out_kind);
    }
    acc = warp_sum(acc);
    if (lane == 0) D[((i64)b * H + h) * T + i] = acc;
}

// The backward's recomputed probabilities of one 16 x 64 block and its score gradient, in place:
// on entry p = the scores (q k^T or its transpose) and ds = dPd (dO v^T or its transpose); on exit
// p = Pd = P * keep / (1 - p) and ds = dS = P (dPd * keep / (1 - p) - D). (i, j): query and key of element
// (n, e); L and Dq: that query's log-sum-exp and row dot.
template <typename Coords>
__device__ __forceinline__ void softmax_grad(float p[SNT][4], float ds[SNT][4], int T, int bh, float scale,
                                             const Dropout& drop, Coords coords) {
#pragma unroll
    for (int n = 0; n < SNT; ++n)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
            int i, j;
            float L, Dq;
            coords(n, e, i, j, L, Dq);
            float pv = 0.0f, f = 0.0f;
            if (j <= i && i < T && j < T) {
                pv = expf(p[n][e] * scale - L);
                f = drop.factor(bh, i, j, T);
            }
            ds[n][e] = pv * (ds[n][e] * f - Dq);
            p[n][e] = pv * f;
        }
}

template <int HS>
__device__ __forceinline__ void store_rows(void* dst, i64 at, const float acc[HS / 8][4], int r, float mul,
                                           int out_kind) {
#pragma unroll
    for (int n = 0; n < HS / 8; ++n) store_pair(dst, at + n * 8, acc[n][2 * r] * mul, acc[n][2 * r + 1] * mul, out_kind);
}

// dK and dV of 64 keys of one head. Warp rows are keys; the staged tiles hold 64 queries.
template <int K, bool SPLIT, int HS>
__device__ void attention_backward_dkdv(void* __restrict__ dqkv, const typename Tile<K>::E* __restrict__ qkv,
                                        const typename Tile<K>::E* __restrict__ dout, const float* __restrict__ lse,
                                        const float* __restrict__ Dvec, int T, int H, float scale, int out_kind,
                                        Dropout drop) {
    extern __shared__ __align__(16) unsigned char smem[];
    typedef typename Tile<K>::E E;
    constexpr int NBUF = Pipe<K>::NBUF;
    E* sK = (E*)smem;
    E* sV = sK + tile_elems<K>();
    E* sQO = sV + tile_elems<K>();                          // buffer b: q at 2b tiles, dO at 2b + 1
    float* sLD = (float*)(sQO + 2 * NBUF * tile_elems<K>());  // buffer b: lse at 2b * BC, D at (2b + 1) * BC
    const int nqb = (T + BR - 1) / BR;
    const int kb = (int)blockIdx.x;   // the first key tiles see the most queries: launched first
    const int bh = blockIdx.y, b = bh / H, h = bh % H, C = H * HS;
    const int lane = threadIdx.x & 31, m0 = (threadIdx.x >> 5) * 16, g = lane >> 2, t = lane & 3;
    const E* base = qkv + (i64)b * T * 3 * C;
    const E* gbase = dout + (i64)b * T * C;
    auto stage_q = [&](int qb, int buf) {
        stage<K, SPLIT, HS>(sQO + 2 * buf * tile_elems<K>(), base + h * HS, qb * BC, T, 3 * C);
        stage<K, SPLIT, HS>(sQO + (2 * buf + 1) * tile_elems<K>(), gbase + h * HS, qb * BC, T, C);
        float* l = sLD + 2 * buf * BC;
        for (int r = threadIdx.x; r < BC; r += NTHREADS) {
            const int i = qb * BC + r;
            l[r] = (i < T) ? lse[(i64)bh * T + i] : 0.0f;
            l[BC + r] = (i < T) ? Dvec[(i64)bh * T + i] : 0.0f;
        }
    };
    stage<K, SPLIT, HS>(sK, base + C + h * HS, kb * BR, T, 3 * C);
    stage<K, SPLIT, HS>(sV, base + 2 * C + h * HS, kb * BR, T, 3 * C);
    if constexpr (NBUF == 2) {
        stage_q(kb, 0);
        cp_async_commit();
    }
    const int keys[2] = {kb * BR + m0 + g, kb * BR + m0 + g + 8};
    float dk[HS / 8][4], dv[HS / 8][4];
#pragma unroll
    for (int n = 0; n < HS / 8; ++n)
#pragma unroll
        for (int e = 0; e < 4; ++e) dk[n][e] = dv[n][e] = 0.0f;

    for (int qb = kb; qb < nqb; ++qb) {
        const int cur = (NBUF == 2) ? ((qb - kb) & 1) : 0;
        if constexpr (NBUF == 2) {
            if (qb + 1 < nqb) {
                stage_q(qb + 1, cur ^ 1);
                cp_async_commit();
                cp_async_wait<1>();
            } else {
                cp_async_wait<0>();
            }
            __syncthreads();
        } else {
            __syncthreads();
            stage_q(qb, 0);
            __syncthreads();
        }
        const E* sQ = sQO + 2 * cur * tile_elems<K>();
        const E* sO = sQ + tile_elems<K>();
        const float* sL = sLD + 2 * cur * BC;
        const float* sD = sL + BC;
        float p[SNT][4], ds[SNT][4];
        tile_product<K, SPLIT, HS>(p, sK, m0, sQ, lane);    // S^T = k q^T
        tile_product<K, SPLIT, HS>(ds, sV, m0, sO, lane);   // dPd^T = v dO^T
        softmax_grad(p, ds, T, bh, scale, drop, [&](int n, int e, int& i, int& j, float& L, float& Dq) {
            const int il = n * 8 + 2 * t + (e & 1);
            i = qb * BC + il;
            j = keys[e >> 1];
            L = sL[il];
            Dq = sD[il];
        });
        acc_product<K, SPLIT, HS>(dv, p, sO, lane);    // dV += Pd^T dO
        acc_product<K, SPLIT, HS>(dk, ds, sQ, lane);   // dK += dS^T q
        if constexpr (NBUF == 2) __syncthreads();
    }
#pragma unroll
    for (int r = 0; r < 2; ++r) {
        if (keys[r] >= T) continue;
        const i64 at = ((i64)b * T + keys[r]) * 3 * C + h * HS + 2 * t;
        store_rows<HS>(dqkv, at + C, dk, r, scale, out_kind);
        store_rows<HS>(dqkv, at + 2 * C, dv, r, 1.0f, out_kind);
    }
}

// dQ of 64 queries of one head. Warp rows are queries; the staged tiles hold 64 keys.
template <int K, bool SPLIT, int HS>
__device__ void attention_backward_dq(void* __restrict__ dqkv, const typename Tile<K>::E* __restrict__ qkv,
                                      const typename Tile<K>::E* __restrict__ dout, const float* __restrict__ lse,
                                      const float* __restrict__ Dvec, int T, int H, float scale, int out_kind,
                                      Dropout drop) {
    extern __shared__ __align__(16) unsigned char smem[];
    typedef typename Tile<K>::E E;
    constexpr int NBUF = Pipe<K>::NBUF;
    E* sQ = (E*)smem;
    E* sO = sQ + tile_elems<K>();    // dO
    E* sKV = sO + tile_elems<K>();   // buffer b: k at 2b tiles, v at 2b + 1
    const int nqb = (T + BR - 1) / BR;
    const int qb = nqb - 1 - (int)blockIdx.x;
    const int bh = blockIdx.y, b = bh / H, h = bh % H, C = H * HS;
    const int lane = threadIdx.x & 31, m0 = (threadIdx.x >> 5) * 16, g = lane >> 2, t = lane & 3;
    const E* base = qkv + (i64)b * T * 3 * C;
    auto stage_kv = [&](int kb, int buf) {
        stage<K, SPLIT, HS>(sKV + 2 * buf * tile_elems<K>(), base + C + h * HS, kb * BC, T, 3 * C);
        stage<K, SPLIT, HS>(sKV + (2 * buf + 1) * tile_elems<K>(), base + 2 * C + h * HS, kb * BC, T, 3 * C);
    };
    stage<K, SPLIT, HS>(sQ, base + h * HS, qb * BR, T, 3 * C);
    stage<K, SPLIT, HS>(sO, dout + (i64)b * T * C + h * HS, qb * BR, T, C);
    if constexpr (NBUF == 2) {
        stage_kv(0, 0);
        cp_async_commit();
    }
    const int rows[2] = {qb * BR + m0 + g, qb * BR + m0 + g + 8};
    float L[2], Dr[2];
#pragma unroll
    for (int r = 0; r < 2; ++r) {
        L[r] = rows[r] < T ? lse[(i64)bh * T + rows[r]] : 0.0f;
        Dr[r] = rows[r] < T ? Dvec[(i64)bh * T + rows[r]] : 0.0f;
    }
    float dq[HS / 8][4];
#pragma unroll
    for (int n = 0; n < HS / 8; ++n) dq[n][0] = dq[n][1] = dq[n][2] = dq[n][3] = 0.0f;

    for (int kb = 0; kb <= qb; ++kb) {
        const int cur = (NBUF == 2) ? (kb & 1) : 0;
        if constexpr (NBUF == 2) {
            if (kb < qb) {
                stage_kv(kb + 1, cur ^ 1);
                cp_async_commit();
                cp_async_wait<1>();
            } else {
                cp_async_wait<0>();
            }
            __syncthreads();
        } else {
            __syncthreads();
            stage_kv(kb, 0);
            __syncthreads();
        }
        const E* sK = sKV + 2 * cur * tile_elems<K>();
        const E* sV = sK + tile_elems<K>();
        float p[SNT][4], ds[SNT][4];
        tile_product<K, SPLIT, HS>(p, sQ, m0, sK, lane);    // S = q k^T
        tile_product<K, SPLIT, HS>(ds, sO, m0, sV, lane);   // dPd = dO v^T
        softmax_grad(p, ds, T, bh, scale, drop, [&](int n, int e, int& i, int& j, float& Lq, float& Dq) {
            i = rows[e >> 1];
            j = kb * BC + n * 8 + 2 * t + (e & 1);
            Lq = L[e >> 1];
            Dq = Dr[e >> 1];
        });
        acc_product<K, SPLIT, HS>(dq, ds, sK, lane);   // dQ += dS k
        if constexpr (NBUF == 2) __syncthreads();
    }
#pragma unroll
    for (int r = 0; r < 2; ++r)
        if (rows[r] < T) store_rows<HS>(dqkv, ((i64)b * T + rows[r]) * 3 * C + h * HS + 2 * t, dq, r, scale, out_kind);
}

// ---- the instantiations: attn_{forward,backward_dkdv,backward_dq}_<build>_hs<HS> ----
// builds: f32 (plain float32, split), tf32, bf16 (exact, split), bf16r (half roundings), f16, f16r.
// q, k, v and dO arrive as float32 in the float32 builds and as 16-bit half-type bits in the half builds.
#define ATTN_KERNELS(BUILD, K, SPLIT, HS)                                                                        \
    extern "C" __global__ void __launch_bounds__(NTHREADS) attn_forward_##BUILD##_hs##HS(                       \
        void* out, float* lse, const Tile<K>::E* qkv, int T, int H, float scale, int out_kind,                 \
        int use_dropout, u64 seed, u64 offset, const u64* offset_add, u32 threshold, float dscale) {            \
        attention_forward<K, SPLIT, HS>(out, lse, qkv, T, H, scale, out_kind,                                  \
                                        make_dropout(use_dropout, seed, offset, offset_add, threshold, dscale)); \
    }                                                                                                          \
    extern "C" __global__ void __launch_bounds__(NTHREADS) attn_backward_dkdv_##BUILD##_hs##HS(                 \
        void* dqkv, const Tile<K>::E* qkv, const Tile<K>::E* dout, const float* lse, const float* Dvec,        \
        int T, int H, float scale, int out_kind, int use_dropout, u64 seed, u64 offset, const u64* offset_add, \
        u32 threshold, float dscale) {                                                                         \
        attention_backward_dkdv<K, SPLIT, HS>(dqkv, qkv, dout, lse, Dvec, T, H, scale, out_kind,              \
                                              make_dropout(use_dropout, seed, offset, offset_add, threshold, dscale)); \
    }                                                                                                          \
    extern "C" __global__ void __launch_bounds__(NTHREADS) attn_backward_dq_##BUILD##_hs##HS(                   \
        void* dqkv, const Tile<K>::E* qkv, const Tile<K>::E* dout, const float* lse, const float* Dvec,        \
        int T, int H, float scale, int out_kind, int use_dropout, u64 seed, u64 offset, const u64* offset_add, \
        u32 threshold, float dscale) {                                                                         \
        attention_backward_dq<K, SPLIT, HS>(dqkv, qkv, dout, lse, Dvec, T, H, scale, out_kind,                \
                                            make_dropout(use_dropout, seed, offset, offset_add, threshold, dscale)); \
    }

ATTN_KERNELS(f32, KIND_F32, true, 64)
ATTN_KERNELS(tf32, KIND_F32, false, 64)
ATTN_KERNELS(bf16, KIND_BF16, true, 64)
ATTN_KERNELS(bf16r, KIND_BF16, false, 64)
ATTN_KERNELS(f16, KIND_F16, true, 64)
ATTN_KERNELS(f16r, KIND_F16, false, 64)
ATTN_KERNELS(f32, KIND_F32, true, 32)
ATTN_KERNELS(tf32, KIND_F32, false, 32)
ATTN_KERNELS(bf16, KIND_BF16, true, 32)
ATTN_KERNELS(bf16r, KIND_BF16, false, 32)
ATTN_KERNELS(f16, KIND_F16, true, 32)
ATTN_KERNELS(f16r, KIND_F16, false, 32)
