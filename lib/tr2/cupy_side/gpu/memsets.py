"""cuBLAS's memsets taken off the captured step's chain of kernels (TR2_MEMSET_EARLY; 4 by default since the
fortieth session: the memsets made leaves, then removed once the capture has ended, below; 3 before).

Values 1 and 2, measured (results/h200-perf-20261205d): the same bits, every memset moved with value 2, and the step
no shorter (gpt2-small bf16 +0.02 ms, gpt2-medium +0.14, nanogpt +0.01): what costs is a kernel node's dependency on
a memset node, which the move keeps as a join (scripts/probes/graph_join_probe.py: a memset in line +1.99 us a pair
of kernels, joined from a branch +2.73, a leaf nothing waits on +0.30). Value 3, measured
(results/h200-perf-20261205e): the same bits, and the step shorter on every model timed (bf16, medians of two rounds:
gpt2-small -0.056 ms, -0.074 with the one-copy inputs beside; nanogpt -0.020; gpt2-medium -0.261 and -0.108, its
rounds 0.22 apart); under the profiler (value 3 with the one-copy inputs) the memsets' waits are gone, but the
graph's first kernel started 528-793 us after the input copy that followed a loss read (24-50 without leaves) and
16-19 us after it where the host launched ahead (2 without): it waited for the host's whole launch of the graph. The
likeliest cause, not measured apart, is that the leaves make the graph branch; value 4 removes them once the capture
has ended (below).

Why: before the products of some of its algorithms (nvjet kernels), cuBLAS zeroes 4 bytes, it seems of its workspace
(the plans of gpt2-small bf16 ask for a workspace of 4 bytes), with a memset on the product's stream. In the step's
graph the memset sits between the kernel before and the product, and the product starts late: from the end of the
kernel before to the product's start, 4.7 us a memset of gpt2-small bf16 where one of ours follows another (38 a
step), 7.6 us where the memset sits between two products (12 a step), against 0.32 us (median) between two of our
kernels (results/h200-perf-20261204/call5-229540b/g/trace-c.json.gz, 30 steps under torch.profiler: 50 memsets a step,
268 us a step from the kernels before them to their products). gpt2-medium bf16 had 74 a step at 6.3 us each, nanogpt
bf16 18 at 5.9 us (the timelines of results/h200-perf-20261201g call 2 and results/h200-perf-20261201c call 6, older
programs). PyTorch's products have the same memsets.

How, during the step's capture (runtime.capturing), around each product of it (lt.CublasLt.gemm_rm; blas.py's
cublasGemmEx path too, which the step does not take while cuBLASLt is on, so that no product on a workspace goes
unheard): the capturing stream's dependencies D before the call are read, and after it the nodes the call recorded.
Where they are a memset M whose target lies inside the product's workspace, followed by one kernel K that depends on M
alone, and M depends on D (what cuBLAS records), the edges D -> M are replaced by D -> K, and M is made to follow the
nodes that ended the previous product on the same workspace (nothing where none in this capture used it: every replay
of the graph starts after the last one has ended). M then runs beside the kernels between the two products, and K
follows the kernel before it as our kernels follow each other. (The CUDA driver permits adding and removing edges of
the graph a capture is recording into, only not removing nodes.)

Why that is safe: the workspace is used by the products on it and nothing else (blas.Cublas's, never inside a kernel
of ours), and the products on one workspace run one after another on the step's one stream; so the bytes
M writes are touched by no node between the previous product's end and K. K still waits for M and for D, so it reads
what it read before. Where two products follow each other directly (the backward's dW and dx products), the memset of
the second can only move if the two use different workspaces: TR2_MEMSET_EARLY=2 gives the products a second workspace
of at most SECOND_BYTES, and a product whose plan needs no more takes the one the product before it did not
(blas.Cublas.product_workspace). The products' algorithms
and workspace sizes are the record's either way, so the same bits (tests/test_graph_gpu.py).

The edges are added before the memset's old ones are removed (a refused removal leaves the graph ordered more, not
less, and counts as left in place), and every move is read back at once and again at the capture's end
(Mover.verify, from runtime.capturing): a driver that did otherwise stops the capture with MemsetError.

Values: 0 off; 1 the memsets moved, one workspace; 2 moved, and the products of small workspaces taking two workspaces
in turn; 3 the memsets made leaves (below); 4 the leaves then removed (the default).

Value 3: in the step's capture each product whose plan needs
at most SLOT_BYTES is given a workspace of its own, a slot of one arena (blas.Cublas.product_workspace), and the
step's graph starts by zeroing the whole arena (blas.Cublas.zero_slots, one kernel: runtime.capturing). cuBLAS's
memset before such a product is then turned onto the arena's slot 0, which nothing reads, and the product's kernel
made to follow the stream's work before the call instead of the memset: the memset is a leaf, nothing waits on it
(the probe: +0.30 us, against +1.99 in line). Safe because each slot's counter is zeroed once a replay before its
one product and written by nothing else. The edges into the kernel are added first, then the memset is turned, then
its edge into the kernel removed: a failure at either step leaves the memset before the kernel (still correct, the
counter zeroed twice) and counts as left in place.

Value 4 (written after value 3's measurements): value 3, and once the capture has ended, before the graph is
instantiated, each memset made a leaf is destroyed
(cuGraphDestroyNode; the driver refuses to remove a node from a graph a capture is still recording into). A leaf
writes slot 0, which nothing reads, and nothing depends on it, so the graph computes what it computed; without the
leaves its nodes form the chain of a graph without memsets again, which the device starts while the host is still
launching it (the committed traces). A leaf that something depends on, or that the driver refuses to destroy, stays
(value 3's graph, still correct), counted in the log's line; where the graph is instantiated already all stay. The
first GPU run found CuPy 14.2 instantiating at the capture's end, so nothing was removed (call 1 of
results/h200-perf-20261205f, its tests failed on that count); since, value 4 ends the capture itself and holds the
graph as the runtime's handles until the leaves are gone (OwnedGraph). Measured on an H100 (calls 3-4 there): every
leaf removed (38 of 38 on gpt2-small bf16), graph and eager losses those of the run without (nanogpt bf16 / f32,
gpt2-small bf16), the step 16.891 -> 16.857 ms (gpt2-small bf16, two rounds); the graph's first kernel 9.7-10.2 us
after its input copy (median) where the host launched ahead, against 17.3-17.9 with value 3, but still 411-704 us
after a loss read (546-566 with value 3): the leaves' branches were not what made the device wait for the launch
there. On by default since; its H200 step is owed (docs/perf.md, "Fortieth session").

The decision is one pure function (`rewire`) over a view of the graph, tested on the CPU with graphs made up of
plain values (tests/test_memsets.py); the driver's side is ctypes, as gpu/pdl.py's, and runs on the GPU only.
"""
from __future__ import annotations

