"""gelu.cu's bfloat16 tables, checked without a GPU: which codes the table kernels look up, that each has
a place of its own, that gpu/gelu_table.py's NumPy index is the device's expression, and that the tables fit the
blocks the wrapper launches. (That the looked-up bits are the computing kernels' is tests/test_kernels_gpu.py's, on a
GPU.) float16's tables were removed (gelu.cu's header): float16 has none."""
import re

import numpy as np
import pytest

from tr2.cupy_side import gpu
from tr2.cupy_side.gpu import gelu_table, halfbits

BF16, F16 = halfbits.KIND_BF16, halfbits.KIND_F16

EVERY_CODE = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16)


def _source() -> str:
    return (gpu.KERNELS_DIR / "gelu.cu").read_text()


def test_the_tabulated_codes_are_the_finite_magnitudes_from_2_to_the_minus_24_below_16():
    with np.errstate(invalid="ignore"):   # the NaN codes
        x = halfbits.bf16_bits_to_f32(EVERY_CODE).astype(np.float64)
        want = (np.abs(x) >= 2.0 ** -24) & (np.abs(x) < 16.0)
    assert np.array_equal(gelu_table.tabulated(EVERY_CODE), want)
    assert int(want.sum()) == gelu_table.SIZE == 7168
    for special in (0x0000, 0x8000, 0x7F80, 0xFF80, 0x7FC0, 0x0001, 0x337F, 0x4180, 0xC180):   # 0, inf, NaN, tiny, 16
        assert not gelu_table.tabulated([special])[0], hex(special)
    for edge in (0x3380, 0xB380, 0x417F, 0xC17F):   # +-2^-24, +-(16 - 2^-4)
        assert gelu_table.tabulated([edge])[0], hex(edge)


def test_each_tabulated_code_has_its_own_place_and_the_places_fill_the_table():
    index = gelu_table.table_index(EVERY_CODE)
    places = index[index < gelu_table.SIZE]
    assert np.array_equal(np.sort(places), np.arange(gelu_table.SIZE))


def test_code_to_place_to_code_round_trips():
    codes = gelu_table.table_codes()
    assert codes.dtype == np.uint16 and codes.size == gelu_table.SIZE
    assert np.array_equal(gelu_table.table_index(codes), np.arange(gelu_table.SIZE))
    tab = EVERY_CODE[gelu_table.tabulated(EVERY_CODE)]
    assert np.array_equal(codes[gelu_table.table_index(tab)], tab)


def test_the_bf16_api_is_the_bf16_spec():
    bf16 = gelu_table.spec(BF16)
    assert (gelu_table.EXP_LOW, gelu_table.EXP_END, gelu_table.SIZE) == (bf16.exp_low, bf16.exp_end, bf16.size)
    assert np.array_equal(gelu_table.table_codes(), gelu_table.table_codes(BF16))
    assert np.array_equal(gelu_table.table_index(EVERY_CODE), gelu_table.table_index(EVERY_CODE, BF16))


@pytest.mark.parametrize("kind", [halfbits.KIND_F32, F16], ids=["f32", "f16"])
def test_only_bfloat16_has_tables(kind):
    with pytest.raises(ValueError, match="bfloat16 .* only"):
        gelu_table.spec(kind)
    assert "#define GELU_F16_TABLE" not in _source() and "gelu_f16_table_index(" not in _source()


def test_the_numpy_index_is_the_devices_expression():
    """The index function's return expression, read from gelu.cu and evaluated in uint32 over every code (its
    operators mean the same in Python; only the literals' u suffix goes), equals the transcription."""
    kind, function, constant = BF16, "gelu_table_index", "GELU_TABLE_EXP_LOW"
    m = re.search(rf"u32 {function}\(u32 code\) \{{\s*return (.*?);\s*\}}", _source(), re.S)
    assert m, f"{function} not found in gelu.cu"
    expr = re.sub(r"\b(0x[0-9A-Fa-f]+|\d+)u\b", r"\1", m.group(1))
    names = {"code": EVERY_CODE.astype(np.uint32), constant: np.uint32(gelu_table.spec(kind).exp_low)}
    with np.errstate(over="ignore"):
        device = eval(expr, {"__builtins__": {}}, names)   # noqa: S307 - the repository's own source
    assert np.asarray(device).dtype == np.uint32
    assert np.array_equal(device, gelu_table.table_index(EVERY_CODE, kind))


