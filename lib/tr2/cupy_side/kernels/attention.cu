// attention.cu: causal self-attention's element-wise parts; the four products per head run in
// cuBLAS (strided batched, gpu/blas.py) between these kernels. This first version materializes the
// T x T scores (flash attention comes with the speed work). Reference: tr2/cupy_side/ops/attention.py.
//
// Forward (per batch b and head h, q/k/v/y laid out [B, H, T, hs]):
//   split:   q, k, v <- qkv[B, T, 3C]           (the products' operands: rounded as the build says)
//   product: S = q k^T                          [B*H, T, T], float32
//   softmax_forward: P = softmax(S * scale) over j <= i (causal), saved (float32, never rounded);
//            Pd = P * keep / (1 - p) (element index (bh*T + i)*T + j of the site), stored in the type
//            the next product reads (the half type only with half roundings: FlashAttention's rounding)
//   product: y = Pd v; merge: out[B, T, C] <- y
// Backward:
//   dPd = dy v^T (float32); dv = Pd^T dy;
//   softmax_backward: dP = dPd * keep / (1 - p); dS = P (dP - sum_j P dP)   (stored like Pd)
//   dq = scale * dS k; dk = scale * dS^T q; merge into dqkv[B, T, 3C].
#include "common.cuh"

#define GRID_STRIDE(i, n) for (i64 i = (i64)blockIdx.x * blockDim.x + threadIdx.x; i < (n); i += (i64)gridDim.x * blockDim.x)

// dst[b, h, t, d] = src[b, t, col0 + h*hs + d] (src rows of `src_stride` floats), rounded to
// `round_kind` (0: not rounded; used when float32 buffers carry half-type operands), stored as kind K.
template <int K>
__device__ void split_heads(typename Elem<K>::T* __restrict__ dst, const float* __restrict__ src,
                            int B, int T, int H, int hs, int src_stride, int col0, int round_kind) {
    const i64 n = (i64)B * H * T * hs;
    GRID_STRIDE(e, n) {
        const int d = (int)(e % hs);
        i64 r = e / hs;
        const int t = (int)(r % T);
        r /= T;
        const int h = (int)(r % H);
        const int b = (int)(r / H);
        dst[e] = store_as<K>(round_to_kind(src[((i64)b * T + t) * src_stride + col0 + h * hs + d], round_kind));
    }
}

extern "C" __global__ void attn_split_f32(float* dst, const float* src, int B, int T, int H, int hs, int src_stride,
                                      int col0, int round_kind) {
    split_heads<KIND_F32>(dst, src, B, T, H, hs, src_stride, col0, round_kind);
}
extern "C" __global__ void attn_split_bf16(u16* dst, const float* src, int B, int T, int H, int hs, int src_stride,
                                      int col0, int round_kind) {
    split_heads<KIND_BF16>(dst, src, B, T, H, hs, src_stride, col0, round_kind);
}
extern "C" __global__ void attn_split_f16(u16* dst, const float* src, int B, int T, int H, int hs, int src_stride,
                                      int col0, int round_kind) {
    split_heads<KIND_F16>(dst, src, B, T, H, hs, src_stride, col0, round_kind);
}

// dst[b, t, col0 + h*hs + d] = src[b, h, t, d] (dst rows of `dst_stride` floats).
extern "C" __global__ void attn_merge(float* __restrict__ dst, const float* __restrict__ src,
                                      int B, int T, int H, int hs, int dst_stride, int col0) {
    const i64 n = (i64)B * H * T * hs;
    GRID_STRIDE(e, n) {
        const int d = (int)(e % hs);
        i64 r = e / hs;
        const int t = (int)(r % T);
        r /= T;
        const int h = (int)(r % H);
        const int b = (int)(r / H);
        dst[((i64)b * T + t) * dst_stride + col0 + h * hs + d] = src[e];
    }
}

// One warp per row (bh, i) of the scores. S: [rows, T] float32 (the raw product q k^T).
// P[row, j] = softmax over j <= i of S * scale (0 for j > i);
// Pd[row, j] = P * dscale where kept, else 0, stored as kind K (the next product's input).
template <int K>
__device__ void softmax_forward(float* __restrict__ P, typename Elem<K>::T* __restrict__ Pd,
                                const float* __restrict__ S, int rows, int T, float scale, int use_dropout,
                                u64 seed, u64 offset, const u64* __restrict__ offset_add, u32 threshold,
                                float dscale) {
    const int lane = threadIdx.x & 31;
    const i64 row = (i64)blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
    if (row >= rows) return;
    const int i = (int)(row % T);
    const float* s = S + row * T;
    float* p = P + row * T;
    typename Elem<K>::T* pd = Pd + row * T;
    float mx = NEG_INF;
    for (int j = lane; j <= i; j += 32) mx = fmaxf(mx, s[j] * scale);
    mx = warp_max(mx);
    float sum = 0.0f;
    for (int j = lane; j <= i; j += 32) sum += expf(s[j] * scale - mx);
    sum = warp_sum(sum);
    const u64 off = site_offset(offset, offset_add);
    for (int j = lane; j < T; j += 32) {
        float v = 0.0f;
        if (j <= i) v = expf(s[j] * scale - mx) / sum;
        p[j] = v;
        float vd = v;
        if (use_dropout) vd = rng_keep(seed, off, (u64)(row * T + j), threshold) ? v * dscale : 0.0f;
        pd[j] = store_as<K>(vd);
    }
}

