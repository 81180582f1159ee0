"""gpu/attention.py's choice of kernel form, checked without a GPU: which dK/dV and dQ kernels and which forward a row
length takes under the switches (the rules are pure functions of the module's settings). The module imports CuPy at the
top but touches it only when it launches, so it is imported here over a stand-in module, and every module that import
brought in is dropped again afterwards."""
import importlib.util
import re
import sys
from pathlib import Path

import numpy as np
import pytest

from tr2.cupy_side import gpu


@pytest.fixture
def attention(over_stand_in_cupy):
    return over_stand_in_cupy("tr2.cupy_side.gpu.attention")


PLAN_SCRIPT = Path(__file__).resolve().parent.parent / "scripts" / "attention_launch_plan.py"


def _recorded(attention, monkeypatch, **shape) -> tuple:
    """scripts/attention_launch_plan.py (a fresh copy of the module) and its record of backward() (half roundings, head
    size 64, attention.cu built for sm_90a; gpt2-small's shape and dropout 0.2 unless `shape` says otherwise)."""
    spec = importlib.util.spec_from_file_location("attention_launch_plan_under_test", PLAN_SCRIPT)
    plan = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(plan)
    launched, _dqkv = plan.record_backward(attention, monkeypatch.setattr, **shape)
    return plan, launched


def _backward_launches(attention, monkeypatch, **shape):
    """_recorded's launches: [(kernel, grid, args)]."""
    _plan, launched = _recorded(attention, monkeypatch, **shape)
    return [(name, grid, args) for name, grid, _block, args, _k in launched]


def plan_launches(attention, monkeypatch, **shape):
    """_recorded's launches whole (kernel, grid, block, arguments, keywords) in the plan's JSON form (arrays by address,
    shape and type), so that two plans compare by value."""
    plan, launched = _recorded(attention, monkeypatch, **shape)
    return [plan.plain(list(launch)) for launch in launched]


@pytest.mark.parametrize("B, H, T, form", [(8, 12, 1024, "grouped"), (8, 16, 1024, "grouped"),
                                           (3, 2, 1000, "grouped"), (2, 3, 257, "grouped"), (64, 6, 256, "chained"),
                                           (2, 3, 7, "chained"), (1, 1, 1, "chained")])
