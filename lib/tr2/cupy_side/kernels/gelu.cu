// gelu.cu: exact (erf) GELU, forward and backward. erff/expf are the IEEE-accurate library forms
// (no fast math).
// Eight elements a thread and iteration, each array read and written in 16-byte pieces (one uint4 of half
// bits, two float4 of float32): the element-at-a-time form with a kind test per element ran at about a third
// of the memory's speed on the H200 (gelu_backward 107 us a layer of gpt2-small bf16, call 4's profile).
// The arithmetic per element is unchanged. The last n % 8 elements go one a thread.
//
// By table: bfloat16 (gelu_forward_bf16_table, gelu_backward_bf16_table) and float16 (gelu_forward_f16_table,
// gelu_backward_f16_table). The computing kernels are bound by issuing the exact erf (Nsight Compute, gpt2-small's
// c_fc in bf16: forward 33.7 us at 34 instructions an element, SM 77%, DRAM 50%; backward 53.0 us at 49, SM 71%,
// DRAM 54%), not by memory. A half input has 65536 codes, and what the computing kernels make of one depends on the
// code alone: the forward's half output, and the backward's t = cdf + x pdf, which gelu_grad multiplies by dy
// (dx = dy * t, one rounded multiply). So a table per code, looked up in shared memory, gives their bits at a few
// integer instructions an element, and the kernels run at the memory's speed instead.
//   Which bf16 codes: 2^-24 <= |x| < 16, biased exponents GELU_TABLE_EXP_LOW..GELU_TABLE_EXP_END-1, both signs:
// 7168 codes, a u16 table of 14 KB (forward) and a float32 table of 28 KB (backward), small enough for three
// blocks an SM. Every other code (zero, tiny and large magnitudes, inf, NaN: rare among activations) takes the
// computing path, gelu() / gelu_grad() inline: a group of eight with any such code is computed whole (its
// tabulated codes too, to the same bits).
//   Which f16 codes: 2^-8 <= |x| < 8, biased exponents GELU_F16_TABLE_EXP_LOW..GELU_F16_TABLE_EXP_END-1, both
// signs: 22528 codes, 44 KB (forward) and 88 KB (backward). An f16 exponent holds 1024 mantissas, eight times
// bf16's 128, so the range is narrower: every finite f16 code would take 248 KB of float32, more than a block may
// have, and each exponent costs 4 KB + 8 KB. Activations at or above 8 in magnitude are rare, and so are those
// below 2^-8 (about 0.3% of a unit normal's values: one group of eight in forty); a group with one takes the
// computing path, as above, and so do zero, subnormals, inf and NaN.
//   The index (gelu_table_index, gelu_f16_table_index): the code rotated left by one bit, (exponent << 8 or 11) |
// (mantissa << 1) | sign, less the lowest tabulated exponent shifted alike. Unsigned, so a code below the range
// wraps past its end: one compare with the table's size tests both ends.
//   The tables are the computing kernels' own outputs (gpu/gelu.py builds them once a device and type, eagerly,
// before any capture): gelu_forward on the tabulated codes gives the forward table, gelu_backward with dy = 1 in
// float32 (1 * t is t) and a float32 dx gives t. Nothing is computed on the host, so the table carries those
// kernels' bits, and dy * t here is the multiply gelu_grad does.
//   Launch shape: each block copies its table into shared memory once, so the grid is persistent (a fixed number
// of blocks an SM over a grid-stride loop): 396 bf16 blocks on an H200 copy 11 MB of tables from L2 where the
// 4224-block grid of the computing kernels would copy 118 MB, as much as the 150 MB a backward of gpt2-small moves.
// The bf16 tables sit in static shared memory, GELU_TABLE_BLOCKS_PER_SM (3) blocks an SM. The f16 backward table
// exceeds the 48 KB a block may declare statically, so it takes dynamic shared memory sized by the launch, and the
// forward's (44 KB, which would just fit) the same, so that both f16 kernels launch one way (gpu/gelu.py;
// runtime.launch opts in above 48 KB and asks for the largest carveout, or the driver may leave room for fewer
// blocks). With the 1 KB the driver keeps a block, of an H200 SM's 228 KB: GELU_F16_TABLE_BLOCKS_PER_SM_FORWARD
// (4) forward blocks take 180 KB, and with 512 threads each hold the SM's 2048 threads (at 32 registers, which
// ptxas meets without spilling); GELU_F16_TABLE_BLOCKS_PER_SM_BACKWARD (2) backward blocks take 178 KB. Either
// f16 grid copies 24 MB of tables a launch.
//   Where it applies: half activations, i.e. the half builds with half roundings (without them the products hand
// GELU float32). float32 keeps the computing kernels, whose arithmetic is what it was before the table kernels
// were added; they stay the reference the table kernels are tested against.
//   By segment: float16 (gelu_forward_f16_seg, gelu_backward_f16_seg; TR2_GELU_F16_SEG=1, off by default: the
// computing kernels' bits on every code on the H200, but slower, 51.6 / 55.0 us a launch against 32.8 / 52.7 on
// nanogpt's shape, as many instructions as erff and bank conflicts on the tables; calls 6-7 of
// results/h200-perf-20261204e). The f16
// tables above cost 44 and 88 KB of shared memory a block and so fewer blocks an SM; slower than computing. Here a
// cubic a segment stands in for the table, and a rounding certificate proves per element that rounding it to f16
// gives the computing kernels' bits; where it cannot, the element is computed by gelu() / gelu_grad(), inline.
//   Segments: the codes of one sign, one biased exponent GELU_SEG_EXP_LOW..GELU_SEG_EXP_END-1 (2^-14 <= |x| < 32,
// every normal magnitude an activation reaches) and one value of the top GELU_SEG_BITS (5) mantissa bits: 32 codes
// each, 1216 segments (gelu_seg_index: the magnitude's exponent and top bits less the first's, doubled, plus the
// sign; unsigned, so zero, subnormals, |x| >= 32, inf and NaN fall at GELU_SEG_COUNT or beyond). Per segment a
// float4 c0..c3 of a cubic in u = x - x_mid (gelu_seg_centred: exact, |u| <= 16 ulp of x) and a float bound A, for
// gelu (forward) or t = Phi + x phi (backward, dx = dy t): 24 KB a table, gpu/gelu_segments.py (fitted in float64 on
// the host). Per element: index, one 16-byte and one 4-byte shared load, three fmaf.
//   The certificate: A bounds |f_a - f_c| for every code of the segment, f_a the float32 Horner value computed here,
// f_c any value the computing kernel can return. So f_c lies in [__fsub_rd(f_a, A), __fadd_ru(f_a, A)] (directed
// roundings: the float32 ends hold the real interval), and where both ends round to one f16 code (one cvt of the
// pair, gelu_seg_same_half), so does f_c, rounding to nearest being monotone: those are the computing kernel's
// bits, whatever erff's error was. Midpoints, ties to even, subnormal f16 results, the change of binade and signed
// zeros need no case of their own. The backward: t_c in [t_lo, t_hi], so rn(dy t_c) lies between rn(dy t_lo) and
// rn(dy t_hi) for any dy (inf and NaN included: a zero in [t_lo, t_hi] makes the ends differ), and those two are
// compared. A = 1.25 x the segment's maximum over its codes of |f_a - f*| (the fit and Horner's roundings, replayed
// exactly on the host) + the largest |f_c - f*| (f* the exact value in float64): the computing kernel's float32
// steps replayed exactly around erff and expf, each of which may return any float32 within 2 ulp of the exact
// value (CUDA's documented bounds without fast math), every later +, * and fma being monotone; for t, both the
// fused fma(x, pdf, cdf) and cdf + rn(x pdf). -ftz is replayed (subnormal float32 results flush; the f16 ones are
// normal float32). tests/test_gelu_segments.py checks every code against the bound and the certificate against
// computing values anywhere within it; the GPU tests check the bits on every code.
//   Where it falls back: where the computing kernel's own error spans a rounding boundary, i.e. near f16 midpoints
// (~0.1% of codes), t's zero near x = -0.75, and x < -2, where 1 + erff cancels (the computing kernel's absolute
// error, |x| 2^-24, reaches the f16 spacing of gelu's tiny values: every code below -4 falls back). Fallback
// fractions for x ~ N(0, s): docs/perf.md, "Twenty-ninth session" (tests/test_gelu_segments.py prints them).
//   Divergence: a thread takes eight elements, keeps a mask of those whose certificate failed, then for each of the
// eight slots computes the element where its bit is set; a warp runs slot k only if one of its lanes needs it, so
// the cost is the slots any lane needs (0.55 of 8 a warp iteration for N(0, 1) forward, 1.1 backward), not the
// elements. Registers cannot be indexed at run time, so no loop over the set bits alone.
//   Launch shape: persistent, as the table kernels (each block copies the 24 KB table once: 396 forward blocks copy
// 9.6 MB from L2 where a 4224-block grid would copy 100 MB, as much as the forward moves). 512 threads; 3 blocks an
// SM forward (40 registers, and 8 bytes ptxas keeps on the stack: whether inside the loop, Nsight Compute's local
// traffic will say) and 2 backward (59 registers: at 40 it spilled 28 bytes; 1024 threads with 32 bytes of loads
// each keep enough bytes in flight). dx float32, or dy not float16, takes gelu_backward: rn(dy t_a) is not rn(dy t_c)
// in float32.
//   Within an ulp: float16 (gelu_forward_f16_fast, gelu_backward_f16_fast; TR2_GELU_F16_FAST=1, float16's default
// since the thirtieth session, calls 8-11 of results/h200-perf-20261204f; =2, the tail on the fast path, failed its GPU
// tests there). The table and segment forms above keep the computing kernels' bits and do not pay in float16;
// these promise less, every float16 output within one unit in the last place of the computing kernels' (the same
// bits on all but a few hundredths of a percent of the codes, by the CPU's emulation), for fewer instructions: 19.4
// and 23.6 an element on the main path (scripts/sass_cpu.sh ... main_path) against the computing kernels' ~32 and
// ~48 on the float16 path, so that they run at the memory's speed as the bfloat16 tables do.
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
// (zeros and subnormals: bit-equality there, and x / 2's float16 ties), NaN, at or below the argument `tail` (x <=
// -3.75 with TR2_GELU_F16_FAST=1: there one ulp of erff moves the computing kernel's y or t by one or more float16
// ulps, so erff's documented 2 ulp clear no fast value; -inf alone with =2, the tail on the fast path, where only the
// device's own erff, by the GPU tests, can clear it), or (backward) one of the two codes beside t's zero near x =
// -0.7518 (there the computing kernel's own t carries a relative error near float16's spacing). A flagged group
// computes by gelu() / gelu_grad() inline the elements gelu_fast_exact_code names (the flagging codes, and infs), the
// rest keeping their fast values. The tests: min.f16x2 (.NaN keeps a NaN) of the eight magnitudes and of the eight
// values, two compares; in the backward min.u16x2 of the codes less the band's first (VIADDMNMX) and a compare. Under
// x ~ N(0, s^2) they flag, of the elements, 1.9e-4 (forward) and 4.8e-4 (backward) at s = 1 with the tail exact,
// 3% at s = 2 (a group in four: the computing path's cost returns), or with the tail on the fast path 2e-5 to 2e-4
// (forward) and 1e-4 to 5e-4 (backward) for s from 4 down to 1/2.
//   Why the bound holds (tests/test_gelu_fast.py, every code): against the computing arithmetic replayed with erff and
// expf correctly rounded, no forward code of the fast path moves (0.002% with the tail on it), ~0.01% of the
// backward's do, by one ulp; against every erff and expf within CUDA's documented 2 ulp, with the tail exact, every
// forward value and the backward's t (within 2^-11, relative, so every dy) are within an ulp. ex2.approx's and
// rcp.approx's own errors (~2 ulp and ~1) are the GPU tests' to bound (tests/test_kernels_gpu.py -k gelu_fast: every
// code, and every (x, dy) pair of codes, with either tail).
//   Launch: the computing kernels' grid (eight elements a thread and iteration), the group index in 32 bits
// (gpu/gelu.py: n < 2^34); 34 and 40 registers, no spill. dy, x and dx all float16 (the half roundings' kinds), or
// the other forms run.
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

