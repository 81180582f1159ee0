"""The step's host inputs as parts of one block of bytes, so that one host-to-device copy writes them all.

Why: between two replays of the step's graph the host writes the batch (X and Y), the dropout step counter and
AdamW's scalars. As four copies the device runs them one after another with a gap before, between and after each
(gpt2-small bf16 on the H200: 17.3 µs a step of gaps between the copies, 9.8 of copying,
results/h200-perf-20261204/call5-229540b/g/trace-c.json.gz read by scripts/trace_gaps.py). With the four
destinations made views of one device buffer and the four host arrays packed into one host buffer, one copy writes
the same bytes.

Each part starts at a multiple of ALIGN bytes from the block's start, which CuPy's pool places at a multiple of 512
as it placed each part when it was an allocation of its own: the kernels read the same values from addresses of the
same alignment. The padding between parts is zeros and nothing reads it.
"""
from __future__ import annotations

import numpy as np

ALIGN = 512


def normalize(specs) -> list[tuple[tuple[int, ...], np.dtype]]:
    """specs: (shape, dtype) a part, in order; refused with a ValueError naming the part where a shape is not a tuple
    of non-negative ints or a dtype not one NumPy knows."""
    out = []
    for i, spec in enumerate(specs):
        try:
            shape, dtype = spec
            shape = tuple(int(n) for n in ((shape,) if np.isscalar(shape) else shape))
            dtype = np.dtype(dtype)
        except (TypeError, ValueError) as e:
            raise ValueError(f"input block: part {i} is {spec!r}; allowed: (shape, dtype), e.g. ((12, 64), 'int64')"
                             f" ({e})") from None
        if any(n < 0 for n in shape):
            raise ValueError(f"input block: part {i} has shape {shape}; allowed: non-negative sizes")
        out.append((shape, dtype))
    if not out:
        raise ValueError("input block: no parts; allowed: one or more (shape, dtype)")
    return out


def layout(specs) -> tuple[list[int], int]:
    """Each part's byte offset in the block (a multiple of ALIGN) and the block's bytes (a multiple of ALIGN)."""
    offsets, end = [], 0
    for shape, dtype in specs:
        offsets.append(end)
        nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
        end += -(-nbytes // ALIGN) * ALIGN
    return offsets, max(end, ALIGN)


def check(specs, hosts) -> list[np.ndarray]:
    """The host arrays as C-contiguous arrays, once each matches its part's shape and dtype (else a ValueError
    naming the part, what it was given and what is allowed); nothing is written before all have passed."""
    hosts = list(hosts)
    if len(hosts) != len(specs):
        raise ValueError(f"input block: {len(hosts)} arrays for {len(specs)} parts; allowed: one a part")
    out = []
    for i, ((shape, dtype), host) in enumerate(zip(specs, hosts)):
        host = np.ascontiguousarray(host)
        if host.shape != shape or host.dtype != dtype:
            raise ValueError(f"input block: part {i} given {host.dtype}{list(host.shape)}; "
                             f"allowed: {dtype}{list(shape)}")
        out.append(host)
    return out


def pack(block: np.ndarray, offsets, hosts) -> None:
    """Write checked host arrays into a uint8 block at their offsets (the padding left as it is)."""
    for off, host in zip(offsets, hosts):
        block[off:off + host.nbytes] = host.reshape(-1).view(np.uint8)


def numpy_views(block: np.ndarray, offsets, specs) -> list[np.ndarray]:
    """Each part as an array over the block's bytes (NumPy; gpu/staging.py makes the CuPy ones)."""
    return [np.ndarray(shape, dtype, buffer=block, offset=off) for (shape, dtype), off in zip(specs, offsets)]


class NumpyInputBlock:
    """The NumPy backend's block: the views are the parts, write() packs straight into the block."""

    def __init__(self, specs):
        self.specs = normalize(specs)
        self.offsets, self.nbytes = layout(self.specs)
        self.block = np.zeros(self.nbytes, np.uint8)
        self.views = numpy_views(self.block, self.offsets, self.specs)

    def write(self, hosts) -> None:
        pack(self.block, self.offsets, check(self.specs, hosts))
