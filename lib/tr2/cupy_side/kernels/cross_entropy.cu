// cross_entropy.cu: the classifier's loss and the logits' gradient, one block per row (torch's F.cross_entropy with
// ignore_index = -1; reference tr2/cupy_side/ops/cross_entropy.py: forward, backward, forward_backward).
//   count = rows whose target is not -1                                   (cross_entropy_count, one block)
//   lse[n] = log sum_j exp(logits[n, j]), by an online max/sum in one read of the row: each thread keeps
//     (m, s) with s = sum over its elements of exp(x - m), rescaled by exp(m_old - m_new) when m grows; the
//     block merges the pairs in a fixed tree
//   losses[n] = lse[n] - logits[n, y[n]]   (0 where y[n] = -1)
//   loss = sum_n losses[n] / count, added in a fixed order                  (cross_entropy_mean; NaN when nothing
//     counts, as torch's mean of nothing)
// Training (cross_entropy_forward_backward), in the same kernel as the row's loss: a second read of the row writes
//   dlogits[n, j] = (exp(logits[n, j] - lse[n]) - [j == y[n]]) * dloss / max(count, 1)   (0 on ignored rows)
// over the logits' buffer where the types match (nothing reads the logits after this); no probabilities are
// stored, and dloss is read from device memory, so a CUDA graph of the step replays it with the scale of the day.
// Evaluation (cross_entropy_forward): the same row arithmetic without the gradient, the logits left as they are
// (a pass with no backward has no dloss and must not overwrite them).
// Why: the forward read each row twice (max, then sum) and the backward a third time, in separate launches;
// now training reads it once for the statistics and once more to write the gradient (mostly from L2).
// Other rows of whole 16-byte vectors that fit 8 vectors a thread take ce_row_vec (float32 rows, and half rows
// outside the shared-memory row's range; float32 rows as wide as GPT-2's 50304 keep the scalar row, as 16
// vectors a thread spilled): the row is read once, by 16-byte loads, into the block's registers; max, then the
// sum of exp(x - max), then the gradient are computed from the registers, so the gradient pass reads no memory.
// The scalar row (ce_row) read every element as 2 bytes with the type decided per element, and spent 1.77 ms a
// step of gpt2-small bf16 on 8192 x 50304 logits (results/h200-perf-20261130/call1-aca8248), ~4.7x the time to
// read and write them once at the copy rate.
// Which row a launch takes depends on the logits alone, so evaluation and training take the same one and their
// losses stay equal bit for bit.
//
// The shared-memory row (ce_row_smem; cross_entropy_forward_smem, cross_entropy_forward_backward_smem): half-type
// rows of whole vectors, 4096 to 53248 columns, GPT-2's 50304 among them; the wrapper picks it
// (gpu.cross_entropy_plan) from the logits' kind, V and alignment, for evaluation and training alike.
// Why: ce_row_vec held GPT-2's row in the registers of a 1024-thread block, one block an SM (64 registers a
// thread), and took 800 us a step of gpt2-small bf16 for 824 MB read and 824 MB written, about 2 TB/s, under
// half the H200's 4.8 TB/s (call 6 of results/h200-perf-20261201). With one block an SM, the SM asks memory for
// nothing while its block runs the two block reductions and the exponentials, and the next row's reads wait
// until the block has written its gradient. Here a block of 512 threads copies its row by cp.async into
// V * 2 bytes of dynamic shared memory (98 KB for 50304 columns) and computes the max, the sum of exp(x - max)
// and the gradient from there, writing dlogits by 16-byte stores; at most 64 registers a thread
// (__launch_bounds__(512, 2)) and under 114 KB of shared memory a block let two blocks share an SM (65536
// registers, 228 KB), so while one computes the other's row is on its way: about 1.65 GB a step at 3.5-4 TB/s,
// ~0.45 ms instead of 0.80 (expected, not yet measured). The row arithmetic keeps its fixed order: the max by
// packed half-type max (exact, so the same value as fmaxf), the sum in each thread over its vectors in order,
// then the block's fixed tree (block_max, block_sum); expf and logf as in the other rows.
//
// Removed on 2026-12-05 (docs/perf.md, "Thirtieth session", call 1; its source and tests: before the removal, at
// 3f23587): the shared-memory row double-buffered (cross_entropy_forward_backward_smem2, ce_rows_smem2: a persistent
// grid of one block an SM with the next row's copy in flight; TR2_CE_SMEM_DB), the one-row kernel's bits but x1.335
// its time in bf16 (633.5 against 474.4 us a launch, 8192 x 50304) and x1.333 in f16. gpu.RETIRED names the switch
// (refused if still set).
#include "common.cuh"

