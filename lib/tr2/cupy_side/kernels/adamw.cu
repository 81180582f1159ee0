// adamw.cu: one multi-tensor AdamW launch over every parameter, in PyTorch's form:
//   g = grad * grad_scale                 (the clip factor and 1/loss-scale, folded on the device)
//   m = m + (1 - beta1) (g - m) (torch's lerp);  v = beta2 v + (1 - beta2) g^2
//   p = p (1 - lr wd)                     (tensors of 2+ dims only)
//   p = p - (lr / bias_corr1) m / (sqrt(v) / sqrt(bias_corr2) + eps)
//   half = p rounded to the build's half type (round to nearest even), where the tensor has a half copy
// (reference: tr2/cupy_side/ops/adamw.py). The step's scalars come from device memory `hyper` = [lr, beta1, beta2, eps, weight_decay,
// bias_corr1, bias_corr2, grad_scale, skip] (bias_corr_k = 1 - beta_k^step), so nothing per step is baked
// into the launch (a CUDA graph of the whole step can replay it). skip != 0 (a float16 step whose gradients
// overflowed, decided on the device): nothing is written.
//
// Why the half copy here: in the half builds every product reads its weight in the half type. The copy the
// products read (gpu/context.py keeps one per weight) is rewritten from the new float32 master in the same pass,
// so no cast of a weight runs before a product. The copy holds exactly the bits a cast of the master would give
// (the same cvt.rn of the same float32 value).
//
// The tensors: `table` [n_tensors, TENSOR_COLS] of u64 = (param, grad, m, v, numel, decay flag, half copy or 0,
// grad kind: a product's dW arrives in the half type under half roundings and is widened here, exactly, as the
// cast kernel did before: 49 launches a step of gpt2-small, 317 us, in call 4 of results/h200-perf-20261201;
// then sums, starts, row width: common.cuh);
// block b works on elements [chunk_start[b], chunk_start[b] + chunk) of tensor chunk_tensor[b]. half_kind is the
// build's half type (1 bfloat16, 2 float16), read only for rows with a half copy. The tied wte's gradient (grad kind
// KIND_TIED | half kind, common.cuh) is lm_head's half dW plus the embedding's sums, added here as it is read.
#include "common.cuh"

struct AdamwStep {
    float b1, b2, eps, gs, step_size, bc2_sqrt, decay_factor;
    // One element: the gradient's value in, the new m, v, p out (the arithmetic of ops/adamw.py, in one place
    // for the vector and the scalar loop). Every rounding is spelled out (_rn intrinsics, explicit fma): left to
    // the compiler, the float16 reader's instance contracted v's update as g (g (1 - b2)) + b2 v where the float32
    // one fused b2 v + ((1 - b2) g) g, and 25 of 4160 parameters differed from the same gradients given in float32
    // (GPU test, call 6 of results/h200-perf-20261201). The forms below are the float32 instance's, so float32
    // gradients keep the bits they had.
    __device__ __forceinline__ float update(float graw, float& mi, float& vi, float pi) const {
        const float g = __fmul_rn(graw, gs);
        mi = __fmaf_rn(1.0f - b1, __fsub_rn(g, mi), mi);
        vi = __fmaf_rn(vi, b2, __fmul_rn(g, __fmul_rn(1.0f - b2, g)));
        const float denom = __fadd_rn(__fdiv_rn(__fsqrt_rn(vi), bc2_sqrt), eps);
        return __fmaf_rn(__fdiv_rn(mi, denom), -step_size, __fmul_rn(pi, decay_factor));
    }
};

// The step's constants from `hyper` for a tensor with (decay != 0) or without weight decay: one expression for both
// kernels, so that both round (and contract) it alike.
__device__ __forceinline__ AdamwStep adamw_step(const float* __restrict__ hyper, int decay) {
    const float lr = hyper[0], wd = hyper[4], bc1 = hyper[5], bc2 = hyper[6];
    return AdamwStep{hyper[1], hyper[2], hyper[3], hyper[7], lr / bc1, sqrtf(bc2), decay ? 1.0f - lr * wd : 1.0f};
}

