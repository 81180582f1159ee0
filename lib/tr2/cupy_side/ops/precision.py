"""Element types of the products, emulated in NumPy: rounding helpers and the per-build rounding policy.

The GPU build reads the inputs of every matrix product in a narrower type (TF32 on the tensor cores for
float32, bfloat16 or float16 for the half builds) and accumulates in float32. The NumPy form reproduces
that by rounding the product's inputs to the narrow type (round to nearest, ties to even) and keeping
them in float32 arrays: float32 holds every bf16, fp16 and TF32 value exactly, and the products then
accumulate in float32 as on the card. Only the accumulation order differs.

`Precision` is what an op receives: three roundings, each the identity where the build does not round.
- `operand`: a product's inputs from outside the op (activations, weights, incoming gradients).
- `internal`: operands an op makes for itself inside a fused kernel, i.e. attention's probabilities
  and their gradient. A flash-attention kernel on tensor cores must convert them for the mma; our
  half builds keep them float32 unless `half_roundings` (what FlashAttention does in PyTorch); under
  TF32 every tensor-core operand is TF32, so they are rounded like `operand`.
- `output`: a product's result. float32 always, except that `half_roundings` rounds it to the half
  type (PyTorch's autocast hands on half tensors; cuBLAS reduces in the half type).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

_KEEP_BF16 = np.uint32(0xFFFF0000)  # bfloat16 is the upper 16 bits of a float32 (7 explicit mantissa bits)
_KEEP_TF32 = np.uint32(0xFFFFE000)  # TF32 keeps 10 of float32's 23 mantissa bits: 13 bits dropped


def _round_mantissa(x, dropped_bits: int, keep_mask: np.uint32) -> np.ndarray:
    """Round float32 values to fewer mantissa bits, nearest with ties to even, on the bit pattern.

    Adding half an ulp of the narrow type minus one, plus the lowest kept bit, carries exactly when the
    dropped part is above half, or equal to half with an odd kept part. A carry into the exponent is
    right (it is the next binade, or infinity past the largest finite value).
    """
    x32 = np.asarray(x, dtype=np.float32)
    shape = x32.shape
    x32 = x32.reshape(-1)  # 1-d, so that 0-d inputs index like the rest
    out = _round_mantissa_bits(x32.view(np.uint32), dropped_bits, keep_mask).view(np.float32)
    # A NaN's payload can carry into the exponent or wrap around; keep NaN as NaN.
    nan = np.isnan(x32)
    if nan.any():
        out[nan] = x32[nan]
    return out.reshape(shape)


def _round_mantissa_bits(bits: np.ndarray, dropped_bits: int, keep_mask: np.uint32) -> np.ndarray:
    """The rounding on float32 bit patterns (uint32), NaN's payload carried like any other bits."""
    out = bits >> np.uint32(dropped_bits)       # the lowest kept bit ...
    out &= np.uint32(1)
    out += np.uint32((1 << (dropped_bits - 1)) - 1)  # ... plus half an ulp minus one
    out += bits
    out &= keep_mask
    return out


def tf32_formula_bits(bits) -> np.ndarray:
    """attention.cu's tf32_rne_formula on float32 bit patterns (uint32 in, uint32 out): round_to_tf32 where the input
    is not NaN; a NaN's payload may carry into the exponent and the sign (0x7FFFFFFF gives -0.0), where round_to_tf32
    keeps NaN. What tf32_round_check's count of NaN patterns the formula loses is held to (tests/test_kernels_gpu.py)."""
    return _round_mantissa_bits(np.asarray(bits, dtype=np.uint32), 13, _KEEP_TF32)


def round_to_bf16(x) -> np.ndarray:
    """Values rounded to bfloat16 (RNE), returned as float32 (what torch's .to(torch.bfloat16) keeps)."""
    return _round_mantissa(x, 16, _KEEP_BF16)


def round_to_tf32(x) -> np.ndarray:
    """Values rounded to TF32 (float32's range, 10 mantissa bits, RNE), returned as float32."""
    return _round_mantissa(x, 13, _KEEP_TF32)


def round_to_fp16(x) -> np.ndarray:
    """Values rounded to IEEE float16 (RNE, overflow to inf, subnormals), returned as float32."""
    # NumPy's float32 -> float16 cast rounds to nearest even, including the subnormal range.
    with np.errstate(over="ignore"):
        return np.asarray(x, dtype=np.float32).astype(np.float16).astype(np.float32)


def _identity(x):
    return x


@dataclass(frozen=True)
class Precision:
    """How one build rounds products: see the module docstring. `dtype` is the arrays' element type."""
    name: str
    dtype: type
    operand: Callable = _identity
    internal: Callable = _identity
    output: Callable = _identity


# No rounding at all: the float64 reference, and what the ops use when called without a precision.
EXACT = Precision("float64", np.float64)

DTYPES = ("float64", "float32", "bfloat16", "float16")
_HALF_ROUND = {"bfloat16": round_to_bf16, "float16": round_to_fp16}


def make_precision(dtype: str, tf32: bool = True, half_roundings: bool = False) -> Precision:
    """The rounding policy of one build (architecture.md, "Element types")."""
    if dtype == "float64":
        return EXACT
    if dtype == "float32":
        # half_roundings has no meaning in float32 (the trainer refuses it); TF32 rounds every operand.
        if tf32:
            return Precision("float32+tf32", np.float32, round_to_tf32, round_to_tf32, _identity)
        return Precision("float32", np.float32)
    if dtype in _HALF_ROUND:
        half = _HALF_ROUND[dtype]
        if half_roundings:
            return Precision(dtype + "+half_roundings", np.float32, half, half, half)
        return Precision(dtype, np.float32, half, _identity, _identity)
    raise ValueError(f"dtype: {dtype!r}; allowed: {', '.join(DTYPES)}")
