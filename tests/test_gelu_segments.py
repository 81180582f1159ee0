"""float16 GELU by segment (gelu.cu's gelu_forward_f16_seg / gelu_backward_f16_seg), checked without a GPU: the
segment of every code against the kernel's bit arithmetic, the emulated float32 arithmetic against exact rationals,
every segment's bound against the fit's error and the computing kernel's, and the certificate against adversarial
computing values anywhere within the bound. That the kernels give the computing kernels' bits on the device is
tests/test_kernels_gpu.py's. Run with -s for the fallback fractions the docs quote."""
import math
import re
from fractions import Fraction

import numpy as np
import pytest

from tr2.cupy_side import gpu
from tr2.cupy_side.gpu import gelu_segments as gs

EVERY_CODE = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16)
LAYOUT = gs.LAYOUT


def _source() -> str:
    return (gpu.KERNELS_DIR / "gelu.cu").read_text()


def _define(name: str) -> int:
    return gpu.kernel_define("gelu.cu", name)


# ------------------------------------------------------------------------------------------------- the segments

def _index_by_hand(code: int) -> int:
    """gelu_seg_index, one code in Python integers: magnitude's exponent and top mantissa bits, less the first
    tabulated exponent's, doubled, plus the sign; modulo 2^32 as the device's u32."""
    magnitude_top = (code & 0x7FFF) >> (10 - LAYOUT.bits)
    return (((magnitude_top - (LAYOUT.exp_low << LAYOUT.bits)) % (1 << 32)) * 2 % (1 << 32)) | (code >> 15)


def test_the_segment_of_every_code_is_the_kernels_bit_arithmetic():
    want = np.array([_index_by_hand(int(c)) for c in EVERY_CODE], dtype=np.uint64)
    assert np.array_equal(gs.segment_index(EVERY_CODE).astype(np.uint64), want)


def test_the_numpy_index_is_the_devices_expression():
    """gelu_seg_index's return expression, read from gelu.cu and evaluated in uint32 over every code."""
    m = re.search(r"u32 gelu_seg_index\(u32 code\) \{\s*return (.*?);\s*\}", _source(), re.S)
    assert m, "gelu_seg_index not found in gelu.cu"
    expr = re.sub(r"\b(0x[0-9A-Fa-f]+|\d+)u\b", r"\1", m.group(1))
    names = {"code": EVERY_CODE.astype(np.uint32), "GELU_SEG_BITS": np.uint32(LAYOUT.bits),
             "GELU_SEG_EXP_LOW": np.uint32(LAYOUT.exp_low)}
    with np.errstate(over="ignore"):
        device = eval(expr, {"__builtins__": {}}, names)   # noqa: S307 - the repository's own source
    assert np.asarray(device).dtype == np.uint32
    assert np.array_equal(device, gs.segment_index(EVERY_CODE))


def test_the_segmented_codes_are_the_normal_magnitudes_below_32():
    with np.errstate(invalid="ignore"):
        x = gs.f16_to_f32(EVERY_CODE).astype(np.float64)
        want = (np.abs(x) >= 2.0 ** -14) & (np.abs(x) < 32.0)
    index = gs.segment_index(EVERY_CODE)
    assert np.array_equal(index < LAYOUT.count, want)
    counts = np.bincount(index[index < LAYOUT.count], minlength=LAYOUT.count)
    assert np.all(counts == LAYOUT.codes_per_segment)
    for special in (0x0000, 0x8000, 0x0001, 0x83FF, 0x7C00, 0xFC00, 0x7E00, 0xFE01, 0x5000, 0xD000, 0x7BFF):
        assert index[special] >= LAYOUT.count, hex(special)     # 0, subnormals, inf, NaN, +-32, 65504


def test_segment_codes_are_the_inverse_of_the_index():
    codes = gs.segment_codes()
    assert codes.shape == (LAYOUT.count, LAYOUT.codes_per_segment)
    assert np.array_equal(gs.segment_index(codes), np.repeat(np.arange(LAYOUT.count), LAYOUT.codes_per_segment)
                          .reshape(codes.shape))


def test_the_layout_constants_agree():
    assert (LAYOUT.exp_low, LAYOUT.exp_end) == (1, 15 + 5)   # 2^-14 (least normal) .. 32
    assert _define("GELU_SEG_COUNT") == LAYOUT.count == 2 * (LAYOUT.exp_end - LAYOUT.exp_low) << LAYOUT.bits
    assert _define("GELU_SEG_TABLE_FLOATS") == LAYOUT.table_floats == gs.forward_table().packed().size
    assert LAYOUT.table_floats % 4 == 0


