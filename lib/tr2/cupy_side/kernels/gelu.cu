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

// x and y in the kinds x_kind, y_kind (common.cuh's load_kind / store_kind).
extern "C" __global__ void gelu_forward(void* __restrict__ y, const void* __restrict__ x, i64 n, int x_kind,
                                        int y_kind) {
    grid_dependency_entry();
    GRID_STRIDE(g, n / 8) {
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
                                         const void* __restrict__ x, i64 n, int dy_kind, int x_kind, int dx_kind) {
    grid_dependency_entry();
    GRID_STRIDE(g, n / 8) {
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
                                                      const u16* __restrict__ table, u16* shared_table, i64 n) {
    gelu_table_to_shared<K>(shared_table, table);
    GRID_STRIDE(g, n / 8) {
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
                                                       float* shared_table, i64 n, int dy_kind, int dx_kind) {
    gelu_table_to_shared<K>(shared_table, table);
    GRID_STRIDE(g, n / 8) {
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
gelu_forward_bf16_table(u16* __restrict__ y, const u16* __restrict__ x, const u16* __restrict__ table, i64 n) {
    grid_dependency_entry();
    __shared__ __align__(16) u16 shared_table[GELU_TABLE_SIZE];
    gelu_forward_by_table<KIND_BF16>(y, x, table, shared_table, n);
}

// dx = dy * t(x), x bf16, dy and dx in the kinds dy_kind, dx_kind; table: t of the tabulated codes.
extern "C" __global__ void __launch_bounds__(GELU_TABLE_THREADS, GELU_TABLE_BLOCKS_PER_SM)
gelu_backward_bf16_table(void* __restrict__ dx, const void* __restrict__ dy, const u16* __restrict__ x,
                         const float* __restrict__ table, i64 n, int dy_kind, int dx_kind) {
    grid_dependency_entry();
    __shared__ __align__(16) float shared_table[GELU_TABLE_SIZE];
    gelu_backward_by_table<KIND_BF16>(dx, dy, x, table, shared_table, n, dy_kind, dx_kind);
}

// The f16 tables' room, sized by the launch (GELU_F16_TABLE_SIZE entries of the table's type; gpu/gelu.py): the
// backward's exceeds the 48 KB of static shared memory a block may declare.
extern __shared__ uint4 gelu_dynamic_shared[];

// y = gelu(x), both f16; table: the gelu_forward bits of the tabulated codes.
extern "C" __global__ void __launch_bounds__(GELU_TABLE_THREADS, GELU_F16_TABLE_BLOCKS_PER_SM_FORWARD)
gelu_forward_f16_table(u16* __restrict__ y, const u16* __restrict__ x, const u16* __restrict__ table, i64 n) {
    grid_dependency_entry();
    gelu_forward_by_table<KIND_F16>(y, x, table, (u16*)gelu_dynamic_shared, n);
}

// dx = dy * t(x), x f16, dy and dx in the kinds dy_kind, dx_kind; table: t of the tabulated codes.
extern "C" __global__ void __launch_bounds__(GELU_TABLE_THREADS, GELU_F16_TABLE_BLOCKS_PER_SM_BACKWARD)
gelu_backward_f16_table(void* __restrict__ dx, const void* __restrict__ dy, const u16* __restrict__ x,
                        const float* __restrict__ table, i64 n, int dy_kind, int dx_kind) {
    grid_dependency_entry();
    gelu_backward_by_table<KIND_F16>(dx, dy, x, table, (float*)gelu_dynamic_shared, n, dy_kind, dx_kind);
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
