"""gpu/tma.py without a GPU: the arguments of a 2-D tiled tensor map (what cuTensorMapEncodeTiled is given) and the
refusals of shapes it cannot describe."""
from __future__ import annotations

import pytest

from tr2.cupy_side.gpu import tma


def test_tensor_map_args_of_qkv():
    # gpt2-small's qkv as a (B*T, 3C) matrix of halves: dimensions innermost first, the row stride in bytes
    assert tma.tensor_map_args(8 * 1024, 3 * 768) == ((2304, 8192), (4608,), (64, 64), (1, 1))
    assert tma.tensor_map_args(1, 64) == ((64, 1), (128,), (64, 64), (1, 1))


@pytest.mark.parametrize("rows, cols, elem, match", [(0, 192, 2, "at least 1 row"), (10, 32, 2, "64 columns"),
                                                     (10, 100, 2, "multiple of 16 bytes"),
                                                     (10, 192, 4, "at most 128 bytes")])
def test_tensor_map_args_refuse(rows, cols, elem, match):
    with pytest.raises(ValueError, match=match):
        tma.tensor_map_args(rows, cols, elem_bytes=elem)


def test_the_data_types_are_cuda_h_values():
    assert tma.DATA_TYPE == {"bfloat16": 9, "float16": 6} and tma.SWIZZLE_128B == 3 and tma.OOB_FILL_ZEROS == 0


def test_the_kernel_and_the_map_agree_on_the_box():
    """attention.cu's attention_forward_tma stages 64 x 64 boxes (HS = 64) with the 128B swizzle."""
    from tr2.cupy_side import gpu
    src = (gpu.KERNELS_DIR / "attention.cu").read_text()
    assert "constexpr int BR = 128, BC = 64, NT = BC / 8, BOX = 64 * HS * 2" in src and tma.BOX == 64
