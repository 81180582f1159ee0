// embedding.cu: token + position embedding. Forward x[b,t,:] = wte[idx[b,t],:] + wpe[t,:];
// backward accumulates into dwte (scatter by token, float atomics) and dwpe (sum over the batch,
// a fixed order) in place.
#include "common.cuh"

#define GRID_STRIDE(i, n) for (i64 i = (i64)blockIdx.x * blockDim.x + threadIdx.x; i < (n); i += (i64)gridDim.x * blockDim.x)

extern "C" __global__ void embedding_forward(float* __restrict__ out, const i64* __restrict__ idx,
                                             const float* __restrict__ wte, const float* __restrict__ wpe,
                                             int BT, int T, int C) {
    const i64 n = (i64)BT * C;
    GRID_STRIDE(e, n) {
        const i64 row = e / C;
        const int c = (int)(e - row * C);
        const int t = (int)(row % T);
        out[e] = wte[idx[row] * C + c] + wpe[(i64)t * C + c];
    }
}

// dwte[idx[row], c] += dout[row, c]
extern "C" __global__ void embedding_backward_wte(float* __restrict__ dwte, const float* __restrict__ dout,
                                                  const i64* __restrict__ idx, int BT, int C) {
    const i64 n = (i64)BT * C;
    GRID_STRIDE(e, n) {
        const i64 row = e / C;
        const int c = (int)(e - row * C);
        atomicAdd(&dwte[idx[row] * C + c], dout[e]);
    }
}

// dwpe[t, c] += sum_b dout[b, t, c]
extern "C" __global__ void embedding_backward_wpe(float* __restrict__ dwpe, const float* __restrict__ dout,
                                                  int B, int T, int C) {
    const i64 n = (i64)T * C;
    GRID_STRIDE(e, n) {
        float s = 0.0f;
        for (int b = 0; b < B; b++) s += dout[(i64)b * T * C + e];
        dwpe[e] += s;
    }
}
