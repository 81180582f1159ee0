// cast.cu: conversions between float32 and the half types, rounding to nearest even.
// The products read their inputs through these (bf16 and fp16 held as 16-bit buffers).
#include "common.cuh"


extern "C" __global__ void cast_f32_to_bf16(u16* __restrict__ out, const float* __restrict__ in, i64 n) {
    grid_dependency_entry();
    GRID_STRIDE(i, n) out[i] = f32_to_bf16_bits(in[i]);
}

extern "C" __global__ void cast_f32_to_f16(u16* __restrict__ out, const float* __restrict__ in, i64 n) {
    grid_dependency_entry();
    GRID_STRIDE(i, n) out[i] = f32_to_f16_bits(in[i]);
}

extern "C" __global__ void cast_bf16_to_f32(float* __restrict__ out, const u16* __restrict__ in, i64 n) {
    grid_dependency_entry();
    GRID_STRIDE(i, n) out[i] = bf16_bits_to_f32(in[i]);
}

extern "C" __global__ void cast_f16_to_f32(float* __restrict__ out, const u16* __restrict__ in, i64 n) {
    grid_dependency_entry();
    GRID_STRIDE(i, n) out[i] = f16_bits_to_f32(in[i]);
}

// The widening casts four elements a load: an 8-byte load, one 16-byte store (in and out 16-byte aligned; the wrapper
// checks), four such loads a thread issued before their stores, the last n % 4 elements one a thread after the loops.
// Each element converts exactly as above, so the same bits. Why: the one widening left in a half-roundings step (the
// tied wte's dW from the lm_head product, before the embedding's backward adds into it: 38.6M elements on the GPT-2
// shapes) ran at 3.5 TB/s in bf16 and 2.5 in f16 (65 and 91 us, call 2 of results/h200-perf-20261204g), one 2-byte
// load an element. (A first form, eight elements a thread into two 16-byte stores, was slower in bf16, 66 -> 86 us,
// call 3: a warp's store then wrote every other 16 bytes of 1 KB, half of each 32-byte sector.)
template <int K> __device__ __forceinline__ float4 widen4(uint2 w) {
    return make_float4(load_from<K>((u16)(w.x & 0xffffu)), load_from<K>((u16)(w.x >> 16)),
                       load_from<K>((u16)(w.y & 0xffffu)), load_from<K>((u16)(w.y >> 16)));
}

template <int K>
__device__ __forceinline__ void widen_wide(float* __restrict__ out, const u16* __restrict__ in, i64 n) {
    const i64 nv = n >> 2, stride = (i64)gridDim.x * blockDim.x;
    const uint2* in4 = (const uint2*)in;
    float4* out4 = (float4*)out;
    i64 v = (i64)blockIdx.x * blockDim.x + threadIdx.x;
    for (; v + 3 * stride < nv; v += 4 * stride) {
        uint2 w[4];
#pragma unroll
        for (int k = 0; k < 4; ++k) w[k] = __ldg(in4 + v + k * stride);
#pragma unroll
        for (int k = 0; k < 4; ++k) out4[v + k * stride] = widen4<K>(w[k]);
    }
    for (; v < nv; v += stride) out4[v] = widen4<K>(__ldg(in4 + v));
    const i64 i = (nv << 2) + (i64)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = load_from<K>(in[i]);
}

extern "C" __global__ void cast_bf16_to_f32_wide(float* __restrict__ out, const u16* __restrict__ in, i64 n) {
    grid_dependency_entry();
    widen_wide<KIND_BF16>(out, in, n);
}

extern "C" __global__ void cast_f16_to_f32_wide(float* __restrict__ out, const u16* __restrict__ in, i64 n) {
    grid_dependency_entry();
    widen_wide<KIND_F16>(out, in, n);
}

// out = in rounded to the half type `kind` and back to float32 (out may be in).
extern "C" __global__ void round_f32(float* out, const float* in, i64 n, int kind) {
    grid_dependency_entry();
    GRID_STRIDE(i, n) out[i] = round_to_kind(in[i], kind);
}

// A float32 array set to one value (the loss's dloss where it is a number: gpu/cross_entropy.py). CuPy's fill()
// compiles an elementwise kernel of its own with NVRTC at run time (cupy_fill, named by tests/test_nvrtc_gpu.py on
// the H200: results/h200-perf-20261205/call2-tied-ca4cf49), and a training run is to compile nothing (issue 9 item 4).
extern "C" __global__ void fill_f32(float* __restrict__ out, float value, i64 n) {
    grid_dependency_entry();
    GRID_STRIDE(i, n) out[i] = value;
}
