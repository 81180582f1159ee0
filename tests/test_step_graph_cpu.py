"""gpu/graph.py's StepGraph on the CPU: the order of its capture calls, with one graph and cut in two by split_here()
(TR2_STEP_GRAPHS=2), on stand-ins for CuPy's stream and runtime and for the modules beside it that need a GPU, all
recorded. What is checked is the host's side: when captures begin and end, which parts are instantiated and launched
in which order, and what a failure leaves behind. That the parts give the eager loop's bits is the GPU tests'
(tests/test_graph_gpu.py, test_two_step_graphs_change_no_bit)."""
from __future__ import annotations

import contextlib
import importlib
import sys
import types

import pytest

from tr2.cupy_side.gpu import memsets

PKG = "tr2.cupy_side.gpu"


class Log(list):
    def calls(self):
        """The calls but the handles' destruction (an OwnedGraph destroys its handles when dropped)."""
        return [e for e in self if "destroyed" not in e]


class Stream:
    def __init__(self, log, ptr=0x5):
        self.log, self.ptr, self.fail_end = log, ptr, False

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    def begin_capture(self):
        self.log.append("begin")

    def end_capture(self):   # CuPy's: ended and instantiated at once
        self.log.append("end (cupy)")
        if self.fail_end:
            raise RuntimeError("cudaErrorStreamCaptureInvalidated")
        return CupyGraph(self.log, sum(1 for e in self.log if e.startswith("end")))


class CupyGraph:
    def __init__(self, log, n):
        self.log, self.n, self.graphExec = log, n, 1

    def launch(self, stream):
        self.log.append(f"launch cupy graph {self.n}")


class Runtime:
    """cupy.cuda.runtime's graph calls (memsets.OwnedGraph's), recorded; graph handles 0x100, 0x101, ..."""

    def __init__(self, log):
        self.log, self.made = log, 0

    def streamEndCapture(self, stream):
        self.made += 1
        self.log.append(f"end -> graph {self.made}")
        return 0x100 + self.made

    def graphInstantiate(self, graph):
        self.log.append(f"instantiate graph {graph - 0x100}")
        return 0x200 + graph - 0x100

    def graphLaunch(self, graph_exec, stream):
        self.log.append(f"launch graph {graph_exec - 0x200}")

    def graphExecDestroy(self, graph_exec):
        self.log.append(f"exec destroyed {graph_exec - 0x200}")

    def graphDestroy(self, graph):
        self.log.append(f"graph destroyed {graph - 0x100}")


@pytest.fixture
def graph_module(monkeypatch):
    """gpu/graph.py imported over stand-ins: a cupy with Stream, MemoryPool, using_allocator and runtime; runtime.py's
    capturing() (memsets' account begun and ended around the body, as the real one), tensors.py and blas.py. The
    log records every call in order; sys.modules is restored afterwards."""
    log = Log()
    rt = Runtime(log)
    for name in ("_mover", "_active"):   # the memsets' account capturing() begins: as it was, afterwards
        monkeypatch.setattr(memsets, name, getattr(memsets, name))
    cuda = types.SimpleNamespace(Stream=lambda non_blocking=True: Stream(log), runtime=rt,
                                 MemoryPool=lambda: types.SimpleNamespace(malloc=None),
                                 using_allocator=lambda malloc: contextlib.nullcontext())
    cupy = types.ModuleType("cupy")
    cupy.cuda = cuda

    @contextlib.contextmanager
    def capturing():
        memsets.begin()
        log.append("capturing")
        try:
            yield
        finally:
            memsets.end()

    fakes = {
        "cupy": cupy,
        f"{PKG}.runtime": types.SimpleNamespace(capturing=capturing, captured={"kernels": 0, "programmatic": 0}),
        f"{PKG}.streams": types.SimpleNamespace(PRIORITY=False, ENABLED=False),
        f"{PKG}.tensors": types.SimpleNamespace(drop_unfilled=lambda: log.append("drop unfilled"),
                                                fill_captured=lambda: log.append("fill captured")),
        f"{PKG}.blas": types.SimpleNamespace(_instance=None),
    }
    for name, module in fakes.items():
        monkeypatch.setitem(sys.modules, name, module)
    for name in ("runtime", "streams", "tensors", "blas"):   # `from . import x` reads the package's attribute first
        monkeypatch.setattr(sys.modules[PKG], name, fakes[f"{PKG}.{name}"], raising=False)
    monkeypatch.delitem(sys.modules, f"{PKG}.graph", raising=False)
    graph = importlib.import_module(f"{PKG}.graph")
    monkeypatch.setattr(sys.modules[PKG], "graph", graph, raising=False)
    yield graph, log
    sys.modules.pop(f"{PKG}.graph", None)


def at(graph_module, monkeypatch, parts: int, drop: bool = True):
    """The graph module and its log, with TR2_STEP_GRAPHS=parts and TR2_MEMSET_EARLY=4's DROP as given."""
    graph, log = graph_module
    monkeypatch.setattr(graph, "PARTS", parts)
    monkeypatch.setattr(memsets, "DROP", drop)
    return graph, log