def test_the_backward_defaults_resident_tma_dkdv_and_the_tma_dq_on_long_rows(attention, monkeypatch, B, H, T, form):
    """Under half roundings at head size 64 on Hopper: the row dots, the TMA dK/dV resident (one block an SM or one a
    128-key block, its heads and tickets last), then for rows over WG_MAX_T the grouped dK/dV (ds_t kept in the L2)
    and dQ on the TMA producer, the heads newest first, with the query blocks the grid's x; on the others the chained
    dQ (TR2_ATTN_DQ_CHAIN's default 2, keys ascending: TR2_ATTN_DQ_CHAIN_ASC's default 1), that same resident kernel
    writing dQ too: no ds_t, no dQ kernel."""
    launched = _backward_launches(attention, monkeypatch, B=B, H=H, T=T)
    names = {"grouped": ["attn_backward_dkdv_ds_tmarrg_bf16r_hs64", "attn_backward_dq_ds_tmaqn_bf16r_hs64"],
             "chained": ["attn_backward_dkdv_dqa_bf16r_hs64"]}[form]
    assert [n for n, _g, _a in launched] == ["attn_row_dots_wide_bf16_hs64", *names]
    _, grid, args = launched[1]
    assert grid == (attention.resident_grid(B * H, T, 132),) and int(args[-2]) == B * H
    if form == "grouped":
        _, grid, args = launched[2]
        assert grid == (-(-T // 128), B * H)


def test_the_mma_sync_backward_with_the_wgmma_dkdv_switched_off(attention, monkeypatch):
    """TR2_ATTN_WG_DKDV=0: the mma.sync dK/dV and dQ kernels from ds_t at every row length (a bench variant)."""
    monkeypatch.setattr(attention, "USE_WG_DKDV", False)
    for T in (256, 1024):
        launched = _backward_launches(attention, monkeypatch, T=T)
        assert [n for n, _g, _a in launched] == ["attn_row_dots_wide_bf16_hs64", "attn_backward_dkdv_ds_l2_bf16r_hs64",
                                                 "attn_backward_dq_ds_l2_bf16r_hs64"]


@pytest.mark.parametrize("dq_tma, T, grouped, dq_name", [(1, 256, True, "attn_backward_dq_ds_tmaqn_f16r_hs64"),
                                                        (1, 256, False, "attn_backward_dq_ds_tmaqf_f16r_hs64"),
                                                        (0, 1024, True, "attn_backward_dq_ds_l2_f16r_hs64")])
def test_the_dq_switch_moves_the_dq_kernel_and_the_grouping_with_it(attention, monkeypatch, dq_tma, T, grouped,
                                                                     dq_name):
    """The grouped dK/dV (the default) runs where the TMA dQ follows it, wherever TR2_ATTN_DQ_TMA puts that (the
    chained dQ off here: where the TMA dQ does not follow, its default takes the rows; its own test below)."""
    monkeypatch.setattr(attention, "DQ_CHAIN", 0)
    monkeypatch.setattr(attention, "DQ_TMA", dq_tma)
    monkeypatch.setattr(attention, "DS_GROUPED", grouped)
    launched = _backward_launches(attention, monkeypatch, T=T, dtype="float16")
    dkdv = "attn_backward_dkdv_ds_tmarrg_f16r_hs64" if grouped and dq_tma else "attn_backward_dkdv_ds_tmarr_l2_f16r_hs64"
    assert [n for n, _g, _a in launched] == ["attn_row_dots_wide_f16_hs64", dkdv, dq_name]


def test_the_wide_row_dots_run_where_switched_on_and_both_arrays_start_on_16_bytes(attention, monkeypatch):
    """TR2_ATTN_ROW_DOTS_WIDE (on by default): attn_row_dots_wide_ only where dO and out start on 16 bytes, the 2-byte
    loads' kernel otherwise (the same bits either way), and always where switched off."""
    assert attention.ROW_DOTS_WIDE is True
    assert attention.row_dots_kernel("bf16", 64, 256, 512) == "attn_row_dots_wide_bf16_hs64"
    assert attention.row_dots_kernel("f16", 32, 4096, 16) == "attn_row_dots_wide_f16_hs32"
    assert attention.row_dots_kernel("bf16", 64, 256 + 8, 512) == "attn_row_dots_bf16_hs64"
    assert attention.row_dots_kernel("f16", 64, 256, 512 + 2) == "attn_row_dots_f16_hs64"
    launched = _backward_launches(attention, monkeypatch)
    assert launched[0][0] == "attn_row_dots_wide_bf16_hs64"   # the plan's stand-in arrays are fresh: aligned
    monkeypatch.setattr(attention, "ROW_DOTS_WIDE", False)
    assert attention.row_dots_kernel("bf16", 64, 256, 512) == "attn_row_dots_bf16_hs64"
    assert _backward_launches(attention, monkeypatch)[0][0] == "attn_row_dots_bf16_hs64"


def test_the_long_rows_forward_form_applies_over_wg_max_t_only(attention, monkeypatch):
    # on by default since the twentieth session; the resident form 7 since the twenty-fourth
    assert attention.FWD_TMA_LONG == 7 and attention.FWD_TMAW_STAGES == 2
    assert attention.forward_tma_form(attention.WG_MAX_T) == 0
    assert attention.forward_tma_form(attention.WG_MAX_T + 1) == 7
    monkeypatch.setattr(attention, "FWD_TMA_LONG", 0)   # TR2_ATTN_FWD_TMA_LONG=0: the mma.sync forward on long rows
    assert attention.forward_tma_form(1024) == 0


def test_the_tma_dq_runs_on_long_rows_after_the_wgmma_dkdv_kernel_by_default(attention, monkeypatch):
    assert attention.DQ_TMA == 2
    assert not attention.dq_tma_runs(attention.WG_MAX_T, wg=True)
    assert attention.dq_tma_runs(attention.WG_MAX_T + 1, wg=True)
    assert not attention.dq_tma_runs(1024, wg=False)   # float32, no half roundings: the mma.sync dQ, no error
    monkeypatch.setattr(attention, "DQ_TMA", 1)
    assert attention.dq_tma_runs(64, wg=True)
    with pytest.raises(ValueError, match="^TR2_ATTN_DQ_TMA=1 reads ds_t as the wgmma dK/dV kernel writes it"):
        attention.dq_tma_runs(64, wg=False)
    monkeypatch.setattr(attention, "DQ_TMA", 0)
    assert not attention.dq_tma_runs(1024, wg=True)


@pytest.mark.parametrize("key, raw, allowed", [("TR2_ATTN_DQ_TMA", "on", "0, 1, 2"),
                                               # the TMA forward's forms 1-6 and 8-11 were removed (no gain)
                                               ("TR2_ATTN_FWD_TMA_LONG", "3", "0, 7"),
                                               ("TR2_ATTN_FWD_TMA_LONG", "9", "0, 7"),
                                               ("TR2_ATTN_FWD_TMA_LONG", "10", "0, 7"),
                                               ("TR2_ATTN_FWD_TMA_LONG", "11", "0, 7"),
                                               ("TR2_ATTN_WG_DKDV", "2", "0, 1"),
                                               ("TR2_ATTN_DS_GROUPED", "2", "0, 1"),
                                               ("TR2_ATTN_F32_WG", "1", "0, 2"),
                                               ("TR2_ATTN_F32_WG_DKDV", "3", "0, 1, 2"),
                                               ("TR2_ATTN_F32_WG_DQ", "3", "0, 1, 2")])
def test_a_bad_switch_value_stops_the_import_naming_it(monkeypatch, over_stand_in_cupy, key, raw, allowed):
    """A misspelt bench variant must not run as the default and be timed as something else."""
    monkeypatch.setenv(key, raw)
    monkeypatch.delitem(sys.modules, "tr2.cupy_side.gpu.attention", raising=False)   # imported afresh, restored after
    with pytest.raises(ValueError, match=rf"^{key}='{raw}': allowed values are {allowed}$"):
        over_stand_in_cupy("tr2.cupy_side.gpu.attention")


@pytest.mark.parametrize("key, raw", [("TR2_ATTN_WG_DKDV_TMA", "2"), ("TR2_ATTN_DKDV_TMA_FORM", "5"),
                                      ("TR2_ATTN_DS_EVICT_FIRST", "1"), ("TR2_ATTN_FWD_TMA", "7"),
                                      ("TR2_ATTN_DQ_TMA_ORDER", "1"), ("TR2_ATTN_DS_GROUP_BATCHES", "0"),
                                      ("TR2_ATTN_FWD_PINGPONG", "1"), ("TR2_ATTN_DQ_DS_QUERIES", "64"),
                                      ("TR2_ATTN_F32_BLOCKS", "2"), ("TR2_ATTN_DQ_BULK", "1"),
                                      ("TR2_ATTN_DQ_BULK_DIAG", "0"), ("TR2_ATTN_DKDV_Q128", "1"),
                                      ("TR2_ATTN_DKDV_DEEP", "0"), ("TR2_ATTN_DQ_CHAIN_LAG", "0")])
def test_a_removed_switch_stops_the_import_naming_it(monkeypatch, over_stand_in_cupy, key, raw):
    """A switch whose forms were removed stops the run even at the value that was its default (the run would time
    the default under the variant's name), one line naming it, its value and why."""
    monkeypatch.setenv(key, raw)
    monkeypatch.delitem(sys.modules, "tr2.cupy_side.gpu.attention", raising=False)
    with pytest.raises(gpu.SwitchError, match=rf"^{key}='{raw}': removed with .*measured .*; unset it$"):
        over_stand_in_cupy("tr2.cupy_side.gpu.attention")


def test_the_tma_dkdv_kernel_fits_one_block_an_sm(attention):
    """The resident TMA dK/dV's dynamic shared memory (the H200 gives a block at most 227 KB): two k and v buffers,
    two stages of q, dO, lse and D, the dS^T rows, 1 KB."""
    assert attention.DKDV_TMA_STAGES == 2
    assert attention.dkdv_tma_shared_bytes(64) == 86016 + 4 * 64 * 64 * 2 <= 227 * 1024
    assert attention.dkdv_tma_kernel("bf16r", 64) == ("attn_backward_dkdv_ds_tmarr_l2_bf16r_hs64",
                                                      attention.dkdv_tma_shared_bytes(64))


@pytest.mark.parametrize("T, dtype, names", [
    (1024, "bfloat16", ["attn_row_dots_wide_bf16_hs64", "attn_backward_dkdv_ds_tmarrg_bf16r_hs64",
                        "attn_backward_dq_ds_tmaqn_bf16r_hs64"]),
    (257, "float16", ["attn_row_dots_wide_f16_hs64", "attn_backward_dkdv_ds_tmarrg_f16r_hs64",
                      "attn_backward_dq_ds_tmaqn_f16r_hs64"]),
    # rows of 256 and fewer, the chained dQ off: the mma.sync dQ reads ds_t (evict-first), the ungrouped kernels
    (256, "bfloat16", ["attn_row_dots_wide_bf16_hs64", "attn_backward_dkdv_ds_tmarr_l2_bf16r_hs64",
                       "attn_backward_dq_ds_l2_bf16r_hs64"])])
def test_the_grouped_backward_runs_where_the_tma_dq_follows(attention, monkeypatch, T, dtype, names):
    """TR2_ATTN_DS_GROUPED=1 (on by default since the sixty-first session): the grouped dK/dV and the newest-first TMA
    dQ on rows over WG_MAX_T, with the ungrouped form's grids, shared memory and arguments; the ungrouped form
    elsewhere. (The chained dQ off: on rows of at most WG_MAX_T its default takes them.)"""
    assert attention.DS_GROUPED is True
    monkeypatch.setattr(attention, "DQ_CHAIN", 0)
    launched = _backward_launches(attention, monkeypatch, T=T, dtype=dtype)
    monkeypatch.setattr(attention, "DS_GROUPED", False)
    ungrouped = _backward_launches(attention, monkeypatch, T=T, dtype=dtype)
    monkeypatch.setattr(attention, "DS_GROUPED", True)
    assert [n for n, _g, _a in launched] == names
    assert [(g, len(a)) for _n, g, a in launched] == [(g, len(a)) for _n, g, a in ungrouped]
    if T > attention.WG_MAX_T:
        assert [n for n, _g, _a in ungrouped][1:] == [names[1].replace("tmarrg_", "tmarr_l2_"),
                                                      names[2].replace("tmaqn", "tmaqf")]
    if T > attention.WG_MAX_T:
        assert attention.dkdv_tma_kernel("bf16r", 64, grouped=True)[1] == attention.dkdv_tma_shared_bytes(64)


@pytest.mark.parametrize("T, dtype", [(1024, "bfloat16"), (257, "float16"), (1000, "bfloat16"), (256, "bfloat16"),
                                     (7, "float16")])
def test_the_chained_dq_is_one_kernel_after_the_row_dots_that_zero_its_counters(attention, monkeypatch, T, dtype):
    """TR2_ATTN_DQ_CHAIN: 1 wherever the TMA dK/dV runs, rows of any length; 2 (the default) where the TMA dQ would not
    follow (rows of at most WG_MAX_T, unless TR2_ATTN_DQ_TMA=1; at every length with TR2_ATTN_DQ_TMA=0); 0 never. Where
    it runs: the row dots, given the chain's counters (a head and 64-query tile each) to zero, then
    attn_backward_dkdv_dqa_ (the ascending chain, DQ_CHAIN_ASC's default) on the resident grid, with the running sums'
    slots (64 x 64 floats a head and tile) and the counters in ds_t's and ldq's places; no dQ kernel. With the wgmma
    dK/dV switched off nothing moves."""
    assert attention.DQ_CHAIN == 2
    B, H = 2, 3
    kind, build = ("bf16", "bf16r") if dtype == "bfloat16" else ("f16", "f16r")
    chained = [f"attn_row_dots_wide_{kind}_hs64", f"attn_backward_dkdv_dqa_{build}_hs64"]

    def names(chain, dq_tma=2):
        monkeypatch.setattr(attention, "DQ_CHAIN", chain)
        monkeypatch.setattr(attention, "DQ_TMA", dq_tma)
        return [n for n, _g, _a in _backward_launches(attention, monkeypatch, B=B, H=H, T=T, dtype=dtype)]

    unchained = names(0)
    assert names(2) == (chained if T <= attention.WG_MAX_T else unchained)
    assert names(2, dq_tma=1) == names(0, dq_tma=1) != chained   # the TMA dQ follows at every length: no chain
    assert names(2, dq_tma=0) == chained                          # the mma.sync dQ would follow at every length
    monkeypatch.setattr(attention, "DQ_TMA", 2)
    monkeypatch.setattr(attention, "DQ_CHAIN", 0)
    default = _backward_launches(attention, monkeypatch, B=B, H=H, T=T, dtype=dtype)
    monkeypatch.setattr(attention, "DQ_CHAIN", 1)
    launched = _backward_launches(attention, monkeypatch, B=B, H=H, T=T, dtype=dtype)
    assert [n for n, _g, _a in launched] == chained
    nqt = -(-T // 64)
    (_, _, dots), (_, grid, args) = launched
    turns, acc = args[6], args[5]
    assert dots[1] is turns and int(dots[2]) == B * H * nqt and turns.dtype == np.int32
    assert acc.shape == (B * H * nqt, 64 * 64) and acc.dtype == np.float32
    assert grid == default[1][1] and len(args) == len(default[1][2])   # the unchained kernel's grid and arity
    assert int(args[-2]) == B * H
    assert attention.dkdv_chain_shared_bytes(64) == attention.dkdv_tma_shared_bytes(64) - 8 * 16 * 72 * 2 + 2 * 8192 \
        + 16384 <= 227 * 1024
    monkeypatch.setattr(attention, "USE_WG_DKDV", False)
    assert [n for n, _g, _a in _backward_launches(attention, monkeypatch, B=B, H=H, T=T, dtype=dtype)] == [
        f"attn_row_dots_wide_{kind}_hs64", f"attn_backward_dkdv_ds_l2_{build}_hs64",
        f"attn_backward_dq_ds_l2_{build}_hs64"]   # the mma.sync kernels: no chain


@pytest.mark.parametrize("B, H, T, chain", [(8, 12, 1024, 1), (64, 6, 256, 2), (2, 3, 1, 1)])
def test_the_ascending_chain_is_the_chained_launch_under_another_kernel(attention, monkeypatch, B, H, T, chain):
    """TR2_ATTN_DQ_CHAIN_ASC (1 by default since the sixty-fourth session): wherever the chain runs, the same launch
    (grid, block, shared memory, every argument: the key-block-major tickets come from the kernel's ORDER 0, no table)
    of the ascending kernel, and with 0 of the descending one; nothing where the chain does not run."""
    assert attention.DQ_CHAIN_ASC is True
    monkeypatch.setattr(attention, "DQ_CHAIN", chain)
    ascending = plan_launches(attention, monkeypatch, B=B, H=H, T=T)
    monkeypatch.setattr(attention, "DQ_CHAIN_ASC", False)
    descending = plan_launches(attention, monkeypatch, B=B, H=H, T=T)
    assert [launch[0] for launch in ascending] == ["attn_row_dots_wide_bf16_hs64", "attn_backward_dkdv_dqa_bf16r_hs64"]
    assert [launch[0] for launch in descending][1] == "attn_backward_dkdv_dqc_bf16r_hs64"
    assert [launch[1:] for launch in ascending] == [launch[1:] for launch in descending]
    monkeypatch.setattr(attention, "DQ_CHAIN", 0)   # no chain: nothing ascending
    monkeypatch.setattr(attention, "DQ_CHAIN_ASC", True)
    assert all("dkdv_dq" not in launch[0] for launch in plan_launches(attention, monkeypatch, B=B, H=H, T=T))


@pytest.mark.parametrize("env, ascending", [({}, True), ({"TR2_ATTN_DQ_CHAIN_ASC": "0"}, False),
                                            ({"TR2_ATTN_DQ_CHAIN_ASC": "1"}, True), ({"TR2_ATTN_DQ_CHAIN_ASC": "2"}, None),
                                            ({"TR2_ATTN_DQ_CHAIN_STAGGER": "8"}, None),
                                            ({"TR2_ATTN_DQ_CHAIN_LAG": "1"}, None)])
def test_the_chain_s_direction_from_the_environment(over_stand_in_cupy, monkeypatch, env, ascending):
    """TR2_ATTN_DQ_CHAIN_ASC read at import: unset or 1 ascending, 0 descending, any other value stops the run naming
    it; the removed staggered and lagged chains' switches stop it too (gpu.RETIRED), naming the switch and why."""
    for key in ("TR2_ATTN_DQ_CHAIN_ASC", "TR2_ATTN_DQ_CHAIN_STAGGER", "TR2_ATTN_DQ_CHAIN_LAG"):
        monkeypatch.delenv(key, raising=False)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    monkeypatch.delitem(sys.modules, "tr2.cupy_side.gpu.attention", raising=False)
    if ascending is None:
        key, value = next(iter(env.items()))
        shown = (f"^{key}='{value}': allowed values are 0, 1$" if key == "TR2_ATTN_DQ_CHAIN_ASC"
                 else f"^{key}='{value}': removed with the descending chain's")
        with pytest.raises(gpu.SwitchError, match=shown):
            over_stand_in_cupy("tr2.cupy_side.gpu.attention")
        return
    assert over_stand_in_cupy("tr2.cupy_side.gpu.attention").DQ_CHAIN_ASC is ascending


@pytest.mark.parametrize("env, chain", [({}, 2), ({"TR2_ATTN_DQ_CHAIN": "0"}, 0), ({"TR2_ATTN_DQ_CHAIN": "3"}, None)])
def test_the_chain_from_the_environment(monkeypatch, over_stand_in_cupy, env, chain):
    """TR2_ATTN_DQ_CHAIN read at import: unset 2, which runs the chain on the char model's rows of 256; 0 the unchained
    kernels there; a value outside 0, 1 and 2 stops the import, naming the key, the value and what is allowed."""
    monkeypatch.delenv("TR2_ATTN_DQ_CHAIN", raising=False)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    monkeypatch.delitem(sys.modules, "tr2.cupy_side.gpu.attention", raising=False)
    if chain is None:
        with pytest.raises(gpu.SwitchError, match="^TR2_ATTN_DQ_CHAIN='3': allowed values are 0, 1, 2$"):
            over_stand_in_cupy("tr2.cupy_side.gpu.attention")
        return
    attention = over_stand_in_cupy("tr2.cupy_side.gpu.attention")
    assert attention.DQ_CHAIN == chain
    kernel = _backward_launches(attention, monkeypatch, B=64, H=6, T=256)[1][0]
    assert kernel == ("attn_backward_dkdv_dqa_bf16r_hs64" if chain else "attn_backward_dkdv_ds_tmarr_l2_bf16r_hs64")


@pytest.mark.parametrize("BH, nkb, grid", [(96, 8, 132), (128, 8, 132), (36, 8, 132), (5, 3, 7), (1, 1, 1)])
def test_the_chain_takes_each_group_shortest_key_block_first(attention, BH, nkb, grid):
    """chain_items (attention.cu's dkdv_item<2>): grouped_items' groups, the key blocks from the last down, so that a
    chain turn (key block kb waits for kb + 1 of its head) waits only on an earlier ticket: no deadlock whatever
    the scheduler does."""
    order = attention.chain_items(BH, nkb, grid)
    assert sorted(order) == [(kb, bh) for kb in range(nkb) for bh in range(BH)]
    ticket = {item: n for n, item in enumerate(order)}
    assert all(ticket[(kb + 1, bh)] < ticket[(kb, bh)] for kb in range(nkb - 1) for bh in range(BH))
    G = -(-grid // nkb)
    assert order[:min(G, BH)] == [(nkb - 1, bh) for bh in range(min(G, BH))]


@pytest.mark.parametrize("BH, nkb, grid", [(96, 8, 132), (128, 8, 132), (36, 8, 132), (2, 8, 16), (6, 9, 54),
                                           (384, 2, 132), (1, 1, 1), (5, 3, 7)])
def test_the_grouped_items_cover_every_key_block_of_every_head_once(attention, BH, nkb, grid):
    """The grouped dK/dV's order (grouped_items, attention.cu's dkdv_item<1>): every (key block, head) once; heads in
    groups of ceil(grid / nkb) in order, the last group what is left; within a group key block by key block, the
    longest (key block 0) first."""
    order = attention.grouped_items(BH, nkb, grid)
    assert sorted(order) == [(kb, bh) for kb in range(nkb) for bh in range(BH)]
    G = -(-grid // nkb)
    for start in range(0, BH * nkb, G * nkb):
        part = order[start:start + G * nkb]
        heads = sorted({bh for _kb, bh in part})
        assert heads == list(range(start // nkb, min(BH, start // nkb + G)))
        assert [kb for kb, _bh in part] == sorted(kb for kb, _bh in part)
    if G >= BH:   # one group: the default's order
        assert order == [(j // BH, j % BH) for j in range(BH * nkb)]


def test_the_tma_forward_fits_one_block_an_sm(attention):
    # tmawr: FWD_TMAW_STAGES stages of 128 keys (two k and two v boxes) and two buffers of the two q boxes
    assert attention.tma_shared_bytes(64) == (4 + 4 * attention.FWD_TMAW_STAGES) * 64 * 64 * 2 + 1024 <= 227 * 1024


@pytest.mark.parametrize("use_dropout", [0, 1])
def test_the_tma_forward_launches_its_kernel_and_ring(attention, monkeypatch, use_dropout):
    """TR2_ATTN_FWD_TMA_LONG's form 7 on long rows: a producer and two consumer warpgroups (128 queries an item), one
    block an SM or one an item, the shared memory of its two stages, with or without dropout; the tensor map of qkv in
    qkv's place and the heads and tickets last."""
    form, kernel, stages = 7, "tmawr", 2
    import types

    import numpy as np
    spec = importlib.util.spec_from_file_location("attention_launch_plan_under_test", PLAN_SCRIPT)
    plan = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(plan)
    launched = []
    monkeypatch.setattr(attention, "FWD_TMA_LONG", form)
    monkeypatch.setattr(attention, "launch", lambda f, name, grid, block, args, **k: launched.append((name, grid, block,
                                                                                                     args, k)))
    monkeypatch.setattr(attention._tma, "encode", lambda m, rows, cols, dt: ("map", m.data.ptr, rows, cols))
    monkeypatch.setattr(attention.runtime, "sm_count", lambda d: 132)
    monkeypatch.setattr(attention, "cp", types.SimpleNamespace(
        cuda=types.SimpleNamespace(Device=lambda: types.SimpleNamespace(id=0))))
    tickets = plan.FakeArray((2,), np.int32, 7 << 32)
    ctx = types.SimpleNamespace(dtype="bfloat16", ws=types.SimpleNamespace(zeros=lambda name, shape, dt: tickets))
    for B, H, T in ((2, 2, 1000), (8, 12, 1024)):
        launched.clear()
        qkv = plan.FakeArray((B, T, 3 * H * 64), np.uint16, 1 << 33)
        attention._launch_wg(ctx, T, 64, B * H, "bf16r", ("out", "lse", qkv, T, H, 1, use_dropout, "seed"))
        (name, grid, block, args, k), = launched
        assert name == f"attn_forward_{kernel}_bf16r_hs64" and block == 384
        assert grid == (min(132, B * H * -(-T // 128)),)
        assert args[:3] == ("out", "lse", ("map", 1 << 33, B * T, 3 * H * 64))
        assert args[3:8] == (T, H, 1, use_dropout, "seed")
        assert int(args[8]) == B * H and args[9] is tickets
        assert k == {"shared_mem": (4 + 4 * stages) * 64 * 64 * 2 + 1024, "prefer_shared": True}


def test_the_resident_kernels_take_one_block_an_sm_or_one_an_item(attention):
    assert attention.resident_grid(96, 1024, 132) == 132      # gpt2-small: 768 items
    assert attention.resident_grid(2, 1000, 132) == 16        # fewer items than SMs: one block each
    assert attention.resident_grid(1, 1, 132) == 1
    assert attention.resident_grid(128, 1024, 0) == 1         # never an empty grid


def test_the_dq_grid_takes_the_query_blocks_fastest(attention):
    assert attention.dq_tma_grid(1024, 96) == (8, 96)
    assert attention.dq_tma_grid(1000, 3) == (8, 3)
    assert attention.dq_tma_grid(129, 2) == (2, 2)


def test_the_swapped_dq_kernels_are_in_the_source():
    src = (gpu.KERNELS_DIR / "attention.cu").read_text()
    for build, kind in (("bf16r", "KIND_BF16"), ("f16r", "KIND_F16")):
        assert f"ATTN_DQ_TMA_QF({build}, {kind}, 64)" in src


def test_attention_cu_instantiates_the_programs_kernels_only():
    """attention.cu's instantiation lines: the kernels the switches at their defaults reach (and those TR2_ATTN_WG_DKDV=0,
    TR2_ATTN_DQ_TMA, TR2_ATTN_FWD_TMA_LONG=0, TR2_ATTN_F32_WG_DKDV and TR2_ATTN_F32_WG_DQ reach, and the half builds'
    recomputing backward, USE_DS's oracle), no form that was measured slower and removed (docs/perf.md; before the
    removal, at ee6b673)."""
    src = (gpu.KERNELS_DIR / "attention.cu").read_text()
    lines = re.findall(r"^ATTN_\w+\(.*\)$", src, re.M)
    want = []
    for hs in (64, 32):
        want += [f"ATTN_KERNELS_F32(f32, true, {hs})", f"ATTN_KERNELS_F32(tf32, false, {hs})"]
        want += [f"ATTN_KERNELS_F32_STREAMED(f32s, true, {hs})", f"ATTN_KERNELS_F32_STREAMED(tf32s, false, {hs})"]
        want += [f"ATTN_KERNELS_HALF({b}, {k}, {s}, {hs})" for b, k, s in
                 (("bf16", "KIND_BF16", "true"), ("bf16r", "KIND_BF16", "false"), ("f16", "KIND_F16", "true"),
                  ("f16r", "KIND_F16", "false"))]
        want += [f"ATTN_ROW_DOTS(bf16, KIND_BF16, {hs})", f"ATTN_ROW_DOTS(f16, KIND_F16, {hs})"]
    want += [f"ATTN_DS({b}, {k}, {hs})" for hs in (64, 32) for b, k in (("bf16r", "KIND_BF16"), ("f16r", "KIND_F16"))]
    want += ["ATTN_FORWARD_WG1(bf16r, KIND_BF16, 64)", "ATTN_FORWARD_WG1(f16r, KIND_F16, 64)"]
    want += ["ATTN_FORWARD_WGF(2, f32, true, 64)", "ATTN_FORWARD_WGF(2, tf32, false, 64)", "ATTN_BACKWARD_DKDV_WGF(2, 64)",
             "ATTN_BACKWARD_DQ_WGF(2, 64)"]
    for macro in ("ATTN_FORWARD_TMA_RESIDENT(tmawr, {b}, {k}, 64, false, FWD_TMAW_STAGES)",
                  "ATTN_DKDV_TMA_RESIDENT({b}, {k}, 64)",
                  "ATTN_DQ_TMA_QF({b}, {k}, 64)",
                  "ATTN_DKDV_TMA_GROUPED({b}, {k}, 64)", "ATTN_DQ_TMA_QN({b}, {k}, 64)",   # TR2_ATTN_DS_GROUPED=1
                  "ATTN_DKDV_TMA_CHAIN({b}, {k}, 64)",   # TR2_ATTN_DQ_CHAIN
                  "ATTN_DKDV_TMA_CHAIN_ASC({b}, {k}, 64)"):   # TR2_ATTN_DQ_CHAIN_ASC
        want += [macro.format(b=b, k=k) for b, k in (("bf16r", "KIND_BF16"), ("f16r", "KIND_F16"))]
    assert lines == want
    assert "#define ATTN_DS(BUILD, K, HS) ATTN_DS_FORM(l2_, true, BUILD, K, HS)" in src   # the evict-first forms only


class _Ctx:
    def __init__(self, dtype, tf32, half_roundings=False):
        self.dtype, self.tf32, self.half_roundings = dtype, tf32, half_roundings
        self.half = dtype != "float32"


def test_float32_attention_in_tf32_pairs_only_when_asked(attention, monkeypatch):
    """TR2_ATTN_F32_PAIRS: float32 with TF32 takes the tf32 kernels by default and the plain build's f32 kernels (TF32
    pairs, PyTorch's memory-efficient float32 arithmetic) when set; plain float32 and the half builds do not move."""
    assert attention.F32_PAIRS is False
    cases = [(_Ctx("float32", True), "tf32", "f32"), (_Ctx("float32", False), "f32", "f32"),
             (_Ctx("bfloat16", True, True), "bf16r", "bf16r"), (_Ctx("float16", True), "f16", "f16")]
    for ctx, off, _on in cases:
        assert attention.build_name(ctx) == off
    monkeypatch.setattr(attention, "F32_PAIRS", True)
    for ctx, _off, on in cases:
        assert attention.build_name(ctx) == on


def test_float32_attention_streamed_only_when_asked(attention, monkeypatch):
    """TR2_ATTN_F32_STREAM: the float32 builds take the synchronous kernels by default and the streamed ones (f32s,
    tf32s: two staging buffers, so twice the streamed tiles' shared memory, and the largest carveout) when set, the
    pairs switch composing with it; the half builds do not move."""
    assert attention.F32_STREAM is False
    tf32, plain, half = _Ctx("float32", True), _Ctx("float32", False), _Ctx("bfloat16", True, True)
    before = {k: attention.shared_bytes(tf32, k) for k in ("forward", "backward_dq", "backward_dkdv")}
    half_before = attention.shared_bytes(half, "forward")
    monkeypatch.setattr(attention, "F32_STREAM", True)
    assert [attention.build_name(c) for c in (tf32, plain, half)] == ["tf32s", "f32s", "bf16r"]
    monkeypatch.setattr(attention, "F32_PAIRS", True)
    assert attention.build_name(tf32) == "f32s"
    row = 68 * 4   # a staged float32 row (padded)
    for k, rows in (("forward", 2 * 64), ("backward_dq", 2 * 64), ("backward_dkdv", 2 * 64)):
        extra = 2 * 64 * 4 if k == "backward_dkdv" else 0   # a second buffer's lse and D rows
        assert attention.shared_bytes(tf32, k) == before[k] + rows * row + extra, k
    # two blocks an SM fit the H100's and H200's 227 KB a block of shared memory each (228 KB an SM, 1 KB reserved)
    assert 2 * (max(attention.shared_bytes(tf32, k) for k in before) + 1024) <= 228 * 1024
    assert attention.shared_bytes(half, "forward") == half_before


def test_float32_streamed_kernels_ask_for_the_carveout(attention, monkeypatch):
    """The streamed float32 kernels launch with prefer_shared (without it the driver may pick a split that fits one
    block an SM); the synchronous ones, and the half builds' mma.sync kernels, as before."""
    seen = []
    monkeypatch.setattr(attention, "launch", lambda f, name, *a, **k: seen.append((name, k.get("prefer_shared"))))
    ctx = _Ctx("float32", True)
    attention._launch(ctx, "forward", 64, 1024, 96, ())
    monkeypatch.setattr(attention, "F32_STREAM", True)
    attention._launch(ctx, "forward", 64, 1024, 96, ())
    attention._launch(_Ctx("bfloat16", False), "forward", 64, 1024, 96, ())
    assert seen == [("attn_forward_tf32_hs64", False), ("attn_forward_tf32s_hs64", True), ("attn_forward_bf16_hs64", False)]


def test_the_float32_wgmma_forward_by_default_at_head_size_64_on_sm_90a(attention, monkeypatch):
    """TR2_ATTN_F32_WG: 2 by default (measured faster, docs/perf.md, forty-eighth session); the float32 builds (TF32,
    pairs, plain) take attention_forward_wgf where attention.cu was built for sm_90a and the head size is 64; 0 gives
    them the mma.sync forward back; the half builds, head size 32 and other builds of the file do not move. Its shared
    memory: the block's q (two warpgroups' rows) and two buffers of k and v^T, twice over with pairs, and the landing
    buffer of the next tile: the pairs build's block fits the 227 KB a block may take."""
    assert attention.F32_WG == 2
    monkeypatch.setattr(attention.runtime, "built_for", lambda f: "sm_90a")
    tf32, plain, half = _Ctx("float32", True), _Ctx("float32", False), _Ctx("bfloat16", True, True)
    assert attention.uses_f32_wg(tf32, 64) and attention.uses_f32_wg(plain, 64)
    assert not attention.uses_f32_wg(tf32, 32) and not attention.uses_f32_wg(half, 64)
    monkeypatch.setattr(attention, "F32_WG", 0)
    assert not attention.uses_f32_wg(tf32, 64) and not attention.uses_f32_wg(plain, 64)
    monkeypatch.setattr(attention, "F32_WG", 2)
    monkeypatch.setattr(attention.runtime, "built_for", lambda f: "sm_90")
    assert not attention.uses_f32_wg(tf32, 64)
    land = 64 * 64 * 4 + 64 * 72 * 4   # the next k and v tile, raw, v's rows padded
    assert attention.f32_wg_shared_bytes(2, False) == (128 + 256) * 64 * 4 + land == 130 * 1024
    assert attention.f32_wg_shared_bytes(2, True) == 2 * (128 + 256) * 64 * 4 + land == 226 * 1024 <= 227 * 1024


@pytest.mark.parametrize("switch", ["F32_WG_DQ", "F32_WG_DKDV"])
def test_the_float32_wgmma_backward_past_256_in_the_one_product_build(attention, monkeypatch, switch):
    """TR2_ATTN_F32_WG_DQ and TR2_ATTN_F32_WG_DKDV: 2 by default, attention_backward_dq_wgf or _dkdv_wgf where T > 256
    (each measured faster at T = 1024 and slower at 256: docs/perf.md, forty-ninth and fiftieth sessions), 1 at every
    T, 0 never; only in float32 with one TF32 product, at head size 64, where attention.cu was built for sm_90a. TF32
    pairs (plain float32, or TF32 with TR2_ATTN_F32_PAIRS) and the half builds keep their kernels."""
    uses = getattr(attention, "uses_" + switch.lower())
    assert getattr(attention, switch) == 2 and getattr(attention, switch + "_MIN_T") == 256
    monkeypatch.setattr(attention.runtime, "built_for", lambda f: "sm_90a")
    tf32, plain, half = _Ctx("float32", True), _Ctx("float32", False), _Ctx("bfloat16", True, True)
    assert [uses(tf32, 64, T) for T in (1, 255, 256, 257, 1024)] == [False] * 3 + [True] * 2
    monkeypatch.setattr(attention, switch, 1)
    assert uses(tf32, 64, 1) and uses(tf32, 64, 256)
    monkeypatch.setattr(attention, switch, 0)
    assert not uses(tf32, 64, 1024)
    for on in (1, 2):
        monkeypatch.setattr(attention, switch, on)
        assert uses(tf32, 64, 1024)
        assert not uses(plain, 64, 1024) and not uses(half, 64, 1024)
        assert not uses(tf32, 32, 1024)
        monkeypatch.setattr(attention, "F32_PAIRS", True)
        assert not uses(tf32, 64, 1024)
        monkeypatch.setattr(attention, "F32_PAIRS", False)
        monkeypatch.setattr(attention.runtime, "built_for", lambda f: "sm_90")
        assert not uses(tf32, 64, 1024)
        monkeypatch.setattr(attention.runtime, "built_for", lambda f: "sm_90a")


def test_the_float32_wgmma_backward_kernels_fit_a_blocks_shared_memory(attention):
    """attention_backward_dq_wgf: the block's q and dO (128 queries), two buffers of k, v and k^T, the landing of the
    next k and v (as staged) and k^T (rows padded to 72 floats). attention_backward_dkdv_wgf: the block's k and v (128
    keys), the tile's four staged tiles, both landings and two buffers of lse and D."""
    qdo, buffers, land = 2 * 128 * 64 * 4, 2 * 3 * 64 * 64 * 4, 2 * 64 * 64 * 4 + 64 * 72 * 4
    assert attention.f32_wg_dq_shared_bytes() == qdo + buffers + land == 215040 <= 227 * 1024
    kv, tiles, land_rows, land_cols, lse_d = 2 * 128 * 64 * 4, 4 * 64 * 64 * 4, 2 * 64 * 64 * 4, 2 * 64 * 72 * 4, 4 * 64 * 4
    assert attention.f32_wg_dkdv_shared_bytes() == kv + tiles + land_rows + land_cols + lse_d == 201728 <= 227 * 1024


def test_the_wgmma_dq_refuses_arrays_off_16_bytes_naming_them(attention):
    """attention_backward_dq_wgf reads dO and the forward's output 16 bytes a load (its row dots): an array that does
    not start on 16 bytes is refused before the launch, with its name, shape and address; aligned ones pass."""
    class _Array:
        def __init__(self, ptr):
            self.data, self.shape = type("Mem", (), {"ptr": ptr})(), (8, 1024, 768)
    attention._aligned16("the row dots", dout=_Array(0x7F0000000000), out=_Array(0x7F0000000100))
    with pytest.raises(ValueError, match=r"attention: out \(shape \(8, 1024, 768\)\) starts at 0x7f0000000104, not on"):
        attention._aligned16("the row dots", dout=_Array(0x7F0000000000), out=_Array(0x7F0000000104))
