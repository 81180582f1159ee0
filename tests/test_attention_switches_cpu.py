"""gpu/attention.py's choice of kernel form, checked without a GPU: which dK/dV kernel and which forward a row length
takes under the switches (the rules are pure functions of the module's settings). The module imports CuPy at the top
but touches it only when it launches, so it is imported here over a stand-in module, and every module that import
brought in is dropped again afterwards."""
import importlib.util
import sys
from pathlib import Path

import pytest


@pytest.fixture
def attention(over_stand_in_cupy):
    return over_stand_in_cupy("tr2.cupy_side.gpu.attention")


def test_the_tma_dkdv_kernel_is_the_default_at_every_row_length(attention):
    assert attention.WG_DKDV_TMA == 2
    for T in (1, 64, 256, 257, 1024):
        assert attention.dkdv_tma_runs(T, din=False), T


@pytest.mark.parametrize("setting, value", [("WG_DKDV_WARPGROUPS", 1), ("WG_DKDV_WARPGROUPS", 2),
                                            ("WG_DKDV_OVERLAP", True), ("WG_DKDV_PINGPONG", True),
                                            ("WG_DKDV_BLOCKS", 3), ("DS_EVICT_FIRST", False)])
def test_another_dkdv_form_asked_for_wins_over_the_default(attention, monkeypatch, setting, value):
    monkeypatch.setattr(attention, setting, value)
    assert not attention.dkdv_tma_runs(1024, din=False)
    monkeypatch.setattr(attention, "WG_DKDV_TMA", 1)   # asked for explicitly: taken (backward() then names the clash)
    assert attention.dkdv_tma_runs(1024, din=False)


def test_the_dkdv_switch_off_and_the_din_form(attention, monkeypatch):
    assert not attention.dkdv_tma_runs(1024, din=True)
    monkeypatch.setattr(attention, "WG_DKDV_TMA", 0)
    assert not attention.dkdv_tma_runs(1024, din=False)


def test_the_backward_defaults_resident_dkdv_plain_dq(attention):
    # the dK/dV resident (5) on since the twenty-fifth session; the dQ resident measured slower, off
    assert attention.DKDV_TMA_FORM == 5 and attention.DKDV_TMA_FORMS[5][0] == "tmarr"
    assert 5 in attention.DKDV_RESIDENT_FORMS and not attention.DQ_TMA_RESIDENT


def test_the_long_rows_forward_form_applies_over_wg_max_t_only(attention, monkeypatch):
    # on by default since the twentieth session; the resident form 7 since the twenty-fourth
    assert attention.FWD_TMA_LONG == 7 and not attention.FWD_TMA_LONG_ASKED
    assert attention.forward_tma_form(attention.WG_MAX_T) == 0
    assert attention.forward_tma_form(attention.WG_MAX_T + 1) == 7
    monkeypatch.setattr(attention, "FWD_TMA_LONG", 0)
    assert attention.forward_tma_form(1024) == 0
    monkeypatch.setattr(attention, "FWD_TMA_LONG", 3)
    assert attention.forward_tma_form(attention.WG_MAX_T) == 0
    assert attention.forward_tma_form(attention.WG_MAX_T + 1) == 3
    monkeypatch.setattr(attention, "WG_FORWARD_TMA", 1)   # every row length: it wins
    assert attention.forward_tma_form(64) == 1
    assert attention.forward_tma_form(1024) == 1


@pytest.mark.parametrize("setting", ["WG_FORWARD_PIPELINED", "WG_FORWARD_PINGPONG"])
def test_another_forward_form_asked_for_wins_over_the_long_rows_default(attention, monkeypatch, setting):
    monkeypatch.setattr(attention, setting, True)
    assert attention.forward_tma_form(1024) == 0
    monkeypatch.setattr(attention, "FWD_TMA_LONG_ASKED", True)   # asked for explicitly: taken (_launch_wg names the clash)
    assert attention.forward_tma_form(1024) == attention.FWD_TMA_LONG == 7


def test_the_tma_dq_runs_on_long_rows_after_the_wgmma_dkdv_kernels_by_default(attention, monkeypatch):
    assert attention.DQ_TMA == 2
    assert not attention.dq_tma_runs(attention.WG_MAX_T, wg=True)
    assert attention.dq_tma_runs(attention.WG_MAX_T + 1, wg=True)
    assert not attention.dq_tma_runs(1024, wg=False)   # float32, no half roundings: the mma.sync dQ, no error
    monkeypatch.setattr(attention, "DQ_TMA", 1)
    assert attention.dq_tma_runs(64, wg=True)
    with pytest.raises(ValueError, match="^TR2_ATTN_DQ_TMA=1 reads ds_t as the wgmma dK/dV kernels write it"):
        attention.dq_tma_runs(64, wg=False)
    monkeypatch.setattr(attention, "DQ_TMA", 0)
    assert not attention.dq_tma_runs(1024, wg=True)


