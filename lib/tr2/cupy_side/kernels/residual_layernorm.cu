// residual_layernorm.cu: a block's residual add with the residual dropout nanoGPT puts before it, and the LayerNorm
// that reads the sum (ln_2 after the attention's add, the next block's ln_1 or ln_f after the MLP's), one pass
// (reference tr2/cupy_side/ops/residual_layernorm.py). Forward per row:
//   s = x + dropout(b)           the residual stream, float32; dropout (when drop): b * 1/(1-p) where the
//                                generator keeps element row * C + c of the site, 0 elsewhere (dropout.cu's mask)
//   y = (s - mean) * rstd * w    LayerNorm as layernorm.cu: mean = sum(s)/C, var = sum((s-mean)^2)/C,
//                                rstd = 1/sqrt(var + eps); y in y_kind (the half type in the half builds: a
//                                product reads it)
// Backward per row, with g = dy * w, shat = (s - mean) * rstd, dskip the gradient s gets from its other reader
// (the next residual add; none after the last block, where only ln_f reads s):
//   ds = rstd * (g - mean(g) - shat * mean(g * shat)) + dskip     the stream's gradient, which x receives
//   db = dropout(ds)             the branch's gradient, with the same mask, in db_kind (the half type in the half
//                                builds: the branch's product reads it); not written where it would equal ds
//   dw = sum over rows of dy * shat     in a fixed order (layernorm_backward.cuh, shared with layernorm.cu)
// Why: before, the branch's dropout, the add and the LayerNorm were three launches with the stream written and
// read back between them, and backward's add of the two gradients, the dropout and the cast of the branch's
// gradient to the half type three more. The arithmetic is theirs operation for operation: the products that were
// rounded to float32 in memory are __fmul_rn here, so that no multiply-add contracts across a former store.
// Backward forms measured and removed on 2026-12-05 (docs/perf.md by session; their source and tests: before the
// removal, at 3f23587): the register-row backward with dskip's row loaded early (residual_layernorm_backward_c<C>_pf,
// TR2_LN_BWD_PREFETCH: no gain, twelfth session), built for three blocks an SM (_c768_o3, _c1024_o3, TR2_LN_BWD_BLOCKS=3:
// a loss, twenty-sixth session, c1024 60.1 against 44.1 us with 248 bytes spilled, gpt2-medium +0.64 ms a step), and
// with dw finished by its own last blocks (residual_layernorm_backward_dwsum, _dwsum_c<C>, TR2_LN_FINAL_IN_KERNEL:
// slower, ninth session). gpu.RETIRED names the switches (each refused if still set).
#include "common.cuh"
#include "layernorm_backward.cuh"
#include "async_copy.cuh"

// One warp per row; blockDim.x = 32 * rows per block. b in b_kind (a product's half-type output under half
// roundings). drop = 0: no dropout (p = 0), the generator is not run.
extern "C" __global__ void residual_layernorm_forward(float* __restrict__ s, void* __restrict__ y,
                                                      float* __restrict__ mean, float* __restrict__ rstd,
                                                      const float* __restrict__ x, const void* __restrict__ b,
                                                      const float* __restrict__ w, int N, int C, float eps,
                                                      int b_kind, int y_kind, int drop, u64 seed, u64 offset,
                                                      const u64* __restrict__ offset_add, u32 threshold, float scale) {
    grid_dependency_entry();
    const int lane = threadIdx.x & 31;
    const i64 row = (i64)blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
    if (row >= N) return;
    const u64 off = site_offset(offset, offset_add);
    const i64 r0 = row * C;
    float sum = 0.0f;
    for (int c = lane; c < C; c += 32) {
        const i64 e = r0 + c;
        float bv = load_kind(b, e, b_kind);
        if (drop) bv = rng_keep(seed, off, (u64)e, threshold) ? __fmul_rn(bv, scale) : 0.0f;
        const float v = x[e] + bv;
        s[e] = v;
        sum += v;
    }
    // Each lane reads back only the elements it wrote.
    const float m = warp_sum(sum) / (float)C;
    float var = 0.0f;
    for (int c = lane; c < C; c += 32) {
        const float d = s[r0 + c] - m;
        var += d * d;
    }
    var = warp_sum(var) / (float)C;
    const float r = 1.0f / sqrtf(var + eps);
    for (int c = lane; c < C; c += 32) store_kind(y, r0 + c, ((s[r0 + c] - m) * r) * w[c], y_kind);
    if (lane == 0) {
        mean[row] = m;
        rstd[row] = r;
    }
}