def test_the_persistent_blocks_fit_an_sm():
    """Each block's static table (below the 48 KB a block may declare) and the 1 KB the driver keeps a block, times the
    blocks an SM the launch bounds ask for, fit an H200 SM (228 KB, 2048 threads)."""
    table_bytes = 4 * LAYOUT.table_floats
    threads = _define("GELU_SEG_THREADS")
    assert table_bytes <= 48 * 1024
    for way in ("FORWARD", "BACKWARD"):
        per_sm = _define(f"GELU_SEG_BLOCKS_PER_SM_{way}")
        assert per_sm * (table_bytes + 1024) <= 228 * 1024 and per_sm * threads <= 2048, way


def test_the_seg_kernels_are_registered():
    assert {"gelu_forward_f16_seg", "gelu_backward_f16_seg"} <= set(gpu.FILE_KERNELS["gelu.cu"])
    assert {"gelu_forward_f16_seg", "gelu_backward_f16_seg"} <= set(gpu.declared_kernels("gelu.cu"))


def test_the_centred_variable_is_exact_and_small():
    codes = gs.segment_codes().reshape(-1)
    x = gs.f16_to_f32(codes)
    u = gs.centred(x)
    bits = x.view(np.uint32)
    low = 23 - LAYOUT.bits
    mid = ((bits >> low) << low | (1 << (low - 1))).astype(np.uint32).view(np.float32)
    assert np.array_equal(u.astype(np.float64), x.astype(np.float64) - mid.astype(np.float64))   # no rounding
    ulp = np.exp2(((codes >> 10) & 0x1F).astype(np.float64) - 25.0)
    steps = u.astype(np.float64) / ulp * np.sign(x)
    half = LAYOUT.codes_per_segment // 2
    assert np.array_equal(steps.reshape(LAYOUT.count, -1), np.tile(np.arange(-half, half), (LAYOUT.count, 1)))


# ------------------------------------------------------------------------------------ the emulated arithmetic

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


@pytest.mark.parametrize("up", [False, True], ids=["rd", "ru"])
def test_the_directed_adds_round_outward(up):
    g = np.random.default_rng(6 + up)
    a = (g.standard_normal(4000) * np.exp2(g.integers(-30, 5, 4000))).astype(np.float32)
    b = (a.astype(np.float64) * np.exp2(g.integers(-40, 0, 4000)) * g.choice([-1, 1], 4000)).astype(np.float32)
    got = gs.add32_directed(a, b, up)
    for i in range(a.size):
        exact = Fraction(float(a[i])) + Fraction(float(b[i]))
        r = Fraction(float(got[i]))
        assert (r >= exact) if up else (r <= exact), i
        step = np.nextafter(got[i], np.float32(-np.inf if up else np.inf))
        assert (Fraction(float(step)) < exact) if up else (Fraction(float(step)) > exact), i   # the nearest such


# --------------------------------------------------------------------------------------- fit, bounds, certificate

@pytest.mark.parametrize("which", ["forward", "backward"])
def test_every_codes_fit_and_computing_error_lie_within_the_segments_bound(which):
    """The kernel's bound A covers, on every code of its segment, MARGIN times the fit's error (Horner's roundings
    included) plus the computing kernel's; with Horner replayed here in exact rationals on a sample of segments."""
    table = gs.forward_table() if which == "forward" else gs.backward_table()
    fn = gs.gelu64 if which == "forward" else gs.grad_factor64
    assert np.all(gs.MARGIN * (table.fit + table.computing) <= table.bound.astype(np.float64)[:, None])
    assert np.all(table.bound > 0) and np.all(np.isfinite(table.coef))
    codes = gs.segment_codes()
    g = np.random.default_rng(7)
    for s in g.choice(LAYOUT.count, 40, replace=False):
        x = gs.f16_to_f32(codes[s])
        u = gs.centred(x)
        c = [float(v) for v in table.coef[s]]
        for i in range(x.size):
            y = c[3]
            for k in (2, 1, 0):
                y = _round_f32(Fraction(y) * Fraction(float(u[i])) + Fraction(c[k]))
            err = abs(y - float(fn(np.float64(x[i]))))
            assert gs.MARGIN * (err + table.computing[s, i]) <= float(table.bound[s]) * (1 + 1e-12), (s, i)


def _outward(lo, hi):
    """[lo, hi] widened to float32 ends (rounded outward)."""
    lo32, hi32 = np.asarray(lo, np.float64).astype(np.float32), np.asarray(hi, np.float64).astype(np.float32)
    lo32 = np.where(lo32.astype(np.float64) > lo, np.nextafter(lo32, np.float32(-np.inf)), lo32)
    hi32 = np.where(hi32.astype(np.float64) < hi, np.nextafter(hi32, np.float32(np.inf)), hi32)
    return lo32, hi32