@pytest.mark.parametrize("key, raw, allowed", [("TR2_ATTN_WG_DKDV_TMA", "3", "0, 1, 2"),
                                               ("TR2_ATTN_DQ_TMA", "on", "0, 1, 2"),
                                               # 6 (dQ folded into the TMA dK/dV kernel) was measured slower and removed: refused
                                               ("TR2_ATTN_DKDV_TMA_FORM", "6", "0, 1, 2, 3, 4, 5"),
                                               ("TR2_ATTN_FWD_TMA_LONG", "9", "0, 1, 2, 3, 4, 5, 6, 7, 8"),
                                               ("TR2_ATTN_DS_GROUP_BATCHES", "-1", "whole numbers from 0 to 64"),
                                               ("TR2_ATTN_DS_GROUP_BATCHES", "2.5", "whole numbers from 0 to 64")])
def test_a_bad_switch_value_stops_the_import_naming_it(monkeypatch, over_stand_in_cupy, key, raw, allowed):
    """A misspelt bench variant must not run as the default and be timed as something else."""
    monkeypatch.setenv(key, raw)
    monkeypatch.delitem(sys.modules, "tr2.cupy_side.gpu.attention", raising=False)   # imported afresh, restored after
    with pytest.raises(ValueError, match=rf"^{key}='{raw}': allowed values are {allowed}$"):
        over_stand_in_cupy("tr2.cupy_side.gpu.attention")


def test_every_tma_dkdv_form_fits_one_block_an_sm(attention):
    """The forms' dynamic shared memory (the H200 gives a block at most 227 KB) and their kernel names."""
    for name, stages in attention.DKDV_TMA_FORMS.values():
        assert attention.dkdv_tma_shared_bytes(64, stages) <= 227 * 1024, name
    assert [n for n, _ in attention.DKDV_TMA_FORMS.values()] == ["tma", "tma3", "tmad", "tmad3", "tmar", "tmarr"]
    assert attention.dkdv_tma_shared_bytes(64) == 86016   # two stages: k, v, 2 x (q, dO, lse, D), dS^T rows, 1 KB
    # the resident form (5): two k and v buffers
    assert attention.DKDV_RESIDENT_FORMS == {5}
    assert attention.dkdv_tma_shared_bytes(64, resident=True) == 86016 + 4 * 64 * 64 * 2 <= 227 * 1024


def test_row_dots_box_reads_the_128b_swizzle():
    """row_dots_box (attention.cu) finds row r's 16-byte chunk ch of a dO box at r * 128 + ((ch ^ (r & 7)) << 4): the
    copy engine's 128-byte swizzle, which XORs byte-offset bits 4-6 with bits 7-9 (CU_TENSOR_MAP_SWIZZLE_128B; the
    same layout the wgmma descriptors of these kernels read). Checked for every row and chunk of a 64 x 64 half box."""
    from tr2.cupy_side import gpu
    src = (gpu.KERNELS_DIR / "attention.cu").read_text()
    assert "box + r * 128 + ((ch ^ (r & 7)) << 4)" in src

    def swizzle_128b(offset: int) -> int:
        return offset ^ (((offset >> 7) & 7) << 4)

    for r in range(64):
        for ch in range(8):
            assert r * 128 + ((ch ^ (r & 7)) << 4) == swizzle_128b(r * 128 + ch * 16)


def test_every_tma_forward_form_fits_one_block_an_sm(attention):
    for form, name in attention.TMA_FORMS.items():
        assert attention.tma_shared_bytes(64, form) <= 227 * 1024, name
    assert attention.tma_shared_bytes(64, 5) == (2 + 4 * 3) * 64 * 64 * 2 + 1024   # tmaw3: three stages of 128 keys
    assert attention.tma_shared_bytes(64, 3) == (2 + 4 * attention.FWD_TMAW_STAGES) * 64 * 64 * 2 + 1024
    # tmawr and tmawrt: form 3's ring and two q buffers
    assert attention.tma_shared_bytes(64, 7) == (4 + 4 * attention.FWD_TMAW_STAGES) * 64 * 64 * 2 + 1024
    assert attention.tma_shared_bytes(64, 8) == attention.tma_shared_bytes(64, 7)


