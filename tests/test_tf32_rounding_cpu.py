"""attention.cu's TF32 rounding on the CPU: the bit formula the kernels used before sm_90's instruction, against
ops/precision.round_to_tf32, and the source's choice between the two. The GPU half (the instruction against the
formula on all 2^32 float32 patterns) is tests/test_kernels_gpu.py::test_tf32_rounding_is_the_formula_on_every_float32.
"""
from __future__ import annotations

import re

import numpy as np

from tr2.cupy_side import gpu
from tr2.cupy_side.ops.precision import round_to_tf32, tf32_formula_bits


def _structured_patterns() -> np.ndarray:
    """Every sign and exponent with every one of the 8192 dropped-bit patterns, under kept mantissas that decide the
    ties (even, odd) and the carries (all ones: into the exponent, and to infinity at the top): 25.2 M patterns."""
    low = np.arange(1 << 13, dtype=np.uint32)
    kept = np.array([0, 1, 0x155, 0x2AA, 0x3FE, 0x3FF], dtype=np.uint32) << np.uint32(13)
    top = np.arange(512, dtype=np.uint32) << np.uint32(23)
    return (top[:, None, None] | kept[None, :, None] | low[None, None, :]).reshape(-1)


def test_the_formula_is_round_to_tf32_on_every_value_that_is_not_nan():
    bits = _structured_patterns()
    x = bits.view(np.float32)
    keep = ~np.isnan(x)
    assert keep.sum() > 25_000_000
    want = round_to_tf32(x[keep]).view(np.uint32)
    assert np.array_equal(tf32_formula_bits(bits[keep]), want)
    # the cases the formula exists for: ties to even, a carry into the exponent, overflow to infinity
    one = np.float32(1.0).view(np.uint32)
    assert tf32_formula_bits(one | 0x1000) == one                     # a tie, kept part even: down
    assert tf32_formula_bits(one | 0x3000) == one + 0x4000            # a tie, kept part odd: up
    assert tf32_formula_bits(np.uint32(0x3FFFF000)) == np.float32(2.0).view(np.uint32)
    assert tf32_formula_bits(np.float32(np.finfo(np.float32).max).view(np.uint32)) == \
        np.float32(np.inf).view(np.uint32)


def test_the_formula_loses_some_nans_where_round_to_tf32_keeps_them():
    """Why the GPU check counts NaN apart: the formula's carry runs through a NaN's payload (CUDA's canonical NaN
    0x7FFFFFFF becomes -0.0), so on those patterns the instruction, which keeps NaN, is the better rounding."""
    canonical = np.uint32(0x7FFFFFFF)
    assert tf32_formula_bits(canonical) == np.float32(-0.0).view(np.uint32)
    assert np.isnan(round_to_tf32(canonical.view(np.float32)))
    nan_bits = np.arange(0x7F800001, 0x80000000, dtype=np.uint32)
    out = tf32_formula_bits(nan_bits)
    lost = ~np.isnan(out.view(np.float32))
    # payloads whose kept bits are all zero round down to infinity; all ones with a carry wrap to -0.0
    assert lost.sum() == 8192
    assert set(out[lost].tolist()) == {0x7F800000, 0x80000000}


def test_attention_rounds_by_the_instruction_on_sm_90_and_by_the_formula_elsewhere():
    src = (gpu.KERNELS_DIR / "attention.cu").read_text()
    formula = re.search(r"float tf32_rne_formula\(float x\) \{(.*?)\n\}", src, re.S).group(1)
    # the same arithmetic as precision._round_mantissa_bits(bits, 13, 0xFFFFE000)
    assert "b += ((b >> 13) & 1u) + 0xFFFu;" in formula and "b & 0xFFFFE000u" in formula
    body = re.search(r"float tf32_rne\(float x\) \{(.*?)\n\}", src, re.S).group(1)
    assert re.search(r"#if defined\(__CUDA_ARCH__\) && __CUDA_ARCH__ >= 900\s+u32 r;\s+"
                     r'asm\("cvt\.rn\.tf32\.f32 %0, %1;" : "=r"\(r\) : "f"\(x\)\);\s+return __uint_as_float\(r\);\s+'
                     r"#else\s+return tf32_rne_formula\(x\);\s+#endif", body), body
    # ties to even (.rn), not cvt.rna (ties away, sm_80's form) anywhere in the file
    assert "cvt.rna" not in src
    assert "tf32_round_check" in gpu.FILE_KERNELS["attention.cu"]
