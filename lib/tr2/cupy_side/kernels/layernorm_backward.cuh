// layernorm_backward.cuh: LayerNorm's backward rows and its weight gradient's final sum, shared by layernorm.cu
// (the plain LayerNorm: no skip, no branch gradient, no dropout) and residual_layernorm.cu (the fused one), so
// both kernels run one body and give the same bits. Per row, g = dy * w, shat = (s - mean) * rstd:
//   ds = rstd * (g - mean(g) - shat * mean(g * shat)) + dskip      (dskip nullable)
//   db = dropout(ds) in db_kind                                      (db nullable; drop = 0: no dropout)
//   dw = sum over rows of dy * shat, in a fixed order: each warp leaves its row's dy * shat in shared memory
//        (dynamic, ROWS x C floats), the block adds its rows in warp order into dw_part[blockIdx.x, :], and the
//        final kernel adds the blocks' partials (layernorm_dw_final_body).
// Why dw here: it was a kernel of its own that read dy and s a second time (6 bytes an element; 25 launches and
// 525 us a step of gpt2-small bf16, ~1.8 TB/s, call 6 of results/h200-perf-20261201); here it costs a
// shared-memory store an element and 4 bytes a column a block.
// Removed on 2026-12-05 (docs/perf.md by session; their source and tests: before the removal, at 3f23587): dw finished
// by the backward's own last blocks instead of the final kernel (layernorm_dw_finish, the *_backward_dwsum kernels of
// layernorm.cu and residual_layernorm.cu, two levels of ordered sums by tickets; TR2_LN_FINAL_IN_KERNEL: slower on
// every model, ninth session, +0.114 ms a step of nanogpt, +0.271 of gpt2-small); and the register-row row with
// dskip's row loaded beside dy's and s's (PREFETCH_SKIP, residual_layernorm.cu's _pf kernels; TR2_LN_BWD_PREFETCH: no
// gain, twelfth session). gpu.RETIRED names the switches (each refused if still set).
#pragma once
#include "common.cuh"

// Partial g of dw: the rows' dy * shat (dw_rows, [rows][C], after a barrier) added in warp order.
__device__ __forceinline__ void block_dw_partial_at(float* __restrict__ dw_part, i64 g, const float* dw_rows, int C) {
    const int rows = blockDim.x >> 5;
    for (int c = threadIdx.x; c < C; c += blockDim.x) {
        float t = 0.0f;
        for (int k = 0; k < rows; k++) t += dw_rows[(i64)k * C + c];
        dw_part[g * C + c] = t;
    }
}
// The block's dw partial (one block a group of rows).
__device__ __forceinline__ void block_dw_partial(float* __restrict__ dw_part, const float* dw_rows, int C) {
    block_dw_partial_at(dw_part, blockIdx.x, dw_rows, C);
}

// One warp per row; blockDim.x = 32 * rows a block. dy in dy_kind (a product's half-type gradient under half
// roundings). No early return: every warp reaches the block's barrier.
__device__ __forceinline__ void layernorm_backward_body(float* __restrict__ ds, void* __restrict__ db,
                                                        float* __restrict__ dw_part, const void* __restrict__ dy,
                                                        const float* __restrict__ dskip, const float* __restrict__ s,
                                                        const float* __restrict__ w, const float* __restrict__ mean,
                                                        const float* __restrict__ rstd, int N, int C, int dy_kind,
                                                        int db_kind, int drop, u64 seed, u64 offset,
                                                        const u64* __restrict__ offset_add, u32 threshold,
                                                        float scale) {
    extern __shared__ float dw_rows[];   // [rows][C]: warp k's row's dy * shat
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const i64 row = (i64)blockIdx.x * (blockDim.x >> 5) + warp;
    float* dwr = dw_rows + (i64)warp * C;
    if (row < N) {
        const i64 r0 = row * C;
        const float m = mean[row], r = rstd[row];
        float s1 = 0.0f, s2 = 0.0f;
        for (int c = lane; c < C; c += 32) {
            const float g = load_kind(dy, r0 + c, dy_kind) * w[c];
            const float sh = (s[r0 + c] - m) * r;
            s1 += g;
            s2 += g * sh;
        }
        s1 = warp_sum(s1) / (float)C;
        s2 = warp_sum(s2) / (float)C;
        const u64 off = drop ? site_offset(offset, offset_add) : 0;
        for (int c = lane; c < C; c += 32) {
            const i64 e = r0 + c;
            const float dyv = load_kind(dy, e, dy_kind);
            const float g = dyv * w[c];
            const float sh = (s[e] - m) * r;
            dwr[c] = __fmul_rn(dyv, sh);
            float d = __fmul_rn(r, g - s1 - sh * s2);
            if (dskip != nullptr) d = dskip[e] + d;
            ds[e] = d;
            if (db != nullptr) {
                float v = d;
                if (drop) v = rng_keep(seed, off, (u64)e, threshold) ? __fmul_rn(d, scale) : 0.0f;
                store_kind(db, e, v, db_kind);
            }
        }
    } else {
        for (int c = lane; c < C; c += 32) dwr[c] = 0.0f;
    }
    __syncthreads();
    block_dw_partial(dw_part, dw_rows, C);
}

