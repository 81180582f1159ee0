"""The residual+LayerNorm forward's two bodies, cut from residual_layernorm.cu as they are and compiled for the host by
g++ (a warp's 32 lanes as threads, __shfl_xor_sync as an exchange between them): the rows-in-registers form at the
models' widths must give the general body's bits (s, y, mean, rstd), as the GPU tests ask of the kernels. The CPU
counterpart of tests/test_kernels_gpu.py::test_residual_layernorm's fused = unfused check; the host does not
contract multiply-adds as the GPU may, so this shows the same operations in the same order, and the GPU test stays
the judge. Skipped where no g++ is found."""
import shutil
import subprocess

import numpy as np
import pytest

from tr2.cupy_side import gpu, rng
from tr2.cupy_side.gpu import REGISTER_ROW_SIZES, halfbits

pytestmark = pytest.mark.skipif(shutil.which("g++") is None, reason="no g++")

HARNESS = r"""
#include <barrier>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>
typedef uint16_t u16; typedef uint32_t u32; typedef unsigned long long u64; typedef long long i64;
#define __device__
#define __global__
#define __forceinline__ inline
#define __restrict__
#define KIND_F32 0
#define KIND_BF16 1
#define KIND_F16 2
struct Dim { unsigned x; };
thread_local Dim threadIdx;
Dim blockIdx, blockDim;
std::barrier<>* BAR;
float SLOT[32];
float __shfl_xor_sync(u32, float v, int m) {   // every lane of the warp calls it together, as on the device
    SLOT[threadIdx.x & 31] = v;
    BAR->arrive_and_wait();
    const float r = SLOT[(threadIdx.x & 31) ^ m];
    BAR->arrive_and_wait();
    return r;
}
float __fmul_rn(float a, float b) { return a * b; }
float bf16_bits_to_f32(u16 h) { u32 u = (u32)h << 16; float f; memcpy(&f, &u, 4); return f; }
u16 f32_to_bf16_bits(float f) {   // nearest even, as cvt.rn.bf16.f32 (no NaN in these inputs)
    u32 u; memcpy(&u, &f, 4);
    return (u16)((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16);
}
float f16_bits_to_f32(u16 h) { _Float16 x; memcpy(&x, &h, 2); return (float)x; }
u16 f32_to_f16_bits(float f) { _Float16 x = (_Float16)f; u16 h; memcpy(&h, &x, 2); return h; }
#include "rlnf.inc"

// argv: N C kind drop seed offset threshold scale; stdin: x (N*C float32), b (N*C of kind), w (C float32) as raw
// bytes; stdout: s, y, mean, rstd of the general body, then of the register body, raw bytes.
template <int CPL>
void run(int N, int C, int kind, int drop, u64 seed, u64 offset, u32 thr, float scale, const float* x, const void* b,
         const float* w) {
    const size_t eb = kind == KIND_F32 ? 4 : 2;
    std::vector<float> s(N * C), mean(N), rstd(N);
    std::vector<unsigned char> y(N * C * eb);
    for (int form = 0; form < 2; ++form) {
        blockDim.x = 32;   // one row a block: the rows are independent
        for (int row = 0; row < N; ++row) {
            blockIdx.x = row;
            std::barrier bar(32);
            BAR = &bar;
            std::vector<std::thread> lanes;
            for (int l = 0; l < 32; ++l) lanes.emplace_back([&, l] {
                threadIdx.x = l;
                if (form == 0)
                    residual_layernorm_forward(s.data(), y.data(), mean.data(), rstd.data(), x, b, w, N, C, 1e-5f,
                                               kind, kind, drop, seed, offset, nullptr, thr, scale);
                else
                    residual_layernorm_forward_row_registers<CPL>(s.data(), y.data(), mean.data(), rstd.data(), x, b,
                                                                  w, N, 1e-5f, kind, kind, drop, seed, offset,
                                                                  nullptr, thr, scale);
            });
            for (auto& t : lanes) t.join();
        }
        fwrite(s.data(), 4, s.size(), stdout);
        fwrite(y.data(), 1, y.size(), stdout);
        fwrite(mean.data(), 4, N, stdout);
        fwrite(rstd.data(), 4, N, stdout);
    }
}

int main(int argc, char** argv) {
    const int N = atoi(argv[1]), C = atoi(argv[2]), kind = atoi(argv[3]), drop = atoi(argv[4]);
    const u64 seed = strtoull(argv[5], 0, 10), offset = strtoull(argv[6], 0, 10);
    const u32 thr = (u32)strtoul(argv[7], 0, 10);
    const float scale = strtof(argv[8], 0);
    const size_t eb = kind == KIND_F32 ? 4 : 2;
    std::vector<float> x(N * C), w(C);
    std::vector<unsigned char> b(N * C * eb);
    if (fread(x.data(), 4, x.size(), stdin) != x.size() || fread(b.data(), 1, b.size(), stdin) != b.size()
        || fread(w.data(), 4, w.size(), stdin) != w.size()) return 2;
    if (C == 384) run<12>(N, C, kind, drop, seed, offset, thr, scale, x.data(), b.data(), w.data());
    else if (C == 768) run<24>(N, C, kind, drop, seed, offset, thr, scale, x.data(), b.data(), w.data());
    else if (C == 1024) run<32>(N, C, kind, drop, seed, offset, thr, scale, x.data(), b.data(), w.data());
    else return 3;
}
"""