import ctypes
from collections import Counter
from dataclasses import dataclass, replace

from . import kernel_switch



def forms(value: int) -> dict:
    """What a value of the switch turns on: TWO_WORKSPACES (2), LEAVES (3 and 4), DROP (4). The module's constants
    below, and tests that set a value (tests/conftest.py's memsets_at), take them from here."""
    return {"TWO_WORKSPACES": value == 2, "LEAVES": value in (3, 4), "DROP": value == 4}


EARLY = kernel_switch("TR2_MEMSET_EARLY", 4, (0, 1, 2, 3, 4))
TWO_WORKSPACES = forms(EARLY)["TWO_WORKSPACES"]
# with TWO_WORKSPACES, the products that take the two in turn: those whose plan needs at most this many bytes (4 on
# gpt2-small bf16); a larger one takes the first and keeps its memset in place if it follows a product
SECOND_BYTES = 1 << 20
LEAVES = forms(EARLY)["LEAVES"]
# value 4: the leaves' memset nodes destroyed once the capture has ended, before the graph is instantiated
DROP = forms(EARLY)["DROP"]
# with LEAVES: a slot a product whose plan needs a workspace (gpt2-small bf16's need 4 bytes), SLOTS of them in one
# arena (256 KiB), slot 0 the scratch the memsets are turned onto (gpt2-medium's step has about 290 products, 74 of
# them with a memset; where the slots run out the later products keep their memsets in place)
SLOT_BYTES = 256
SLOTS = 1024
_arena: tuple[int, int] | None = None   # (pointer, bytes) of blas.Cublas's arena, once it is allocated


