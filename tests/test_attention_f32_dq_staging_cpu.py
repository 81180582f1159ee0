"""attention.cu's float32 dQ on wgmma (attention_backward_dq_wgf) keeps two buffers of a key tile (k, v, k^T) and one
landing buffer: while tile kb's products run, tile kb + 1 is filled from the landing into the other buffer and tile
kb + 2 starts landing. The GPU test checks the results; this checks the schedule on the CPU: the staging calls are
read from the kernel's source in their order (the prologue, then the loop's stage), and a model runs them for blocks
of 1 to 8 key tiles, asking that every fill finds its tile landed and waited for, that no copy lands over a tile not
yet filled, that each iteration's products find their tile in the buffer they read, and that no copy is left in
flight at the end."""
from __future__ import annotations

import re

import pytest

from tr2.cupy_side import gpu

CALL = re.compile(r"\b(land_kv|fill_kv|cp_async_landed)\(([^;()]*)\);")


def _kernel_source() -> str:
    src = (gpu.KERNELS_DIR / "attention.cu").read_text()
    start = src.index("__device__ void attention_backward_dq_wgf(")
    return src[start:src.index("\n}\n", start)]


def _pieces():
    body = _kernel_source()
    prologue = body[body.index("land_kv(0);"):body.index("for (int kb = 0; kb <= last; ++kb)")]
    stage = body[body.index("auto stage_next"):body.index("if (kb > wg_last)")]
    return CALL.findall(prologue), CALL.findall(stage), body


def test_the_source_has_the_staging_this_test_reads():
    prologue, stage, body = _pieces()
    assert prologue == [("land_kv", "0"), ("cp_async_landed", ""), ("fill_kv", "0"), ("land_kv", "1")]
    assert stage == [("cp_async_landed", ""), ("fill_kv", "cur ^ 1"), ("land_kv", "kb + 2")]
    assert "if (last > 0) land_kv(1);" in body
    assert "if (kb < last) {" in body and "if (kb + 1 < last) land_kv(kb + 2);" in body
    # the stage runs once an iteration on both paths, and the products read buffer kb & 1
    loop = body[body.index("for (int kb = 0; kb <= last; ++kb)"):]
    assert loop.count("stage_next();") == 2
    assert "const int cur = kb & 1;" in loop and "const float* sK = sKV + 3 * cur * KT;" in loop
    # a warp's lanes fill from each other's landed k^T rows: the warp waits before any lane copies over them
    assert re.search(r"fill_kv\(0\);\s*__syncwarp\(\);[^;]*\s*if \(last > 0\) land_kv\(1\);", body)
    assert re.search(r"fill_kv\(cur \^ 1\);\s*__syncwarp\(\);\s*if \(kb \+ 1 < last\) land_kv\(kb \+ 2\);", body)


class _Model:
    """One thread's copies: land(t) starts tile t into the landing; landed() completes every copy started; fill(t, buf)
    moves the landed tile t into a buffer."""

    def __init__(self):
        self.landing, self.complete, self.filled = None, False, True
        self.buffers = [None, None]

    def land(self, tile: int) -> None:
        assert self.filled, f"tile {tile} copied over tile {self.landing} before its fill"
        self.landing, self.complete, self.filled = tile, False, False

    def landed(self) -> None:
        self.complete = True

    def fill(self, tile: int, buf: int) -> None:
        assert self.landing == tile, f"fill of tile {tile} found tile {self.landing} in the landing"
        assert self.complete, f"fill of tile {tile} before its copies were waited for"
        self.buffers[buf], self.filled = tile, True


def _run(last: int) -> list[int]:
    m, seen = _Model(), []
    m.land(0)
    m.landed()
    m.fill(0, 0)
    if last > 0:
        m.land(1)
    for kb in range(last + 1):
        cur = kb & 1
        if kb < last:
            m.landed()
            m.fill(kb + 1, cur ^ 1)
            if kb + 1 < last:
                m.land(kb + 2)
        assert m.buffers[cur] == kb, f"iteration {kb} reads buffer {cur}, which holds tile {m.buffers[cur]}"
        seen.append(m.buffers[cur])
    assert m.filled, f"tile {m.landing} left in flight at the end"
    return seen


@pytest.mark.parametrize("last", range(8))
def test_every_tile_is_staged_once_in_order(last):
    assert _run(last) == list(range(last + 1))


def test_the_model_finds_a_missing_wait():
    m = _Model()
    m.land(0)
    with pytest.raises(AssertionError, match="before its copies were waited for"):
        m.fill(0, 0)
    m2 = _Model()
    m2.land(0)
    with pytest.raises(AssertionError, match="copied over tile 0 before its fill"):
        m2.land(1)
