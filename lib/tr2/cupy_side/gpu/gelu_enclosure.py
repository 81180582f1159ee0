"""gelu.cu's computing kernels (gelu() and the t inside gelu_grad()) on the host: their float32 arithmetic emulated
exactly, the exact functions in float64, and every value they can return under CUDA's documented error bounds for
erff and expf. Pure NumPy, no GPU: the oracle tests/test_gelu_fast.py checks the float16 kernels within an ulp against
(the CPU half of their promise; the device's own values are tests/test_kernels_gpu.py's).

The enclosure of a computing value f_c: the kernel's float32 operations replayed exactly around the two library calls,
which are the only inexact steps not determined by their inputs: erff and expf are within ERFF_ULPS / EXPF_ULPS ulp
of the exact value (CUDA C Programming Guide, single-precision functions, 2 ulp each, no fast math), and every later
step is a rounded +, * or fma, monotone in its operands, so the extreme library outputs give the extreme f_c. For t,
both the fused fma(x, pdf, cdf) and the unfused cdf + rn(x pdf) are enclosed (whichever the compiler picked). The
kernels are built with -ftz=true; the emulation flushes float32 subnormal results alike.

(Kept from gpu/gelu_segments.py, the host side of float16 GELU by segment, when that form was removed: gelu.cu's
header.)
"""
from __future__ import annotations

import math

import numpy as np

ERFF_ULPS = 2.0   # CUDA's erff: 2 ulp over the whole range (full-precision libdevice form, no fast math)
EXPF_ULPS = 2.0   # CUDA's expf: 2 ulp

C_INV_SQRT2 = np.float32(0.70710678118654752440)        # gelu.cu's GELU_INV_SQRT2, as NVRTC rounds the literal
C_INV_SQRT_2PI = np.float32(0.39894228040143267794)     # GELU_INV_SQRT_2PI
FLT_MIN = 2.0 ** -126


def f16_to_f32(codes) -> np.ndarray:
    return np.ascontiguousarray(np.asarray(codes, dtype=np.uint16)).view(np.float16).astype(np.float32)


# ------------------------------------------------------------------------------------- exact float32 arithmetic

def _ftz(r: np.ndarray) -> np.ndarray:
    """-ftz=true: a float32 subnormal result becomes a zero of its sign."""
    return np.where(np.abs(r) < FLT_MIN, np.copysign(np.float32(0), r), r).astype(np.float32)


def _two_sum(a: np.ndarray, b: np.ndarray):
    s = a + b
    bb = s - a
    return s, (a - (s - bb)) + (b - bb)


def fma32(a, b, c) -> np.ndarray:
    """fmaf(a, b, c) under -ftz: a b exact in float64, the sum rounded to odd in float64 (TwoSum's error decides the
    last bit), then to nearest float32: one correct rounding (53 >= 2 x 24 + 2 bits)."""
    a, b, c = (_ftz(np.asarray(v, dtype=np.float32)).astype(np.float64) for v in (a, b, c))
    s, err = _two_sum(a * b, c)
    even = (s.view(np.int64) & 1) == 0
    s = np.where((err != 0) & even, np.nextafter(s, np.where(err > 0, np.inf, -np.inf)), s)
    with np.errstate(over="ignore"):       # past float32's range: inf, as the device rounds
        return _ftz(s.astype(np.float32))


def mul32(a, b) -> np.ndarray:
    return fma32(a, b, np.zeros(np.shape(a), np.float32))


def add32(a, b) -> np.ndarray:
    return fma32(a, np.ones(np.shape(a), np.float32), b)


def rn16_bits(x32) -> np.ndarray:
    """cvt.rn.f16.f32: nearest even, subnormals and overflow to inf included."""
    with np.errstate(over="ignore", invalid="ignore"):
        return np.asarray(x32, dtype=np.float32).astype(np.float16).view(np.uint16)


# ------------------------------------------------------------------------------------------- the exact functions

_erf = np.frompyfunc(math.erf, 1, 1)
_erfc = np.frompyfunc(math.erfc, 1, 1)


def erf64(z) -> np.ndarray:
    return np.asarray(_erf(np.asarray(z, dtype=np.float64)), dtype=np.float64)


def cdf64(x) -> np.ndarray:
    """Phi(x), from erfc so that the negative tail keeps its relative precision."""
    return 0.5 * np.asarray(_erfc(-np.asarray(x, dtype=np.float64) / math.sqrt(2.0)), dtype=np.float64)


def pdf64(x) -> np.ndarray:
    x = np.asarray(x, dtype=np.float64)
    return np.exp(-0.5 * x * x) / math.sqrt(2.0 * math.pi)


def gelu64(x) -> np.ndarray:
    return np.asarray(x, dtype=np.float64) * cdf64(x)


def grad_factor64(x) -> np.ndarray:
    """t(x) = Phi(x) + x phi(x): dx = dy t."""
    x = np.asarray(x, dtype=np.float64)
    return cdf64(x) + x * pdf64(x)


# ------------------------------------------------------------------------- the computing kernel's possible outputs

