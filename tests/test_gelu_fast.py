"""float16 GELU within an ulp (gelu.cu's gelu_forward_f16_fast / gelu_backward_f16_fast, TR2_GELU_F16_FAST), checked
without a GPU, EXHAUSTIVELY over the 65536 float16 codes: ops/gelu.py's NumPy form of the kernels' arithmetic (float32
roundings emulated, ex2 and rcp taken exact) against the computing kernels' arithmetic replayed with erff and expf
correctly rounded (their float32 steps exact: the reference the promise is about) and against exact GELU in float64.

The kernels hand a group of eight to the computing path (gelu() / gelu_grad(), inline: its bits by construction) for
the elements of a set of codes whenever a cheap test flags the group; _flagged and _exact_codes below mirror those
tests from gelu.cu's defines. So every code must be either within an ulp on the fast path, or both flagged and exact,
with the tail x <= -3.75 flagged (GELU_FAST_TAIL_X, the kernels' `tail` argument as gpu/gelu.py passes it).

Bounds on the share of codes moved by an ulp, set from the error analysis before looking (docs/perf.md, "float16 GELU
within an ulp"): the fast form's relative error ~2e-7 (the fit 4.8e-8, the exponent's and four products' roundings),
the replay's ~3e-8 (erff's rounding); a float16 rounding moves where y lies within that of a midpoint, ~2 x 2.3e-7 /
7.3e-4 (the mean relative float16 spacing) on the half of the codes where Phi's error is not diluted: ~0.03%. Bound
0.1%, a margin of three. That the kernels give these outputs on the device (and the device's ex2.approx / rcp.approx
errors) is tests/test_kernels_gpu.py's (-k gelu_fast). The oracle's own arithmetic (gpu/gelu_enclosure.py's exact
float32 emulation) is checked against exact rationals below. Run with -s for the numbers the docs quote."""
import math
import re
from fractions import Fraction

import numpy as np
import pytest

from tr2.cupy_side import gpu
from tr2.cupy_side.gpu import gelu_enclosure as gs
from tr2.cupy_side.ops import gelu as og

EVERY_CODE = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16)
MOVED_BOUND = 1e-3          # of the codes on the fast path, forward, and backward for each dy
FIT_BOUND = 5e-8            # the fit's maximum relative error of h over |x| <= 4.5 (measured 4.81e-8)
RELATIVE_HALF_ULP = 2.0 ** -11   # float16's least relative spacing (normal results)
DY_SET = {"1": 1.0, "-1": -1.0, "0.3": 0.3, "3e4": 3e4, "largest": 65504.0, "-largest": -65504.0,
          "least subnormal": 2.0 ** -24, "-subnormal": -3.0 * 2.0 ** -20, "7.5e-6": 7.5e-6, "0": 0.0}


def _source() -> str:
    return (gpu.KERNELS_DIR / "gelu.cu").read_text()


def _float_define(name: str) -> np.float32:
    m = re.search(rf"^#define {name} (-?[0-9.e+-]+)f\s*$", _source(), re.M)
    assert m, f"gelu.cu: no '#define {name} <float>f'"
    return np.float32(float(m.group(1)))


def _hex_define(name: str) -> int:
    m = re.search(rf"^#define {name} (0x[0-9A-Fa-f]+|\d+)u\s*$", _source(), re.M)
    assert m, f"gelu.cu: no '#define {name} <integer>u'"
    return int(m.group(1), 0)


LEAST_X = _hex_define("GELU_FAST_LEAST_X")          # float16 code of 2^-13
TAIL_X = _hex_define("GELU_FAST_TAIL_X")            # float16 code of -3.75: the kernels' tail
ROOT_CODE = _hex_define("GELU_FAST_ROOT_CODE")
ROOT_CODES = _hex_define("GELU_FAST_ROOT_CODES")


def _values(codes) -> np.ndarray:
    """float16 codes' values as float64 (NaNs and infs among them)."""
    with np.errstate(invalid="ignore"):
        return gs.f16_to_f32(np.atleast_1d(codes)).astype(np.float64)


def _value(code: int) -> float:
    return float(_values(np.uint16(code))[0])


def _bits16(v64) -> np.ndarray:
    """float16 bits of float64 values holding float32 ones (the kernels' cvt.rn.f16.f32)."""
    return gs.rn16_bits(np.asarray(v64, dtype=np.float64).astype(np.float32))


