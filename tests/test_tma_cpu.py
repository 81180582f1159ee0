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


def test_tensor_map_args_with_taller_boxes():
    # the GELU product probe's big boxes: A's 128 rows and B's 256 rows of 64 columns in one copy each
    assert tma.tensor_map_args(8192, 768, box_rows=128) == ((768, 8192), (1536,), (64, 128), (1, 1))
    assert tma.tensor_map_args(3072, 768, box_rows=256) == ((768, 3072), (1536,), (64, 256), (1, 1))


@pytest.mark.parametrize("box_rows", [0, 257, -64])
def test_tensor_map_args_refuse_box_rows_past_the_drivers_bound(box_rows):
    with pytest.raises(ValueError, match=f"box_rows {box_rows}; allowed are 1 to 256"):
        tma.tensor_map_args(8192, 768, box_rows=box_rows)


def test_encode_refuses_tall_boxes_on_a_plane_map_before_the_driver():
    class Matrix:   # what encode reads of a device array before it calls the driver
        size, itemsize, flags = 4 * 64 * 64, 2, type("F", (), {"c_contiguous": True})()
    with pytest.raises(ValueError, match="box_rows 128; a plane map's boxes are 64 rows"):
        tma.encode(Matrix(), 64, 64, "bfloat16", planes=4, box_rows=128)


def test_the_data_types_are_cuda_h_values():
    assert tma.DATA_TYPE == {"bfloat16": 9, "float16": 6} and tma.SWIZZLE_128B == 3 and tma.OOB_FILL_ZEROS == 0


def test_the_kernels_and_the_map_agree_on_the_box():
    """attention.cu's TMA kernels (the resident forward and dK/dV, the dQ) stage 64 x 64 boxes (HS = 64) with the 128B
    swizzle."""
    from tr2.cupy_side import gpu
    src = (gpu.KERNELS_DIR / "attention.cu").read_text()
    assert "constexpr int BR = 128, BC = 128, BOX = 64 * HS * 2, S = WS, KB = 2;" in src   # the forward
    assert "constexpr int BR = 128, BC = 64, BOX = 64 * HS * 2;" in src                    # dK/dV
    assert "constexpr int BR = 128, BK = 64, BOX = 64 * HS * 2, S = DQ_TMA_STAGES;" in src  # dQ
    assert tma.BOX == 64