def test_the_resident_dq_is_off_and_takes_two_blocks_an_sm(attention):
    assert attention.DQ_TMA_RESIDENT is False and attention.DQ_RESIDENT_PER_SM == 2
    assert attention.resident_grid(128, 1024, 2 * 132) == 264   # gpt2-medium: 1024 items


def test_the_resident_forward_takes_one_block_an_sm_or_one_an_item(attention):
    assert attention.RESIDENT_FORMS == {7, 8} and attention.TMA_FORMS[7] == "tmawr"
    assert attention.TMA_FORMS[8] == "tmawrt" and attention.FWD_TMA_LONG == 7   # form 8 off until measured
    assert attention.resident_grid(96, 1024, 132) == 132      # gpt2-small: 768 items
    assert attention.resident_grid(2, 1000, 132) == 16        # fewer items than SMs: one block each
    assert attention.resident_grid(1, 1, 132) == 1
    assert attention.resident_grid(128, 1024, 0) == 1         # never an empty grid


def test_the_dq_grid_order_swaps_the_axes_only(attention, monkeypatch):
    assert attention.DQ_TMA_ORDER == 1                       # query blocks fastest: measured faster, on
    monkeypatch.setattr(attention, "DQ_TMA_ORDER", 0)
    assert attention.dq_tma_grid(1024, 96) == ((96, 8), "tma")
    assert attention.dq_tma_grid(1000, 3) == ((3, 8), "tma")
    monkeypatch.setattr(attention, "DQ_TMA_ORDER", 1)
    assert attention.dq_tma_grid(1024, 96) == ((8, 96), "tmaqf")
    assert attention.dq_tma_grid(129, 2) == ((2, 2), "tmaqf")


def test_the_swapped_dq_kernels_are_in_the_source():
    from pathlib import Path
    src = (Path(__file__).resolve().parents[1] / "lib/tr2/cupy_side/kernels/attention.cu").read_text()
    for build, kind in (("bf16r", "KIND_BF16"), ("f16r", "KIND_F16")):
        assert f"ATTN_DQ_TMA_QF({build}, {kind}, 64)" in src


def test_the_backward_runs_all_batches_at_once_by_default(attention):
    assert attention.DS_GROUP_BATCHES == 0                   # groups of batches: not run on a GPU yet, off
    assert attention.ds_groups(8, 12, 1024, 0.0, 0) == [(0, 8)]


