"""Tensor maps for the copy engine (TMA): a row-major half matrix on the device described to the driver
(cuTensorMapEncodeTiled, through ctypes) as 64 x 64 boxes in 128-byte-swizzled shared memory, handed to a kernel as
a `const __grid_constant__ TensorMap` parameter (attention.cu's TMA kernels: the resident forward and dK/dV, the dQ).

The ninth session's probe (scripts/probes/tma_wgmma_probe.py, results/h200-perf-20261201h call 1) settled what this
relies on: the map reaches an NVRTC kernel intact as a 128-byte NumPy void scalar through CuPy's launcher, boxes load
with the 128B swizzle, rows past the matrix's end read as zeros. The map holds the matrix's device address, so a graph
capture bakes it in with the launch (the captured step's buffers keep their addresses).

`tensor_map_args` is pure (tests/test_tma_cpu.py); `encode` needs the driver.
"""
from __future__ import annotations

import ctypes

import numpy as np

BOX = 64   # rows and columns of a box: one head's 64 halves a row, 128 bytes, the 128B swizzle's row
BOX_ROWS_MAX = 256   # cuTensorMapEncodeTiled: every box dimension at most 256 elements

# cuda.h (CUDA 12.0 on): CUtensorMapDataType, CUtensorMapInterleave, CUtensorMapSwizzle, CUtensorMapL2promotion,
# CUtensorMapFloatOOBfill
DATA_TYPE = {"bfloat16": 9, "float16": 6}
INTERLEAVE_NONE = 0
SWIZZLE_128B = 3
L2_PROMOTION_128B = 2
OOB_FILL_ZEROS = 0   # CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE: elements past the end read as zeros


class TmaError(RuntimeError):
    pass


def tensor_map_args(rows: int, cols: int, box_rows: int = BOX, box_cols: int = BOX, elem_bytes: int = 2) -> tuple:
    """(globalDim, globalStrides, boxDim, elementStrides) of a row-major (rows, cols) matrix for a 2-D tiled map of
    box_rows x box_cols boxes: dimensions innermost first, the one stride (of the rows) in bytes, a multiple of 16 as
    the driver requires."""
    if rows < 1:
        raise ValueError(f"tensor map of a ({rows}, {cols}) matrix: at least 1 row")
    stride = cols * elem_bytes
    if stride % 16:
        raise ValueError(f"tensor map: a row of {cols} x {elem_bytes} bytes is not a multiple of 16 bytes")
    if box_cols * elem_bytes > 128:
        raise ValueError("tensor map: a 128B-swizzled box row is at most 128 bytes")
    if not 1 <= box_rows <= BOX_ROWS_MAX:
        raise ValueError(f"tensor map: box_rows {box_rows}; allowed are 1 to {BOX_ROWS_MAX} (the driver's bound)")
    if cols < box_cols:
        raise ValueError(f"tensor map of a ({rows}, {cols}) matrix: at least {box_cols} columns, a box's")
    return (cols, rows), (stride,), (box_cols, box_rows), (1, 1)


def tensor_map_args_3d(planes: int, rows: int, cols: int, elem_bytes: int = 2) -> tuple:
    """The same for a row-major (planes, rows, cols) array read as 64 x 64 boxes of one plane (box dims innermost
    first: BOX columns, BOX rows, 1 plane): rows past a plane's end read as zeros, not as the next plane's first rows
    (attention.cu's dQ by TMA reads dS^T so: [B*H, T, ldq])."""
    if planes < 1:
        raise ValueError(f"tensor map of a ({planes}, {rows}, {cols}) array: at least 1 plane")
    (c, r), (stride,), (bc, br), _ = tensor_map_args(rows, cols, elem_bytes=elem_bytes)
    return (c, r, planes), (stride, stride * rows), (bc, br, 1), (1, 1, 1)


_encode = None


def _driver():
    global _encode
    if _encode is None:
        f = ctypes.CDLL("libcuda.so.1").cuTensorMapEncodeTiled
        f.restype = ctypes.c_int
        f.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_uint32, ctypes.c_void_p, ctypes.POINTER(ctypes.c_uint64),
                      ctypes.POINTER(ctypes.c_uint64), ctypes.POINTER(ctypes.c_uint32), ctypes.POINTER(ctypes.c_uint32),
                      ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_int]
        _encode = f
    return _encode


def encode(matrix, rows: int, cols: int, dtype: str, planes: int = 0, box_rows: int = BOX) -> np.void:
    """The map of the device half matrix `matrix` (rows x cols, row-major, uint16 bits of `dtype`) as the 128-byte
    kernel argument; with `planes`, of a (planes, rows, cols) array read a plane at a time (tensor_map_args_3d);
    `box_rows` rows a box (2-D maps only: in shared memory a box of R rows is R / 64 boxes of 64 one after another)."""
    if dtype not in DATA_TYPE:
        raise ValueError(f"tensor map of {dtype!r}: allowed are {', '.join(DATA_TYPE)}")
    if planes and box_rows != BOX:
        raise ValueError(f"tensor map of {planes} planes: box_rows {box_rows}; a plane map's boxes are {BOX} rows")
    shape = (planes, rows, cols) if planes else (rows, cols)
    if matrix.size != int(np.prod(shape)) or matrix.itemsize != 2 or not matrix.flags.c_contiguous:
        raise ValueError(f"tensor map: a contiguous {shape} array of 2-byte elements, not {matrix.shape} "
                         f"of {matrix.dtype}")
    if matrix.data.ptr % 16:
        raise ValueError("tensor map: the matrix must start on a 16-byte boundary")
    gdim, gstride, box, estride = (tensor_map_args_3d(planes, rows, cols) if planes
                                   else tensor_map_args(rows, cols, box_rows=box_rows))
    n = len(gdim)
    buf = (ctypes.c_uint64 * 24)()   # room to place the 128 bytes on a 64-byte boundary
    at = (ctypes.addressof(buf) + 63) & ~63
    rc = _driver()(ctypes.c_void_p(at), DATA_TYPE[dtype], n, ctypes.c_void_p(matrix.data.ptr),
                   (ctypes.c_uint64 * n)(*gdim), (ctypes.c_uint64 * (n - 1))(*gstride), (ctypes.c_uint32 * n)(*box),
                   (ctypes.c_uint32 * n)(*estride), INTERLEAVE_NONE, SWIZZLE_128B, L2_PROMOTION_128B, OOB_FILL_ZEROS)
    if rc:
        raise TmaError(f"cuTensorMapEncodeTiled of a {shape} {dtype} array: CUresult {rc}")
    return np.frombuffer(ctypes.string_at(at, 128), dtype=np.dtype((np.void, 128)))[0]
