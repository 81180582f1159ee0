"""Programmatic dependent launch (PDL): our kernels launched through the driver's cuLaunchKernelEx with
CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION, for the launches a graph capture records (runtime.launch,
TR2_PDL=1).

Why: in the captured step each kernel's blocks are scheduled only once the kernel before it has finished and
drained. Call 2 of results/h200-perf-20261202c: the char model's step is 4.28 ms for 4120 us of kernels in 215
launches (~0.75 us between kernels); gpt2-small's was 16.84 ms for 15992 us in 385 launches (~2.2 us; call 2 of
results/h200-perf-20261202). With the attribute a kernel may be scheduled as soon as every block of the kernel before
it has passed its griddepcontrol.launch_dependents; its blocks then wait at griddepcontrol.wait until that kernel has
finished and its writes are visible (common.cuh's grid_dependency_entry, every kernel's first statement). So the
launch and the block scheduling overlap the previous kernel's last wave, and no kernel reads or writes early: the
same arithmetic on the same inputs, the same bits. Only a launch that follows kernel nodes in the capture is made
programmatic (`follows_kernels`); after a copy or a memset it goes the plain way.

Pure ctypes and NumPy (no CuPy import): the structures and the argument packing are checked on the CPU
(tests/test_pdl.py); the launches on the GPU (tests/test_graph_gpu.py with TR2_PDL=1: the graph equals the eager loop
to the bit).
"""
from __future__ import annotations

import ctypes
import struct

import numpy as np

# cuda.h: CUlaunchAttributeID
CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION = 6


class LaunchAttribute(ctypes.Structure):
    """CUlaunchAttribute: the id, padding to 8 bytes, then the 64-byte union CUlaunchAttributeValue."""
    _fields_ = [("id", ctypes.c_int), ("pad", ctypes.c_char * 4), ("value", ctypes.c_char * 64)]


class LaunchConfig(ctypes.Structure):
    """CUlaunchConfig."""
    _fields_ = [("gridDimX", ctypes.c_uint), ("gridDimY", ctypes.c_uint), ("gridDimZ", ctypes.c_uint),
                ("blockDimX", ctypes.c_uint), ("blockDimY", ctypes.c_uint), ("blockDimZ", ctypes.c_uint),
                ("sharedMemBytes", ctypes.c_uint), ("hStream", ctypes.c_void_p),
                ("attrs", ctypes.POINTER(LaunchAttribute)), ("numAttrs", ctypes.c_uint)]


class PdlError(RuntimeError):
    pass


def programmatic_attribute() -> LaunchAttribute:
    """The one attribute every launch here carries: programmaticStreamSerializationAllowed = 1."""
    attr = LaunchAttribute()
    attr.id = CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION
    attr.value = struct.pack("<i", 1).ljust(64, b"\0")
    return attr


def dims(d) -> tuple[int, int, int]:
    """A grid or block as runtime.launch takes it (an int or a tuple of up to three) as (x, y, z)."""
    d = tuple(int(v) for v in (d if isinstance(d, tuple) else (d,)))
    if not 1 <= len(d) <= 3 or min(d) < 1:
        raise ValueError(f"pdl: a grid or block of {d}: allowed are one to three positive sizes")
    return d + (1,) * (3 - len(d))


def argument_bytes(args) -> list[np.ndarray]:
    """Each kernel argument as the bytes the kernel reads (a 0-d NumPy array holding them): a device array as its
    8-byte pointer, a NumPy scalar as its own bytes. Anything else is refused, as its size would be a guess (a
    Python int: 4 bytes or 8?); the wrappers pass np.int32, np.uint64, np.float32 ... (runtime.i32 and friends)."""
    held = []
    for i, a in enumerate(args):
        if isinstance(a, np.generic):
            held.append(np.array(a))
        elif hasattr(a, "data") and hasattr(a.data, "ptr"):   # a CuPy array
            held.append(np.array(a.data.ptr, dtype=np.uint64))
        else:
            raise TypeError(f"pdl: kernel argument {i} is a {type(a).__name__}; allowed are a CuPy array (passed as "
                            f"its device pointer) or a NumPy scalar (np.int32, np.uint64, np.float32 ...)")
    return held


