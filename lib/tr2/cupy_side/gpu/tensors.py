"""The device table of tensors that the multi-tensor kernels (adamw.cu, global_norm.cu) walk.

table [n_tensors, COLS] u64 = (param, grad, m, v, numel, decay flag, half copy, grad kind, sums, starts, row width)
(common.cuh's TENSOR_COLS; 0 where a column has no tensor: the norm's table has grads only, and float32 builds no
half copies; grad kind 0 for float32 gradients, the build's kind for half-type ones, a product's dW under half
roundings, and KIND_TIED plus the build's kind for a TiedGradient, the last three columns its own); chunk_tensor /
chunk_start map each
block to one chunk of one tensor. Built once per list of buffers (keyed by their device addresses) and
kept: the step replays the same table, as a CUDA graph would.

Outside a capture the host rows go to the device by CuPy's plain copy, which has taken them from host
memory before it returns, so a table dropped from the cache leaves no copy reading freed memory.
Inside a CUDA graph capture (gpu/graph.py), where CuPy refuses host copies, a table takes device arrays set
aside outside any capture (`_spares`: every table made outside a capture sets aside one more of its shapes, as the
step's eager warm-up does before the capture) and its copy is deferred: `fill_captured()`, called once the
capture has ended, copies the rows in, and every replay reads them there. Why set aside: an array allocated inside
the capture may be memory the captured step freed earlier and its replay still writes (an activation's), which
would overwrite a table filled once (every graph run of call 2 and 3 of results/h200-perf-20261202b stopped on an
illegal address). Where no spare of a shape is left, the rows go from page-locked memory by a copy the graph
records and repeats at every replay, as all tables did before. Tables a capture made are kept for the life of the
process (`_captured`), with their page-locked sources.
Why deferred: a copy recorded in the graph repeats rows which never change at every replay, 6 copies a step (2.7
us each on nanogpt, 4.8 us on gpt2-small, each with its node's gap: call 2 of results/h200-perf-20261202)."""
from __future__ import annotations

import numpy as np
import cupy as cp
import cupyx

from . import kernel_define
from .cast import from_half
from .halfbits import KIND_BF16, KIND_F16, KIND_F32

CHUNK = 4096          # elements per block
THREADS = 256
COLS = kernel_define("common.cuh", "TENSOR_COLS")
KIND_TIED = kernel_define("common.cuh", "KIND_TIED")


class TiedGradient:
    """The tied wte's gradient held in two parts (embedding.cu's embedding_backward_wte_sums): lm_head's dW in the
    build's half type (uint16 bits [V, C]) and the embedding's per-token sums (float32 [V, C], written only on the
    rows of the batch's tokens: starts[v + 1] > starts[v], int32 [V + 1] from the embedding's sort). Its value is
    widen(dw) + sums on those rows and widen(dw) elsewhere, the float32 the widening and embedding_backward_wte made
    before; the global norm and AdamW read it so (common.cuh's TiedRows), and `dense` makes it for anything else."""

    def __init__(self, dw, sums, starts, kind: int):
        if kind not in (KIND_BF16, KIND_F16):
            raise TypeError(f"a tied gradient's dW is in a half type (kind 1 or 2), not kind {kind}")
        if not (isinstance(dw, cp.ndarray) and dw.dtype == np.uint16 and dw.ndim == 2 and dw.flags.c_contiguous):
            raise TypeError("a tied gradient's dW is a C-contiguous [V, C] uint16 CuPy array")
        if not (isinstance(sums, cp.ndarray) and sums.dtype == np.float32 and sums.shape == dw.shape
                and sums.flags.c_contiguous):
            raise TypeError("a tied gradient's sums are a C-contiguous float32 CuPy array of dW's shape")
        if not (isinstance(starts, cp.ndarray) and starts.dtype == np.int32 and starts.shape == (dw.shape[0] + 1,)):
            raise TypeError("a tied gradient's starts are an int32 CuPy array of V + 1 entries")
        if dw.size >= 2 ** 31:
            raise TypeError("a tied gradient has fewer than 2^31 elements (its kernels index rows in 32 bits)")
        self.dw, self.sums, self.starts, self.kind = dw, sums, starts, kind
        self.shape, self.size, self.ndim = dw.shape, dw.size, dw.ndim

    def dense(self) -> "cp.ndarray":
        """The float32 gradient (a new array): widen(dw) + sums on the present tokens' rows, the same float32 add."""
        w = from_half(self.dw, self.kind)
        present = (self.starts[1:] > self.starts[:-1])[:, None]
        return cp.where(present, w + self.sums, w)


class TensorTable:
    def __init__(self, table, chunk_tensor, chunk_start, n_blocks, sources=(), tied=()):
        self.table, self.chunk_tensor, self.chunk_start, self.n_blocks = table, chunk_tensor, chunk_start, n_blocks
        self.sources = sources  # page-locked host arrays a recorded copy reads at every replay (no spare was left)
        self.tied = tied        # (first block, blocks) of each TiedGradient's chunks


