// cross_entropy.cu: softmax + cross-entropy loss + the logits' gradient, one block per row
// (torch's F.cross_entropy with ignore_index = -1; reference tr2/cupy_side/ops/cross_entropy.py).
// Forward: lse[n] = log sum_j exp(logits[n, j]) (max-shifted), losses[n] = lse[n] - logits[n, y[n]]
// (0 where y[n] = -1); then cross_entropy_mean adds the losses and counts the rows in a fixed order:
// loss = sum / count (NaN when nothing counts, as torch's mean of nothing), count kept on the device.
// Backward: dlogits[n, j] = (exp(logits[n, j] - lse[n]) - [j == y[n]]) * dloss / max(count, 1),
// 0 on ignored rows, reading dloss from device memory (so the loss scale stays on the device).
#include "common.cuh"

// logits in logit_kind: the half type where the product rounds its output (half roundings).
extern "C" __global__ void cross_entropy_forward(float* __restrict__ losses, float* __restrict__ lse,
                                                 const void* __restrict__ logits, const i64* __restrict__ targets,
                                                 int N, int V, int logit_kind) {
    __shared__ float shared[32];
    const i64 row = blockIdx.x;
    if (row >= N) return;
    const i64 r0 = row * V;
    float mx = NEG_INF;
    for (int j = threadIdx.x; j < V; j += blockDim.x) mx = fmaxf(mx, load_kind(logits, r0 + j, logit_kind));
    mx = block_max(mx, shared);
    float s = 0.0f;
    for (int j = threadIdx.x; j < V; j += blockDim.x) s += expf(load_kind(logits, r0 + j, logit_kind) - mx);
    s = block_sum(s, shared);
    if (threadIdx.x == 0) {
        const float z = logf(s) + mx;
        const i64 t = targets[row];
        lse[row] = z;
        losses[row] = (t < 0) ? 0.0f : z - load_kind(logits, r0 + t, logit_kind);
    }
}

// loss[0] = sum(losses) / count, count[0] = rows whose target is not -1; one block, fixed order.
extern "C" __global__ void cross_entropy_mean(float* __restrict__ loss, float* __restrict__ count,
                                              const float* __restrict__ losses, const i64* __restrict__ targets,
                                              int N) {
    __shared__ float shared[32];
    float s = 0.0f, c = 0.0f;
    for (int n = threadIdx.x; n < N; n += blockDim.x) {
        s += losses[n];
        c += (targets[n] < 0) ? 0.0f : 1.0f;
    }
    s = block_sum(s, shared);
    c = block_sum(c, shared);
    if (threadIdx.x == 0) {
        loss[0] = s / c;
        count[0] = c;
    }
}

// dlogits in dlogit_kind: the half builds write the half type the lm_head product reads. dlogits may be the
// logits' own buffer (same kind): each element is read, then written, by the same thread.
extern "C" __global__ void cross_entropy_backward(void* dlogits, const void* logits,
                                                  const float* __restrict__ lse, const i64* __restrict__ targets,
                                                  const float* __restrict__ dloss, const float* __restrict__ count,
                                                  int N, int V, int logit_kind, int dlogit_kind) {
    const i64 row = blockIdx.x;
    if (row >= N) return;
    const i64 r0 = row * V;
    const i64 t = targets[row];
    if (t < 0) {
        for (int j = threadIdx.x; j < V; j += blockDim.x) store_kind(dlogits, r0 + j, 0.0f, dlogit_kind);
        return;
    }
    const float z = lse[row];
    const float g = dloss[0] / fmaxf(count[0], 1.0f);
    for (int j = threadIdx.x; j < V; j += blockDim.x) {
        const float p = expf(load_kind(logits, r0 + j, logit_kind) - z);
        store_kind(dlogits, r0 + j, (p - (j == t ? 1.0f : 0.0f)) * g, dlogit_kind);
    }
}
