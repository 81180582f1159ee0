"""scripts/kernel_table.py (issue 8's table) on hand-made profiles: each family's time a step is the sum put there,
a side's failed profile is left out, and the (all) row adds the families."""
import csv
import importlib.util
import json
from pathlib import Path

import pytest

_spec = importlib.util.spec_from_file_location("kernel_table", Path(__file__).parents[1] / "scripts" / "kernel_table.py")
kernel_table = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(kernel_table)


def _profile(folder, name, kernels, steps=10, status="ok"):
    (folder / f"{name}.json").write_text(json.dumps(
        {"status": status, "steps_in_window": steps,
         "kernels": [{"name": n, "total_us": us, "launches": k} for n, us, k in kernels]}))


def test_families_a_step_both_sides(tmp_path, capsys):
    d = tmp_path / "profiles"
    d.mkdir()
    _profile(d, "nanogpt-bfloat16-cupy", [("attn_forward_wg1_bf16r_hs64", 100.0, 10),
                                          ("attn_backward_dkdv_ds_wg1_l2_bf16r_hs64", 300.0, 10),
                                          ("nvjet_sm90_tst_192x128_64x5_1x2_h_bz_coopB_NNT", 500.0, 30)])
    _profile(d, "nanogpt-bfloat16-torch", [("cudnn_generated_fort_native_sdpa_sm90_flash_fprop_wgmma_f16_knob_7", 200.0, 10),
                                           ("nvjet_sm90_tst_192x128_64x5_1x2_h_bz_coopB_NNT", 600.0, 30)])
    _profile(d, "gpt2-small-bfloat16-cupy", [("attn_forward_bf16r_hs64", 1.0, 1)], status="oom")   # left out
    kernel_table.main(str(d))
    rows = list(csv.DictReader(open(tmp_path / "kernel_table.csv")))
    by = {r["family"]: r for r in rows}
    assert {r["model"] for r in rows} == {"nanogpt"}
    assert float(by["attention"]["cupy_us"]) == pytest.approx(40.0)    # (100 + 300) / 10 steps
    assert float(by["attention"]["torch_us"]) == pytest.approx(20.0)
    assert float(by["matmul/gemm"]["cupy_launches"]) == pytest.approx(3.0)
    assert float(by["(all)"]["cupy_us"]) == pytest.approx(90.0) and float(by["(all)"]["torch_us"]) == pytest.approx(80.0)
    out = capsys.readouterr().out
    assert "attn_backward_dkdv_ds_wg1_l2_bf16r_hs64" in out and "cudnn_generated" in out


def test_no_finished_profile_says_so(tmp_path, capsys):
    d = tmp_path / "profiles"
    d.mkdir()
    _profile(d, "nanogpt-bfloat16-cupy", [], status="failed")
    kernel_table.main(str(d))
    assert "no finished profile" in capsys.readouterr().out
    assert not (tmp_path / "kernel_table.csv").exists()


_spec_list = importlib.util.spec_from_file_location("kernel_list", Path(__file__).parents[1] / "scripts" / "kernel_list.py")
kernel_list = importlib.util.module_from_spec(_spec_list)
_spec_list.loader.exec_module(kernel_list)


def test_kernel_list_a_step_longest_first(tmp_path, capsys):
    """scripts/kernel_list.py: each kernel's time and launches a step (total over the window's steps), longest first,
    and their sums; an unfinished profile says so and exits 1."""
    _profile(tmp_path, "p", [("short", 30.0, 10), ("long", 500.0, 20), ("mid", 100.0, 10)])
    assert kernel_list.main(str(tmp_path / "p.json")) == 0
    lines = capsys.readouterr().out.splitlines()
    assert "63.0 us of kernels a step, 4.0 launches" in lines[0]
    assert [ln.split()[-1] for ln in lines[1:]] == ["long", "mid", "short"]
    assert lines[1].split()[:3] == ["50.0", "us/step", "2.0"]
    _profile(tmp_path, "q", [("x", 1.0, 1)], status="oom")
    assert kernel_list.main(str(tmp_path / "q.json")) == 1
    assert "no finished profile" in capsys.readouterr().out
