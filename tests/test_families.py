"""Kernel families: the rules' first match, 'other', attention naming, graph-break counting, the profiled window."""
import json
import subprocess
import sys

import pandas as pd
import pytest
import yaml

from tr2 import REPO_ROOT, Tr2Error, families
from tr2.cards import validate_card
from tr2.profile_run import window_schedule
from tr2.results import append_jsonl


def test_first_match_wins_and_unmatched_is_other():
    rules = families.parse_rules("# comment\n\nnorm\tnorm-family\nlayer_norm\tlayernorm\n^aten::mm$\tmatmul\n")
    assert families.family_of("vectorized_layer_norm_kernel", rules) == "norm-family"  # the earlier rule wins
    assert families.family_of("aten::mm", rules) == "matmul"
    assert families.family_of("aten::mm_out", rules) == "other"                          # anchored: no match
    assert families.family_of("LAYER_NORM", rules) == "norm-family"                       # case-insensitive
    assert families.family_of("something_else", rules) == "other"
    rules = families.parse_rules("layer_norm\tlayernorm\nnorm\tnorm-family\n")
    assert families.family_of("vectorized_layer_norm_kernel", rules) == "layernorm"      # order decides


def test_bad_rules_are_one_line_errors():
    with pytest.raises(Tr2Error, match="rules:1: .*TAB"):
        families.parse_rules("no tab here\n")
    with pytest.raises(Tr2Error, match="does not compile"):
        families.parse_rules("(unclosed\tx\n")


def test_group_sums_per_family_and_per_step():
    rules = families.parse_rules("gemm\tmatmul/gemm\ngelu\tgelu\n")
    g = families.group([{"name": "sm90_xmma_gemm_a", "total_us": 30.0, "launches": 3},
                        {"name": "ampere_sgemm_b", "total_us": 10.0, "launches": 1},
                        {"name": "GeluCUDAKernelImpl", "total_us": 4.0, "launches": 2},
                        {"name": "mystery", "total_us": 1.0, "launches": 1}], rules, steps=2)
    assert list(g) == ["matmul/gemm", "gelu", "other"]
    assert g["matmul/gemm"] == {"total_us": 40.0, "launches": 4, "us_per_step": 20.0, "launches_per_step": 2.0}
    assert g["other"]["us_per_step"] == 0.5


