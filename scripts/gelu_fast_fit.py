"""The fit behind float16 GELU within an ulp (kernels/gelu.cu's gelu_forward_f16_fast / gelu_backward_f16_fast,
TR2_GELU_F16_FAST; the NumPy form is ops/gelu.py's fast_* functions): half the complementary error function of
a = |x| / sqrt 2 as the kernels form it,

    h(a) = 0.5 erfc(a / sqrt 2) = phi(a) t Q(t),   t = 1 / (1 + q a),   phi(a) = 2^(a^2 K + L),

K and L the float32 constants the kernels use (-log2(e) / 2 and log2(1 / sqrt(2 pi)), so that phi is the normal
density up to their rounding, which the fit absorbs), Q a polynomial of degree m in t. Q is fitted in float64 for the
least maximum RELATIVE error of h over a in [0, A_MAX] (Lawson's iteratively reweighted least squares on a dense
grid: a minimax fit), for each degree over a grid of q; then, for the kernels' choice (degree 6, q = 1/4: exact in
float32, so that 1 + q a is exact for every float16 |x| >= 2^-11), the coefficients rounded to float32 one at a time,
highest first, each rounding followed by a refit of the lower ones.

    PYTHONPATH=lib .venv/bin/python scripts/gelu_fast_fit.py [--table]

Prints the chosen coefficients (what ops/gelu.py's FAST_C and gelu.cu's GELU_FAST_C0..C6 hold) and their maximum
relative error in float64; --table adds the degree-against-error table docs/perf.md quotes (a few minutes).
"""
from __future__ import annotations

import math
import sys

import numpy as np

from tr2.cupy_side.ops import gelu

A_MAX = 4.5          # the fast paths take x >= -4.2 and every x >= 0 (beyond, h only needs to stay tiny)
POINTS = 3001


def target(a: np.ndarray, q: float) -> np.ndarray:
    """Q's exact values on the grid: h(a) / (phi32(a) t), phi32 with the kernels' float32 K and L (exact in float64:
    a^2 K is a 22 x 24-bit product)."""
    erfc = np.array([math.erfc(v / math.sqrt(2.0)) for v in a])
    phi = np.exp2(a * a * float(gelu.FAST_K) + float(gelu.FAST_L))
    return 0.5 * erfc * (1.0 + q * a) / phi


def lawson(t: np.ndarray, f: np.ndarray, m: int, iterations: int, fixed: np.ndarray | None = None):
    """Coefficients c_0..c_m (low first) of the least maximum relative error |sum c_k t^k / f - 1|; fixed: the top
    coefficients already chosen (held, the rest fitted). Returns (max relative error, coefficients)."""
    top = np.zeros(0) if fixed is None else fixed
    free = m + 1 - top.size
    v = np.vander(t, m + 1, increasing=True)
    rest = f - v[:, free:] @ top
    a = v[:, :free] / f[:, None]
    b = rest / f
    w = np.full(t.size, 1.0 / t.size)
    best = (np.inf, None)
    for _ in range(iterations):
        sw = np.sqrt(w)
        c = np.linalg.lstsq(a * sw[:, None], b * sw, rcond=None)[0]
        err = a @ c - b
        e = float(np.abs(err).max())
        if e < best[0]:
            best = (e, np.concatenate([c, top]))
        w = w * (np.abs(err) + 1e-3 * e)
        w /= w.sum()
    return best


def fit(m: int, q: float, iterations: int = 1500, a_max: float = A_MAX):
    a = np.linspace(0.0, a_max, POINTS)
    return lawson(1.0 / (1.0 + q * a), target(a, q), m, iterations)


def fit_float32(m: int, q: float) -> tuple[float, np.ndarray]:
    """Degree m at q, the coefficients rounded to float32 highest first, the lower ones refitted after each."""
    a = np.linspace(0.0, A_MAX, POINTS)
    t, f = 1.0 / (1.0 + q * a), target(a, q)
    fixed = np.zeros(0)
    for _ in range(m + 1):
        _, c = lawson(t, f, m, 1500, fixed)
        fixed = np.concatenate([[np.float32(c[m - fixed.size])], fixed]).astype(np.float64)
    err = float(np.abs(np.polynomial.polynomial.polyval(t, fixed) / f - 1).max())
    return err, fixed.astype(np.float32)


def table() -> list[tuple[int, float, float]]:
    """(degree, best q on a 0.005 grid, its max relative error) for degrees 3..7."""
    rows = []
    for m in range(3, 8):
        coarse = [(fit(m, q, 200)[0], q) for q in np.arange(0.15, 0.6001, 0.01)]
        q0 = min(coarse)[1]
        fine = [(fit(m, q)[0], q) for q in np.arange(q0 - 0.01, q0 + 0.0101, 0.0025)]
        e, q = min(fine)
        rows.append((m, float(q), e))
        print(f"  degree {m}: q {q:.4f}  max relative error of h on [0, {A_MAX}] {e:.2e}", flush=True)
    return rows


def main(argv) -> int:
    if "--table" in argv:
        print("degree against error (Q of degree m in t = 1 / (1 + q a), the best q of the grid):")
        table()
    err, c = fit_float32(6, 0.25)
    print(f"chosen: degree 6, q = 0.25, float32 coefficients c0..c6 (max relative error of h {err:.2e}):")
    print("  " + ", ".join(repr(float(v)) for v in c))
    same = np.array_equal(c, gelu.FAST_C)
    print(f"  ops/gelu.py's FAST_C {'holds these' if same else 'DIFFERS: ' + repr(gelu.FAST_C.tolist())}")
    return 0 if same else 1


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