// Four consecutive gradient values from i (a multiple of 4; the pointer 16 bytes aligned for float32, 8 for
// half bits) and four half-type values stored likewise.
template <int GK> __device__ __forceinline__ void load4(float out[4], const typename Elem<GK>::T* g, i64 i) {
    if constexpr (GK == KIND_F32) {
        const float4 a = *(const float4*)(g + i);
        out[0] = a.x; out[1] = a.y; out[2] = a.z; out[3] = a.w;
    } else {
        const uint2 a = *(const uint2*)(g + i);
        out[0] = load_from<GK>((u16)(a.x & 0xFFFFu)); out[1] = load_from<GK>((u16)(a.x >> 16));
        out[2] = load_from<GK>((u16)(a.y & 0xFFFFu)); out[3] = load_from<GK>((u16)(a.y >> 16));
    }
}

__device__ __forceinline__ void store4_kind(u16* h, i64 i, const float x[4], int kind) {
    u16 b[4];
#pragma unroll
    for (int k = 0; k < 4; ++k) b[k] = kind == KIND_BF16 ? f32_to_bf16_bits(x[k]) : f32_to_f16_bits(x[k]);
    *(uint2*)(h + i) = make_uint2((u32)b[0] | ((u32)b[1] << 16), (u32)b[2] | ((u32)b[3] << 16));
}

// Elements i..i + 3 (every pointer 16 bytes aligned there, the half copy's 8) from their four gradient values: m, v
// and p read, updated and written, the half copy written from the new p.
__device__ __forceinline__ void update4(float* __restrict__ p, float* __restrict__ m, float* __restrict__ v,
                                        u16* __restrict__ half, i64 i, const float g[4], const AdamwStep& st,
                                        int half_kind) {
    float pn[4];
    float4 mv = *(const float4*)(m + i), vv = *(const float4*)(v + i);
    const float4 pv = *(const float4*)(p + i);
    pn[0] = st.update(g[0], mv.x, vv.x, pv.x);
    pn[1] = st.update(g[1], mv.y, vv.y, pv.y);
    pn[2] = st.update(g[2], mv.z, vv.z, pv.z);
    pn[3] = st.update(g[3], mv.w, vv.w, pv.w);
    *(float4*)(m + i) = mv;
    *(float4*)(v + i) = vv;
    *(float4*)(p + i) = make_float4(pn[0], pn[1], pn[2], pn[3]);
    if (half != nullptr) store4_kind(half, i, pn, half_kind);
}

// Elements [start, end) of one tensor whose gradient is held in kind GK: four a thread by 16-byte (float32) and
// 8-byte (half) accesses where every pointer allows it (start is a multiple of 4: chunks are), the rest one by one.
// The scalar form read and wrote 4 bytes an access and ran at ~68% of the memory's speed (1137 us a step of
// gpt2-small for ~3.7 GB, call 4 of results/h200-perf-20261201).
template <int GK>
__device__ __forceinline__ void adamw_elements(float* __restrict__ p, const typename Elem<GK>::T* __restrict__ gr,
                                               float* __restrict__ m, float* __restrict__ v, u16* __restrict__ half,
                                               i64 start, i64 end, const AdamwStep& st, int half_kind) {
    const u64 align = ((u64)p | (u64)m | (u64)v) & 15u;
    const u64 galign = (u64)(gr + start) & (GK == KIND_F32 ? 15u : 7u);
    const bool vec = align == 0 && galign == 0 && ((u64)half & 7u) == 0 && (start & 3) == 0;
    i64 i0 = start;
    if (vec) {
        const i64 n4 = (end - start) / 4;
        for (i64 q = threadIdx.x; q < n4; q += blockDim.x) {
            const i64 i = start + 4 * q;
            float g[4];
            load4<GK>(g, gr, i);
            update4(p, m, v, half, i, g, st, half_kind);
        }
        i0 = start + 4 * n4;
    }
    for (i64 i = i0 + threadIdx.x; i < end; i += blockDim.x) {
        float mi = m[i], vi = v[i];
        const float pi = st.update(load_from<GK>(gr[i]), mi, vi, p[i]);
        m[i] = mi;
        v[i] = vi;
        p[i] = pi;
        if (half != nullptr) store_kind(half, i, pi, half_kind);
    }
}