SHIPPED = {
    # cuBLAS / cuBLASLt / CUTLASS
    "sm90_xmma_gemm_f32f32_tf32f32_f32_tn_n_tilesize128x128x32_warpgroupsize1x1x1_execute_segment_k_off_kernel__5x_cublas": "matmul/gemm",
    "nvjet_tst_128x256_64x4_1x2_h_bz_coopA_NTN": "matmul/gemm",
    "void cutlass::Kernel2<cutlass_80_tensorop_s1688gemm_64x64_16x6_tn_align4>(Params)": "matmul/gemm",
    "ampere_sgemm_128x64_tn": "matmul/gemm",
    "void splitKreduce_kernel<32, 16, int, float, float, float, float, true, false, false>(cublasSplitKParams<float>, float const*, float const*, float*, float const*, float const*, float const*, float const*, float*, void*, long, float*, int*)": "matmul/gemm",
    # attention
    "void pytorch_flash::flash_fwd_kernel<Flash_fwd_kernel_traits<64, 128, 128, 4, false, false, cutlass::bfloat16_t>, false, true, false, false, false, true, false, false>(pytorch_flash::Flash_fwd_params)": "attention",
    "fmha_cutlassF_f32_aligned_64x64_rf_sm80(PyTorchMemEffAttention::AttentionKernel<float, cutlass::arch::Sm80, true, 64, 64, 64, true, true>::Params)": "attention",
    "fmha_cutlassB_f32_aligned_64x64_k64_sm80(PyTorchMemEffAttention::AttentionBackwardKernel<cutlass::arch::Sm80, float, true, false, false, 64, 64, 64, false>::Params)": "attention",
    "cudnn_generated_fort_native_sdpa_sm90_flash_fprop_wgmma_f16_knob_3_64x64x64_4x1x1_kernel0_0": "attention",
    "attn_forward_bf16r_hs64": "attention", "attn_backward_dkdv_f32_hs64": "attention", "attn_backward_dot": "attention",
    "aten::_scaled_dot_product_flash_attention_for_cpu": "attention",
    # Inductor
    "triton_per_fused__to_copy_add_native_layer_norm_native_layer_norm_backward_3": "triton-fused",
    "triton_tem_fused_mm_0": "matmul/gemm",
    "triton_poi_fused_gelu_5": "triton-fused",
    # PyTorch eager on CUDA
    "void at::native::(anonymous namespace)::vectorized_layer_norm_kernel<float, float>(int, float, float const*, float const*, float const*, float*, float*, float*)": "layernorm",
    "void at::native::(anonymous namespace)::GammaBetaBackwardCUDAKernel_32x32<float, float>(long, long, float const*, float const*, float const*, float const*, float*, float*)": "layernorm",
    "void at::native::vectorized_elementwise_kernel<4, at::native::GeluCUDAKernelImpl(at::TensorIteratorBase&, at::native::GeluType)::{lambda()#2}::operator()() const::{lambda()#2}::operator()() const::{lambda(float)#1}, std::array<char*, 2ul> >(int, at::native::GeluCUDAKernelImpl(at::TensorIteratorBase&, at::native::GeluType)::{lambda()#2}::operator()() const::{lambda()#2}::operator()() const::{lambda(float)#1}, std::array<char*, 2ul>)": "gelu",
    "void at::native::(anonymous namespace)::fused_dropout_kernel_vec<float, float, unsigned int, 1, 4, bool>(at::cuda::detail::TensorInfo<float const, unsigned int>, at::cuda::detail::TensorInfo<float, unsigned int>, at::cuda::detail::TensorInfo<bool, unsigned int>, unsigned int, float, at::PhiloxCudaState)": "dropout",
    "void at::native::(anonymous namespace)::cunn_SoftMaxForward<4, float, float, float, at::native::(anonymous namespace)::LogSoftMaxForwardEpilogue>(float*, float const*, int)": "cross-entropy",
    "void at::native::(anonymous namespace)::nll_loss_forward_reduce_cuda_kernel_2d<float, float, long>(float*, float*, float const*, long const*, float const*, bool, long, long, long, long)": "cross-entropy",
    "void at::native::(anonymous namespace)::softmax_warp_forward<float, float, float, 8, false, false>(float*, float const*, int, int, int, bool const*, int, bool)": "softmax",
    "void at::native::(anonymous namespace)::multi_tensor_apply_kernel<at::native::(anonymous namespace)::FusedOptimizerTensorListMetadata<4>, at::native::(anonymous namespace)::FusedAdamMathFunctor<float, 4, (at::native::ADAM_MODE)1, false>, double*, double, double, double, double, double, bool, float*, float*>(at::native::(anonymous namespace)::FusedOptimizerTensorListMetadata<4>, at::native::(anonymous namespace)::FusedAdamMathFunctor<float, 4, (at::native::ADAM_MODE)1, false>, double*, double, double, double, double, double, bool, float*, float*)": "adamw",
    "void at::native::(anonymous namespace)::multi_tensor_apply_kernel<at::native::(anonymous namespace)::TensorListMetadata<1>, at::native::(anonymous namespace)::LpNormFunctor<float, (at::native::(anonymous namespace)::NormType)1, float, float>, float*, int>(at::native::(anonymous namespace)::TensorListMetadata<1>, at::native::(anonymous namespace)::LpNormFunctor<float, (at::native::(anonymous namespace)::NormType)1, float, float>, float*, int)": "reduction/norm",
    "void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float, at::native::func_wrapper_t<float, at::native::sum_functor<float, float, float>::operator()(at::TensorIterator&)::{lambda(float, float)#1}>, unsigned int, float, 4, 4> >(at::native::ReduceOp<float, at::native::func_wrapper_t<float, at::native::sum_functor<float, float, float>::operator()(at::TensorIterator&)::{lambda(float, float)#1}>, unsigned int, float, 4, 4>)": "reduction/norm",
    "void at::native::elementwise_kernel<128, 4, at::native::gpu_kernel_impl_nocast<at::native::direct_copy_kernel_cuda(at::TensorIteratorBase&)::{lambda()#3}::operator()() const::{lambda()#7}::operator()() const::{lambda(float)#1}>(at::TensorIteratorBase&, at::native::direct_copy_kernel_cuda(at::TensorIteratorBase&)::{lambda()#3}::operator()() const::{lambda()#7}::operator()() const::{lambda(float)#1} const&)::{lambda(int)#1}>(int, at::native::gpu_kernel_impl_nocast<at::native::direct_copy_kernel_cuda(at::TensorIteratorBase&)::{lambda()#3}::operator()() const::{lambda()#7}::operator()() const::{lambda(float)#1}>(at::TensorIteratorBase&, at::native::direct_copy_kernel_cuda(at::TensorIteratorBase&)::{lambda()#3}::operator()() const::{lambda()#7}::operator()() const::{lambda(float)#1} const&)::{lambda(int)#1})": "copy/cast",
    "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>, std::array<char*, 3ul> >(int, at::native::CUDAFunctor_add<float>, std::array<char*, 3ul>)": "elementwise/residual",
    "void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>, std::array<char*, 1ul> >(int, at::native::FillFunctor<float>, std::array<char*, 1ul>)": "memset",
    "void at::native::(anonymous namespace)::indexSelectLargeIndex<float, long, unsigned int, 2, 2, -2, true>(at::cuda::detail::TensorInfo<float, unsigned int>, at::cuda::detail::TensorInfo<float const, unsigned int>, at::cuda::detail::TensorInfo<long const, unsigned int>, int, int, unsigned int, unsigned int, long)": "embedding",
    "void at::native::(anonymous namespace)::embedding_backward_feature_kernel<float, float, long>(long const*, float const*, float*, int, long, int, int)": "embedding",
    "Memcpy HtoD (Pageable -> Device)": "copy/cast",
    "Memset (Device)": "memset",
    # ours (.cu kernels, and the backend's op names on a CPU card)
    "layernorm_forward": "layernorm", "residual_layernorm_dw_final": "layernorm",
    "gelu_forward": "gelu", "gelu_backward": "gelu",
    "dropout_apply": "dropout", "dropout_mask": "dropout",
    "cross_entropy_forward": "cross-entropy", "cross_entropy_mean": "cross-entropy",
    "adamw_update": "adamw", "global_norm_partial": "reduction/norm", "global_norm": "reduction/norm",
    "residual_forward": "elementwise/residual", "residual_accumulate": "elementwise/residual",
    "embedding_forward": "embedding", "embedding_backward_wte": "embedding",
    "cast_f32_to_bf16": "copy/cast", "round_f32": "copy/cast",
    "matmul_forward": "matmul/gemm", "matmul_backward": "matmul/gemm", "attention_forward": "attention",
    # aten on a CPU card
    "aten::mm": "matmul/gemm", "aten::bmm": "matmul/gemm", "aten::native_layer_norm": "layernorm",
    "aten::gelu_backward": "gelu", "aten::bernoulli_": "dropout", "aten::_softmax": "softmax",
    "aten::_log_softmax": "cross-entropy", "aten::nll_loss_forward": "cross-entropy",
    "aten::embedding_dense_backward": "embedding", "aten::index_select": "embedding",
    "aten::linalg_vector_norm": "reduction/norm", "aten::_foreach_norm": "reduction/norm",
    "Optimizer.step#AdamW.step": "adamw", "Optimizer.step#AdamW.step/aten::lerp_": "adamw",
    "aten::_foreach_addcdiv_": "adamw", "aten::copy_": "copy/cast", "aten::_to_copy": "copy/cast",
    "aten::add": "elementwise/residual", "aten::mul": "elementwise/residual", "aten::fill_": "memset",
    "aten::view": "host", "autograd::engine::evaluate_function: MmBackward0": "host", "MmBackward0": "host",
    "aten::tril": "other",
    "## Call CompiledFxGraph fr3ddg73sb3cic3i2gpqv65o55qvtz7zujeyw7y2cldmp6c5zb6t ##": "triton-fused",
    "CompiledFunctionBackward": "triton-fused",
}


