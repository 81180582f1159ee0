"""Host-side packing of the half types as 16-bit integers (CuPy has no bfloat16 dtype).

bfloat16 is the top half of a float32, rounded to nearest even; float16 is IEEE binary16 (NumPy's float16,
which rounds to nearest even). These match the kernels' PTX conversions (cvt.rn.bf16.f32, cvt.rn.f16.f32)
and let the tests compare device buffers with NumPy bit for bit. Pure NumPy: no GPU needed.
"""
from __future__ import annotations

import numpy as np

KIND_F32, KIND_BF16, KIND_F16 = 0, 1, 2
KINDS = {"float32": KIND_F32, "bfloat16": KIND_BF16, "float16": KIND_F16}


def f32_to_bf16_bits(x) -> np.ndarray:
    """float32 -> bfloat16 bits (uint16), round to nearest even; NaN stays NaN (quiet), +-inf stays inf."""
    a = np.ascontiguousarray(np.asarray(x, dtype=np.float32))
    u = a.view(np.uint32).astype(np.uint64)
    rounded = (u + 0x7FFF + ((u >> 16) & 1)) >> 16
    out = rounded.astype(np.uint16)
    nan = np.isnan(a)
    if nan.any():
        out[nan] = ((u[nan] >> 16).astype(np.uint16) | np.uint16(0x0040))
    return out


def bf16_bits_to_f32(bits) -> np.ndarray:
    """bfloat16 bits (uint16) -> float32, exactly."""
    b = np.ascontiguousarray(np.asarray(bits, dtype=np.uint16))
    return (b.astype(np.uint32) << 16).view(np.float32)


def f32_to_f16_bits(x) -> np.ndarray:
    return np.asarray(x, dtype=np.float32).astype(np.float16).view(np.uint16)


def f16_bits_to_f32(bits) -> np.ndarray:
    return np.ascontiguousarray(np.asarray(bits, dtype=np.uint16)).view(np.float16).astype(np.float32)


def round_to_bf16(x) -> np.ndarray:
    """float32 values rounded to the nearest bfloat16 (ties to even), as float32."""
    return bf16_bits_to_f32(f32_to_bf16_bits(x)).reshape(np.shape(x))


def round_to_f16(x) -> np.ndarray:
    return np.asarray(x, dtype=np.float32).astype(np.float16).astype(np.float32)


def round_to_kind(x, kind: int) -> np.ndarray:
    if kind == KIND_BF16:
        return round_to_bf16(x)
    if kind == KIND_F16:
        return round_to_f16(x)
    return np.asarray(x, dtype=np.float32)


def to_bits(x, kind: int) -> np.ndarray:
    """float32 -> the 16-bit storage of `kind` (bf16 or fp16)."""
    if kind == KIND_BF16:
        return f32_to_bf16_bits(x).reshape(np.shape(x))
    if kind == KIND_F16:
        return f32_to_f16_bits(x)
    raise ValueError(f"kind {kind} is not a half type (1 bfloat16, 2 float16)")


def from_bits(bits, kind: int) -> np.ndarray:
    if kind == KIND_BF16:
        return bf16_bits_to_f32(bits).reshape(np.shape(bits))
    if kind == KIND_F16:
        return f16_bits_to_f32(bits).reshape(np.shape(bits))
    raise ValueError(f"kind {kind} is not a half type (1 bfloat16, 2 float16)")


def dropout_threshold(p: float, float32_compare: bool = False) -> int:
    """The least 24-bit k with k * 2^-24 >= p: the kernels keep element i when k_i >= this.

    Identical to the generator's float test `u >= p` with u = k * 2^-24: p * 2^24 is exact in float64
    (a power-of-two scaling), so ceil of it is the exact integer bound. With float32_compare the test
    is against float32(p), as a generator comparing in float32 does."""
    import math
    if float32_compare:
        p = float(np.float32(p))
    if p <= 0.0:
        return 0
    if p >= 1.0:
        return 1 << 24
    return int(math.ceil(p * 16777216.0))
