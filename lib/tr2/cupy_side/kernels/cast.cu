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

// The widening casts eight elements a thread a loop turn: one 16-byte load, two 16-byte stores (in and out 16-byte
// aligned; the wrapper checks), the last n % 8 elements one a thread after the loop. Each element converts exactly
// as above, so the same bits. Why: the one widening left in a half-roundings step (the tied wte's dW from the
// lm_head product, before the embedding's backward adds into it: 38.6M elements on the GPT-2 shapes) ran at 3.5 TB/s
// in bf16 and 2.5 in f16 (65 and 91 us, call 2 of results/h200-perf-20261204g), a 2-byte load an element.
template <int K>
__device__ __forceinline__ void widen_wide(float* __restrict__ out, const u16* __restrict__ in, i64 n) {
    const i64 nv = n >> 3;
    const uint4* in8 = (const uint4*)in;
    float4* out4 = (float4*)out;
#pragma unroll 2
    GRID_STRIDE(v, nv) {
        const uint4 w = __ldg(in8 + v);
        out4[2 * v] = make_float4(load_from<K>((u16)(w.x & 0xffffu)), load_from<K>((u16)(w.x >> 16)),
                                  load_from<K>((u16)(w.y & 0xffffu)), load_from<K>((u16)(w.y >> 16)));
        out4[2 * v + 1] = make_float4(load_from<K>((u16)(w.z & 0xffffu)), load_from<K>((u16)(w.z >> 16)),
                                      load_from<K>((u16)(w.w & 0xffffu)), load_from<K>((u16)(w.w >> 16)));
    }
    const i64 i = (nv << 3) + (i64)blockIdx.x * blockDim.x + threadIdx.x;
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
