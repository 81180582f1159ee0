"""Per-step host inputs (the batch, the dropout step counter, AdamW's learning rate) copied to the device through
page-locked memory, asynchronously, in stream order.

Why: CudaBackend.write copied from pageable NumPy memory, which the driver stages itself and which may hold the
host until the stream has reached the copy, i.e. until the previous step's graph has finished; the step's other
writes and the next replay's launch then fall into the device's idle time. From page-locked memory the copy is
queued and the host goes on. Each destination gets two page-locked buffers used in turn; before the host rewrites a
buffer it waits for the event recorded after the copy that last read it (two writes back), so no copy ever reads a
buffer the host is rewriting, and the host runs at most two steps ahead of the device. The graph's step writes its
four inputs as one block (InputBlock; input_block.py): one copy a step instead of four.
"""
from __future__ import annotations

import numpy as np
import cupy as cp
import cupyx

from .. import input_block


class PinnedInput:
    """Two page-locked buffers of one shape and dtype, used in turn, with the event that frees each."""

    def __init__(self, shape, dtype):
        self.buffers = [cupyx.empty_pinned(shape, dtype=dtype) for _ in range(2)]
        self.events = [cp.cuda.Event(block=False, disable_timing=True) for _ in range(2)]
        self.recorded = [False, False]
        self.turn = 0

    def write(self, dst: "cp.ndarray", host: np.ndarray, stream: "cp.cuda.Stream") -> None:
        def fill(buf):
            buf[...] = host
        self.copy(dst.data.ptr, fill, stream)

    def copy(self, dst_ptr: int, fill, stream: "cp.cuda.Stream") -> None:
        """fill(buffer) writes the next free buffer; then the whole buffer is copied to dst_ptr on the stream."""
        i, self.turn = self.turn, 1 - self.turn
        if self.recorded[i]:
            self.events[i].synchronize()   # the copy two writes back has read this buffer
        buf = self.buffers[i]
        fill(buf)
        cp.cuda.runtime.memcpyAsync(dst_ptr, buf.ctypes.data, buf.nbytes, cp.cuda.runtime.memcpyHostToDevice,
                                    stream.ptr)
        self.events[i].record(stream)
        self.recorded[i] = True


class InputBlock:
    """Several inputs as views of one device buffer, written by one copy from one page-locked buffer a write
    (input_block.py says why and how the parts are laid out)."""

    def __init__(self, specs):
        self.specs = input_block.normalize(specs)
        self.offsets, self.nbytes = input_block.layout(self.specs)
        self.device = cp.zeros(self.nbytes, np.uint8)
        self.views = [cp.ndarray(shape, dtype, memptr=self.device.data + off)
                      for (shape, dtype), off in zip(self.specs, self.offsets)]
        self.pinned = PinnedInput((self.nbytes,), np.uint8)
        for buf in self.pinned.buffers:
            buf[...] = 0   # the padding between parts: copied every time, never read

    def write(self, hosts, stream: "cp.cuda.Stream") -> None:
        """hosts: one array a part, in order (checked before anything is written); on the stream, after the work
        queued there, before the next."""
        hosts = input_block.check(self.specs, hosts)
        self.pinned.copy(self.device.data.ptr, lambda buf: input_block.pack(buf, self.offsets, hosts), stream)


class Staging:
    """One PinnedInput per destination array (its address, shape and dtype)."""

    def __init__(self):
        self.inputs: dict[tuple, PinnedInput] = {}

    def write(self, dst: "cp.ndarray", host: np.ndarray, stream: "cp.cuda.Stream") -> None:
        key = (dst.data.ptr, host.shape, host.dtype.str)
        slot = self.inputs.get(key)
        if slot is None:
            if len(self.inputs) > 64:   # destinations come and go only in tests; a run has four
                self.inputs.clear()
            slot = self.inputs[key] = PinnedInput(host.shape, host.dtype)
        slot.write(dst, host, stream)
