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