def test_shipped_rules_name_both_sides_kernels():
    rules = families.load_rules()
    wrong = {n[:80]: (families.family_of(n, rules), f) for n, f in SHIPPED.items() if families.family_of(n, rules) != f}
    assert not wrong, wrong


def test_attention_named_from_the_kernels():
    a = families.attention_kernels
    assert a(["void pytorch_flash::flash_fwd_kernel<...>", "void pytorch_flash::flash_bwd_dq_dk_dv_loop_kernel<...>",
              "sm90_xmma_gemm"])["backends"] == ["FlashAttention"]
    assert a(["fmha_cutlassF_f32_aligned_64x64_rf_sm80(...)", "fmha_cutlassB_f32_aligned_64x64_k64_sm80(...)"])["backends"] \
        == ["memory-efficient (cutlass)"]
    assert a(["cudnn_generated_fort_native_sdpa_sm90_flash_fprop_wgmma_f16_knob_3_64x64x64_4x1x1_kernel0_0"])["backends"] == ["cuDNN"]
    math_path = a(["ampere_sgemm_128x64_tn", "void at::native::(anonymous namespace)::softmax_warp_forward<float, float, float, 8, false, false>(...)",
                   "void at::native::(anonymous namespace)::cunn_SoftMaxForward<4, float, float, float, LogSoftMaxForwardEpilogue>(...)"])
    assert math_path["backends"] == ["math (softmax between batched products)"]
    assert len(math_path["kernels"]["math (softmax between batched products)"]) == 1  # the loss's log-softmax is no attention
    assert a(["ampere_sgemm_128x64_tn", "LogSoftMaxForwardEpilogue"])["backends"] == []
    assert a(["aten::_scaled_dot_product_flash_attention_for_cpu"])["backends"] == ["flash (CPU)"]
    assert a(["aten::_scaled_dot_product_attention_math", "aten::_softmax"])["backends"] == ["math"]
    assert a(["attn_forward_bf16r_hs64", "attn_backward_dq_bf16r_hs64", "sm90_xmma_gemm"])["backends"] == ["ours (fused attn_* kernels on tensor cores)"]


