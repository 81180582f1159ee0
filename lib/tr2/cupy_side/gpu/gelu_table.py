"""Which bfloat16 codes gelu.cu's table kernels look up, and where: a NumPy transcription of gelu_table_index of
kernels/gelu.cu, with the constants read from the source. Pure NumPy, no GPU: gpu/gelu.py uploads `table_codes()` to
have the computing kernels fill the tables, and the CPU tests check the mapping.

A code's place is the code rotated left by one bit, (exponent << (m + 1)) | (mantissa << 1) | sign for a type of m
mantissa bits (7), less the lowest tabulated exponent shifted alike, in unsigned 32-bit arithmetic: codes below the
range wrap past the table's end, so one compare (index < size) tells a tabulated code: 2^-24 <= |x| < 16.

The functions take the half kind, bfloat16 (halfbits.KIND_BF16) where it is not given, the one kind with tables
(float16's were removed: gelu.cu's header); EXP_LOW, EXP_END and SIZE are bfloat16's.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from . import kernel_define
from .halfbits import KIND_BF16

FILE = "gelu.cu"


@dataclass(frozen=True)
class Spec:
    """One half type's tables: biased exponents exp_low..exp_end-1 of both signs, size codes."""
    name: str
    exp_low: int
    exp_end: int
    size: int
    mantissa_bits: int


SPECS = {
    KIND_BF16: Spec("bfloat16", kernel_define(FILE, "GELU_TABLE_EXP_LOW"), kernel_define(FILE, "GELU_TABLE_EXP_END"),
                    kernel_define(FILE, "GELU_TABLE_SIZE"), 7),
}

EXP_LOW = SPECS[KIND_BF16].exp_low   # biased exponent of 2^-24, the least tabulated bf16 magnitude
EXP_END = SPECS[KIND_BF16].exp_end   # biased exponent of 16, the first one left to the computing path
SIZE = SPECS[KIND_BF16].size


def spec(kind: int) -> Spec:
    try:
        return SPECS[kind]
    except KeyError:
        raise ValueError(f"gelu tables: kind {kind}; tables exist for bfloat16 ({KIND_BF16}) only") from None


def _offset(s: Spec) -> np.uint32:
    return np.uint32(s.exp_low << (s.mantissa_bits + 1))


def table_index(codes, kind: int = KIND_BF16) -> np.ndarray:
    """The device's index of each code (uint16) of that kind, as its uint32: the size or more where not tabulated."""
    s = spec(kind)
    c = np.asarray(codes, dtype=np.uint16).astype(np.uint32)
    return (((c & 0x7FFF) << 1) | (c >> 15)) - _offset(s)


def tabulated(codes, kind: int = KIND_BF16) -> np.ndarray:
    return table_index(codes, kind) < spec(kind).size


def table_codes(kind: int = KIND_BF16) -> np.ndarray:
    """The code at each place of that kind's tables (uint16, its size of them): the inverse of table_index."""
    s = spec(kind)
    place = np.arange(s.size, dtype=np.uint32) + _offset(s)
    return ((place >> 1) | ((place & 1) << 15)).astype(np.uint16)