def _computing_values(x32, which, g, draws=4):
    """Float32 values the computing kernel might return for x, adversarially: the ends of the replayed enclosure,
    the exact value moved to either end of its stated bound, and points drawn between."""
    if which == "forward":
        lo, hi = gs.computing_forward_range(x32)
        exact, table = gs.gelu64(x32.astype(np.float64)), gs.forward_table()
    else:
        lo, hi = gs.computing_grad_factor_range(x32)
        exact, table = gs.grad_factor64(x32.astype(np.float64)), gs.backward_table()
    index = gs.segment_index(gs.rn16_bits(x32))
    inside = index < LAYOUT.count
    codes = gs.segment_codes()
    where = {int(c): (s, i) for s, row in enumerate(codes) for i, c in enumerate(row)}
    stated = np.array([table.computing[where[int(c)]] if ok else 0.0
                       for c, ok in zip(gs.rn16_bits(x32), inside)])
    e_lo, e_hi = _outward(exact - stated, exact + stated)
    values = [lo, hi, e_lo, e_hi]
    for _ in range(draws):
        t = g.random(x32.size)
        values.append((lo.astype(np.float64) + t * (hi.astype(np.float64) - lo)).astype(np.float32))
        values.append((e_lo.astype(np.float64) + t * (e_hi.astype(np.float64) - e_lo)).astype(np.float32))
    return values


def test_the_forward_certificate_never_accepts_another_rounding():
    """Where the fast path accepts, every computing value within the bound rounds to the fast path's bits."""
    g = np.random.default_rng(8)
    bits, accepted = gs.forward_fast(EVERY_CODE)
    codes = EVERY_CODE[accepted]
    assert accepted.sum() > 0.9 * (gs.segment_index(EVERY_CODE) < LAYOUT.count).sum()
    for v in _computing_values(gs.f16_to_f32(codes), "forward", g):
        assert np.array_equal(gs.rn16_bits(v), bits[accepted])


DY_SET = {"1": 1.0, "-1": -1.0, "0.3": 0.3, "tiny": 2.0 ** -24, "-subnormal": -3.0 * 2.0 ** -20, "large": 3e4,
          "largest": 65504.0, "-largest": -65504.0, "0": 0.0, "-0": -0.0}


@pytest.mark.parametrize("dy", list(DY_SET), ids=list(DY_SET))
def test_the_backward_certificate_never_accepts_another_rounding(dy):
    g = np.random.default_rng(9)
    dy32 = gs.f16_to_f32(gs.rn16_bits(np.full(EVERY_CODE.size, DY_SET[dy], np.float32)))
    bits, accepted = gs.backward_fast(EVERY_CODE, dy32)
    codes, d = EVERY_CODE[accepted], dy32[accepted]
    for t in _computing_values(gs.f16_to_f32(codes), "backward", g):
        assert np.array_equal(gs.rn16_bits(gs.mul32(d, t)), bits[accepted])


def test_the_backward_certificate_on_random_dy_and_specials():
    g = np.random.default_rng(10)
    x = g.choice(EVERY_CODE, 1 << 16)
    dy_codes = g.choice(EVERY_CODE, x.size)     # every f16 value, inf and NaN among them
    with np.errstate(invalid="ignore"):
        dy32 = gs.f16_to_f32(dy_codes)
        bits, accepted = gs.backward_fast(x, dy32)
        assert not np.any(accepted & np.isnan(dy32) & (bits & 0x7C00 != 0x7C00))
        for t in _computing_values(gs.f16_to_f32(x[accepted]), "backward", g):
            assert np.array_equal(gs.rn16_bits(gs.mul32(dy32[accepted], t)), bits[accepted])


def test_codes_without_a_segment_are_never_accepted():
    outside = gs.segment_index(EVERY_CODE) >= LAYOUT.count
    _, accepted = gs.forward_fast(EVERY_CODE)
    assert not np.any(accepted & outside)
    _, accepted = gs.backward_fast(EVERY_CODE, np.ones(EVERY_CODE.size, np.float32))
    assert not np.any(accepted & outside)


def test_the_fallback_fractions(capsys):
    """The fraction of elements the fast path hands back, for x ~ N(0, s^2) (and dy ~ N(0, 1) in the backward), of
    warp iterations with one or more, and the element slots a warp computes (of 8): printed for the docs."""
    rows = []
    for s in (0.5, 1.0, 2.0, 4.0):
        f, b = gs.forward_fallbacks(s), gs.backward_fallbacks(s, samples=1 << 20)
        rows.append((s, f, b))
        assert 0 <= f.element <= f.warp_iteration <= 1 and 0 <= b.element <= b.warp_iteration <= 1
    with capsys.disabled():
        print("\n  s    forward: element  warp iter.  slots  | backward: element  warp iter.  slots")
        for s, f, b in rows:
            print(f"  {s:3.1f}           {f.element:8.2e}  {f.warp_iteration:9.3f}  {f.slots:5.2f}  |"
                  f"           {b.element:8.2e}  {b.warp_iteration:9.3f}  {b.slots:5.2f}")
    assert rows[1][1].element < 0.005 and rows[1][2].element < 0.01    # N(0, 1): the design's premise
