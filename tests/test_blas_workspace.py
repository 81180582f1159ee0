"""gpu/blas.py's cuBLAS workspaces (the rule of Cublas.workspace_for, the CPU counterpart of tests/test_graph_gpu.py's
"workspace" test): by plan, a workspace grows to the largest need asked of it, never shrinks, one for products on
every stream, and nothing grows inside a capture; off, every workspace is WORKSPACE_BYTES from its creation.
No GPU: CuPy and the allocator are replaced by recorders; the Cublas object is made without its cuBLAS handle."""
from __future__ import annotations

import sys
import types

import pytest

from tr2.cupy_side import gpu
from conftest import memsets_at
from tr2.cupy_side.gpu import blas, memsets


class FakeArray:
    def __init__(self, n):
        self.size = n
        self.data = types.SimpleNamespace(ptr=0 if n == 0 else 0x1000 + n)


@pytest.fixture(autouse=True)
def memsets_as_unset_before_value_3(monkeypatch):
    """The memsets' switch as these tests were written against (value 0); the leaves' test sets value 3 itself."""
    memsets_at(monkeypatch, 0)


@pytest.fixture
def cublas(monkeypatch):
    allocated, state = [], {"capturing": False}
    fake_runtime = types.SimpleNamespace(is_capturing=lambda: state["capturing"],
                                         default_pool_array=lambda n: allocated.append(n) or FakeArray(n))
    monkeypatch.setattr(gpu, "runtime", fake_runtime, raising=False)
    monkeypatch.setitem(sys.modules, "tr2.cupy_side.gpu.runtime", fake_runtime)

    def make(by_plan: bool):
        monkeypatch.setattr(blas, "WORKSPACE_BY_PLAN", by_plan)
        c = object.__new__(blas.Cublas)
        c._cp = types.SimpleNamespace(empty=lambda n, dtype=None: FakeArray(n), uint8="uint8",
                                      cuda=types.SimpleNamespace(runtime=types.SimpleNamespace()))
        c._workspace = c._first_workspace()
        c._second, c._turn, c.captured, c._kept, c._arena = None, None, False, [], None
        c.lt = None
        return c
    return make, allocated, state


def test_after_a_capture_a_replaced_workspace_is_kept_not_freed(cublas, monkeypatch):
    import gc
    import weakref
    make, allocated, _ = cublas
    c = make(True)
    old = c.workspace_for(None, 4096)
    gone = weakref.ref(old)
    del old
    c.workspace_for(None, 8192)                          # before any capture: the old one is dropped
    gc.collect()
    assert gone() is None and c._kept == []
    c.captured = True                                    # a step graph holds the 8192-byte one's address now
    held = weakref.ref(c.workspace_for(None, 8192))
    c.workspace_for(None, 16384)
    gc.collect()
    assert held() is not None and [k.size for k in c._kept] == [8192] and allocated == [4096, 8192, 16384]


def test_by_plan_grows_to_the_largest_need_and_never_shrinks(cublas):
    make, allocated, _ = cublas
    c = make(True)
    assert c.workspace_for(7).size == 0                  # nothing asked yet: nothing allocated
    assert c.workspace_for(7, 4096).size == 4096
    assert c.workspace_for(7, 1024).size == 4096         # a smaller need keeps it
    assert c.workspace_for(None, 16 << 20).size == 16 << 20
    assert allocated == [4096, 16 << 20]
    assert c.workspace_for(9, 512).size == 16 << 20      # every stream's products share the one workspace
    assert c.workspace_for(7).size == 16 << 20
    assert not hasattr(c, "add_stream_workspace")        # a side stream's own went with the side stream


def test_by_plan_never_grows_inside_a_capture(cublas):
    make, allocated, state = cublas
    c = make(True)
    c.workspace_for(None, 4096)
    state["capturing"] = True
    assert c.workspace_for(None, 4096).size == 4096      # what the warm-up allocated serves the capture
    with pytest.raises(RuntimeError, match="inside a capture needs 8192 bytes"):
        c.workspace_for(None, 8192)
    assert allocated == [4096]


def test_off_every_workspace_is_the_full_size_from_its_creation(cublas):
    make, allocated, _ = cublas
    c = make(False)
    assert c.workspace_for(None, 1024).size == blas.WORKSPACE_BYTES
    assert c.workspace_for(9).size == blas.WORKSPACE_BYTES
    assert allocated == []                               # made with the handle, never grown


def test_the_log_line(cublas):
    make, _, _ = cublas
    c = make(True)
    c.lt = types.SimpleNamespace(_plans={1: types.SimpleNamespace(workspace=300), 2: types.SimpleNamespace(workspace=700)})
    c.workspace_for(None, 700)
    assert c.workspace_line() == "cuBLAS workspace: 700 bytes, the largest a cuBLASLt plan of this run needs 700"
    c.workspace_for(9, 300)
    assert c.workspace_line() == "cuBLAS workspace: 700 bytes, the largest a cuBLASLt plan of this run needs 700"
    c.lt = None
    assert "needs 0" in c.workspace_line()


# gpu/memsets.py's TR2_MEMSET_EARLY=2: products of at most memsets.SECOND_BYTES take whichever of the two workspaces
# the product before did not (the second grown to the largest such need, in the warm-up, never inside a capture); a
# larger product takes the first; off, every product gets the one workspace.
def test_products_take_one_workspace_unless_two_are_asked_for(cublas, monkeypatch):
    make, allocated, _ = cublas
    monkeypatch.setattr(memsets, "TWO_WORKSPACES", False)
    c = make(True)
    first = c.product_workspace(None, 4)
    assert all(c.product_workspace(None, 4) is first for _ in range(3)) and allocated == [4]