def register_arena(ptr: int, nbytes: int) -> None:
    global _arena
    _arena = (int(ptr), int(nbytes))


def in_arena(ptr: int) -> bool:
    """Whether ptr is one of the arena's product slots (not slot 0, the scratch)."""
    return _arena is not None and _arena[0] + SLOT_BYTES <= ptr < _arena[0] + _arena[1]


# cuda.h: CUgraphNodeType
KERNEL, MEMCPY, MEMSET = 0, 1, 2


class EdgeData(ctypes.Structure):
    """CUgraphEdgeData (cuda.h, CUDA 12.3): all zero for a plain edge; a programmatic one has a port or type set."""
    _fields_ = [("from_port", ctypes.c_ubyte), ("to_port", ctypes.c_ubyte), ("type", ctypes.c_ubyte),
                ("reserved", ctypes.c_ubyte * 5)]


class MemsetParams(ctypes.Structure):
    """CUDA_MEMSET_NODE_PARAMS (cuda.h): where a memset node writes and what."""
    _fields_ = [("dst", ctypes.c_ulonglong), ("pitch", ctypes.c_size_t), ("value", ctypes.c_uint),
                ("elementSize", ctypes.c_uint), ("width", ctypes.c_size_t), ("height", ctypes.c_size_t)]


def memset_extent(dst: int, pitch: int, element_size: int, width: int, height: int) -> tuple[int, int]:
    """The bytes [first, end) a memset node writes: `height` rows of `width` elements, `pitch` bytes apart."""
    if height < 1 or width < 1:
        return dst, dst
    return dst, dst + pitch * (height - 1) + element_size * width


@dataclass(frozen=True)
class Rewire:
    """What to do with one product's nodes: `memset` whether the call recorded a memset before its kernel, `moved`
    whether it is moved, `why` in words, the edges (from, to) to add and then to remove (in that order the graph is
    never less ordered than asked, even if a removal fails), and what the edges into the kernel and the memset must be
    afterwards."""
    memset: bool
    moved: bool
    why: str
    add: tuple = ()
    remove: tuple = ()
    kernel: object = None
    memset_node: object = None
    kernel_after: frozenset = frozenset()
    memset_after: frozenset = frozenset()
    retarget: int | None = None   # (leaves) where the memset is to write instead: the scratch, at the slot's offset


MOVED = "moved"
NOT_ONE_KERNEL = "the call did not end in one kernel"
NO_MEMSET = "no memset right before the product's kernel"
OUTSIDE = "the memset writes outside the product's workspace"
NOT_AFTER_BEFORE = "the memset does not follow the stream's work before the call"
DIRECTLY = "the previous product on this workspace is the work right before it"
FIRST = "nothing before it in the capture"
NOT_PLAIN = "an edge into the memset or the kernel is not a plain one"
REFUSED = ("the driver refused to remove an edge or to turn the memset (the edges added stay: ordered more, not "
           "less; the memset still before its kernel)")
NO_SLOT = "the product has no slot of its own (its plan needs more than SLOT_BYTES, or the slots ran out)"