@pytest.mark.parametrize("B, batches", [(8, 1), (8, 2), (8, 3), (3, 2), (16, 5), (2, 1)])
def test_the_groups_of_batches_cover_every_batch_once_in_order(attention, B, batches):
    groups = attention.ds_groups(B, 12, 1024, 0.2, batches)
    assert groups[0][0] == 0 and groups[-1][1] == B
    assert all(a[1] == b[0] for a, b in zip(groups, groups[1:]))        # contiguous, in order
    assert all(0 < e - s <= batches for s, e in groups)
    assert len(groups) == -(-B // batches)


@pytest.mark.parametrize("batches", [0, 8, 9])
def test_one_group_where_the_groups_would_hold_every_batch(attention, batches):
    assert attention.ds_groups(8, 12, 1024, 0.0, batches) == [(0, 8)]


def test_no_negative_group_size(attention):
    with pytest.raises(ValueError, match="batches = -1"):
        attention.ds_groups(8, 12, 1024, 0.0, -1)


@pytest.mark.parametrize("B, H, T, p", [(3, 3, 7, 0.2), (4, 3, 7, 0.0), (4, 2, 7, 0.2), (3, 3, 8, 0.2),
                                        (2, 12, 1024, 0.2)])
def test_a_group_draws_the_dropout_counters_of_the_whole_launch(attention, B, H, T, p):
    """The kernels draw element (bh, i, j)'s keep bit from counter offset + ((bh T + i) T + j) // 2 (attention.cu's
    Dropout::index and keep_bits_of); backward() hands a group from batch b0 on offset + b0 H T^2 // 2 and its heads
    numbered from 0. Every element of every group must get the whole launch's counter: where ds_groups makes groups,
    the shift is exact (H T^2 b0 even); where it cannot be (p > 0, H T^2 odd), it keeps one group."""
    offset = 1000003
    groups = attention.ds_groups(B, H, T, p, 1)
    if p == 0.0:   # nothing drawn: groups at any parity
        assert len(groups) == B
        return
    if (H * T * T) % 2:
        assert groups == [(0, B)]
    step = 1 if T < 64 else 31   # every element of the small shapes; both parities of i and j on the long rows
    for b0, b1 in groups:
        shifted = offset + b0 * H * T * T // 2
        for bh in range((b1 - b0) * H):
            for i in range(0, T, step):
                for j in range(0, T, step):
                    local = shifted + ((bh * T + i) * T + j) // 2
                    assert local == offset + (((b0 * H + bh) * T + i) * T + j) // 2, (b0, bh, i, j)


PLAN_SCRIPT = Path(__file__).resolve().parent.parent / "scripts" / "attention_launch_plan.py"


def _backward_launches(attention, monkeypatch, batches):
    """scripts/attention_launch_plan.py's record of backward() (gpt2-small's shape, dropout 0.2) with DS_GROUP_BATCHES
    = batches: [(kernel, grid, args)] and the dqkv it returns."""
    spec = importlib.util.spec_from_file_location("attention_launch_plan_under_test", PLAN_SCRIPT)
    plan = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(plan)
    monkeypatch.setattr(attention, "DS_GROUP_BATCHES", batches)
    launched, dqkv = plan.record_backward(attention, monkeypatch.setattr)
    return [(name, grid, args) for name, grid, _block, args, _k in launched], dqkv


def test_the_groups_launch_each_kernel_on_their_own_rows(attention, monkeypatch):
    """What backward() hands the kernels a group at a time (DS_GROUP_BATCHES 2 on gpt2-small's 8 x 12 heads, dropout
    on), against the whole launch, without a GPU: the row dots once; then per group its dK/dV on the group's rows of
    qkv, dO, lse, D and dqkv (addresses moved by b0 rows of each), one ds_t for all groups, its heads (24) for the
    resident kernel, its dropout offset moved by b0 H T^2 / 2, and its dQ at once after it on the same ds_t; the whole
    launch's arguments are group 0's but for the heads and rows. The GPU tests hold the bits; this holds the plan."""
    B, H, T, C = 8, 12, 1024, 768
    whole, _ = _backward_launches(attention, monkeypatch, 0)
    assert [n for n, _g, _a in whole] == ["attn_row_dots_bf16_hs64", "attn_backward_dkdv_ds_tmarr_l2_bf16r_hs64",
                                          "attn_backward_dq_ds_tmaqf_bf16r_hs64"]
    grouped, dqkv = _backward_launches(attention, monkeypatch, 2)
    names = [n for n, _g, _a in grouped]
    assert names == ["attn_row_dots_bf16_hs64"] + ["attn_backward_dkdv_ds_tmarr_l2_bf16r_hs64",
                                                   "attn_backward_dq_ds_tmaqf_bf16r_hs64"] * 4
    assert grouped[0][2][5:7] == whole[0][2][5:7]   # the row dots over every row, as before (rows, T)
    dkdv0 = grouped[1][2]
    (_, _, (wdq, wtq, wtdo, wlse, wD, wds, ldq, _T, _H, *wtail)) = whole[1]
    assert int(wtail[-2]) == B * H and int(dkdv0[-2]) == 2 * H                    # the resident kernel's heads
    for g in range(4):
        b0 = 2 * g
        _, grid, (dq_, tq, tdo, lse, D, ds_t, gldq, gT, gH, *tail) = grouped[1 + 2 * g]
        assert dq_.data.ptr == dqkv.data.ptr + b0 * T * 3 * C * 2 and dq_.shape[0] == 2
        assert tq == ("map", wtq[1] + b0 * T * 3 * C * 2, 2 * T, 3 * C, 0)
        assert tdo == ("map", wtdo[1] + b0 * T * C * 2, 2 * T, C, 0)
        assert lse.data.ptr == wlse.data.ptr + b0 * H * T * 4 and D.data.ptr == wD.data.ptr + b0 * H * T * 4
        assert ds_t.data.ptr == dkdv0[5].data.ptr and ds_t.shape == (2 * H, T, int(ldq))   # one group's planes
        assert (int(gldq), int(gT), int(gH)) == (int(ldq), T, H)
        assert int(tail[3]) == (1 << 32) + b0 * H * T * T // 2                    # the dropout offset
        assert [int(x) for x in tail[:3] + tail[4:-2]] == [int(x) for x in wtail[:3] + wtail[4:-2]]
        _, qgrid, (qdq, tds, qtq, qT, qH, _rk) = grouped[2 + 2 * g]
        assert qdq.data.ptr == dq_.data.ptr and qgrid == (8, 2 * H)
        assert tds == ("map", ds_t.data.ptr, T, int(ldq), 2 * H) and qtq == tq
    assert wds.shape == (B * H, T, int(ldq))                                      # the whole launch's ds_t: every head

