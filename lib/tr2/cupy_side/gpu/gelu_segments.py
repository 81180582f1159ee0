"""float16 GELU by segment (gelu.cu's gelu_forward_f16_seg and gelu_backward_f16_seg): the host side. Pure NumPy, no
GPU: the segments, the cubic fitted on each, the certified error bound of each, the tables in the layout the kernels
read, and a float32 emulation of the kernels' fast path that the CPU tests (tests/test_gelu_segments.py) and the
fallback estimates run. gelu.cu's header gives the algorithm and why its bits are the computing kernels'; this module
computes the numbers that argument needs.

A segment: the float16 codes of one sign, one biased exponent e (EXP_LOW <= e < EXP_END, all normal) and one value of
the top BITS mantissa bits: 2^(10 - BITS) codes, x = x_mid + u, with x_mid the code 2^(9 - BITS) places into the
segment (in float32 bits: x with the mantissa bits below the segment's cleared and the one below them set) and u =
x - x_mid exact in float32. Place: ((code & 0x7FFF) >> (10 - BITS)) - (EXP_LOW << BITS), doubled, plus the sign bit
(unsigned: codes below the range wrap past COUNT, so one compare finds the codes that have no segment).

Per segment, for f = gelu (forward) and f = t = Phi + x phi (backward, dx = dy t), float32 coefficients c0..c3 of a
cubic in u (least squares over the segment's codes in float64, c0 refitted after c1..c3 are rounded) and a bound A
such that, for every code of the segment, |f_a - f_c| <= A, where f_a is the float32 Horner value the kernel computes
(fmaf(fmaf(fmaf(c3, u, c2), u, c1), u, c0), emulated here bit for bit) and f_c is any value the computing kernel
(gelu() / the t inside gelu_grad()) can return. A = MARGIN times the segment's maximum of
    |f_a - f*|                               the fit's error and Horner's roundings, exact (f* in float64)
  + max |f_c - f*| over the enclosure        the computing kernel's error, from the documented library bounds
The enclosure of f_c: the computing kernel's float32 operations replayed exactly around the two library calls, which
are the only inexact steps not determined by their inputs: erff and expf are within ERFF_ULPS / EXPF_ULPS ulp of the
exact value (CUDA C Programming Guide, single-precision functions, 2 ulp each, no fast math), and every later step is
a rounded +, * or fma, monotone in its operands, so the extreme library outputs give the extreme f_c. For t, both the
fused fma(x, pdf, cdf) and the unfused cdf + rn(x pdf) are enclosed (whichever the compiler picked). The kernels are
built with -ftz=true; the emulation flushes float32 subnormal results alike.
"""
from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import numpy as np

from . import kernel_define

FILE = "gelu.cu"

ERFF_ULPS = 2.0   # CUDA's erff: 2 ulp over the whole range (full-precision libdevice form, no fast math)
EXPF_ULPS = 2.0   # CUDA's expf: 2 ulp
MARGIN = 1.25     # on top of the bound, for anything this derivation missed (the GPU tests check every code)

C_INV_SQRT2 = np.float32(0.70710678118654752440)        # gelu.cu's GELU_INV_SQRT2, as NVRTC rounds the literal
C_INV_SQRT_2PI = np.float32(0.39894228040143267794)     # GELU_INV_SQRT_2PI
FLT_MIN = 2.0 ** -126


@dataclass(frozen=True)
class Layout:
    """Segments of both signs over biased f16 exponents exp_low..exp_end-1, 2^bits a binade."""
    exp_low: int
    exp_end: int
    bits: int

    @property
    def per_sign(self) -> int:
        return (self.exp_end - self.exp_low) << self.bits

    @property
    def count(self) -> int:
        return 2 * self.per_sign

    @property
    def codes_per_segment(self) -> int:
        return 1 << (10 - self.bits)

    @property
    def table_floats(self) -> int:
        """One table's float32 entries: count float4 coefficients (c0, c1, c2, c3), then count bounds."""
        return 5 * self.count


LAYOUT = Layout(kernel_define(FILE, "GELU_SEG_EXP_LOW"), kernel_define(FILE, "GELU_SEG_EXP_END"),
                kernel_define(FILE, "GELU_SEG_BITS"))


def segment_index(codes, layout: Layout = LAYOUT) -> np.ndarray:
    """gelu_seg_index of gelu.cu over uint16 codes, as uint32: count or more where the code has no segment."""
    c = np.asarray(codes, dtype=np.uint16).astype(np.uint32)
    with np.errstate(over="ignore"):
        return ((((c & 0x7FFF) >> (10 - layout.bits)) - np.uint32(layout.exp_low << layout.bits)) << 1) | (c >> 15)


