// gelu.cu: exact (erf) GELU, forward and backward. erff/expf are the IEEE-accurate library forms
// (no fast math).
#include "common.cuh"


#define GELU_INV_SQRT2 0.70710678118654752440f
#define GELU_INV_SQRT_2PI 0.39894228040143267794f

// y = 0.5 x (1 + erf(x / sqrt(2)))
extern "C" __global__ void gelu_forward(float* __restrict__ y, const float* __restrict__ x, i64 n) {
    GRID_STRIDE(i, n) {
        const float v = x[i];
        y[i] = 0.5f * v * (1.0f + erff(v * GELU_INV_SQRT2));
    }
}

// dx = dy (0.5 (1 + erf(x / sqrt(2))) + x exp(-x^2 / 2) / sqrt(2 pi))
extern "C" __global__ void gelu_backward(float* __restrict__ dx, const float* __restrict__ dy,
                                         const float* __restrict__ x, i64 n) {
    GRID_STRIDE(i, n) {
        const float v = x[i];
        const float cdf = 0.5f * (1.0f + erff(v * GELU_INV_SQRT2));
        const float pdf = expf(-0.5f * v * v) * GELU_INV_SQRT_2PI;
        dx[i] = dy[i] * (cdf + v * pdf);
    }
}