def _ulps(a, b) -> np.ndarray:
    """Units in the last place between float16 codes of one sign; codes of different signs (+0 and -0 among them)
    count 2^16."""
    a, b = np.asarray(a).astype(np.int64), np.asarray(b).astype(np.int64)
    return np.where((a >> 15) == (b >> 15), np.abs(a - b), 1 << 16)


def _root(codes) -> np.ndarray:
    c = np.asarray(codes).astype(np.int64)
    return (c >= ROOT_CODE) & (c < ROOT_CODE + ROOT_CODES)


def _exact_codes(codes, backward: bool, tail: int = TAIL_X) -> np.ndarray:
    """gelu_fast_exact_code: the codes a flagged group sends through the computing path."""
    c = np.asarray(codes).astype(np.int64)
    m = c & 0x7FFF
    return (m < LEAST_X) | (m >= 0x7C00) | (c >= tail) | (backward & _root(codes))


def _flagged(codes, backward: bool, tail: int = TAIL_X) -> np.ndarray:
    """The elements that flag their group (gelu_fast_plain, gelu_fast_no_root; an element flags it alone): |x| below
    2^-13, x at or below the tail, NaN, and in the backward the root codes."""
    x = _values(codes)
    with np.errstate(invalid="ignore"):
        flag = ~(np.abs(x) >= _value(LEAST_X)) | ~(x > _value(tail))
    return flag | (backward & _root(codes))


def replay_forward(x32) -> np.ndarray:
    """gelu() of gelu.cu, 0.5f * x * (1.0f + erff(x / sqrt 2)), its float32 steps exact and erff correctly rounded."""
    z = gs.mul32(x32, np.full_like(x32, gs.C_INV_SQRT2))
    e = gs.erf64(z).astype(np.float32)
    # the last product exact in float64 and rounded once: the sign of a zero kept (gs.mul32 adds +0)
    return og._fl((np.float32(0.5) * x32).astype(np.float64) * gs.add32(np.ones_like(x32), e).astype(np.float64))


def replay_grad_factor(x32) -> np.ndarray:
    """gelu_grad()'s t = cdf + x pdf (fused, as NVRTC builds it), erff and expf correctly rounded, -ftz."""
    z = gs.mul32(x32, np.full_like(x32, gs.C_INV_SQRT2))
    e = gs.erf64(z).astype(np.float32)
    cdf = gs.mul32(np.full_like(x32, np.float32(0.5)), gs.add32(np.ones_like(x32), e))
    q = gs.mul32((np.float32(-0.5) * x32).astype(np.float32), x32)
    pdf = gs.mul32(gs._ftz(np.exp(q.astype(np.float64)).astype(np.float32)), np.full_like(x32, gs.C_INV_SQRT_2PI))
    return gs.fma32(x32, pdf, cdf).astype(np.float64)


def forward_report(tail: int = TAIL_X, codes=EVERY_CODE) -> dict:
    """The forward's fast outputs against the replay and exact GELU over `codes` (NaN excluded), flags at `tail`."""
    x32 = _values(codes).astype(np.float32)
    keep = ~np.isnan(x32)
    codes, x32 = codes[keep], x32[keep]
    with np.errstate(invalid="ignore", over="ignore"):
        fast = _bits16(og.fast_forward(x32))
        replay = _bits16(replay_forward(x32))
        finite = np.isfinite(x32)
        exact = np.where(finite, gs.gelu64(np.where(finite, x32, 0).astype(np.float64)), 0).astype(np.float16)
    steps = _ulps(fast, replay)
    on_fast = ~_flagged(codes, False, tail)
    covered = ~on_fast & _exact_codes(codes, False, tail)     # the computing path's bits, whatever fast says
    truth = _ulps(fast, exact.view(np.uint16))
    return {"codes": codes, "x": x32, "steps": steps, "covered": covered, "on_fast": on_fast,
            "max_ulps": int(steps[~covered].max()), "moved": float((steps[on_fast] > 0).mean()),
            "truth_max_ulps": int(truth[on_fast & finite].max()),
            "truth_moved": float((truth[on_fast & finite] > 0).mean()),
            "replay_truth_moved": float((_ulps(replay, exact.view(np.uint16))[on_fast & finite] > 0).mean())}


