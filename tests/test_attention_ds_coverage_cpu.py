"""ds_t's contract between the dS-storing dK/dV kernels and attention_backward_dq_ds (attention.cu), checked without a GPU:
every (key, query) element the dQ kernel reads for a query before T was written by the dK/dV kernel, for the mma.sync
kernel (32-key warp chunks, 32-query tiles) and the wgmma one (the TMA dK/dV: 64-key consumer warpgroups, 64-query
tiles, two warpgroups a block), at the dQ kernel's 128 queries a block. The loops below transcribe the kernels' index
arithmetic (the tile and warp conditions, rows past T, columns past ldq); an element read but never written would be
uninitialised memory in dQ (on the GPU the poisoned tests see it as NaN only where the pool handed over poisoned
memory)."""
from __future__ import annotations

import numpy as np
import pytest

from tr2.cupy_side import gpu

RW = gpu.attention_geometry()["half"]["backward_dkdv"]   # the mma.sync kernels' warp rows (16 MT) = their query tile
BR_MMA = 128     # the mma.sync dK/dV kernel's keys a block
BK = 64          # DSQ_KEYS: the dQ kernel's staged keys


def ldq_of(T: int, wg: bool) -> int:
    """ds_t's row width as gpu/attention.py's ds_shape takes it (gpu.ds_row_halves, the function itself: a
    transcription here let a row width the wgmma kernel overran pass on the CPU, call 3 of
    results/h200-perf-20261201h)."""
    return gpu.ds_row_halves(T, wg)


def written_mma_sync(T: int) -> np.ndarray:
    """attention_backward_dkdv with DS: warp keys k0..k0+31, query tiles of 32 from the block's first, a tile taken
    where its last query is at or past the warp's first key; rows j < T."""
    ldq = ldq_of(T, False)
    w = np.zeros((T, ldq), dtype=bool)
    nqt = -(-T // RW)
    for kb in range(-(-T // BR_MMA)):
        for warp in range(4):
            k0 = kb * BR_MMA + warp * RW
            for qt in range(kb * BR_MMA // RW, nqt):
                if qt * RW + RW - 1 >= k0:
                    w[k0:min(k0 + RW, T), qt * RW:qt * RW + RW] = True
    return w


def written_wgmma(T: int, nwg: int = 2) -> np.ndarray:
    """attention_backward_dkdv_tma_resident (as the wgmma kernels on cp.async before it, removed since: one or two
    warpgroups a block): warpgroup keys K0..K0+63 (warps of 16), 64-query tiles from the one holding the block's first
    key, a tile taken where its last query is at or past the warpgroup's first key; rows j < T,
    every column of the tile (all below ldq, a multiple of 64)."""
    ldq = ldq_of(T, True)
    w = np.zeros((T, ldq), dtype=bool)
    BR = 64 * nwg
    nqt = -(-T // 64)
    for kb in range(-(-T // BR)):
        for wg in range(nwg):
            K0 = kb * BR + wg * 64
            for qt in range(kb * BR // 64, nqt):
                if qt * 64 + 63 >= K0:
                    assert qt * 64 + 64 <= ldq
                    w[K0:min(K0 + 64, T), qt * 64:qt * 64 + 64] = True
    return w


def read_dq(T: int, ldq: int, queries: int) -> np.ndarray:
    """attention_backward_dq_ds: a warp's 32 queries r0.., the key tiles of 64 up to the block's last query, a k16
    slice taken where it starts at or before the warp's last query; keys past T and queries past ldq are staged as
    zeros (not read from ds_t); queries at or past T feed only dQ rows that are not stored (not counted)."""
    r = np.zeros((T, ldq), dtype=bool)
    chunks = queries // RW
    for qb in range(-(-T // queries)):
        last = min(qb * queries + queries - 1, T - 1) // BK
        for chunk in range(chunks):
            r0 = qb * queries + chunk * RW
            for kt in range(last + 1):
                for ks in range(BK // 16):
                    j0 = kt * BK + ks * 16
                    if j0 <= r0 + RW - 1:
                        r[j0:min(j0 + 16, T), r0:min(r0 + RW, T, ldq)] = True
    return r


TS = [1, 7, 31, 32, 33, 63, 64, 65, 127, 128, 129, 192, 255, 256, 257, 300, 1000, 1024]


# 128 queries a block: the dQ kernel built (its 64-query form was removed: attention.cu's header)
QUERIES = 128


@pytest.mark.parametrize("T", TS)
def test_mma_sync_dkdv_writes_all_the_dq_kernel_reads(T):
    missing = read_dq(T, ldq_of(T, False), QUERIES) & ~written_mma_sync(T)
    assert not missing.any(), f"T={T}: {int(missing.sum())} elements read, never written"


@pytest.mark.parametrize("T", TS)
def test_wgmma_dkdv_writes_all_the_dq_kernel_reads(T):
    missing = read_dq(T, ldq_of(T, True), QUERIES) & ~written_wgmma(T)
    assert not missing.any(), f"T={T}: {int(missing.sum())} elements read, never written"


def test_the_transcription_can_fail():
    """A dK/dV kernel that skipped its diagonal tiles would leave elements the dQ kernel reads: the check sees it."""
    T = 256
    w = written_wgmma(T)
    w[64:128, 64:128] = False
    assert (read_dq(T, ldq_of(T, True), QUERIES) & ~w).any()