// dw[c] = sum over g of part[g, c], g in order: block (32, 32) covers 32 columns; thread (x, y) adds the partials
// y, y + 32, ... of its column in order, then thread (x, 0) adds the 32 sums in order. G is one partial a block
// of the backward (N / 8: 1024 for gpt2-small's 8192 rows), too many for one thread a column.
// The loop unrolled by 16: sixteen loads in flight before their adds, which keep their order (the same sum, the
// same bits). Why: NVRTC unrolled it by 4 on its own, so C / 32 blocks (12 on the char model) waited on L2 about
// G / 128 times in a row (16 on the char model): residual_layernorm_dw_final took 7.5 us a launch there for 3 MB
// (90 us a step of nanogpt, 120 of gpt2-small, call 4 of results/h200-perf-20261202b), a latency, not a bandwidth.
__device__ __forceinline__ void layernorm_dw_final_body(float* __restrict__ dw, const float* __restrict__ part,
                                                        int G, int C) {
    __shared__ float sums[32][33];
    const int c = blockIdx.x * 32 + threadIdx.x;
    float t = 0.0f;
    if (c < C)
#pragma unroll 16
        for (int g = threadIdx.y; g < G; g += 32) t += part[(i64)g * C + c];
    sums[threadIdx.y][threadIdx.x] = t;
    __syncthreads();
    if (threadIdx.y == 0 && c < C) {
        float u = 0.0f;
        for (int k = 0; k < 32; k++) u += sums[k][threadIdx.x];
        dw[c] = u;
    }
}

// ---- the same rows with each row held in registers (C = 32 * CPL, CPL % 4 == 0: the models' 384, 768, 1024) ----
// Why: the body above reads dy and s twice, once for the row's two means and once for the outputs. At full
// occupancy its dw rows take ~197 KB of an SM's shared memory (8 rows x C floats a block, 8 blocks), which leaves
// ~30 KB of L1 for the rows in flight (~295 KB on gpt2-small), so the second pass likely reads L2 again (a
// hypothesis: docs/perf.md). Here a lane loads its columns once, 4 at a time (16-byte float32, 8-byte half
// accesses), and keeps them for the second pass. Lane L holds columns 4L + 128k .. 4L + 128k + 3, k < CPL / 4.
// The same formulas, operation for operation; the row's sums run in the lanes' column order (k, then the 4).
__device__ __forceinline__ void load4_kind(const void* p, i64 i, int kind, float v[4]) {
    if (kind == KIND_F32) {
        const float4 x = *(const float4*)((const float*)p + i);
        v[0] = x.x, v[1] = x.y, v[2] = x.z, v[3] = x.w;
    } else {
        const uint2 u = *(const uint2*)((const u16*)p + i);
        const u16 h[4] = {(u16)(u.x & 0xFFFFu), (u16)(u.x >> 16), (u16)(u.y & 0xFFFFu), (u16)(u.y >> 16)};
#pragma unroll
        for (int j = 0; j < 4; j++) v[j] = kind == KIND_BF16 ? bf16_bits_to_f32(h[j]) : f16_bits_to_f32(h[j]);
    }
}

__device__ __forceinline__ void store4_kind(void* p, i64 i, const float v[4], int kind) {
    if (kind == KIND_F32) {
        *(float4*)((float*)p + i) = make_float4(v[0], v[1], v[2], v[3]);
    } else {
        u16 h[4];
#pragma unroll
        for (int j = 0; j < 4; j++) h[j] = kind == KIND_BF16 ? f32_to_bf16_bits(v[j]) : f32_to_f16_bits(v[j]);
        *(uint2*)((u16*)p + i) = make_uint2((u32)h[0] | ((u32)h[1] << 16), (u32)h[2] | ((u32)h[3] << 16));
    }
}

// One row, lane L's columns held in registers: dy, s and dskip read at src0 + c from dy_src, s_src, skip_src (the
// row in global memory, src0 = r0; or a copy of it in shared memory, src0 = 0: the bulk form below), ds and db
// written at r0 + c, the row's dy * shat into dwr (shared memory). skip_src nullable. The pointers may alias no
// output but dwr may lie beside the inputs' copies, so none is __restrict__.
// W_ONCE: w's columns loaded once, before the first pass, and used by both. The plain kernels leave it to the
// compiler, which at 384 and 768 columns keeps the first pass's w (and the products dy * w) for the second (ptxas: 89
// FFMA and 172 FADD at 768) and at 1024 contracts more (160 FFMA, 146 FADD); with w in shared memory beside the dw
// rows' stores (the bulk form) it reloads w and contracts more at every width. The multiply-adds' roundings decide the
// bits, so the bulk form takes W_ONCE at 384 and 768 (the plain kernels' bits, call 5 of results/h200-perf-20261204c)
// and at 1024 reads w from global memory as the plain kernel does.
// A pass's four columns of w: the ones loaded before the first pass (W_ONCE), or a load from w here.
template <bool W_ONCE>
__device__ __forceinline__ void row_w(float wk[4], const float held[4], const float* w) {
    if constexpr (W_ONCE) {
        wk[0] = held[0], wk[1] = held[1], wk[2] = held[2], wk[3] = held[3];
    } else {
        const float4 wv = *(const float4*)w;
        wk[0] = wv.x, wk[1] = wv.y, wk[2] = wv.z, wk[3] = wv.w;
    }
}