// One element x into a thread's (m, s).
__device__ __forceinline__ void ce_online_add(float& m, float& s, float x) {
    if (x > m) {
        s = s * expf(m - x) + 1.0f;   // the first element: s = 0 * exp(-inf) + 1 = 1
        m = x;
    } else {
        s += expf(x - m);
    }
}

// (m, s) merged with (m2, s2); an empty pair (s = 0, m = -inf) adds nothing. Symmetric in its two pairs (fmaxf
// and + commute), so both lanes of a butterfly hold the same bits.
__device__ __forceinline__ void ce_online_merge(float& m, float& s, float m2, float s2) {
    const float M = fmaxf(m, m2);
    const float a = (s == 0.0f) ? 0.0f : s * expf(m - M);
    const float b = (s2 == 0.0f) ? 0.0f : s2 * expf(m2 - M);
    m = M;
    s = a + b;
}

// The block's (m, s) in every thread: a butterfly in each warp, then one over the warps' pairs. Fixed order.
__device__ __forceinline__ void ce_block_online(float& m, float& s, float* sm, float* ss) {
    for (int o = 16; o > 0; o >>= 1)
        ce_online_merge(m, s, __shfl_xor_sync(0xffffffffu, m, o), __shfl_xor_sync(0xffffffffu, s, o));
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = blockDim.x >> 5;
    if (lane == 0) {
        sm[warp] = m;
        ss[warp] = s;
    }
    __syncthreads();
    m = (lane < nwarps) ? sm[lane] : NEG_INF;
    s = (lane < nwarps) ? ss[lane] : 0.0f;
    for (int o = 16; o > 0; o >>= 1)
        ce_online_merge(m, s, __shfl_xor_sync(0xffffffffu, m, o), __shfl_xor_sync(0xffffffffu, s, o));
}

// One row (blockIdx.x) with blockDim.x threads (a multiple of 32). GRAD: write dlogits too (may be `logits`).
template <bool GRAD>
__device__ __forceinline__ void ce_row(float* __restrict__ losses, void* dlogits, const void* logits,
                                       const i64* __restrict__ targets, const float* __restrict__ dloss,
                                       const float* __restrict__ count, int V, int logit_kind, int dlogit_kind) {
    __shared__ float sm[32], ss[32];
    const i64 row = blockIdx.x;
    const i64 r0 = row * V;
    const i64 t = targets[row];
    if (t < 0) {   // ignored row: the same t for the whole block, so the block leaves together
        if (threadIdx.x == 0) losses[row] = 0.0f;
        if (GRAD)
            for (int j = threadIdx.x; j < V; j += blockDim.x) store_kind(dlogits, r0 + j, 0.0f, dlogit_kind);
        return;
    }
    // The target's logit, read before the block's reduction (which synchronizes the block), so before any thread
    // overwrites the row.
    const float xt = (threadIdx.x == 0) ? load_kind(logits, r0 + t, logit_kind) : 0.0f;
    float m = NEG_INF, s = 0.0f;
    // Four loads in flight per thread before they are folded in (elements j0, j0 + blockDim.x, ...).
    for (int j0 = threadIdx.x; j0 < V; j0 += 4 * blockDim.x) {
        float x[4];
#pragma unroll
        for (int k = 0; k < 4; k++) {
            const int j = j0 + k * (int)blockDim.x;
            x[k] = (j < V) ? load_kind(logits, r0 + j, logit_kind) : 0.0f;
        }
#pragma unroll
        for (int k = 0; k < 4; k++)
            if (j0 + k * (int)blockDim.x < V) ce_online_add(m, s, x[k]);
    }
    ce_block_online(m, s, sm, ss);
    const float lse = logf(s) + m;
    if (threadIdx.x == 0) losses[row] = lse - xt;
    if (!GRAD) return;
    const float g = dloss[0] / fmaxf(count[0], 1.0f);
    // Each element is read, then written, by one thread: in place over the logits is safe.
    for (int j = threadIdx.x; j < V; j += blockDim.x) {
        const float p = expf(load_kind(logits, r0 + j, logit_kind) - lse);
        store_kind(dlogits, r0 + j, (p - (j == t ? 1.0f : 0.0f)) * g, dlogit_kind);
    }
}