def _library_range(exact: np.ndarray, ulps: float, flushable: bool = False):
    """The float32 values a library function within `ulps` ulp of `exact` can return: [lo, hi]. The ulp is the one
    of exact's binade, or of the binade above where exact lies within 2^-21 of it (a result past the power of two
    counts its own, larger, ulp); float64's own error (< 1e-15 relative) is covered by widening by 2^-30. flushable:
    results below FLT_MIN may come back as 0 (-ftz)."""
    mag = np.abs(exact) * (1.0 + 2.0 ** -21)
    with np.errstate(divide="ignore"):
        e = np.floor(np.log2(np.maximum(mag, 2.0 ** -149)))
    d = ulps * np.exp2(np.maximum(e, -126.0) - 23.0) * (1.0 + 2.0 ** -30)
    lo_t, hi_t = exact - d, exact + d
    lo, hi = lo_t.astype(np.float32), hi_t.astype(np.float32)
    lo = np.where(lo.astype(np.float64) < lo_t, np.nextafter(lo, np.float32(np.inf)), lo)   # least float32 >= lo_t
    hi = np.where(hi.astype(np.float64) > hi_t, np.nextafter(hi, np.float32(-np.inf)), hi)  # greatest <= hi_t
    if flushable:
        lo = np.where(lo < FLT_MIN, np.minimum(lo, np.float32(0)), lo)
    return lo.astype(np.float32), hi.astype(np.float32)


def _erff_range(x32: np.ndarray):
    """erff(x * GELU_INV_SQRT2)'s possible values (the product is exact to replay: one float32 rounding)."""
    z = mul32(x32, np.full(x32.shape, C_INV_SQRT2))
    return _library_range(erf64(z), ERFF_ULPS)


def computing_forward_range(x32) -> tuple[np.ndarray, np.ndarray]:
    """[lo, hi] holding every float32 gelu() of gelu.cu can return for x: 0.5f * x * (1.0f + erff(x / sqrt 2))."""
    x32 = np.asarray(x32, dtype=np.float32)
    e_lo, e_hi = _erff_range(x32)
    half = (np.float32(0.5) * x32).astype(np.float32)         # exact
    one = np.ones(x32.shape, np.float32)
    y_at = [mul32(half, add32(one, e)) for e in (e_lo, e_hi)]  # monotone in e, increasing where x > 0
    return np.minimum(*y_at), np.maximum(*y_at)


def computing_grad_factor_range(x32) -> tuple[np.ndarray, np.ndarray]:
    """[lo, hi] holding every float32 t = cdf + x pdf that gelu_grad() of gelu.cu can multiply dy by, fused or not:
    cdf = 0.5f * (1.0f + erff(x / sqrt 2)), pdf = expf(-0.5f * x * x) * GELU_INV_SQRT_2PI."""
    x32 = np.asarray(x32, dtype=np.float32)
    one = np.ones(x32.shape, np.float32)
    e_lo, e_hi = _erff_range(x32)
    cdf = [mul32(np.full(x32.shape, np.float32(0.5)), add32(one, e)) for e in (e_lo, e_hi)]
    q = mul32((np.float32(-0.5) * x32).astype(np.float32), x32)
    w_lo, w_hi = _library_range(np.exp(q.astype(np.float64)), EXPF_ULPS, flushable=True)
    pdf = [mul32(w, np.full(x32.shape, C_INV_SQRT_2PI)) for w in (w_lo, w_hi)]
    neg = x32 < 0
    # t rises with cdf, and with pdf where x > 0 (falls where x < 0): the corners
    low = (cdf[0], np.where(neg, pdf[1], pdf[0]))
    high = (cdf[1], np.where(neg, pdf[0], pdf[1]))
    t = {}
    for name, (c, p) in (("low", low), ("high", high)):
        t[name] = (fma32(x32, p, c), add32(c, mul32(x32, p)))
    return np.minimum(*t["low"]), np.maximum(*t["high"])


# --------------------------------------------------------------------------------------------- activation codes

def code_probabilities(scale: float) -> np.ndarray:
    """P(rn16(x) = code) for x ~ N(0, scale^2), every one of the 65536 codes (the finite ones; zero and both signs
    of it from the interval around 0)."""
    codes = np.arange(1 << 15, dtype=np.uint32).astype(np.uint16)       # the non-negative codes, 0 .. inf, NaNs
    v = f16_to_f32(codes[:0x7C00]).astype(np.float64)                    # 0 .. 65504
    edges = np.concatenate([[0.0], (v[:-1] + v[1:]) / 2, [np.inf]])
    phi = np.frompyfunc(lambda t: 0.5 * math.erfc(-t / (scale * math.sqrt(2.0))), 1, 1)
    cdf = phi(edges).astype(np.float64)
    p = np.zeros(1 << 16)
    p[:0x7C00] = cdf[1:] - cdf[:-1]                                      # positive side (0 takes [0, ulp/2))
    p[0x8000:0x8000 + 0x7C00] = p[:0x7C00]
    return p / p.sum()