// The same for C = 32 * CPL (the models' 384, 768, 1024), each row held in registers: residual_layernorm_forward_c<C>.
// Why: the body above writes s and reads it back twice (the variance, then y); here a lane loads its columns
// once (every load issued before the first use) and writes s and y once. Bits: lane L holds columns L + 32i,
// i < CPL, the body's columns in the body's order, and every operation is the body's, so the results are the
// body's bit for bit (the GPU tests ask the fused kernel for the unfused kernels' bits; a first form with four
// adjacent columns a lane summed in another order and failed them: call 7 of results/h200-perf-20261201c).
// The accesses stay coalesced (a warp's load is 32 consecutive elements).
template <int CPL>
__device__ __forceinline__ void residual_layernorm_forward_row_registers(
        float* __restrict__ s, void* __restrict__ y, float* __restrict__ mean, float* __restrict__ rstd,
        const float* __restrict__ x, const void* __restrict__ b, const float* __restrict__ w, int N, float eps,
        int b_kind, int y_kind, int drop, u64 seed, u64 offset, const u64* __restrict__ offset_add, u32 threshold,
        float scale) {
    constexpr int C = 32 * CPL;
    const int lane = threadIdx.x & 31;
    const i64 row = (i64)blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
    if (row >= N) return;
    const i64 r0 = row * C;
    float v[CPL], bv[CPL];
#pragma unroll
    for (int i = 0; i < CPL; i++) {
        const i64 e = r0 + lane + 32 * i;
        v[i] = x[e];
        bv[i] = load_kind(b, e, b_kind);
    }
    const u64 off = drop ? site_offset(offset, offset_add) : 0;
    float sum = 0.0f;
#pragma unroll
    for (int i = 0; i < CPL; i++) {
        const i64 e = r0 + lane + 32 * i;
        if (drop) bv[i] = rng_keep(seed, off, (u64)e, threshold) ? __fmul_rn(bv[i], scale) : 0.0f;
        v[i] = v[i] + bv[i];
        s[e] = v[i];
        sum += v[i];
    }
    const float m = warp_sum(sum) / (float)C;
    float var = 0.0f;
#pragma unroll
    for (int i = 0; i < CPL; i++) {
        const float d = v[i] - m;
        var += d * d;
    }
    var = warp_sum(var) / (float)C;
    const float r = 1.0f / sqrtf(var + eps);
#pragma unroll
    for (int i = 0; i < CPL; i++) {
        const int c = lane + 32 * i;
        store_kind(y, r0 + c, ((v[i] - m) * r) * w[c], y_kind);
    }
    if (lane == 0) {
        mean[row] = m;
        rstd[row] = r;
    }
}

#define RESIDUAL_LAYERNORM_FORWARD_ROWS(C_)                                                                      \
    extern "C" __global__ void residual_layernorm_forward_c##C_(                                                \
        float* __restrict__ s, void* __restrict__ y, float* __restrict__ mean, float* __restrict__ rstd,         \
        const float* __restrict__ x, const void* __restrict__ b, const float* __restrict__ w, int N, int C,      \
        float eps, int b_kind, int y_kind, int drop, u64 seed, u64 offset, const u64* __restrict__ offset_add,   \
        u32 threshold, float scale) {                                                                          \
        grid_dependency_entry();                                                                               \
        residual_layernorm_forward_row_registers<C_ / 32>(s, y, mean, rstd, x, b, w, N, eps, b_kind, y_kind,     \
                                                          drop, seed, offset, offset_add, threshold, scale);    \
    }
