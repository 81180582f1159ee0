"""gpu/memsets.py without a GPU: the driver structure's layout, the decision (`rewire`) on graphs made of plain values,
and a whole capture simulated: a stream recording our kernels and cuBLAS-like products (a memset of the product's
workspace, then its kernel) into an in-memory graph, the Mover moving the memsets, and then the orders that must
hold checked on the graph: every node still after the node the stream recorded before it (except the moved memsets),
every product's kernel after its memset, and every memset after every earlier use of its workspace. Then the driver
layer through real C calls into a made-up libcuda (ctypes callbacks over the same in-memory graph): the arguments,
arrays and out-parameters, the edge-data forms and the older ones, a programmatic edge, a node with many edges, a
refused removal, a driver that does not do what it was asked, and the read-back at the capture's end."""
from __future__ import annotations

import ctypes
import subprocess
import sys

import pytest

from conftest import memsets_at
from tr2.cupy_side.gpu import memsets
from tr2.cupy_side.gpu.memsets import KERNEL, MEMCPY, MEMSET, Mover, rewire


@pytest.fixture(autouse=True)
def switch_as_unset_before_value_3(monkeypatch):
    """Each test sets the form it tests (the module's default, value 3 since the thirty-ninth session, would make
    every product ask for a slot): the state the tests of values 1 and 2 were written against, value 0's."""
    memsets_at(monkeypatch, 0)


def test_the_memset_parameters_have_cuda_h_layout():
    p = memsets.MemsetParams
    assert [p.dst.offset, p.pitch.offset, p.value.offset, p.elementSize.offset, p.width.offset, p.height.offset] == \
        [0, 8, 16, 20, 24, 32]
    assert ctypes.sizeof(p) == 40


def test_memset_extent():
    assert memsets.memset_extent(1000, 4, 4, 1, 1) == (1000, 1004)          # cuBLAS's 4-byte counter
    assert memsets.memset_extent(1000, 256, 1, 4, 3) == (1000, 1000 + 512 + 4)   # three rows, 256 bytes apart
    assert memsets.memset_extent(1000, 0, 4, 0, 1) == (1000, 1000)


class View:
    """A graph as plain values: node -> (kind, dependencies, memset range)."""

    def __init__(self, nodes: dict):
        self.nodes = nodes

    def kind(self, n):
        return self.nodes[n][0]

    def deps(self, n):
        return self.nodes[n][1]

    def memset_range(self, n):
        return self.nodes[n][2]


WS = (4096, 4)


def _graph(memset_deps=("A",), memset_range=(4096, 4100), kernel_deps=("M",)):
    return View({"A": (KERNEL, (), None), "B": (KERNEL, (), None), "P": (KERNEL, (), None),
                 "M": (MEMSET, memset_deps, memset_range), "K": (KERNEL, kernel_deps, None),
                 "C": (MEMCPY, ("A",), None)})


def test_a_memset_after_the_work_before_moves_behind_the_previous_product():
    r = rewire(("A",), ("K",), _graph(), WS, ("P",))
    assert (r.memset, r.moved, r.why) == (True, True, memsets.MOVED)
    assert r.remove == (("A", "M"),) and r.add == (("A", "K"), ("P", "M"))


def test_the_first_product_on_a_workspace_has_its_memset_start_the_graph():
    r = rewire(("A",), ("K",), _graph(), WS, None)
    assert r.moved and r.remove == (("A", "M"),) and r.add == (("A", "K"),)


def test_after_a_join_every_node_before_goes_to_the_kernel():
    r = rewire(("A", "B"), ("K",), _graph(memset_deps=("B", "A")), WS, ("P",))
    assert r.moved and set(r.remove) == {("A", "M"), ("B", "M")}
    assert set(r.add) == {("A", "K"), ("B", "K"), ("P", "M")}


def test_after_a_join_with_the_previous_product_among_it_only_the_other_edge_goes():
    r = rewire(("A", "P"), ("K",), _graph(memset_deps=("A", "P")), WS, ("P",))
    assert r.moved and r.remove == (("A", "M"),) and set(r.add) == {("A", "K"), ("P", "K")}
    assert r.kernel_after == {"A", "P", "M"} and r.memset_after == {"P"}


def test_a_refused_removal_leaves_the_graph_ordered_more_and_counts_as_not_moved():
    cap, mover = FakeCapture(), Mover()
    cap.kernel()

    def refuse(graph, edges):
        raise memsets.MemsetError("cuGraphRemoveDependencies: CUDA_ERROR_NOT_SUPPORTED (801)")
    cap.remove_edges = refuse
    mover.product(1, (1000, 4), lambda: (cap.product(1, 1000), 0)[1], driver=cap)
    assert mover.outcomes == {memsets.REFUSED: 1} and not mover.moved
    assert cap.into[2] == {1} and cap.into[3] == {1, 2}   # the memset where it was, the kernel after both
    assert "CUDA_ERROR_NOT_SUPPORTED" in mover.line()