def _recorded(before, after, view, region: tuple[int, int] | None, no_region: str):
    """What a product's call recorded, checked as both forms need it: (kernel, memset, first byte the memset writes,
    before) where it is a memset inside region, after exactly the stream's work before the call, then one kernel
    after the memset alone, with plain edges only; else the Rewire that says why not (no_region where region is None).
    A view may say plain_edges(node): whether every edge into it is a plain one (no programmatic launch's edge data);
    where it is not, nothing is moved, since the edges put in would be plain ones."""
    after = tuple(after)
    if len(after) != 1 or view.kind(after[0]) != KERNEL:
        return Rewire(False, False, NOT_ONE_KERNEL)
    kernel = after[0]
    up = tuple(view.deps(kernel))
    if len(up) != 1 or view.kind(up[0]) != MEMSET:
        return Rewire(False, False, NO_MEMSET)
    memset = up[0]
    plain = getattr(view, "plain_edges", None)
    if plain is not None and not (plain(kernel) and plain(memset)):
        return Rewire(True, False, NOT_PLAIN)
    if region is None:
        return Rewire(True, False, no_region)
    first, end = view.memset_range(memset)
    if not (region[0] <= first and end <= region[0] + region[1]):
        return Rewire(True, False, OUTSIDE)
    before = tuple(before)
    if set(view.deps(memset)) != set(before):
        return Rewire(True, False, NOT_AFTER_BEFORE)
    if not before:
        return Rewire(True, False, FIRST)
    return kernel, memset, first, before


def rewire(before, after, view, workspace: tuple[int, int], previous) -> Rewire:
    """The edges that take a product's memset off the chain, or why not.

    before / after: the capturing stream's dependencies before and after the product's call; view: kind(node),
    deps(node) and memset_range(node) -> (first, end) of the graph (and plain_edges, see _recorded); workspace:
    (pointer, bytes) the product was given; previous: the stream's dependencies after the last product on the same
    workspace in this capture, None if none."""
    found = _recorded(before, after, view, workspace, OUTSIDE)
    if isinstance(found, Rewire):
        return found
    kernel, memset, _, before = found
    target = tuple(previous or ())
    if set(target) == set(before):
        return Rewire(True, False, DIRECTLY)
    return Rewire(True, True, MOVED,
                  add=tuple((d, kernel) for d in before) + tuple((p, memset) for p in target if p not in before),
                  remove=tuple((d, memset) for d in before if d not in target),
                  kernel=kernel, memset_node=memset, kernel_after=frozenset(before) | {memset},
                  memset_after=frozenset(target))


def leaf(before, after, view, slot: tuple[int, int] | None, scratch: int) -> Rewire:
    """The edges and the target that make a product's memset a leaf (value 3), or why not.

    slot: (pointer, bytes) of the product's own slot, None where it has none; scratch: slot 0's pointer. The memset
    must write inside the slot (the counter the step's first node zeroed) and follow exactly the stream's work before
    the call; then the kernel gets that work as its dependencies, and the memset writes the scratch."""
    found = _recorded(before, after, view, slot, NO_SLOT)
    if isinstance(found, Rewire):
        return found
    kernel, memset, first, before = found
    return Rewire(True, True, MOVED, add=tuple((d, kernel) for d in before), remove=((memset, kernel),),
                  kernel=kernel, memset_node=memset, kernel_after=frozenset(before), memset_after=frozenset(before),
                  retarget=scratch + (first - slot[0]))


def check(view, decision: Rewire) -> None:
    """The graph as the move left it, read back: the kernel after the stream's work and the memset, the memset after
    the previous product on its workspace and nothing else (a leaf: the kernel and the memset both after the stream's
    work alone, the memset writing the scratch). A driver that did otherwise stops the capture."""
    got_kernel, got_memset = frozenset(view.deps(decision.kernel)), frozenset(view.deps(decision.memset_node))
    if decision.retarget is not None and view.memset_range(decision.memset_node)[0] != decision.retarget:
        raise MemsetError("a memset made a leaf still writes where it wrote, not the scratch")
    if got_kernel != decision.kernel_after or got_memset != decision.memset_after:
        raise MemsetError(f"a moved memset's edges are not as asked: into the kernel {len(got_kernel)} nodes "
                          f"(asked {len(decision.kernel_after)}, the same: {got_kernel == decision.kernel_after}), "
                          f"into the memset {len(got_memset)} (asked {len(decision.memset_after)}, the same: "
                          f"{got_memset == decision.memset_after})")


KIND_NAMES = {KERNEL: "kernel", MEMCPY: "copy", MEMSET: "memset"}


