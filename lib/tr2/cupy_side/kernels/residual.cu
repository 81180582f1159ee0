// residual.cu: the residual connection. Forward out = a + b; backward hands the gradient to both
// branches (the wrapper returns the same array twice: no kernel), or accumulates it into an existing
// gradient with residual_accumulate.
#include "common.cuh"


// b in b_kind: a branch's output may arrive in the half type (a product's output under half roundings).
extern "C" __global__ void residual_forward(float* __restrict__ out, const float* __restrict__ a,
                                            const void* __restrict__ b, i64 n, int b_kind) {
    GRID_STRIDE(i, n) out[i] = a[i] + load_kind(b, i, b_kind);
}

// acc += d (backward: a branch's gradient added to the stream's).
extern "C" __global__ void residual_accumulate(float* __restrict__ acc, const float* __restrict__ d, i64 n) {
    GRID_STRIDE(i, n) acc[i] += d[i];
}