// Element e of a 16-byte vector of kind K, widened.
template <int K> __device__ __forceinline__ float vec_elem(const uint4& v, int e) {
    const u32 w = (e >> 1) == 0 ? v.x : (e >> 1) == 1 ? v.y : (e >> 1) == 2 ? v.z : v.w;
    return load_from<K>((u16)((e & 1) ? (w >> 16) : (w & 0xffffu)));
}
template <> __device__ __forceinline__ float vec_elem<KIND_F32>(const uint4& v, int e) {
    return __uint_as_float(e == 0 ? v.x : e == 1 ? v.y : e == 2 ? v.z : v.w);
}

// The row from registers: LK the logits' kind, NV vectors a thread (a compile-time count, so x stays in
// registers), GRAD as ce_row. Needs 16-byte aligned rows of V / EPV whole vectors and V / EPV <= NV blockDim.x.
template <int LK, int NV, bool GRAD>
__device__ __forceinline__ void ce_row_vec(float* __restrict__ losses, void* dlogits, const void* logits,
                                           const i64* __restrict__ targets, const float* __restrict__ dloss,
                                           const float* __restrict__ count, int V, int dlogit_kind) {
    typedef typename Elem<LK>::T E;
    constexpr int EPV = 16 / (int)sizeof(E);
    __shared__ float red[32];
    const i64 row = blockIdx.x;
    const i64 r0 = row * V;
    const int nvec = V / EPV;
    // dlogits as 16-byte vectors of the logits' kind (the in-place case), else element by element
    const bool vec_out = GRAD && dlogit_kind == LK && ((size_t)dlogits % 16 == 0);
    const i64 t = targets[row];
    if (t < 0) {
        if (threadIdx.x == 0) losses[row] = 0.0f;
        if (GRAD) {
            if (vec_out)
                for (int v = threadIdx.x; v < nvec; v += blockDim.x) ((uint4*)((E*)dlogits + r0))[v] = make_uint4(0, 0, 0, 0);
            else
                for (int j = threadIdx.x; j < V; j += blockDim.x) store_kind(dlogits, r0 + j, 0.0f, dlogit_kind);
        }
        return;
    }
    const float xt = (threadIdx.x == 0) ? load_kind(logits, r0 + t, LK) : 0.0f;
    const uint4* src = (const uint4*)((const E*)logits + r0);
    uint4 x[NV];
#pragma unroll
    for (int k = 0; k < NV; k++) {
        const int v = threadIdx.x + k * (int)blockDim.x;
        x[k] = (v < nvec) ? src[v] : make_uint4(0, 0, 0, 0);
    }
    float m = NEG_INF;
#pragma unroll
    for (int k = 0; k < NV; k++)
        if (threadIdx.x + k * (int)blockDim.x < nvec)
#pragma unroll
            for (int e = 0; e < EPV; e++) m = fmaxf(m, vec_elem<LK>(x[k], e));
    m = block_max(m, red);
    float s = 0.0f;
#pragma unroll
    for (int k = 0; k < NV; k++)
        if (threadIdx.x + k * (int)blockDim.x < nvec)
#pragma unroll
            for (int e = 0; e < EPV; e++) s += expf(vec_elem<LK>(x[k], e) - m);
    s = block_sum(s, red);
    const float lse = logf(s) + m;
    if (threadIdx.x == 0) losses[row] = lse - xt;
    if (!GRAD) return;
    const float g = dloss[0] / fmaxf(count[0], 1.0f);
#pragma unroll
    for (int k = 0; k < NV; k++) {
        const int v = threadIdx.x + k * (int)blockDim.x;
        if (v >= nvec) continue;
        float d[EPV];
#pragma unroll
        for (int e = 0; e < EPV; e++) {
            const int j = v * EPV + e;
            d[e] = (expf(vec_elem<LK>(x[k], e) - lse) - (j == t ? 1.0f : 0.0f)) * g;
        }
        if (vec_out) {
            u32 w[4];
#pragma unroll
            for (int q = 0; q < 4; q++) {
                if (LK == KIND_F32) w[q] = __float_as_uint(d[q]);
                else w[q] = (u32)store_as<LK>(d[(2 * q) % EPV]) | ((u32)store_as<LK>(d[(2 * q + 1) % EPV]) << 16);
            }
            ((uint4*)((E*)dlogits + r0))[v] = make_uint4(w[0], w[1], w[2], w[3]);
        } else {
#pragma unroll
            for (int e = 0; e < EPV; e++) store_kind(dlogits, r0 + (i64)v * EPV + e, d[e], dlogit_kind);
        }
    }
}