def test_a_driver_that_does_not_do_what_was_asked_stops_the_capture():
    cap, mover = FakeCapture(), Mover()
    cap.kernel()
    cap.add_edges = lambda graph, edges: None            # says yes, does nothing
    with pytest.raises(memsets.MemsetError, match="a moved memset's edges are not as asked"):
        mover.product(1, (1000, 4), lambda: (cap.product(1, 1000), 0)[1], driver=cap)


def test_the_end_of_capture_check_finds_edges_changed_since():
    cap, mover = FakeCapture(), Mover()
    cap.kernel()
    mover.product(1, (1000, 4), lambda: (cap.product(1, 1000), 0)[1], driver=cap)
    mover.verify(cap)
    cap.into[3].discard(1)                               # someone took the kernel's edge from the work before it
    with pytest.raises(memsets.MemsetError, match="into the kernel 1 nodes \\(asked 2, the same: False\\)"):
        mover.verify(cap)


def test_a_memset_with_nothing_before_it_stays():
    r = rewire((), ("K",), _graph(memset_deps=()), WS, None)
    assert (r.memset, r.moved, r.why) == (True, False, memsets.FIRST) and not r.remove and not r.add


def test_two_products_in_a_row_on_one_workspace_keep_their_memset():
    r = rewire(("P",), ("K",), _graph(memset_deps=("P",)), WS, ("P",))
    assert (r.memset, r.moved, r.why) == (True, False, memsets.DIRECTLY) and not r.remove and not r.add


@pytest.mark.parametrize("memset_range", [(4092, 4096), (4096, 4101), (0, 4)])
def test_a_memset_outside_the_workspace_stays(memset_range):
    r = rewire(("A",), ("K",), _graph(memset_range=memset_range), WS, ("P",))
    assert (r.memset, r.moved, r.why) == (True, False, memsets.OUTSIDE)


def test_a_memset_that_does_not_follow_the_stream_stays():
    r = rewire(("A",), ("K",), _graph(memset_deps=("B",)), WS, ("P",))
    assert (r.memset, r.moved, r.why) == (True, False, memsets.NOT_AFTER_BEFORE)


def test_a_product_without_a_memset_is_no_memset():
    r = rewire(("A",), ("K",), _graph(kernel_deps=("A",)), WS, ("P",))
    assert (r.memset, r.moved, r.why) == (False, False, memsets.NO_MEMSET)
    r = rewire(("A",), ("K",), _graph(kernel_deps=("C",)), WS, ("P",))   # after a copy: not a memset either
    assert (r.memset, r.moved) == (False, False)


@pytest.mark.parametrize("after", [("K", "A"), ("M",), ("C",), ()])
def test_a_call_not_ending_in_one_kernel_is_left_alone(after):
    r = rewire(("A",), after, _graph(), WS, ("P",))
    assert (r.memset, r.moved, r.why) == (False, False, memsets.NOT_ONE_KERNEL)


class FakeCapture:
    """A stream capture into an in-memory graph, with the driver's side of gpu/memsets.py over it: nodes are
    integers, `deps` the edges into each; the stream's dependencies move to each node it records."""

    def __init__(self):
        self.kinds, self.ranges, self.into = {}, {}, {}
        self.uses: dict[int, int] = {}   # node -> the workspace it reads or writes
        self.stream_deps: dict[int, tuple] = {}
        self.recorded: list = []   # (stream, node, the stream's dependencies when it was recorded)

    def _record(self, stream, kind, rng=None):
        n = len(self.kinds) + 1
        self.kinds[n], self.ranges[n] = kind, rng
        self.into[n] = set(self.stream_deps.get(stream, ()))
        self.recorded.append((stream, n, tuple(self.stream_deps.get(stream, ()))))
        self.stream_deps[stream] = (n,)
        return n

    def kernel(self, stream=1):
        return self._record(stream, KERNEL)

    def product(self, stream, ws_ptr, memset=True):
        """What cublasLtMatmul records: the workspace's 4-byte counter zeroed, then the kernel."""
        if memset:
            self.uses[self._record(stream, MEMSET, (ws_ptr, ws_ptr + 4))] = ws_ptr
        n = self._record(stream, KERNEL)
        self.uses[n] = ws_ptr
        return n

    # the driver's side
    def capture_info(self, stream):
        return 77, self.stream_deps.get(stream, ())

    def kind(self, n):
        return self.kinds[n]

    def deps(self, n):
        return tuple(sorted(self.into[n]))

    def memset_range(self, n):
        return self.ranges[n]

    def remove_edges(self, graph, edges):
        assert graph == 77
        for a, b in edges:
            self.into[b].remove(a)

    def add_edges(self, graph, edges):
        assert graph == 77
        for a, b in edges:
            assert a not in self.into[b]
            self.into[b].add(a)

    def set_memset_dst(self, n, dst):
        assert self.kinds[n] == MEMSET
        first, end = self.ranges[n]
        self.ranges[n] = (dst, dst + end - first)

    def dependents(self, n):
        return sum(n in into for into in self.into.values())

    def destroy(self, n):
        """As cuGraphDestroyNode: the node and every edge into or out of it gone."""
        del self.kinds[n], self.into[n]
        for into in self.into.values():
            into.discard(n)

    def before(self, a, b) -> bool:
        """Whether node a must have ended before node b starts (a path a -> b)."""
        todo, seen = [b], set()
        while todo:
            n = todo.pop()
            for d in self.into[n]:
                if d == a:
                    return True
                if d not in seen:
                    seen.add(d)
                    todo.append(d)
        return False