template <int CPL, bool W_ONCE = false>
__device__ __forceinline__ void layernorm_backward_row(
        float* ds, void* db, float* dwr, const void* dy_src, const float* s_src, const float* skip_src, i64 src0,
        i64 r0, const float* __restrict__ w, float m, float r, int dy_kind, int db_kind, int drop, u64 seed,
        u64 offset, const u64* __restrict__ offset_add, u32 threshold, float scale) {
    static_assert(CPL % 4 == 0, "a lane's columns come in groups of four");
    constexpr int NV = CPL / 4, C = 32 * CPL;
    const int lane = threadIdx.x & 31;
    float dyv[NV][4], sv[NV][4], wo[W_ONCE ? NV : 1][4];
#pragma unroll
    for (int k = 0; k < NV; k++) {   // every load of the row issued before the first use
        const int c = 4 * lane + 128 * k;
        if constexpr (W_ONCE) {
            const float4 wv = *(const float4*)(w + c);
            wo[k][0] = wv.x, wo[k][1] = wv.y, wo[k][2] = wv.z, wo[k][3] = wv.w;
        }
        load4_kind(dy_src, src0 + c, dy_kind, dyv[k]);
        load4_kind(s_src, src0 + c, KIND_F32, sv[k]);
    }
    float s1 = 0.0f, s2 = 0.0f;
#pragma unroll
    for (int k = 0; k < NV; k++) {
        float wk[4];
        row_w<W_ONCE>(wk, wo[W_ONCE ? k : 0], w + 4 * lane + 128 * k);
#pragma unroll
        for (int j = 0; j < 4; j++) {
            const float g = dyv[k][j] * wk[j];
            const float sh = (sv[k][j] - m) * r;
            s1 += g;
            s2 += g * sh;
        }
    }
    s1 = warp_sum(s1) / (float)C;
    s2 = warp_sum(s2) / (float)C;
    const u64 off = drop ? site_offset(offset, offset_add) : 0;
#pragma unroll
    for (int k = 0; k < NV; k++) {
        const int c = 4 * lane + 128 * k;
        const i64 e = r0 + c;
        float wk[4];
        row_w<W_ONCE>(wk, wo[W_ONCE ? k : 0], w + c);
        float skip[4] = {0.0f, 0.0f, 0.0f, 0.0f};
        if (skip_src != nullptr) load4_kind(skip_src, src0 + c, KIND_F32, skip);
        float d[4], dwv[4];
#pragma unroll
        for (int j = 0; j < 4; j++) {
            const float g = dyv[k][j] * wk[j];
            const float sh = (sv[k][j] - m) * r;
            dwv[j] = __fmul_rn(dyv[k][j], sh);
            d[j] = __fmul_rn(r, g - s1 - sh * s2);
            if (skip_src != nullptr) d[j] = skip[j] + d[j];
        }
        *(float4*)(dwr + c) = make_float4(dwv[0], dwv[1], dwv[2], dwv[3]);
        store4_kind(ds, e, d, KIND_F32);
        if (db != nullptr) {
            float v[4];
#pragma unroll
            for (int j = 0; j < 4; j++)
                v[j] = !drop ? d[j] : rng_keep(seed, off, (u64)(e + j), threshold) ? __fmul_rn(d[j], scale) : 0.0f;
            store4_kind(db, e, v, db_kind);
        }
    }
}

template <int CPL>
__device__ __forceinline__ void layernorm_backward_row_registers(
        float* __restrict__ ds, void* __restrict__ db, float* __restrict__ dw_part, const void* __restrict__ dy,
        const float* __restrict__ dskip, const float* __restrict__ s, const float* __restrict__ w,
        const float* __restrict__ mean, const float* __restrict__ rstd, int N, int dy_kind, int db_kind, int drop,
        u64 seed, u64 offset, const u64* __restrict__ offset_add, u32 threshold, float scale) {
    constexpr int C = 32 * CPL;
    extern __shared__ float dw_rows[];   // [rows][C]: warp k's row's dy * shat
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const i64 row = (i64)blockIdx.x * (blockDim.x >> 5) + warp;
    float* dwr = dw_rows + (i64)warp * C;
    if (row < N) {
        const i64 r0 = row * C;
        layernorm_backward_row<CPL>(ds, db, dwr, dy, s, dskip, r0, r0, w, mean[row], rstd[row], dy_kind, db_kind, drop,
                                    seed, offset, offset_add, threshold, scale);
    } else {
        for (int c = lane; c < C; c += 32) dwr[c] = 0.0f;
    }
    __syncthreads();
    block_dw_partial(dw_part, dw_rows, C);
}