SAMPLE_LOG = """\
V1129 08:28:58.871000 5403 torch/_dynamo/symbolic_convert.py:5124] [0/0] [__graph_breaks] Graph break in user code at /tmp/gb.py:4
V1129 08:28:58.871000 5403 torch/_dynamo/symbolic_convert.py:5124] [0/0] [__graph_breaks] Graph Break Reason: Encountered graph break when attempting to trace CALL: a function call, e.g. f(x, y):
V1129 08:28:58.871000 5403 torch/_dynamo/symbolic_convert.py:5124] [0/0] [__graph_breaks]
V1129 08:28:58.871000 5403 torch/_dynamo/symbolic_convert.py:5124] [0/0] [__graph_breaks] Failed to trace builtin operator
V1129 08:28:58.871000 5403 torch/_dynamo/symbolic_convert.py:5124] [0/0] [__graph_breaks]   Explanation: Dynamo does not know how to trace builtin operator `print` with argument types ['str'] (has_kwargs False)
hi
V1129 08:28:58.928000 5403 torch/_dynamo/symbolic_convert.py:5124] [1/0] [__graph_breaks] Graph break in user code at /tmp/gb.py:5
V1129 08:28:58.928000 5403 torch/_dynamo/symbolic_convert.py:5124] [1/0] [__graph_breaks] Graph Break Reason: Data-dependent branching
V1129 08:28:58.928000 5403 torch/_dynamo/symbolic_convert.py:5124] [1/0] [__graph_breaks] User code traceback:
V1129 08:28:58.928000 5403 torch/_dynamo/symbolic_convert.py:5124] [1/0] [__graph_breaks]   File "/tmp/gb.py", line 5, in f
V1129 08:28:59.004000 5403 torch/_dynamo/guards.py:5396] [2/1] [__recompiles] Recompiling function torch_dynamo_resume_in_f_at_5 in /tmp/gb.py:5
V1129 08:28:59.004000 5403 torch/_dynamo/guards.py:5396] [2/1] [__recompiles]     triggered by the following guard failure(s):
V1129 08:28:59.004000 5403 torch/_dynamo/guards.py:5396] [2/1] [__recompiles]     - 2/0: n == 1                                                   # return y * n  # mp/gb.py:7 in torch_dynamo_resume_in_f_at_5
V1129 08:28:59.083000 5403 torch/_dynamo/guards.py:5396] [0/1] [__recompiles] Recompiling function f in /tmp/gb.py:2
V1129 08:28:59.083000 5403 torch/_dynamo/guards.py:5396] [0/1] [__recompiles]     triggered by the following guard failure(s):
V1129 08:28:59.083000 5403 torch/_dynamo/guards.py:5396] [0/1] [__recompiles]     - 0/0: tensor 'x' size mismatch at index 0. expected 4, actual 5
V1129 08:28:59.136000 5403 torch/_dynamo/symbolic_convert.py:5131] [0/1] [__graph_breaks] Graph break (user stack suppressed due to duplicate graph break) in user code at /tmp/gb.py:4
V1129 08:28:59.136000 5403 torch/_dynamo/symbolic_convert.py:5131] [0/1] [__graph_breaks] Graph Break Reason: Encountered graph break when attempting to trace CALL: a function call, e.g. f(x, y):
[rank0]:V0101 00:00:00.000000 1 torch/_dynamo/symbolic_convert.py:1] [3/0] [__graph_breaks] Graph break: from user code at:
iter 10: loss 3.1000, time 5.00ms
"""


