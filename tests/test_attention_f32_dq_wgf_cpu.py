"""attention.cu's float32 dQ on wgmma (attention_backward_dq_wgf), its shared-memory addressing checked on the CPU by
transcribing the kernel's staging (LandRows' copies at 256 threads, as its constructor and land() compute them) and the
kernel's own formula, read from its source: the row dots D = rowsum(dO * O) are summed from the dO tile it staged
(rounded to TF32 in place, in LandRows' layout), not reloaded: the D loop's address, for every warp, lane and row of
the 128-row tile, must give each lane t its row's columns 16 t .. 16 t + 15 in order, and rows past T as zeros (the
GPU test holds D to the mma.sync kernel's bits). (Its k^T-from-k form and that form's check went with the form:
6369b54.)"""
from __future__ import annotations

import numpy as np
import pytest

from tr2.cupy_side import gpu

HS, BR, BC, THREADS = 64, 128, 64, 256   # head size; a block's queries; a key tile's keys; threads a block
CH = HS // 4                              # 16-byte chunks a row
D_READ = "sO + 4 * ((((lr >> 3) * (HS / 4) + 4 * t + q) << 3) + (lr & 7))"


def _kernel_source(function: str = "__device__ void attention_backward_dq_wgf(") -> str:
    src = (gpu.KERNELS_DIR / "attention.cu").read_text()
    start = src.index(function)
    return src[start:src.index("\n}\n", start)]


def _land_rows(tile: np.ndarray, rows_left: int) -> np.ndarray:
    """LandRows<HS, ROWS, THREADS>::land of a ROWS-row tile into a flat buffer (where fill_rows then rounds in place):
    thread tid's k-th copy goes to floats 4 (tid + k THREADS), from row r0 + k STEP and columns 4 ((tid >> 3) % CH)
    .. + 3; rows at or past rows_left land as zeros."""
    rows = tile.shape[0]
    each, step = rows * CH // THREADS, THREADS // CH
    flat = np.full(rows * HS, np.nan, dtype=np.float32)
    for tid in range(THREADS):
        r0, c0 = ((tid >> 3) // CH) * 8 + (tid & 7), 4 * ((tid >> 3) % CH)
        for k in range(each):
            d = 4 * (tid + k * THREADS)
            row = r0 + k * step
            flat[d:d + 4] = tile[row, c0:c0 + 4] if row < rows_left else 0.0
    return flat


def _d_read(flat: np.ndarray, lr: int, t: int, q: int) -> np.ndarray:
    at = 4 * ((((lr >> 3) * CH + 4 * t + q) << 3) + (lr & 7))
    return flat[at:at + 4]


def test_the_kernel_reads_d_with_the_formula_this_test_checks():
    """The formula lives in dq_row_dots, which the kernel calls with the block's first row."""
    dots = _kernel_source("__device__ __forceinline__ void dq_row_dots(")
    assert D_READ in dots
    assert "lr = i - row0" in dots and "const int i = r0 + g + 8 * r" in dots
    assert "dq_row_dots<HS>(Dr, Dvec, sO, ol, bh, T, r0, qb * BR, g, t);" in _kernel_source()


@pytest.mark.parametrize("rows_left", [128, 77, 1])
def test_each_lane_reads_its_rows_sixteen_columns_in_order(rows_left):
    tile = np.arange(BR * HS, dtype=np.float32).reshape(BR, HS) + 1.0   # no zeros: a zero read means a padding row
    flat = _land_rows(tile, rows_left)
    assert not np.isnan(flat).any(), "LandRows left a float of the tile unwritten"
    for wg in range(2):
        for warp in range(4):
            for lane in range(32):
                g, t = lane >> 2, lane & 3
                for r in range(2):
                    lr = wg * 64 + warp * 16 + g + 8 * r
                    got = np.concatenate([_d_read(flat, lr, t, q) for q in range(HS // 16)])
                    want = tile[lr, 16 * t:16 * t + 16] if lr < rows_left else np.zeros(16, np.float32)
                    np.testing.assert_array_equal(got, want, err_msg=f"wg {wg} warp {warp} lane {lane} row {lr}")
