// global_norm.cu: the gradients' global norm sqrt(sum of squares) over many tensors, on the device,
// in a fixed order: per-chunk partial sums (float32 within a chunk), then one block adds the partials
// in float64 and writes the root into a device scalar. Same tensor table layout as adamw.cu
// (only the grad pointer, column 1, numel, column 4, and the grad's kind, column 7, are read, and columns 8-10 of a
// tied row: a half-type dW is widened exactly as it is read).
//
// The tied wte's gradient (grad kind KIND_TIED | half kind: common.cuh's TiedRows) is read as lm_head's half dW plus
// the embedding's sums, the float32 values the widening and the embedding's adds made before.
//
// Two forms of each kernel, the same operations in the same order, so the same bits (tested on the GPU):
// global_norm_partial / global_norm_final, whose loops issue one load a turn (four for float32 gradients, as the
// compiler unrolled them; generic loads, since the table's pointers are integers); and the _wide forms, which issue
// a block's loads before its first add: a full chunk (PER_THREAD elements a thread) as PER_THREAD read-only global loads
// (ld.global.nc), the final pass's partials eight at a time. Why: on gpt2-small (124M gradients, 0.33 GB a step)
// the partial pass ran at 2.9 TB/s in bf16 and 1.7 in f16 (112 and 196 us, torch.profiler, call 2 of
// results/h200-perf-20261204g); a chunk is a short block (16 elements a thread), so each of its loop's round trips to
// the DRAM was the block's whole life, and 30,000 blocks came in ~29 waves of them.
#include "common.cuh"

#define PER_THREAD 16   // elements a thread in a full chunk: tensors.CHUNK / tensors.THREADS (4096 / 256)

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

// The same sum over exactly PER_THREAD elements a thread (i = start + threadIdx.x + k blockDim.x, k ascending), all
// loaded first: the multiply-adds in sum_squares's order, so the same bits.
template <int K>
__device__ __forceinline__ float sum_squares_full(const typename Elem<K>::T* __restrict__ g, i64 start) {
    typename Elem<K>::T v[PER_THREAD];
#pragma unroll
    for (int k = 0; k < PER_THREAD; ++k) v[k] = __ldg(g + start + threadIdx.x + (i64)k * blockDim.x);
    float s = 0.0f;
#pragma unroll
    for (int k = 0; k < PER_THREAD; ++k) {
        const float x = load_from<K>(v[k]);
        s = __fmaf_rn(x, x, s);
    }
    return s;
}

// The tied wte's rows (grad kind KIND_TIED | K): sum_squares's order over the values TiedRows gives, the float32
// gradient the widening and embedding_backward_wte made before, squared and added in the same order: the same bits.
// One load a turn in both kernels: a chunk's loads first (sum_squares_full's form) took the wide kernel from 32 to
// 42 registers a thread (nvdisasm on the CPU), fewer blocks a multiprocessor for every other tensor too.
template <int K>
__device__ __forceinline__ float sum_squares_tied(const u64* row, i64 start, i64 end) {
    const u16* __restrict__ g = (const u16*)row[1];
    const TiedRows tied{(const float*)row[8], (const int*)row[9]};
    RowWalk w(start + threadIdx.x, (int)row[10]);
    float s = 0.0f;
    for (i64 i = start + threadIdx.x; i < end; i += blockDim.x) {
        const float x = tied.add(load_from<K>(__ldg(g + i)), i, w.v);
        s = __fmaf_rn(x, x, s);
        w.advance(blockDim.x);
    }
    return s;
}

