// gelu.cu: exact (erf) GELU, forward and backward. erff/expf are the IEEE-accurate library forms
// (no fast math).
#include "common.cuh"

#define GELU_INV_SQRT2 0.70710678118654752440f
#define GELU_INV_SQRT_2PI 0.39894228040143267794f

// y = 0.5 x (1 + erf(x / sqrt(2)))
// x and y in the kinds x_kind, y_kind (common.cuh's load_kind / store_kind).
extern "C" __global__ void gelu_forward(void* __restrict__ y, const void* __restrict__ x, i64 n, int x_kind,
                                        int y_kind) {
    GRID_STRIDE(i, n) {
        const float v = load_kind(x, i, x_kind);
        store_kind(y, i, 0.5f * v * (1.0f + erff(v * GELU_INV_SQRT2)), y_kind);
    }
}

// dx = dy (0.5 (1 + erf(x / sqrt(2))) + x exp(-x^2 / 2) / sqrt(2 pi))
extern "C" __global__ void gelu_backward(void* __restrict__ dx, const void* __restrict__ dy,
                                         const void* __restrict__ x, i64 n, int dy_kind, int x_kind, int dx_kind) {
    GRID_STRIDE(i, n) {
        const float v = load_kind(x, i, x_kind);
        const float cdf = 0.5f * (1.0f + erff(v * GELU_INV_SQRT2));
        const float pdf = expf(-0.5f * v * v) * GELU_INV_SQRT_2PI;
        store_kind(dx, i, load_kind(dy, i, dy_kind) * (cdf + v * pdf), dx_kind);
    }
}
