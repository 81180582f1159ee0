// embedding.cu: token + position embedding. Forward x[b,t,:] = wte[idx[b,t],:] + wpe[t,:];
// backward accumulates into dwte and dwpe in place, each in a fixed order, so that two runs give the
// same bits: dwpe sums over the batch in order; dwte groups the rows by token with a stable counting
// sort (integer counts, exact in any order) and sums each token's rows in row order. (A first version
// scattered with float atomics: the H200 showed the cupy side parting from itself by 2% in 200 steps.)
#include "common.cuh"


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

// ---- dwte: the stable counting sort of the rows by token, in chunks of EMB_CHUNK rows ----
#define EMB_CHUNK 1024

__device__ __forceinline__ int imin(int a, int b) { return a < b ? a : b; }

// counts[g][v] = rows of chunk g with token v (counts zeroed by the caller)
extern "C" __global__ void embedding_sort_count(int* __restrict__ counts, const i64* __restrict__ idx, int N, int V) {
    const int g = blockIdx.x;
    const int end = imin(N, (g + 1) * EMB_CHUNK);
    for (int r = g * EMB_CHUNK + threadIdx.x; r < end; r += blockDim.x)
        atomicAdd(&counts[(i64)g * V + idx[r]], 1);
}

// total[v] = sum over the chunks of counts[g][v]
extern "C" __global__ void embedding_sort_total(int* __restrict__ total, const int* __restrict__ counts, int G, int V) {
    GRID_STRIDE(v, V) {
        int s = 0;
        for (int g = 0; g < G; g++) s += counts[(i64)g * V + v];
        total[v] = s;
    }
}

// starts[v] = sum_{u < v} total[u], starts[V] = N. One block of 1024 threads: each sums a run of
// consecutive tokens, the block scans the 1024 sums, each writes its run's starts.
extern "C" __global__ void embedding_sort_scan(int* __restrict__ starts, const int* __restrict__ total, int V) {
    __shared__ int sums[1024];
    const int t = threadIdx.x;
    const int per = (V + (int)blockDim.x - 1) / (int)blockDim.x;
    const int lo = imin(V, t * per), hi = imin(V, lo + per);
    int s = 0;
    for (int v = lo; v < hi; v++) s += total[v];
    sums[t] = s;
    __syncthreads();
    for (int off = 1; off < (int)blockDim.x; off <<= 1) {  // inclusive scan (Hillis-Steele)
        const int add = t >= off ? sums[t - off] : 0;
        __syncthreads();
        sums[t] += add;
        __syncthreads();
    }
    int run = t == 0 ? 0 : sums[t - 1];
    for (int v = lo; v < hi; v++) {
        starts[v] = run;
        run += total[v];
    }
    if (t == (int)blockDim.x - 1) starts[V] = sums[t];
}

// counts[g][v] becomes the first sorted position of chunk g's rows of token v
extern "C" __global__ void embedding_sort_base(int* __restrict__ counts, const int* __restrict__ starts, int G, int V) {
    GRID_STRIDE(v, V) {
        int run = starts[v];
        for (int g = 0; g < G; g++) {
            const i64 at = (i64)g * V + v;
            const int c = counts[at];
            counts[at] = run;
            run += c;
        }
    }
}

// sorted[base[g][v] + rank] = row, rank = the chunk's earlier rows with the same token: stable
extern "C" __global__ void embedding_sort_place(int* __restrict__ sorted, const int* __restrict__ base,
                                                const i64* __restrict__ idx, int N, int V) {
    __shared__ int tok[EMB_CHUNK];
    const int g = blockIdx.x, r0 = g * EMB_CHUNK;
    const int n = imin(EMB_CHUNK, N - r0);
    for (int i = threadIdx.x; i < n; i += blockDim.x) tok[i] = (int)idx[r0 + i];
    __syncthreads();
    for (int i = threadIdx.x; i < n; i += blockDim.x) {
        const int v = tok[i];
        int rank = 0;
        for (int j = 0; j < i; j++) rank += tok[j] == v;
        sorted[base[(i64)g * V + v] + rank] = r0 + i;
    }
}

// dwte[v, c] += the sum of dout[row, c] over token v's rows, in sorted (row) order: eight running
// sums take every eighth row, then add up in one fixed pattern. Grid (ceil(N / WTE_RUN), ceil(C / blockDim.x)):
// a block looks at WTE_RUN sorted positions and sums each token run that starts among them (to its end,
// past the block's positions if need be). A grid over the vocabulary instead (one block per token and
// channel slice) started some 300,000 blocks a step on the GPT-2 shapes, nearly all for absent tokens:
// 294 us a step on the H200 (gpt2-small bf16, results/h200-attention-20261130/call4-1db8699 profile).
#define WTE_RUN 32

extern "C" __global__ void embedding_backward_wte(float* __restrict__ dwte, const float* __restrict__ dout,
                                                  const int* __restrict__ sorted, const int* __restrict__ starts,
                                                  const i64* __restrict__ idx, int N, int C) {
    __shared__ int run_token[WTE_RUN];   // the token whose run starts at sorted position k0 + r, else -1
    const int k0 = blockIdx.x * WTE_RUN;
    if (threadIdx.x < WTE_RUN) {
        const int k = k0 + threadIdx.x;
        int v = -1;
        if (k < N) {
            v = (int)idx[sorted[k]];
            if (starts[v] != k) v = -1;
        }
        run_token[threadIdx.x] = v;
    }
    __syncthreads();
    const int c = blockIdx.y * blockDim.x + threadIdx.x;
    if (c >= C) return;
    for (int r = 0; r < WTE_RUN; r++) {
        const int v = run_token[r];
        if (v < 0) continue;
        const int lo = k0 + r, hi = starts[v + 1];
        float a[8] = {0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f};
        int k = lo;
        for (; k + 8 <= hi; k += 8) {
#pragma unroll
            for (int u = 0; u < 8; u++) a[u] += dout[(i64)sorted[k + u] * C + c];
        }
#pragma unroll
        for (int u = 0; u < 8; u++)  // the last rows, fewer than eight; fixed indices keep a[] in registers
            if (k + u < hi) a[u] += dout[(i64)sorted[k + u] * C + c];
        dwte[(i64)v * C + c] += ((a[0] + a[1]) + (a[2] + a[3])) + ((a[4] + a[5]) + (a[6] + a[7]));
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