RESIDUAL_LAYERNORM_FORWARD_ROWS(384)
RESIDUAL_LAYERNORM_FORWARD_ROWS(768)
RESIDUAL_LAYERNORM_FORWARD_ROWS(1024)

// One warp per row; blockDim.x = 32 * rows a block; dynamic shared memory rows * C floats. dy in dy_kind;
// dskip and db nullable; dw_part [gridDim.x, C], summed by residual_layernorm_dw_final.
extern "C" __global__ void residual_layernorm_backward(float* __restrict__ ds, void* __restrict__ db,
                                                       float* __restrict__ dw_part, const void* __restrict__ dy,
                                                       const float* __restrict__ dskip, const float* __restrict__ s,
                                                       const float* __restrict__ w, const float* __restrict__ mean,
                                                       const float* __restrict__ rstd, int N, int C, int dy_kind,
                                                       int db_kind, int drop, u64 seed, u64 offset,
                                                       const u64* __restrict__ offset_add, u32 threshold,
                                                       float scale) {
    grid_dependency_entry();
    layernorm_backward_body(ds, db, dw_part, dy, dskip, s, w, mean, rstd, N, C, dy_kind, db_kind, drop, seed,
                            offset, offset_add, threshold, scale);
}

// The same for C = 32 * CPL, each row held in registers (layernorm_backward.cuh): residual_layernorm_backward_c<C>.
#define RESIDUAL_LAYERNORM_BACKWARD_ROWS(C_)                                                                     \
    extern "C" __global__ void residual_layernorm_backward_c##C_(                                               \
        float* __restrict__ ds, void* __restrict__ db, float* __restrict__ dw_part, const void* __restrict__ dy, \
        const float* __restrict__ dskip, const float* __restrict__ s, const float* __restrict__ w,               \
        const float* __restrict__ mean, const float* __restrict__ rstd, int N, int C, int dy_kind, int db_kind,  \
        int drop, u64 seed, u64 offset, const u64* __restrict__ offset_add, u32 threshold, float scale) {        \
        grid_dependency_entry();                                                                                 \
        layernorm_backward_row_registers<C_ / 32>(ds, db, dw_part, dy, dskip, s, w, mean, rstd, N, dy_kind,      \
                                                  db_kind, drop, seed, offset, offset_add, threshold, scale);    \
    }
RESIDUAL_LAYERNORM_BACKWARD_ROWS(384)
RESIDUAL_LAYERNORM_BACKWARD_ROWS(768)
RESIDUAL_LAYERNORM_BACKWARD_ROWS(1024)

