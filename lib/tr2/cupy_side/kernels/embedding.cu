// embedding.cu: token + position embedding. Forward x[b,t,:] = wte[idx[b,t],:] + wpe[t,:];
// backward accumulates into dwte and dwpe in place, each in a fixed order, so that two runs give the
// same bits: dwpe sums over the batch in order; dwte groups the rows by token with a stable counting
// sort (integer counts, exact in any order) and sums each token's rows in row order, in segments of the
// sorted rows whose sums add in segment order (embedding_backward_wte). (A first version scattered with
// float atomics: the H200 showed the cupy side parting from itself by 2% in 200 steps.)
// With the embedding dropout (p > 0, the char model) the forward is embedding_dropout_forward(_v4):
// x = dropout(wte[idx] + wpe[t]) in one pass. Why: embedding_forward then dropout_apply wrote the stream and read it
// back (20 us on the char model), and embedding_forward spent 28 us on a 64-bit division and remainder per element.
// The bits are those of embedding_forward then dropout_apply: the generator's element of x[row, c] is row * C + c of
// the site (dropout.cu's index of the [B*T, C] array), a kept value (wte + wpe) * scale, a dropped one 0. The
// backward reads a gradient already through the mask (model.py: the first LayerNorm's backward applies it).
// p = 0 keeps embedding_forward: the generator never runs.
#include "common.cuh"


extern "C" __global__ void embedding_forward(float* __restrict__ out, const i64* __restrict__ idx,
                                             const float* __restrict__ wte, const float* __restrict__ wpe,
                                             int BT, int T, int C) {
    grid_dependency_entry();
    const i64 n = (i64)BT * C;
    GRID_STRIDE(e, n) {
        const i64 row = e / C;
        const int c = (int)(e - row * C);
        const int t = (int)(row % T);
        out[e] = wte[idx[row] * C + c] + wpe[(i64)t * C + c];
    }
}

// A warp a row (EMB_ROWS rows a block): the row's token, position and first counter once, where
// embedding_forward's grid-stride loop divided each element's 64-bit index. Any C.
#define EMB_ROWS 8

extern "C" __global__ void __launch_bounds__(32 * EMB_ROWS) embedding_dropout_forward(
        float* __restrict__ out, const i64* __restrict__ idx, const float* __restrict__ wte,
        const float* __restrict__ wpe, int N, int T, int C, u64 seed, u64 offset, const u64* __restrict__ offset_add,
        u32 threshold, float scale) {
    grid_dependency_entry();
    const int row = blockIdx.x * EMB_ROWS + (threadIdx.x >> 5), lane = threadIdx.x & 31;
    if (row >= N) return;
    const u64 off = site_offset(offset, offset_add);
    const i64 r0 = (i64)row * C;
    const float* te = wte + idx[row] * C;
    const float* pe = wpe + (i64)(row % T) * C;
    for (int c = lane; c < C; c += 32)
        out[r0 + c] = rng_keep(seed, off, (u64)(r0 + c), threshold) ? (te[c] + pe[c]) * scale : 0.0f;
}

// C % 4 == 0 and 16-byte aligned rows: 16-byte accesses, and each element's pair partner in the same thread, so one
// draw serves two elements (common.cuh's pairs; row * C is even: the row's elements 4q..4q+3 take the counters
// row * C / 2 + 2q and + 2q + 1, two each), where dropout_apply drew for every element.
extern "C" __global__ void __launch_bounds__(32 * EMB_ROWS) embedding_dropout_forward_v4(
        float* __restrict__ out, const i64* __restrict__ idx, const float* __restrict__ wte,
        const float* __restrict__ wpe, int N, int T, int C, u64 seed, u64 offset, const u64* __restrict__ offset_add,
        u32 threshold, float scale) {
    grid_dependency_entry();
    const int row = blockIdx.x * EMB_ROWS + (threadIdx.x >> 5), lane = threadIdx.x & 31;
    if (row >= N) return;
    const u64 first = site_offset(offset, offset_add) + (u64)((i64)row * C >> 1);
    const int C4 = C >> 2;
    const float4* te = (const float4*)(wte + idx[row] * C);
    const float4* pe = (const float4*)(wpe + (i64)(row % T) * C);
    float4* o = (float4*)(out + (i64)row * C);
    for (int q = lane; q < C4; q += 32) {
        const float4 a = te[q], b = pe[q];
        const u64 z0 = rng_draw(seed, first + 2 * q), z1 = rng_draw(seed, first + 2 * q + 1);
        float4 v;
        v.x = rng_field(z0, false) >= threshold ? (a.x + b.x) * scale : 0.0f;
        v.y = rng_field(z0, true) >= threshold ? (a.y + b.y) * scale : 0.0f;
        v.z = rng_field(z1, false) >= threshold ? (a.z + b.z) * scale : 0.0f;
        v.w = rng_field(z1, true) >= threshold ? (a.w + b.w) * scale : 0.0f;
        o[q] = v;
    }
}

