"""scripts/roofline_table.py: the byte and FLOP model on a tiny made-up shape against hand-computed numbers, and the
table keeps every kernel of its key (the ones it has no model for flagged, with their time)."""
import importlib.util
import json
import math
import sys

import pandas as pd
import pytest

from tr2 import REPO_ROOT

_spec = importlib.util.spec_from_file_location("roofline_table", REPO_ROOT / "scripts" / "roofline_table.py")
rt = importlib.util.module_from_spec(_spec)
sys.modules["roofline_table"] = rt   # its dataclasses look their module up
_spec.loader.exec_module(rt)

# B=2, T=4 -> N=8 rows; C=8, 2 heads of 4; one layer; V=10 (padded to 16 for the products)
S = rt.Shapes(B=2, T=4, C=8, n_head=2, L=1, V=10)


def test_elementwise_bytes_by_hand():
    # GELU forward: x and y half, N x 4C = 8 x 32 = 256 elements each, 2 bytes
    c = rt.cost_of("gelu_forward_bf16_table", S)
    assert (c.launches, c.bytes, c.bound) == (1, 256 * 2 * 2, "memory")
    # GELU backward: dy, x, dx half
    assert rt.cost_of("gelu_backward_bf16_table", S).bytes == 256 * 3 * 2
    # LayerNorm forward: x f32 (64 x 4) + w (8 x 4) + y half (64 x 2) + mean, rstd (8 x 4 each)
    assert rt.cost_of("layernorm_forward", S).bytes == 256 + 32 + 128 + 64


def test_residual_layernorm_backward_by_hand():
    # 2L+1 = 3 launches; each: dy half 128, s f32 256, w 32, mean+rstd 64, ds f32 256, dw partials (8/8 x 8) f32 32;
    # dskip f32 256 on 2 of them; db half 128 on the 2 residual ones (p = 0: the embedding's db is ds, not written)
    c = rt.cost_of("residual_layernorm_backward_c768_bulk", S)
    assert c.launches == 3
    assert c.bytes == 3 * (128 + 256 + 32 + 64 + 256 + 32) + 2 * 256 + 2 * 128
    # with dropout, the embedding's db is written too, in float32
    d = rt.cost_of("residual_layernorm_backward_c384", rt.Shapes(B=2, T=4, C=8, n_head=2, L=1, V=10, dropout=0.1))
    assert d.bytes == c.bytes + 64 * 4


def test_attention_and_product_by_hand():
    # forward: qkv half 8 x 24 x 2 = 384, out half 128, lse 2*2*4 rows x 4 = 64; FLOPs 4 hs pairs BH = 4*4*10*4
    c = rt.cost_of("attn_forward_tmawr_bf16r_hs64", S)
    assert (c.bytes, c.flops, c.bound) == (384 + 128 + 64, 640, "compute")
    # a product: c_fc forward, y[8, 32] = x[8, 8] W[32, 8]^T: 2 N M K FLOPs, half operands and output
    p = rt.product_cost(S, [("c_fc.fwd", 1)])
    assert (p.flops, p.bytes, p.bound) == (2 * 8 * 32 * 8, 2 * (64 + 256 + 256), "compute")
    # lm_head runs over the rows padded to a multiple of 8 (V = 10 -> 16)
    assert rt.product_cost(S, [("lm_head.fwd", 1)]).flops == 2 * 8 * 16 * 8


def test_adamw_bytes_by_hand():
    # params: products 12 C^2 = 768 (half grad, half copy), wte 80 (f32 grad, half copy), wpe 32 + LayerNorms 24 (f32)
    n = 768 + 80 + 56
    expected = 24 * n + 2 * 768 + 4 * (80 + 56) + 2 * (768 + 80)
    assert rt.cost_of("adamw_update", S).bytes == expected



def test_the_wide_gradient_passes_cost_what_their_loops_cost():
    # kernels/global_norm.cu's and cast.cu's _wide forms move the same bytes as the one-load-a-turn kernels
    for loop in ("global_norm_partial", "global_norm_final", "cast_bf16_to_f32", "cast_f16_to_f32"):
        a, b = rt.cost_of(loop, S), rt.cost_of(loop + "_wide", S)
        assert a is not None and (a.launches, a.bytes, a.flops) == (b.launches, b.bytes, b.flops)
    # the widening: wte's dW, V x C = 80 elements, half in and float32 out
    assert rt.cost_of("cast_bf16_to_f32_wide", S).bytes == 80 * (2 + 4)

def _kernels(tmp_path):
    key = "tiny/bfloat16/cupy-hr"
    rows = [
        (key, "gelu_forward_bf16_table", "gelu", 1.0, 2.0),    # tiny: n_layer 2
        (key, "mystery_kernel", "other", 5.0, 2.0),
        (key, "layernorm_forward", "layernorm", 3.0, 2.0),      # the model expects 1 launch: flagged
        (key, "nvjet_sm90_unknown_TNN", "matmul/gemm", 7.0, 3.0),   # no product table for tiny: flagged
        ("tiny/float32/cupy", "gelu_forward", "gelu", 9.0, 1.0),   # another key: not in the table
    ]
    df = pd.DataFrame(rows, columns=["key", "name", "family", "us_per_step", "launches_per_step"])
    df.insert(1, "model", "tiny")
    folder = tmp_path / "fam"
    folder.mkdir()
    df.to_csv(folder / "kernels.csv", index=False)
    return folder, key, df


