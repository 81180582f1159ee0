// dropout.cu: dropout forward and backward with the counter-based generator of common.cuh
// (bit-identical masks to tr2.cupy_side.rng). Element i of the site is kept when
// rng_bits24(seed, offset, i) >= threshold; kept elements are multiplied by `scale` = 1/(1-p).
#include "common.cuh"


// y = x * mask * scale. Used for the forward (x) and the backward (dy): the same mask.
// x in x_kind (a product's half-type output under half roundings), y float32.
extern "C" __global__ void dropout_apply(float* __restrict__ y, const void* __restrict__ x, i64 n,
                                         u64 seed, u64 offset, const u64* __restrict__ offset_add,
                                         u32 threshold, float scale, int x_kind) {
    grid_dependency_entry();
    const u64 off = site_offset(offset, offset_add);
    GRID_STRIDE(i, n) y[i] = rng_keep(seed, off, (u64)i, threshold) ? load_kind(x, i, x_kind) * scale : 0.0f;
}

// The mask itself (1 kept, 0 dropped), for tests and tools.
extern "C" __global__ void dropout_mask(unsigned char* __restrict__ mask, i64 n, u64 seed, u64 offset,
                                        const u64* __restrict__ offset_add, u32 threshold) {
    grid_dependency_entry();
    const u64 off = site_offset(offset, offset_add);
    GRID_STRIDE(i, n) mask[i] = rng_keep(seed, off, (u64)i, threshold) ? 1 : 0;
}

// The generator's raw 24-bit draws, for tests against rng.py.
extern "C" __global__ void dropout_bits(u32* __restrict__ bits, i64 n, u64 seed, u64 offset) {
    grid_dependency_entry();
    GRID_STRIDE(i, n) bits[i] = rng_bits24(seed, offset, (u64)i);
}