def cut(text, start, end):
    return text[text.index(start):text.index(end)]


@pytest.fixture(scope="module")
def harness(tmp_path_factory):
    d = tmp_path_factory.mktemp("rlnf_host")
    common = (gpu.KERNELS_DIR / "common.cuh").read_text()
    source = (gpu.KERNELS_DIR / "residual_layernorm.cu").read_text()
    (d / "rlnf.inc").write_text(
        cut(common, "// Every kernel's first statement", "#define KIND_F32")   # empty off the device
        + cut(common, "__device__ __forceinline__ float warp_sum", "__device__ __forceinline__ float warp_max")
        + cut(common, "__device__ __forceinline__ u64 rng_draw", "// The multi-tensor table")
        + common[common.index("__device__ __forceinline__ float load_kind"):]
        + cut(source, 'extern "C" __global__ void residual_layernorm_forward(', "#define RESIDUAL_LAYERNORM_FORWARD_ROWS"))
    (d / "harness.cpp").write_text(HARNESS)
    subprocess.run(["g++", "-std=c++20", "-O1", "-Wno-unknown-pragmas", "-pthread", "-o", str(d / "harness"),
                    str(d / "harness.cpp")], check=True, capture_output=True)
    return str(d / "harness")


@pytest.mark.parametrize("C", REGISTER_ROW_SIZES)
@pytest.mark.parametrize("kind", ["float32", "bfloat16", "float16"])
@pytest.mark.parametrize("p", [0.0, 0.2])
def test_register_rows_give_the_bodys_bits(harness, C, kind, p):
    N = 5
    g = np.random.default_rng(C + 7 * len(kind) + int(10 * p))
    x = g.standard_normal((N, C), dtype=np.float32)
    b = g.standard_normal((N, C), dtype=np.float32) * np.float32(0.5)
    w = (1.0 + 0.1 * g.standard_normal(C)).astype(np.float32)
    code = {"float32": 0, "bfloat16": 1, "float16": 2}[kind]
    b_bytes = b.tobytes() if kind == "float32" else halfbits.to_bits(b, code).astype(np.uint16).tobytes()
    seed, offset = 1337, rng.site_offset(5, 3, 2)
    thr = halfbits.dropout_threshold(p, float32_compare=True) if p > 0 else 0
    scale = np.float32(1.0 / (1.0 - p))
    out = subprocess.run([harness, str(N), str(C), str(code), str(int(p > 0)), str(seed), str(offset), str(thr),
                          repr(float(scale))], input=x.tobytes() + b_bytes + w.tobytes(), capture_output=True,
                         check=True).stdout
    eb = 4 if kind == "float32" else 2
    size = N * C * 4 + N * C * eb + 2 * N * 4
    assert len(out) == 2 * size
    body, regs = out[:size], out[size:]
    assert body == regs, "the register rows' s, y, mean or rstd differ from the body's"
    s = np.frombuffer(body[:N * C * 4], dtype=np.float32).reshape(N, C)
    assert np.isfinite(s).all() and not (s == 0).all()   # the harness ran the rows (a broken one writes nothing)
