"""attention.cu's float32 dK/dV on wgmma (attention_backward_dkdv_wgf) stages each query tile in two halves from two
landing buffers, copied a tile ahead by cp.async in commit groups; a fill may read a landing only once the thread's
group holding its copies is complete, which the kernel asks by cp.async.wait_group N (every group but the newest N).
The GPU test checks the results; this checks the group counting on the CPU: the staging calls are read from the
kernel's source in their order (the prologue, then the loop's two stages), and a model of wait_group runs them for
1 to 6 query tiles, asking that every fill finds its copies complete and that no copy lands in a buffer before the
fill that reads its previous contents (each landing holds one tile at a time)."""
from __future__ import annotations

import re

import pytest

from tr2.cupy_side import gpu

CALL = re.compile(r"\b(land_rows|land_cols|fill_rows_tile|fill_cols_tile|cp_async_wait<(\d)>|"
                  r"fill_rows<false, HS, BR, THREADS>)\(([^;]*?)\);")


def _kernel_source() -> str:
    src = (gpu.KERNELS_DIR / "attention.cu").read_text()
    start = src.index("__device__ void attention_backward_dkdv_wgf(")
    return src[start:src.index("\n}\n", start)]


def _calls(text: str) -> list[tuple[str, str]]:
    """The staging calls of a stretch of source, in order: (name, argument); cp_async_wait<N> as ("wait", N)."""
    out = []
    for name, n, arg in CALL.findall(text):
        if name.startswith("cp_async_wait"):
            out.append(("wait", n))
        elif name.startswith("fill_rows<"):
            out.append(("fill_kv", arg))
        else:
            out.append((name, arg.strip()))
    return out


def _pieces():
    body = _kernel_source()
    prologue = body[body.index("land_rows(0);"):body.index("auto stage_cols")]
    cols = body[body.index("auto stage_cols"):body.index("auto stage_rows")]
    rows = body[body.index("auto stage_rows"):body.index("for (int it = 0; it < niter; ++it)")]
    loop = body[body.index("for (int it = 0; it < niter; ++it)"):]
    return _calls(prologue), _calls(cols), _calls(rows), loop


def test_the_source_has_the_staging_this_test_reads():
    prologue, cols, rows, loop = _pieces()
    assert prologue == [("land_rows", "0"), ("land_cols", "0"), ("wait", "1"), ("fill_kv", "sK, nullptr, sK"),
                        ("fill_kv", "sV, nullptr, sV"), ("fill_rows_tile", ""), ("land_rows", "1")]
    assert cols == [("wait", "1"), ("fill_cols_tile", ""), ("land_cols", "it + 1")]
    assert rows == [("wait", "1"), ("fill_rows_tile", ""), ("land_rows", "it + 2")]
    # each stage runs once an iteration on every path, the columns' before the rows'
    assert loop.count("stage_cols(it);") == 2 and loop.count("stage_rows(it);") == 2
    assert loop.index("stage_cols(it);") < loop.index("__syncthreads();") < loop.index("stage_rows(it);")
    assert "if (it + 1 < niter) fill_rows_tile();" in _kernel_source()
    # k and v land before the first commit, so the first group holds them
    body = _kernel_source()
    assert body.index("kv.land<false>(sV") < body.index("land_rows(0);")


class _Model:
    """One thread's cp.async groups: copies pending until committed into a group; wait N completes all but the newest N."""

    def __init__(self, niter: int):
        self.niter, self.pending, self.groups, self.done = niter, set(), [], set()
        self.landing = {"R": None, "C": None}   # the tile each landing buffer holds (or is being copied)
        self.read = {"R": True, "C": True}     # whether its last tile has been filled from it

    def land(self, kind: str, tile: int) -> None:
        if tile < self.niter:
            assert self.read[kind], f"{kind}({tile}) copied over tile {self.landing[kind]} before its fill"
            self.landing[kind], self.read[kind] = tile, False
            self.pending.add((kind, tile))
            if kind == "R":
                self.pending.add(("LD", tile))
        self.groups.append(frozenset(self.pending))
        self.pending = set()

    def wait(self, n: int) -> None:
        for g in self.groups[:len(self.groups) - n]:
            self.done |= g

    def fill(self, kind: str, tile: int) -> None:
        assert (kind, tile) in self.done, f"fill of {kind}({tile}) before its copies completed"
        assert self.landing[kind] == tile
        self.read[kind] = True


def _run(niter: int) -> list:
    prologue, cols, rows, _ = _pieces()
    m = _Model(niter)
    m.pending |= {("K", 0), ("V", 0)}
    log = []

    def do(calls, it):
        for name, arg in calls:
            if name == "wait":
                m.wait(int(arg))
            elif name in ("land_rows", "land_cols"):
                m.land("R" if name == "land_rows" else "C", eval(arg, {}, {"it": it}))
            elif name == "fill_kv":
                assert {("K", 0), ("V", 0)} <= m.done, "k and v filled before they landed"
            elif name == "fill_rows_tile":
                tile = 0 if it is None else it + 1
                if tile < niter:   # the loop's guard, checked in the source above
                    m.fill("R", tile)
                    assert ("LD", tile) in m.done   # lse and D of the tile, in the rows' group
                    log.append(("rows", tile))
            elif name == "fill_cols_tile":
                m.fill("C", it)
                log.append(("cols", it))
    do(prologue, None)
    for it in range(niter):
        do(cols, it)
        do(rows, it)
    return log


@pytest.mark.parametrize("niter", [1, 2, 3, 4, 6])
def test_every_fill_finds_its_copies_landed_and_no_copy_overtakes_a_fill(niter):
    log = _run(niter)
    # every tile's rows and columns filled once, the rows of a tile before its columns' stage (the products of the
    # tile's first half read the rows)
    assert sorted(log) == sorted([("rows", t) for t in range(niter)] + [("cols", t) for t in range(niter)])
    for t in range(niter):
        assert log.index(("rows", t)) < log.index(("cols", t))


def test_the_model_catches_both_faults():
    """The checks can fail. The first draft's prologue (found by this test, before any GPU ran it) copied tile 1's
    rows into the rows' landing before tile 0's were filled from it; and a wait that leaves one group too many
    pending lets a fill read copies not yet complete."""
    m = _Model(3)
    m.land("R", 0)
    m.land("C", 0)
    with pytest.raises(AssertionError, match="copied over tile 0 before its fill"):
        m.land("R", 1)
    m = _Model(3)
    m.land("R", 0)
    m.land("C", 0)
    m.wait(1)
    m.fill("R", 0)
    m.land("R", 1)
    m.wait(2)   # C(0) is the second newest group: still pending
    with pytest.raises(AssertionError, match="before its copies completed"):
        m.fill("C", 0)