def _step(two_workspaces: bool):
    """A made-up step: our kernels and products on stream 1, one product pair in a row (the backward's dW and dx),
    a product without a memset, and a product on a second stream with its own workspace. Returns the capture and the
    Mover."""
    cap, mover = FakeCapture(), Mover()
    turns = {1: 0, 2: 0}

    def product(stream, memset=True):
        base = 1000 if stream == 1 else 5000
        ws = base + 512 * turns[stream] if two_workspaces else base
        if two_workspaces:
            turns[stream] ^= 1
        mover.product(stream, (ws, 4), lambda: (cap.product(stream, ws, memset), 0)[1], driver=cap)

    cap.kernel()            # the embedding
    product(1)              # c_attn
    cap.kernel()            # attention
    product(1)              # c_proj
    cap.kernel()            # residual + LayerNorm
    product(1, memset=False)
    cap.kernel()
    product(1)              # dW
    product(1)              # dx, right after
    cap.stream_deps[2] = cap.stream_deps[1]   # the side stream waits for the main stream's work (an event)
    product(2)              # another stream's product, its own workspace
    cap.kernel()
    product(1)
    return cap, mover


@pytest.mark.parametrize("two_workspaces", [False, True])
def test_a_simulated_capture_keeps_every_order_that_matters(two_workspaces):
    cap, mover = _step(two_workspaces)
    memsets_recorded = [n for _, n, _ in cap.recorded if cap.kinds[n] == MEMSET]
    moved = mover.outcomes[memsets.MOVED]
    # one memset stays where two products follow each other on one workspace; none where they alternate
    assert sum(mover.outcomes.values()) == len(memsets_recorded) == 6
    assert moved == (6 if two_workspaces else 5)
    assert mover.outcomes[memsets.DIRECTLY] == (0 if two_workspaces else 1)
    for stream, n, deps in cap.recorded:
        if cap.kinds[n] == MEMSET:
            kernel = n + 1
            assert cap.into[kernel] >= {n} and cap.before(n, kernel)
            # every earlier node that used the same workspace ended before this memset starts
            for m in range(1, n):
                if cap.uses.get(m) == cap.uses[n]:
                    assert cap.before(m, n), (m, n)
        else:
            # every other node still after every node but a memset that its stream had recorded before it
            for s, m, _ in cap.recorded:
                if m < n and s == stream and cap.kinds[m] != MEMSET:
                    assert cap.before(m, n), (m, n)
    # a moved memset no longer waits for the kernel its stream recorded just before it
    moved_ones = [n for n in memsets_recorded if not (set(cap.recorded[n - 1][2]) <= cap.into[n])]
    assert len(moved_ones) == moved


def test_a_failed_product_changes_nothing():
    cap, mover = FakeCapture(), Mover()
    cap.kernel()
    status = mover.product(1, (1000, 4), lambda: (cap.product(1, 1000), 13)[1], driver=cap)
    assert status == 13 and not mover.outcomes and not mover.last
    assert cap.into[3] == {2}   # the kernel still after its memset, the memset after the kernel before


def test_the_log_line_counts_what_moved_and_what_stayed():
    _, mover = _step(False)
    line = mover.line()
    assert line.startswith("cuBLAS memsets in the capture: 6, 5 moved off the chain (TR2_MEMSET_EARLY=")
    assert "left in place: 1 the previous product on this workspace is the work right before it" in line
    assert "; products 7, 1 no memset right before the product's kernel" in line
    # the first case of what stayed, described: what a GPU run that moves nothing needs to show
    assert line.endswith("first 'the previous product on this workspace is the work right before it': stream before "
                         "[kernel]; after [kernel]; the last node after [memset]; the memset writes [0x3e8, +4) after "
                         "[kernel], the workspace [0x3e8, +4)")


def test_a_capture_that_moves_nothing_says_why():
    cap, mover = FakeCapture(), Mover()
    cap.kernel()
    mover.product(1, (2000, 4), lambda: (cap.product(1, 1000), 0)[1], driver=cap)   # a memset outside its workspace
    line = mover.line()
    assert line.startswith("cuBLAS memsets in the capture: 1, 0 moved off the chain")
    assert "the memset writes [0x3e8, +4) after [kernel], the workspace [0x7d0, +4)" in line
    cap, mover = FakeCapture(), Mover()
    cap.kernel()
    mover.product(1, (1000, 4), lambda: (cap.product(1, 1000, memset=False), 0)[1], driver=cap)
    assert mover.line().endswith("first 'no memset right before the product's kernel': stream before [kernel]; after "
                                 "[kernel]; the last node after [kernel]")