def test_table_keeps_every_kernel(tmp_path, capsys):
    folder, key, df = _kernels(tmp_path)
    out = tmp_path / "out.csv"
    assert rt.main([str(folder), key, str(out)]) == 0
    t = pd.read_csv(out)
    assert sorted(t["kernel"]) == sorted(df.loc[df["key"] == key, "name"])
    by = t.set_index("kernel")
    assert by.loc["gelu_forward_bf16_table", "status"] == "modelled"
    assert by.loc["mystery_kernel", "status"] == "not modelled"
    assert by.loc["nvjet_sm90_unknown_TNN", "status"] == "not modelled"
    assert by.loc["layernorm_forward", "status"].startswith("not modelled (model expects 1")
    assert by.loc["mystery_kernel", "us_per_step"] == 5.0
    # tiny's GELU from params/models.yaml (2 layers, N = 8 x 64, 4C = 256): L x 2 x N x 4C x 2 bytes in 1 us
    nbytes = 2 * 2 * 8 * 64 * 256 * 2
    assert math.isclose(by.loc["gelu_forward_bf16_table", "MB_per_step"], nbytes / 1e6)
    assert math.isclose(by.loc["gelu_forward_bf16_table", "TB_s"], nbytes / 1e-6 / 1e12)
    floor = nbytes / (0.9 * 4.8e12) * 1e6
    assert math.isclose(by.loc["gelu_forward_bf16_table", "saving_us"], max(0.0, 1.0 - floor))
    f = pd.read_csv(tmp_path / "out-families.csv").set_index("family")
    assert math.isclose(f["us_per_step"].sum(), 16.0)
    assert math.isclose(f.loc["other", "us_not_modelled"], 5.0)
    text = capsys.readouterr().out
    assert "mystery_kernel" in text and "not modelled" in text


def test_a_profile_and_the_h100_peaks(tmp_path, capsys):
    """A tr2.profile_run profile as the source: its kernels a step over the window, families by params/families.tsv,
    the key from its model, type and side; --gpu h100 takes the H100 SXM5's 3.35 TB/s for the fractions."""
    profile = {"status": "ok", "steps_in_window": 4, "side": "cupy", "half_roundings": True, "model": "tiny",
               "dtype": "bfloat16", "kernels": [{"name": "gelu_forward_bf16_table", "total_us": 4.0, "launches": 8},
                                                {"name": "mystery_kernel", "total_us": 20.0, "launches": 8}]}
    path = tmp_path / "profile.json"
    path.write_text(json.dumps(profile))
    out = tmp_path / "out.csv"
    assert rt.main([str(path), "tiny/bfloat16/cupy-hr", str(out), "--gpu", "h100"]) == 0
    by = pd.read_csv(out).set_index("kernel")
    assert by.loc["gelu_forward_bf16_table", "family"] == "gelu" and by.loc["mystery_kernel", "us_per_step"] == 5.0
    nbytes = 2 * 2 * 8 * 64 * 256 * 2   # as test_table_keeps_every_kernel's, in 1 us a step
    assert math.isclose(by.loc["gelu_forward_bf16_table", "pct_hbm_peak"], 100 * nbytes / 1e-6 / 3.35e12)
    assert "HBM 3.35 TB/s" in capsys.readouterr().out
    assert rt.main([str(path), "tiny/bfloat16/cupy-hr", str(out), "--gpu", "a100"]) == 2
    assert "--gpu 'a100': allowed h200, h100" in capsys.readouterr().err
    path.write_text(json.dumps(profile | {"status": "timeout"}))
    assert rt.main([str(path), "tiny/bfloat16/cupy-hr", str(out)]) == 2
    assert "not a finished profile" in capsys.readouterr().err
    rt.main([str(tmp_path / "missing"), "tiny/bfloat16/cupy-hr", str(out)])   # the peaks back at the default's
    assert rt.HBM_PEAK == 4.8e12


@pytest.mark.parametrize("args, said", [
    (["missing-folder", "gpt2-small/bfloat16/cupy-hr", "out.csv"], "no kernels.csv"),
    ([None, "gpt2-small/bfloat16/cupy", "out.csv"], "not in"),
    ([None, "gpt2-small/float32/cupy", "out.csv"], "half roundings (cupy-hr) only"),
])
def test_bad_input_is_refused_with_the_reason(tmp_path, capsys, args, said):
    """A folder without kernels.csv, a key the folder lacks, and a build the byte model does not describe: exit 2 and
    one line saying which, no traceback."""
    folder = tmp_path / "fam"
    folder.mkdir()
    rows = [{"key": k, "model": "gpt2-small", "dtype": k.split("/")[1], "side": "cupy", "name": "adamw_update",
             "family": "adamw", "us_per_step": 1.0, "launches_per_step": 1.0}
            for k in ("gpt2-small/bfloat16/cupy-hr", "gpt2-small/float32/cupy")]
    pd.DataFrame(rows).to_csv(folder / "kernels.csv", index=False)
    argv = [str(tmp_path / a) if a == "missing-folder" else (str(folder) if a is None else a) for a in args]
    argv[2] = str(tmp_path / argv[2])
    assert rt.main(argv) == 2
    assert said in capsys.readouterr().err
