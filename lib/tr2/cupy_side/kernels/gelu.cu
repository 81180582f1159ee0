// gelu.cu: exact (erf) GELU, forward and backward. erff/expf are the IEEE-accurate library forms
// (no fast math).
// Eight elements a thread and iteration, each array read and written in 16-byte pieces (one uint4 of half
// bits, two float4 of float32): the element-at-a-time form with a kind test per element ran at about a third
// of the memory's speed on the H200 (gelu_backward 107 us a layer of gpt2-small bf16, call 4's profile).
// The arithmetic per element is unchanged. The last n % 8 elements go one a thread.
#include "common.cuh"

#define GELU_INV_SQRT2 0.70710678118654752440f
#define GELU_INV_SQRT_2PI 0.39894228040143267794f

// Elements i..i+7 (i a multiple of 8) of an activation held in `kind`, as float32, and the store back.
__device__ __forceinline__ void load8(float v[8], const void* __restrict__ p, i64 i, int kind) {
    if (kind == KIND_F32) {
        const float4 a = ((const float4*)p)[i / 4], b = ((const float4*)p)[i / 4 + 1];
        v[0] = a.x; v[1] = a.y; v[2] = a.z; v[3] = a.w;
        v[4] = b.x; v[5] = b.y; v[6] = b.z; v[7] = b.w;
    } else {
        const uint4 u = ((const uint4*)p)[i / 8];
        const u32 w[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
        for (int k = 0; k < 4; ++k) {
            const u16 lo = (u16)(w[k] & 0xFFFFu), hi = (u16)(w[k] >> 16);
            v[2 * k] = kind == KIND_BF16 ? bf16_bits_to_f32(lo) : f16_bits_to_f32(lo);
            v[2 * k + 1] = kind == KIND_BF16 ? bf16_bits_to_f32(hi) : f16_bits_to_f32(hi);
        }
    }
}

__device__ __forceinline__ void store8(void* __restrict__ p, i64 i, const float v[8], int kind) {
    if (kind == KIND_F32) {
        ((float4*)p)[i / 4] = make_float4(v[0], v[1], v[2], v[3]);
        ((float4*)p)[i / 4 + 1] = make_float4(v[4], v[5], v[6], v[7]);
    } else {
        u32 w[4];
#pragma unroll
        for (int k = 0; k < 4; ++k) {
            const u16 lo = kind == KIND_BF16 ? f32_to_bf16_bits(v[2 * k]) : f32_to_f16_bits(v[2 * k]);
            const u16 hi = kind == KIND_BF16 ? f32_to_bf16_bits(v[2 * k + 1]) : f32_to_f16_bits(v[2 * k + 1]);
            w[k] = (u32)lo | ((u32)hi << 16);
        }
        ((uint4*)p)[i / 8] = make_uint4(w[0], w[1], w[2], w[3]);
    }
}

// y = 0.5 x (1 + erf(x / sqrt(2)))
__device__ __forceinline__ float gelu(float x) { return 0.5f * x * (1.0f + erff(x * GELU_INV_SQRT2)); }

// dx = dy (0.5 (1 + erf(x / sqrt(2))) + x exp(-x^2 / 2) / sqrt(2 pi))
__device__ __forceinline__ float gelu_grad(float dy, float x) {
    const float cdf = 0.5f * (1.0f + erff(x * GELU_INV_SQRT2));
    const float pdf = expf(-0.5f * x * x) * GELU_INV_SQRT_2PI;
    return dy * (cdf + x * pdf);
}

// The tail's element for this thread (the first n % 8 threads of the grid), or -1.
__device__ __forceinline__ i64 tail_index(i64 n) {
    const i64 t = (n / 8) * 8 + (i64)blockIdx.x * blockDim.x + threadIdx.x;
    return t < n ? t : -1;
}

// x and y in the kinds x_kind, y_kind (common.cuh's load_kind / store_kind).
extern "C" __global__ void gelu_forward(void* __restrict__ y, const void* __restrict__ x, i64 n, int x_kind,
                                        int y_kind) {
    GRID_STRIDE(g, n / 8) {
        float v[8];
        load8(v, x, 8 * g, x_kind);
#pragma unroll
        for (int k = 0; k < 8; ++k) v[k] = gelu(v[k]);
        store8(y, 8 * g, v, y_kind);
    }
    const i64 t = tail_index(n);
    if (t >= 0) store_kind(y, t, gelu(load_kind(x, t, x_kind)), y_kind);
}

extern "C" __global__ void gelu_backward(void* __restrict__ dx, const void* __restrict__ dy,
                                         const void* __restrict__ x, i64 n, int dy_kind, int x_kind, int dx_kind) {
    GRID_STRIDE(g, n / 8) {
        float v[8], d[8];
        load8(v, x, 8 * g, x_kind);
        load8(d, dy, 8 * g, dy_kind);
#pragma unroll
        for (int k = 0; k < 8; ++k) v[k] = gelu_grad(d[k], v[k]);
        store8(dx, 8 * g, v, dx_kind);
    }
    const i64 t = tail_index(n);
    if (t >= 0) store_kind(dx, t, gelu_grad(load_kind(dy, t, dy_kind), load_kind(x, t, x_kind)), dx_kind);
}