@pytest.mark.parametrize("value, ok", [("0", True), ("1", True), ("2", True), ("3", True), ("4", True), (None, True),
                                       ("5", False), ("on", False)])
def test_the_switch_takes_0_to_4_only_and_is_4_unset(value, ok):
    code = "import tr2.cupy_side.gpu.memsets as m; print(m.EARLY, m.TWO_WORKSPACES, m.LEAVES, m.DROP)"
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": ":".join(sys.path)} | ({"TR2_MEMSET_EARLY": value} if value else {})
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    if ok:
        value = value or "4"
        assert p.returncode == 0, p.stderr
        assert p.stdout.split() == [value, str(value == "2"), str(value in ("3", "4")), str(value == "4")]
    else:
        assert p.returncode != 0 and "TR2_MEMSET_EARLY" in p.stderr and "allowed values are" in p.stderr


class FakeLibcuda:
    """libcuda's entry points gpu/memsets.py calls, as C functions (ctypes callbacks) over a FakeCapture, so that the
    driver layer's argument packing (pointers, arrays, out-parameters, the v2 forms' edge data) is exercised through
    real C calls; node handles are addresses 0x1000 + node, never dereferenced. v2: whether the driver has CUDA 12.3's
    edge-data forms (else only the older ones)."""

    def __init__(self, cap: FakeCapture, v2: bool):
        P, vp, sz, ci = ctypes.POINTER, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int
        self.cap, self.calls, self._held = cap, [], []
        self.programmatic: set = set()   # (from, to) edges a programmatic launch made
        self.queries: list = []          # the array sizes each dependency query gave
        h = self.handle = lambda n: 0x1000 + n
        node = self.node = lambda p: int(p) - 0x1000

        def capture_info(stream, status, capture_id, graph, deps, count):
            status[0], capture_id[0], graph[0] = 1, 5, 77
            nodes = cap.stream_deps.get(int(stream or 0), ())
            arr = (vp * max(1, len(nodes)))(*[h(n) for n in nodes])
            self._held.append(arr)
            deps[0] = ctypes.cast(arr, P(vp))
            count[0] = len(nodes)
            return 0

        def node_type(n, out):
            out[0] = cap.kinds[node(n)]
            return 0

        def get_deps(n, out, *rest):
            count, data = rest[-1], (rest[0] if len(rest) == 2 else None)
            nodes = cap.deps(node(n))
            if not out:   # a count alone: refused where an edge has data and none is asked for, as the driver does
                if any((d, node(n)) in self.programmatic for d in nodes) and not data:
                    return 223   # CUDA_ERROR_LOSSY_QUERY
                count[0] = len(nodes)
                return 0
            self.queries.append(count[0])
            for i, d in enumerate(nodes[:count[0]]):   # as many as the arrays hold; the count says how many
                out[i] = h(d)
                if data:   # a programmatic edge has its type set (CU_GRAPH_DEPENDENCY_TYPE_PROGRAMMATIC)
                    data[i].type = 1 if (d, node(n)) in self.programmatic else 0
            count[0] = min(count[0], len(nodes))
            return 0

        def edges(kind):
            def f(graph, src, dst, *rest):
                n = rest[-1]
                if len(rest) == 2:
                    assert not rest[0], "edge data given"
                pairs = [(node(src[i]), node(dst[i])) for i in range(n)]
                self.calls.append((kind, graph, pairs))
                (cap.remove_edges if kind == "remove" else cap.add_edges)(graph, pairs)
                return 0
            return f

        def memset_params(n, params):
            first, end = cap.ranges[node(n)]
            params[0].dst, params[0].pitch, params[0].elementSize = first, end - first, 1
            params[0].width, params[0].height, params[0].value = end - first, 1, 0
            return 0

        def set_memset_params(n, params):
            if self.refuse_set:
                return 1   # CUDA_ERROR_INVALID_VALUE
            p = params[0]
            assert (p.elementSize, p.height, p.value) == (1, 1, 0)
            self.calls.append(("set", int(p.dst)))
            cap.set_memset_dst(node(n), int(p.dst))
            return 0

        def get_dependents(n, out, *rest):
            count = rest[-1]
            assert not out and not (rest[0] if len(rest) == 2 else None), "asked for the count alone"
            count[0] = cap.dependents(node(n))
            self.calls.append(("dependents", node(n)))
            return 0

        def destroy(n):
            if node(n) in self.refuse_destroy:
                return 1   # CUDA_ERROR_INVALID_VALUE
            self.calls.append(("destroy", node(n)))
            cap.destroy(node(n))
            return 0

        def error_name(rc, out):
            return 0

        make = ctypes.CFUNCTYPE
        self.cuStreamGetCaptureInfo_v2 = make(ci, vp, P(ci), P(ctypes.c_ulonglong), P(vp), P(P(vp)), P(sz))(capture_info)
        self.cuGraphNodeGetType = make(ci, vp, P(ci))(node_type)
        self.cuGraphMemsetNodeGetParams = make(ci, vp, P(memsets.MemsetParams))(memset_params)
        self.refuse_set = False
        self.cuGraphMemsetNodeSetParams = make(ci, vp, P(memsets.MemsetParams))(set_memset_params)
        self.cuGetErrorName = make(ci, ci, P(ctypes.c_char_p))(error_name)
        self.refuse_destroy: set = set()
        self.cuGraphDestroyNode = make(ci, vp)(destroy)
        self.cuGraphNodeGetDependentNodes = make(ci, vp, P(vp), P(sz))(get_dependents)
        if v2:
            self.cuGraphNodeGetDependentNodes_v2 = make(ci, vp, P(vp), P(memsets.EdgeData), P(sz))(get_dependents)
            self.cuGraphNodeGetDependencies_v2 = make(ci, vp, P(vp), P(memsets.EdgeData), P(sz))(get_deps)
            self.cuGraphAddDependencies_v2 = make(ci, vp, P(vp), P(vp), vp, sz)(edges("add"))
            self.cuGraphRemoveDependencies_v2 = make(ci, vp, P(vp), P(vp), vp, sz)(edges("remove"))
        self.cuGraphNodeGetDependencies = make(ci, vp, P(vp), P(sz))(get_deps)
        self.cuGraphAddDependencies = make(ci, vp, P(vp), P(vp), sz)(edges("add"))
        self.cuGraphRemoveDependencies = make(ci, vp, P(vp), P(vp), sz)(edges("remove"))


