// gelu.cu: exact (erf) GELU, forward and backward. erff/expf are the IEEE-accurate library forms
// (no fast math).
// Eight elements a thread and iteration, each array read and written in 16-byte pieces (one uint4 of half
// bits, two float4 of float32): the element-at-a-time form with a kind test per element ran at about a third
// of the memory's speed on the H200 (gelu_backward 107 us a layer of gpt2-small bf16, call 4's profile).
// The arithmetic per element is unchanged. The last n % 8 elements go one a thread.
//
// By table: bfloat16 (gelu_forward_bf16_table, gelu_backward_bf16_table). The computing kernels are bound by issuing
// the exact erf (Nsight Compute, gpt2-small's c_fc in bf16: forward 33.7 us at 34 instructions an element, SM 77%,
// DRAM 50%; backward 53.0 us at 49, SM 71%, DRAM 54%), not by memory. A half input has 65536 codes, and what the
// computing kernels make of one depends on the code alone: the forward's half output, and the backward's t = cdf +
// x pdf, which gelu_grad multiplies by dy (dx = dy * t, one rounded multiply). So a table per code, looked up in
// shared memory, gives their bits at a few integer instructions an element, and the kernels run at the memory's speed
// instead.
//   Which codes: 2^-24 <= |x| < 16, biased exponents GELU_TABLE_EXP_LOW..GELU_TABLE_EXP_END-1, both signs: 7168
// codes, a u16 table of 14 KB (forward) and a float32 table of 28 KB (backward), small enough for three blocks an SM.
// Every other code (zero, tiny and large magnitudes, inf, NaN: rare among activations) takes the computing path,
// gelu() / gelu_grad() inline: a group of eight with any such code is computed whole (its tabulated codes too, to
// the same bits).
//   The index (gelu_table_index): the code rotated left by one bit, (exponent << 8) | (mantissa << 1) | sign, less
// the lowest tabulated exponent shifted alike. Unsigned, so a code below the range wraps past its end: one compare
// with the table's size tests both ends.
//   The tables are the computing kernels' own outputs (gpu/gelu.py builds them once a device, eagerly, before any
// capture): gelu_forward on the tabulated codes gives the forward table, gelu_backward with dy = 1 in float32 (1 * t
// is t) and a float32 dx gives t. Nothing is computed on the host, so the table carries those kernels' bits, and
// dy * t here is the multiply gelu_grad does.
//   Launch shape: each block copies its table into shared memory once, so the grid is persistent (a fixed number
// of blocks an SM over a grid-stride loop): 396 blocks on an H200 copy 11 MB of tables from L2 where the
// 4224-block grid of the computing kernels would copy 118 MB, as much as the 150 MB a backward of gpt2-small moves.
// The tables sit in static shared memory, GELU_TABLE_BLOCKS_PER_SM (3) blocks an SM.
//   Where it applies: bfloat16 activations, i.e. the bfloat16 build with half roundings (without them the products
// hand GELU float32). float32 keeps the computing kernels, whose arithmetic is what it was before the table kernels
// were added; they stay the reference the table kernels are tested against.
//   Within an ulp: float16 (gelu_forward_f16_fast, gelu_backward_f16_fast; TR2_GELU_F16_FAST=1, float16's default
// since the thirtieth session, calls 8-11 of results/h200-perf-20261204f). float16's tables and segments (removed,
// below) kept the computing kernels' bits and did not pay; these promise less, every float16 output within one unit
// in the last place of the computing kernels' (the same bits on all but a few hundredths of a percent of the codes,
// by the CPU's emulation), for fewer instructions: 19.4 and 23.6 an element on the main path (scripts/sass_cpu.sh ...
// main_path) against the computing kernels' ~32 and ~48 on the float16 path, so that they run at the memory's speed
// as the bfloat16 tables do.
//   The arithmetic (ops/gelu.py's fast_* and constants; the fit: scripts/gelu_fast_fit.py): h = 0.5 erfc(|x| / sqrt 2)
// = phi t Q(t), phi = 2^(x^2 K + L) the normal density (one ex2.approx.ftz), t = 1 / (1 + |x| / 4) (one
// rcp.approx.ftz; 1 + |x| / 4 exact for every float16 |x| >= 2^-11), Q of degree 6 fitted for the least maximum
// relative error of h over |x| <= 4.5 (4.8e-8; the fit absorbs K's and L's float32 rounding). Then e = 1/2 - h,
// rounded once: half of erf(|x| / sqrt 2) on float32's grid near 1/2, the grid the computing kernel's 1 + erff lands
// on, so that both round Phi's cancelling negative tail alike. Forward: y = |x| e + x / 2 = x Phi(x), one fma, from
// b = x / 2 (halved in float16x2, half an instruction an element; exact for |x| >= 2^-13), its float16 given x's
// sign (only a zero of a negative x changes: -0, as gelu() gives it). Backward: t = x phi + Phi, Phi = 1/2 + sign(x) e
// rounded first as the computing kernel rounds its cdf, and dx = dy t as gelu_grad() rounds it. gelu_fast_erf<S>
// takes x S / 4 and Q's coefficients times powers of two: every rounding as in ops/gelu.py's form, times a power of 2.
//   Where the computing path takes over: a group of eight is flagged where any input is below 2^-13 in magnitude
// (zeros and subnormals: bit-equality there, and x / 2's float16 ties), NaN, at or below the argument `tail`
// (GELU_FAST_TAIL_X, x <= -3.75, the one value gpu/gelu.py passes: there one ulp of erff moves the computing kernel's
// y or t by one or more float16 ulps, so erff's documented 2 ulp clear no fast value; an argument, not a constant, as
// when a second value was allowed, below), or (backward) one of the two codes beside t's zero near x = -0.7518 (there
// the computing kernel's own t carries a relative error near float16's spacing). A flagged group computes by gelu() /
// gelu_grad() inline the elements gelu_fast_exact_code names (the flagging codes, and infs), the rest keeping their
// fast values. The tests: min.f16x2 (.NaN keeps a NaN) of the eight magnitudes and of the eight values, two compares;
// in the backward min.u16x2 of the codes less the band's first (VIADDMNMX) and a compare. Under x ~ N(0, s^2) they
// flag, of the elements, 1.9e-4 (forward) and 4.8e-4 (backward) at s = 1, 3% at s = 2 (a group in four: the
// computing path's cost returns).
//   Why the bound holds (tests/test_gelu_fast.py, every code): against the computing arithmetic replayed with erff and
// expf correctly rounded, no forward code of the fast path moves, ~0.01% of the backward's do, by one ulp; against
// every erff and expf within CUDA's documented 2 ulp, every forward value and the backward's t (within 2^-11,
// relative, so every dy) are within an ulp. ex2.approx's and rcp.approx's own errors (~2 ulp and ~1) are the GPU
// tests' to bound (tests/test_kernels_gpu.py -k gelu_fast: every code, and every (x, dy) pair of codes).
//   Launch: the computing kernels' grid (eight elements a thread and iteration), the group index in 32 bits
// (gpu/gelu.py: n < 2^34); 34 and 40 registers, no spill. dy, x and dx all float16 (the half roundings' kinds), or
// the other forms run.
//
// Forms measured slower than those above and removed on 2026-12-05 (docs/perf.md by session; their source and tests:
// before the removal, at 3f23587): float16 by table (gelu_forward_f16_table, gelu_backward_f16_table, 22528 codes in
// 44 and 88 KB of dynamic shared memory, four and two blocks an SM; TR2_GELU_F16_TABLE: twelfth session, measured
// slower in the thirteenth, forward 249.6 against 205.0 us a step of nanogpt, backward 358.6 against 324.6); float16
// by segment (gelu_forward_f16_seg, gelu_backward_f16_seg, a cubic a segment with a rounding certificate, tables from
// gpu/gelu_segments.py; TR2_GELU_F16_SEG: twenty-ninth session, the computing kernels' bits but 51.6 and 55.0 us a
// launch against 32.8 and 52.7); and the float16 kernels within an ulp with the negative tail on the fast path
// (TR2_GELU_F16_FAST=2, `tail` GELU_FAST_TAIL_NONE: refused by its GPU tests in the thirtieth session, up to 3 ulps
// off the device's erff there; the kernels are the same, only the argument). gpu.RETIRED names the removed switches
// (each refused if still set); TR2_GELU_F16_FAST allows 0 and 1.
#include "common.cuh"