// ---- the register-row backward fed by the copy engine (residual_layernorm_backward_c<C>_bulk, TR2_LN_BWD_BULK=1) ----
// Why: Nsight Compute (call 8 of results/h200-perf-20261204) has residual_layernorm_backward_c768 moving 2.56 TB/s,
// 53% of the H200's DRAM peak, its warps waiting on the row's loads two thirds of their cycles: two blocks of eight
// rows an SM (the registers' limit), each block loading, reducing its dw rows behind a barrier and storing before the
// next can start, leave too few bytes in flight; a third block (the _o3 kernels, since removed) spilled at 1024 and
// gained nothing at 768 (results/h200-perf-20261204b). Here the loads leave the warps: the same groups of eight rows (group g = rows
// 8g .. 8g + 7, as blocks of the plain kernel), one block an SM taking groups g = blockIdx.x + i gridDim.x, and its
// thread 0 handing each group's s, dskip and dy (three contiguous runs of 8 C elements) to the copy engine
// (cp.async.bulk) stages ahead, into a ring of `stages` buffers in shared memory, each with an mbarrier that counts
// its bytes. The warps read their row from there and run layernorm_backward_row (the plain kernel's operations in
// its order), write dw rows and the group's partial dw_part[g] as the plain kernel's block g does: the same bits.
// Dynamic shared memory: stages x (8 C x 4 bytes of s, the same of dskip when given, 8 C x dy's element size, the
// group's 8 means and 8 rstds), then dw_rows (8 C floats), then the stages' mbarriers; w in static shared memory (C
// floats); gpu/layernorm.py sizes the ring (at most LN_BULK_MAX_STAGES).
// blockDim.x = 256 (eight warps, one a row of the group). Blocks an SM: one, two at 384 columns (LN_BULK_MIN_BLOCKS:
// one block of eight warps took 40.1 us against the plain kernel's 30.3 there, call 5 of results/h200-perf-20261204c,
// too few warps to hide a group's barriers and dw partial over rows of 1.5 KB; gpu/layernorm.py's BULK_BLOCKS sizes the
// ring to the share of shared memory).
#define LN_BULK_MAX_STAGES 4
#define LN_BULK_MIN_BLOCKS(C) ((C) == 384 ? 2 : 1)
template <int CPL>
__device__ __forceinline__ void residual_layernorm_backward_bulk_body(
        float* __restrict__ ds, void* __restrict__ db, float* __restrict__ dw_part, const void* __restrict__ dy,
        const float* __restrict__ dskip, const float* __restrict__ s, const float* __restrict__ w,
        const float* __restrict__ mean, const float* __restrict__ rstd, int N, int dy_kind, int db_kind, int drop,
        u64 seed, u64 offset, const u64* __restrict__ offset_add, u32 threshold, float scale, int stages) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    constexpr int C = 32 * CPL, ROWS = 8;
    constexpr bool W_SHARED = CPL != 32;
    extern __shared__ __align__(128) unsigned char ring[];
    const int dy_size = dy_kind == KIND_F32 ? 4 : 2;
    const u32 s_bytes = ROWS * C * 4, skip_bytes = dskip != nullptr ? s_bytes : 0, dy_bytes = ROWS * C * dy_size;
    const u32 stats_at = s_bytes + skip_bytes + dy_bytes;   // the group's mean, then its rstd (full groups only)
    const u32 stage_bytes = stats_at + 2 * ROWS * 4;
    float* dw_rows = (float*)(ring + (i64)stages * stage_bytes);
    u64* full = (u64*)(dw_rows + ROWS * C);
    __shared__ __align__(16) float w_s[C];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const i64 groups = ((i64)N + ROWS - 1) / ROWS;
    // Group g's rows (the last group may have fewer than ROWS) into stage st, their bytes counted on full[st].
    auto issue = [&](i64 g, int st) {
        const i64 rows = min((i64)ROWS, (i64)N - g * ROWS), e0 = g * ROWS * C;
        unsigned char* buf = ring + (i64)st * stage_bytes;
        const u32 fs = (u32)(rows * C * 4), fd = (u32)(rows * C * dy_size);
        // a group of fewer rows has fewer than 16 bytes of each statistic to copy: its warps read them from global
        const u32 fm = rows == ROWS ? ROWS * 4 : 0;
        mbar_expect_tx(&full[st], fs + (dskip != nullptr ? fs : 0) + fd + 2 * fm);
        bulk_copy_1d(buf, s + e0, fs, &full[st]);
        if (dskip != nullptr) bulk_copy_1d(buf + s_bytes, dskip + e0, fs, &full[st]);
        bulk_copy_1d(buf + s_bytes + skip_bytes, (const unsigned char*)dy + e0 * dy_size, fd, &full[st]);
        if (fm) {
            bulk_copy_1d(buf + stats_at, mean + g * ROWS, fm, &full[st]);
            bulk_copy_1d(buf + stats_at + ROWS * 4, rstd + g * ROWS, fm, &full[st]);
        }
    };
    if (threadIdx.x == 0) {
        for (int st = 0; st < stages; st++) mbar_init(&full[st], 1);
        mbar_init_fence();
    }
    // w once a block at 384 and 768 columns: each row reads it twice, and from global memory those loads missed L1
    // (call 3 of results/h200-perf-20261204c: L1 hit rate 46%, the warps' largest stall a long scoreboard on L1TEX;
    // from shared memory c768 took 28.1 us against 31.9, call 5). A row's columns are loaded once there
    // (layernorm_backward_row's W_ONCE), as the plain kernel's compiler does at these widths, so that the
    // multiply-adds and so the bits are the plain kernel's. At 1024 columns the plain kernel's compiler loads w twice
    // and contracts otherwise, and no way of reading w from shared memory gave its bits (call 5: W_ONCE off, 36 of 36
    // cases at 1024 differed): there the rows read w from global memory as the plain kernel does (call 3: its bits).
    if (W_SHARED)
        for (int c = 4 * threadIdx.x; c < C; c += 4 * blockDim.x) *(float4*)(w_s + c) = *(const float4*)(w + c);
    __syncthreads();
    if (threadIdx.x == 0)
        for (int st = 0; st < stages; st++)
            if (blockIdx.x + (i64)st * gridDim.x < groups) issue(blockIdx.x + (i64)st * gridDim.x, st);
    float* dwr = dw_rows + warp * C;
    for (i64 i = 0;; i++) {
        const i64 g = blockIdx.x + i * gridDim.x;
        if (g >= groups) break;
        const int st = (int)(i % stages);
        mbar_wait(&full[st], (u32)((i / stages) & 1));
        const unsigned char* buf = ring + (i64)st * stage_bytes;
        const i64 row = g * ROWS + warp;
        if (row < N) {
            const i64 src = warp * C;
            const bool full_group = g * ROWS + ROWS <= N;
            const float* stats = (const float*)(buf + stats_at);
            layernorm_backward_row<CPL, W_SHARED>(ds, db, dwr, buf + s_bytes + skip_bytes, (const float*)buf,
                                                  dskip != nullptr ? (const float*)(buf + s_bytes) : nullptr, src,
                                                  row * C, W_SHARED ? w_s : w, full_group ? stats[warp] : mean[row],
                                                  full_group ? stats[ROWS + warp] : rstd[row], dy_kind, db_kind, drop,
                                                  seed, offset, offset_add, threshold, scale);
        } else {
            for (int c = lane; c < C; c += 32) dwr[c] = 0.0f;
        }
        fence_proxy_async_shared();   // this thread's reads of the stage before the copy engine refills it
        __syncthreads();
        if (threadIdx.x == 0 && g + (i64)stages * gridDim.x < groups) issue(g + (i64)stages * gridDim.x, st);
        block_dw_partial_at(dw_part, g, dw_rows, C);
        __syncthreads();   // dw_rows read before the next group's rows overwrite them
    }