def backward_report(dy: float, tail: int = TAIL_X, codes=EVERY_CODE) -> dict:
    """dx = fl(dy t), the fast factor against the replay's, for one float16 dy over `codes` (NaN excluded)."""
    x32 = _values(codes).astype(np.float32)
    keep = ~np.isnan(x32)
    codes, x32 = codes[keep], x32[keep]
    d = float(np.float16(dy))
    with np.errstate(invalid="ignore", over="ignore"):
        fast = _bits16(og._fl(d * og.fast_grad_factor(x32)))
        replay = _bits16(og._fl(d * replay_grad_factor(x32)))
    steps = _ulps(fast, replay)
    on_fast = ~_flagged(codes, True, tail)
    covered = ~on_fast & _exact_codes(codes, True, tail)
    return {"steps": steps, "covered": covered, "max_ulps": int(steps[~covered].max()),
            "moved": float((steps[on_fast] > 0).mean()), "x": x32}


def every_dy_holds(t_fast, lo, hi) -> np.ndarray:
    """Whether rn16(rn32(dy t_fast)) is within an ulp of rn16(rn32(dy t)) for EVERY dy and every t in [lo, hi]: t_fast
    and all of [lo, hi] of one sign and |t_fast - t| below 2^-11 of the least of them (less float32's two roundings):
    two reals closer than float16's spacing at the smaller round at most one code apart (subnormal and overflowing
    results included: their spacing is larger, and 65504 and inf are neighbours)."""
    t, lo, hi = (np.asarray(v, dtype=np.float64) for v in (t_fast, lo, hi))
    least = np.minimum(np.abs(t), np.minimum(np.abs(lo), np.abs(hi)))
    spread = np.maximum(np.abs(t - lo), np.abs(t - hi))
    same = (np.sign(lo) == np.sign(t)) & (np.sign(hi) == np.sign(t)) & (t != 0)
    with np.errstate(invalid="ignore"):
        return same & (spread < least * RELATIVE_HALF_ULP * (1 - 2.0 ** -10))


def forward_within_enclosure(tail: int = TAIL_X) -> np.ndarray:
    """The finite codes whose fast forward output is within an ulp of every output the computing kernel could give
    with erff anywhere within CUDA's documented 2 ulp (gelu_enclosure's), or that their flags send through
    the computing path: bool over EVERY_CODE's finite codes, and those codes."""
    x32 = _values(EVERY_CODE).astype(np.float32)
    keep = np.isfinite(x32)
    codes, x32 = EVERY_CODE[keep], x32[keep]
    with np.errstate(invalid="ignore", over="ignore"):
        fast = _bits16(og.fast_forward(x32))
        lo, hi = gs.computing_forward_range(x32)
    worst = np.maximum(_ulps(fast, gs.rn16_bits(lo)), _ulps(fast, gs.rn16_bits(hi)))
    flagged = _flagged(codes, False, tail) & _exact_codes(codes, False, tail)
    return (worst <= 1) | flagged, codes


def backward_within_enclosure(tail: int = TAIL_X):
    """The same for the backward's factor, for every dy at once (every_dy_holds against the enclosure's ends)."""
    x32 = _values(EVERY_CODE).astype(np.float32)
    keep = np.isfinite(x32)
    codes, x32 = EVERY_CODE[keep], x32[keep]
    with np.errstate(invalid="ignore", over="ignore"):
        t = og.fast_grad_factor(x32)
        lo, hi = gs.computing_grad_factor_range(x32)
    flagged = _flagged(codes, True, tail) & _exact_codes(codes, True, tail)
    return every_dy_holds(t, lo, hi) | flagged, codes


# ------------------------------------------------------------------------------------------------- constants, fit