// The vectorized row where the logits allow it (NV 4 or 8, the lesser that holds the row), else ce_row.
template <int LK, bool GRAD>
__device__ __forceinline__ bool ce_try_vec(float* losses, void* dlogits, const void* logits, const i64* targets,
                                           const float* dloss, const float* count, int V, int dlogit_kind) {
    constexpr int EPV = 16 / (int)sizeof(typename Elem<LK>::T);
    const int per_thread = (V / EPV + (int)blockDim.x - 1) / (int)blockDim.x;
    if (per_thread <= 4) ce_row_vec<LK, 4, GRAD>(losses, dlogits, logits, targets, dloss, count, V, dlogit_kind);
    else if (per_thread <= 8) ce_row_vec<LK, 8, GRAD>(losses, dlogits, logits, targets, dloss, count, V, dlogit_kind);
    else return false;
    return true;
}

template <bool GRAD>
__device__ __forceinline__ void ce_dispatch(float* losses, void* dlogits, const void* logits, const i64* targets,
                                            const float* dloss, const float* count, int V, int logit_kind,
                                            int dlogit_kind) {
    const int esize = logit_kind == KIND_F32 ? 4 : 2;
    if ((size_t)logits % 16 == 0 && ((i64)V * esize) % 16 == 0) {
        bool done;
        if (logit_kind == KIND_F32) done = ce_try_vec<KIND_F32, GRAD>(losses, dlogits, logits, targets, dloss, count, V, dlogit_kind);
        else if (logit_kind == KIND_BF16) done = ce_try_vec<KIND_BF16, GRAD>(losses, dlogits, logits, targets, dloss, count, V, dlogit_kind);
        else done = ce_try_vec<KIND_F16, GRAD>(losses, dlogits, logits, targets, dloss, count, V, dlogit_kind);
        if (done) return;
    }
    ce_row<GRAD>(losses, dlogits, logits, targets, dloss, count, V, logit_kind, dlogit_kind);
}

// ---- the shared-memory row: half-type rows of 4096 to 53248 columns (CE_SMEM_MIN_V..CE_SMEM_MAX_V) ----
// The wrapper takes it where the logits are bfloat16 or float16, 16-byte aligned, and V a multiple of 8 in
// that range (gpu.cross_entropy_plan), for evaluation and training alike. CE_SMEM_MIN_V: every thread owns at
// least one vector. CE_SMEM_MAX_V: 2 x (53248 x 2 bytes + 128 static + 1 KB the hardware keeps a block)
// = 210 KB, so two blocks still share an SM's 228 KB.
#define CE_SMEM_THREADS 512
#define CE_SMEM_MIN_V 4096
#define CE_SMEM_MAX_V 53248

// 16 bytes global -> shared without passing through registers, so a thread has its whole share of the row in
// flight at once; .cg: through L2 only (the row is read from memory once, and L1 is mostly given to shared).
__device__ __forceinline__ void ce_cp_async16(void* dst, const void* src) {
    const u32 d = (u32)__cvta_generic_to_shared(dst);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(d), "l"(src) : "memory");
}

