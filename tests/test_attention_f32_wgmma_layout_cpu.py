"""attention.cu's float32 wgmma forward stages v transposed in two steps (LandCols): a warp lands the rows of v it will
read by 16-byte copies into its own part of a padded landing buffer, then each lane rounds its elements into the
transposed core-matrix tile. The GPU tests check the kernel's results; this checks the index arithmetic on the CPU:
the landing's rows and the fill's reads, transcribed from the source (whose lines are checked to be still there), put
every (key, d) of the tile exactly where the layout first written put it (key 2t of each 8-key group at position t,
2t + 1 at t + 4; tested on H100s, results/h100-perf-20261206b), each landed float read once, and each fill read of a
warp on 32 different banks."""
from __future__ import annotations

import pytest

from tr2.cupy_side import gpu

HS = ROWS = 64

# The source lines the transcription below follows (LandCols in attention.cu).
SOURCE_LINES = (
    "key = (warp >> 1) * 8 + (warp & 1) + 2 * r0;",
    "src0 = key * stride + 4 * (lane % CPR);",
    "dst0 = (warp * WROWS + r0) * LDV + 4 * (lane % CPR);",
    "const int dkey = 4 * (i & 1) + 4 * WARPS * (i >> 1);",
    "float* d = dst + dst0 + 2 * i * LDV;",
    "const float* src = land + warp * WROWS * LDV + (lane & 3) * LDV + (lane >> 2);",
    "const float x = src[(k % R) * 4 * LDV + (k / R) * 8], hx = tf32_rne(x);",
    "const int at = threadIdx.x + k * THREADS;",
)


def test_the_transcribed_lines_are_the_sources():
    src = (gpu.KERNELS_DIR / "attention.cu").read_text()
    for line in SOURCE_LINES:
        assert line in src, line


def first_layout(w: int, lane: int, k: int, warps: int) -> tuple[int, int]:
    """(key, d) at float tid + k THREADS of the transposed tile, as the first landing (4-byte copies) placed it."""
    chk = ROWS // 4
    cm = w + k * warps
    p = (cm % chk) * 4 + (lane & 3)
    q = p & 7
    return (p & ~7) + (2 * q if q < 4 else 2 * (q - 4) + 1), (cm // chk) * 8 + (lane >> 2)


@pytest.mark.parametrize("threads", [256, 128])
def test_the_warps_landing_and_fill_give_the_transposed_tile(threads):
    warps = threads // 32
    chk, cpr, ldv = ROWS // 4, HS // 4, HS + 8
    r, wrows = chk // warps, 4 * (chk // warps)
    each, land_n = (HS // 8) * chk // warps, wrows * cpr // 32
    landed = {}
    for w in range(warps):
        for lane in range(32):
            r0 = lane // cpr
            key = (w >> 1) * 8 + (w & 1) + 2 * r0
            dst0 = (w * wrows + r0) * ldv + 4 * (lane % cpr)
            for i in range(land_n):
                dkey = 4 * (i & 1) + 4 * warps * (i >> 1)
                for e in range(4):
                    at = dst0 + 2 * i * ldv + e
                    assert at not in landed and at < w * wrows * ldv + wrows * ldv   # within the warp's own rows
                    landed[at] = (key + dkey, 4 * (lane % cpr) + e)
    assert len(landed) == ROWS * HS
    read = set()
    for w in range(warps):
        for k in range(each):
            banks = set()
            for lane in range(32):
                at = w * wrows * ldv + (lane & 3) * ldv + (lane >> 2) + (k % r) * 4 * ldv + (k // r) * 8
                assert landed[at] == first_layout(w, lane, k, warps), (w, lane, k)
                assert at not in read
                read.add(at)
                banks.add(at % 32)
            assert len(banks) == 32, (w, k)
    assert len(read) == ROWS * HS