def step(graph, log, cut=True, fail=None):
    """A StepGraph whose body logs 'forward', calls split_here() (where `cut`), logs 'backward'; `fail` raises at
    'forward' or 'backward'."""
    def body():
        log.append("forward")
        if fail == "forward":
            raise ValueError("in the forward")
        if cut:
            graph.split_here()
        log.append("backward")
        if fail == "backward":
            raise ValueError("in the backward")
        return "loss"
    return graph.StepGraph(body)


@pytest.mark.parametrize("drop", [True, False])
def test_one_graph_as_before(graph_module, monkeypatch, drop):
    graph, log = at(graph_module, monkeypatch, 1, drop)
    s = step(graph, log)
    assert s.warmup() == "loss" and log == ["forward", "backward"]   # split_here outside a capture: nothing
    log.clear()
    s.capture()
    ended = ["end -> graph 1", "instantiate graph 1"] if drop else ["end (cupy)"]
    assert log == ["begin", "capturing", "forward", "backward"] + ended + ["fill captured"]
    assert len(s.parts) == 1 and s.graph is s.parts[0]
    log.clear()
    assert s.replay() == "loss"
    assert log == (["launch graph 1"] if drop else ["launch cupy graph 1"])


@pytest.mark.parametrize("drop", [True, False])
def test_two_graphs_cut_at_split_here_and_replay_in_order(graph_module, monkeypatch, drop):
    graph, log = at(graph_module, monkeypatch, 2, drop)
    s = step(graph, log)
    s.capture()
    if drop:   # both parts ended before either is instantiated (their leaves go first)
        assert log == ["begin", "capturing", "forward", "end -> graph 1", "begin", "backward", "end -> graph 2",
                       "instantiate graph 1", "instantiate graph 2", "fill captured"]
    else:
        assert log == ["begin", "capturing", "forward", "end (cupy)", "begin", "backward", "end (cupy)",
                       "fill captured"]
    assert len(s.parts) == 2 and s.graph is s.parts[0] and graph._cutting is None
    log.clear()
    s.replay()
    assert log == (["launch graph 1", "launch graph 2"] if drop else ["launch cupy graph 1", "launch cupy graph 2"])
    log.clear()
    with pytest.raises(RuntimeError, match="captured already"):
        s.capture()
    assert log == []


def test_a_second_cut_is_refused(graph_module, monkeypatch):
    graph, log = at(graph_module, monkeypatch, 2)

    def body():
        graph.split_here()
        graph.split_here()
    s = graph.StepGraph(body)
    with pytest.raises(RuntimeError, match="split_here: a cut more than TR2_STEP_GRAPHS=2 parts allow"):
        s.capture()
    assert s.graph is None and s.parts == [] and graph._cutting is None
    assert log.calls()[-2:] == ["end (cupy)", "drop unfilled"]


@pytest.mark.parametrize("fail", ["forward", "backward"])
def test_a_failure_ends_the_open_capture_and_keeps_no_graph(graph_module, monkeypatch, fail):
    graph, log = at(graph_module, monkeypatch, 2, True)
    s = step(graph, log, fail=fail)
    with pytest.raises(ValueError, match=f"in the {fail}"):
        s.capture()
    # the capture open when the body failed is ended (CuPy's end_capture), once; a part ended before is dropped,
    # its handle destroyed with it
    assert log.count("end (cupy)") == 1 and log.calls()[-2:] == ["end (cupy)", "drop unfilled"]
    assert ("end -> graph 1" in log) == (fail == "backward") == ("graph destroyed 1" in log)
    assert s.graph is None and s.parts == [] and s._ended == [] and graph._cutting is None
    assert not any(e.startswith("instantiate") for e in log)


def test_a_cut_that_fails_to_end_leaves_no_capture_to_end(graph_module, monkeypatch):
    """Where ending the first part fails (the capture invalidated), the stream is out of capture mode already: the
    failure path must not end it again (that would raise over the first error)."""
    graph, log = at(graph_module, monkeypatch, 2, False)
    s = step(graph, log)
    s.stream.fail_end = True
    with pytest.raises(RuntimeError, match="cudaErrorStreamCaptureInvalidated"):
        s.capture()
    assert log.count("end (cupy)") == 1 and log.calls()[-1] == "drop unfilled" and "backward" not in log
    assert s.graph is None and graph._cutting is None


@pytest.mark.parametrize("drop", [True, False])
def test_the_cut_reads_back_the_moves_and_forgets_the_last_products(graph_module, monkeypatch, drop):
    """At the cut, the memsets' account (gpu/memsets.py) reads its moves back while the first part is whole (CuPy 13
    destroys an instantiated graph's template), keeps them only for value 4's drop_leaves, and forgets each
    workspace's last product (values 1-2 would join a node of the ended part)."""
    graph, log = at(graph_module, monkeypatch, 2, drop)
    monkeypatch.setattr(memsets.Mover, "verify", lambda self, driver=None: log.append(f"verify {len(self.moved)}"))
    move = types.SimpleNamespace(retarget=None)   # a memset moved in the first part
    seen = []

    def body():
        mover = memsets.active()
        mover.last[0x10] = (0xA,)
        mover.moved.append(move)
        graph.split_here()
        seen.append((dict(mover.last), list(mover.moved)))
    graph.StepGraph(body).capture()
    assert seen == [({}, [move] if drop else [])]
    first_end = "end -> graph 1" if drop else "end (cupy)"
    assert log.index("verify 1") < log.index(first_end)

