// adamw.cu: one multi-tensor AdamW launch over every parameter, in PyTorch's form:
//   g = grad * grad_scale                 (the clip factor and 1/loss-scale, folded on the device)
//   m = m + (1 - beta1) (g - m) (torch's lerp);  v = beta2 v + (1 - beta2) g^2
//   p = p (1 - lr wd)                     (tensors of 2+ dims only)
//   p = p - (lr / bias_corr1) m / (sqrt(v) / sqrt(bias_corr2) + eps)
//   half = p rounded to the build's half type (round to nearest even), where the tensor has a half copy
// (reference: tr2/cupy_side/ops/adamw.py). The step's scalars come from device memory `hyper` = [lr, beta1, beta2, eps, weight_decay,
// bias_corr1, bias_corr2, grad_scale, skip] (bias_corr_k = 1 - beta_k^step), so nothing per step is baked
// into the launch (a CUDA graph of the whole step can replay it). skip != 0 (a float16 step whose gradients
// overflowed, decided on the device): nothing is written.
//
// Why the half copy here: in the half builds every product reads its weight in the half type. The copy the
// products read (gpu/context.py keeps one per weight) is rewritten from the new float32 master in the same pass,
// so no cast of a weight runs before a product. The copy holds exactly the bits a cast of the master would give
// (the same cvt.rn of the same float32 value).
//
// The tensors: `table` [n_tensors, TENSOR_COLS] of u64 = (param, grad, m, v, numel, decay flag, half copy or 0);
// block b works on elements [chunk_start[b], chunk_start[b] + chunk) of tensor chunk_tensor[b]. half_kind is the
// build's half type (1 bfloat16, 2 float16), read only for rows with a half copy.
#include "common.cuh"

extern "C" __global__ void adamw_update(const u64* __restrict__ table, const int* __restrict__ chunk_tensor,
                                        const i64* __restrict__ chunk_start, int chunk,
                                        const float* __restrict__ hyper, int half_kind) {
    if (hyper[8] != 0.0f) return;
    const int t = chunk_tensor[blockIdx.x];
    const u64* row = table + TENSOR_COLS * (i64)t;
    float* p = (float*)row[0];
    const float* gr = (const float*)row[1];
    float* m = (float*)row[2];
    float* v = (float*)row[3];
    const i64 n = (i64)row[4];
    const int decay = (int)row[5];
    u16* half = (u16*)row[6];
    const float lr = hyper[0], b1 = hyper[1], b2 = hyper[2], eps = hyper[3], wd = hyper[4];
    const float bc1 = hyper[5], bc2 = hyper[6], gs = hyper[7];
    const float step_size = lr / bc1;
    const float bc2_sqrt = sqrtf(bc2);
    const float decay_factor = decay ? 1.0f - lr * wd : 1.0f;
    const i64 start = chunk_start[blockIdx.x];
    const i64 end = (start + (i64)chunk < n) ? start + (i64)chunk : n;
    for (i64 i = start + threadIdx.x; i < end; i += blockDim.x) {
        const float g = gr[i] * gs;
        const float mi = m[i] + (1.0f - b1) * (g - m[i]);
        const float vi = b2 * v[i] + (1.0f - b2) * g * g;
        m[i] = mi;
        v[i] = vi;
        const float denom = sqrtf(vi) / bc2_sqrt + eps;
        const float pi = p[i] * decay_factor - step_size * (mi / denom);
        p[i] = pi;
        if (half != nullptr) store_kind(half, i, pi, half_kind);
    }
}