// Lane-wise max of two pairs of half-type values: exact, and a NaN loses to a number as in fmaxf, so the row's
// max is the same value fmaxf of the widened elements gives; one instruction for two elements.
template <int K> __device__ __forceinline__ u32 ce_max2(u32 a, u32 b);
template <> __device__ __forceinline__ u32 ce_max2<KIND_BF16>(u32 a, u32 b) {
    u32 d;
    asm("max.bf16x2 %0, %1, %2;" : "=r"(d) : "r"(a), "r"(b));
    return d;
}
template <> __device__ __forceinline__ u32 ce_max2<KIND_F16>(u32 a, u32 b) {
    u32 d;
    asm("max.f16x2 %0, %1, %2;" : "=r"(d) : "r"(a), "r"(b));
    return d;
}
// -inf in both halves: the max of no elements.
template <int K> __device__ __forceinline__ u32 ce_neg_inf2() { return K == KIND_BF16 ? 0xff80ff80u : 0xfc00fc00u; }

// One vector's dlogits. ONEHOT only for the vector that holds the target (element te of it): the other
// vectors skip the per-element comparison, and their (p - 0) * g is p * g bit for bit anyway.
template <int LK, bool ONEHOT>
__device__ __forceinline__ void ce_grad_vec(float d[8], const uint4& q, float lse, float g, int te) {
#pragma unroll
    for (int e = 0; e < 8; e++)
        d[e] = (expf(vec_elem<LK>(q, e) - lse) - ((ONEHOT && e == te) ? 1.0f : 0.0f)) * g;
}

// The gradient pass's probabilities by exp2 on the special-function unit (EX2 in ce_row_smem;
// cross_entropy_forward_backward_smem_ex2, training's default since the thirtieth session; TR2_CE_GRAD_EX2=0 the
// expf form):
//   p = ex2.approx.ftz(fma(x, log2(e), -lse2)),  lse2 = lse * log2(e) rounded to float32 once a row
// Why: the one-row kernel is near issue-bound (82.7% of issue slots busy at 71.8% of the DRAM peak, Nsight Compute,
// results/h200-perf-20261204f/call1-40a061b): two exact expf an element, ~9 instructions each. This pass takes three
// (FFMA, MUFU.EX2, and the product with g) for the same work; the sum pass, and so the loss and lse, keep expf, so
// the loss is the default kernel's bit for bit (evaluation's too). What it rounds differently: lse2's rounding (half
// an ulp of |lse| * 1.44, ~1e-6 of the exponent for |lse| < 16), the fma's (half an ulp of the argument) and
// MUFU.EX2's ~2 ulp: p within ~3e-6 relative of expf(x - lse) (ops/cross_entropy.py probabilities_exp2 bounds the
// first two on the CPU), so a half-type dlogit moves by one unit of its last place where the product lies within
// that of a rounding boundary, a small fraction of the elements; ftz: p under 2^-126 is 0 (p * g is then under
// the half type's normal range). PyTorch's compiled kernels (Triton's exp) compute exp the same way.
#define CE_LOG2E 1.4426950408889634f
__device__ __forceinline__ float ce_exp2_approx(float x) {
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
    return y;
}
template <int LK, bool ONEHOT>
__device__ __forceinline__ void ce_grad_vec_ex2(float d[8], const uint4& q, float lse2, float g, int te) {
#pragma unroll
    for (int e = 0; e < 8; e++)
        d[e] = (ce_exp2_approx(fmaf(vec_elem<LK>(q, e), CE_LOG2E, -lse2)) - ((ONEHOT && e == te) ? 1.0f : 0.0f)) * g;
}

