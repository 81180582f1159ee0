"""Which bfloat16 codes gelu.cu's table kernels look up, and where: a NumPy transcription of gelu_table_index
(kernels/gelu.cu), with the constants read from the source. Pure NumPy, no GPU: gpu/gelu.py uploads
`table_codes()` to have the computing kernels fill the tables, and the CPU tests check the mapping.

A code's place is the code rotated left by one bit, (exponent << 8) | (mantissa << 1) | sign, less
EXP_LOW << 8, in unsigned 32-bit arithmetic: codes below 2^-24 wrap past the table's end, so one compare
(index < SIZE) tells a tabulated code, 2^-24 <= |x| < 16.
"""
from __future__ import annotations

import numpy as np

from . import kernel_define

FILE = "gelu.cu"
EXP_LOW = kernel_define(FILE, "GELU_TABLE_EXP_LOW")   # biased exponent of 2^-24, the least tabulated magnitude
EXP_END = kernel_define(FILE, "GELU_TABLE_EXP_END")   # biased exponent of 16, the first one left to the computing path
SIZE = kernel_define(FILE, "GELU_TABLE_SIZE")


def table_index(codes) -> np.ndarray:
    """gelu_table_index of each bf16 code (uint16), as the device's uint32: SIZE or more where not tabulated."""
    c = np.asarray(codes, dtype=np.uint16).astype(np.uint32)
    return (((c & 0x7FFF) << 1) | (c >> 15)) - np.uint32(EXP_LOW << 8)


def tabulated(codes) -> np.ndarray:
    return table_index(codes) < SIZE


def table_codes() -> np.ndarray:
    """The bf16 code at each place of the tables (uint16, SIZE of them): the inverse of table_index."""
    place = np.arange(SIZE, dtype=np.uint32) + np.uint32(EXP_LOW << 8)
    return ((place >> 1) | ((place & 1) << 15)).astype(np.uint16)