@pytest.fixture
def libcuda(monkeypatch):
    """make(v2) -> (capture, libcuda): a made-up libcuda over a fresh FakeCapture in place of the driver gpu/memsets.py
    loads (the driver object it typed is dropped, and both are put back after the test)."""
    from tr2.cupy_side.gpu import pdl

    def make(v2: bool):
        cap = FakeCapture()
        fake = FakeLibcuda(cap, v2)
        monkeypatch.setattr(pdl, "_driver", lambda: fake)
        monkeypatch.setattr(memsets._Driver, "_instance", None)
        return cap, fake
    return make


@pytest.mark.parametrize("v2", [True, False])
def test_the_driver_layer_through_c_calls(libcuda, v2):
    cap, fake = libcuda(v2)
    driver = memsets._Driver.get()
    assert driver.v2 == v2
    first = cap.kernel()
    mover = Mover()
    # the first product on its workspace (a root memset), a kernel, then a second product: its memset moves behind
    # the first product's kernel, its kernel follows the kernel before it
    mover.product(1, (0x9000, 4), lambda: (cap.product(1, 0x9000), 0)[1])
    between = cap.kernel()
    mover.product(1, (0x9000, 4), lambda: (cap.product(1, 0x9000), 0)[1])
    assert mover.outcomes == {memsets.MOVED: 2}
    m1, k1, m2, k2 = 2, 3, 5, 6
    assert cap.into[m1] == set() and cap.into[k1] == {m1, first}
    assert cap.into[m2] == {k1} and cap.into[k2] == {m2, between}
    assert [c[0] for c in fake.calls] == ["add", "remove", "add", "remove"] and {c[1] for c in fake.calls} == {77}
    mover.verify()                                       # the edges read back through the C calls at the end
    assert driver.memset_range(fake.handle(m2)) == (0x9000, 0x9004)
    assert driver.deps(fake.handle(first)) == ()


def test_a_programmatic_edge_leaves_the_product_alone(libcuda):
    cap, fake = libcuda(v2=True)
    assert ctypes.sizeof(memsets.EdgeData) == 8
    cap.kernel()
    fake.programmatic.add((2, 3))   # the product's kernel (node 3) launched programmatically after its memset (2)
    mover = Mover()
    mover.product(1, (0x9000, 4), lambda: (cap.product(1, 0x9000), 0)[1])
    assert mover.outcomes == {memsets.NOT_PLAIN: 1} and not fake.calls and cap.into[2] == {1}


def test_a_node_with_more_dependencies_than_the_first_arrays_hold_is_read_whole(libcuda):
    cap, fake = libcuda(v2=True)
    roots = [cap.kernel(stream=s) for s in range(10, 30)]   # 20 kernels on 20 streams, then a join of all
    cap.stream_deps[1] = tuple(roots)
    join = cap.kernel()
    driver = memsets._Driver.get()
    assert driver.deps(fake.handle(join)) == tuple(fake.handle(r) for r in roots)
    assert fake.queries == [16, 64]


