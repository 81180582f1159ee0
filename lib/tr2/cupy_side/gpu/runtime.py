"""Loading and launching the kernel files (cubins built ahead by gpu/cubins.py), and the per-shape workspace.

Every launch goes to CuPy's current stream. Nothing here synchronizes with the host.
"""
from __future__ import annotations

import contextlib
import functools
import sys

import numpy as np
import cupy as cp

from . import COMPILE_OPTIONS, cubins, kernel_files, kernel_switch, load_source, memsets, pdl

_modules: dict[str, "cp.RawModule"] = {}
_functions: dict[tuple[str, str], object] = {}
_built_for: dict[str, str] = {}

# Grid-stride kernels use at most this many blocks per launch (a few waves on an H200's 132 SMs).
MAX_BLOCKS = 132 * 32
THREADS = 256


def arch() -> str:
    """The current GPU's architecture as NVRTC names it (sm_90 on an H200)."""
    return "sm_" + cp.cuda.Device().compute_capability


def built_for(filename: str) -> str | None:
    """The architecture filename's loaded module was built for (cubins.target: sm_90a for attention.cu on an
    H200), or None where CuPy compiled it (no NVRTC found: CuPy's default architecture)."""
    module(filename)
    return _built_for.get(filename)


def module(filename: str) -> "cp.RawModule":
    """The module of one kernel file, loaded from its cubin (built ahead; compiled and kept when missing).
    Where no NVRTC library can be found to build a missing cubin, CuPy compiles the source itself (its own
    NVRTC, the same options), as before cubins existed, with a notice."""
    mod = _modules.get(filename)
    if mod is None:
        try:
            mod = cp.RawModule(path=str(cubins.ensure(filename, arch())))
            _built_for[filename] = cubins.target(filename, arch())
        except cubins.NvrtcNotFound as e:
            print(f"tr2: {e}; CuPy compiles {filename} instead", file=sys.stderr, flush=True)
            mod = cp.RawModule(code=load_source(filename), options=COMPILE_OPTIONS, backend="nvrtc")
            mod.compile()
        _modules[filename] = mod
    return mod


def function(filename: str, name: str):
    key = (filename, name)
    f = _functions.get(key)
    if f is None:
        f = module(filename).get_function(name)
        _functions[key] = f
    return f


def compile_all() -> dict[str, list[str]]:
    """Compile every kernel file and fetch every declared kernel: {file: [kernel names]}."""
    from . import FILE_KERNELS
    out = {}
    for fn in kernel_files():
        module(fn)
        for name in FILE_KERNELS[fn]:
            function(fn, name)
        out[fn] = list(FILE_KERNELS[fn])
    return out


# Dynamic shared memory a kernel may take without opting in; more needs cudaFuncAttributeMaxDynamicSharedMemorySize
# raised (up to 227 KB a block on an H200).
SHARED_WITHOUT_OPT_IN = 48 * 1024
# (file, kernel) -> (dynamic shared bytes it may take, whether it prefers the most shared memory)
_shared_attrs: dict[tuple[str, str], tuple[int, bool]] = {}


def _set_shared_attributes(filename: str, name: str, shared_mem: int, prefer_shared: bool) -> None:
    """Raise a kernel's dynamic shared-memory limit to shared_mem, and ask for the largest shared-memory carveout,
    once each: the first launch of a shape is the warm-up, so the driver calls happen before any graph capture."""
    key = (filename, name)
    limit, preferred = _shared_attrs.get(key, (SHARED_WITHOUT_OPT_IN, False))
    f = function(filename, name)
    if shared_mem > limit:
        f.max_dynamic_shared_size_bytes = int(shared_mem)
        limit = int(shared_mem)
    if prefer_shared and not preferred:
        # The driver may pick any L1/shared split that fits one block; a kernel that wants two big blocks an SM
        # (cross_entropy.cu's shared-memory row) asks for the most shared memory (100: percent of the maximum).
        f.preferred_shared_memory_carveout = 100
        preferred = True
    _shared_attrs[key] = (limit, preferred)


