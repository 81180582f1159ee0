// common.cuh: helpers shared by the cupy side's kernels (pasted into each kernel file by
// tr2.cupy_side.gpu.load_source, so that CuPy's compile cache sees every byte it compiles).
//
// Element kinds used by the kernels' template parameters and the Python wrappers:
//   0 = float32, 1 = bfloat16 (held as unsigned short bits), 2 = float16 (unsigned short bits).
// Conversions to the half types round to nearest even (PTX cvt.rn), never through fast math.
#pragma once

typedef unsigned short u16;
typedef unsigned int u32;
typedef unsigned long long u64;
typedef long long i64;

#define NEG_INF __int_as_float(0xff800000)

// Every kernel's first statement (programmatic dependent launch: gpu/pdl.py). Its blocks wait until the kernel before
// it in the stream has finished and its writes are visible, then let the kernel after it be scheduled, whose blocks
// wait here in turn: nothing is read or written before its inputs are complete. A kernel launched the plain way has
// nothing to wait for (the stream already ordered it), and then both instructions do nothing.
__device__ __forceinline__ void grid_dependency_entry() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;" ::: "memory");
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

#define KIND_F32 0
#define KIND_BF16 1
#define KIND_F16 2

__device__ __forceinline__ float bf16_bits_to_f32(u16 h) { return __uint_as_float(((u32)h) << 16); }

__device__ __forceinline__ u16 f32_to_bf16_bits(float f) {
    u16 h;
    asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(h) : "f"(f));
    return h;
}

__device__ __forceinline__ float f16_bits_to_f32(u16 h) {
    float f;
    asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h));
    return f;
}

__device__ __forceinline__ u16 f32_to_f16_bits(float f) {
    u16 h;
    asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(f));
    return h;
}

// Two float32 values as one register of half type K (KIND_BF16 or KIND_F16), x0 in the low 16 bits, rounded to
// nearest even by one cvt: the same bits as f32_to_bf16_bits / f32_to_f16_bits of each.
template <int K> __device__ __forceinline__ u32 pack2(float x0, float x1) {
    u32 r;
    if constexpr (K == KIND_BF16) asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(x1), "f"(x0));
    else asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(x1), "f"(x0));
    return r;
}

// Round a float32 to the half type `kind` and back (kind 0: unchanged).
__device__ __forceinline__ float round_to_kind(float x, int kind) {
    if (kind == KIND_BF16) return bf16_bits_to_f32(f32_to_bf16_bits(x));
    if (kind == KIND_F16) return f16_bits_to_f32(f32_to_f16_bits(x));
    return x;
}

// Storage of one element of kind K: float for 0, 16-bit bits for 1 and 2.
template <int K> struct Elem { typedef u16 T; };
template <> struct Elem<KIND_F32> { typedef float T; };

template <int K> __device__ __forceinline__ typename Elem<K>::T store_as(float x);
template <> __device__ __forceinline__ float store_as<KIND_F32>(float x) { return x; }
template <> __device__ __forceinline__ u16 store_as<KIND_BF16>(float x) { return f32_to_bf16_bits(x); }
template <> __device__ __forceinline__ u16 store_as<KIND_F16>(float x) { return f32_to_f16_bits(x); }

template <int K> __device__ __forceinline__ float load_from(typename Elem<K>::T x);
template <> __device__ __forceinline__ float load_from<KIND_F32>(float x) { return x; }
template <> __device__ __forceinline__ float load_from<KIND_BF16>(u16 x) { return bf16_bits_to_f32(x); }
template <> __device__ __forceinline__ float load_from<KIND_F16>(u16 x) { return f16_bits_to_f32(x); }

__device__ __forceinline__ float warp_sum(float v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

__device__ __forceinline__ float warp_max(float v) {
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

// Sum over a whole block (blockDim.x a multiple of 32, at most 1024); every thread gets the result.
// `shared` holds at least 32 floats. Deterministic: fixed reduction tree.
__device__ __forceinline__ float block_sum(float v, float* shared) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = blockDim.x >> 5;
    v = warp_sum(v);
    __syncthreads();
    if (lane == 0) shared[warp] = v;
    __syncthreads();
    float t = (lane < nwarps) ? shared[lane] : 0.0f;
    return warp_sum(t);
}

__device__ __forceinline__ float block_max(float v, float* shared) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = blockDim.x >> 5;
    v = warp_max(v);
    __syncthreads();
    if (lane == 0) shared[warp] = v;
    __syncthreads();
    float t = (lane < nwarps) ? shared[lane] : NEG_INF;
    return warp_max(t);
}

