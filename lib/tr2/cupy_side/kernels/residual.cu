// residual.cu: the residual connection's add, out = a + b, where it is not fused with the LayerNorm after it
// (residual_layernorm.cu), and the tape's sum of two gradients of one value.
#include "common.cuh"


// b in b_kind: a branch's output may arrive in the half type (a product's output under half roundings).
extern "C" __global__ void residual_forward(float* __restrict__ out, const float* __restrict__ a,
                                            const void* __restrict__ b, i64 n, int b_kind) {
    grid_dependency_entry();
    GRID_STRIDE(i, n) out[i] = a[i] + load_kind(b, i, b_kind);
}