def test_the_kernels_constants_are_ops_gelus():
    assert _float_define("GELU_FAST_K") == og.FAST_K and _float_define("GELU_FAST_L") == og.FAST_L
    assert [_float_define(f"GELU_FAST_C{k}") for k in range(7)] == list(og.FAST_C)
    assert og.FAST_Q == np.float32(0.25)
    src = _source()   # t = 1 / (1 + |x| / 4) = S / (|x| S / 4 + S), from z = x S / 4 (S = 4 backward, 2 forward)
    assert "gelu_fast_rcp(__fadd_rn(fabsf(z), 4.0f / r))" in src and "constexpr float r = 4.0f / S;" in src
    assert "gelu_fast_erf<2>(b, phi)" in src and "gelu_fast_erf<4>(x, phi)" in src
    assert _value(LEAST_X) == 2.0 ** -13 and _value(TAIL_X) == -3.75
    assert [float(v) for v in _values(np.arange(ROOT_CODE, ROOT_CODE + ROOT_CODES, dtype=np.uint16))] == \
        [-0.75146484375, -0.751953125]
    assert gpu.kernel_define("gelu.cu", "GELU_FAST_TAIL_X") == TAIL_X == 0xC380


def test_the_fit_is_within_its_bound():
    """h = phi t Q(t) against 0.5 erfc(a / sqrt 2) in float64 on a dense grid of a = |x|: the maximum relative error
    on [0, 4.5] (where the fast paths need it) within FIT_BOUND; beyond, where only smallness matters, it grows
    gently; Q positive on t in [0, 1], and Q(1) = sqrt(pi / 2) (h(0) = 1/2) to the fit's error."""
    def rel_err(a):
        t = 1.0 / (1.0 + float(og.FAST_Q) * a)
        phi = np.exp2(a * a * float(og.FAST_K) + float(og.FAST_L))
        h = phi * t * np.polynomial.polynomial.polyval(t, og.FAST_C.astype(np.float64))
        exact = np.array([0.5 * math.erfc(v / math.sqrt(2.0)) for v in a])
        return np.abs(h / exact - 1)
    a = np.linspace(0.0, 4.5, 20001)
    assert rel_err(a).max() < FIT_BOUND
    assert rel_err(np.linspace(4.5, 8.0, 2001)).max() < 4e-5
    q = np.polynomial.polynomial.polyval(np.linspace(0.0, 1.0, 10001), og.FAST_C.astype(np.float64))
    assert q.min() > 0.2 and abs(q[-1] / math.sqrt(math.pi / 2) - 1) < FIT_BOUND


def _kernel_erf(z, s: int) -> tuple[np.ndarray, np.ndarray]:
    """gelu_fast_erf<S>: phi and (4 / S)(1/2 - phi v 4 Q(S v) S / 4), z = x S / 4, v = 1 / (|z| + S), Q's coefficients
    scaled by 4 S^k, each step one float32 rounding (og._fl)."""
    r = 4.0 / s
    z = np.asarray(z, dtype=np.float64)
    phi = og._fl(np.exp2(og._fl(og._fl(z * z) * float(og.FAST_K) * r * r + float(og.FAST_L))))
    v = og._fl(1.0 / og._fl(np.abs(z) + 4.0 / r))
    q = np.full_like(z, float(og.FAST_C[6]) * 4.0 * s ** 6)
    for k in range(5, -1, -1):
        q = og._fl(q * v + float(og.FAST_C[k]) * 4.0 * s ** k)
    return phi, og._fl(2.0 / s - og._fl(phi * v) * q)


def test_the_kernels_scaled_forms_are_ops_arithmetic_times_powers_of_two():
    """gelu.cu computes the forward from b = x / 2 (exact for |x| >= 2^-13) with v = 1 / (|b| + 2) = t / 2 and the
    backward with v = 1 / (|x| + 4) = t / 4, Q's coefficients scaled by powers of two: every rounding then falls as in
    ops/gelu.py's form (t = 1 / (1 + |x| / 4)), times a power of two, so the bits are the same on every code the fast
    paths keep (ex2 and rcp taken exact here, as there; the device's rcp.approx scales exactly with its input)."""
    x = _values(EVERY_CODE)
    keep = np.isfinite(x) & (np.abs(x) >= 2.0 ** -13)
    x = x[keep].astype(np.float32).astype(np.float64)
    b = x / 2
    _, erf = _kernel_erf(b, 2)
    assert np.array_equal(np.copysign(og._fl(np.abs(b) * erf + b), x), og.fast_forward(x))
    phi, e = _kernel_erf(x, 4)
    t = og._fl(x * phi + og._fl(0.5 + np.copysign(e, x)))
    assert np.array_equal(t, og.fast_grad_factor(x))


# ---------------------------------------------------------------------------------------------------- every code