#define GELU_INV_SQRT2 0.70710678118654752440f
#define GELU_INV_SQRT_2PI 0.39894228040143267794f

// Elements i..i+7 (i a multiple of 8) of an activation held in `kind`, as float32, and the store back.
__device__ __forceinline__ void load8(float v[8], const void* __restrict__ p, i64 i, int kind) {
    if (kind == KIND_F32) {
        const float4 a = ((const float4*)p)[i / 4], b = ((const float4*)p)[i / 4 + 1];
        v[0] = a.x; v[1] = a.y; v[2] = a.z; v[3] = a.w;
        v[4] = b.x; v[5] = b.y; v[6] = b.z; v[7] = b.w;
    } else {
        const uint4 u = ((const uint4*)p)[i / 8];
        const u32 w[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
        for (int k = 0; k < 4; ++k) {
            const u16 lo = (u16)(w[k] & 0xFFFFu), hi = (u16)(w[k] >> 16);
            v[2 * k] = kind == KIND_BF16 ? bf16_bits_to_f32(lo) : f16_bits_to_f32(lo);
            v[2 * k + 1] = kind == KIND_BF16 ? bf16_bits_to_f32(hi) : f16_bits_to_f32(hi);
        }
    }
}

__device__ __forceinline__ void store8(void* __restrict__ p, i64 i, const float v[8], int kind) {
    if (kind == KIND_F32) {
        ((float4*)p)[i / 4] = make_float4(v[0], v[1], v[2], v[3]);
        ((float4*)p)[i / 4 + 1] = make_float4(v[4], v[5], v[6], v[7]);
    } else {
        u32 w[4];
#pragma unroll
        for (int k = 0; k < 4; ++k) {
            const u16 lo = kind == KIND_BF16 ? f32_to_bf16_bits(v[2 * k]) : f32_to_f16_bits(v[2 * k]);
            const u16 hi = kind == KIND_BF16 ? f32_to_bf16_bits(v[2 * k + 1]) : f32_to_f16_bits(v[2 * k + 1]);
            w[k] = (u32)lo | ((u32)hi << 16);
        }
        ((uint4*)p)[i / 8] = make_uint4(w[0], w[1], w[2], w[3]);
    }
}

// y = 0.5 x (1 + erf(x / sqrt(2)))
__device__ __forceinline__ float gelu(float x) { return 0.5f * x * (1.0f + erff(x * GELU_INV_SQRT2)); }

// dx = dy (0.5 (1 + erf(x / sqrt(2))) + x exp(-x^2 / 2) / sqrt(2 pi))
__device__ __forceinline__ float gelu_grad(float dy, float x) {
    const float cdf = 0.5f * (1.0f + erff(x * GELU_INV_SQRT2));
    const float pdf = expf(-0.5f * x * x) * GELU_INV_SQRT_2PI;
    return dy * (cdf + x * pdf);
}

// The tail's element for this thread (the first n % 8 threads of the grid), or -1.
__device__ __forceinline__ i64 tail_index(i64 n) {
    const i64 t = (n / 8) * 8 + (i64)blockIdx.x * blockDim.x + threadIdx.x;
    return t < n ? t : -1;
}

// The group of eight that loop iteration i takes: i itself, or with `reverse` the groups from the last down.
// Why the order can matter (TR2_GELU_REVERSE, gpu/gelu.py): each GELU runs right after the product that wrote its
// newest input (c_fc's h before the forward, the c_proj backward's dg before the backward), and the part of that
// output the product wrote last may still sit in the L2. Read front to back, the first misses evict the oldest lines
// of that tail, the ones read next; read from the end, the tail is read first. Every element is computed alone, so
// either order gives the same bits.
// A template so that the within-an-ulp kernels keep their 32-bit index arithmetic.
template <typename Index>
__device__ __forceinline__ Index group_in_order(Index i, Index groups, int reverse) {
    return reverse ? groups - 1 - i : i;
}

// x and y in the kinds x_kind, y_kind (common.cuh's load_kind / store_kind).
extern "C" __global__ void gelu_forward(void* __restrict__ y, const void* __restrict__ x, i64 n, int x_kind,
                                        int y_kind, int reverse) {
    grid_dependency_entry();
    GRID_STRIDE(i, n / 8) {
        const i64 g = group_in_order(i, n / 8, reverse);
        float v[8];
        load8(v, x, 8 * g, x_kind);
#pragma unroll
        for (int k = 0; k < 8; ++k) v[k] = gelu(v[k]);
        store8(y, 8 * g, v, y_kind);
    }
    const i64 t = tail_index(n);
    if (t >= 0) store_kind(y, t, gelu(load_kind(x, t, x_kind)), y_kind);
}

extern "C" __global__ void gelu_backward(void* __restrict__ dx, const void* __restrict__ dy,
                                         const void* __restrict__ x, i64 n, int dy_kind, int x_kind, int dx_kind,
                                         int reverse) {
    grid_dependency_entry();
    GRID_STRIDE(i, n / 8) {
        const i64 g = group_in_order(i, n / 8, reverse);
        float v[8], d[8];
        load8(v, x, 8 * g, x_kind);
        load8(d, dy, 8 * g, dy_kind);
#pragma unroll
        for (int k = 0; k < 8; ++k) v[k] = gelu_grad(d[k], v[k]);
        store8(dx, 8 * g, v, dx_kind);
    }
    const i64 t = tail_index(n);
    if (t >= 0) store_kind(dx, t, gelu_grad(load_kind(dy, t, dy_kind), load_kind(x, t, x_kind)), dx_kind);
}

// ---------------------------------------------------------------------------------------------- by table

#define GELU_TABLE_EXP_LOW 103
#define GELU_TABLE_EXP_END 131
#define GELU_TABLE_SIZE 7168
#define GELU_TABLE_THREADS 512
#define GELU_TABLE_BLOCKS_PER_SM 3
static_assert(GELU_TABLE_SIZE == (GELU_TABLE_EXP_END - GELU_TABLE_EXP_LOW) << 8, "two signs x 128 mantissas an exponent");

// A bf16 code's place in the tables, or GELU_TABLE_SIZE or more where it is not tabulated (see the header).
__device__ __forceinline__ u32 gelu_table_index(u32 code) {
    return (((code & 0x7FFFu) << 1) | (code >> 15)) - (GELU_TABLE_EXP_LOW << 8);
}

// The places of the eight bf16 codes in u (element 2k in the low half of its k-th word); true where all are
// tabulated.
__device__ __forceinline__ bool gelu_table_indices(u32 index[8], const uint4 u) {
    const u32 w[4] = {u.x, u.y, u.z, u.w};
    bool tabulated = true;
#pragma unroll
    for (int k = 0; k < 4; ++k) {
        index[2 * k] = gelu_table_index(w[k] & 0xFFFFu);
        index[2 * k + 1] = gelu_table_index(w[k] >> 16);
        tabulated &= index[2 * k] < GELU_TABLE_SIZE && index[2 * k + 1] < GELU_TABLE_SIZE;
    }
    return tabulated;
}

__device__ __forceinline__ void bf16x8_to_f32(float v[8], const uint4 u) {
    const u32 w[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
    for (int k = 0; k < 4; ++k) {
        v[2 * k] = load_from<KIND_BF16>((u16)(w[k] & 0xFFFFu));
        v[2 * k + 1] = load_from<KIND_BF16>((u16)(w[k] >> 16));
    }
}

// The block's copy of a table (GELU_TABLE_SIZE entries of T) in shared memory, read in 16-byte pieces.
template <typename T>
__device__ __forceinline__ void gelu_table_to_shared(T* shared, const T* __restrict__ table) {
    for (int i = threadIdx.x; i < GELU_TABLE_SIZE * (int)sizeof(T) / 16; i += blockDim.x)
        ((uint4*)shared)[i] = ((const uint4*)table)[i];
    __syncthreads();
}

// y = gelu(x), both bf16; table: the gelu_forward bits of the tabulated codes.
extern "C" __global__ void __launch_bounds__(GELU_TABLE_THREADS, GELU_TABLE_BLOCKS_PER_SM)
gelu_forward_bf16_table(u16* __restrict__ y, const u16* __restrict__ x, const u16* __restrict__ table, i64 n,
                        int reverse) {
    grid_dependency_entry();
    __shared__ __align__(16) u16 shared_table[GELU_TABLE_SIZE];
    gelu_table_to_shared(shared_table, table);
    GRID_STRIDE(i, n / 8) {
        const i64 g = group_in_order(i, n / 8, reverse);
        const uint4 u = ((const uint4*)x)[g];
        u32 index[8];
        if (gelu_table_indices(index, u)) {
            u32 w[4];
#pragma unroll
            for (int k = 0; k < 4; ++k)
                w[k] = (u32)shared_table[index[2 * k]] | ((u32)shared_table[index[2 * k + 1]] << 16);
            ((uint4*)y)[g] = make_uint4(w[0], w[1], w[2], w[3]);
        } else {
            float v[8];
            bf16x8_to_f32(v, u);
#pragma unroll
            for (int k = 0; k < 8; ++k) v[k] = gelu(v[k]);
            store8(y, 8 * g, v, KIND_BF16);
        }
    }
    const i64 t = tail_index(n);
    if (t >= 0) {
        const u32 index = gelu_table_index(x[t]);
        y[t] = index < GELU_TABLE_SIZE ? shared_table[index] : store_as<KIND_BF16>(gelu(load_from<KIND_BF16>(x[t])));
    }
}

// dx = dy * t(x), x bf16, dy and dx in the kinds dy_kind, dx_kind; table: t of the tabulated codes.
extern "C" __global__ void __launch_bounds__(GELU_TABLE_THREADS, GELU_TABLE_BLOCKS_PER_SM)
gelu_backward_bf16_table(void* __restrict__ dx, const void* __restrict__ dy, const u16* __restrict__ x,
                         const float* __restrict__ table, i64 n, int dy_kind, int dx_kind, int reverse) {
    grid_dependency_entry();
    __shared__ __align__(16) float shared_table[GELU_TABLE_SIZE];
    gelu_table_to_shared(shared_table, table);
    GRID_STRIDE(i, n / 8) {
        const i64 g = group_in_order(i, n / 8, reverse);
        const uint4 u = ((const uint4*)x)[g];
        float d[8], v[8];
        load8(d, dy, 8 * g, dy_kind);
        u32 index[8];
        if (gelu_table_indices(index, u)) {
#pragma unroll
            for (int k = 0; k < 8; ++k) v[k] = d[k] * shared_table[index[k]];
        } else {
            bf16x8_to_f32(v, u);
#pragma unroll
            for (int k = 0; k < 8; ++k) v[k] = gelu_grad(d[k], v[k]);
        }
        store8(dx, 8 * g, v, dx_kind);
    }
    const i64 t = tail_index(n);
    if (t >= 0) {
        const float d = load_kind(dy, t, dy_kind);
        const u32 index = gelu_table_index(x[t]);
        store_kind(dx, t, index < GELU_TABLE_SIZE ? d * shared_table[index] : gelu_grad(d, load_from<KIND_BF16>(x[t])),
                   dx_kind);
    }
}

// ---------------------------------------------------------------------------------------------- within an ulp
// (see the header's "Within an ulp")

// The constants of ops/gelu.py (FAST_Q = 1/4, FAST_K, FAST_L, FAST_C; tests/test_gelu_fast.py checks they agree).
#define GELU_FAST_K -0.721347511f
#define GELU_FAST_L -1.32574809f
#define GELU_FAST_C0 0.246048644f
#define GELU_FAST_C1 0.295595586f
#define GELU_FAST_C2 0.0114250714f
#define GELU_FAST_C3 0.798426092f
#define GELU_FAST_C4 -0.764657736f
#define GELU_FAST_C5 0.907274663f
#define GELU_FAST_C6 -0.240798205f
// A group of eight sends some of its elements through the computing path where one of its inputs is below 2^-13 in
// magnitude (code below GELU_FAST_LEAST_X), at or below the kernel's argument `tail` (a float16 code: gpu/gelu.py
// passes GELU_FAST_TAIL_X, x <= -3.75), NaN, or, in the backward, one of the GELU_FAST_ROOT_CODES codes from
// GELU_FAST_ROOT_CODE beside t's zero near x = -0.7518. Those elements then: the same codes, and infs.
#define GELU_FAST_LEAST_X 0x0800u
#define GELU_FAST_TAIL_X 0xC380u
#define GELU_FAST_ROOT_CODE 0xBA03u
#define GELU_FAST_ROOT_CODES 2u
static_assert(GELU_FAST_ROOT_CODES == 2u, "gelu_fast_no_root tests a lane's distance from the first code below 2");

// The special-function unit's 2^v and 1 / v (MUFU.EX2, MUFU.RCP), subnormal inputs and results flushed.
__device__ __forceinline__ float gelu_fast_ex2(float v) { asm("ex2.approx.ftz.f32 %0, %0;" : "+f"(v)); return v; }
__device__ __forceinline__ float gelu_fast_rcp(float v) { asm("rcp.approx.ftz.f32 %0, %0;" : "+f"(v)); return v; }

// h = 0.5 erfc(|x| / sqrt 2) = phi t Q(t), phi = 2^(x^2 K + L) the normal density, t = 1 / (1 + |x| / 4); here
// from z = x S / 4 (S = 4: z = x, the backward; S = 2: z = x / 2, the forward), with v = 1 / (|z| + S) = t / S and
// Q's coefficients times 4 S^k at compile time, so that phi v 4 Q(S v) = (4 / S) h and every Horner step rounds as
// Q's at t would, times a power of two. Returns (4 / S)(1/2 - h) rounded once: erf(|x| / sqrt 2) times 2 / S, on
// float32's grid near 2 / S, where the computing kernel's 1 + erff lands (times 2 / S).
template <int S> __device__ __forceinline__ float gelu_fast_erf(float z, float& phi) {
    constexpr float r = 4.0f / S;                                    // x = r z
    constexpr float c1 = 4.0f * S, c2 = c1 * S, c3 = c2 * S, c4 = c3 * S, c5 = c4 * S, c6 = c5 * S;
    phi = gelu_fast_ex2(fmaf(__fmul_rn(z, z), GELU_FAST_K * (r * r), GELU_FAST_L));
    const float v = gelu_fast_rcp(__fadd_rn(fabsf(z), 4.0f / r));
    float q = GELU_FAST_C6 * c6;
    q = fmaf(q, v, GELU_FAST_C5 * c5);
    q = fmaf(q, v, GELU_FAST_C4 * c4);
    q = fmaf(q, v, GELU_FAST_C3 * c3);
    q = fmaf(q, v, GELU_FAST_C2 * c2);
    q = fmaf(q, v, GELU_FAST_C1 * c1);
    q = fmaf(q, v, GELU_FAST_C0 * 4.0f);
    return fmaf(-__fmul_rn(phi, v), q, 2.0f / S);
}

// The forward from b = x / 2 (exact for |x| >= 2^-13): y = x Phi(x) = b + |b| erf(|x| / sqrt 2), one fma. A zero of a
// negative x comes out +0 here; gelu_fast_forward8 gives it x's sign.
__device__ __forceinline__ float gelu_fast_forward(float b) {
    float phi;
    const float erf = gelu_fast_erf<2>(b, phi);
    return fmaf(fabsf(b), erf, b);
}

// gelu_grad()'s factor t = Phi + x phi, one fma as the computing kernel fuses it (dx = dy t); Phi = 1/2 + sign(x) e
// rounded first, as its cdf (e = 1/2 - h: for x < 0 exactly its cancelling 1 + erff, halved).
__device__ __forceinline__ float gelu_fast_factor(float x) {
    float phi;
    const float e = gelu_fast_erf<4>(x, phi);
    return fmaf(x, phi, __fadd_rn(0.5f, copysignf(e, x)));
}

// x / 2 of both halves of w (float16x2), exact where |x| >= 2^-13
__device__ __forceinline__ u32 gelu_fast_half2(u32 w) {
    u32 r;
    asm("mul.rn.f16x2 %0, %1, %2;" : "=r"(r) : "r"(w), "r"(0x38003800u));
    return r;
}

// Whether none of the eight codes (element 2j in the low half of word j) flags the group: every |x| >= 2^-13 and every
// x above `tail` (a NaN fails both: min with .NaN keeps it; .xorsign.abs compares magnitudes).
__device__ __forceinline__ bool gelu_fast_plain(const u32 w[4], u32 tail) {
    u32 r;
    asm("{\n\t.reg .b32 a, b, m;\n\t.reg .pred p, q, s, t;\n\t"
        "min.NaN.xorsign.abs.f16x2 a, %1, %2;\n\tmin.NaN.xorsign.abs.f16x2 b, %3, %4;\n\t"
        "min.NaN.xorsign.abs.f16x2 m, a, b;\n\tabs.f16x2 m, m;\n\t"
        "setp.ge.f16x2 p|q, m, %5;\n\t"
        "min.NaN.f16x2 a, %1, %2;\n\tmin.NaN.f16x2 b, %3, %4;\n\tmin.NaN.f16x2 m, a, b;\n\t"
        "setp.gt.f16x2 s|t, m, %6;\n\t"
        "and.pred p, p, q;\n\tand.pred s, s, t;\n\tand.pred p, p, s;\n\tselp.u32 %0, 1, 0, p;\n\t}"
        : "=r"(r)
        : "r"(w[0]), "r"(w[1]), "r"(w[2]), "r"(w[3]), "r"(GELU_FAST_LEAST_X * 0x10001u), "r"(tail * 0x10001u));
    return r != 0;
}

// Whether none of the eight codes is one of the backward's root codes: code - GELU_FAST_ROOT_CODE (16 bits, wrapping)
// at least 2 in every lane, the four words' lanes folded by min (add.u16x2 and min.u16x2: ptxas's VIADDMNMX).
__device__ __forceinline__ bool gelu_fast_no_root(const u32 w[4]) {
    u32 r;
    asm("{\n\t.reg .b32 a, b;\n\t.reg .pred p, q;\n\t"
        "add.u16x2 a, %1, %5;\n\tadd.u16x2 b, %2, %5;\n\tmin.u16x2 a, a, b;\n\t"
        "add.u16x2 b, %3, %5;\n\tmin.u16x2 a, a, b;\n\tadd.u16x2 b, %4, %5;\n\tmin.u16x2 a, a, b;\n\t"
        "and.b32 b, a, 0xFFFE;\n\tsetp.ne.u32 p, b, 0;\n\tand.b32 b, a, 0xFFFE0000;\n\tsetp.ne.u32 q, b, 0;\n\t"
        "and.pred p, p, q;\n\tselp.u32 %0, 1, 0, p;\n\t}"
        : "=r"(r)
        : "r"(w[0]), "r"(w[1]), "r"(w[2]), "r"(w[3]), "r"(((0x10000u - GELU_FAST_ROOT_CODE) & 0xFFFFu) * 0x10001u));
    return r != 0;
}

// The codes a flagged group sends through the computing path (see the defines); root: the backward's band too.
__device__ __forceinline__ bool gelu_fast_exact_code(u32 code, u32 tail, bool root) {
    const u32 m = code & 0x7FFFu;
    return m < GELU_FAST_LEAST_X || m >= 0x7C00u || code >= tail ||
           (root && code - GELU_FAST_ROOT_CODE < GELU_FAST_ROOT_CODES);
}

// Element k's code of the eight in w (element 2j in the low half of word j), and its f16 bits r put in place.
__device__ __forceinline__ u32 half_of(const u32 w[4], int k) { return k & 1 ? w[k / 2] >> 16 : w[k / 2] & 0xFFFFu; }
__device__ __forceinline__ void set_half(u32 w[4], int k, u32 r) {
    w[k / 2] = k & 1 ? (w[k / 2] & 0xFFFFu) | (r << 16) : (w[k / 2] & 0xFFFF0000u) | r;
}

// Eight float16 codes through the fast forward, each output given its input's sign (y has it already but for the far
// tail's zeros; x's NaNs and -inf, whose outputs that would turn, flag the group and take the computing path); in a
// flagged group the elements gelu_fast_exact_code names through gelu(), the computing path (its bits).
__device__ __forceinline__ uint4 gelu_fast_forward8(const uint4 q, u32 tail) {
    const u32 in[4] = {q.x, q.y, q.z, q.w};
    u32 out[4];
#pragma unroll
    for (int j = 0; j < 4; ++j) {
        const u32 b = gelu_fast_half2(in[j]);
        out[j] = pack2<KIND_F16>(gelu_fast_forward(f16_bits_to_f32((u16)(b & 0xFFFFu))),
                                 gelu_fast_forward(f16_bits_to_f32((u16)(b >> 16)))) | (in[j] & 0x80008000u);
    }
    if (!gelu_fast_plain(in, tail)) {
#pragma unroll
        for (int k = 0; k < 8; ++k)
            if (gelu_fast_exact_code(half_of(in, k), tail, false))
                set_half(out, k, f32_to_f16_bits(gelu(f16_bits_to_f32((u16)half_of(in, k)))));
    }
    return make_uint4(out[0], out[1], out[2], out[3]);
}

// The backward of eight codes and their dy: dx = dy t; in a flagged group (the root codes flag it too) the elements
// gelu_fast_exact_code names through gelu_grad().
__device__ __forceinline__ uint4 gelu_fast_backward8(const uint4 q, const uint4 p, u32 tail) {
    const u32 in[4] = {q.x, q.y, q.z, q.w}, din[4] = {p.x, p.y, p.z, p.w};
    u32 out[4];
#pragma unroll
    for (int j = 0; j < 4; ++j) {
        const float t0 = gelu_fast_factor(f16_bits_to_f32((u16)(in[j] & 0xFFFFu)));
        const float t1 = gelu_fast_factor(f16_bits_to_f32((u16)(in[j] >> 16)));
        out[j] = pack2<KIND_F16>(__fmul_rn(f16_bits_to_f32((u16)(din[j] & 0xFFFFu)), t0),
                                 __fmul_rn(f16_bits_to_f32((u16)(din[j] >> 16)), t1));
    }
    // both tests, without a branch between them (& of bools, not &&)
    if (!(gelu_fast_plain(in, tail) & gelu_fast_no_root(in))) {
#pragma unroll
        for (int k = 0; k < 8; ++k)
            if (gelu_fast_exact_code(half_of(in, k), tail, true))
                set_half(out, k, f32_to_f16_bits(gelu_grad(f16_bits_to_f32((u16)half_of(din, k)),
                                                           f16_bits_to_f32((u16)half_of(in, k)))));
    }
    return make_uint4(out[0], out[1], out[2], out[3]);
}

// y = gelu(x), both f16, within an ulp of gelu_forward's (see the header); tail: a float16 code (gpu/gelu.py passes
// GELU_FAST_TAIL_X). n < 2^34 (gpu/gelu.py), so that the group index fits 32 bits.
extern "C" __global__ void gelu_forward_f16_fast(u16* __restrict__ y, const u16* __restrict__ x, i64 n, u32 tail,
                                                 int reverse) {
    grid_dependency_entry();
    const u32 groups = (u32)(n / 8), stride = gridDim.x * blockDim.x;
    for (u32 i = blockIdx.x * blockDim.x + threadIdx.x; i < groups; i += stride) {
        const u32 g = group_in_order(i, groups, reverse);
        ((uint4*)y)[g] = gelu_fast_forward8(((const uint4*)x)[g], tail);
    }
    const i64 t = tail_index(n);
    if (t >= 0) {
        const float v = f16_bits_to_f32(x[t]);
        y[t] = gelu_fast_exact_code(x[t], tail, false)
                   ? f32_to_f16_bits(gelu(v))
                   : (u16)(f32_to_f16_bits(gelu_fast_forward(0.5f * v)) | (x[t] & 0x8000u));
    }
}

// dx = dy * t(x), x, dy and dx f16 (the half roundings' kinds), within an ulp of gelu_backward's.
extern "C" __global__ void gelu_backward_f16_fast(u16* __restrict__ dx, const u16* __restrict__ dy,
                                                  const u16* __restrict__ x, i64 n, u32 tail, int reverse) {
    grid_dependency_entry();
    const u32 groups = (u32)(n / 8), stride = gridDim.x * blockDim.x;
    for (u32 i = blockIdx.x * blockDim.x + threadIdx.x; i < groups; i += stride) {
        const u32 g = group_in_order(i, groups, reverse);
        ((uint4*)dx)[g] = gelu_fast_backward8(((const uint4*)x)[g], ((const uint4*)dy)[g], tail);
    }
    const i64 t = tail_index(n);
    if (t >= 0) {
        const float v = f16_bits_to_f32(x[t]), d = f16_bits_to_f32(dy[t]);
        dx[t] = f32_to_f16_bits(gelu_fast_exact_code(x[t], tail, true) ? gelu_grad(d, v)
                                                                        : __fmul_rn(d, gelu_fast_factor(v)));
    }
}