def describe(before, after, view, workspace: tuple[int, int]) -> str:
    """What a product's call recorded, in a line: the kinds of the nodes before and after it, of those the last node
    depends on, and the memset's target beside the workspace (the log shows the first case of each outcome but
    moved, so that a GPU run that moves nothing says why)."""
    def kinds(nodes) -> str:
        return "[" + ", ".join(KIND_NAMES.get(view.kind(n), str(view.kind(n))) for n in nodes) + "]"
    parts = [f"stream before {kinds(before)}", f"after {kinds(after)}"]
    if len(after) == 1:
        up = tuple(view.deps(after[0]))
        parts.append(f"the last node after {kinds(up)}")
        if len(up) == 1 and view.kind(up[0]) == MEMSET:
            first, end = view.memset_range(up[0])
            parts.append(f"the memset writes [{first:#x}, +{end - first}) after {kinds(view.deps(up[0]))}, the "
                         f"workspace [{workspace[0]:#x}, +{workspace[1]})")
    return "; ".join(parts)


class Mover:
    """One capture's account: the last product's end on each workspace, what became of each memset, and the first
    case of each outcome but moved, described."""

    def __init__(self):
        self.last: dict[int, tuple] = {}
        self.outcomes: Counter = Counter()   # the memsets' outcomes
        self.others: Counter = Counter()     # the products without a memset right before their kernel
        self.examples: dict[str, str] = {}
        self.moved: list[Rewire] = []
        self.slots = 0   # (leaves) the arena's slots given to this capture's products
        self.dropped = 0   # (value 4) the leaves destroyed after the capture
        self.kept: Counter = Counter()   # (value 4) the leaves that stayed, by why

    def slot(self, need: int) -> tuple[int, int] | None:
        """(leaves) The next slot of the arena for a product whose plan needs `need` bytes, or None (no workspace
        needed, too large, no arena, or none left: the product takes its stream's workspace and keeps any memset in
        place)."""
        if not LEAVES or _arena is None or not 0 < need <= SLOT_BYTES or (self.slots + 2) * SLOT_BYTES > _arena[1]:
            return None   # a plan with no workspace has no counter to zero
        self.slots += 1
        return _arena[0] + self.slots * SLOT_BYTES, SLOT_BYTES

    def product(self, stream_ptr: int, workspace: tuple[int, int], call, driver=None) -> int:
        """call() (one product on stream_ptr with `workspace`, returning cuBLAS's status) inside the capture, its
        memset moved where `rewire` says; returns the status."""
        driver = driver or _Driver.get()
        graph, before = driver.capture_info(stream_ptr)
        status = call()
        if status != 0:
            return status
        graph_after, after = driver.capture_info(stream_ptr)
        if graph_after != graph:
            raise MemsetError("the product's call ended its stream's capture")
        if LEAVES:
            slot = (workspace[0], SLOT_BYTES) if in_arena(workspace[0]) else None
            decision = leaf(before, after, driver, slot, _arena[0] if _arena else 0)
        else:
            decision = rewire(before, after, driver, workspace, self.last.get(workspace[0]))
        if decision.why != MOVED and decision.why not in self.examples:
            self.examples[decision.why] = describe(before, after, driver, workspace)
        if decision.moved:
            driver.add_edges(graph, decision.add)
            try:
                if decision.retarget is not None:   # before the edge goes: the memset never writes the slot unordered
                    driver.set_memset_dst(decision.memset_node, decision.retarget)
                driver.remove_edges(graph, decision.remove)
            except MemsetError as e:
                decision = replace(decision, moved=False, why=REFUSED)
                self.examples.setdefault(REFUSED, f"{e}; {describe(before, after, driver, workspace)}")
            else:
                check(driver, decision)
                self.moved.append(decision)
        (self.outcomes if decision.memset else self.others)[decision.why] += 1
        self.last[workspace[0]] = tuple(after)
        return status

    def verify(self, driver=None) -> None:
        """At the capture's end: every moved memset and its kernel still have the edges the move gave them."""
        driver = driver or (_Driver.get() if self.moved else None)
        for decision in self.moved:
            check(driver, decision)

    def line(self) -> str:
        """The train log's account, after the capture."""
        seen = sum(self.outcomes.values())
        text = f"cuBLAS memsets in the capture: {seen}, {self.outcomes.get(MOVED, 0)} moved off the chain " \
               f"(TR2_MEMSET_EARLY={EARLY})"
        left = [f"{n} {why}" for why, n in sorted(self.outcomes.items()) if why != MOVED]
        text += "; left in place: " + ", ".join(left) if left else ""
        text += f"; slots {self.slots} of {SLOTS - 1}" if LEAVES else ""
        if DROP:
            text += f"; {self.dropped} leaves removed after the capture" + "".join(
                f", {n} kept: {why}" for why, n in sorted(self.kept.items()))
        text += f"; products {seen + sum(self.others.values())}" + "".join(
            f", {n} {why}" for why, n in sorted(self.others.items()))
        return text + "".join(f"; first '{why}': {example}" for why, example in sorted(self.examples.items())
                              if self.outcomes.get(why) or why == NOT_ONE_KERNEL or (why == NO_MEMSET and not seen))


