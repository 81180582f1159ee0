// layernorm.cu: LayerNorm without bias (nanoGPT's bias=False). Forward per row:
//   mean = sum(x)/C, var = sum((x-mean)^2)/C, rstd = 1/sqrt(var + eps), y = (x - mean) * rstd * w.
// Backward: dx = rstd * (g - mean(g) - xhat * mean(g * xhat)) with g = dy * w, xhat = (x - mean) * rstd;
//   dw = sum over rows of dy * xhat in a fixed order. Both in layernorm_backward.cuh, whose body the fused
//   residual + LayerNorm's backward runs too (so the two give the same bits).
// Removed on 2026-12-05 (before the removal, at 3f23587): the backward with dw finished by its own last blocks
//   (layernorm_backward_dwsum, layernorm_backward_dwsum_c<C>; TR2_LN_FINAL_IN_KERNEL), measured slower on every model
//   in the ninth session (docs/perf.md; +0.114 ms a step of nanogpt); layernorm_backward.cuh's header says more.
#include "common.cuh"
#include "layernorm_backward.cuh"

// One warp per row; blockDim.x = 32 * rows per block. y in y_kind: the half builds write the half type,
// which is how the product after every LayerNorm reads it.
extern "C" __global__ void layernorm_forward(void* __restrict__ y, float* __restrict__ mean,
                                             float* __restrict__ rstd, const float* __restrict__ x,
                                             const float* __restrict__ w, int N, int C, float eps, int y_kind) {
    grid_dependency_entry();
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

// dx and the block's dw partial; one warp per row, blockDim.x = 32 * rows a block, dynamic shared memory
// rows * C floats; dw_part [gridDim.x, C], summed by layernorm_dw_final.
extern "C" __global__ void layernorm_backward(float* __restrict__ dx, float* __restrict__ dw_part,
                                              const void* __restrict__ dy, const float* __restrict__ x,
                                              const float* __restrict__ w, const float* __restrict__ mean,
                                              const float* __restrict__ rstd, int N, int C, int dy_kind) {
    grid_dependency_entry();
    layernorm_backward_body(dx, nullptr, dw_part, dy, nullptr, x, w, mean, rstd, N, C, dy_kind, KIND_F32, 0, 0, 0,
                            nullptr, 0u, 1.0f);
}

// The same for C = 32 * CPL, each row held in registers (layernorm_backward.cuh): layernorm_backward_c<C>.
#define LAYERNORM_BACKWARD_ROWS(C_)                                                                              \
    extern "C" __global__ void layernorm_backward_c##C_(                                                        \
        float* __restrict__ dx, float* __restrict__ dw_part, const void* __restrict__ dy,                       \
        const float* __restrict__ x, const float* __restrict__ w, const float* __restrict__ mean,                \
        const float* __restrict__ rstd, int N, int C, int dy_kind) {                                            \
        grid_dependency_entry();                                                                                \
        layernorm_backward_row_registers<C_ / 32>(dx, nullptr, dw_part, dy, nullptr, x, w, mean, rstd, N,       \
                                                  dy_kind, KIND_F32, 0, 0, 0, nullptr, 0, 1.0f);                \
    }
LAYERNORM_BACKWARD_ROWS(384)
LAYERNORM_BACKWARD_ROWS(768)
LAYERNORM_BACKWARD_ROWS(1024)

extern "C" __global__ void layernorm_dw_final(float* __restrict__ dw, const float* __restrict__ part, int G, int C) {
    grid_dependency_entry();
    layernorm_dw_final_body(dw, part, G, C);
}

// Every LayerNorm of a backward at once (gpu/deferred_finals.py, TR2_LN_DW_DEFER): the partials stacked, part
// [L, G, C], and row blockIdx.y summed into dw [L, C] by layernorm_dw_final's body, so each row gets that kernel's
// bits; grid ((C + 31) / 32, L), block (32, 32). A separate entry point: the kernels above keep their machine code.
extern "C" __global__ void layernorm_dw_final_stacked(float* __restrict__ dw, const float* __restrict__ part, int G,
                                                      int C) {
    grid_dependency_entry();
    layernorm_dw_final_body(dw + (i64)blockIdx.y * C, part + (i64)blockIdx.y * G * C, G, C);
}