def _to_device(host: np.ndarray):
    """(device array, made inside a capture, its page-locked source or None)."""
    key = (host.shape, host.dtype.str)
    if not cp.cuda.get_current_stream().is_capturing():
        spares = _spares.setdefault(key, [])
        if len(spares) < 2:
            spares.append(cp.empty(host.shape, dtype=host.dtype))
        return cp.asarray(host), False, None
    spares = _spares.get(key)
    if spares:
        dev = spares.pop()
        _unfilled.append((dev, host.copy()))
        return dev, True, None
    pinned = cupyx.empty_pinned(host.shape, dtype=host.dtype)
    pinned[...] = host
    dev = cp.empty(host.shape, dtype=host.dtype)
    # The runtime's call, not ndarray.set: CuPy refuses every host-to-device copy while a stream captures,
    # though CUDA captures one from page-locked memory.
    cp.cuda.runtime.memcpyAsync(dev.data.ptr, pinned.ctypes.data, host.nbytes, cp.cuda.runtime.memcpyHostToDevice,
                                cp.cuda.get_current_stream().ptr)
    return dev, True, pinned


_cache: dict[tuple, TensorTable] = {}
_captured: list[TensorTable] = []  # tables a captured graph reads: never freed
_unfilled: list[tuple] = []        # (device array, host rows) of tables made inside the capture under way
_spares: dict[tuple, list] = {}    # (shape, dtype) -> device arrays allocated outside any capture, for its tables


def fill_captured() -> int:
    """Copy the rows of the tables made inside the capture that has just ended into their device arrays (outside
    any capture; before the first replay). Returns how many arrays it filled."""
    if cp.cuda.get_current_stream().is_capturing():
        raise RuntimeError("fill_captured: the capture has not ended")
    n = len(_unfilled)
    for dev, host in _unfilled:
        dev.set(host)
    # the rows on the device before anything replays: a copy still ordered on another stream than the graph's (the
    # graph's is non-blocking) must not be left to race the first replay (a safeguard: the illegal address of calls
    # 2 and 3 of results/h200-perf-20261202b came from the memory the tables were given, above)
    cp.cuda.Device().synchronize()
    _unfilled.clear()
    return n


def drop_unfilled() -> None:
    """A capture that failed: its tables are never read, their rows are not needed."""
    _unfilled.clear()


def _ptr(a) -> int:
    return 0 if a is None else int(a.data.ptr)


def _grad_columns(g) -> tuple:
    """(grad pointer, grad kind, sums, starts, row width) of a gradient whose kind table_for has checked."""
    if isinstance(g, TiedGradient):
        return _ptr(g.dw), KIND_TIED | g.kind, _ptr(g.sums), _ptr(g.starts), int(g.shape[1])
    return _ptr(g), None, 0, 0, 0


def table_for(params, grads, ms=None, vs=None, halves=None, half_kind: int = KIND_F32) -> TensorTable:
    """halves: per tensor, its half-type copy (uint16 bits, the param's shape) or None. A gradient may be held in
    the build's half type (uint16 bits of half_kind) instead of float32, or be a TiedGradient of half_kind."""
    n = len(grads)
    params, ms, vs, halves = ([None] * n if a is None else list(a) for a in (params, ms, vs, halves))
    for a in [x for x in params + ms + vs if x is not None]:
        if not isinstance(a, cp.ndarray) or a.dtype != np.float32 or not a.flags.c_contiguous:
            raise TypeError("multi-tensor kernels take C-contiguous float32 CuPy arrays")
    for g in grads:
        if isinstance(g, TiedGradient):
            if g.kind != half_kind:
                raise TypeError(f"a tied gradient of kind {g.kind} in a table of the half kind {half_kind}")
            continue
        half = isinstance(g, cp.ndarray) and g.dtype == np.uint16 and half_kind in (KIND_BF16, KIND_F16)
        if not isinstance(g, cp.ndarray) or not (g.dtype == np.float32 or half) or not g.flags.c_contiguous:
            raise TypeError("a gradient is a C-contiguous CuPy array of float32, or of the half build's uint16 bits, "
                            "or a TiedGradient")
    for h, g in zip(halves, grads):
        if h is not None and not (isinstance(h, cp.ndarray) and h.dtype == np.uint16 and h.flags.c_contiguous
                                  and h.size == g.size):
            raise TypeError("a half copy is a C-contiguous uint16 CuPy array of its tensor's size")
    rows = []
    for p, g, m, v, h in zip(params, grads, ms, vs, halves):
        ndim = (p if p is not None else g).ndim
        gp, kind, sums, starts, width = _grad_columns(g)
        if kind is None:
            kind = half_kind if g.dtype == np.uint16 else KIND_F32
        rows.append((_ptr(p), gp, _ptr(m), _ptr(v), int(g.size), 1 if ndim >= 2 else 0, _ptr(h), kind,
                     sums, starts, width))
    key = tuple(rows)
    t = _cache.get(key)
    if t is None:
        chunk_tensor, chunk_start, tied = [], [], []
        for i, r in enumerate(rows):
            if r[7] & KIND_TIED:
                tied.append((len(chunk_tensor), -(-r[4] // CHUNK)))
            for s in range(0, r[4], CHUNK):
                chunk_tensor.append(i)
                chunk_start.append(s)
        (table, captured, a), (ct, _, b), (cs, _, c) = (_to_device(np.array(rows, dtype=np.uint64).reshape(-1, COLS)),
                                                        _to_device(np.array(chunk_tensor, dtype=np.int32)),
                                                        _to_device(np.array(chunk_start, dtype=np.int64)))
        t = TensorTable(table, ct, cs, len(chunk_tensor), tuple(x for x in (a, b, c) if x is not None), tuple(tied))
        if captured:
            _captured.append(t)
        if len(_cache) > 64:
            _cache.clear()
        _cache[key] = t
    return t