// ---- dwte: the stable counting sort of the rows by token, in chunks of EMB_CHUNK rows ----
#define EMB_CHUNK 1024

__device__ __forceinline__ int imin(int a, int b) { return a < b ? a : b; }

// counts[g][v] = rows of chunk g with token v (counts zeroed by the caller)
extern "C" __global__ void embedding_sort_count(int* __restrict__ counts, const i64* __restrict__ idx, int N, int V) {
    grid_dependency_entry();
    const int g = blockIdx.x;
    const int end = imin(N, (g + 1) * EMB_CHUNK);
    for (int r = g * EMB_CHUNK + threadIdx.x; r < end; r += blockDim.x)
        atomicAdd(&counts[(i64)g * V + idx[r]], 1);
}

// total[v] = sum over the chunks of counts[g][v]
extern "C" __global__ void embedding_sort_total(int* __restrict__ total, const int* __restrict__ counts, int G, int V) {
    grid_dependency_entry();
    GRID_STRIDE(v, V) {
        int s = 0;
        for (int g = 0; g < G; g++) s += counts[(i64)g * V + v];
        total[v] = s;
    }
}

// starts[v] = sum_{u < v} total[u], starts[V] = N (integers: the same result in any order). One block, in rounds of
// SCAN_ROUND tokens: the round's counts come in coalesced (thread t reads tokens t, t + SCAN_THREADS, ...) into
// shared memory, each thread scans SCAN_RUN consecutive tokens there, the block scans the run sums (a warp's by
// shuffles, then the warps' totals), and the starts go out the way the counts came in. The next round's loads are
// issued before this round's scan, so the block waits on one load latency, not one a round. (A thread walking a
// run of V / 1024 tokens instead, as the first form did, waits on 50 dependent uncoalesced loads twice on the GPT-2
// vocabulary: 76 us a step.) Every round writes its shared arrays after the previous round's reads (its last sync).
#define SCAN_THREADS 1024
#define SCAN_RUN 8
#define SCAN_ROUND (SCAN_THREADS * SCAN_RUN)
static_assert(SCAN_THREADS == 1024, "the warp totals' scan: one warp of 32 warp totals");

// a run's SCAN_RUN consecutive tokens fall in SCAN_RUN distinct banks across a warp: one pad word every 32
__device__ __forceinline__ int scan_slot(int p) { return p + p / 32; }

extern "C" __global__ void __launch_bounds__(SCAN_THREADS) embedding_sort_scan(int* __restrict__ starts,
                                                                                const int* __restrict__ total, int V) {
    grid_dependency_entry();
    __shared__ int round_counts[SCAN_ROUND + SCAN_ROUND / 32];
    __shared__ int warp_sums[SCAN_THREADS / 32];
    const int t = threadIdx.x, lane = t & 31, warp = t >> 5;
    int loaded[SCAN_RUN];
    auto load = [&](int first) {
#pragma unroll
        for (int k = 0; k < SCAN_RUN; k++) {
            const int v = first + t + k * SCAN_THREADS;
            loaded[k] = v < V ? total[v] : 0;
        }
    };
    load(0);
    int carry = 0;   // the tokens of the rounds before
    for (int first = 0; first <= V; first += SCAN_ROUND) {   // through token V, whose start is N
#pragma unroll
        for (int k = 0; k < SCAN_RUN; k++) round_counts[scan_slot(t + k * SCAN_THREADS)] = loaded[k];
        if (first + SCAN_ROUND <= V) load(first + SCAN_ROUND);
        __syncthreads();
        int before[SCAN_RUN], run = 0;   // the run's exclusive scan, and its sum
#pragma unroll
        for (int i = 0; i < SCAN_RUN; i++) {
            before[i] = run;
            run += round_counts[scan_slot(t * SCAN_RUN + i)];
        }
        int upto = run;   // the warp's runs up to this thread's, inclusive
#pragma unroll
        for (int off = 1; off < 32; off <<= 1) {
            const int y = __shfl_up_sync(~0u, upto, off);
            if (lane >= off) upto += y;
        }
        if (lane == 31) warp_sums[warp] = upto;
        __syncthreads();
        if (warp == 0) {
            int w = warp_sums[lane];
#pragma unroll
            for (int off = 1; off < 32; off <<= 1) {
                const int y = __shfl_up_sync(~0u, w, off);
                if (lane >= off) w += y;
            }
            warp_sums[lane] = w;
        }
        __syncthreads();
        const int base = carry + (warp > 0 ? warp_sums[warp - 1] : 0) + upto - run;
#pragma unroll
        for (int i = 0; i < SCAN_RUN; i++) round_counts[scan_slot(t * SCAN_RUN + i)] = base + before[i];
        carry += warp_sums[SCAN_THREADS / 32 - 1];
        __syncthreads();
#pragma unroll
        for (int k = 0; k < SCAN_RUN; k++) {
            const int v = first + t + k * SCAN_THREADS;
            if (v <= V) starts[v] = round_counts[scan_slot(t + k * SCAN_THREADS)];
        }
        __syncthreads();
    }
}