def segment_codes(layout: Layout = LAYOUT) -> np.ndarray:
    """(count, codes_per_segment) uint16: the codes of each segment, in order."""
    place = np.arange(layout.count, dtype=np.uint32)
    top = (place >> 1) + np.uint32(layout.exp_low << layout.bits)          # exponent and top mantissa bits
    first = ((place & 1) << 15) | (top << (10 - layout.bits))
    return (first[:, None] + np.arange(layout.codes_per_segment, dtype=np.uint32)[None, :]).astype(np.uint16)


def f16_to_f32(codes) -> np.ndarray:
    return np.ascontiguousarray(np.asarray(codes, dtype=np.uint16)).view(np.float16).astype(np.float32)


def centred(x32, layout: Layout = LAYOUT) -> np.ndarray:
    """u = x - x_mid as the kernel computes it (float32; exact): x_mid = x's float32 bits with the mantissa below the
    segment's bits cleared and the highest of those set."""
    x = np.ascontiguousarray(np.asarray(x32, dtype=np.float32))
    low = 23 - layout.bits                                   # float32 mantissa bits below the segment's
    mid = ((x.view(np.uint32) & np.uint32((0xFFFFFFFF >> low) << low)) | np.uint32(1 << (low - 1))).view(np.float32)
    return (x - mid).astype(np.float32)


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


def add32_directed(a, b, up: bool) -> np.ndarray:
    """__fadd_ru (up) or __fadd_rd of float32 a and b under -ftz (an exact zero is -0 rounding down, +0 up)."""
    a, b = (_ftz(np.asarray(v, dtype=np.float32)).astype(np.float64) for v in (a, b))
    s, err = _two_sum(a, b)
    r = s.astype(np.float32)
    above = err - (r.astype(np.float64) - s)                 # exact value - r, its sign exact
    r = np.where(above > 0 if up else above < 0, np.nextafter(r, np.float32(np.inf if up else -np.inf)), r)
    r = np.where((s == 0) & (err == 0), np.float32(0.0 if up else -0.0), r)
    return _ftz(r.astype(np.float32))


def rn16_bits(x32) -> np.ndarray:
    """cvt.rn.f16.f32: nearest even, subnormals and overflow to inf included."""
    with np.errstate(over="ignore", invalid="ignore"):
        return np.asarray(x32, dtype=np.float32).astype(np.float16).view(np.uint16)


def horner(coef: np.ndarray, u: np.ndarray) -> np.ndarray:
    """The kernel's fmaf(fmaf(fmaf(c3, u, c2), u, c1), u, c0), coef[..., k] = c_k."""
    y = fma32(coef[..., 3], u, coef[..., 2])
    y = fma32(y, u, coef[..., 1])
    return fma32(y, u, coef[..., 0])


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


# ----------------------------------------------------------------------------------------------- fit and bounds

@dataclass(frozen=True)
class SegmentTable:
    """One function's segments: coef (count, 4) float32 c0..c3, bound (count,) float32 A; and, per code of each
    segment (count, codes_per_segment), the pieces of A: fit (|f_a - f*|, Horner's roundings included) and
    computing (max |f_c - f*| over the computing kernel's enclosure)."""
    coef: np.ndarray
    bound: np.ndarray
    fit: np.ndarray
    computing: np.ndarray

    def packed(self) -> np.ndarray:
        """The kernel's layout: count float4 (c0, c1, c2, c3), then count bounds."""
        return np.concatenate([self.coef.reshape(-1), self.bound]).astype(np.float32)


def _fit(x32: np.ndarray, u32: np.ndarray, f: np.ndarray, ulp: np.ndarray) -> np.ndarray:
    """Cubics in u, one a row: least squares in s = u / ulp (integers, well conditioned) weighted by 1 / max |f|, then
    c1..c3 rounded to float32 (flushed where subnormal) and c0 refitted to centre the residual."""
    s = u32.astype(np.float64) / ulp[:, None]
    coef = np.empty((x32.shape[0], 4), np.float64)
    for i in range(x32.shape[0]):
        v = np.vander(s[i], 4, increasing=True)
        coef[i] = np.linalg.lstsq(v, f[i], rcond=None)[0]
    coef /= ulp[:, None] ** np.arange(4)[None, :]
    c = _ftz(coef.astype(np.float32))
    u = u32.astype(np.float64)
    rest = f - (c[:, 1:2] * u + c[:, 2:3] * u ** 2 + c[:, 3:4] * u ** 3)
    c[:, 0] = _ftz(((rest.max(axis=1) + rest.min(axis=1)) / 2).astype(np.float32))
    return c