#define GELU_F16_TABLE_EXP_LOW 7
#define GELU_F16_TABLE_EXP_END 18
#define GELU_F16_TABLE_SIZE 22528
#define GELU_F16_TABLE_BLOCKS_PER_SM_FORWARD 4
#define GELU_F16_TABLE_BLOCKS_PER_SM_BACKWARD 2
static_assert(GELU_F16_TABLE_SIZE == (GELU_F16_TABLE_EXP_END - GELU_F16_TABLE_EXP_LOW) << 11,
              "two signs x 1024 mantissas an exponent");

// A bf16 code's place in the tables, or GELU_TABLE_SIZE or more where it is not tabulated (see the header).
__device__ __forceinline__ u32 gelu_table_index(u32 code) {
    return (((code & 0x7FFFu) << 1) | (code >> 15)) - (GELU_TABLE_EXP_LOW << 8);
}

// An f16 code's place in the tables, or GELU_F16_TABLE_SIZE or more where it is not tabulated.
__device__ __forceinline__ u32 gelu_f16_table_index(u32 code) {
    return (((code & 0x7FFFu) << 1) | (code >> 15)) - (GELU_F16_TABLE_EXP_LOW << 11);
}

// The tables of half kind K (KIND_BF16 or KIND_F16): entries, and a code's place.
template <int K> struct GeluTable {
    static constexpr u32 SIZE = K == KIND_BF16 ? GELU_TABLE_SIZE : GELU_F16_TABLE_SIZE;
    static __device__ __forceinline__ u32 index(u32 code) {
        return K == KIND_BF16 ? gelu_table_index(code) : gelu_f16_table_index(code);
    }
};