// The dropout generator of docs/architecture.md, identical to tr2.cupy_side.rng. Elements 2c and 2c + 1 of a
// site share counter offset + c:
//   x = seed + (offset + (i >> 1)) * 0x9E3779B97F4A7C15 (mod 2^64)
//   z = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9; z = (z ^ (z >> 27)) * 0x94D049BB133111EB; z ^= z >> 31
//   k = z >> 40 (bits 40..63) for even i, (z >> 16) & 0xFFFFFF (bits 16..39) for odd i
//   u = k * 2^-24; kept when u >= p.
// Why pairs: the three 64-bit multiplies (several instructions each) were a large part of the char model's
// attention, which draws for every score in the forward and again in the backward (it regenerates the
// mask). A kernel that holds both elements of a pair draws once: z = rng_draw(seed, offset + c), then
// rng_field(z, false) and rng_field(z, true) for elements 2c and 2c + 1 (attention.cu). rng_bits24 gives any
// single element, so a kernel that handles elements one by one stays correct as it is.
// The kernels compare the 24-bit integer k with an integer threshold computed on the host
// (`threshold`, the least k with k * 2^-24 >= p), which is the same test without any float rounding.
// `offset_add` (nullable, device memory) is added to `offset`: a whole-step CUDA graph can advance the
// step's offsets on the device without re-capturing.
__device__ __forceinline__ u64 rng_draw(u64 seed, u64 counter) {
    u64 x = seed + counter * 0x9E3779B97F4A7C15ull;
    u64 z = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    return z;
}

// Element i's 24 bits of its counter's draw z: the high field for even i, the one below it for odd i.
__device__ __forceinline__ u32 rng_field(u64 z, bool odd) {
    return odd ? (u32)(z >> 16) & 0xFFFFFFu : (u32)(z >> 40);
}

// rng_field(z, i & 1), taken from z's 32-bit halves: with the parity known only at run time this form kept
// residual_layernorm_backward at its 40 registers (46 with rng_field's 64-bit shifts: fewer warps an SM).
__device__ __forceinline__ u32 rng_bits24(u64 seed, u64 offset, u64 i) {
    const u64 z = rng_draw(seed, offset + (i >> 1));
    const u32 hi = (u32)(z >> 32), lo = (u32)z;
    return (i & 1) ? (hi << 16 | lo >> 16) & 0xFFFFFFu : hi >> 8;
}

__device__ __forceinline__ u64 site_offset(u64 offset, const u64* offset_add) {
    return offset_add ? offset + offset_add[0] : offset;
}

__device__ __forceinline__ bool rng_keep(u64 seed, u64 offset, u64 i, u32 threshold) {
    return rng_bits24(seed, offset, i) >= threshold;
}

// The multi-tensor table of adamw.cu and global_norm.cu (gpu/tensors.py writes it): one row of TENSOR_COLS u64
// per tensor = (param, grad, m, v, numel, decay flag, half copy, grad kind, sums, starts, row width); a null
// pointer (0) where a column has no tensor. grad kind: the gradient's element type (KIND_F32, or KIND_BF16 / KIND_F16
// bits: a product's dW under half roundings, read as it was written instead of widened by a kernel of its own), with
// KIND_TIED added for the tied wte's gradient: grad is lm_head's dW in that half type, and element i of the gradient
// is TiedRows::add of it (sums, starts and the row width are read for these rows only).
#define TENSOR_COLS 11
#define KIND_TIED 4

// The tied wte's gradient at element i of row v = i / C: dW widened, plus sums[i] where token v is in the batch
// (starts[v + 1] > starts[v]: embedding.cu's sort), the one float32 add embedding_backward_wte makes there; the
// rows of absent tokens are dW alone (their sums are never written). `v`: the caller's row of i, kept by RowWalk.
struct TiedRows {
    const float* sums;
    const int* starts;
    __device__ __forceinline__ bool present(int v) const { return __ldg(starts + v + 1) > __ldg(starts + v); }
    __device__ __forceinline__ float add(float x, i64 i, int v) const {
        return present(v) ? __fadd_rn(x, __ldg(sums + i)) : x;
    }
};

// The row of index i of a [rows, C] array as i advances by a fixed step: one division at the start, then a
// subtraction or a few (the row widths here are 384-1024 and a thread's step 256 or 1024 elements).
struct RowWalk {
    int v, r, C;
    __device__ __forceinline__ RowWalk(i64 i, int C_) : v((int)(i / C_)), r((int)(i - (i / C_) * C_)), C(C_) {}
    __device__ __forceinline__ void advance(int step) {
        r += step;
        while (r >= C) { r -= C; ++v; }
    }
};

// A grid-stride loop over n elements: the element kernels launch a capped grid (runtime.MAX_BLOCKS).
#define GRID_STRIDE(i, n) for (i64 i = (i64)blockIdx.x * blockDim.x + threadIdx.x; i < (n); i += (i64)gridDim.x * blockDim.x)

// Element i of an activation held in `kind` (0 float32, 1 bfloat16 bits, 2 float16 bits), as float32, and
// the store back. The half builds hand half-type activations between kernels where the consumer reads the
// half type anyway (a product's operand) or where the producer's output is rounded to it (half roundings).
__device__ __forceinline__ float load_kind(const void* p, i64 i, int kind) {
    if (kind == KIND_F32) return ((const float*)p)[i];
    const u16 h = ((const u16*)p)[i];
    return kind == KIND_BF16 ? bf16_bits_to_f32(h) : f16_bits_to_f32(h);
}

__device__ __forceinline__ void store_kind(void* p, i64 i, float v, int kind) {
    if (kind == KIND_F32) ((float*)p)[i] = v;
    else ((u16*)p)[i] = (kind == KIND_BF16) ? f32_to_bf16_bits(v) : f32_to_f16_bits(v);
}