def test_small_products_take_two_workspaces_in_turn(cublas, monkeypatch):
    make, allocated, state = cublas
    monkeypatch.setattr(memsets, "TWO_WORKSPACES", True)
    monkeypatch.setattr(memsets, "SECOND_BYTES", 1024)
    c = make(True)
    a, b, a2, b2 = (c.product_workspace(None, 4) for _ in range(4))
    assert a is a2 and b is b2 and a is not b and a.size == b.size == 4
    big = c.product_workspace(None, 4096)                # over SECOND_BYTES: the first, grown; the second stays
    assert big.size == 4096 and c._second.size == 4
    after_big = c.product_workspace(None, 4)             # the one the big product did not take
    assert after_big is c._second
    assert c.product_workspace(None, 4) is big           # and back
    assert c.product_workspace(None, 4096) is big        # a big one after a small one on the first: the first again
    import gc
    import weakref
    small = weakref.ref(c._second)
    del b, b2, after_big
    grown = c.product_workspace(None, 600)               # the second grows to a larger small need
    gc.collect()
    assert grown is c._second and grown.size == 600
    assert small() is None                               # the smaller second is not held anywhere (nor in the turns)
    s1, s2 = c.product_workspace(9, 8), c.product_workspace(9, 8)   # another stream's products: the same pair
    assert {id(s1), id(s2)} == {id(big), id(grown)}
    assert allocated == [4, 4, 4096, 600]
    assert c.workspace_line().endswith("; a second workspace of 600 bytes, products taking the two in turn")
    state["capturing"] = True                            # inside a capture: the pair serves, nothing grows
    c.product_workspace(None, 600)
    with pytest.raises(RuntimeError, match="needs 1000 bytes of the second workspace, which has 600"):
        c.product_workspace(None, 1000)
    assert allocated == [4, 4, 4096, 600]


def test_a_replaced_workspace_is_not_held_while_its_successor_is_made(cublas, monkeypatch):
    """workspace_for's "never both": the old one dropped before the new one is allocated, for the first and the
    second workspace alike (neither the turns nor a local variable may hold it), so that the peak never counts both."""
    import gc
    import weakref
    from tr2.cupy_side import gpu
    make, _, _ = cublas
    monkeypatch.setattr(memsets, "TWO_WORKSPACES", True)
    monkeypatch.setattr(memsets, "SECOND_BYTES", 1024)
    c = make(True)
    c.product_workspace(None, 4)                         # the first (4 bytes) takes this one: the turns say so
    c.product_workspace(None, 4)                         # and the second this one
    old = [weakref.ref(c._workspace), weakref.ref(c._second)]
    alive = []
    allocate = gpu.runtime.default_pool_array

    def watching(n):
        gc.collect()
        alive.append((n, [r() is not None for r in old]))
        return allocate(n)
    monkeypatch.setattr(gpu.runtime, "default_pool_array", watching)
    c.product_workspace(None, 600)                       # both grow to 600
    assert c._workspace.size == c._second.size == 600
    assert alive == [(600, [False, True]), (600, [False, False])]


class FakeArena:
    """The slots' arena as blas.Cublas uses it: its size, address, a fill, and slices as views at an offset."""

    def __init__(self, n, ptr=0x70000):
        self.size, self.data, self.filled = n, types.SimpleNamespace(ptr=ptr), []

    def fill(self, v):
        self.filled.append(v)

    def __getitem__(self, sl):
        return FakeArena(sl.stop - sl.start, self.data.ptr + sl.start)


def test_leaves_a_slot_a_product_in_the_capture_else_the_stream_workspace(cublas, monkeypatch):
    """TR2_MEMSET_EARLY=3: the arena allocated (zeroed, registered) at the first product outside a capture; inside
    one, each product that needs a workspace of at most SLOT_BYTES gets the next slot, others the stream's own."""
    make, allocated, state = cublas
    memsets_at(monkeypatch, 3)
    monkeypatch.setattr(memsets, "_arena", None)
    arenas, full = [], memsets.SLOTS * memsets.SLOT_BYTES
    fake_runtime = sys.modules["tr2.cupy_side.gpu.runtime"]
    workspaces = fake_runtime.default_pool_array   # the workspaces' growth draws on it too

    def pool_array(n):
        if n != full:
            return workspaces(n)
        arenas.append(FakeArena(n))
        return arenas[-1]
    monkeypatch.setattr(fake_runtime, "default_pool_array", pool_array, raising=False)
    c = make(True)
    ws = c.product_workspace(None, 300)                        # the warm-up: no capture, the stream's workspace
    assert ws is c._workspace and len(arenas) == 1 and arenas[0].filled == [0]
    assert arenas[0].size == memsets.SLOTS * memsets.SLOT_BYTES and memsets._arena == (0x70000, arenas[0].size)
    state["capturing"] = True
    memsets.begin()
    try:
        got = [c.product_workspace(None, need) for need in (4, 0, 4, memsets.SLOT_BYTES + 1, 256)]
    finally:
        memsets.end()
    assert [g.data.ptr for g in got] == [0x70000 + 256, c._workspace.data.ptr, 0x70000 + 512,
                                         c._workspace.data.ptr, 0x70000 + 768]
    assert all(g.size == memsets.SLOT_BYTES for g in (got[0], got[2], got[4])) and len(arenas) == 1