#define SOFTMAX_FWD(NAME, K)                                                                                   \
    extern "C" __global__ void NAME(float* P, typename Elem<K>::T* Pd, const float* S, int rows, int T,        \
                                    float scale, int use_dropout, u64 seed, u64 offset, const u64* offset_add, \
                                    u32 threshold, float dscale) {                                            \
        softmax_forward<K>(P, Pd, S, rows, T, scale, use_dropout, seed, offset, offset_add, threshold, dscale); \
    }
SOFTMAX_FWD(attn_softmax_forward_f32, KIND_F32)
SOFTMAX_FWD(attn_softmax_forward_bf16, KIND_BF16)
SOFTMAX_FWD(attn_softmax_forward_f16, KIND_F16)

// Pd = dropout(P) again (the backward's copy of the forward's Pd), stored as kind K.
template <int K>
__device__ void dropout_probs(typename Elem<K>::T* __restrict__ Pd, const float* __restrict__ P, i64 n,
                              int use_dropout, u64 seed, u64 offset, const u64* __restrict__ offset_add,
                              u32 threshold, float dscale) {
    const u64 off = site_offset(offset, offset_add);
    GRID_STRIDE(e, n) {
        float v = P[e];
        if (use_dropout) v = rng_keep(seed, off, (u64)e, threshold) ? v * dscale : 0.0f;
        Pd[e] = store_as<K>(v);
    }
}

#define DROPOUT_PROBS(NAME, K)                                                                                 \
    extern "C" __global__ void NAME(typename Elem<K>::T* Pd, const float* P, i64 n, int use_dropout, u64 seed, \
                                    u64 offset, const u64* offset_add, u32 threshold, float dscale) {         \
        dropout_probs<K>(Pd, P, n, use_dropout, seed, offset, offset_add, threshold, dscale);                 \
    }
DROPOUT_PROBS(attn_dropout_probs_f32, KIND_F32)
DROPOUT_PROBS(attn_dropout_probs_bf16, KIND_BF16)
DROPOUT_PROBS(attn_dropout_probs_f16, KIND_F16)

// One warp per row. dPd: [rows, T] float32 (dy v^T). dP = dPd * dscale where kept, else 0;
// dS[row, j] = P (dP - sum_k P dP) for j <= i, 0 above the diagonal; stored as kind K. The softmax's
// scale multiplies the products dS k and dS^T q (cuBLAS's alpha), as the reference scales dq and dk.
template <int K>
__device__ void softmax_backward(typename Elem<K>::T* __restrict__ dS, const float* __restrict__ dPd,
                                 const float* __restrict__ P, int rows, int T, int use_dropout,
                                 u64 seed, u64 offset, const u64* __restrict__ offset_add, u32 threshold,
                                 float dscale) {
    const int lane = threadIdx.x & 31;
    const i64 row = (i64)blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
    if (row >= rows) return;
    const int i = (int)(row % T);
    const float* g = dPd + row * T;
    const float* p = P + row * T;
    typename Elem<K>::T* ds = dS + row * T;
    const u64 off = site_offset(offset, offset_add);
    float dot = 0.0f;
    for (int j = lane; j <= i; j += 32) {
        float dp = g[j];
        if (use_dropout) dp = rng_keep(seed, off, (u64)(row * T + j), threshold) ? dp * dscale : 0.0f;
        dot += p[j] * dp;
    }
    dot = warp_sum(dot);
    for (int j = lane; j < T; j += 32) {
        float v = 0.0f;
        if (j <= i) {
            float dp = g[j];
            if (use_dropout) dp = rng_keep(seed, off, (u64)(row * T + j), threshold) ? dp * dscale : 0.0f;
            v = p[j] * (dp - dot);
        }
        ds[j] = store_as<K>(v);
    }
}

#define SOFTMAX_BWD(NAME, K)                                                                                   \
    extern "C" __global__ void NAME(typename Elem<K>::T* dS, const float* dPd, const float* P, int rows, int T, \
                                    int use_dropout, u64 seed, u64 offset, const u64* offset_add,             \
                                    u32 threshold, float dscale) {                                            \
        softmax_backward<K>(dS, dPd, P, rows, T, use_dropout, seed, offset, offset_add, threshold, dscale);   \
    }
SOFTMAX_BWD(attn_softmax_backward_f32, KIND_F32)
SOFTMAX_BWD(attn_softmax_backward_bf16, KIND_BF16)
SOFTMAX_BWD(attn_softmax_backward_f16, KIND_F16)