def test_a_product_joins_the_account_only_while_its_capture_is_under_way(monkeypatch):
    memsets_at(monkeypatch, 2)
    memsets.begin()
    mover = memsets.active()
    assert mover is not None and memsets.current() is mover
    memsets.end()
    assert memsets.active() is None and memsets.current() is mover   # the log line reads it after the capture
    memsets_at(monkeypatch, 0)
    memsets.begin()
    assert memsets.active() is None and memsets.current() is None
    memsets.end()


# ---- value 3: the memsets made leaves, each product's counter in a slot of its own zeroed at the step's start

ARENA = 0x40000


def _leaf_graph(memset_range=(ARENA + 256, ARENA + 260), memset_deps=("A",)):
    return View({"A": (KERNEL, (), None), "M": (MEMSET, memset_deps, memset_range), "K": (KERNEL, ("M",), None)})


def test_a_leaf_the_kernel_follows_the_work_before_and_the_memset_writes_the_scratch():
    d = memsets.leaf(("A",), ("K",), _leaf_graph(), (ARENA + 256, 256), ARENA)
    assert d.moved and d.why == memsets.MOVED
    assert d.add == (("A", "K"),) and d.remove == (("M", "K"),)
    assert d.kernel_after == {"A"} and d.memset_after == {"A"} and d.retarget == ARENA
    off = memsets.leaf(("A",), ("K",), _leaf_graph((ARENA + 264, ARENA + 268)), (ARENA + 256, 256), ARENA)
    assert off.retarget == ARENA + 8   # at the slot's offset in the scratch: the same extent, inside slot 0


@pytest.mark.parametrize("graph, slot, before, why", [
    (_leaf_graph(), None, ("A",), memsets.NO_SLOT),
    (_leaf_graph((ARENA + 512, ARENA + 516)), (ARENA + 256, 256), ("A",), memsets.OUTSIDE),
    (_leaf_graph((ARENA + 508, ARENA + 516)), (ARENA + 256, 256), ("A",), memsets.OUTSIDE),
    (_leaf_graph(memset_deps=()), (ARENA + 256, 256), ("A",), memsets.NOT_AFTER_BEFORE),
    (_leaf_graph(memset_deps=()), (ARENA + 256, 256), (), memsets.FIRST),
])
def test_a_leaf_only_where_the_memset_writes_its_slot_after_the_streams_work(graph, slot, before, why):
    d = memsets.leaf(before, ("K",), graph, slot, ARENA)
    assert not d.moved and d.memset and d.why == why and not d.add and not d.remove and d.retarget is None


def test_a_leaf_needs_one_kernel_after_one_memset():
    assert memsets.leaf(("A",), ("K", "A"), _leaf_graph(), (ARENA + 256, 256), ARENA).why == memsets.NOT_ONE_KERNEL
    no_memset = View({"A": (KERNEL, (), None), "K": (KERNEL, ("A",), None)})
    d = memsets.leaf(("A",), ("K",), no_memset, (ARENA + 256, 256), ARENA)
    assert d.why == memsets.NO_MEMSET and not d.memset


@pytest.fixture
def leaves(monkeypatch):
    """Value 3 with an arena of 8 slots at ARENA (slot 0 the scratch)."""
    memsets_at(monkeypatch, 3)
    monkeypatch.setattr(memsets, "SLOTS", 8)
    monkeypatch.setattr(memsets, "_arena", (ARENA, 8 * memsets.SLOT_BYTES))


def test_slots_go_to_products_that_need_a_workspace_until_they_run_out(leaves):
    mover = Mover()
    assert mover.slot(0) is None and mover.slot(memsets.SLOT_BYTES + 1) is None
    got = [mover.slot(4) for _ in range(8)]
    assert got[:7] == [(ARENA + i * 256, 256) for i in range(1, 8)] and got[7] is None
    assert not memsets.in_arena(ARENA) and memsets.in_arena(ARENA + 256) and not memsets.in_arena(ARENA + 8 * 256)


def _leaf_step(cap: FakeCapture, mover: Mover, products: int):
    """A made-up step under value 3: the arena zeroed by the first kernel, then our kernels and products on stream 1
    (two in a row among them), each product on its own slot where one is left, else on the stream's workspace."""
    zero = cap.kernel()
    for i in range(products):
        slot = mover.slot(4)
        ws = slot[0] if slot else 0x9000
        mover.product(1, (ws, 4), lambda: (cap.product(1, ws), 0)[1], driver=cap)
        if i % 3 != 1:   # products 1 and 2 (4 and 5 ...) in a row
            cap.kernel()
    return zero


