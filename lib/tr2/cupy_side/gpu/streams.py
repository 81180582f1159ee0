"""The weight gradients' products on a second stream, beside the backward's chain of input gradients.

Why: a Linear layer's backward makes dx = dy W and dW = dy^T x. dx starts the chain of what follows (GELU's,
LayerNorm's, attention's backward, memory-bound kernels, then the next products); dW is read by nothing until the
gradient norm and AdamW at the end of the step. On one stream every kernel waits for the one before, so the
SMs a product's last wave leaves idle, and the memory-bound kernels' spare issue slots, stay unused, and a dW
product's cuBLAS memset adds its graph gap (~4 us on the H200) to the chain. On a second stream the dW product runs
beside the chain and fills them.

Order (each a CUDA event, captured into the step's graph as an edge):
- fork: the side stream waits for the main stream's work so far (dy and x are written), then runs the dW product;
- join: the main stream waits for the side stream's last product; at the next fork (one product in flight at a
  time, so the side stream never falls behind by more than the kernels between two products) and before anything
  reads the gradients (GPT.backward's end, through the backend's `backward_done`).
The arrays the side stream reads are held until the join: freed earlier, CuPy's pool would hand their memory to
main-stream work that may run before the side stream is done with them.

Bits: a product's result depends on its algorithm (the products record's, fixed per shape) and its operands; each
stream has its own cuBLAS workspace (gpu/lt.py), so nothing a product computes depends on what runs beside it. The
eager loop runs the same two streams as the graph; tests/test_graph_gpu.py holds the two equal to the bit.

Off by default; TR2_SIDE_STREAM=1 in the environment turns it on (TR2_STREAM_PRIORITY=0 then leaves the step graph's
stream at the default priority). Measured on the H200 (results/h200-perf-20261201g, calls 4-7, bf16, graph, against
the same lib on one stream, medians of 3 and 4 runs): nanogpt 4.599 -> 4.539 ms a step, gpt2-small 17.093 -> 17.057,
gpt2-medium 44.521 -> 44.621 (slower), and the peak in use up by what the side stream holds one operation longer:
nanogpt 1.692 -> 1.738 GB, above PyTorch's 1.724. Neither way reaches issue 9's step target; one stream keeps the
memory target, so it stays the default.
"""
from __future__ import annotations

import cupy as cp

from . import kernel_switch

ENABLED = bool(kernel_switch("TR2_SIDE_STREAM", 0))
# the step graph's stream at the greatest priority where the side stream is on (TR2_STREAM_PRIORITY=0: default)
PRIORITY = ENABLED and bool(kernel_switch("TR2_STREAM_PRIORITY", 1))


def high_priority_stream() -> "cp.cuda.Stream":
    """A non-blocking stream whose kernels the block scheduler prefers over default-priority streams' (the step
    graph's own: the chain of input gradients goes first where both streams have blocks waiting for an SM). CUDA
    clamps a priority beyond its range to the range's greatest (numerically least)."""
    ptr = cp.cuda.runtime.streamCreateWithPriority(NON_BLOCKING, GREATEST)
    return cp.cuda.ExternalStream(ptr)   # lives as long as the process: one a step graph


NON_BLOCKING, GREATEST = 1, -1000   # cudaStreamNonBlocking; below every device's range


class SideStream:
    def __init__(self):
        self.stream = cp.cuda.Stream(non_blocking=True)
        from .blas import get_cublas
        get_cublas().add_stream_workspace(self.stream.ptr)
        self._done = None    # the event after the side stream's last product, until joined
        self._held: tuple = ()

    def run(self, product, *hold) -> None:
        """product() on the side stream after the main stream's work so far; hold: the arrays it reads or writes,
        kept alive until the join."""
        main = cp.cuda.get_current_stream()
        self.join()
        ready = cp.cuda.Event(disable_timing=True)
        ready.record(main)
        self.stream.wait_event(ready)
        with self.stream:
            product()
        done = cp.cuda.Event(disable_timing=True)
        done.record(self.stream)
        self._done, self._held = done, hold

    def join(self) -> None:
        """The main (current) stream waits for the side stream's last product; what it held is let go."""
        if self._done is not None:
            cp.cuda.get_current_stream().wait_event(self._done)
            self._done, self._held = None, ()


_side: SideStream | None = None


def side() -> SideStream | None:
    """The process's side stream (made on first use), or None where it is turned off."""
    global _side
    if not ENABLED:
        return None
    if _side is None:
        _side = SideStream()
    return _side


def join() -> None:
    if _side is not None:
        _side.join()