// The row (blockIdx.x) staged in dynamic shared memory (V * 2 bytes), LK a half kind, GRAD as ce_row. Needs a
// 16-byte aligned row of V / 8 whole vectors. Each thread copies, and later reads, the vectors threadIdx.x +
// k blockDim.x, so only the target's logit crosses threads (read after a block barrier).
template <int LK, bool GRAD, bool EX2 = false>
__device__ __forceinline__ void ce_row_smem(float* __restrict__ losses, void* dlogits, const void* logits,
                                            const i64* __restrict__ targets, const float* __restrict__ dloss,
                                            const float* __restrict__ count, int V, int dlogit_kind, float* red) {
    extern __shared__ uint4 ce_row_buf[];
    const i64 row = blockIdx.x;
    const i64 r0 = row * V;
    const int nvec = V / 8;
    const bool vec_out = GRAD && dlogit_kind == LK && ((size_t)dlogits % 16 == 0);
    uint4* const out = GRAD ? (uint4*)((u16*)dlogits + r0) : nullptr;   // the row's dlogits as vectors (vec_out)
    const i64 t = targets[row];
    if (t < 0) {
        if (threadIdx.x == 0) losses[row] = 0.0f;
        if (GRAD) {
            if (vec_out)
                for (int v = threadIdx.x; v < nvec; v += blockDim.x) out[v] = make_uint4(0, 0, 0, 0);
            else
                for (int j = threadIdx.x; j < V; j += blockDim.x) store_kind(dlogits, r0 + j, 0.0f, dlogit_kind);
        }
        return;
    }
    // The whole row is copied before anything is written: in place over the logits is safe, and the target's
    // logit is read from the copy.
    const uint4* src = (const uint4*)((const u16*)logits + r0);
    for (int v = threadIdx.x; v < nvec; v += blockDim.x) ce_cp_async16(&ce_row_buf[v], src + v);
    asm volatile("cp.async.wait_all;" ::: "memory");
    u32 m2 = ce_neg_inf2<LK>();
    for (int v = threadIdx.x; v < nvec; v += blockDim.x) {
        const uint4 q = ce_row_buf[v];
        m2 = ce_max2<LK>(ce_max2<LK>(m2, q.x), ce_max2<LK>(q.y, ce_max2<LK>(q.z, q.w)));
    }
    float m = fmaxf(load_from<LK>((u16)(m2 & 0xffffu)), load_from<LK>((u16)(m2 >> 16)));
    m = block_max(m, red);
    float s = 0.0f;
    for (int v = threadIdx.x; v < nvec; v += blockDim.x) {
        const uint4 q = ce_row_buf[v];
#pragma unroll
        for (int e = 0; e < 8; e++) s += expf(vec_elem<LK>(q, e) - m);
    }
    s = block_sum(s, red);   // its barriers also make every thread's copy visible to thread 0
    const float lse = logf(s) + m;
    if (threadIdx.x == 0) losses[row] = lse - load_from<LK>(((const u16*)ce_row_buf)[t]);
    if (!GRAD) return;
    const float g = dloss[0] / fmaxf(count[0], 1.0f);
    const int tv = (int)(t >> 3), te = (int)(t & 7);
    const float lse2 = EX2 ? lse * CE_LOG2E : 0.0f;
    for (int v = threadIdx.x; v < nvec; v += blockDim.x) {
        const uint4 q = ce_row_buf[v];
        float d[8];
        if constexpr (EX2) {
            if (v == tv) ce_grad_vec_ex2<LK, true>(d, q, lse2, g, te);
            else ce_grad_vec_ex2<LK, false>(d, q, lse2, g, te);
        } else {
            if (v == tv) ce_grad_vec<LK, true>(d, q, lse, g, te);
            else ce_grad_vec<LK, false>(d, q, lse, g, te);
        }
        if (vec_out) {
            out[v] = make_uint4(pack2<LK>(d[0], d[1]), pack2<LK>(d[2], d[3]), pack2<LK>(d[4], d[5]),
                                pack2<LK>(d[6], d[7]));
        } else {
#pragma unroll
            for (int e = 0; e < 8; e++) store_kind(dlogits, r0 + (i64)v * 8 + e, d[e], dlogit_kind);
        }
    }
}

template <bool GRAD, bool EX2 = false>
__device__ __forceinline__ void ce_dispatch_smem(float* losses, void* dlogits, const void* logits,
                                                 const i64* targets, const float* dloss, const float* count, int V,
                                                 int logit_kind, int dlogit_kind) {
    __shared__ float red[32];   // one for both kinds: the 128 static bytes counted in CE_SMEM_MAX_V
    if (logit_kind == KIND_BF16)
        ce_row_smem<KIND_BF16, GRAD, EX2>(losses, dlogits, logits, targets, dloss, count, V, dlogit_kind, red);
    else
        ce_row_smem<KIND_F16, GRAD, EX2>(losses, dlogits, logits, targets, dloss, count, V, dlogit_kind, red);
}

