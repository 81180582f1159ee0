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
// Rows of whole 16-byte vectors that fit 8 vectors a thread take ce_row_vec (GPT-2's 50304 columns in the half
// types with 1024 threads; float32 rows that wide keep the scalar row, as 16 vectors a thread spilled): the row is
// read once, by 16-byte loads, into the block's registers; max, then the sum of exp(x - max), then the gradient
// are computed from the registers, so the gradient pass reads no memory. The scalar row (ce_row) read
// every element as 2 bytes with the type decided per element, and spent 1.77 ms a step of gpt2-small bf16 on
// 8192 x 50304 logits (results/h200-perf-20261130/call1-aca8248), ~4.7x the time to read and
// write them once at the copy rate. Which row a launch takes depends on the logits alone, so evaluation and
// training take the same one and their losses stay equal bit for bit.
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

// count[0] = rows whose target is not -1; one block, fixed order (an exact integer in float32 up to 2^24 rows).
extern "C" __global__ void cross_entropy_count(float* __restrict__ count, const i64* __restrict__ targets, int N) {
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
    ce_dispatch<false>(losses, nullptr, logits, targets, nullptr, nullptr, V, logit_kind, KIND_F32);
}

// Training: losses[n] and dlogits in dlogit_kind (the half builds write the half type the lm_head product reads);
// dlogits may be the logits' own buffer (same kind). Needs count (cross_entropy_count) before it.
extern "C" __global__ void __launch_bounds__(1024) cross_entropy_forward_backward(float* __restrict__ losses, void* dlogits, const void* logits,
                                                          const i64* __restrict__ targets,
                                                          const float* __restrict__ dloss,
                                                          const float* __restrict__ count, int V, int logit_kind,
                                                          int dlogit_kind) {
    ce_dispatch<true>(losses, dlogits, logits, targets, dloss, count, V, logit_kind, dlogit_kind);
}

// loss[0] = sum(losses) / count[0]; one block, fixed order.
extern "C" __global__ void cross_entropy_mean(float* __restrict__ loss, const float* __restrict__ losses,
                                              const float* __restrict__ count, int N) {
    __shared__ float shared[32];
    float s = 0.0f;
    for (int n = threadIdx.x; n < N; n += blockDim.x) s += losses[n];
    s = block_sum(s, shared);
    if (threadIdx.x == 0) loss[0] = s / count[0];
}