# On: the launches a graph capture records go through gpu/pdl.py (programmatic dependent launch: a kernel's blocks
# are scheduled while the kernel before it finishes, and wait for it in grid_dependency_entry), where the launch
# follows kernel nodes only (pdl.follows_kernels). Eager launches stay CuPy's either way: its launch costs the host
# less, and the graph is the build timed against PyTorch. Its graph tests pass on the H200 (the same bits; 89 of
# nanogpt's 91 captured launches programmatic), but it stays off: the step gained 0.02-0.03 ms on nanogpt (bf16 and
# f16), nothing on gpt2-small and gpt2-medium bf16, and lost 1.5-1.75 ms on gpt2-medium float32 in both of two runs
# (calls 3-6 of results/h200-perf-20261202d). A guess, not measured: every kernel releases its dependents at entry,
# so their blocks sit resident, waiting, beside the kernel before them, and take its SM resources.
PDL = bool(kernel_switch("TR2_PDL", 0))
_capturing = False
# our kernel launches the last capture recorded, and how many of them programmatic (the log says both)
captured = {"kernels": 0, "programmatic": 0}


@contextlib.contextmanager
def capturing():
    """Around a graph capture's body (gpu/graph.py): where PDL is on, the launches inside are programmatic."""
    global _capturing
    before, _capturing = _capturing, True
    captured.update(kernels=0, programmatic=0)
    memsets.begin()
    if memsets.LEAVES:   # the graph's first node: the products' slots zeroed before any of them (gpu/memsets.py)
        from . import blas
        if blas._instance is not None:
            blas._instance.zero_slots()
    try:
        yield
        if memsets.current() is not None:   # the moved memsets' edges read back before the capture ends
            memsets.current().verify()
    finally:
        _capturing = before
        memsets.end()


def is_capturing() -> bool:
    """Inside a graph capture's body (capturing())."""
    return _capturing


def launch(filename: str, name: str, grid, block, args, shared_mem: int = 0, prefer_shared: bool = False) -> None:
    """One launch on CuPy's current stream; shared_mem bytes of dynamic shared memory a block (above 48 KB the
    kernel is opted in here), prefer_shared: the largest shared-memory carveout for this kernel."""
    grid = grid if isinstance(grid, tuple) else (int(grid),)
    block = block if isinstance(block, tuple) else (int(block),)
    if shared_mem > SHARED_WITHOUT_OPT_IN or prefer_shared:
        _set_shared_attributes(filename, name, shared_mem, prefer_shared)
    f = function(filename, name)
    if _capturing:
        captured["kernels"] += 1
        if PDL:
            stream = cp.cuda.get_current_stream().ptr
            if pdl.follows_kernels(stream):
                # a RawModule's function is a RawKernel; its .kernel is the CUfunction CuPy launches
                pdl.launch(f.kernel.ptr, grid, block, args, shared_mem, stream, name)
                captured["programmatic"] += 1
                return
    f(grid, block, args, shared_mem=shared_mem)


@functools.cache
def compute_capability(device: int) -> int:
    """The device's compute capability as an integer (90 on the H100 and H200), asked once."""
    return int(cp.cuda.Device(device).compute_capability)


@functools.cache
def sm_count(device: int) -> int:
    """The device's SMs, asked once (CuPy's attributes query every attribute of the device each time)."""
    return int(cp.cuda.Device(device).attributes["MultiProcessorCount"])