_mover: Mover | None = None
_active = False


def begin() -> None:
    """A capture starts (runtime.capturing): a fresh account."""
    global _mover, _active
    _mover, _active = (Mover() if EARLY else None), True


def end() -> None:
    """The capture's body has ended (runtime.capturing): its account stays readable (current), no product joins it."""
    global _active
    _active = False


def active() -> Mover | None:
    """The account of the capture under way, to which a product hands its call; None outside one or when off."""
    return _mover if _active else None


def current() -> Mover | None:
    """The account of the capture under way or last ended; None where the switch is off."""
    return _mover


KEPT_INSTANTIATED = "the graph was instantiated at the capture's end"
KEPT_DEPENDED_ON = "a node depends on it"
KEPT_REFUSED = "the driver refused to read its dependents or to destroy it"


def drop_leaves(graph, driver=None) -> None:
    """(value 4) Once the step's capture has ended: the memsets it made leaves destroyed in `graph` (an OwnedGraph, its
    cudaGraph_t not yet instantiated), each only where nothing depends on it; what stays is counted by why. The moves
    were read back at the capture's end (Mover.verify); nothing reads these nodes after this."""
    mover = _mover
    if not DROP or mover is None:
        return
    leaves = [d for d in mover.moved if d.retarget is not None]
    mover.moved = [d for d in mover.moved if d.retarget is None]
    if not leaves:
        return
    if getattr(graph, "graphExec", 0):
        mover.kept[KEPT_INSTANTIATED] += len(leaves)
        return
    driver = driver or _Driver.get()
    for d in leaves:
        try:
            if driver.dependents(d.memset_node):
                mover.kept[KEPT_DEPENDED_ON] += 1
                continue
            driver.destroy(d.memset_node)
        except MemsetError:
            mover.kept[KEPT_REFUSED] += 1
        else:
            mover.dropped += 1


class OwnedGraph:
    """(value 4) A captured graph held as the CUDA runtime's handles (`rt`: CuPy's cupy.cuda.runtime), so that its nodes
    can still change between the capture's end and `instantiate()`: CuPy's Stream.end_capture instantiates at once
    (CuPy 14.2 on the H200, call 1 of results/h200-perf-20261205f), and an instantiated graph's topology is fixed.
    `graph`, `graphExec` and `launch(stream)` as CuPy's Graph has them; both handles destroyed with the object."""

    def __init__(self, graph: int, rt):
        self.rt = rt
        self.graph = graph          # cudaGraph_t
        self.graphExec = 0          # cudaGraphExec_t, once instantiated

    @classmethod
    def end_capture(cls, stream, rt) -> "OwnedGraph":
        return cls(rt.streamEndCapture(stream.ptr), rt)

    def instantiate(self) -> None:
        if self.graphExec:
            raise RuntimeError("instantiate: this graph is instantiated already")
        self.graphExec = self.rt.graphInstantiate(self.graph)

    def launch(self, stream) -> None:
        if not self.graphExec:
            raise RuntimeError("launch: instantiate() first")
        self.rt.graphLaunch(self.graphExec, stream.ptr)

    def __del__(self):
        rt = getattr(self, "rt", None)
        if rt is None:
            return
        graph_exec, graph = self.graphExec, self.graph
        self.graphExec = self.graph = 0
        try:
            if graph_exec:
                rt.graphExecDestroy(graph_exec)
        finally:   # the graph goes even where its instantiation's destroy failed
            if graph:
                rt.graphDestroy(graph)