def test_the_flagged_codes_and_the_exact_codes(capsys):
    """Which codes flag a group and which a flagged group computes exactly: zeros, subnormals and |x| < 2^-13, NaN,
    -inf, the tail and (backward) the two codes beside t's zero in both; every flagged code exact but +-2^-13's
    neighbours; and what x ~ N(0, s^2) sends to the computing path (a group is flagged where any of its eight is)."""
    x = _values(EVERY_CODE)
    for backward in (False, True):
        flag, exact = _flagged(EVERY_CODE, backward), _exact_codes(EVERY_CODE, backward)
        assert np.all(flag[np.abs(x) < 2.0 ** -13]) and np.all(flag[np.isnan(x)]) and flag[0xFC00]
        assert np.all(flag[x <= _value(TAIL_X)]) and not np.any(flag[(x > _value(TAIL_X)) & (np.abs(x) >= 2.0 ** -13)
                                                                     & ~(backward & _root(EVERY_CODE))])
        assert np.all(exact[flag]) and exact[0x7C00] and not flag[0x7C00]   # +inf: the fast arithmetic's inf / NaN
    p = {s: gs.code_probabilities(s) for s in (0.5, 1.0, 2.0, 4.0)}
    with capsys.disabled():
        print("\n  x ~ N(0, s^2): share of elements flagging their group (of warp iterations: 32 lanes x 8)")
        for backward in (False, True):
            rates = [float(p[s][_flagged(EVERY_CODE, backward)].sum()) for s in p]
            print(f"  {'backward' if backward else 'forward ':8s} " + "  ".join(
                f"s {s}: {q:.1e} ({1 - (1 - q) ** 256:.3f})" for s, q in zip(p, rates)))


def test_the_fast_forward_is_within_an_ulp_on_every_code(capsys):
    """Every non-NaN code: on the fast path within one ulp of the computing arithmetic (same sign; -0 included), or
    flagged and computed exactly; at most MOVED_BOUND of the fast path's codes moved; and within one ulp of exact GELU
    on every finite code of the fast path (the tail's cancelling codes, the computing arithmetic's own error, are
    flagged)."""
    r = forward_report()
    assert r["max_ulps"] <= 1, f"{int((r['steps'][~r['covered']] > 1).sum())} codes more than an ulp off, e.g. " \
                               f"x = {r['x'][~r['covered'] & (r['steps'] > 1)][:4]}"
    assert r["moved"] <= MOVED_BOUND
    assert r["truth_max_ulps"] <= 1
    with capsys.disabled():
        print(f"\n  forward, {int(r['on_fast'].sum())} codes on the fast path: max {r['max_ulps']} ulp, moved "
              f"{r['moved']:.4%} against the computing arithmetic; against exact GELU max {r['truth_max_ulps']}, "
              f"{r['truth_moved']:.4%} (the computing arithmetic itself {r['replay_truth_moved']:.4%})")


@pytest.mark.parametrize("dy", list(DY_SET), ids=list(DY_SET))
def test_the_fast_backward_is_within_an_ulp_on_every_code(dy, capsys):
    r = backward_report(DY_SET[dy])
    assert r["max_ulps"] <= 1, f"dy {dy}: x = {r['x'][~r['covered'] & (r['steps'] > 1)][:4]} more than an ulp off"
    assert r["moved"] <= MOVED_BOUND
    with capsys.disabled():
        print(f"\n  backward, dy {dy}: max {r['max_ulps']} ulp, moved {r['moved']:.4%}")


def test_within_an_ulp_of_every_computing_value_the_documented_bounds_allow():
    """Against every output the computing kernel could give with erff and expf anywhere within CUDA's documented 2 ulp
    (gelu_enclosure's): with the tail through the computing path every code is within an ulp, forward, and backward for
    every dy at once (its t within 2^-11, relative). (On the fast path the tail's codes were not: there one ulp of erff
    moves the computing kernel's y and t by one or more float16 ulps; that form, TR2_GELU_F16_FAST=2, was refused by
    its GPU tests and removed.)"""
    for backward, check in ((False, forward_within_enclosure), (True, backward_within_enclosure)):
        ok, codes = check()
        assert np.all(ok), f"{'backward' if backward else 'forward'}: x = {_values(codes[~ok])[:6]}"


