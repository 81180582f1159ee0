"""A training step captured once as a CUDA graph and replayed every step after.

`body()` must issue device work only: no host <-> device copy, no wait, no new kernel compiled. Its
inputs (the batch, the learning rate and bias corrections, the dropout step counter) live in buffers
allocated once, which the caller rewrites (`backend.write`, ordered on this stream) before each replay;
its products go through gpu/blas.py, whose ctypes cuBLAS calls can be captured (CuPy's own cuBLAS
bindings refuse capture).

Memory: the step allocates from a pool of its own, as PyTorch's graphs do. `warmup()` runs the body
eagerly in that pool (a real training step: kernels compiled, cuBLAS's choices made, the pool grown);
`capture()` records it once. The multi-tensor tables (tensors.py) of the capture's gradient buffers
are filled once the capture has ended (tensors.fill_captured), not copied by the graph at every replay.
After capture nothing else allocates from that pool, so the addresses baked into the graph stay the
graph's. (A first version counted on the pool serving the capture the warm-up's addresses again; on
the H200 it did not, and the capture stopped with an error rather than record a stale table.)

Everything, the caller's writes included, runs on `self.stream`: a graph cannot be captured on the
legacy default stream, and one stream orders each replay after the writes before it.

TR2_STEP_GRAPHS=2 (off: 1): the step captured as two graphs, cut where the body calls `split_here()` (the training
step: between the forward and the backward), replayed one after the other on the stream. Why: after a loss read the
device waits for about the whole of a graph's launch on the host (407-705 µs on gpt2-small bf16, docs/perf.md
"Forty-first session"); cut in two, it starts once the first part is launched and the host launches the second
under the forward's milliseconds, for one graph-to-graph gap a step. The same kernels in the same order on one
stream: the same bits (tests/test_graph_gpu.py). The side stream (TR2_SIDE_STREAM=1) forks and joins within the
backward, so within the second part. The second part's first product has nothing before it in its capture, so its
cuBLAS memset, where its plan has one, stays in line (gpu/memsets.py).
"""
from __future__ import annotations

import cupy as cp

from . import kernel_switch, memsets, runtime, streams, tensors

PARTS = kernel_switch("TR2_STEP_GRAPHS", 1, (1, 2))
_cutting = None   # the StepGraph whose capture split_here() cuts, while one is under way with PARTS > 1


def split_here() -> None:
    """Where the step's body may be cut (between the forward and the backward): with TR2_STEP_GRAPHS=2 and a step's
    capture under way, the graph so far is ended and a second capture begins on the same stream; else nothing (the
    eager warm-up, one graph)."""
    if _cutting is not None:
        _cutting._cut()


class StepGraph:
    def __init__(self, body, allocator_for=None):
        """allocator_for(pool) -> malloc: the allocator that draws on the graph's pool (default: the pool's own;
        the backend's counts its bytes in the peak)."""
        self.body = body
        # beside the weight gradients' side stream (gpu/streams.py, when on), the chain of the step goes first for an SM
        self.stream = streams.high_priority_stream() if streams.PRIORITY else cp.cuda.Stream(non_blocking=True)
        self.pool = cp.cuda.MemoryPool()
        self.malloc = allocator_for(self.pool) if allocator_for else self.pool.malloc
        self.graph = None   # the first (or only) part
        self._open = False
        self.parts = []     # the captured graphs, replayed in this order
        self._ended = []    # during a capture: the parts split_here() has ended
        self.out = None

    def warmup(self):
        """The body run eagerly on the graph's stream and pool; returns what it returns."""
        with self.stream, cp.cuda.using_allocator(self.malloc):
            return self.body()

    def capture(self) -> None:
        """Record the body once (nothing runs); the outputs it returned stay valid across replays."""
        global _cutting
        if self.graph is not None:
            raise RuntimeError("capture: this step is captured already")
        with self.stream, cp.cuda.using_allocator(self.malloc):
            self._ended = []
            self.stream.begin_capture()
            self._open = True   # a capture begun and not yet ended (by a cut or the end)
            _cutting = self if PARTS > 1 else None
            try:
                with runtime.capturing():
                    out = self.body()
            except BaseException:
                _cutting = None
                try:   # leave the stream out of capture mode, unless a failed cut left it out already
                    if self._open:
                        self.stream.end_capture()
                finally:   # the graphs are dropped, their handles with them
                    self._ended = []
                    tensors.drop_unfilled()
                raise
            _cutting = None
            parts, self._ended = self._ended + [self._end()], []
        try:
            memsets.drop_leaves(parts[0])   # every part's leaves (node handles), none instantiated yet with value 4
            for part in parts:
                if isinstance(part, memsets.OwnedGraph):
                    part.instantiate()
        except BaseException:
            tensors.drop_unfilled()   # as a failed capture: no graph kept, its handles go with it
            raise
        self.parts, self.graph = parts, parts[0]
        self.captured = dict(runtime.captured)   # our launches in it, and the programmatic ones (runtime.PDL)
        from . import blas
        if blas._instance is not None:   # its workspaces' addresses are the graph's now (blas.Cublas._replace)
            blas._instance.captured = True
        tensors.fill_captured()
        self.out = out

    def _end(self):
        """The capture under way ended: an OwnedGraph not yet instantiated with TR2_MEMSET_EARLY=4 (its leaves go
        first: memsets.OwnedGraph says why), else CuPy's graph, instantiated."""
        self._open = False   # ended, or failed to: either way the stream is out of capture mode now
        return (memsets.OwnedGraph.end_capture(self.stream, cp.cuda.runtime) if memsets.DROP
                else self.stream.end_capture())

    def _cut(self) -> None:
        """split_here() during the capture: the graph so far ended, a new capture begun on the same stream."""
        if len(self._ended) + 1 >= PARTS:
            raise RuntimeError(f"split_here: a cut more than TR2_STEP_GRAPHS={PARTS} parts allow")
        mover = memsets.active()
        if mover is not None:
            mover.verify()   # the first part's moves read back while its graph is whole: CuPy 13 destroys the
            if not memsets.DROP:   # cudaGraph_t of a graph it instantiates, and nothing reads them again but value
                mover.moved = []   # 4's drop_leaves, whose graphs stay whole (OwnedGraph)
            mover.last.clear()   # a product's previous one on its workspace (values 1-2) lies in the ended part
        self._ended.append(self._end())
        self.stream.begin_capture()
        self._open = True

    def replay(self):
        """Launch the captured step on the stream (each part in turn); returns the outputs of capture (rewritten
        in place)."""
        if self.graph is None:
            raise RuntimeError("replay: capture() first")
        for part in self.parts:
            part.launch(self.stream)
        return self.out