class MemsetError(RuntimeError):
    pass


class _Driver:
    """libcuda's graph entry points this needs, typed once: the edge-data forms of CUDA 12.3 where the driver has
    them, edges added and removed without data (plain ones, as a capture records between a memset and a kernel) and
    read with it."""
    _instance = None

    @classmethod
    def get(cls) -> "_Driver":
        if cls._instance is None:
            cls._instance = cls()
        return cls._instance

    def __init__(self):
        from . import pdl
        self._pdl = pdl
        cuda = pdl._driver()
        vp, P = ctypes.c_void_p, ctypes.POINTER
        self.v2 = hasattr(cuda, "cuGraphNodeGetDependencies_v2") and hasattr(cuda, "cuGraphAddDependencies_v2") \
            and hasattr(cuda, "cuGraphRemoveDependencies_v2")
        if self.v2:
            self._deps = cuda.cuGraphNodeGetDependencies_v2
            self._deps.argtypes = [vp, P(vp), P(EdgeData), P(ctypes.c_size_t)]
            self._add, self._remove = cuda.cuGraphAddDependencies_v2, cuda.cuGraphRemoveDependencies_v2
            for f in (self._add, self._remove):
                f.argtypes = [vp, P(vp), P(vp), vp, ctypes.c_size_t]
        else:
            self._deps = cuda.cuGraphNodeGetDependencies
            self._deps.argtypes = [vp, P(vp), P(ctypes.c_size_t)]
            self._add, self._remove = cuda.cuGraphAddDependencies, cuda.cuGraphRemoveDependencies
            for f in (self._add, self._remove):
                f.argtypes = [vp, P(vp), P(vp), ctypes.c_size_t]
        if self.v2 and hasattr(cuda, "cuGraphNodeGetDependentNodes_v2"):
            self._dependents = cuda.cuGraphNodeGetDependentNodes_v2
            self._dependents.argtypes = [vp, P(vp), P(EdgeData), P(ctypes.c_size_t)]
            self._dependents_v2 = True
        else:
            self._dependents = cuda.cuGraphNodeGetDependentNodes
            self._dependents.argtypes = [vp, P(vp), P(ctypes.c_size_t)]
            self._dependents_v2 = False
        cuda.cuGraphDestroyNode.argtypes = [vp]
        for f in (self._deps, self._add, self._remove, cuda.cuGraphMemsetNodeGetParams,
                  cuda.cuGraphMemsetNodeSetParams, self._dependents, cuda.cuGraphDestroyNode):
            f.restype = ctypes.c_int
        cuda.cuGraphMemsetNodeGetParams.argtypes = [vp, P(MemsetParams)]
        cuda.cuGraphMemsetNodeSetParams.argtypes = [vp, P(MemsetParams)]
        self.cuda = cuda

    def _check(self, rc: int, what: str) -> None:
        if rc != 0:
            text = ctypes.c_char_p()
            self.cuda.cuGetErrorName(rc, ctypes.byref(text))
            raise MemsetError(f"{what}: {(text.value or b'?').decode()} ({rc})")

    def capture_info(self, stream_ptr: int) -> tuple[int, tuple]:
        """The graph the stream's capture records into, and the stream's dependencies in it (node handles)."""
        status, capture_id, graph = ctypes.c_int(), ctypes.c_ulonglong(), ctypes.c_void_p()
        deps, count = ctypes.POINTER(ctypes.c_void_p)(), ctypes.c_size_t()
        self._check(self.cuda.cuStreamGetCaptureInfo_v2(ctypes.c_void_p(stream_ptr or None), ctypes.byref(status),
                                                        ctypes.byref(capture_id), ctypes.byref(graph),
                                                        ctypes.byref(deps), ctypes.byref(count)),
                    "cuStreamGetCaptureInfo")
        if status.value != 1:   # CU_STREAM_CAPTURE_STATUS_ACTIVE
            raise MemsetError(f"cuStreamGetCaptureInfo: the stream is not capturing (status {status.value})")
        return int(graph.value or 0), tuple(int(deps[i]) for i in range(count.value))

    def kind(self, node: int) -> int:
        out = ctypes.c_int()
        self._check(self.cuda.cuGraphNodeGetType(ctypes.c_void_p(node), ctypes.byref(out)), "cuGraphNodeGetType")
        return out.value

    def _edges_into(self, node: int) -> tuple[tuple, tuple]:
        """The nodes node depends on, and whether each edge is a plain one. One query into arrays given (with the
        edges' data where the driver has it: a query without it fails where an edge has data, even one for the count
        alone), again with larger arrays while they came back full."""
        capacity = 16
        while True:
            count = ctypes.c_size_t(capacity)
            out = (ctypes.c_void_p * capacity)()
            data = (EdgeData * capacity)() if self.v2 else None
            extra = (data,) if self.v2 else ()
            self._check(self._deps(ctypes.c_void_p(node), out, *extra, ctypes.byref(count)),
                        "cuGraphNodeGetDependencies")
            if count.value < capacity:
                break
            capacity *= 4
        n = count.value
        plain = tuple(bytes(data[i]) == bytes(8) for i in range(n)) if self.v2 else (True,) * n
        return tuple(int(out[i]) for i in range(n)), plain

    def deps(self, node: int) -> tuple:
        return self._edges_into(node)[0]

    def dependents(self, node: int) -> int:
        """How many nodes depend on node (the count alone: null arrays ask for it)."""
        count = ctypes.c_size_t()
        extra = (None,) if self._dependents_v2 else ()
        self._check(self._dependents(ctypes.c_void_p(node), None, *extra, ctypes.byref(count)),
                    "cuGraphNodeGetDependentNodes")
        return count.value

    def destroy(self, node: int) -> None:
        self._check(self.cuda.cuGraphDestroyNode(ctypes.c_void_p(node)), "cuGraphDestroyNode")

    def plain_edges(self, node: int) -> bool:
        return all(self._edges_into(node)[1])

    def memset_range(self, node: int) -> tuple[int, int]:
        p = MemsetParams()
        self._check(self.cuda.cuGraphMemsetNodeGetParams(ctypes.c_void_p(node), ctypes.byref(p)),
                    "cuGraphMemsetNodeGetParams")
        return memset_extent(int(p.dst), int(p.pitch), int(p.elementSize), int(p.width), int(p.height))

    def set_memset_dst(self, node: int, dst: int) -> None:
        """The memset node writes at dst what it wrote (the same value, element size, width, rows and pitch)."""
        p = MemsetParams()
        self._check(self.cuda.cuGraphMemsetNodeGetParams(ctypes.c_void_p(node), ctypes.byref(p)),
                    "cuGraphMemsetNodeGetParams")
        p.dst = dst
        self._check(self.cuda.cuGraphMemsetNodeSetParams(ctypes.c_void_p(node), ctypes.byref(p)),
                    "cuGraphMemsetNodeSetParams")

    def _edges(self, f, graph: int, edges, what: str) -> None:
        if not edges:
            return
        n = len(edges)
        src = (ctypes.c_void_p * n)(*[e[0] for e in edges])
        dst = (ctypes.c_void_p * n)(*[e[1] for e in edges])
        extra = (None,) if self.v2 else ()
        self._check(f(ctypes.c_void_p(graph), src, dst, *extra, n), what)

    def remove_edges(self, graph: int, edges) -> None:
        self._edges(self._remove, graph, edges, "cuGraphRemoveDependencies")

    def add_edges(self, graph: int, edges) -> None:
        self._edges(self._add, graph, edges, "cuGraphAddDependencies")