# cuda.h: CUgraphNodeType's kernel node
CU_GRAPH_NODE_TYPE_KERNEL = 0

_cuda = None


def _driver():
    """libcuda's four entry points used here, typed once."""
    global _cuda
    if _cuda is None:
        cuda = ctypes.CDLL("libcuda.so.1")
        cuda.cuLaunchKernelEx.restype = ctypes.c_int
        cuda.cuLaunchKernelEx.argtypes = [ctypes.POINTER(LaunchConfig), ctypes.c_void_p,
                                          ctypes.POINTER(ctypes.c_void_p), ctypes.c_void_p]
        cuda.cuGetErrorName.restype = ctypes.c_int
        cuda.cuGetErrorName.argtypes = [ctypes.c_int, ctypes.POINTER(ctypes.c_char_p)]
        # the CUDA 11.3 form of the query (stream, status, id, graph, dependencies, their count): kept by the driver
        # under this name whatever toolkit the process was built with
        cuda.cuStreamGetCaptureInfo_v2.restype = ctypes.c_int
        cuda.cuStreamGetCaptureInfo_v2.argtypes = [
            ctypes.c_void_p, ctypes.POINTER(ctypes.c_int), ctypes.POINTER(ctypes.c_ulonglong),
            ctypes.POINTER(ctypes.c_void_p), ctypes.POINTER(ctypes.POINTER(ctypes.c_void_p)),
            ctypes.POINTER(ctypes.c_size_t)]
        cuda.cuGraphNodeGetType.restype = ctypes.c_int
        cuda.cuGraphNodeGetType.argtypes = [ctypes.c_void_p, ctypes.POINTER(ctypes.c_int)]
        _cuda = cuda
    return _cuda


def _check(rc: int, what: str) -> None:
    if rc != 0:
        text = ctypes.c_char_p()
        _driver().cuGetErrorName(rc, ctypes.byref(text))
        raise PdlError(f"{what}: {(text.value or b'?').decode()} ({rc})")


def follows_kernels(stream_ptr: int) -> bool:
    """Whether the next launch into the capturing stream would follow kernel nodes only (and at least one). A
    programmatic edge is a kernel-to-kernel edge; after a copy, a memset or nothing, runtime.launch launches the plain
    way rather than find out at capture whether the driver accepts it."""
    cuda = _driver()
    status, capture_id, graph = ctypes.c_int(), ctypes.c_ulonglong(), ctypes.c_void_p()
    deps, count = ctypes.POINTER(ctypes.c_void_p)(), ctypes.c_size_t()
    _check(cuda.cuStreamGetCaptureInfo_v2(ctypes.c_void_p(stream_ptr or None), ctypes.byref(status),
                                          ctypes.byref(capture_id), ctypes.byref(graph), ctypes.byref(deps),
                                          ctypes.byref(count)), "cuStreamGetCaptureInfo")
    if count.value == 0:
        return False
    kind = ctypes.c_int()
    for i in range(count.value):
        _check(cuda.cuGraphNodeGetType(ctypes.c_void_p(deps[i]), ctypes.byref(kind)), "cuGraphNodeGetType")
        if kind.value != CU_GRAPH_NODE_TYPE_KERNEL:
            return False
    return True


def launch(function_ptr: int, grid, block, args, shared_mem: int, stream_ptr: int, name: str = "") -> None:
    """One launch of the CUfunction function_ptr on stream stream_ptr with the programmatic attribute."""
    attr = programmatic_attribute()
    config = LaunchConfig(*dims(grid), *dims(block), int(shared_mem), ctypes.c_void_p(stream_ptr or None),
                          ctypes.pointer(attr), 1)
    held = argument_bytes(args)
    params = (ctypes.c_void_p * max(1, len(held)))(*[h.ctypes.data for h in held])
    _check(_driver().cuLaunchKernelEx(ctypes.byref(config), ctypes.c_void_p(function_ptr), params, None),
           f"cuLaunchKernelEx of {name or hex(function_ptr)} (programmatic)")
