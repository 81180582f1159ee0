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
legacy default stream, and one stream orders each replay after the writes before it. (The weight gradients' products
on a second stream beside it, gpu/streams.py with this stream at the greatest priority, TR2_SIDE_STREAM and
TR2_STREAM_PRIORITY, were measured within 1.3% of one stream and above PyTorch's peak memory in the eighth session,
docs/perf.md, and removed; before the removal, at 3f23587.)
"""
from __future__ import annotations

import cupy as cp

from . import memsets, runtime, tensors


class StepGraph:
    def __init__(self, body, allocator_for=None):
        """allocator_for(pool) -> malloc: the allocator that draws on the graph's pool (default: the pool's own;
        the backend's counts its bytes in the peak)."""
        self.body = body
        self.stream = cp.cuda.Stream(non_blocking=True)
        self.pool = cp.cuda.MemoryPool()
        self.malloc = allocator_for(self.pool) if allocator_for else self.pool.malloc
        self.graph = None
        self.out = None

    def warmup(self):
        """The body run eagerly on the graph's stream and pool; returns what it returns."""
        with self.stream, cp.cuda.using_allocator(self.malloc):
            return self.body()

    def capture(self) -> None:
        """Record the body once (nothing runs); the outputs it returned stay valid across replays."""
        if self.graph is not None:
            raise RuntimeError("capture: this step is captured already")
        with self.stream, cp.cuda.using_allocator(self.malloc):
            self.stream.begin_capture()
            try:
                with runtime.capturing():
                    out = self.body()
            except BaseException:
                try:   # leave the stream out of capture mode
                    self.stream.end_capture()
                finally:   # the graph is dropped, its handles with it
                    tensors.drop_unfilled()
                raise
            # TR2_MEMSET_EARLY=4: the graph instantiated only once its leaves are gone (memsets.OwnedGraph says why)
            graph = (memsets.OwnedGraph.end_capture(self.stream, cp.cuda.runtime) if memsets.DROP
                     else self.stream.end_capture())
        try:
            memsets.drop_leaves(graph)
            if isinstance(graph, memsets.OwnedGraph):
                graph.instantiate()
        except BaseException:
            tensors.drop_unfilled()   # as a failed capture: no graph kept, its handles go with it
            raise
        self.graph = graph
        self.captured = dict(runtime.captured)   # our launches in it, and the programmatic ones (runtime.PDL)
        from . import blas
        if blas._instance is not None:   # its workspaces' addresses are the graph's now (blas.Cublas._replace)
            blas._instance.captured = True
        tensors.fill_captured()
        self.out = out

    def replay(self):
        """Launch the captured step on the stream; returns the outputs of capture (rewritten in place)."""
        if self.graph is None:
            raise RuntimeError("replay: capture() first")
        self.graph.launch(self.stream)
        return self.out