def test_a_simulated_capture_with_leaves_keeps_every_order_that_matters(leaves):
    cap, mover = FakeCapture(), Mover()
    zero = _leaf_step(cap, mover, products=9)
    memset_nodes = [n for _, n, _ in cap.recorded if cap.kinds[n] == MEMSET]
    assert len(memset_nodes) == 9
    assert mover.outcomes == {memsets.MOVED: 7, memsets.NO_SLOT: 2}   # seven slots, two products without one
    for stream, n, deps in cap.recorded:
        if cap.kinds[n] == MEMSET:
            kernel = n + 1
            if memsets.in_arena(cap.uses[n]):
                # a leaf: it writes the scratch, nothing depends on it, its product's kernel follows the work before
                assert cap.ranges[n] == (ARENA, ARENA + 4)
                assert not any(n in into for into in cap.into.values())
                assert cap.into[kernel] == set(deps)
                # the product's slot was zeroed before it by the step's first kernel, and no other node uses it
                assert cap.before(zero, kernel)
                assert [m for m, ws in cap.uses.items() if ws == cap.uses[n] and cap.kinds[m] == KERNEL] == [kernel]
            else:   # no slot: the memset stays before its kernel, on the stream's workspace
                assert cap.into[kernel] == {n} and cap.ranges[n] == (0x9000, 0x9004)
        else:
            for s, m, _ in cap.recorded:   # after every node its stream recorded before it, but the memsets
                if m < n and s == stream and cap.kinds[m] != MEMSET:
                    assert cap.before(m, n), (m, n)
    mover.verify(driver=cap)
    line = mover.line()
    assert "9, 7 moved off the chain (TR2_MEMSET_EARLY=3)" in line and "; slots 7 of 7" in line
    assert "2 the product has no slot of its own" in line


def test_leaves_through_c_calls_and_a_refused_turn_leaves_the_memset_in_line(libcuda, leaves):
    cap, fake = libcuda(True)
    cap.kernel()
    mover = Mover()
    mover.product(1, (ARENA + 256, 4), lambda: (cap.product(1, ARENA + 256), 0)[1])
    assert mover.outcomes == {memsets.MOVED: 1}
    assert [c[0] for c in fake.calls] == ["add", "set", "remove"] and fake.calls[1][1] == ARENA
    assert cap.into[3] == {1} and cap.into[2] == {1} and cap.ranges[2] == (ARENA, ARENA + 4)
    mover.verify()
    fake.refuse_set = True
    cap.kernel()
    mover.product(1, (ARENA + 512, 4), lambda: (cap.product(1, ARENA + 512), 0)[1])
    assert mover.outcomes[memsets.REFUSED] == 1
    # the memset still writes its slot and its kernel still waits for it (and for the work before: an added edge)
    assert cap.ranges[5] == (ARENA + 512, ARENA + 516) and cap.into[6] == {5, 4}
    assert "cuGraphMemsetNodeSetParams" in mover.line()


# ---- value 4: the leaves destroyed once the capture has ended (before the graph is instantiated)

@pytest.fixture
def dropping(leaves, monkeypatch):
    memsets_at(monkeypatch, 4)


class _Graph:
    """CuPy's Graph as drop_leaves reads it: graphExec 0 until the first launch instantiates it."""

    def __init__(self, graph_exec=0):
        self.graphExec = graph_exec


def _captured_leaf_step(monkeypatch, cap, products=9):
    mover = Mover()
    monkeypatch.setattr(memsets, "_mover", mover)
    _leaf_step(cap, mover, products)
    mover.verify(driver=cap)   # as at the capture's end, before drop_leaves
    return mover, [d.memset_node for d in mover.moved]


def test_value_4_removes_the_leaves_and_leaves_a_chain(dropping, monkeypatch):
    cap = FakeCapture()
    mover, leaves = _captured_leaf_step(monkeypatch, cap)
    memsets.drop_leaves(_Graph(), driver=cap)
    assert mover.dropped == 7 and not mover.kept and len(leaves) == 7
    assert not any(n in cap.kinds for n in leaves) and not mover.moved
    left = [n for _, n, _ in cap.recorded if n in cap.kinds]
    # one stream: each node left depends on the node left before it and on nothing else, as in a graph without
    # memsets; the two products without a slot keep their memset right before their kernel, on the stream's workspace
    assert cap.into[left[0]] == set() and all(cap.into[b] == {a} for a, b in zip(left, left[1:]))
    kept_memsets = [n for n in left if cap.kinds[n] == MEMSET]
    assert len(kept_memsets) == 2 and all(cap.ranges[n] == (0x9000, 0x9004) for n in kept_memsets)
    assert "9, 7 moved off the chain (TR2_MEMSET_EARLY=4)" in mover.line()
    assert "; 7 leaves removed after the capture; products 9" in mover.line()


def test_value_4_keeps_every_leaf_of_a_graph_instantiated_already(dropping, monkeypatch):
    cap = FakeCapture()
    mover, leaves = _captured_leaf_step(monkeypatch, cap)
    memsets.drop_leaves(_Graph(graph_exec=0x5000), driver=cap)
    assert mover.dropped == 0 and all(n in cap.kinds for n in leaves)
    assert "; 0 leaves removed after the capture, 7 kept: the graph was instantiated at the capture's end" in mover.line()