// The places of the eight codes of kind K in u (element 2k in the low half of its k-th word); true where all are
// tabulated.
template <int K> __device__ __forceinline__ bool gelu_table_indices(u32 index[8], const uint4 u) {
    const u32 w[4] = {u.x, u.y, u.z, u.w};
    bool tabulated = true;
#pragma unroll
    for (int k = 0; k < 4; ++k) {
        index[2 * k] = GeluTable<K>::index(w[k] & 0xFFFFu);
        index[2 * k + 1] = GeluTable<K>::index(w[k] >> 16);
        tabulated &= index[2 * k] < GeluTable<K>::SIZE && index[2 * k + 1] < GeluTable<K>::SIZE;
    }
    return tabulated;
}

template <int K> __device__ __forceinline__ void half8_to_f32(float v[8], const uint4 u) {
    const u32 w[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
    for (int k = 0; k < 4; ++k) {
        v[2 * k] = load_from<K>((u16)(w[k] & 0xFFFFu));
        v[2 * k + 1] = load_from<K>((u16)(w[k] >> 16));
    }
}

// The block's copy of a table of kind K (GeluTable<K>::SIZE entries of T) in shared memory, read in 16-byte
// pieces.
template <int K, typename T>
__device__ __forceinline__ void gelu_table_to_shared(T* shared, const T* __restrict__ table) {
    for (int i = threadIdx.x; i < (int)GeluTable<K>::SIZE * (int)sizeof(T) / 16; i += blockDim.x)
        ((uint4*)shared)[i] = ((const uint4*)table)[i];
    __syncthreads();
}

// The table kernels' bodies, x and y of half kind K; shared_table: the block's room for the table.

template <int K>
__device__ __forceinline__ void gelu_forward_by_table(u16* __restrict__ y, const u16* __restrict__ x,
                                                      const u16* __restrict__ table, u16* shared_table, i64 n,
                                                      int reverse) {
    gelu_table_to_shared<K>(shared_table, table);
    GRID_STRIDE(i, n / 8) {
        const i64 g = group_in_order(i, n / 8, reverse);
        const uint4 u = ((const uint4*)x)[g];
        u32 index[8];
        if (gelu_table_indices<K>(index, u)) {
            u32 w[4];
#pragma unroll
            for (int k = 0; k < 4; ++k)
                w[k] = (u32)shared_table[index[2 * k]] | ((u32)shared_table[index[2 * k + 1]] << 16);
            ((uint4*)y)[g] = make_uint4(w[0], w[1], w[2], w[3]);
        } else {
            float v[8];
            half8_to_f32<K>(v, u);
#pragma unroll
            for (int k = 0; k < 8; ++k) v[k] = gelu(v[k]);
            store8(y, 8 * g, v, K);
        }
    }
    const i64 t = tail_index(n);
    if (t >= 0) {
        const u32 index = GeluTable<K>::index(x[t]);
        y[t] = index < GeluTable<K>::SIZE ? shared_table[index] : store_as<K>(gelu(load_from<K>(x[t])));
    }
}

template <int K>
__device__ __forceinline__ void gelu_backward_by_table(void* __restrict__ dx, const void* __restrict__ dy,
                                                       const u16* __restrict__ x, const float* __restrict__ table,
                                                       float* shared_table, i64 n, int dy_kind, int dx_kind,
                                                       int reverse) {
    gelu_table_to_shared<K>(shared_table, table);
    GRID_STRIDE(i, n / 8) {
        const i64 g = group_in_order(i, n / 8, reverse);
        const uint4 u = ((const uint4*)x)[g];
        float d[8], v[8];
        load8(d, dy, 8 * g, dy_kind);
        u32 index[8];
        if (gelu_table_indices<K>(index, u)) {
#pragma unroll
            for (int k = 0; k < 8; ++k) v[k] = d[k] * shared_table[index[k]];
        } else {
            half8_to_f32<K>(v, u);
#pragma unroll
            for (int k = 0; k < 8; ++k) v[k] = gelu_grad(d[k], v[k]);
        }
        store8(dx, 8 * g, v, dx_kind);
    }
    const i64 t = tail_index(n);
    if (t >= 0) {
        const float d = load_kind(dy, t, dy_kind);
        const u32 index = GeluTable<K>::index(x[t]);
        store_kind(dx, t,
                   index < GeluTable<K>::SIZE ? d * shared_table[index] : gelu_grad(d, load_from<K>(x[t])), dx_kind);
    }
}

// y = gelu(x), both bf16; table: the gelu_forward bits of the tabulated codes.
extern "C" __global__ void __launch_bounds__(GELU_TABLE_THREADS, GELU_TABLE_BLOCKS_PER_SM)
gelu_forward_bf16_table(u16* __restrict__ y, const u16* __restrict__ x, const u16* __restrict__ table, i64 n,
                        int reverse) {
    grid_dependency_entry();
    __shared__ __align__(16) u16 shared_table[GELU_TABLE_SIZE];
    gelu_forward_by_table<KIND_BF16>(y, x, table, shared_table, n, reverse);
}

// dx = dy * t(x), x bf16, dy and dx in the kinds dy_kind, dx_kind; table: t of the tabulated codes.
extern "C" __global__ void __launch_bounds__(GELU_TABLE_THREADS, GELU_TABLE_BLOCKS_PER_SM)
gelu_backward_bf16_table(void* __restrict__ dx, const void* __restrict__ dy, const u16* __restrict__ x,
                         const float* __restrict__ table, i64 n, int dy_kind, int dx_kind, int reverse) {
    grid_dependency_entry();
    __shared__ __align__(16) float shared_table[GELU_TABLE_SIZE];
    gelu_backward_by_table<KIND_BF16>(dx, dy, x, table, shared_table, n, dy_kind, dx_kind, reverse);
}

// The f16 tables' room, sized by the launch (GELU_F16_TABLE_SIZE entries of the table's type; gpu/gelu.py): the
// backward's exceeds the 48 KB of static shared memory a block may declare.
extern __shared__ uint4 gelu_dynamic_shared[];

// y = gelu(x), both f16; table: the gelu_forward bits of the tabulated codes.
extern "C" __global__ void __launch_bounds__(GELU_TABLE_THREADS, GELU_F16_TABLE_BLOCKS_PER_SM_FORWARD)
gelu_forward_f16_table(u16* __restrict__ y, const u16* __restrict__ x, const u16* __restrict__ table, i64 n,
                       int reverse) {
    grid_dependency_entry();
    gelu_forward_by_table<KIND_F16>(y, x, table, (u16*)gelu_dynamic_shared, n, reverse);
}

// dx = dy * t(x), x f16, dy and dx in the kinds dy_kind, dx_kind; table: t of the tabulated codes.
extern "C" __global__ void __launch_bounds__(GELU_TABLE_THREADS, GELU_F16_TABLE_BLOCKS_PER_SM_BACKWARD)
gelu_backward_f16_table(void* __restrict__ dx, const void* __restrict__ dy, const u16* __restrict__ x,
                        const float* __restrict__ table, i64 n, int dy_kind, int dx_kind, int reverse) {
    grid_dependency_entry();
    gelu_backward_by_table<KIND_F16>(dx, dy, x, table, (float*)gelu_dynamic_shared, n, dy_kind, dx_kind, reverse);
}

// ---------------------------------------------------------------------------------------------- by segment

#define GELU_SEG_EXP_LOW 1
#define GELU_SEG_EXP_END 20
#define GELU_SEG_BITS 5
#define GELU_SEG_COUNT 1216
#define GELU_SEG_TABLE_FLOATS 6080
#define GELU_SEG_THREADS 512
#define GELU_SEG_BLOCKS_PER_SM_FORWARD 3
#define GELU_SEG_BLOCKS_PER_SM_BACKWARD 2
static_assert(GELU_SEG_COUNT == (GELU_SEG_EXP_END - GELU_SEG_EXP_LOW) << (GELU_SEG_BITS + 1),
              "two signs x 2^GELU_SEG_BITS segments an exponent");
static_assert(GELU_SEG_TABLE_FLOATS == 5 * GELU_SEG_COUNT && GELU_SEG_TABLE_FLOATS % 4 == 0,
              "a float4 of coefficients and a bound a segment, copied in 16-byte pieces");

// An f16 code's segment, or GELU_SEG_COUNT or more where it has none (zero, subnormals, |x| >= 32, inf, NaN).
__device__ __forceinline__ u32 gelu_seg_index(u32 code) {
    return ((((code & 0x7FFFu) >> (10 - GELU_SEG_BITS)) - (GELU_SEG_EXP_LOW << GELU_SEG_BITS)) << 1) | (code >> 15);
}

// u = x - x_mid, exact: x_mid is x with its mantissa below the segment's bits cleared and the highest of them set,
// the code half a segment in, so |u| <= 2^(9 - GELU_SEG_BITS) ulp of x's binade and Horner's terms stay small.
__device__ __forceinline__ float gelu_seg_centred(float x) {
    return x - __uint_as_float((__float_as_uint(x) & (0xFFFFFFFFu << (23 - GELU_SEG_BITS))) |
                               (1u << (22 - GELU_SEG_BITS)));
}

// The cubic of code's segment at x (the code's value) and the segment's bound. The index is clamped, so that a code
// without a segment reads a real entry; its result is never used (gelu_seg_*'s `ok` is false).
__device__ __forceinline__ float gelu_seg_cubic(const float* shared, u32 index, float x, float& bound) {
    const u32 i = min(index, GELU_SEG_COUNT - 1u);
    const float4 c = ((const float4*)shared)[i];
    bound = shared[4 * GELU_SEG_COUNT + i];
    const float u = gelu_seg_centred(x);
    return fmaf(fmaf(fmaf(c.w, u, c.z), u, c.y), u, c.x);
}

// The f16 bits of lo and hi in one cvt (lo in the low half); same: whether they are one code. Rounding to nearest is
// monotone, so then every float32 in [lo, hi] rounds to that code (signed zeros count as different codes).
__device__ __forceinline__ u32 gelu_seg_same_half(float lo, float hi, bool& same) {
    const u32 pair = pack2<KIND_F16>(lo, hi);
    same = (pair & 0xFFFFu) == (pair >> 16);
    return pair & 0xFFFFu;
}

// gelu_forward's f16 y for code where ok comes back true (see the header; false: compute it).
__device__ __forceinline__ u32 gelu_seg_forward(const float* shared, u32 code, bool& ok) {
    const u32 index = gelu_seg_index(code);
    float bound;
    const float y = gelu_seg_cubic(shared, index, f16_bits_to_f32((u16)code), bound);
    const u32 bits = gelu_seg_same_half(__fsub_rd(y, bound), __fadd_ru(y, bound), ok);
    ok = ok && index < GELU_SEG_COUNT;
    return bits;
}

// gelu_backward's f16 dx for code and dy where ok comes back true: t's interval [t_lo, t_hi] holds the computing
// kernel's t, so its dy * t lies between dy * t_lo and dy * t_hi (in either order), rounded alike.
__device__ __forceinline__ u32 gelu_seg_backward(const float* shared, u32 code, float dy, bool& ok) {
    const u32 index = gelu_seg_index(code);
    float bound;
    const float t = gelu_seg_cubic(shared, index, f16_bits_to_f32((u16)code), bound);
    const u32 bits = gelu_seg_same_half(dy * __fsub_rd(t, bound), dy * __fadd_ru(t, bound), ok);
    ok = ok && index < GELU_SEG_COUNT;
    return bits;
}

__device__ __forceinline__ void gelu_seg_table_to_shared(float* shared, const float* __restrict__ table) {
    for (int i = threadIdx.x; i < GELU_SEG_TABLE_FLOATS / 4; i += blockDim.x)
        ((float4*)shared)[i] = ((const float4*)table)[i];
    __syncthreads();
}

// Element k's code of the eight in w (element 2j in the low half of word j), and its f16 bits r put in place.
__device__ __forceinline__ u32 half_of(const u32 w[4], int k) { return k & 1 ? w[k / 2] >> 16 : w[k / 2] & 0xFFFFu; }
__device__ __forceinline__ void set_half(u32 w[4], int k, u32 r) {
    w[k / 2] = k & 1 ? (w[k / 2] & 0xFFFFu) | (r << 16) : (w[k / 2] & 0xFFFF0000u) | r;
}

// y = gelu(x), both f16; table: gelu_segments.forward_table().packed() (GELU_SEG_TABLE_FLOATS floats).
extern "C" __global__ void __launch_bounds__(GELU_SEG_THREADS, GELU_SEG_BLOCKS_PER_SM_FORWARD)
gelu_forward_f16_seg(u16* __restrict__ y, const u16* __restrict__ x, const float* __restrict__ table, i64 n) {
    grid_dependency_entry();
    __shared__ __align__(16) float shared[GELU_SEG_TABLE_FLOATS];
    gelu_seg_table_to_shared(shared, table);
    GRID_STRIDE(g, n / 8) {
        const uint4 q = ((const uint4*)x)[g];
        const u32 in[4] = {q.x, q.y, q.z, q.w};
        u32 out[4], failed = 0;
#pragma unroll
        for (int j = 0; j < 4; ++j) {
            bool ok0, ok1;
            const u32 r0 = gelu_seg_forward(shared, in[j] & 0xFFFFu, ok0);
            const u32 r1 = gelu_seg_forward(shared, in[j] >> 16, ok1);
            out[j] = r0 | (r1 << 16);
            failed |= (ok0 ? 0u : 1u << (2 * j)) | (ok1 ? 0u : 2u << (2 * j));
        }
        // The warp computes slot k only where one of its lanes needs it (see the header's divergence paragraph).
        if (failed) {
#pragma unroll
            for (int k = 0; k < 8; ++k)
                if (failed & (1u << k)) set_half(out, k, f32_to_f16_bits(gelu(f16_bits_to_f32((u16)half_of(in, k)))));
        }
        ((uint4*)y)[g] = make_uint4(out[0], out[1], out[2], out[3]);
    }
    const i64 t = tail_index(n);
    if (t >= 0) {
        bool ok;
        const u32 r = gelu_seg_forward(shared, x[t], ok);
        y[t] = ok ? (u16)r : f32_to_f16_bits(gelu(f16_bits_to_f32(x[t])));
    }
}

// dx = dy * t(x), x, dy and dx f16 (the half roundings' kinds; others take gelu_backward); table:
// gelu_segments.backward_table().packed().
extern "C" __global__ void __launch_bounds__(GELU_SEG_THREADS, GELU_SEG_BLOCKS_PER_SM_BACKWARD)
gelu_backward_f16_seg(u16* __restrict__ dx, const u16* __restrict__ dy, const u16* __restrict__ x,
                      const float* __restrict__ table, i64 n) {
    grid_dependency_entry();
    __shared__ __align__(16) float shared[GELU_SEG_TABLE_FLOATS];
    gelu_seg_table_to_shared(shared, table);
    GRID_STRIDE(g, n / 8) {
        const uint4 q = ((const uint4*)x)[g], p = ((const uint4*)dy)[g];
        const u32 in[4] = {q.x, q.y, q.z, q.w}, din[4] = {p.x, p.y, p.z, p.w};
        u32 out[4], failed = 0;
#pragma unroll
        for (int j = 0; j < 4; ++j) {
            bool ok0, ok1;
            const u32 r0 = gelu_seg_backward(shared, in[j] & 0xFFFFu, f16_bits_to_f32((u16)(din[j] & 0xFFFFu)), ok0);
            const u32 r1 = gelu_seg_backward(shared, in[j] >> 16, f16_bits_to_f32((u16)(din[j] >> 16)), ok1);
            out[j] = r0 | (r1 << 16);
            failed |= (ok0 ? 0u : 1u << (2 * j)) | (ok1 ? 0u : 2u << (2 * j));
        }
        if (failed) {
#pragma unroll
            for (int k = 0; k < 8; ++k)
                if (failed & (1u << k))
                    set_half(out, k, f32_to_f16_bits(gelu_grad(f16_bits_to_f32((u16)half_of(din, k)),
                                                               f16_bits_to_f32((u16)half_of(in, k)))));
        }
        ((uint4*)dx)[g] = make_uint4(out[0], out[1], out[2], out[3]);
    }
    const i64 t = tail_index(n);
    if (t >= 0) {
        const float d = f16_bits_to_f32(dy[t]);
        bool ok;
        const u32 r = gelu_seg_backward(shared, x[t], d, ok);
        dx[t] = ok ? (u16)r : f32_to_f16_bits(gelu_grad(d, f16_bits_to_f32(x[t])));
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
// magnitude (code below GELU_FAST_LEAST_X), at or below the kernel's argument `tail` (a float16 code, gpu/gelu.py's
// choice: GELU_FAST_TAIL_X, x <= -3.75, with TR2_GELU_F16_FAST=1; GELU_FAST_TAIL_NONE, -inf alone, with =2), NaN, or,
// in the backward, one of the GELU_FAST_ROOT_CODES codes from GELU_FAST_ROOT_CODE beside t's zero near x = -0.7518.
// Those elements then: the same codes, and infs.
#define GELU_FAST_LEAST_X 0x0800u
#define GELU_FAST_TAIL_X 0xC380u
#define GELU_FAST_TAIL_NONE 0xFC00u
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

// y = gelu(x), both f16, within an ulp of gelu_forward's (see the header); tail: a float16 code (gpu/gelu.py's
// fast_tail()). n < 2^34 (gpu/gelu.py), so that the group index fits 32 bits.
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
