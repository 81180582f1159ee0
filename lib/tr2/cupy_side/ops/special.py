"""erf for NumPy arrays (NumPy has none, and the cupy side does not lean on SciPy or torch for it).

Piecewise polynomials, fitted once at import as Chebyshev interpolants of the C library's erf/erfc
(Python's math module) and kept as plain coefficients in a scaled variable t in [-1, 1]:

- |x| < 2: erf(x) = x * P(x^2). erf(x)/x is entire and even, so one polynomial in x^2 covers the
  interval and keeps full relative accuracy near 0.
- 2 <= |x| < 6: erf(x) = 1 - exp(-x^2) * G(|x|), G = erfc * exp(x^2) (smooth, between 0.09 and 0.26),
  two pieces [2, 4) and [4, 6).
- |x| >= 6: erf(x) = +-1 (erfc(6) = 2e-17 is below float64's resolution at 1).

Each dtype gets its own degrees: float64 keeps the Chebyshev terms down to about 1e-17 (the samples'
own rounding is about 1e-16, more terms would only fit noise), float32 down to about 1e-9. Measured
against math.erf on [-8, 8]: float64 within 2e-15 (worst near |x| = 2, where the polynomial's
alternating terms cost a few ulps; torch's own erf is also an approximation at that level), float32
within 2e-7 (its arithmetic dominates). tests/test_ops_numpy.py checks both.
"""
from __future__ import annotations

import math

import numpy as np
from numpy.polynomial import chebyshev

_erf = np.frompyfunc(math.erf, 1, 1)
_erfc = np.frompyfunc(math.erfc, 1, 1)

# Degrees of the three pieces (small, mid, large), read off the Chebyshev coefficients' decay.
_DEGREES = {np.dtype(np.float64): (18, 18, 16), np.dtype(np.float32): (10, 9, 8)}
_NODES = 64


def _fit(f, lo: float, hi: float, degree: int) -> np.ndarray:
    """Monomial coefficients (low to high) in t = (u - mid)/half of f's Chebyshev series on [lo, hi], cut at degree.

    The Chebyshev coefficients come from f at 64 Chebyshev nodes by the cosine sum (numpy's
    chebinterpolate adds about 1e-15 of noise to them, too much here).
    """
    mid, half = 0.5 * (lo + hi), 0.5 * (hi - lo)
    j = np.arange(_NODES)
    values = f(mid + half * np.cos(np.pi * (2 * j + 1) / (2 * _NODES))).astype(np.float64)
    # cos(k * theta_j) with the angle reduced exactly in integers: k * theta_j in floating point would
    # carry k times theta's rounding into the cosine.
    k = np.arange(degree + 1)[:, None]
    angle = (k * (2 * j[None, :] + 1)) % (4 * _NODES)
    c = (2.0 / _NODES) * (np.cos(np.pi * angle / (2 * _NODES)) @ values)
    c[0] *= 0.5
    # In t on [-1, 1] the monomial coefficients stay below 1 in size, so Horner's rounding stays small.
    return chebyshev.cheb2poly(c)


def _scaled_erfc(a):
    return _erfc(a) * np.exp(a.astype(np.float64) ** 2)


class _Pieces:
    def __init__(self, dtype):
        d_small, d_mid, d_large = _DEGREES[dtype]
        # u = x^2 on [0, 4] (the Chebyshev nodes are interior, so a = sqrt(u) > 0 there).
        self.small = _fit(lambda u: _erf(np.sqrt(u)) / np.sqrt(u), 0.0, 4.0, d_small).astype(dtype)
        self.mid = _fit(_scaled_erfc, 2.0, 4.0, d_mid).astype(dtype)
        self.large = _fit(_scaled_erfc, 4.0, 6.0, d_large).astype(dtype)


_pieces: dict = {}


def _horner(coef: np.ndarray, t: np.ndarray) -> np.ndarray:
    acc = np.full_like(t, coef[-1])
    for c in coef[-2::-1]:
        acc *= t
        acc += c
    return acc


def erf(x) -> np.ndarray:
    """The error function of a float32 or float64 array, elementwise, in that dtype."""
    x = np.asarray(x)
    if x.dtype not in _DEGREES:
        x = x.astype(np.float64)
    if x.dtype not in _pieces:
        _pieces[x.dtype] = _Pieces(x.dtype)
    pieces = _pieces[x.dtype]
    dt = x.dtype.type

    # Most inputs are small: evaluate the |x| < 2 polynomial on everything (clamped so that large
    # values give finite garbage), then overwrite the few large ones.
    u = np.minimum(x * x, dt(4.0))
    out = x * _horner(pieces.small, u * dt(0.5) - dt(1.0))
    big = np.abs(x) >= 2.0
    if np.count_nonzero(big):
        xb = x[big]
        a = np.abs(xb)
        tail = np.zeros_like(a)  # erfc(|x|): 0 from 6 on (and for inf)
        for coef, lo, hi in ((pieces.mid, 2.0, 4.0), (pieces.large, 4.0, 6.0)):
            sel = (a >= lo) & (a < hi)
            if np.count_nonzero(sel):
                ab = a[sel]
                tail[sel] = np.exp(-ab * ab) * _horner(coef, ab - dt(0.5 * (lo + hi)))
        out[big] = np.copysign(dt(1.0) - tail, xb)
    return out
