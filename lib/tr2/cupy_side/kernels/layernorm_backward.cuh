// layernorm_backward.cuh: LayerNorm's backward rows and its weight gradient's final sum, shared by layernorm.cu
// (the plain LayerNorm: no skip, no branch gradient, no dropout) and residual_layernorm.cu (the fused one), so
// both kernels run one body and give the same bits. Per row, g = dy * w, shat = (s - mean) * rstd:
//   ds = rstd * (g - mean(g) - shat * mean(g * shat)) + dskip      (dskip nullable)
//   db = dropout(ds) in db_kind                                      (db nullable; drop = 0: no dropout)
//   dw = sum over rows of dy * shat, in a fixed order: each warp leaves its row's dy * shat in shared memory
//        (dynamic, ROWS x C floats), the block adds its rows in warp order into dw_part[blockIdx.x, :], and the
//        final kernel adds the blocks' partials (layernorm_dw_final_body), or, in the *_backward_dwsum kernels,
//        the blocks that arrive last do (layernorm_dw_finish, at the end of this file).
// Why dw here: it was a kernel of its own that read dy and s a second time (6 bytes an element; 25 launches and
// 525 us a step of gpt2-small bf16, ~1.8 TB/s, call 6 of results/h200-perf-20261201); here it costs a
// shared-memory store an element and 4 bytes a column a block.
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

// PREFETCH_SKIP: dskip's row is loaded with dy's and s's, before the row's two means, instead of a float4 at a time in
// the second pass after them. Why (a hypothesis, to be measured): the second pass's dskip loads are a second
// memory round trip a row, after the shuffles, with at most 8-16 warps an SM (56-127 registers) to hide it;
// residual_layernorm_backward_c384 moves ~100 MB in 30.1 us (3.3 TB/s) where the forward moves 75 MB at up to
// 3.9 TB/s (call 4 of results/h200-perf-20261202b, call 2 of results/h200-perf-20261202). The same arithmetic on
// the same values: the same bits.
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

template <int CPL, bool PREFETCH_SKIP, bool W_ONCE = false>
__device__ __forceinline__ void layernorm_backward_row(
        float* ds, void* db, float* dwr, const void* dy_src, const float* s_src, const float* skip_src, i64 src0,
        i64 r0, const float* __restrict__ w, float m, float r, int dy_kind, int db_kind, int drop, u64 seed,
        u64 offset, const u64* __restrict__ offset_add, u32 threshold, float scale) {
    static_assert(CPL % 4 == 0, "a lane's columns come in groups of four");
    constexpr int NV = CPL / 4, C = 32 * CPL;
    const int lane = threadIdx.x & 31;
    float dyv[NV][4], sv[NV][4], skv[PREFETCH_SKIP ? NV : 1][4], wo[W_ONCE ? NV : 1][4];
#pragma unroll
    for (int k = 0; k < NV; k++) {   // every load of the row issued before the first use
        const int c = 4 * lane + 128 * k;
        if constexpr (W_ONCE) {
            const float4 wv = *(const float4*)(w + c);
            wo[k][0] = wv.x, wo[k][1] = wv.y, wo[k][2] = wv.z, wo[k][3] = wv.w;
        }
        load4_kind(dy_src, src0 + c, dy_kind, dyv[k]);
        load4_kind(s_src, src0 + c, KIND_F32, sv[k]);
        if (PREFETCH_SKIP && skip_src != nullptr) load4_kind(skip_src, src0 + c, KIND_F32, skv[PREFETCH_SKIP ? k : 0]);
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
        if (PREFETCH_SKIP && skip_src != nullptr) {
#pragma unroll
            for (int j = 0; j < 4; j++) skip[j] = skv[PREFETCH_SKIP ? k : 0][j];
        } else if (skip_src != nullptr) {
            load4_kind(skip_src, src0 + c, KIND_F32, skip);
        }
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

template <int CPL, bool PREFETCH_SKIP = false>
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
        layernorm_backward_row<CPL, PREFETCH_SKIP>(ds, db, dwr, dy, s, dskip, r0, r0, w, mean[row], rstd[row],
                                                   dy_kind, db_kind, drop, seed, offset, offset_add, threshold,
                                                   scale);
    } else {
        for (int c = lane; c < C; c += 32) dwr[c] = 0.0f;
    }
    __syncthreads();
    block_dw_partial(dw_part, dw_rows, C);
}