#else
    __trap();   // launched only on sm_90 and newer (gpu/layernorm.py)
#endif
}
#define RESIDUAL_LAYERNORM_BACKWARD_ROWS_BULK(C_)                                                                     \
    extern "C" __global__ void __launch_bounds__(256, LN_BULK_MIN_BLOCKS(C_)) residual_layernorm_backward_c##C_##_bulk(\
        float* __restrict__ ds, void* __restrict__ db, float* __restrict__ dw_part, const void* __restrict__ dy, \
        const float* __restrict__ dskip, const float* __restrict__ s, const float* __restrict__ w,               \
        const float* __restrict__ mean, const float* __restrict__ rstd, int N, int C, int dy_kind, int db_kind,  \
        int drop, u64 seed, u64 offset, const u64* __restrict__ offset_add, u32 threshold, float scale,          \
        int stages) {                                                                                            \
        grid_dependency_entry();                                                                                 \
        residual_layernorm_backward_bulk_body<C_ / 32>(ds, db, dw_part, dy, dskip, s, w, mean, rstd, N, dy_kind, \
                                                       db_kind, drop, seed, offset, offset_add, threshold, scale,\
                                                       stages);                                                  \
    }
RESIDUAL_LAYERNORM_BACKWARD_ROWS_BULK(384)
RESIDUAL_LAYERNORM_BACKWARD_ROWS_BULK(768)
RESIDUAL_LAYERNORM_BACKWARD_ROWS_BULK(1024)

extern "C" __global__ void residual_layernorm_dw_final(float* __restrict__ dw, const float* __restrict__ part,
                                                       int G, int C) {
    grid_dependency_entry();
    layernorm_dw_final_body(dw, part, G, C);
}