// The tied wte's rows (grad kind KIND_TIED | GK: common.cuh's TiedRows): adamw_elements's arithmetic on the values
// TiedRows gives, the float32 gradient the widening and embedding_backward_wte made before, so the same bits. Four a
// thread where every pointer allows it and the row width is a multiple of 4 (the four then share a row), else one by
// one.
template <int GK>
__device__ __forceinline__ void adamw_elements_tied(float* __restrict__ p, const u64* row, float* __restrict__ m,
                                                    float* __restrict__ v, u16* __restrict__ half, i64 start, i64 end,
                                                    const AdamwStep& st, int half_kind) {
    const u16* __restrict__ gr = (const u16*)row[1];
    const TiedRows tied{(const float*)row[8], (const int*)row[9]};
    const int C = (int)row[10];
    const u64 align = ((u64)p | (u64)m | (u64)v | (u64)tied.sums) & 15u;
    const bool vec = align == 0 && ((u64)(gr + start) & 7u) == 0 && ((u64)half & 7u) == 0 && (start & 3) == 0
                     && (C & 3) == 0;
    i64 i0 = start;
    if (vec) {
        const i64 n4 = (end - start) / 4;
        RowWalk w(start + 4 * (i64)threadIdx.x, C);
        for (i64 q = threadIdx.x; q < n4; q += blockDim.x) {
            const i64 i = start + 4 * q;
            float g[4];
            load4<GK>(g, gr, i);
            if (tied.present(w.v)) {   // the four share row w.v
                const float4 sv = __ldg((const float4*)(tied.sums + i));
                g[0] = __fadd_rn(g[0], sv.x); g[1] = __fadd_rn(g[1], sv.y);
                g[2] = __fadd_rn(g[2], sv.z); g[3] = __fadd_rn(g[3], sv.w);
            }
            update4(p, m, v, half, i, g, st, half_kind);
            w.advance(4 * blockDim.x);
        }
        i0 = start + 4 * n4;
    }
    RowWalk w(i0 + threadIdx.x, C);
    for (i64 i = i0 + threadIdx.x; i < end; i += blockDim.x) {
        float mi = m[i], vi = v[i];
        const float pi = st.update(tied.add(load_from<GK>(gr[i]), i, w.v), mi, vi, p[i]);
        m[i] = mi;
        v[i] = vi;
        p[i] = pi;
        if (half != nullptr) store_kind(half, i, pi, half_kind);
        w.advance(blockDim.x);
    }
}

extern "C" __global__ void adamw_update(const u64* __restrict__ table, const int* __restrict__ chunk_tensor,
                                        const i64* __restrict__ chunk_start, int chunk,
                                        const float* __restrict__ hyper, int half_kind) {
    grid_dependency_entry();
    if (hyper[8] != 0.0f) return;
    const int t = chunk_tensor[blockIdx.x];
    const u64* row = table + TENSOR_COLS * (i64)t;
    float* p = (float*)row[0];
    float* m = (float*)row[2];
    float* v = (float*)row[3];
    const i64 n = (i64)row[4];
    const int decay = (int)row[5];
    u16* half = (u16*)row[6];
    const int grad_kind = (int)row[7];
    const AdamwStep st = adamw_step(hyper, decay);
    const i64 start = chunk_start[blockIdx.x];
    const i64 end = (start + (i64)chunk < n) ? start + (i64)chunk : n;
    if (grad_kind & KIND_TIED) return;   // adamw_update_tied's
    if (grad_kind == KIND_BF16)
        adamw_elements<KIND_BF16>(p, (const u16*)row[1], m, v, half, start, end, st, half_kind);
    else if (grad_kind == KIND_F16)
        adamw_elements<KIND_F16>(p, (const u16*)row[1], m, v, half, start, end, st, half_kind);
    else
        adamw_elements<KIND_F32>(p, (const float*)row[1], m, v, half, start, end, st, half_kind);
}