// This thread's share of a chunk [start, end) of the gradient of table row `row`, held in `kind`: sum_squares, or
// with FULL (end - start == PER_THREAD blockDim.x) sum_squares_full, the same bits.
template <bool FULL>
__device__ __forceinline__ float chunk_sum_squares(const u64* row, int kind, i64 start, i64 end) {
    if (kind == (KIND_TIED | KIND_BF16)) return sum_squares_tied<KIND_BF16>(row, start, end);
    if (kind == (KIND_TIED | KIND_F16)) return sum_squares_tied<KIND_F16>(row, start, end);
    if (kind == KIND_BF16)
        return FULL ? sum_squares_full<KIND_BF16>((const u16*)row[1], start)
                    : sum_squares<KIND_BF16>((const u16*)row[1], start, end);
    if (kind == KIND_F16)
        return FULL ? sum_squares_full<KIND_F16>((const u16*)row[1], start)
                    : sum_squares<KIND_F16>((const u16*)row[1], start, end);
    return FULL ? sum_squares_full<KIND_F32>((const float*)row[1], start)
                : sum_squares<KIND_F32>((const float*)row[1], start, end);
}

// Block b's partial: the sum of squares of its chunk (the one-load-a-turn loop; with WIDE a full chunk's loads first).
template <bool WIDE>
__device__ __forceinline__ void partial_body(float* __restrict__ partial, const u64* __restrict__ table,
                                             const int* __restrict__ chunk_tensor, const i64* __restrict__ chunk_start,
                                             int chunk) {
    __shared__ float shared[32];
    const int t = chunk_tensor[blockIdx.x];
    const u64* row = table + TENSOR_COLS * (i64)t;
    const i64 n = (i64)row[4];
    const int kind = (int)row[7];
    const i64 start = chunk_start[blockIdx.x];
    const i64 end = (start + (i64)chunk < n) ? start + (i64)chunk : n;
    // a full chunk: the loop would visit exactly these elements; a tensor's last, shorter chunk takes the loop
    float s = 0.0f;
    if (WIDE && end - start == (i64)PER_THREAD * blockDim.x) s = chunk_sum_squares<true>(row, kind, start, end);
    else s = chunk_sum_squares<false>(row, kind, start, end);
    s = block_sum(s, shared);
    if (threadIdx.x == 0) partial[blockIdx.x] = s;
}

extern "C" __global__ void global_norm_partial(float* __restrict__ partial, const u64* __restrict__ table,
                                               const int* __restrict__ chunk_tensor,
                                               const i64* __restrict__ chunk_start, int chunk) {
    grid_dependency_entry();
    partial_body<false>(partial, table, chunk_tensor, chunk_start, chunk);
}

extern "C" __global__ void global_norm_partial_wide(float* __restrict__ partial, const u64* __restrict__ table,
                                                    const int* __restrict__ chunk_tensor,
                                                    const i64* __restrict__ chunk_start, int chunk) {
    grid_dependency_entry();
    partial_body<true>(partial, table, chunk_tensor, chunk_start, chunk);
}

// The final pass's block reduction of each thread's double: shuffles, then warp 0; out[0] = sqrt of the total.
__device__ __forceinline__ void final_root(float* __restrict__ out, double s) {
    __shared__ double shared[32];
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

// out[0] = sqrt(sum_b partial[b]); one block (blockDim.x a multiple of 32).
extern "C" __global__ void global_norm_final(float* __restrict__ out, const float* __restrict__ partial, int nb) {
    grid_dependency_entry();
    double s = 0.0;
    for (int b = threadIdx.x; b < nb; b += blockDim.x) s += (double)partial[b];
    final_root(out, s);
}

// The same additions in the same order (b = threadIdx.x, + blockDim.x, ...), eight partials loaded before they are
// added.
extern "C" __global__ void global_norm_final_wide(float* __restrict__ out, const float* __restrict__ partial, int nb) {
    grid_dependency_entry();
    double s = 0.0;
    int b = threadIdx.x;
    for (; b + 7 * (int)blockDim.x < nb; b += 8 * (int)blockDim.x) {
        float p[8];
#pragma unroll
        for (int k = 0; k < 8; ++k) p[k] = __ldg(partial + b + k * (int)blockDim.x);
#pragma unroll
        for (int k = 0; k < 8; ++k) s += (double)p[k];
    }
    for (; b < nb; b += blockDim.x) s += (double)partial[b];
    final_root(out, s);
}