def _segment_table(fn, computing_range, layout: Layout) -> SegmentTable:
    codes = segment_codes(layout)
    x32 = f16_to_f32(codes).reshape(codes.shape)
    u32 = centred(x32, layout)
    exact = fn(x32.astype(np.float64))
    exponent = ((codes[:, 0] >> 10) & 0x1F).astype(np.float64)
    coef = _fit(x32, u32, exact, np.exp2(exponent - 25.0))
    approx = horner(coef[:, None, :], u32)
    fit = np.abs(approx.astype(np.float64) - exact)
    lo, hi = computing_range(x32)
    computing = np.maximum(np.abs(exact - lo.astype(np.float64)), np.abs(hi.astype(np.float64) - exact))
    a = MARGIN * (fit + computing).max(axis=1)
    bound = a.astype(np.float32)
    bound = np.where(bound.astype(np.float64) < a, np.nextafter(bound, np.float32(np.inf)), bound)   # rounded up
    bound = np.where(np.isfinite(bound), bound, np.float32(np.inf)).astype(np.float32)
    return SegmentTable(coef, bound, fit, computing)


@functools.cache
def forward_table(layout: Layout = LAYOUT) -> SegmentTable:
    return _segment_table(gelu64, computing_forward_range, layout)


@functools.cache
def backward_table(layout: Layout = LAYOUT) -> SegmentTable:
    return _segment_table(grad_factor64, computing_grad_factor_range, layout)


# ------------------------------------------------------------------------------ the kernels' fast path, emulated

def _lookup(codes, table: SegmentTable, layout: Layout):
    """(has a segment, f_a, bound) for each code, as the kernel reads them (the index clamped where out of range)."""
    c = np.asarray(codes, dtype=np.uint16)
    index = segment_index(c, layout)
    inside = index < layout.count
    j = np.minimum(index, layout.count - 1)
    x32 = f16_to_f32(c)
    with np.errstate(invalid="ignore", over="ignore"):
        approx = horner(table.coef[j], centred(x32, layout))
    return inside, approx, table.bound[j]


def forward_fast(codes, layout: Layout = LAYOUT) -> tuple[np.ndarray, np.ndarray]:
    """(y bits, accepted): the fast path's float16 y and whether its certificate holds (where not, the kernel computes
    gelu() as the computing kernel does)."""
    inside, approx, bound = _lookup(codes, forward_table(layout), layout)
    with np.errstate(invalid="ignore", over="ignore"):
        lo = rn16_bits(add32_directed(approx, -bound, up=False))
        hi = rn16_bits(add32_directed(approx, bound, up=True))
    return lo, inside & (lo == hi)


def backward_fast(codes, dy32, layout: Layout = LAYOUT) -> tuple[np.ndarray, np.ndarray]:
    """(dx bits, accepted) for float16 dx, dy as float32 values."""
    inside, approx, bound = _lookup(codes, backward_table(layout), layout)
    dy32 = np.asarray(dy32, dtype=np.float32)
    with np.errstate(invalid="ignore", over="ignore"):
        t_lo = add32_directed(approx, -bound, up=False)
        t_hi = add32_directed(approx, bound, up=True)
        lo, hi = rn16_bits(mul32(dy32, t_lo)), rn16_bits(mul32(dy32, t_hi))
    return lo, inside & (lo == hi)


# ------------------------------------------------------------------------------------------ fallback estimates

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


@dataclass(frozen=True)
class Fallbacks:
    """For x ~ N(0, scale^2): the fraction of elements the fast path hands to the computing path; of warp iterations
    (32 lanes x 8 elements) with at least one; and the expected element slots (of a lane's 8) the warp computes
    (the kernel's fallback is an unrolled if per slot, taken by the warp where any lane needs that slot)."""
    scale: float
    element: float
    warp_iteration: float
    slots: float


def _fallbacks(scale: float, p: float) -> Fallbacks:
    return Fallbacks(scale, p, 1.0 - (1.0 - p) ** 256, 8.0 * (1.0 - (1.0 - p) ** 32))


def forward_fallbacks(scale: float, layout: Layout = LAYOUT) -> Fallbacks:
    every = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16)
    _, accepted = forward_fast(every, layout)
    return _fallbacks(scale, float(code_probabilities(scale)[~accepted].sum()))


def backward_fallbacks(scale: float, samples: int = 1 << 21, seed: int = 0, layout: Layout = LAYOUT) -> Fallbacks:
    """x ~ N(0, scale^2) and dy ~ N(0, 1) (both rounded to float16), sampled: the certificate depends on dy too."""
    g = np.random.default_rng(seed)
    x = rn16_bits(g.standard_normal(samples).astype(np.float32) * np.float32(scale))
    dy = f16_to_f32(rn16_bits(g.standard_normal(samples).astype(np.float32)))
    _, accepted = backward_fast(x, dy, layout)
    return _fallbacks(scale, float(1.0 - accepted.mean()))
