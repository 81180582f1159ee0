"""gpu/graph.py's StepGraph on the CPU: the order of its capture calls, on stand-ins for CuPy's stream and runtime and
for the modules beside it that need a GPU, all recorded. What is checked is the host's side: when the capture begins
and ends, when the graph is instantiated (TR2_MEMSET_EARLY=4: only after the capture has ended, its leaves first) and
launched, and what a failure leaves behind. That the graph gives the eager loop's bits is the GPU tests'
(tests/test_graph_gpu.py)."""
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
        f"{PKG}.tensors": types.SimpleNamespace(drop_unfilled=lambda: log.append("drop unfilled"),
                                                fill_captured=lambda: log.append("fill captured")),
        f"{PKG}.blas": types.SimpleNamespace(_instance=None),
    }
    for name, module in fakes.items():
        monkeypatch.setitem(sys.modules, name, module)
    for name in ("runtime", "tensors", "blas"):   # `from . import x` reads the package's attribute first
        monkeypatch.setattr(sys.modules[PKG], name, fakes[f"{PKG}.{name}"], raising=False)
    monkeypatch.delitem(sys.modules, f"{PKG}.graph", raising=False)
    graph = importlib.import_module(f"{PKG}.graph")
    monkeypatch.setattr(sys.modules[PKG], "graph", graph, raising=False)
    yield graph, log
    sys.modules.pop(f"{PKG}.graph", None)


def at(graph_module, monkeypatch, drop: bool = True):
    """The graph module and its log, with TR2_MEMSET_EARLY=4's DROP as given."""
    graph, log = graph_module
    monkeypatch.setattr(memsets, "DROP", drop)
    return graph, log


def step(graph, log, fail=None):
    """A StepGraph whose body logs 'forward' and 'backward'; `fail` raises at 'forward' or 'backward'."""
    def body():
        log.append("forward")
        if fail == "forward":
            raise ValueError("in the forward")
        log.append("backward")
        if fail == "backward":
            raise ValueError("in the backward")
        return "loss"
    return graph.StepGraph(body)


@pytest.mark.parametrize("drop", [True, False])
def test_one_graph_captured_once_and_replayed(graph_module, monkeypatch, drop):
    graph, log = at(graph_module, monkeypatch, drop)
    s = step(graph, log)
    with pytest.raises(RuntimeError, match=r"replay: capture\(\) first"):
        s.replay()
    assert s.warmup() == "loss" and log == ["forward", "backward"]   # eager: no capture
    log.clear()
    s.capture()
    # value 4: the capture ended by the runtime's own call, the graph instantiated after it (its leaves go between);
    # else CuPy's end_capture, which instantiates at once
    ended = ["end -> graph 1", "instantiate graph 1"] if drop else ["end (cupy)"]
    assert log == ["begin", "capturing", "forward", "backward"] + ended + ["fill captured"]
    assert isinstance(s.graph, memsets.OwnedGraph) == drop and s.out == "loss"
    log.clear()
    assert s.replay() == "loss" and s.replay() == "loss"
    assert log == (["launch graph 1"] * 2 if drop else ["launch cupy graph 1"] * 2)
    log.clear()
    with pytest.raises(RuntimeError, match="captured already"):
        s.capture()
    assert log == []


@pytest.mark.parametrize("drop", [True, False])
@pytest.mark.parametrize("fail", ["forward", "backward"])
def test_a_failure_ends_the_capture_and_keeps_no_graph(graph_module, monkeypatch, fail, drop):
    graph, log = at(graph_module, monkeypatch, drop)
    s = step(graph, log, fail=fail)
    with pytest.raises(ValueError, match=f"in the {fail}"):
        s.capture()
    # the open capture ended by CuPy's end_capture (the stream out of capture mode), once, the graph dropped
    assert log.count("end (cupy)") == 1 and log.calls()[-2:] == ["end (cupy)", "drop unfilled"]
    assert not any(e.startswith(("end ->", "instantiate", "fill")) for e in log)
    assert s.graph is None and s.out is None


def test_a_failed_end_after_a_failure_still_drops_the_unfilled_tables(graph_module, monkeypatch):
    """Where ending the failed capture fails too, the tables the capture made are dropped all the same."""
    graph, log = at(graph_module, monkeypatch, False)
    s = step(graph, log, fail="backward")
    s.stream.fail_end = True
    with pytest.raises(RuntimeError, match="cudaErrorStreamCaptureInvalidated") as e:
        s.capture()
    assert isinstance(e.value.__context__, ValueError)
    assert log.calls()[-2:] == ["end (cupy)", "drop unfilled"] and s.graph is None


@pytest.mark.parametrize("drop", [True, False])
def test_a_failed_leaf_drop_keeps_no_graph(graph_module, monkeypatch, drop):
    """A failure after the capture's end (value 4's leaf drop, or the instantiation) keeps no graph, as a failed
    capture: the unfilled tables dropped, nothing filled, nothing instantiated."""
    graph, log = at(graph_module, monkeypatch, drop)

    def refuse(g, driver=None):
        raise memsets.MemsetError("the driver refused")
    monkeypatch.setattr(memsets, "drop_leaves", refuse)
    s = step(graph, log)
    with pytest.raises(memsets.MemsetError, match="the driver refused"):
        s.capture()
    assert log.calls()[-1] == "drop unfilled" and "fill captured" not in log
    assert not any(e.startswith("instantiate") for e in log)
    assert s.graph is None
