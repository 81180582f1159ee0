"""attention.cu's float32 dQ on wgmma with TR2_ATTN_F32_DQ_KT=1 (attn_backward_dq_wgfk2_tf32_hs64) writes k^T from the
tile's staged k rows (LandRows' layout) instead of copying k again through LandCols. The two must put the same value in
every float of the k^T tile, or dQ would change. This transcribes both paths as the kernel computes them (LandCols'
land and fill at 256 threads; the rows' layout; the kernel's key and column formula, read from its source) and
compares the tiles, a full one and ones cut short by T (rows past T are zeros on both paths)."""
from __future__ import annotations

import numpy as np
import pytest

from tr2.cupy_side import gpu

HS, BC, THREADS = 64, 64, 256
WARPS, CHK = THREADS // 32, BC // 4
R, LDV, WROWS, CPR = CHK // WARPS, HS + 8, 4 * (CHK // WARPS), HS // 4
EACH = (HS // 8) * CHK // WARPS
LINES = ("const int key0 = (w >> 1) * 8 + (w & 1) + 2 * (l & 1) + 4 * ((l >> 1) & 1);",
         "const int key = key0 + 32 * (e & 1), col = (e >> 1) * 8 + (l >> 2);",
         "kt[threadIdx.x + e * THREADS] = k[4 * ((((key >> 3) * (HS / 4) + (col >> 2)) << 3) + (key & 7)) + (col & 3)];")


def _kernel_source() -> str:
    src = (gpu.KERNELS_DIR / "attention.cu").read_text()
    start = src.index("__device__ void attention_backward_dq_wgf(")
    return src[start:src.index("\n}\n", start)]


def _by_land_cols(tile: np.ndarray, rows_left: int) -> np.ndarray:
    """LandCols<HS, BC, THREADS>: land (each lane's rows r0 + 2 i of its warp's part of the landing), then fill."""
    land = np.full(WARPS * WROWS * LDV, np.nan, dtype=np.float32)
    for tid in range(THREADS):
        lane, warp = tid & 31, tid >> 5
        r0 = lane // CPR
        key = (warp >> 1) * 8 + (warp & 1) + 2 * r0
        dst0, c0 = (warp * WROWS + r0) * LDV + 4 * (lane % CPR), 4 * (lane % CPR)
        for i in range(WROWS * CPR // 32):
            dkey = 4 * (i & 1) + 4 * WARPS * (i >> 1)
            d = dst0 + 2 * i * LDV
            land[d:d + 4] = tile[key + dkey, c0:c0 + 4] if key + dkey < rows_left else 0.0
    kt = np.full(THREADS * EACH, np.nan, dtype=np.float32)
    for tid in range(THREADS):
        lane, warp = tid & 31, tid >> 5
        src = warp * WROWS * LDV + (lane & 3) * LDV + (lane >> 2)
        for k in range(EACH):
            kt[tid + k * THREADS] = land[src + (k % R) * 4 * LDV + (k // R) * 8]
    return kt


def _staged_rows(tile: np.ndarray, rows_left: int) -> np.ndarray:
    """The k tile in LandRows' layout (what fill_rows leaves in sK): (row, col) at 4 idx + (col & 3)."""
    flat = np.zeros(BC * HS, dtype=np.float32)
    for row in range(BC):
        for col in range(HS):
            idx = (((row >> 3) * CPR + (col >> 2)) << 3) + (row & 7)
            flat[4 * idx + (col & 3)] = tile[row, col] if row < rows_left else 0.0
    return flat


def _by_transposing(k: np.ndarray) -> np.ndarray:
    """The kernel's k_transposed, as its source writes it."""
    kt = np.full(THREADS * EACH, np.nan, dtype=np.float32)
    for tid in range(THREADS):
        w, lane = tid >> 5, tid & 31   # the kernel's w and l
        key0 = (w >> 1) * 8 + (w & 1) + 2 * (lane & 1) + 4 * ((lane >> 1) & 1)
        for e in range(EACH):
            key, col = key0 + 32 * (e & 1), (e >> 1) * 8 + (lane >> 2)
            kt[tid + e * THREADS] = k[4 * ((((key >> 3) * (HS // 4) + (col >> 2)) << 3) + (key & 7)) + (col & 3)]
    return kt


def test_the_kernel_writes_k_transposed_with_the_formula_this_test_checks():
    body = _kernel_source()
    for line in LINES:
        assert line in body, line
    assert "if constexpr (KT_FROM_K) k_transposed(sK, sKt1);" in body


@pytest.mark.parametrize("rows_left", [64, 37, 1])
def test_k_transposed_from_the_staged_rows_is_land_cols_tile(rows_left):
    tile = np.arange(BC * HS, dtype=np.float32).reshape(BC, HS) + 1.0   # no zeros: a zero means a row past T
    want = _by_land_cols(tile, rows_left)
    assert not np.isnan(want).any(), "LandCols left a float of k^T unwritten"
    got = _by_transposing(_staged_rows(tile, rows_left))
    np.testing.assert_array_equal(got, want)
    assert sorted(want[want > 0].tolist()) == sorted(tile[:rows_left].ravel().tolist())   # each element once
