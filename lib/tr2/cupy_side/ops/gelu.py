"""GELU, the exact (erf) form nanoGPT's nn.GELU() uses: y = x * Phi(x), Phi(x) = (1 + erf(x/sqrt 2)) / 2.

Elementwise, in the activations' type. In the half builds its input is a product's output and its
output only feeds the next product, which rounds it anyway, so nothing here needs rounding.
"""
from __future__ import annotations

import math

import numpy as np

from .special import erf

_SQRT1_2 = 1.0 / math.sqrt(2.0)
_INV_SQRT_2PI = 1.0 / math.sqrt(2.0 * math.pi)


def _cdf(x: np.ndarray) -> np.ndarray:
    dt = x.dtype.type
    return dt(0.5) * (dt(1.0) + erf(x * dt(_SQRT1_2)))


def forward(x: np.ndarray) -> np.ndarray:
    return x * _cdf(x)


def backward(dy: np.ndarray, x: np.ndarray) -> np.ndarray:
    """d/dx [x Phi(x)] = Phi(x) + x phi(x), phi the standard normal density."""
    dt = x.dtype.type
    pdf = np.exp(dt(-0.5) * x * x) * dt(_INV_SQRT_2PI)
    return dy * (_cdf(x) + x * pdf)


# ------------------------------------------------------------------------------ float16 GELU within an ulp
# kernels/gelu.cu's gelu_forward_f16_fast / gelu_backward_f16_fast (TR2_GELU_F16_FAST): the computing kernels'
# float16 outputs within one unit in the last place, by one exponential and one reciprocal an element instead of
# erff (and expf). gelu.cu's header, "Within an ulp", gives the design; here are its constants and its arithmetic.

FAST_Q = np.float32(0.25)                                  # t = 1 / (1 + |x| / 4): 1 + |x| / 4 exact in float32
FAST_K = np.float32(-0.5 / math.log(2.0))                  # -log2(e) / 2
FAST_L = np.float32(-0.5 * math.log2(2.0 * math.pi))       # log2(1 / sqrt(2 pi))
# Q's coefficients c0..c6 (scripts/gelu_fast_fit.py: the least maximum relative error of h over |x| <= 4.5, 4.8e-8 in
# float64 with these float32 values)
FAST_C = np.array([0.24604864418506622, 0.29559558629989624, 0.011425071395933628, 0.79842609167099,
                   -0.764657735824585, 0.9072746634483337, -0.2407982051372528], dtype=np.float32)
_FLT_MIN = 2.0 ** -126


def _fl(v: np.ndarray) -> np.ndarray:
    """One float32 rounding of a float64 value (float32 products are exact in float64, so a product or an fma is
    one rounding here; an fma's float64 sum rounds once before, which moves a float32 result only within 2^-29 of a
    float32 midpoint), with -ftz=true's flush of float32 subnormal results, as float64."""
    with np.errstate(over="ignore"):
        r = np.asarray(v, dtype=np.float64).astype(np.float32).astype(np.float64)
    return np.where(np.abs(r) < _FLT_MIN, np.copysign(0.0, r), r)


def fast_parts(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(phi, e) as the fast kernels form them from float32 x (float16 values), as float64 holding float32 values:
        phi = ex2(fl(fl(x x) K + L))                       the normal density at x
        t   = rcp(fl(|x| q + 1)),   Q = Horner of c6..c0 in t, one fma (one rounding) a step
        e   = fl(0.5 - fl(phi t) Q)                        half of erf(|x| / sqrt 2) = 1/2 - h
    with h = phi t Q ~ 0.5 erfc(|x| / sqrt 2) (relative error 4.8e-8 on |x| <= 4.5). ex2 and rcp (the special-function
    unit's ex2.approx.ftz and rcp.approx.ftz) are taken exact, then rounded to float32: their own error (~2 and ~1
    ulp) is the GPU tests' to bound. e carries 1 + erff's rounding on purpose: float32's grid near 1/2 is the one
    the computing kernel's 1 + erff(x / sqrt 2) lands on, so both round Phi alike (the negative tail cancels there)."""
    x = np.asarray(x, dtype=np.float32).astype(np.float64)
    with np.errstate(over="ignore", invalid="ignore"):
        phi = _fl(np.exp2(_fl(_fl(x * x) * float(FAST_K) + float(FAST_L))))
        t = _fl(1.0 / _fl(np.abs(x) * float(FAST_Q) + 1.0))
        q = np.full_like(x, float(FAST_C[-1]))
        for c in FAST_C[-2::-1]:
            q = _fl(q * t + float(c))
        e = _fl(0.5 - _fl(phi * t) * q)
    return phi, e


def fast_forward(x: np.ndarray) -> np.ndarray:
    """y = fl(|x| e + x / 2) = x Phi(x) (one fma), given x's sign (the kernel sets the float16 sign bit of x on y:
    only a zero of a negative x changes, -0 as gelu() gives it): the fast forward's float32 y before its float16
    rounding, as float64. (The kernel computes from x / 2 and Q at t / 2, bit for bit this times powers of two.)"""
    x64 = np.asarray(x, dtype=np.float32).astype(np.float64)
    _, e = fast_parts(x)
    with np.errstate(invalid="ignore"):
        return np.copysign(_fl(np.abs(x64) * e + 0.5 * x64), x64)


def fast_grad_factor(x: np.ndarray) -> np.ndarray:
    """t = fl(x phi + Phi), Phi = fl(1/2 + sign(x) e): the fast backward's float32 factor (dx = fl(dy t), then float16),
    as float64."""
    x64 = np.asarray(x, dtype=np.float32).astype(np.float64)
    phi, e = fast_parts(x)
    with np.errstate(invalid="ignore"):
        return _fl(x64 * phi + _fl(0.5 + np.copysign(e, x64)))