// ---- the warp row: rows of at most CE_WARP_MAX_V columns (the char model's 65), a warp a row ----
// The row arithmetic of ce_row, with the warp's butterfly as the whole merge: lane L folds the elements L, L + 32,
// ... in order (four loads in flight), then the 32 pairs merge in a fixed butterfly. Rows lie ld elements apart
// (ld >= V; ldd those of dlogits): the logits of a product whose weight is padded to a multiple of 8 rows
// (gpu/matmul.py's forward) are the first V columns of an [N, ld] buffer, read and written in place; the columns
// past V are not touched.
// Why: ce_row gave each row of 65 columns a block of 96 threads, 16384 blocks for 2 MB read and 2 MB written: 44.3 us
// a step of nanogpt bf16 (call 2 of results/h200-perf-20261202), the time going to block launches and the block's
// two barriers, not to memory.
#define CE_WARP_MAX_V 1024
#define CE_WARP_ROWS 8

template <bool GRAD>
__device__ __forceinline__ void ce_row_warp(float* __restrict__ losses, void* dlogits, const void* logits,
                                            const i64* __restrict__ targets, const float* __restrict__ dloss,
                                            const float* __restrict__ count, int N, int V, int ld, int ldd,
                                            int logit_kind, int dlogit_kind) {
    const int lane = threadIdx.x & 31;
    const i64 row = (i64)blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
    if (row >= N) return;   // the whole warp: one row a warp
    const i64 r0 = row * ld, d0 = row * ldd;
    const i64 t = targets[row];
    if (t < 0) {
        if (lane == 0) losses[row] = 0.0f;
        if (GRAD)
            for (int j = lane; j < V; j += 32) store_kind(dlogits, d0 + j, 0.0f, dlogit_kind);
        return;
    }
    // read before the butterfly (every lane's shuffles wait for lane 0), so before any lane overwrites the row
    const float xt = (lane == 0) ? load_kind(logits, r0 + t, logit_kind) : 0.0f;
    float m = NEG_INF, s = 0.0f;
    for (int j0 = lane; j0 < V; j0 += 4 * 32) {
        float x[4];
#pragma unroll
        for (int k = 0; k < 4; k++) {
            const int j = j0 + 32 * k;
            x[k] = (j < V) ? load_kind(logits, r0 + j, logit_kind) : 0.0f;
        }
#pragma unroll
        for (int k = 0; k < 4; k++)
            if (j0 + 32 * k < V) ce_online_add(m, s, x[k]);
    }
    for (int o = 16; o > 0; o >>= 1)
        ce_online_merge(m, s, __shfl_xor_sync(0xffffffffu, m, o), __shfl_xor_sync(0xffffffffu, s, o));
    const float lse = logf(s) + m;
    if (lane == 0) losses[row] = lse - xt;
    if (!GRAD) return;
    const float g = dloss[0] / fmaxf(count[0], 1.0f);
    for (int j = lane; j < V; j += 32) {
        const float p = expf(load_kind(logits, r0 + j, logit_kind) - lse);
        store_kind(dlogits, d0 + j, (p - (j == t ? 1.0f : 0.0f)) * g, dlogit_kind);
    }
}

// count[0] = rows whose target is not -1; one block, fixed order (an exact integer in float32 up to 2^24 rows).
extern "C" __global__ void cross_entropy_count(float* __restrict__ count, const i64* __restrict__ targets, int N) {
    grid_dependency_entry();
    __shared__ float shared[32];
    float c = 0.0f;
    for (int n = threadIdx.x; n < N; n += blockDim.x) c += (targets[n] < 0) ? 0.0f : 1.0f;
    c = block_sum(c, shared);
    if (threadIdx.x == 0) count[0] = c;
}

// Evaluation: losses[n] only; grid = N blocks. logits in logit_kind (the half type where the product rounds its
// output, half roundings).
extern "C" __global__ void __launch_bounds__(1024) cross_entropy_forward(float* __restrict__ losses, const void* __restrict__ logits,
                                                 const i64* __restrict__ targets, int V, int logit_kind) {
    grid_dependency_entry();
    ce_dispatch<false>(losses, nullptr, logits, targets, nullptr, nullptr, V, logit_kind, KIND_F32);
}