def test_graph_breaks_and_recompiles_counted_from_the_log():
    c = families.count_graph_logs(SAMPLE_LOG)
    assert c["graph_breaks"] == 4          # three of torch 2.1x's messages and one of the older form
    assert c["recompiles"] == 2
    assert c["break_sites"]["/tmp/gb.py:4"] == 2 and c["break_sites"]["/tmp/gb.py:5"] == 1
    assert c["recompiled_functions"] == {"torch_dynamo_resume_in_f_at_5 in /tmp/gb.py:5": 1, "f in /tmp/gb.py:2": 1}
    assert any("size mismatch" in r for r in c["recompile_reasons"])
    assert families.count_graph_logs("iter 0: loss 4.0, time 1.00ms\n") == {
        "graph_breaks": 0, "break_sites": {}, "recompiles": 0, "recompiled_functions": {}, "recompile_reasons": []}


def test_window_schedule_cuts_on_the_iter_lines():
    assert window_schedule((20, 40)) == (20, {"wait": 1, "warmup": 1, "active": 1, "repeat": 1})
    assert window_schedule((100, 130)) == (10, {"wait": 10, "warmup": 1, "active": 3, "repeat": 1})
    assert window_schedule((0, 8)) == (8, {"wait": 0, "warmup": 1, "active": 1, "repeat": 1})
    with pytest.raises(ValueError):
        window_schedule((5, 5))