def test_the_table_constants_agree():
    assert gelu_table.EXP_LOW == 127 - 24 and gelu_table.EXP_END == 127 + 4   # biased exponents of 2^-24 and 16
    assert gelu_table.SIZE == (gelu_table.EXP_END - gelu_table.EXP_LOW) << 8
    assert (gelu_table.SIZE * 2) % 16 == 0   # the blocks copy the tables in 16-byte pieces


def test_the_persistent_blocks_fit_an_sm():
    """GELU_TABLE_BLOCKS_PER_SM blocks of GELU_TABLE_THREADS, each with its float32 table (the larger) and the 1 KB
    the driver keeps a block, fit an H200 SM (228 KB of shared memory, 2048 threads)."""
    threads = gpu.kernel_define("gelu.cu", "GELU_TABLE_THREADS")
    per_sm = gpu.kernel_define("gelu.cu", "GELU_TABLE_BLOCKS_PER_SM")
    assert per_sm * (gelu_table.SIZE * 4 + 1024) <= 228 * 1024
    assert per_sm * threads <= 2048 and threads % 32 == 0


def test_the_table_kernels_are_registered():
    kernels = set(gpu.FILE_KERNELS["gelu.cu"])
    assert {"gelu_forward_bf16_table", "gelu_backward_bf16_table"} <= kernels
    assert not {"gelu_forward_f16_table", "gelu_backward_f16_table"} & kernels   # removed (gelu.cu's header)


ORDERED_KERNELS = ("gelu_forward", "gelu_backward", "gelu_forward_bf16_table", "gelu_backward_bf16_table",
                   "gelu_forward_f16_fast", "gelu_backward_f16_fast")


def _last_arguments(wrapper: str, call: str) -> list:
    """The name (first group) and the last argument of every launch `call` matches in gpu/gelu.py (its argument tuple
    ends the call: '...))' at a line's end)."""
    return [(m.group(1), m.group(2).rsplit(",", 1)[-1].strip()) for m in re.finditer(call + r".*?\((.*?)\)\)\n",
                                                                                    wrapper, re.S)]


def test_the_ordered_kernels_take_the_order_last_and_the_wrapper_passes_it():
    """TR2_GELU_REVERSE reaches the kernels it names: each takes `int reverse` as its last parameter, and gpu/gelu.py
    hands every launch of them the order (`order`, from the switch or the caller) as its last argument, but for the
    tables' own build (front to back: either order gives the same bits). (That it does is tests/test_kernels_gpu.py's,
    on a GPU.)"""
    source = _source()
    for name in ORDERED_KERNELS:
        m = re.search(rf"\b{name}\(([^)]*)\)\s*\{{", source)
        assert m, name
        assert m.group(1).split(",")[-1].split() == ["int", "reverse"], name
    wrapper = (gpu.KERNELS_DIR.parent / "gpu" / "gelu.py").read_text()
    launches = _last_arguments(wrapper, r'launch\(FILE, "(gelu_(?:forward|backward)(?:_f16_fast)?)",')
    assert sorted(launches) == sorted([("gelu_forward", "i32(0)"), ("gelu_backward", "i32(0)"),
                                       ("gelu_forward", "order"), ("gelu_backward", "order"),
                                       ("gelu_forward_f16_fast", "order"), ("gelu_backward_f16_fast", "order")])
    tables = _last_arguments(wrapper, r"launch\(FILE, TABLE_(FORWARD|BACKWARD), ")
    assert sorted(tables) == [("BACKWARD", "order"), ("FORWARD", "order")]
    assert wrapper.count("order = i32(REVERSE_FORWARD if reverse is None else reverse)") == 1
    assert wrapper.count("order = i32(REVERSE_BACKWARD if reverse is None else reverse)") == 1
