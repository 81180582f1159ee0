"""attention.cu's float32 dQ on wgmma (attention_backward_dq_wgf), its shared-memory addressing checked on the CPU by
transcribing the kernel's staging (LandRows' and LandCols' copies and fills at 256 threads, as their constructors,
land() and fill() compute them) and the kernel's own formulas, read from its source:

- the row dots D = rowsum(dO * O) are summed from the dO tile it staged (rounded to TF32 in place, in LandRows'
  layout), not reloaded: the D loop's address, for every warp, lane and row of the 128-row tile, must give each lane t
  its row's columns 16 t .. 16 t + 15 in order, and rows past T as zeros (the GPU test holds D to the mma.sync
  kernel's bits);
- with TR2_ATTN_F32_DQ_KT=1 (attn_backward_dq_wgfk2_tf32_hs64) k^T is written from the key tile's staged k rows instead
  of copied again through LandCols: both paths must put the same value in every float of the k^T tile, or dQ would
  change, for a full tile and ones cut short by T (rows past T are zeros on both paths)."""
from __future__ import annotations

import numpy as np
import pytest

from tr2.cupy_side import gpu

HS, BR, BC, THREADS = 64, 128, 64, 256   # head size; a block's queries; a key tile's keys; threads a block
CH = HS // 4                              # 16-byte chunks a row
WARPS, CHK = THREADS // 32, BC // 4       # LandCols' parameters at 256 threads
R, LDV, WROWS = CHK // WARPS, HS + 8, 4 * (CHK // WARPS)
EACH_COLS = (HS // 8) * CHK // WARPS
D_READ = "sO + 4 * ((((lr >> 3) * (HS / 4) + 4 * t + q) << 3) + (lr & 7))"
KT_LINES = ("const int key0 = (w >> 1) * 8 + (w & 1) + 2 * (l & 1) + 4 * ((l >> 1) & 1);",
            "const int key = key0 + 32 * (e & 1), col = (e >> 1) * 8 + (l >> 2);",
            "kt[threadIdx.x + e * THREADS] = k[4 * ((((key >> 3) * (HS / 4) + (col >> 2)) << 3) + (key & 7)) + (col & 3)];")


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


def _land_cols(tile: np.ndarray, rows_left: int) -> np.ndarray:
    """LandCols<HS, BC, THREADS>: land (each lane's rows r0 + 2 i of its warp's part of the landing), then fill."""
    land = np.full(WARPS * WROWS * LDV, np.nan, dtype=np.float32)
    for tid in range(THREADS):
        lane, warp = tid & 31, tid >> 5
        r0 = lane // CH
        key = (warp >> 1) * 8 + (warp & 1) + 2 * r0
        dst0, c0 = (warp * WROWS + r0) * LDV + 4 * (lane % CH), 4 * (lane % CH)
        for i in range(WROWS * CH // 32):
            dkey = 4 * (i & 1) + 4 * WARPS * (i >> 1)
            d = dst0 + 2 * i * LDV
            land[d:d + 4] = tile[key + dkey, c0:c0 + 4] if key + dkey < rows_left else 0.0
    kt = np.full(THREADS * EACH_COLS, np.nan, dtype=np.float32)
    for tid in range(THREADS):
        lane, warp = tid & 31, tid >> 5
        src = warp * WROWS * LDV + (lane & 3) * LDV + (lane >> 2)
        for k in range(EACH_COLS):
            kt[tid + k * THREADS] = land[src + (k % R) * 4 * LDV + (k // R) * 8]
    return kt


def _d_read(flat: np.ndarray, lr: int, t: int, q: int) -> np.ndarray:
    at = 4 * ((((lr >> 3) * CH + 4 * t + q) << 3) + (lr & 7))
    return flat[at:at + 4]


def _k_transposed(k: np.ndarray) -> np.ndarray:
    """The kernel's k_transposed, as its source writes it."""
    kt = np.full(THREADS * EACH_COLS, np.nan, dtype=np.float32)
    for tid in range(THREADS):
        w, lane = tid >> 5, tid & 31   # the kernel's w and l
        key0 = (w >> 1) * 8 + (w & 1) + 2 * (lane & 1) + 4 * ((lane >> 1) & 1)
        for e in range(EACH_COLS):
            key, col = key0 + 32 * (e & 1), (e >> 1) * 8 + (lane >> 2)
            kt[tid + e * THREADS] = k[4 * ((((key >> 3) * (HS // 4) + (col >> 2)) << 3) + (key & 7)) + (col & 3)]
    return kt


def test_the_kernel_reads_d_and_writes_k_transposed_with_the_formulas_this_test_checks():
    """The formulas live in the helpers both wgmma dQ kernels call (dq_row_dots, dq_k_transposed); the kernels must
    call them with the block's first row and from the staged k rows."""
    dots = _kernel_source("__device__ __forceinline__ void dq_row_dots(")
    assert D_READ in dots
    assert "lr = i - row0" in dots and "const int i = r0 + g + 8 * r" in dots
    transposed = _kernel_source("__device__ __forceinline__ void dq_k_transposed(")
    for line in KT_LINES:
        assert line in transposed, line
    body = _kernel_source()
    assert "dq_row_dots<HS>(Dr, Dvec, sO, ol, bh, T, r0, qb * BR, g, t);" in body
    assert "if constexpr (KT_FROM_K) dq_k_transposed<HS, BC, THREADS>(sK, sKt1);" in body
    resident = _kernel_source("__device__ void attention_backward_dq_wgf_resident(")
    assert "dq_row_dots<HS>(Dr, Dvec, sO, ol, cur.bh, T, r0, cur.qb * BR, g, t);" in resident
    assert "dq_k_transposed<HS, BC, THREADS>(sK, sKt);" in resident


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


@pytest.mark.parametrize("rows_left", [64, 37, 1])
def test_k_transposed_from_the_staged_rows_is_land_cols_tile(rows_left):
    tile = np.arange(BC * HS, dtype=np.float32).reshape(BC, HS) + 1.0   # no zeros: a zero means a row past T
    want = _land_cols(tile, rows_left)
    assert not np.isnan(want).any(), "LandCols left a float of k^T unwritten"
    got = _k_transposed(_land_rows(tile, rows_left))
    np.testing.assert_array_equal(got, want)
    assert sorted(want[want > 0].tolist()) == sorted(tile[:rows_left].ravel().tolist())   # each element once