def blocks_for(n: int, threads: int = THREADS, cap: int = MAX_BLOCKS) -> int:
    """Blocks for a grid-stride loop over n elements."""
    return max(1, min(cap, (int(n) + threads - 1) // threads))


def i32(v) -> np.int32:
    return np.int32(v)


def i64(v) -> np.int64:
    return np.int64(v)


def u32(v) -> np.uint32:
    return np.uint32(v)


def u64(v) -> np.uint64:
    return np.uint64(int(v) & 0xFFFFFFFFFFFFFFFF)


def f32(v) -> np.float32:
    return np.float32(v)


NULL = np.uint64(0)  # a null device pointer as a kernel argument (pointers are 8 bytes)


class Workspace:
    """Buffers that live for the whole run, keyed by (name, shape, dtype): allocated once, reused every step.

    Only for scratch whose contents do not outlive the operation that writes them (everything runs on one
    stream, so the next user of a buffer always follows the last reader)."""

    def __init__(self):
        self._buffers: dict[tuple, "cp.ndarray"] = {}

    def get(self, name: str, shape, dtype) -> "cp.ndarray":
        return self._fetch(name, shape, dtype, cp.empty)

    def zeros(self, name: str, shape, dtype) -> "cp.ndarray":
        """As get, zeroed when first allocated and never again: for counters their kernels set back to zero
        themselves (layernorm_backward.cuh's tickets), so the first use, eager before any graph capture, zeroes them."""
        return self._fetch("zeros:" + name, shape, dtype, cp.zeros)

    def _fetch(self, name: str, shape, dtype, allocate) -> "cp.ndarray":
        shape = tuple(int(s) for s in (shape if isinstance(shape, (tuple, list)) else (shape,)))
        key = (name, shape, np.dtype(dtype).str)
        buf = self._buffers.get(key)
        if buf is None:
            buf = allocate(shape, dtype=dtype)
            self._buffers[key] = buf
        return buf

    def nbytes(self) -> int:
        return sum(b.nbytes for b in self._buffers.values())

    def named(self, name: str) -> list:
        """The buffers `get` made under `name`, of any shape (a test or probe reading an operation's scratch)."""
        return [buf for (n, _, _), buf in self._buffers.items() if n == name]

    def clear(self) -> None:
        self._buffers.clear()


def default_pool_array(nbytes: int) -> "cp.ndarray":
    """nbytes of uint8 from CuPy's default pool whatever allocator is in use (the graph's warm-up draws on the
    graph's pool), through the peak tracker's allocator where one is installed, so that the peak counts it."""
    pool = cp.get_default_memory_pool()
    tracker = PeakTracker._installed
    mem = (tracker.malloc_for(pool) if tracker is not None else pool.malloc)(int(nbytes))
    return cp.ndarray((int(nbytes),), dtype=cp.uint8, memptr=mem)


class PeakTracker:
    """Peak bytes in use in CuPy's memory pools (what torch.cuda.max_memory_allocated is on the other side): the
    default pool, through an allocator installed here, and every pool allocated from through `malloc_for` (the CUDA
    graph's); the peak is of their sum, read after each allocation (a replayed graph allocates nothing: its
    capture's allocations are its replays'). Reserved: what the pools hold (torch.cuda.max_memory_reserved); CuPy's
    pools never give memory back unless told, which nothing here does."""

    _installed: "PeakTracker | None" = None

    def __init__(self):
        self.pools = [cp.get_default_memory_pool()]
        self.peak = self.used_bytes()

    @classmethod
    def install(cls) -> "PeakTracker":
        if cls._installed is None:
            tracker = cls()
            cp.cuda.set_allocator(tracker.malloc_for(tracker.pools[0]))
            cls._installed = tracker
        return cls._installed

    def malloc_for(self, pool):
        """An allocator drawing on pool whose bytes in use count toward the peak."""
        if pool not in self.pools:
            self.pools.append(pool)

        def malloc(size):
            mem = pool.malloc(size)
            used = self.used_bytes()
            if used > self.peak:
                self.peak = used
            return mem
        return malloc

    def used_bytes(self) -> int:
        return sum(p.used_bytes() for p in self.pools)

    def reset(self) -> None:
        self.peak = self.used_bytes()

    def peak_bytes(self) -> int:
        return int(max(self.peak, self.used_bytes()))

    def reserved_bytes(self) -> int:
        return int(sum(p.total_bytes() for p in self.pools))