// Training: losses[n] and dlogits in dlogit_kind (the half builds write the half type the lm_head product reads);
// dlogits may be the logits' own buffer (same kind). Needs count (cross_entropy_count) before it.
extern "C" __global__ void __launch_bounds__(1024) cross_entropy_forward_backward(float* __restrict__ losses, void* dlogits, const void* logits,
                                                          const i64* __restrict__ targets,
                                                          const float* __restrict__ dloss,
                                                          const float* __restrict__ count, int V, int logit_kind,
                                                          int dlogit_kind) {
    grid_dependency_entry();
    ce_dispatch<true>(losses, dlogits, logits, targets, dloss, count, V, logit_kind, dlogit_kind);
}

// The same two on the shared-memory row: CE_SMEM_THREADS threads and V * 2 bytes of dynamic shared memory a
// block, at most 64 registers a thread so that two blocks share an SM.
extern "C" __global__ void __launch_bounds__(CE_SMEM_THREADS, 2)
cross_entropy_forward_smem(float* __restrict__ losses, const void* __restrict__ logits,
                           const i64* __restrict__ targets, int V, int logit_kind) {
    grid_dependency_entry();
    ce_dispatch_smem<false>(losses, nullptr, logits, targets, nullptr, nullptr, V, logit_kind, KIND_F32);
}

extern "C" __global__ void __launch_bounds__(CE_SMEM_THREADS, 2)
cross_entropy_forward_backward_smem(float* __restrict__ losses, void* dlogits, const void* logits,
                                    const i64* __restrict__ targets, const float* __restrict__ dloss,
                                    const float* __restrict__ count, int V, int logit_kind, int dlogit_kind) {
    grid_dependency_entry();
    ce_dispatch_smem<true>(losses, dlogits, logits, targets, dloss, count, V, logit_kind, dlogit_kind);
}

// Training's shared-memory row with the gradient pass's probabilities by exp2 (EX2 above; TR2_CE_GRAD_EX2): the same
// launch as cross_entropy_forward_backward_smem, the same loss bits.
extern "C" __global__ void __launch_bounds__(CE_SMEM_THREADS, 2)
cross_entropy_forward_backward_smem_ex2(float* __restrict__ losses, void* dlogits, const void* logits,
                                        const i64* __restrict__ targets, const float* __restrict__ dloss,
                                        const float* __restrict__ count, int V, int logit_kind, int dlogit_kind) {
    grid_dependency_entry();
    ce_dispatch_smem<true, true>(losses, dlogits, logits, targets, dloss, count, V, logit_kind, dlogit_kind);
}

// The same two on the warp row: CE_WARP_ROWS rows a block of 32 * CE_WARP_ROWS threads, grid ceil(N / CE_WARP_ROWS);
// the logits' rows ld elements apart, dlogits' ldd.
extern "C" __global__ void __launch_bounds__(32 * CE_WARP_ROWS)
cross_entropy_forward_warp(float* __restrict__ losses, const void* __restrict__ logits, const i64* __restrict__ targets,
                           int N, int V, int ld, int logit_kind) {
    grid_dependency_entry();
    ce_row_warp<false>(losses, nullptr, logits, targets, nullptr, nullptr, N, V, ld, V, logit_kind, KIND_F32);
}

extern "C" __global__ void __launch_bounds__(32 * CE_WARP_ROWS)
cross_entropy_forward_backward_warp(float* __restrict__ losses, void* dlogits, const void* logits,
                                    const i64* __restrict__ targets, const float* __restrict__ dloss,
                                    const float* __restrict__ count, int N, int V, int ld, int ldd, int logit_kind,
                                    int dlogit_kind) {
    grid_dependency_entry();
    ce_row_warp<true>(losses, dlogits, logits, targets, dloss, count, N, V, ld, ldd, logit_kind, dlogit_kind);
}

// loss[0] = sum(losses) / count[0]; one block, fixed order.
extern "C" __global__ void cross_entropy_mean(float* __restrict__ loss, const float* __restrict__ losses,
                                              const float* __restrict__ count, int N) {
    grid_dependency_entry();
    __shared__ float shared[32];
    float s = 0.0f;
    for (int n = threadIdx.x; n < N; n += blockDim.x) s += losses[n];
    s = block_sum(s, shared);
    if (threadIdx.x == 0) loss[0] = s / count[0];
}