def test_value_4_keeps_a_leaf_something_depends_on(dropping, monkeypatch):
    cap = FakeCapture()
    mover, leaves = _captured_leaf_step(monkeypatch, cap)
    last = cap.recorded[-1][1]
    cap.into[last].add(leaves[2])   # a node made to wait on one leaf
    memsets.drop_leaves(_Graph(), driver=cap)
    assert mover.dropped == 6 and mover.kept == {memsets.KEPT_DEPENDED_ON: 1} and leaves[2] in cap.kinds
    assert cap.before(leaves[2], last)


def test_value_3_removes_nothing(leaves, monkeypatch):
    cap = FakeCapture()
    mover, leaves_made = _captured_leaf_step(monkeypatch, cap)
    memsets.drop_leaves(_Graph(), driver=cap)
    assert mover.dropped == 0 and all(n in cap.kinds for n in leaves_made) and len(mover.moved) == 7
    assert "removed after the capture" not in mover.line()


@pytest.mark.parametrize("v2", [True, False])
def test_value_4_through_c_calls_and_a_refused_destroy_keeps_the_leaf(libcuda, dropping, monkeypatch, v2):
    cap, fake = libcuda(v2)
    cap.kernel()
    mover = Mover()
    monkeypatch.setattr(memsets, "_mover", mover)
    for slot in (ARENA + 256, ARENA + 512):
        mover.product(1, (slot, 4), lambda slot=slot: (cap.product(1, slot), 0)[1])
        cap.kernel()
    assert mover.outcomes == {memsets.MOVED: 2}
    m1, m2 = (d.memset_node for d in mover.moved)
    fake.calls.clear()
    fake.refuse_destroy.add(fake.node(m2))
    memsets.drop_leaves(_Graph())
    assert fake.calls == [("dependents", fake.node(m1)), ("destroy", fake.node(m1)), ("dependents", fake.node(m2))]
    assert mover.dropped == 1 and mover.kept == {memsets.KEPT_REFUSED: 1}
    assert fake.node(m1) not in cap.kinds and fake.node(m2) in cap.kinds
    assert "; 1 leaves removed after the capture, 1 kept: the driver refused" in mover.line()


class _Runtime:
    """cupy.cuda.runtime's graph calls as memsets.OwnedGraph makes them, recorded."""

    def __init__(self):
        self.calls = []

    def streamEndCapture(self, stream):
        self.calls.append(("end", stream))
        return 0x700

    def graphInstantiate(self, graph):
        self.calls.append(("instantiate", graph))
        return 0x800

    def graphLaunch(self, graph_exec, stream):
        self.calls.append(("launch", graph_exec, stream))

    def graphExecDestroy(self, graph_exec):
        self.calls.append(("exec destroyed", graph_exec))

    def graphDestroy(self, graph):
        self.calls.append(("graph destroyed", graph))


def test_value_4_owned_graph_drops_its_leaves_before_it_is_instantiated(dropping, monkeypatch):
    """CuPy's end_capture instantiates at once (call 1 of results/h200-perf-20261205f): value 4 holds the captured
    graph uninstantiated, so drop_leaves removes the leaves, and only then is the graph instantiated and launched."""
    cap = FakeCapture()
    mover, leaves = _captured_leaf_step(monkeypatch, cap)
    rt = _Runtime()
    stream = type("S", (), {"ptr": 0x42})()
    graph = memsets.OwnedGraph.end_capture(stream, rt)
    assert (graph.graph, graph.graphExec) == (0x700, 0) and rt.calls == [("end", 0x42)]
    with pytest.raises(RuntimeError, match="instantiate"):
        graph.launch(stream)
    memsets.drop_leaves(graph, driver=cap)
    assert mover.dropped == 7 and not any(n in cap.kinds for n in leaves)
    graph.instantiate()
    graph.launch(stream)
    with pytest.raises(RuntimeError, match="instantiated already"):
        graph.instantiate()
    assert rt.calls[1:] == [("instantiate", 0x700), ("launch", 0x800, 0x42)]
    del graph
    assert rt.calls[3:] == [("exec destroyed", 0x800), ("graph destroyed", 0x700)]


def test_owned_graph_never_instantiated_destroys_the_graph_only():
    rt = _Runtime()
    g = memsets.OwnedGraph(0x900, rt)
    del g
    assert rt.calls == [("graph destroyed", 0x900)]


def test_owned_graph_destroys_the_graph_where_the_exec_destroy_fails():
    class Failing(_Runtime):
        def graphExecDestroy(self, graph_exec):
            super().graphExecDestroy(graph_exec)
            raise RuntimeError("cudaErrorInvalidValue")

    rt = Failing()
    g = memsets.OwnedGraph(0x700, rt)
    g.instantiate()
    with pytest.raises(RuntimeError):
        g.__del__()
    assert rt.calls == [("instantiate", 0x700), ("exec destroyed", 0x800), ("graph destroyed", 0x700)]
    assert (g.graph, g.graphExec) == (0, 0)
    g.__del__()   # nothing left to destroy
    assert len(rt.calls) == 3
