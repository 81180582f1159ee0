// global_norm.cu: the gradients' global norm sqrt(sum of squares) over many tensors, on the device,
// in a fixed order: per-chunk partial sums (float32 within a chunk), then one block adds the partials
// in float64 and writes the root into a device scalar. Same tensor table layout as adamw.cu
// (only the grad pointer, column 1, numel, column 4, and the grad's kind, column 7, are read: a half-type dW
// is widened exactly as it is read).
#include "common.cuh"

// This thread's share of sum(g^2) over [start, end) of a gradient held in kind K (widened exactly).
template <int K>
__device__ __forceinline__ float sum_squares(const typename Elem<K>::T* __restrict__ g, i64 start, i64 end) {
    float s = 0.0f;
    for (i64 i = start + threadIdx.x; i < end; i += blockDim.x) {
        const float x = load_from<K>(g[i]);
        s = __fmaf_rn(x, x, s);  // spelled out, so every reader's instance rounds alike
    }
    return s;
}

extern "C" __global__ void global_norm_partial(float* __restrict__ partial, const u64* __restrict__ table,
                                               const int* __restrict__ chunk_tensor,
                                               const i64* __restrict__ chunk_start, int chunk) {
    grid_dependency_entry();
    __shared__ float shared[32];
    const int t = chunk_tensor[blockIdx.x];
    const u64* row = table + TENSOR_COLS * (i64)t;
    const i64 n = (i64)row[4];
    const int kind = (int)row[7];
    const i64 start = chunk_start[blockIdx.x];
    const i64 end = (start + (i64)chunk < n) ? start + (i64)chunk : n;
    float s = 0.0f;
    if (kind == KIND_BF16) s = sum_squares<KIND_BF16>((const u16*)row[1], start, end);
    else if (kind == KIND_F16) s = sum_squares<KIND_F16>((const u16*)row[1], start, end);
    else s = sum_squares<KIND_F32>((const float*)row[1], start, end);
    s = block_sum(s, shared);
    if (threadIdx.x == 0) partial[blockIdx.x] = s;
}

// out[0] = sqrt(sum_b partial[b]); one block (blockDim.x a multiple of 32).
extern "C" __global__ void global_norm_final(float* __restrict__ out, const float* __restrict__ partial, int nb) {
    grid_dependency_entry();
    __shared__ double shared[32];
    double s = 0.0;
    for (int b = threadIdx.x; b < nb; b += blockDim.x) s += (double)partial[b];
    for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = blockDim.x >> 5;
    if (lane == 0) shared[warp] = s;
    __syncthreads();
    if (warp == 0) {
        double t = (lane < nwarps) ? shared[lane] : 0.0;
        for (int o = 16; o > 0; o >>= 1) t += __shfl_xor_sync(0xffffffffu, t, o);
        if (lane == 0) out[0] = (float)sqrt(t);
    }
}
