// layernorm.cu: LayerNorm without bias (nanoGPT's bias=False). Forward per row:
//   mean = sum(x)/C, var = sum((x-mean)^2)/C, rstd = 1/sqrt(var + eps), y = (x - mean) * rstd * w.
// Backward: dx = rstd * (g - mean(g) - xhat * mean(g * xhat)) with g = dy * w, xhat = (x - mean) * rstd;
//   dw = sum over rows of dy * xhat, reduced in a fixed order (partials per row group, then a sum).
#include "common.cuh"

// One warp per row; blockDim.x = 32 * rows per block. y in y_kind: the half builds write the half type,
// which is how the product after every LayerNorm reads it.
extern "C" __global__ void layernorm_forward(void* __restrict__ y, float* __restrict__ mean,
                                             float* __restrict__ rstd, const float* __restrict__ x,
                                             const float* __restrict__ w, int N, int C, float eps, int y_kind) {
    const int lane = threadIdx.x & 31;
    const i64 row = (i64)blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
    if (row >= N) return;
    const float* xr = x + row * C;
    float s = 0.0f;
    for (int c = lane; c < C; c += 32) s += xr[c];
    const float m = warp_sum(s) / (float)C;
    float v = 0.0f;
    for (int c = lane; c < C; c += 32) {
        const float d = xr[c] - m;
        v += d * d;
    }
    v = warp_sum(v) / (float)C;
    const float r = 1.0f / sqrtf(v + eps);
    for (int c = lane; c < C; c += 32) store_kind(y, row * C + c, ((xr[c] - m) * r) * w[c], y_kind);
    if (lane == 0) {
        mean[row] = m;
        rstd[row] = r;
    }
}

// dx, one warp per row. dy in dy_kind (a product's half-type gradient under half roundings).
extern "C" __global__ void layernorm_backward_dx(float* __restrict__ dx, const void* __restrict__ dy,
                                                 const float* __restrict__ x, const float* __restrict__ w,
                                                 const float* __restrict__ mean, const float* __restrict__ rstd,
                                                 int N, int C, int dy_kind) {
    const int lane = threadIdx.x & 31;
    const i64 row = (i64)blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
    if (row >= N) return;
    const float* xr = x + row * C;
    const float m = mean[row], r = rstd[row];
    float s1 = 0.0f, s2 = 0.0f;
    for (int c = lane; c < C; c += 32) {
        const float g = load_kind(dy, row * C + c, dy_kind) * w[c];
        const float xh = (xr[c] - m) * r;
        s1 += g;
        s2 += g * xh;
    }
    s1 = warp_sum(s1) / (float)C;
    s2 = warp_sum(s2) / (float)C;
    float* dxr = dx + row * C;
    for (int c = lane; c < C; c += 32) {
        const float g = load_kind(dy, row * C + c, dy_kind) * w[c];
        const float xh = (xr[c] - m) * r;
        dxr[c] = r * (g - s1 - xh * s2);
    }
}

// dw partials: block (32, 8) covers 32 columns; blockIdx.y takes rows [y*rows_per_group, ...).
// part[blockIdx.y, c] = sum over the group's rows of dy * xhat.
extern "C" __global__ void layernorm_backward_dw_partial(float* __restrict__ part, const void* __restrict__ dy,
                                                         const float* __restrict__ x, const float* __restrict__ mean,
                                                         const float* __restrict__ rstd, int N, int C,
                                                         int rows_per_group, int dy_kind) {
    __shared__ float acc[8][33];
    const int c = blockIdx.x * 32 + threadIdx.x;
    const int r0 = blockIdx.y * rows_per_group;
    const int r1 = (r0 + rows_per_group < N) ? r0 + rows_per_group : N;
    float s = 0.0f;
    if (c < C) {
        for (int r = r0 + threadIdx.y; r < r1; r += blockDim.y) {
            const i64 e = (i64)r * C + c;
            s += load_kind(dy, e, dy_kind) * ((x[e] - mean[r]) * rstd[r]);
        }
    }
    acc[threadIdx.y][threadIdx.x] = s;
    __syncthreads();
    if (threadIdx.y == 0 && c < C) {
        float t = 0.0f;
        for (int k = 0; k < (int)blockDim.y; k++) t += acc[k][threadIdx.x];
        part[(i64)blockIdx.y * C + c] = t;
    }
}

// The same partials, each thread taking two adjacent columns (block (32, 8) covers 64) with one 8-byte float32
// and one 4-byte half (or 8-byte float32) load for the pair: the one-column form moved 2-4 bytes a load and ran at
// ~40% of the memory's speed (535 us a step of gpt2-small bf16, 25 launches, call 4 of
// results/h200-perf-20261201). Each column's rows and their order are the one-column form's, so are its bits.
// C even (every row starts on an 8-byte boundary); gpu/layernorm.py takes the one-column form otherwise.
extern "C" __global__ void layernorm_backward_dw_partial_pairs(float* __restrict__ part, const void* __restrict__ dy,
                                                               const float* __restrict__ x,
                                                               const float* __restrict__ mean,
                                                               const float* __restrict__ rstd, int N, int C,
                                                               int rows_per_group, int dy_kind) {
    __shared__ float acc[8][2][33];
    const int c = 2 * (blockIdx.x * 32 + threadIdx.x);
    const int r0 = blockIdx.y * rows_per_group;
    const int r1 = (r0 + rows_per_group < N) ? r0 + rows_per_group : N;
    float s0 = 0.0f, s1 = 0.0f;
    if (c < C) {
        for (int r = r0 + threadIdx.y; r < r1; r += blockDim.y) {
            const i64 e = (i64)r * C + c;
            float d0, d1;
            if (dy_kind == KIND_F32) {
                const float2 d = *(const float2*)((const float*)dy + e);
                d0 = d.x;
                d1 = d.y;
            } else {
                const u32 d = *(const u32*)((const u16*)dy + e);
                d0 = dy_kind == KIND_BF16 ? bf16_bits_to_f32((u16)(d & 0xFFFFu)) : f16_bits_to_f32((u16)(d & 0xFFFFu));
                d1 = dy_kind == KIND_BF16 ? bf16_bits_to_f32((u16)(d >> 16)) : f16_bits_to_f32((u16)(d >> 16));
            }
            const float2 xv = *(const float2*)(x + e);
            const float m = mean[r], rs = rstd[r];
            s0 += d0 * ((xv.x - m) * rs);
            s1 += d1 * ((xv.y - m) * rs);
        }
    }
    acc[threadIdx.y][0][threadIdx.x] = s0;
    acc[threadIdx.y][1][threadIdx.x] = s1;
    __syncthreads();
    if (threadIdx.y == 0 && c < C) {
        float t0 = 0.0f, t1 = 0.0f;
        for (int k = 0; k < (int)blockDim.y; k++) {
            t0 += acc[k][0][threadIdx.x];
            t1 += acc[k][1][threadIdx.x];
        }
        part[(i64)blockIdx.y * C + c] = t0;
        part[(i64)blockIdx.y * C + c + 1] = t1;
    }
}

// dw[c] = sum_g part[g, c]
extern "C" __global__ void layernorm_backward_dw_final(float* __restrict__ dw, const float* __restrict__ part,
                                                       int G, int C) {
    const int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= C) return;
    float t = 0.0f;
    for (int g = 0; g < G; g++) t += part[(i64)g * C + c];
    dw[c] = t;
}