def test_the_enclosure_holds_the_correctly_rounded_replay_and_the_exact_value():
    """The oracle itself: on every finite code the enclosure of the computing kernel's outputs (gelu_enclosure) holds
    the replay with erff and expf correctly rounded (one of the values it allows), and reaches the exact value in
    float64 to 1e-6 of it, relative, wherever that exceeds 1e-3 in magnitude."""
    x32 = _values(EVERY_CODE).astype(np.float32)
    x32 = x32[np.isfinite(x32)]
    with np.errstate(invalid="ignore", over="ignore"):
        for replay, enclose, exact in ((replay_forward, gs.computing_forward_range, gs.gelu64),
                                       (replay_grad_factor, gs.computing_grad_factor_range, gs.grad_factor64)):
            lo, hi = (v.astype(np.float64) for v in enclose(x32))
            r = replay(x32)
            assert np.all(lo <= hi) and np.all((lo <= r) & (r <= hi)), replay.__name__
            want = exact(x32.astype(np.float64))
            big, slack = np.abs(want) > 1e-3, 1e-6 * np.abs(want)
            assert np.all((lo <= want + slack)[big]) and np.all((hi >= want - slack)[big]), replay.__name__


def test_random_dy_and_every_value_of_dy():
    g = np.random.default_rng(11)
    x = g.choice(EVERY_CODE, 1 << 18)
    dy = g.choice(EVERY_CODE, x.size)            # every float16 value, inf and NaN among them
    x32, d = _values(x).astype(np.float32), _values(dy)
    with np.errstate(invalid="ignore", over="ignore"):
        fast = _bits16(og._fl(d * og.fast_grad_factor(x32)))
        replay = _bits16(og._fl(d * replay_grad_factor(x32)))
    on_fast = ~_flagged(x, True)
    both_nan = np.isnan(fast.view(np.float16)) & np.isnan(replay.view(np.float16))
    steps = np.where(both_nan, 0, _ulps(fast, replay))
    assert np.all((steps <= 1) | (~on_fast & _exact_codes(x, True)))
    assert (steps[on_fast] > 0).mean() <= MOVED_BOUND


# ------------------------------------------------------------------------------ the oracle's float32 arithmetic

def _round_f32(q: Fraction) -> float:
    """q rounded to the nearest float32 (ties to even; subnormals, then -ftz's flush to a zero of q's sign)."""
    if q == 0:
        return 0.0
    sign, a = (-1.0 if q < 0 else 1.0), abs(q)
    e = a.numerator.bit_length() - a.denominator.bit_length()
    e = e if Fraction(2) ** e <= a else e - 1
    quantum = Fraction(2) ** (max(e, -126) - 23)
    n, rem = divmod(a, quantum)
    n = int(n) + (1 if rem > quantum / 2 or (rem == quantum / 2 and int(n) % 2) else 0)
    r = float(n * quantum)
    return sign * (0.0 if r < 2.0 ** -126 else r)


