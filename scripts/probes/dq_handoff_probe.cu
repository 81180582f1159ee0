// The handoff a chained dQ would make between two blocks (docs/perf.md, sixty-first session: scripts/probes/
// dq_chain_sim.py shows that such a fold pays only where one handoff costs under about one query tile's dK/dV work,
// ~2 us on an H100): a 64 x 64 float32 tile (16 KB, one query tile's dQ accumulator) passed back and forth between the
// two blocks of a pair, each adding 1 to every element before passing it on, a flag in its own 128-byte line saying
// whose turn it is. One hop: the holder's stores, its release of the flag, the other's acquire (a spin of one thread),
// its loads. `bulk` 0: the tile stored and loaded by the block's 256 threads (16 floats each, coalesced); 1: staged
// in shared memory and moved by the copy engine (cp.async.bulk to and from global, the completion awaited before the
// flag goes up), as a TMA-based kernel would. Thread 0 of the pair's first block reads %globaltimer around the whole
// exchange; the host divides by the hops. A spin that lasts past SPIN_LIMIT polls stops the block and counts in
// `stuck` (a missed turn must not hang the probe).
#define SPIN_LIMIT (1u << 26)

typedef unsigned long long u64;
typedef unsigned int u32;

__device__ __forceinline__ u64 globaltimer() {
    u64 t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}

__device__ __forceinline__ int ld_acquire(const int* p) {
    int v;
    asm volatile("ld.acquire.gpu.global.b32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
    return v;
}

__device__ __forceinline__ void st_release(int* p, int v) {
    asm volatile("st.release.gpu.global.b32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}

__device__ __forceinline__ u32 smem_u32(const void* p) { return (u32)__cvta_generic_to_shared(p); }

extern "C" __global__ void __launch_bounds__(256) handoff(float* __restrict__ bufs, int* __restrict__ flags,
                                                          int iters, int bulk, u64* __restrict__ elapsed,
                                                          int* __restrict__ stuck) {
    __shared__ __align__(128) float stile[64 * 64];
    __shared__ __align__(8) u64 bar;
    __shared__ int give_up;
    const int pair = blockIdx.x >> 1, side = blockIdx.x & 1;
    float* buf = bufs + (size_t)pair * 4096;
    int* flag = flags + pair * 32;
    if (threadIdx.x == 0) {
        give_up = 0;
        asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(smem_u32(&bar)) : "memory");
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    }
    __syncthreads();
    float v[16];
#pragma unroll
    for (int e = 0; e < 16; ++e) v[e] = 0.0f;
    u64 t0 = 0;
    if (threadIdx.x == 0) t0 = globaltimer();
    u32 phase = 0;
    for (int i = 0; i < iters; ++i) {
        const int turn = 2 * i + side;   // the first block's turns are even, the second's odd
        if (threadIdx.x == 0) {
            u32 spins = 0;
            while (ld_acquire(flag) != turn)
                if (++spins == SPIN_LIMIT) {
                    give_up = 1;
                    atomicAdd(stuck, 1);
                    break;
                }
        }
        __syncthreads();
        if (give_up) return;
        if (turn > 0) {   // turn 0 starts from zeros
            if (bulk) {
                if (threadIdx.x == 0) {
                    asm volatile("fence.proxy.async.global;" ::: "memory");   // the acquire, then the copy engine's read
                    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], 16384;" ::"r"(smem_u32(&bar))
                                 : "memory");
                    asm volatile(
                        "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], 16384, [%2];" ::
                            "r"(smem_u32(stile)), "l"(buf), "r"(smem_u32(&bar))
                        : "memory");
                }
                u32 done = 0;
                while (!done)
                    asm volatile(
                        "{ .reg .pred p; mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2; selp.u32 %0, 1, 0, p; }"
                        : "=r"(done)
                        : "r"(smem_u32(&bar)), "r"(phase)
                        : "memory");
                phase ^= 1;
#pragma unroll
                for (int e = 0; e < 16; ++e) v[e] = stile[threadIdx.x + 256 * e];
            } else {
#pragma unroll
                for (int e = 0; e < 16; ++e) v[e] = buf[threadIdx.x + 256 * e];
            }
        }
#pragma unroll
        for (int e = 0; e < 16; ++e) v[e] += 1.0f;
        if (bulk) {
            __syncthreads();   // every thread has read the staged tile before it is written over
#pragma unroll
            for (int e = 0; e < 16; ++e) stile[threadIdx.x + 256 * e] = v[e];
            asm volatile("fence.proxy.async.shared::cta;" ::: "memory");   // the stores, seen by the copy engine
            __syncthreads();
            if (threadIdx.x == 0) {
                asm volatile("cp.async.bulk.global.shared::cta.bulk_group [%0], [%1], 16384;" ::"l"(buf),
                             "r"(smem_u32(stile))
                             : "memory");
                asm volatile("cp.async.bulk.commit_group;" ::: "memory");
                asm volatile("cp.async.bulk.wait_group 0;" ::: "memory");
                asm volatile("fence.proxy.async.global;" ::: "memory");
                st_release(flag, turn + 1);
            }
        } else {
#pragma unroll
            for (int e = 0; e < 16; ++e) buf[threadIdx.x + 256 * e] = v[e];
            __syncthreads();
            if (threadIdx.x == 0) {
                __threadfence();
                st_release(flag, turn + 1);
            }
        }
    }
    if (threadIdx.x == 0 && side == 0) {   // the last hop back counted too: 2 iters hops in all
        u32 spins = 0;
        while (ld_acquire(flag) != 2 * iters)
            if (++spins == SPIN_LIMIT) {
                atomicAdd(stuck, 1);
                break;
            }
        elapsed[pair] = globaltimer() - t0;
    }
}