// counts[g][v] becomes the first sorted position of chunk g's rows of token v
extern "C" __global__ void embedding_sort_base(int* __restrict__ counts, const int* __restrict__ starts, int G, int V) {
    grid_dependency_entry();
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
    grid_dependency_entry();
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

// dwte[v, c] += the sum of dout[row, c] over token v's rows. The sorted positions are cut into segments of
// WTE_SEG; a block takes one segment and a slice of blockDim.x channels (a thread a channel, so each row's loads
// coalesce) and issues all its segment's loads before its first add: WTE_SEG rows in flight a thread, where a
// loop along one run waits on each load in turn. Why segments: the char model has 65 tokens, so a token's run is
// ~250 rows; one block a run start (the previous form) left 65 x 3 blocks each walking a whole run: 302 us a step
// on the H200 (nanogpt, results/h200-perf-20261201b/call1-7751049), 179 us on gpt2-small. (Before that, a grid
// over the vocabulary started ~300,000 blocks a step, nearly all for absent tokens: 294 us on gpt2-small.)
// The summation order depends on the sorted order and the segment edges alone, never on scheduling:
//  - a run's rows within one segment are added one after another, in sorted (row) order;
//  - a run inside one segment adds that sum to dwte at once (its only writer);
//  - a run crossing a segment edge leaves one partial in each of its segments (slot 0: the piece at the
//    segment's first position; slot 1: a run that starts inside the segment and leaves it), and the last of its
//    blocks to finish adds its partials in segment order, then that sum to dwte. Which block is last depends on
//    scheduling (an integer count of arrivals, one per run and channel slice, at the run's last segment); what
//    it adds, and in which order, does not. The combine rides in this kernel because a second kernel would add
//    a launch gap to the step's graph (1-3 us) for a few us of work.
// tests/test_embedding_wte_cpu.py transcribes this kernel to NumPy.
//
// embedding_backward_wte_sums (ADD false) writes each present token's sum alone, sums[v, c] = that sum, where
// embedding_backward_wte adds it to dwte[v, c]: the same adds in the same order, the last one left to the reader.
// Why: the tied wte's gradient is lm_head's dW (the half type under half roundings) plus these sums; the readers (the
// global norm, AdamW: tensors.py's tied rows) widen dW and add sums[v] where token v is present (starts[v + 1] >
// starts[v]), the float32 add this kernel would have made, so the same bits; the widening pass over the whole
// [V, C] (cast.cu, 60 us a step of gpt2-small, call 4 of results/h200-perf-20261204g) and its float32 copy's
// reads go. sums' rows of absent tokens are never written nor read.
#define WTE_SEG 32   // one warp: its ballots give the segment's piece ends as bit masks
static_assert(WTE_SEG == 32, "embedding_backward_wte's first warp describes the segment in 32-bit masks");

template <bool ADD>
__device__ __forceinline__ void wte_backward_body(float* __restrict__ dwte, float* __restrict__ part,
                                                  int* __restrict__ arrived, const float* __restrict__ dout,
                                                  const int* __restrict__ sorted, const int* __restrict__ starts,
                                                  const i64* __restrict__ idx, int N, int C) {
    __shared__ int row[WTE_SEG], tok[WTE_SEG];
    __shared__ unsigned ends[3];  // bit r: a piece ends at position r; it is a whole run; it goes to slot 1
    __shared__ int cross_tok[2], cross_lo[2], cross_hi[2];  // the runs in slots 0 and 1 (token -1: none)
    __shared__ int combine[2];                              // whether this block adds up that run's partials
    const int s = blockIdx.x, k0 = s * WTE_SEG, n = imin(WTE_SEG, N - k0), t = threadIdx.x;
    if (t < WTE_SEG) {
        int r = 0, v = 0, lo = 0, hi = 0;
        if (t < n) {
            r = sorted[k0 + t];
            v = (int)idx[r];
            lo = starts[v], hi = starts[v + 1];
            if (t == 0) cross_tok[0] = lo < k0 || hi > k0 + n ? v : -1, cross_lo[0] = lo, cross_hi[0] = hi;
            if (t == n - 1) cross_tok[1] = lo > k0 && hi > k0 + n ? v : -1, cross_lo[1] = lo, cross_hi[1] = hi;
        }
        const bool end = t < n && (k0 + t + 1 == hi || t == n - 1);
        const unsigned e = __ballot_sync(~0u, end), w = __ballot_sync(~0u, end && lo >= k0 && hi <= k0 + n),
                       e1 = __ballot_sync(~0u, end && lo > k0 && hi > k0 + n);
        if (t == 0) ends[0] = e, ends[1] = w, ends[2] = e1;
        row[t] = r, tok[t] = v;
    }
    __syncthreads();
    const unsigned end = ends[0], whole = ends[1], second = ends[2];
    const int c = blockIdx.y * blockDim.x + t;
    const bool on = c < C;
    float x[WTE_SEG], d[WTE_SEG];
#pragma unroll
    for (int r = 0; r < WTE_SEG; r++) {
        x[r] = on && r < n ? dout[(i64)row[r] * C + c] : 0.0f;
        d[r] = ADD && on && (whole >> r & 1) ? dwte[(i64)tok[r] * C + c] : 0.0f;
    }
    float acc = 0.0f;
#pragma unroll
    for (int r = 0; r < WTE_SEG; r++) {
        acc += x[r];
        if (!(end >> r & 1)) continue;
        if (on) {
            if (whole >> r & 1) dwte[(i64)tok[r] * C + c] = ADD ? d[r] + acc : acc;
            else part[((i64)s * 2 + (second >> r & 1)) * C + c] = acc;
        }
        acc = 0.0f;
    }
    if (cross_tok[0] < 0 && cross_tok[1] < 0) return;   // the whole block: shared values
    __threadfence();   // this block's partials reach the other blocks before its arrival is counted
    __syncthreads();
    if (t < 2) {
        int last = 0;
        if (cross_tok[t] >= 0) {
            const int sa = cross_lo[t] / WTE_SEG, sb = (cross_hi[t] - 1) / WTE_SEG;
            last = atomicAdd(&arrived[sb * gridDim.y + blockIdx.y], 1) == sb - sa;
            __threadfence();
        }
        combine[t] = last;
    }
    __syncthreads();
    for (int p = 0; p < 2; p++) {
        if (!combine[p] || !on) continue;
        const int lo = cross_lo[p], sa = lo / WTE_SEG, sb = (cross_hi[p] - 1) / WTE_SEG;
        float sum = __ldcg(&part[((i64)sa * 2 + (lo > sa * WTE_SEG)) * C + c]);   // L2, not a stale L1 line
#pragma unroll 4
        for (int q = sa + 1; q <= sb; q++) sum += __ldcg(&part[(i64)q * 2 * C + c]);
        if (ADD) dwte[(i64)cross_tok[p] * C + c] += sum;
        else dwte[(i64)cross_tok[p] * C + c] = sum;
    }
}

extern "C" __global__ void embedding_backward_wte(float* __restrict__ dwte, float* __restrict__ part,
                                                  int* __restrict__ arrived, const float* __restrict__ dout,
                                                  const int* __restrict__ sorted, const int* __restrict__ starts,
                                                  const i64* __restrict__ idx, int N, int C) {
    grid_dependency_entry();
    wte_backward_body<true>(dwte, part, arrived, dout, sorted, starts, idx, N, C);
}

extern "C" __global__ void embedding_backward_wte_sums(float* __restrict__ sums, float* __restrict__ part,
                                                       int* __restrict__ arrived, const float* __restrict__ dout,
                                                       const int* __restrict__ sorted, const int* __restrict__ starts,
                                                       const i64* __restrict__ idx, int N, int C) {
    grid_dependency_entry();
    wte_backward_body<false>(sums, part, arrived, dout, sorted, starts, idx, N, C);
}

// dwpe[t, c] += sum_b dout[b, t, c]
extern "C" __global__ void embedding_backward_wpe(float* __restrict__ dwpe, const float* __restrict__ dout,
                                                  int B, int T, int C) {
    grid_dependency_entry();
    const i64 n = (i64)T * C;
    GRID_STRIDE(e, n) {
        float s = 0.0f;
        for (int b = 0; b < B; b++) s += dout[(i64)b * T * C + e];
        dwpe[e] += s;
    }
}
