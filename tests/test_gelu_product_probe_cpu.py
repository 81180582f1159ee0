"""The GELU product probe's pure parts (scripts/probes/gelu_product_probe.py): its rounding check, which decides
whether our product is timed at all, and the shared memory its launches ask for."""
import json
import re
import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts" / "probes"))
import gelu_product_probe as gpp  # noqa: E402


def to_bf16_bits(x: np.ndarray) -> np.ndarray:
    """Round to nearest even, as the kernel's cvt.rn.bf16 does (finite inputs)."""
    u = np.asarray(x, dtype=np.float32).view(np.uint32).astype(np.uint64)
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)


def test_a_correct_rounding_passes_and_a_wrong_product_fails():
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((64, 96)).astype(np.float32), rng.standard_normal((96, 40)).astype(np.float32)
    ref = a.astype(np.float64) @ b.astype(np.float64)
    bad, worst = gpp.rounding_violations(to_bf16_bits(ref.astype(np.float32)), ref)
    assert bad == 0 and worst <= 0.5 + 1e-3
    # one lost k step (a column of a times a row of b missing) is far more than a rounding
    lost = ref - np.outer(a[:, 5], b[5, :])
    bad, worst = gpp.rounding_violations(to_bf16_bits(lost.astype(np.float32)), ref)
    assert bad > 0 and worst > 2


def test_an_element_never_written_fails():
    ref = np.ones((4, 4))
    bits = to_bf16_bits(ref.astype(np.float32))
    bits[2, 3] = 0xFFFF   # the probe's NaN poison
    bad, _ = gpp.rounding_violations(bits, ref)
    assert bad == 1


@pytest.mark.parametrize("name", sorted(gpp.KERNELS))
def test_shared_memory_fits_a_hopper_block(name):
    epilogue, _, _, stages, form = gpp.KERNELS[name]
    need = gpp.shared_bytes(epilogue, stages, form)
    # 227 KB is the most a block may ask for on sm_90, with the static barriers (ptxas: at most "112 bytes smem")
    assert need + 112 <= 227 * 1024
    assert need >= stages * gpp.STAGE_BYTES + gpp.TABLE_BYTES[epilogue] + gpp.staging_bytes(epilogue, form) + 1023


def test_the_quarter_box_swizzle_is_a_permutation_and_conflict_free_from_the_fragments():
    # every 4-byte pair of the 64 x 64 box has its own place, and a warp's 32 stores of one fragment register pair
    # (lane = 4 g + t: row g (+ 8 e, + 16 warp), columns 8 j + 2 t) fall on 32 different banks
    places = {gpp.swizzled_byte(r, c) for r in range(64) for c in range(0, 64, 2)}
    assert places == set(range(0, 64 * 128, 4))
    for warp in range(4):
        for e in range(2):
            for j in range(8):
                banks = {gpp.swizzled_byte(16 * warp + g + 8 * e, 8 * j + 2 * t) // 4 % 32 for g in range(8)
                         for t in range(4)}
                assert len(banks) == 32


