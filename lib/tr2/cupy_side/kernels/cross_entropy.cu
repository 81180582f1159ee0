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
extern "C" __global__ void cross_entropy_forward(float* __restrict__ losses, const void* __restrict__ logits,
                                                 const i64* __restrict__ targets, int V, int logit_kind) {
    ce_row<false>(losses, nullptr, logits, targets, nullptr, nullptr, V, logit_kind, KIND_F32);
}

// Training: losses[n] and dlogits in dlogit_kind (the half builds write the half type the lm_head product reads);
// dlogits may be the logits' own buffer (same kind). Needs count (cross_entropy_count) before it.
extern "C" __global__ void cross_entropy_forward_backward(float* __restrict__ losses, void* dlogits, const void* logits,
                                                          const i64* __restrict__ targets,
                                                          const float* __restrict__ dloss,
                                                          const float* __restrict__ count, int V, int logit_kind,
                                                          int dlogit_kind) {
    ce_row<true>(losses, dlogits, logits, targets, dloss, count, V, logit_kind, dlogit_kind);
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