def test_the_wide_forward_stacks_two_boxes_a_tile_and_fits_shared_memory():
    """attention_forward_tma_resident (form 7, 128-key tiles): two 64-row boxes side by side a tile, so that one
    128B-swizzled descriptor (8-row groups 1024 bytes apart) spans them: the second box starts 8 groups on. Its
    stages (FWD_TMAW_STAGES) and two q buffers (gpu/attention.py's tma_shared_bytes,
    which needs CuPy to import: its formula here, and tests/test_attention_switches_cpu.py calls it) fit a block's
    shared memory on the H200 (227 KB)."""
    from tr2.cupy_side import gpu
    src = (gpu.KERNELS_DIR / "attention.cu").read_text()
    box = tma.BOX * 64 * 2
    assert box == (64 // 8) * 1024   # the next box's first row is the 128-key tile's row 64
    wrapper = (gpu.KERNELS_DIR.parent / "gpu" / "attention.py").read_text()
    assert "return (4 + 4 * FWD_TMAW_STAGES) * 64 * hs * 2 + 1024" in wrapper
    assert "attention_forward_tma_resident<K, HS, true, STAGES, TURNS>" in src
    assert "ATTN_FORWARD_TMA_RESIDENT(tmawr, bf16r, KIND_BF16, 64, false, FWD_TMAW_STAGES)" in src
    stages = gpu.kernel_define("attention.cu", "FWD_TMAW_STAGES")
    assert (4 + 4 * stages) * box + 1024 <= 227 * 1024   # two q buffers, the ring of 128-key stages


def test_the_resident_dkdv_walks_the_items_as_the_plain_forms_grid_did():
    """attention_backward_dkdv_tma_resident (form 5) takes item j as key block j / BH of head j % BH (dkdv_item's
    ORDER 0; ORDER 1, the grouped form, and ORDER 2, the descending chain's, tests/test_attention_switches_cpu.py): the grid
    of the plain form (removed since: blockIdx.x the head, blockIdx.y the key block, the first key blocks, which see the
    most queries, first) in launch order. Its producer thread, its lse/D warp and its consumers map an item alike and
    walk the same query tiles of each item (first = key block x 128 / 64 to the last), so the ring's stage and phase
    agree."""
    from tr2.cupy_side import gpu
    src = (gpu.KERNELS_DIR / "attention.cu").read_text()
    body = src.split("__device__ void attention_backward_dkdv_tma_resident(", 1)[1].split("\n}\n", 1)[0]
    assert body.count("dkdv_item<ORDER>(item, BH, nkb, kb, bh);") == 3
    item = src.split("__device__ __forceinline__ void dkdv_item(", 1)[1].split("\n}\n", 1)[0]
    assert "    if constexpr (ORDER == 0) {\n        kb = item / BH;\n        bh = item % BH;\n    } else {" in item
    assert body.count("for (int qt = first; qt < nqt; ++qt, ++it) {") == 2
    assert body.count("for (int qt = (kb * BR) / BC; qt < nqt; ++qt, ++it) {") == 1
    assert "mbar_wait(&kv_empty[kvs], ((n >> 1) - 1) & 1);" in body
    assert body.count("mbar_wait(&kv_full[kvs], (n >> 1) & 1);") == 2   # the lse/D warp and the consumers
    for BH, T in ((96, 1024), (2, 257), (1, 1)):
        nkb = -(-T // 128)
        assert [(j // BH, j % BH) for j in range(BH * nkb)] == [(y, x) for y in range(nkb) for x in range(BH)]


def test_the_resident_forward_walks_the_items_as_form_3s_grid_did():
    """attention_forward_tma_resident (form 7) takes item j as query block nqb - 1 - j / BH of head j % BH: the order
    in which the hardware launched form 3's grid (removed since: blockIdx.x the head, blockIdx.y the query block from
    the longest), so every (head, query block) once, the longest first. Its q buffers and the ring's stage and phase run on across
    items; its two tickets are left at zero by the last block (the atomics are in the source)."""
    from tr2.cupy_side import gpu
    src = (gpu.KERNELS_DIR / "attention.cu").read_text()
    body = src.split("__device__ void attention_forward_tma_resident(", 1)[1].split("\n}\n", 1)[0]
    assert body.count("const int qb = nqb - 1 - item / BH, bh = item % BH, b = bh / H, h = bh % H") == 2
    assert "const int item = resident_item(sched, n);" in body and "resident_done(sched);" in body
    helpers = src.split("__device__ __forceinline__ int resident_item(", 1)[1].split("// ---- form 7", 1)[0]
    assert "return n == 0 ? (int)blockIdx.x : (int)gridDim.x + atomicAdd(&sched[0], 1);" in helpers
    assert "if (atomicAdd(&sched[1], 1) == (int)gridDim.x - 1) {" in helpers and "__threadfence();" in helpers
    assert "mbar_wait(&q_empty[qs], ((n >> 1) - 1) & 1);" in body and "mbar_wait(&q_full[qs], (n >> 1) & 1);" in body
    assert "mbar_wait(&empty[s], ((it / S) - 1) & 1);" in body and "mbar_wait(&full[s], (it / S) & 1);" in body
    for BH, T in ((96, 1024), (128, 1024), (36, 1000), (1, 1), (2, 65)):
        nqb = -(-T // 128)
        order = [(nqb - 1 - j // BH, j % BH) for j in range(BH * nqb)]
        form3 = [(nqb - 1 - y, x) for y in range(nqb) for x in range(BH)]   # blockIdx.x fastest
        assert order == form3


def test_tensor_map_args_of_a_stack_of_matrices():
    # gpt2-small's ds_t, [B*H, T, ldq] halves, read a plane at a time: rows past T are zeros, not the next head's
    assert tma.tensor_map_args_3d(96, 1024, 1024) == ((1024, 1024, 96), (2048, 2048 * 1024), (64, 64, 1), (1, 1, 1))
    assert tma.tensor_map_args_3d(2, 7, 64) == ((64, 7, 2), (128, 128 * 7), (64, 64, 1), (1, 1, 1))
    with pytest.raises(ValueError, match="at least 1 plane"):
        tma.tensor_map_args_3d(0, 7, 64)
    with pytest.raises(ValueError, match="multiple of 16 bytes"):
        tma.tensor_map_args_3d(2, 7, 100)
