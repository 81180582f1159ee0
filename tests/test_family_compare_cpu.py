"""scripts/family_compare.py: two profiles by kernel family, the families stage's rules."""
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts"))
import family_compare as fc  # noqa: E402
from tr2.families import load_rules  # noqa: E402


def _profile(kernels, steps=30, status="ok", side="cupy", mode=None):
    return {"status": status, "steps_in_window": steps, "kernels": kernels, "side": side, "mode": mode,
            "model": "gpt2-medium", "dtype": "bfloat16"}


def test_families_are_per_step_and_the_sum_row_closes():
    rules = load_rules()
    a = fc.per_family(_profile([{"name": "nvjet_sm90_tst_256x128_64x4_1x2_h_bz_coopA_NNT", "total_us": 300.0,
                                 "launches": 30},
                                {"name": "attn_forward_tmaw_bf16r_hs64", "total_us": 90.0, "launches": 30}]), rules)
    b = fc.per_family(_profile([{"name": "nvjet_sm90_tst_256x128_64x4_1x2_h_bz_coopA_NNT", "total_us": 330.0,
                                 "launches": 30}], side="torch", mode="reduce-overhead"), rules)
    assert a == {"matmul/gemm": pytest.approx(10.0), "attention": pytest.approx(3.0)}
    rows = fc.compare(a, b)
    assert rows[0] == ("matmul/gemm", pytest.approx(10.0), pytest.approx(11.0), pytest.approx(-1.0))
    assert rows[1] == ("attention", pytest.approx(3.0), 0.0, pytest.approx(3.0))
    assert rows[-1] == ("all kernels", pytest.approx(13.0), pytest.approx(11.0), pytest.approx(2.0))


@pytest.mark.parametrize("prof", [_profile([], status="oom"), _profile([], steps=0)])
def test_an_unfinished_profile_is_refused_by_name(prof):
    with pytest.raises(ValueError, match="not a finished profile"):
        fc.per_family(prof, load_rules())


def test_the_labels_name_side_and_mode():
    assert fc.label(_profile([], side="torch", mode="reduce-overhead")) == "torch-reduce-overhead"
    assert fc.label(_profile([])) == "cupy"