@pytest.mark.slow
def test_profiled_window_holds_exactly_its_steps(tmp_path):
    """torch side on the CPU: the table covers steps A+1..B, each step one embedding pair, one loss."""
    out = tmp_path / "p"
    r = subprocess.run([sys.executable, "-m", "tr2.profile_run", "--side", "torch", "--model", "tiny", "--device", "cpu",
                        "--steps", "9", "--window", "3", "6", "--out", str(out)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-2000:]
    prof = json.loads((out / "profile.json").read_text())
    assert prof["status"] == "ok" and prof["steps_in_window"] == 3 and prof["log_interval"] == 3
    launches = {k["name"]: k["launches"] for k in prof["kernels"]}
    assert launches["aten::embedding"] == 2 * 3      # wte and wpe, once a step
    assert launches["aten::nll_loss_forward"] == 3   # one loss a step
    assert "iter 3:" in r.stdout and "iter 6:" in r.stdout and "iter 9:" in r.stdout


@pytest.mark.slow
def test_the_profiled_runs_log_interval_is_the_windows_whatever_the_command_carries(tmp_path):
    """The stage hands profile_run a trainer command that carries --log-interval (TrainArgs.to_argv); the window's L
    replaces it. profile_run no longer appends a second --log-interval, which the trainer now refuses (an option given
    twice), so this holds the replacement."""
    out = tmp_path / "p"
    r = subprocess.run([sys.executable, "-m", "tr2.profile_run", "--window", "2", "4", "--out", str(out), "--side",
                        "torch", "--model", "tiny", "--device", "cpu", "--steps", "4", "--log-interval", "10"],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-2000:]
    prof = json.loads((out / "profile.json").read_text())
    assert prof["status"] == "ok" and prof["log_interval"] == 2 and "iter 2:" in r.stdout


def _card():
    return validate_card({
        "card": "test", "machine": "cpu", "device": "cpu", "models": ["tiny"], "dtypes": ["float32", "bfloat16"],
        "torch_modes": ["eager", "default"], "half_roundings": [False, True],
        "series": {"rounds": 1, "steps": 40, "window": [10, 40], "timeout_s": 60, "sample_interval_s": 1.0},
        "method_a": {"seeds": [1], "steps": 40, "eval_interval": 20, "eval_iters": 2, "judge_from": 20, "torch_mode": "eager"},
        "method_b": {"steps": 5, "judge_steps": {}, "seed": 1337},
        "families": {"steps": 4, "window": [2, 4], "rules": "params/families.tsv"},
    })


def test_configurations_cover_modes_and_builds():
    keys = [c.key for c in families.configurations(_card())]
    assert keys == ["tiny/float32/torch-eager", "tiny/float32/torch-default", "tiny/float32/cupy",
                    "tiny/bfloat16/torch-eager", "tiny/bfloat16/torch-default", "tiny/bfloat16/cupy", "tiny/bfloat16/cupy-hr"]
    assert [g.key for g in families.graph_runs(_card())] == ["tiny/float32/torch-default", "tiny/bfloat16/torch-default"]


def test_summary_names_an_oom_and_groups_both_sides(tmp_path):
    card = _card()
    d = tmp_path / "res"
    (d / "logs").mkdir(parents=True)
    (d / "card.yaml").write_text(yaml.safe_dump(card))
    (d / "machine.json").write_text(json.dumps({"date": "2026-11-29", "commit": "abc"}))
    kernels = {"tiny/float32/torch-default": [{"name": "triton_poi_fused_gelu_0", "total_us": 8.0, "launches": 2}],
               "tiny/float32/torch-eager": [{"name": "aten::mm", "total_us": 200.0, "launches": 8},
                                            {"name": "aten::gelu", "total_us": 20.0, "launches": 2}],
               "tiny/float32/cupy": [{"name": "matmul_forward", "total_us": 100.0, "launches": 4},
                                     {"name": "gelu_forward", "total_us": 10.0, "launches": 2},
                                     {"name": "mystery_op", "total_us": 2.0, "launches": 2}]}
    for c in families.configurations(card):
        if c.key in kernels:
            p = d / "profiles" / c.slug / "profile.json"
            p.parent.mkdir(parents=True)
            gaps = ({"gaps": {"kernels": 8, "span_us": 150.0, "busy_us": 112.0, "idle_us": 38.0, "pairs": [
                {"before": "gelu_forward", "after": "matmul_forward", "total_us": 30.0, "count": 2, "max_us": 20.0}]}}
                if c.key == "tiny/float32/cupy" else {})   # a CUDA run's idle time between kernels
            p.write_text(json.dumps({"status": "ok", "kernels": kernels[c.key], "steps_in_window": 2, "device": "cpu",
                                     "window": [2, 4], **gaps}))
            counts = families.count_graph_logs(SAMPLE_LOG) if c.mode == "default" else {}
            append_jsonl(d / "runs.jsonl", {"kind": "profile", **c.as_record(), "status": "ok", "profile": str(p.relative_to(d)),
                                            "log": "logs/x.log", **counts})
        elif c.key == "tiny/bfloat16/torch-default":
            append_jsonl(d / "runs.jsonl", {"kind": "profile", **c.as_record(), "status": "oom", "reason": "out of memory: CUDA out of memory",
                                            "profile": "profiles/none/profile.json", "log": "logs/y.log"})
    s = families.summarize(d)
    by = {c["key"]: c for c in s["configs"]}
    assert by["tiny/float32/torch-eager"]["families"] == {"matmul/gemm": 100.0, "gelu": 10.0}
    assert by["tiny/float32/cupy"]["families"] == {"matmul/gemm": 50.0, "gelu": 5.0, "other": 1.0}
    assert by["tiny/bfloat16/torch-default"]["status"] == "oom"
    assert "tiny/bfloat16/torch-default: oom (no kernel table)" in s["lacking"]
    assert "tiny/bfloat16/torch-default: oom (no graph-break counts)" in s["lacking"]
    assert "tiny/bfloat16/cupy-hr: missing (no kernel table)" in s["lacking"]
    g = {x["key"]: x for x in s["graphs"]}
    assert g["tiny/float32/torch-default"]["recompiles"] == 2 and g["tiny/float32/torch-default"]["graph_breaks"] == 4
    assert by["tiny/float32/torch-default"]["families"] == {"triton-fused": 4.0}
    for f in ("kernels.csv", "families.csv", "families.png", "summary.json"):
        assert (d / f).is_file()
    assert "never stands in" in s["label"]
    # the idle time between kernels, a step, where the profile measured it (CUDA), and nothing claimed elsewhere
    cupy = by["tiny/float32/cupy"]
    assert (cupy["span_us_per_step"], cupy["busy_us_per_step"], cupy["idle_us_per_step"]) == (75.0, 56.0, 19.0)
    assert "idle_us_per_step" not in by["tiny/float32/torch-eager"]
    gaps = pd.read_csv(d / "gaps.csv")
    assert gaps[["key", "before", "after", "idle_us_per_step", "gaps_per_step", "max_us"]].values.tolist() == [
        ["tiny/float32/cupy", "gelu_forward", "matmul_forward", 15.0, 1.0, 20.0]]


def test_the_idle_time_between_kernels_is_charged_to_the_pair_around_it():
    """profile_run.kernel_gaps on a made-up timeline (µs): kernels on two streams that overlap count once; each idle
    stretch goes to the kernel that ended last before it and the one that starts it; CPU events and the profiler's
    own ranges are not kernels."""
    from types import SimpleNamespace

    from torch.autograd import DeviceType

    from tr2.profile_run import kernel_gaps

    def ev(name, start, end, device=DeviceType.CUDA, **kw):
        return SimpleNamespace(name=name, device_type=device, time_range=SimpleNamespace(start=start, end=end), **kw)
    events = [ev("a", 0, 10), ev("b", 12, 20), ev("side", 14, 25),    # b and side overlap: busy 12..25
              ev("c", 30, 31), ev("b", 33, 40), ev("c", 45, 46),
              ev("cpu_op", 0, 100, DeviceType.CPU), ev("ProfilerStep#3", 0, 100),
              ev("range", 26, 29, is_user_annotation=True)]
    g = kernel_gaps(events)
    assert g["kernels"] == 6 and g["span_us"] == 46 and g["busy_us"] == 10 + 13 + 1 + 7 + 1
    assert g["idle_us"] == 46 - 32 == 2 + 5 + 2 + 5
    assert g["pairs"] == [{"before": "side", "after": "c", "total_us": 5, "count": 1, "max_us": 5},
                          {"before": "b", "after": "c", "total_us": 5, "count": 1, "max_us": 5},
                          {"before": "a", "after": "b", "total_us": 2, "count": 1, "max_us": 2},
                          {"before": "c", "after": "b", "total_us": 2, "count": 1, "max_us": 2}]
    assert kernel_gaps(events, top=1)["pairs"] == g["pairs"][:1]
    assert kernel_gaps([ev("cpu_op", 0, 1, DeviceType.CPU)]) == {"kernels": 0, "span_us": 0.0, "busy_us": 0.0,
                                                                  "idle_us": 0.0, "pairs": []}


def test_the_gaps_table_prints_a_step_of_idle_time_and_says_where_none_was_kept(tmp_path):
    """scripts/gaps_table.py: per step from the profile's window; a profile without the record says so."""
    prof = {"side": "cupy", "model": "gpt2-small", "dtype": "bfloat16", "steps_in_window": 30,
            "gaps": {"kernels": 10980, "span_us": 480000.0, "busy_us": 461700.0, "idle_us": 18300.0, "pairs": [
                {"before": "adamw_update", "after": "embedding_forward", "total_us": 900.0, "count": 30, "max_us": 40.0}]}}
    (tmp_path / "a.json").write_text(json.dumps(prof))
    (tmp_path / "b.json").write_text(json.dumps({"side": "torch", "steps_in_window": 30}))
    r = subprocess.run([sys.executable, str(REPO_ROOT / "scripts" / "gaps_table.py"), str(tmp_path / "a.json"),
                        str(tmp_path / "b.json")], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert "kernels 366.0 a step; span 16000.0 us, busy 15390.0, idle 610.0 a step" in lines[1]
    assert "30.00 us  1.00x max   40.00  adamw_update -> embedding_forward" in lines[2]
    assert "no idle-time record" in lines[4]


def test_the_profiled_backend_keeps_its_name_in_the_log():
    """A profiled cupy run's log named its backend `<tr2.profile_run._Annotated object at ...>` where every other run's
    log names the backend with the products record it read (gpu/backend.py's repr): the annotated wrapper now gives
    the wrapped backend's repr, so a families folder's logs say which record its cupy runs read."""
    from tr2.profile_run import _Annotated

    class Backend:
        def __repr__(self):
            return "CudaBackend(bfloat16, cuBLASLt, products record x.json, 3 products, sha256 abc)"

    inner = Backend()
    assert repr(_Annotated(inner)) == repr(inner)