def test_stmatrix_rows_are_the_fragments_rows_and_conflict_free():
    # instruction j's matrix (lane // 8) row (lane % 8) is the 16 bytes of warp rows 16 w + 8 (mi % 2) + row, columns
    # 8 (j + mi // 2) ..: the same places the 4-byte stores of the fragments go; each matrix's 8 rows on 8 chunk slots
    for warp in range(4):
        seen = set()
        for j in (0, 2, 4, 6):
            for mi in range(4):
                rows = [gpp.stmatrix_row_byte(warp, 8 * mi + r, j) for r in range(8)]
                assert len({b // 16 % 8 for b in rows}) == 8   # 8 rows x 16 bytes over all 32 banks
                for r, b in enumerate(rows):
                    row, col = 16 * warp + 8 * (mi % 2) + r, 8 * (j + mi // 2)
                    assert b == gpp.swizzled_byte(row, col)
                    assert {gpp.swizzled_byte(row, col + 2 * tt) for tt in range(4)} == {b, b + 4, b + 8, b + 12}
                    seen.add(b)
        assert len(seen) == 16 * 8   # the warp's 16 rows x 8 chunks of the box, each once


def test_form_4_staging_is_two_boxes_a_warpgroup_four_with_gelu():
    assert gpp.staging_bytes("plain", 4) == 2 * 2 * 8192 and gpp.staging_bytes("gelu", 4) == 2 * 4 * 8192


def test_every_kernel_of_the_cu_is_listed():
    text = gpp.CU_FILE.read_text()
    declared = set(re.findall(r"^GELU_PRODUCT(?:_C2|_BB)?\((\w+),", text, re.M))
    assert declared == set(gpp.KERNELS)
    big = set(re.findall(r"^GELU_PRODUCT_BB\((\w+),", text, re.M))
    assert big == gpp.BIG_BOXES and all(not gpp.KERNELS[n][1] and gpp.KERNELS[n][2] == 1 for n in big)


def test_a_big_box_stage_is_the_six_boxes_stage():
    # one 128-row box of A and one 256-row box of B fill a stage exactly as two and four 64-row boxes do
    assert 128 * 64 * 2 + 256 * 64 * 2 == gpp.STAGE_BYTES and gpp.BM == 128 and gpp.BN == 256


def test_the_products_alone_fit_shared_memory_with_four_stages():
    for name, (epilogue, _, _, stages, form) in gpp.KERNELS.items():
        assert gpp.shared_bytes(epilogue, stages, form) <= 227 * 1024, name
    assert gpp.shared_bytes("plain", 4, 3) == 4 * gpp.STAGE_BYTES + 1024


def test_the_mlp_shapes_fit_the_tile():
    for rows, C in ((16384, 384), (8192, 768), (8192, 1024)):
        assert gpp.shape_ok(rows, 4 * C, C)
    assert not gpp.shape_ok(8192, 4 * 100, 100)


def test_selected_keeps_the_order_and_refuses_unknown_names():
    assert list(gpp.selected(gpp.KERNELS)) == list(gpp.KERNELS)
    assert list(gpp.selected(gpp.KERNELS, "gp_dgelu_nn_dp,gp_plain_nn_s")) == ["gp_plain_nn_s", "gp_dgelu_nn_dp"]
    assert "gp_dgelu_nn_dp" not in gpp.selected(gpp.KERNELS, skip="gp_dgelu_nn_dp")
    with pytest.raises(ValueError, match="no kernel gp_nothing; allowed are gp_plain_tn, "):
        gpp.selected(gpp.KERNELS, "gp_nothing")


def _probe_module(name: str):
    """A script of scripts/probes beside gelu_product_probe.py, loaded as a module."""
    import importlib.util
    spec = importlib.util.spec_from_file_location(name, gpp.HERE / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _summary():
    return _probe_module("gelu_product_summary")


def test_the_summary_compares_each_form_with_what_it_replaces_in_its_own_call():
    s = _summary()
    assert s.reference("gp_plain_tn_t") == ("fwd product",) and s.reference("gp_plain_nn_dp") == ("bwd product",)
    assert s.reference("gp_gelu_tn_dp") == ("fwd product", "fwd gelu kernel")
    assert s.reference("gp_dgelu_nn_dp") == ("bwd product", "bwd gelu kernel")
    assert s.reference("gp_plain_tn_dp w/o stores") == ("fwd product",) and s.reference("fwd product") is None
    recs = [{"model": "m", "check": "gp_plain_tn_t", "passed": True},
            {"model": "m", "form": "fwd product", "ms": 0.05}, {"model": "m", "form": "fwd gelu kernel", "ms": 0.03},
            {"model": "m", "form": "gp_plain_tn_t", "ms": 0.055}, {"model": "m", "form": "gp_gelu_tn_t", "ms": 0.072},
            {"model": "m", "form": "gp_dgelu_nn_dp", "ms": 0.09}]   # no bwd rows in this call: left out
    rows = {r["form"]: r for r in s.ratios(recs, "call9")}
    assert set(rows) == {"gp_plain_tn_t", "gp_gelu_tn_t"}
    assert rows["gp_plain_tn_t"]["ratio"] == pytest.approx(1.1) and rows["gp_gelu_tn_t"]["ratio"] == pytest.approx(0.9)
    assert rows["gp_gelu_tn_t"]["against"] == "fwd product + fwd gelu kernel" and rows["gp_gelu_tn_t"]["call"] == "call9"


def _shapes():
    return _probe_module("product_shapes_probe")


def test_the_other_shapes_fit_the_tile_and_their_forms_exist():
    ps = _shapes()
    for name, (M, N, K, mn) in ps.SHAPES.items():
        assert gpp.shape_ok(M, N, K), name
        for form in ps.FORMS[mn]:
            assert gpp.KERNELS[form][1] == mn and gpp.KERNELS[form][0] == "plain", (name, form)
    # gpt2-small's N = 768 gives 192 tiles: a second wave 45% full; gpt2-medium's 1024 gives 256, 1.94 waves
    assert ps.tiles(8192, 768) == 192 and round(ps.waves(8192, 768), 2) == 1.45
    assert ps.tiles(8192, 1024) == 256 and round(ps.waves(8192, 1024), 2) == 1.94


def test_the_shapes_are_selected_by_name_and_unknown_names_refused():
    ps = _shapes()
    assert list(ps.select("")) == list(ps.SHAPES)
    assert list(ps.select("gpt2-medium c_proj forward")) == ["gpt2-medium c_proj forward"]
    with pytest.raises(ValueError, match="no shape 'gpt2-large'; allowed are 'gpt2-small c_proj forward'"):
        ps.select("gpt2-large")


def test_write_records_keeps_going_past_a_failing_item(tmp_path, capsys):
    def run(item):
        if item == "b":
            raise RuntimeError("a fault")
        return [{"model": item, "ms": 1.0}]
    gpp.write_records(tmp_path / "r.jsonl", ["a", "b", "c"], run, "model")
    lines = [json.loads(line) for line in (tmp_path / "r.jsonl").read_text().splitlines()]
    assert lines == [{"model": "a", "ms": 1.0}, {"model": "b", "error": "RuntimeError: a fault"},
                     {"model": "c", "ms": 1.0}]
    assert "b: RuntimeError: a fault" in capsys.readouterr().out


# ---- the sustained (power-limited) timing's summary: GP_SUSTAIN ----

def _round(ms, joules, mhz=1700, watts=690):
    return {"ms": ms, "joules_a_call": joules, "sm_mhz": mhz, "mean_w": watts}


def test_each_form_is_judged_against_what_it_would_replace():
    assert gpp.against_of("gp_plain_tn_t") == ["fwd product"]
    assert gpp.against_of("gp_plain_nn_t") == ["bwd product"]
    assert gpp.against_of("gp_gelu_tn_t") == ["fwd product", "fwd gelu kernel"]
    assert gpp.against_of("gp_dgelu_nn_dp") == ["bwd product", "bwd gelu kernel"]
    assert gpp.against_of("fwd gelu kernel") == ["fwd product"]


def test_sustained_ratios_are_of_medians_and_a_fused_form_against_the_sum():
    rows = {"fwd product": [_round(0.050, 0.030), _round(0.060, 0.034), _round(0.055, 0.032)],
            "fwd gelu kernel": [_round(0.030, 0.010)],
            "gp_plain_tn_t": [_round(0.0605, 0.0352), _round(0.066, 0.036)],
            "gp_gelu_tn_t": [_round(0.080, 0.040)]}
    s = gpp.sustained_summary(rows)
    assert s["fwd product"]["ms"] == pytest.approx(0.055) and s["fwd product"]["x_ms"] is None   # not against itself
    assert s["gp_plain_tn_t"]["ms"] == pytest.approx(0.06325)
    assert s["gp_plain_tn_t"]["x_ms"] == pytest.approx(0.06325 / 0.055)
    assert s["gp_plain_tn_t"]["x_joules"] == pytest.approx(0.0356 / 0.032)
    assert s["gp_gelu_tn_t"]["x_joules"] == pytest.approx(0.040 / (0.032 + 0.010))
    assert s["gp_gelu_tn_t"]["against"] == "fwd product + fwd gelu kernel"


def test_a_missing_reference_or_energy_gives_no_ratio_rather_than_a_wrong_one():
    rows = {"gp_gelu_tn_t": [_round(0.080, 0.040)], "fwd product": [_round(0.05, None)],
            "gp_plain_tn_t": [_round(0.06, None)]}
    s = gpp.sustained_summary(rows)
    assert s["gp_gelu_tn_t"]["x_ms"] is None and s["gp_gelu_tn_t"]["x_joules"] is None   # no gelu kernel measured
    assert s["gp_plain_tn_t"]["x_ms"] == pytest.approx(1.2)
    assert s["gp_plain_tn_t"]["joules"] is None and s["gp_plain_tn_t"]["x_joules"] is None


def test_the_sustained_environment_is_read_with_its_defaults():
    src = Path(gpp.__file__).read_text()
    assert 'os.environ.get("GP_SUSTAIN_S", "1.5")' in src and 'os.environ.get("GP_SUSTAIN_ROUNDS", "2")' in src
    # the forms named: cuBLAS's own names hold spaces; empty names (a trailing comma) are left out
    assert gpp.form_names("fwd product, gp_plain_tn_t,,") == ["fwd product", "gp_plain_tn_t"]
    assert gpp.form_names("") == [] and gpp.form_names(None) == []
