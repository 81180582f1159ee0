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

// out = in rounded to the half type `kind` and back to float32 (out may be in).
extern "C" __global__ void round_f32(float* out, const float* in, i64 n, int kind) {
    grid_dependency_entry();
    GRID_STRIDE(i, n) out[i] = round_to_kind(in[i], kind);
}