// The tied wte's chunks, blocks [first, first + gridDim.x) of the table's chunks (adamw_update leaves them): a
// kernel of its own, since its path inside adamw_update took that kernel from 46 to 64 registers a thread (nvdisasm
// on the CPU), fewer blocks a multiprocessor for every tensor; one more launch a step instead.
extern "C" __global__ void adamw_update_tied(const u64* __restrict__ table, const int* __restrict__ chunk_tensor,
                                             const i64* __restrict__ chunk_start, int chunk,
                                             const float* __restrict__ hyper, int half_kind, int first) {
    grid_dependency_entry();
    if (hyper[8] != 0.0f) return;
    const int b = first + blockIdx.x;
    const int t = chunk_tensor[b];
    const u64* row = table + TENSOR_COLS * (i64)t;
    const int grad_kind = (int)row[7];
    if (!(grad_kind & KIND_TIED)) return;
    float* p = (float*)row[0];
    const i64 n = (i64)row[4];
    const AdamwStep st = adamw_step(hyper, (int)row[5]);
    const i64 start = chunk_start[b];
    const i64 end = (start + (i64)chunk < n) ? start + (i64)chunk : n;
    if (grad_kind == (KIND_TIED | KIND_BF16))
        adamw_elements_tied<KIND_BF16>(p, row, (float*)row[2], (float*)row[3], (u16*)row[6], start, end, st, half_kind);
    else
        adamw_elements_tied<KIND_F16>(p, row, (float*)row[2], (float*)row[3], (u16*)row[6], start, end, st, half_kind);
}

// The step's scalars before adamw_update (ops/adamw.py's scalars, operation for operation), in one thread:
//   inv = 1 / *scale (scale nullable: no loss scaling, inv = 1), norm = *gnorm * inv (gnorm nullable where
//   max_norm is 0 and there is no scale), skip = !isfinite(norm) (loss scaling only; else hyper's skip stays),
//   grad_scale = min(1, max_norm / (norm + 1e-6)) * inv (1 * inv where max_norm is 0), NaN passing through the
//   min as NumPy's minimum passes it; t += 1 - skip (float64); bias_corr_k = 1 - beta_k^t (float64, rounded once).
// Why: these were CuPy arithmetic on 0-d arrays, 13 launches a step (power, subtract, add, divide, minimum,
// multiply, copies: ~17 us of kernels and a graph gap each on the H200, call 2 of results/h200-perf-20261202).
extern "C" __global__ void adamw_scalars(float* __restrict__ hyper, double* __restrict__ t,
                                         const float* __restrict__ gnorm, const float* __restrict__ scale,
                                         float max_norm, double beta1, double beta2) {
    grid_dependency_entry();
    if (threadIdx.x != 0 || blockIdx.x != 0) return;
    const bool scaled = scale != nullptr;
    const float inv = scaled ? __fdiv_rn(1.0f, *scale) : 1.0f;
    const float norm = gnorm != nullptr ? __fmul_rn(*gnorm, inv) : 0.0f;
    if (scaled) hyper[8] = isfinite(norm) ? 0.0f : 1.0f;   // skip
    float clip = 1.0f;
    if (max_norm != 0.0f) {
        const float q = __fdiv_rn(max_norm, __fadd_rn(norm, 1e-6f));
        clip = 1.0f < q ? 1.0f : q;   // q NaN: q
    }
    hyper[7] = __fmul_rn(clip, inv);   // grad_scale
    const double step = __dadd_rn(*t, scaled ? __dsub_rn(1.0, (double)hyper[8]) : 1.0);
    *t = step;
    hyper[5] = __double2float_rn(__dsub_rn(1.0, pow(beta1, step)));   // bias_corr1
    hyper[6] = __double2float_rn(__dsub_rn(1.0, pow(beta2, step)));   // bias_corr2
}

// The float16 loss scale's update after a step (ops/loss_scale.update, operation for operation), in one thread:
//   found = *found_inf != 0; good = found ? 0 : *good_steps + 1; grow = good == interval;
//   *scale = found ? *scale * backoff : (grow ? *scale * growth : *scale); *good_steps = grow ? 0 : good.
// Why: as CuPy arithmetic on 0-d arrays it was about ten launches a float16 step, each a graph node and its gap.
extern "C" __global__ void loss_scale_update(float* __restrict__ scale, float* __restrict__ good_steps,
                                             const float* __restrict__ found_inf, float growth, float backoff,
                                             float interval) {
    grid_dependency_entry();
    if (threadIdx.x != 0 || blockIdx.x != 0) return;
    const bool found = *found_inf != 0.0f;   // NaN counts as found, as NumPy's != 0 has it
    const float good = found ? 0.0f : __fadd_rn(*good_steps, 1.0f);
    const bool grow = good == interval;
    const float s = *scale;
    *scale = found ? __fmul_rn(s, backoff) : (grow ? __fmul_rn(s, growth) : s);
    *good_steps = grow ? 0.0f : good;
}