// ---- dw finished by the backward's own last blocks, no second launch (the *_backward_dwsum kernels) ----
// Why: layernorm_dw_final is a launch of its own after every backward, 5-8 us on the H200 (24 a step on
// gpt2-small: 128 us), most of it launch and graph-node overhead and 24-32 blocks waiting on L2. Here the blocks
// that arrive last do the sum, in two levels so that no one block adds all G partials: the GS = LN_DW_GROUP
// consecutive blocks of a group take tickets from the group's counter after storing their partials, and the block
// that takes the group's last ticket adds the group's partials into group_sums[group]; then it takes a ticket from
// the top counter, and the block that completes the last group adds the group sums into dw. Which block does a sum
// changes from run to run; the sum's order does not (it depends on G, C and the block size only), so dw has the same
// bits every run. With R = blockDim.x / 32 warps, sum_in_order(v_0 .. v_{P-1})[c] is
//     the sum over k = 0 .. R-1 in order of t_k,   t_k = the sum over j = k, k + R, k + 2R, ... < P in order of v_j[c]
// (each sum from 0.0f), and
//     group_sums[q] = sum_in_order(dw_part[q GS .. min((q + 1) GS, G) - 1]),   dw = sum_in_order(group_sums)
// (transcribed in gpu/dw_order.py, which the CPU tests check; the GPU tests ask the kernels for its bits).
// Counters: one a group and the top one, zero at launch; the block that takes a counter's last ticket sets it back to
// zero (no other ticket of it is left in this launch), so the next launch, a CUDA graph's replay too, finds zeros.
#define LN_DW_GROUP 32
// The *_dwsum kernels' launch bounds: the wrappers' block (32 x ROWS_PER_BLOCK threads), and the blocks an SM the
// kernels without the finish reach (ptxas: 32 and 40 registers for the general bodies, 56-64 at 384, 94-127 at 768 and
// 1024). Without them ptxas gave residual_layernorm_backward_dwsum_c384 71 registers (3 blocks an SM, not 4) and the
// general bodies 40 and 48; with them each kernel keeps its blocks an SM, and nothing spills.
#define LN_DW_THREADS 256
#define LN_DW_ROWS_MIN_BLOCKS(C) ((C) == 384 ? 4 : 2)

// The block's ticket from *counter, taken once the stores of every thread of the block before the call are visible to
// the whole GPU; true, in every thread, in the block that takes ticket count - 1, which then sees every store the
// other ticket holders made before theirs. A barrier, then thread 0's fence, atomic and fence, then a barrier: the way
// cooperative groups' grid barrier orders a block's stores before its arrival and another block's loads after.
__device__ __forceinline__ bool took_last_ticket(int* counter, int count) {
    __shared__ int last;
    __syncthreads();
    if (threadIdx.x == 0) {
        __threadfence();
        const bool is_last = atomicAdd(counter, 1) == count - 1;
        if (is_last) atomicExch(counter, 0);
        __threadfence();
        last = is_last;
    }
    __syncthreads();
    return last != 0;
}

// dst[c] = sum_in_order(rows 0 .. P-1 of src)[c] (src [P][C], other blocks' stores: read through L2 by ld.global.cg,
// never from a line this SM's L1 may hold). Warp k keeps its t_k in its row of the block's dynamic shared memory
// (R x C floats, the dw rows', free once took_last_ticket's barrier is passed), then thread c adds the R rows.
__device__ __forceinline__ void add_rows_in_order(float* dst, const float* src, int P, int C) {
    extern __shared__ float dw_rows[];
    const int rows = blockDim.x >> 5, lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    float* slice = dw_rows + (i64)warp * C;
    if ((C & 3) == 0) {   // 16-byte accesses (rows of C floats stay 16-byte aligned), the same sums column by column
        for (int q = lane; q < C / 4; q += 32) {
            float4 t = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
#pragma unroll 4
            for (int j = warp; j < P; j += rows) {
                const float4 v = __ldcg((const float4*)(src + (i64)j * C) + q);
                t.x += v.x;
                t.y += v.y;
                t.z += v.z;
                t.w += v.w;
            }
            *((float4*)slice + q) = t;
        }
    } else {
        for (int c = lane; c < C; c += 32) {
            float t = 0.0f;
#pragma unroll 4
            for (int j = warp; j < P; j += rows) t += __ldcg(src + (i64)j * C + c);
            slice[c] = t;
        }
    }
    __syncthreads();
    for (int c = threadIdx.x; c < C; c += blockDim.x) {
        float u = 0.0f;
        for (int k = 0; k < rows; k++) u += dw_rows[(i64)k * C + c];
        dst[c] = u;
    }
}

// Called by every block after the body (its partial stored in dw_part[blockIdx.x, :]); G = gridDim.x.
// group_sums [ceil(G / GS), C] scratch; counters [ceil(G / GS) + 1]: the groups', then the top one.
__device__ __forceinline__ void layernorm_dw_finish(float* dw, float* group_sums, int* counters, const float* dw_part,
                                                    int C) {
    const int G = gridDim.x, groups = (G + LN_DW_GROUP - 1) / LN_DW_GROUP;
    const int group = blockIdx.x / LN_DW_GROUP, first = group * LN_DW_GROUP;
    const int size = min(LN_DW_GROUP, G - first);   // the last group is short where G is no multiple of GS
    if (!took_last_ticket(counters + group, size)) return;
    add_rows_in_order(group_sums + (i64)group * C, dw_part + (i64)first * C, size, C);
    if (!took_last_ticket(counters + groups, groups)) return;
    add_rows_in_order(dw, group_sums, groups, C);
}