def _hard_float32_triples(g, n):
    """fma operands whose exact result sits on or beside a float32 midpoint, and ordinary ones."""
    a = (g.standard_normal(n) * np.exp2(g.integers(-20, 20, n))).astype(np.float32)
    b = (g.standard_normal(n) * np.exp2(g.integers(-20, 20, n))).astype(np.float32)
    p = a.astype(np.float64) * b.astype(np.float64)
    c = (-p).astype(np.float32)                                            # cancellation
    c[: n // 3] = (g.standard_normal(n // 3) * 1e-3).astype(np.float32)    # ordinary
    mid = (p + np.abs(p) * 2.0 ** -24).astype(np.float32)                  # beside a midpoint of the product
    c[n // 3: 2 * n // 3] = (mid.astype(np.float64) - p).astype(np.float32)[n // 3: 2 * n // 3]
    return a, b, c


def test_fma32_is_one_correct_rounding():
    g = np.random.default_rng(5)
    a, b, c = _hard_float32_triples(g, 3000)
    got = gs.fma32(a, b, c)
    for i in range(a.size):
        want = _round_f32(Fraction(float(a[i])) * Fraction(float(b[i])) + Fraction(float(c[i])))
        assert float(got[i]) == want and math.copysign(1, float(got[i])) == math.copysign(1, want) or want == 0, i


# ----------------------------------------------------------------------------------------- the checks can fail

@pytest.mark.parametrize("change", ["c3 x (1 + 1e-5)", "K x (1 + 1e-5)", "L x (1 + 1e-5)", "q = 0.2505"])
def test_a_perturbed_constant_fails_the_checks(change, monkeypatch):
    """The bounds above are tight enough to catch a wrong constant: each change below moves more than MOVED_BOUND of
    the codes (or some by more than an ulp), forward or backward."""
    if change.startswith("c3"):
        c = og.FAST_C.copy()
        c[3] = np.float32(c[3] * (1 + 1e-5))
        monkeypatch.setattr(og, "FAST_C", c)
    elif change.startswith("K"):
        monkeypatch.setattr(og, "FAST_K", np.float32(og.FAST_K * (1 + 1e-5)))
    elif change.startswith("L"):
        monkeypatch.setattr(og, "FAST_L", np.float32(og.FAST_L * (1 + 1e-5)))
    else:
        monkeypatch.setattr(og, "FAST_Q", np.float32(0.2505))
    f, b = forward_report(), backward_report(1.0)
    print(f"\n  {change}: forward max {f['max_ulps']} ulp, moved {f['moved']:.4%}; backward (dy 1) max {b['max_ulps']} "
          f"ulp, moved {b['moved']:.4%}")
    assert f["max_ulps"] > 1 or f["moved"] > MOVED_BOUND or b["max_ulps"] > 1 or b["moved"] > MOVED_BOUND


# ------------------------------------------------------------------------------------------------- the switch

@pytest.fixture
def gelu_wrapper(over_stand_in_cupy):
    return over_stand_in_cupy("tr2.cupy_side.gpu.gelu")


def test_the_switch_is_on_by_default_and_picks_float16_alone(gelu_wrapper, monkeypatch):
    """TR2_GELU_F16_FAST (gpu/gelu.F16_FAST) is 1 unless set (the tail through the computing path); on, float16 x and
    y (forward) or x, dy and dx
    (backward) take the kernels within an ulp unless the caller names another form; other kinds, or a named form,
    never; asking for it where it does not apply is refused."""
    g = gelu_wrapper
    assert g.F16_FAST == 1 and g.FAST_TAIL == TAIL_X
    choose = g._fast_choice
    monkeypatch.setattr(g, "F16_FAST", 0)
    assert not choose(None, None, True, 1000, "gelu_forward")
    monkeypatch.setattr(g, "F16_FAST", 1)
    assert choose(None, None, True, 1000, "gelu_forward")
    assert not choose(None, None, False, 1000, "gelu_forward")          # not all float16
    assert not choose(None, False, True, 1000, "gelu_forward")          # a test's computing kernel
    assert not choose(None, None, True, g.FAST_MAX_N, "gelu_forward")   # past the 32-bit group index
    assert choose(True, None, True, 8, "gelu_backward") and not choose(False, None, True, 8, "x")
    with pytest.raises(ValueError, match="gelu_backward within an ulp: x, dy and dx must be float16"):
        choose(True, None, False, 8, "gelu_backward")
    with pytest.raises(ValueError, match="both asked for"):
        choose(True, True, True, 8, "gelu_forward")
    with pytest.raises(ValueError, match="fewer than 2"):
        choose(True, None, True, g.FAST_MAX_N, "gelu_forward")


@pytest.mark.parametrize("value", ["0", "1"])
def test_the_switch_reads_the_environment(over_stand_in_cupy, monkeypatch, value):
    """TR2_GELU_F16_FAST=1: the kernels within an ulp, the tail (x <= -3.75) through the computing path; 0: the
    computing kernels."""
    monkeypatch.setenv("TR2_GELU_F16_FAST", value)
    g = over_stand_in_cupy("tr2.cupy_side.gpu.gelu")
    assert g.F16_FAST == int(value) and g.FAST_TAIL == TAIL_X


def test_the_refused_tail_on_the_fast_path_is_no_longer_a_value(over_stand_in_cupy, monkeypatch):
    """TR2_GELU_F16_FAST=2 (the negative tail on the fast path, refused by its GPU tests, removed) stops the run."""
    from tr2.cupy_side.gpu import SwitchError
    monkeypatch.setenv("TR2_GELU_F16_FAST", "2")
    with pytest.raises(SwitchError, match="TR2_GELU_F16_FAST='2': allowed values are 0, 1"):
        over_stand_in_cupy("tr2.cupy_side.gpu.gelu")
