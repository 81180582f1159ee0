"""The kernels' own dropout code, compiled for the host by g++ and run without a GPU: common.cuh's generator
(rng_draw, rng_field, rng_bits24) and attention.cu's Draw / KeepBits / Dropout, cut from the sources as they
are, with a warp's 32 lanes as threads and __shfl_xor_sync as an exchange between them. Checked against
tr2.cupy_side.rng on every block the attention kernels draw for (test_attention_tiling_cpu.dropout_blocks).
Skipped where no g++ is found."""
import shutil
import subprocess

import numpy as np
import pytest

from tr2.cupy_side import gpu, rng
from tr2.cupy_side.gpu import halfbits

pytestmark = pytest.mark.skipif(shutil.which("g++") is None, reason="no g++")

HARNESS = r"""
#include <barrier>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>
typedef uint32_t u32; typedef uint64_t u64; typedef int64_t i64;
#define __device__
#define __forceinline__ inline
thread_local int LANE;
std::barrier<>* BAR;
u32 SLOT[32];
u32 __shfl_xor_sync(u32, u32 v, int m) {   // every lane of the warp calls it together, as on the device
    SLOT[LANE] = v;
    BAR->arrive_and_wait();
    const u32 r = SLOT[LANE ^ m];
    BAR->arrive_and_wait();
    return r;
}
#include "dropout.inc"

// one block: layout 0 (warp rows are queries: forward, dQ) or 1 (keys: dK/dV); prints the 32 lanes' words
template <int MT, int NT>
void block(int layout, bool edge, int a, int b, int bc, int bh, int T, u64 seed, u64 off, u32 thr) {
    constexpr int W = (MT * NT * 4 + 31) / 32;
    u32 out[32][W];
    std::barrier bar(32);
    BAR = &bar;
    Dropout d{1, seed, off, thr, 1.0f};
    std::vector<std::thread> lanes;
    for (int l = 0; l < 32; ++l) lanes.emplace_back([&, l] {
        LANE = l;
        const int g = l >> 2, t = l & 3;
        KeepBits<MT, NT> k;
        if (layout == 0) k = d.keep_bits<ROW_PAIRS, MT, NT>(bh, T, edge, [&](int mt, int n, int e, int& i, int& j) {
            i = a + 16 * mt + g + 8 * (e >> 1);
            j = b * bc + n * 8 + 2 * t + (e & 1);
        });
        else k = d.keep_bits<LANE_PAIRS, MT, NT>(bh, T, edge, [&](int mt, int n, int e, int& i, int& j) {
            i = b * bc + n * 8 + 2 * t + (e & 1);
            j = a + 16 * mt + g + 8 * (e >> 1);
        });
        for (int w = 0; w < W; ++w) out[l][w] = k.w[w];
    });
    for (auto& x : lanes) x.join();
    for (int l = 0; l < 32; ++l)
        for (int w = 0; w < W; ++w) printf("%u ", out[l][w]);
    printf("\n");
}

int main(int argc, char** argv) {
    if (argc == 5 && !strcmp(argv[1], "bits")) {
        const u64 seed = strtoull(argv[2], 0, 10), off = strtoull(argv[3], 0, 10);
        for (long i = 0, n = atol(argv[4]); i < n; ++i) printf("%u\n", rng_bits24(seed, off, (u64)i));
        return 0;
    }
    std::string line;
    while (std::getline(std::cin, line)) {
        std::istringstream s(line);
        int layout, edge, mt, nt, a, b, bc, bh, T;
        u64 seed, off;
        u32 thr;
        if (!(s >> layout >> edge >> mt >> nt >> a >> b >> bc >> bh >> T >> seed >> off >> thr)) continue;
        if (mt == 2 && nt == 8) block<2, 8>(layout, edge, a, b, bc, bh, T, seed, off, thr);
        else if (mt == 2 && nt == 4) block<2, 4>(layout, edge, a, b, bc, bh, T, seed, off, thr);
        else if (mt == 1 && nt == 8) block<1, 8>(layout, edge, a, b, bc, bh, T, seed, off, thr);
        else return 1;
    }
}
"""


def cut(text, start, end):
    return text[text.index(start):text.index(end)]


@pytest.fixture(scope="module")
def harness(tmp_path_factory):
    d = tmp_path_factory.mktemp("dropout_host")
    common = (gpu.KERNELS_DIR / "common.cuh").read_text()
    attention = (gpu.KERNELS_DIR / "attention.cu").read_text()
    (d / "dropout.inc").write_text(cut(common, "__device__ __forceinline__ u64 rng_draw", "__device__ __forceinline__ u64 site_offset")
                                   + cut(attention, "enum Draw", "__device__ __forceinline__ Dropout make_dropout"))
    (d / "harness.cpp").write_text(HARNESS)
    subprocess.run(["g++", "-std=c++20", "-O1", "-Wno-unknown-pragmas", "-pthread", "-o", str(d / "harness"),
                    str(d / "harness.cpp")], check=True, capture_output=True)
    return str(d / "harness")


@pytest.mark.parametrize("seed, offset, n", [(1337, rng.site_offset(3, 7, 2), 10_001), ((1 << 64) - 1, (1 << 64) - 7, 101),
                                             (5, 3, 99)])
def test_rng_bits24_is_rngs(harness, seed, offset, n):
    out = subprocess.run([harness, "bits", str(seed), str(offset), str(n)], capture_output=True, text=True, check=True)
    want = (rng.uniform(seed, offset, n) * np.float32(2 ** 24)).astype(np.int64)
    np.testing.assert_array_equal(np.array(out.stdout.split(), dtype=np.int64), want)


@pytest.mark.parametrize("build", ["half", "float32"])
@pytest.mark.parametrize("T", [7, 64, 65, 130, 256])
def test_keep_bits_are_rngs(harness, build, T):
    """Each visible element (j <= i < T) of every block the forward, dQ and dK/dV draw for has rng.keep_mask's bit."""
    from test_attention_tiling_cpu import dropout_blocks
    p, seed, H = 0.3, 2 ** 63 + 99, 3
    off, thr = rng.site_offset(11, 7, 1), halfbits.dropout_threshold(p, float32_compare=True)
    want = rng.keep_mask(seed, off, (H, T, T), p)
    geo = gpu.attention_geometry()[build]
    for bh in (0, H - 1):
        blocks = list(dropout_blocks(build, T))
        specs = []
        for kernel, _, edge, at, mt, nt in blocks:   # at's parameters back out of the block's first lane
            i00, j00 = at(0, 0, 0, 0)
            bc = geo[kernel]
            specs.append((0, int(edge), mt, nt, i00, j00 // bc, bc) if kernel != "backward_dkdv" else
                         (1, int(edge), mt, nt, j00, i00 // bc, bc))
        inp = "".join(" ".join(map(str, s + (bh, T, seed, off, thr))) + "\n" for s in specs)
        out = subprocess.run([harness], input=inp, capture_output=True, text=True, check=True).stdout.splitlines()
        assert len(out) == len(blocks)
        for (kernel, _, _, at, mt, nt), line in zip(blocks, out):
            words = np.array(line.split(), dtype=np.uint64).reshape(32, -1)
            for lane in range(32):
                for m in range(mt):
                    for n in range(nt):
                        for e in range(4):
                            i, j = at(lane, m, n, e)
                            if j <= i < T:
                                b = (m * nt + n) * 4 + e
                                assert (int(words[lane, b // 32]) >> (b % 32)) & 1 == want[bh, i, j], (kernel, lane, i, j)
