"""--cuda-graph: the captured, replayed step trains as the eager loop does (GPU only).

The CPU counterpart of what the graph relies on is in tests/test_cupy_model.py: the device step counter
numbers the dropout masks as the step argument does, and set_lr + apply_update is optimizer_step.

Tolerance: none. From one start and one batch order, dropout 0.2, two eager runs agree to the bit
(every sum of the cupy side runs in a fixed order: the embedding backward's dwte too, since its
float atomics were replaced by a sorted sum after an H200 run of this test at commit bca858d found
eager runs 2.6e-5 apart in bfloat16 and the graph as far from them), and the replayed graph agrees
with them to the bit. Beside it the test measures what a replay that reused a step's dropout masks
would look like (the eager loop with other masks), so that the check is seen to be able to fail.
"""
from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import cuda_device_present

from tr2.trainlog import read_metrics


pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not cuda_device_present(), reason="no CUDA device")]

STEPS = 30


def _train(tmp_path: Path, name: str, *argv, env: dict | None = None) -> tuple[dict, str]:
    metrics = tmp_path / f"{name}.jsonl"
    p = subprocess.run([sys.executable, "-m", "tr2.train", "--side", "cupy", "--device", "cuda", "--steps", str(STEPS),
                        "--dropout", "0.2", "--metrics", str(metrics), *map(str, argv)],
                       capture_output=True, text=True, timeout=600,
                       env=dict(os.environ, PYTHONUNBUFFERED="1", **(env or {})))
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-4000:]
    return read_metrics(metrics)["loss"], p.stdout


def _max_rel(a: dict, b: dict) -> tuple[float, int]:
    rel = {s: abs(b[s] - a[s]) / abs(a[s]) for s in a}
    worst = max(rel, key=rel.get)
    return rel[worst], worst


# float16: its loss scaler decides on the device (the first steps overflow at 2^16 and are skipped in the replay);
# gpt2-small: rows of 1024 (eight key blocks a head) through the dS-stored attention backward, as the char model's;
# in float32 too, which the H200 edition times (its report names the configurations no graph test covers)
@pytest.mark.parametrize("model, dtype", [("tiny", "float32"), ("nanogpt", "bfloat16"), ("nanogpt", "float32"),
                                          ("nanogpt", "float16"), ("gpt2-small", "bfloat16"), ("gpt2-small", "float32")])
def test_graph_replays_train_as_the_eager_loop(tmp_path, model, dtype):
    from tr2.data import write_batch_order
    from tr2.models import load_model
    cfg = load_model(model)
    order = write_batch_order(tmp_path / "order.npy", cfg.dataset, cfg.block_size, cfg.batch_size, STEPS, seed=1337)
    common = ["--model", model, "--dtype", dtype, "--batches", order] + (["--half-roundings"] if dtype != "float32" else [])
    eager, _ = _train(tmp_path, "eager", *common, "--save-init", tmp_path / "init.npz")
    common += ["--init", tmp_path / "init.npz"]
    again, _ = _train(tmp_path, "again", *common)
    graph, out = _train(tmp_path, "graph", *common, "--cuda-graph")
    other_masks, _ = _train(tmp_path, "other", *common, "--seed", "1338")  # with --init and --batches: masks only
    assert "cuda graph:" in out
    assert sorted(eager) == sorted(graph) == sorted(again) == sorted(other_masks) == list(range(STEPS + 1))
    noise, replay, signature = _max_rel(eager, again), _max_rel(eager, graph), _max_rel(eager, other_masks)
    print(f"{model} {dtype}: eager vs eager max rel {noise[0]:.2e} (step {noise[1]}); graph vs eager "
          f"{replay[0]:.2e} (step {replay[1]}); other dropout masks vs eager {signature[0]:.2e} (step {signature[1]}); "
          f"loss {eager[0]:.4f} -> {eager[STEPS]:.4f}")
    assert signature[0] > 1e-4  # a replay with the wrong masks would show
    assert again == eager, f"the eager loop is not bit-reproducible: {noise}"
    assert graph == eager, f"the graph parts from the eager loop: {replay}"
    assert eager[STEPS] < eager[0] - 0.2  # it trained: both curves fall, not two flat ones that agree


def _with_and_without(tmp_path: Path, model: str, dtype: str, switch: str) -> tuple[dict, dict, dict, str]:
    """30 steps of the recorded batches from one start with `switch` 0 (eager), then 1 (eager, and graph): the three
    runs' losses and the graph run's output."""
    from tr2.data import write_batch_order
    from tr2.models import load_model
    cfg = load_model(model)
    order = write_batch_order(tmp_path / "order.npy", cfg.dataset, cfg.block_size, cfg.batch_size, STEPS, seed=1337)
    common = ["--model", model, "--dtype", dtype, "--batches", order] + (["--half-roundings"] if dtype != "float32" else [])
    off, _ = _train(tmp_path, "off", *common, "--save-init", tmp_path / "init.npz", env={switch: "0"})
    common += ["--init", tmp_path / "init.npz"]
    on, _ = _train(tmp_path, "on", *common, env={switch: "1"})
    on_graph, out = _train(tmp_path, "on-graph", *common, "--cuda-graph", env={switch: "1"})
    return off, on, on_graph, out


# gpu/attention.py's F32_PAIRS (TR2_ATTN_F32_PAIRS=1): float32 with TF32 takes the plain build's attention kernels
# (operands as TF32 pairs, three products, as PyTorch's memory-efficient float32 kernels compute). Its graph must
# replay its eager loop to the bit, it must train, and it must not be the default run (other attention arithmetic,
# so other losses), yet stay near it: within method B's 1% at every one of 30 steps (a bound set before any run;
# the kernels themselves are held to NumPy within 1e-5 by the kernel tests, as method B runs them).
@pytest.mark.parametrize("model", ["nanogpt", "gpt2-small"])
def test_float32_attention_in_tf32_pairs_replays_its_eager_loop(tmp_path, model):
    default, pairs, pairs_graph, out = _with_and_without(tmp_path, model, "float32", "TR2_ATTN_F32_PAIRS")
    assert "cuda graph:" in out
    moved = _max_rel(default, pairs)
    print(f"{model} float32: TF32 pairs against one TF32 product max rel {moved[0]:.2e} (step {moved[1]}); graph "
          f"{_max_rel(pairs, pairs_graph)[0]:.2e}")
    assert pairs_graph == pairs, f"the pairs build's graph parts from its eager loop: {_max_rel(pairs, pairs_graph)}"
    assert pairs != default, "TR2_ATTN_F32_PAIRS=1 ran the default kernels"
    assert moved[0] < 1e-2, f"the pairs build strays from the TF32 build: {moved}"
    assert pairs[STEPS] < pairs[0] - 0.2


# gpu/attention.py's F32_STREAM (TR2_ATTN_F32_STREAM=1: the float32 builds' attention kernels streamed, cp.async into
# two buffers), with the synchronous kernels' operands and products: the whole run must be the default run to the bit,
# eager and graph, in the tf32 build (the default float32) and the plain one (method B's, --no-tf32). Where the float32
# forward runs on wgmma (TR2_ATTN_F32_WG=2, the default on sm_90a) only the backward is streamed in these runs. On
# gpt2-small's T = 1024 in the tf32 build both backward kernels run on wgmma by default (TR2_ATTN_F32_WG_DKDV=2,
# TR2_ATTN_F32_WG_DQ=2), which would leave nothing streamed: that run takes the mma.sync dQ (TR2_ATTN_F32_WG_DQ=0), so
# that its streamed dQ is what is compared. The streamed kernels are held to the synchronous ones' bits by the kernel
# test ("float32_forms_are_the_synchronous_bits").
@pytest.mark.parametrize("model, tf32", [("nanogpt", True), ("gpt2-small", True), ("nanogpt", False)],
                         ids=["nanogpt-tf32", "gpt2-small-tf32", "nanogpt-plain"])
def test_float32_attention_forms_train_to_the_bit(tmp_path, monkeypatch, model, tf32):
    if model == "gpt2-small":
        monkeypatch.setenv("TR2_ATTN_F32_WG_DQ", "0")   # the runs' environment is this process's
    _switch_changes_no_bit(tmp_path, model, "float32", "TR2_ATTN_F32_STREAM", "0", "1",
                           f"float32 attention streamed (tf32={tf32})", *(() if tf32 else ("--no-tf32",)), wgmma=False)


# gpu/pdl.py: the captured launches programmatic (TR2_PDL=1), every kernel waiting for the one before it in
# grid_dependency_entry. A kernel that read or wrote before its inputs were complete would change a loss somewhere
# in 30 steps; the losses must equal the eager loop's (plain launches) to the bit. float16 for its device-side
# skip, gpt2-small for its long rows.
@pytest.mark.parametrize("model, dtype", [("nanogpt", "bfloat16"), ("nanogpt", "float16"), ("gpt2-small", "bfloat16")])
def test_programmatic_launches_change_no_bit(tmp_path, model, dtype):
    from tr2.data import write_batch_order
    from tr2.models import load_model
    cfg = load_model(model)
    order = write_batch_order(tmp_path / "order.npy", cfg.dataset, cfg.block_size, cfg.batch_size, STEPS, seed=1337)
    common = ["--model", model, "--dtype", dtype, "--batches", order, "--half-roundings"]
    eager, _ = _train(tmp_path, "eager", *common, "--save-init", tmp_path / "init.npz", env={"TR2_PDL": "0"})
    common += ["--init", tmp_path / "init.npz"]
    graph, out = _train(tmp_path, "graph-pdl", *common, "--cuda-graph", env={"TR2_PDL": "1"})
    m = re.search(r"cuda graph: (\d+) launches of our kernels captured, (\d+) of them programmatic", out)
    assert m, out[-2000:]
    kernels, programmatic = int(m.group(1)), int(m.group(2))
    print(f"{model} {dtype}: {programmatic} of {kernels} captured launches programmatic")
    assert programmatic > kernels // 2   # the test tests the programmatic launches, not plain ones
    print(f"{model} {dtype}: programmatic graph vs eager max rel {_max_rel(eager, graph)[0]:.2e}")
    assert graph == eager, f"the programmatic graph parts from the eager loop: {_max_rel(eager, graph)}"
    assert eager[STEPS] < eager[0] - 0.2


# gpu/adamw.py's LOSS_SCALE_KERNEL: the float16 loss scale's update as one kernel. The char model's first float16
# steps overflow at 2^16 and are skipped, so the scale halves there: a wrong update would change a later loss.
def test_the_loss_scale_kernel_changes_no_bit(tmp_path):
    from tr2.data import write_batch_order
    from tr2.models import load_model
    cfg = load_model("nanogpt")
    order = write_batch_order(tmp_path / "order.npy", cfg.dataset, cfg.block_size, cfg.batch_size, STEPS, seed=1337)
    common = ["--model", "nanogpt", "--dtype", "float16", "--batches", order, "--half-roundings"]
    cupy_update, _ = _train(tmp_path, "cupy-update", *common, "--save-init", tmp_path / "init.npz",
                            env={"TR2_LOSS_SCALE_KERNEL": "0"})
    common += ["--init", tmp_path / "init.npz"]
    kernel, _ = _train(tmp_path, "kernel", *common, env={"TR2_LOSS_SCALE_KERNEL": "1"})
    kernel_graph, out = _train(tmp_path, "kernel-graph", *common, "--cuda-graph", env={"TR2_LOSS_SCALE_KERNEL": "1"})
    assert "cuda graph:" in out
    assert kernel == cupy_update, f"the kernel's update changed the losses: {_max_rel(cupy_update, kernel)}"
    assert kernel_graph == cupy_update, f"the kernel's update in the graph: {_max_rel(cupy_update, kernel_graph)}"
    assert cupy_update[STEPS] < cupy_update[0] - 0.2


def _switch_changes_no_bit(tmp_path, model: str, dtype: str, key: str, off: str, on: str, what: str, *extra,
                           wgmma: bool = True, fixed: dict | None = None) -> None:
    """A whole run (half roundings in the half types; `extra`: further arguments of every run, e.g. --no-tf32) with the
    environment's `key` = on, eager and as a graph, from the start and batch order of a run with it = off: both must
    have that run's losses to the bit, and the run must train. wgmma: skipped off sm_90a, where the wgmma kernels the
    switch chooses between do not run; fixed: more of the environment, the same in every run."""
    from tr2.cupy_side.gpu import attention, runtime
    from tr2.data import write_batch_order
    from tr2.models import load_model
    if wgmma and runtime.built_for(attention.FILE) != "sm_90a":
        pytest.skip("the wgmma kernels run where attention.cu is built for sm_90a")
    cfg = load_model(model)
    order = write_batch_order(tmp_path / "order.npy", cfg.dataset, cfg.block_size, cfg.batch_size, STEPS, seed=1337)
    common = (["--model", model, "--dtype", dtype, "--batches", order, *extra]
              + (["--half-roundings"] if dtype != "float32" else []))
    fixed = fixed or {}
    without, _ = _train(tmp_path, "off", *common, "--save-init", tmp_path / "init.npz", env={**fixed, key: off})
    common += ["--init", tmp_path / "init.npz"]
    with_it, _ = _train(tmp_path, "on", *common, env={**fixed, key: on})
    graph, out = _train(tmp_path, "on-graph", *common, "--cuda-graph", env={**fixed, key: on})
    assert "cuda graph:" in out
    print(f"{model} {dtype}: {what} ({key}={on} against {off}) max rel {_max_rel(without, with_it)[0]:.2e}, "
          f"graph {_max_rel(without, graph)[0]:.2e}")
    assert with_it == without, f"the {what} changed the losses: {_max_rel(without, with_it)}"
    assert graph == without, f"the {what} in the graph: {_max_rel(without, graph)}"
    assert without[STEPS] < without[0] - 0.2


# gpu/attention.py's USE_WG_DKDV (TR2_ATTN_WG_DKDV): the backward as it runs by default on Hopper (the TMA dK/dV
# resident, and the TMA dQ on rows over 256) gives the mma.sync kernels' bits (tests/test_kernels_gpu.py,
# "wgmma_backward_is_the_mma_sync_bits"), so a whole run with it (eager and graph: the resident kernel's tickets, left
# at zero by every launch, replayed) must have the losses of the run with TR2_ATTN_WG_DKDV=0 to the bit: gpt2-small
# (rows of 1024, eight key blocks a head, 768 items a launch) in bfloat16 and float16 (its device-side skips), the char
# model (rows of 256: the mma.sync dQ after the TMA dK/dV) in bfloat16. (Until the forms between them were removed,
# before the removal, at ee6b673, this test ran the TMA dK/dV against the wgmma kernel on cp.async, and the resident
# forms against their plain ones.) The chained dQ off in both (TR2_ATTN_DQ_CHAIN=0): its default takes the char model's
# rows, with a dQ order of its own (test_the_chained_dq_graph_replays_its_eager_loop).
@pytest.mark.parametrize("model, dtype", [("gpt2-small", "bfloat16"), ("gpt2-small", "float16"),
                                          ("nanogpt", "bfloat16")])
def test_the_wgmma_backward_changes_no_bit(tmp_path, model, dtype):
    _switch_changes_no_bit(tmp_path, model, dtype, "TR2_ATTN_WG_DKDV", "0", "1", "wgmma backward",
                           fixed={"TR2_ATTN_DQ_CHAIN": "0"})


# gpu/attention.py's DS_GROUPED (TR2_ATTN_DS_GROUPED=1, on since the sixty-first session): the grouped dK/dV and the
# newest-first TMA dQ compute what the ungrouped items and blocks do (tests/test_kernels_gpu.py, "grouped_backward"), so
# a whole run with them must have the ungrouped losses to the bit, eager and in the graph: gpt2-small (96 heads in
# groups) in bfloat16.
def test_the_grouped_backward_changes_no_bit(tmp_path):
    _switch_changes_no_bit(tmp_path, "gpt2-small", "bfloat16", "TR2_ATTN_DS_GROUPED", "0", "1", "grouped backward")


# gpu/gelu.py's REVERSE_SWITCH: GELU's groups of eight from the last down (value 1, the default since the forty-third
# session) compute every element as front to back (value 0) does, so a whole run must have value 0's losses to the bit,
# eager and in the graph: bfloat16's table kernels, float16's within an ulp, float32's computing kernels.
@pytest.mark.parametrize("model, dtype", [("nanogpt", "bfloat16"), ("gpt2-small", "float16"), ("nanogpt", "float32")])
def test_the_gelu_order_changes_no_bit(tmp_path, model, dtype):
    _switch_changes_no_bit(tmp_path, model, dtype, "TR2_GELU_REVERSE", "0", "1", "GELU order")


# gpu/attention.py's DQ_TMA: dQ from ds_t on a TMA producer and wgmma (1: at every T, against 0: never). Its kernel
# tests found the mma.sync dQ's bits in all 88 cases (call 7 of results/h200-perf-20261203e), so a whole run with it
# must have the losses of the run without it to the bit, eager and in the graph (its two tensor maps baked into the
# captured launch). The chained dQ off in both (it would take the rows wherever the TMA dQ does not follow).
@pytest.mark.parametrize("model, dtype", [("gpt2-small", "bfloat16"), ("nanogpt", "float16")])
def test_the_tma_dq_kernel_changes_no_bit(tmp_path, model, dtype):
    _switch_changes_no_bit(tmp_path, model, dtype, "TR2_ATTN_DQ_TMA", "0", "1", "TMA dQ kernel",
                           fixed={"TR2_ATTN_DQ_CHAIN": "0"})


# gpu/backend.py's TIED_WTE: the tied wte's gradient as lm_head's half dW plus the embedding's sums, added where the
# global norm and AdamW read it (the same float32 adds as the widening and embedding_backward_wte). A whole run with it
# must have the losses of the run without it to the bit, eager and in the graph (the sums and the sort's starts read
# by the captured norm and AdamW): gpt2-small (50304 rows, most never in a batch) in both half types, the char model.
@pytest.mark.parametrize("model, dtype", [("gpt2-small", "bfloat16"), ("gpt2-small", "float16"),
                                          ("nanogpt", "bfloat16")])
def test_the_tied_wte_gradient_changes_no_bit(tmp_path, model, dtype):
    _switch_changes_no_bit(tmp_path, model, dtype, "TR2_TIED_WTE", "0", "1", "tied wte gradient")


# gpu/attention.py's FWD_TMA_LONG 7 (the default): the TMA forward with 128-key tiles, resident, on rows over 256, which
# has bits of its own (its online softmax's maxima over 128 keys at a time). The graph must replay its eager loop to the
# bit (one tensor map of qkv baked into each captured launch; the tickets, which each launch leaves at zero, replayed),
# and the run must train. (Forms 3, 4, 6 and 9-11 were cases here until they were removed.)
def test_the_wide_tma_forward_graph_replays_its_eager_loop(tmp_path):
    from tr2.cupy_side.gpu import attention, runtime
    from tr2.data import write_batch_order
    from tr2.models import load_model
    if runtime.built_for(attention.FILE) != "sm_90a":
        pytest.skip("the wgmma kernels run where attention.cu is built for sm_90a")
    cfg = load_model("gpt2-small")
    order = write_batch_order(tmp_path / "order.npy", cfg.dataset, cfg.block_size, cfg.batch_size, STEPS, seed=1337)
    common = ["--model", "gpt2-small", "--dtype", "bfloat16", "--batches", order, "--half-roundings"]
    mma, _ = _train(tmp_path, "mma", *common, "--save-init", tmp_path / "init.npz",
                    env={"TR2_ATTN_FWD_TMA_LONG": "0"})   # the mma.sync forward
    common += ["--init", tmp_path / "init.npz"]
    eager, _ = _train(tmp_path, "tmaw", *common, env={"TR2_ATTN_FWD_TMA_LONG": "7"})
    graph, out = _train(tmp_path, "tmaw-graph", *common, "--cuda-graph", env={"TR2_ATTN_FWD_TMA_LONG": "7"})
    assert "cuda graph:" in out
    print(f"gpt2-small bfloat16, TMA forward 7: graph vs eager max rel {_max_rel(eager, graph)[0]:.2e}; "
          f"against the mma.sync forward's run {_max_rel(mma, eager)[0]:.2e} (step {_max_rel(mma, eager)[1]})")
    assert graph == eager, f"the graph parts from the eager loop: {_max_rel(eager, graph)}"
    assert eager[STEPS] < eager[0] - 0.2


def _chain_replays_its_eager_loop(tmp_path, model: str, dtype: str, form: str, base: str, base_env: dict, env: dict):
    """A dQ chain's form (env) against a run of `base` (base_env) from the same start: its graph replays its eager
    loop to the bit, it repeats itself, its losses stay within 1e-2 relative of the base run's, and it trains."""
    from tr2.cupy_side.gpu import attention, runtime
    from tr2.data import write_batch_order
    from tr2.models import load_model
    if runtime.built_for(attention.FILE) != "sm_90a":
        pytest.skip("the wgmma kernels run where attention.cu is built for sm_90a")
    cfg = load_model(model)
    order = write_batch_order(tmp_path / "order.npy", cfg.dataset, cfg.block_size, cfg.batch_size, STEPS, seed=1337)
    common = ["--model", model, "--dtype", dtype, "--batches", order, "--half-roundings"]
    reference, _ = _train(tmp_path, "base", *common, "--save-init", tmp_path / "init.npz", env=base_env)
    common += ["--init", tmp_path / "init.npz"]
    eager, _ = _train(tmp_path, "form", *common, env=env)
    eager2, _ = _train(tmp_path, "form2", *common, env=env)
    graph, out = _train(tmp_path, "form-graph", *common, "--cuda-graph", env=env)
    assert "cuda graph:" in out
    rel, step = _max_rel(reference, eager)
    print(f"{model} {dtype}, {form}: graph vs eager {_max_rel(eager, graph)[0]:.2e}; against the {base} run "
          f"{rel:.2e} (step {step})")
    assert eager2 == eager, f"the {form} repeats itself: {_max_rel(eager, eager2)}"
    assert graph == eager, f"the graph parts from the eager loop: {_max_rel(eager, graph)}"
    assert rel < 1e-2, f"the {form}'s losses part from the {base} run's: {rel:.2e} at step {step}"
    assert eager[STEPS] < eager[0] - 0.2


# gpu/attention.py's DQ_CHAIN (TR2_ATTN_DQ_CHAIN=1 at every length; the default 2 on rows of at most 256; the keys
# ascending, DQ_CHAIN_ASC's default): the chained dQ sums its parts in a new fixed order, so its losses are not the
# unchained form's bits; what must hold: its graph
# replays its eager loop to the bit (the counters zeroed by the row dots and the tickets left at zero by every launch,
# replayed), its losses stay within a rounding's reach of the unchained run from the same start (1e-2 relative over
# the steps: the bf16 run's own spread between dropout masks is ~1e-3, test_graph_replays_train_as_the_eager_loop's
# print), and the run trains. gpt2-small bfloat16 and float16 (eight key blocks a head, the chain's full length); the
# char model in bfloat16 (rows of 256, where the default runs it).
@pytest.mark.parametrize("model, dtype", [("gpt2-small", "bfloat16"), ("gpt2-small", "float16"),
                                          ("nanogpt", "bfloat16")])
def test_the_chained_dq_graph_replays_its_eager_loop(tmp_path, model, dtype):
    _chain_replays_its_eager_loop(tmp_path, model, dtype, "chained dQ", "unchained", {"TR2_ATTN_DQ_CHAIN": "0"},
                                  {"TR2_ATTN_DQ_CHAIN": "1"})


# gpu/attention.py's DQ_CHAIN_ASC (TR2_ATTN_DQ_CHAIN_ASC=1, the default since the sixty-fourth session; 0 the keys
# descending): the chain keys ascending on key-block-major tickets, dq's parts in another fixed order, so its losses
# are not the descending chain's bits; what must hold is what holds for the chain (above), against the descending
# chain's run from the same start. gpt2-small bfloat16 (the chain at every length) and the char model in float16 (rows
# of 256, where the default runs the chain).
@pytest.mark.parametrize("model, dtype, chain", [("gpt2-small", "bfloat16", "1"), ("nanogpt", "float16", "2")])
def test_the_ascending_chain_graph_replays_its_eager_loop(tmp_path, model, dtype, chain):
    _chain_replays_its_eager_loop(tmp_path, model, dtype, "ascending chain", "descending chain",
                                  {"TR2_ATTN_DQ_CHAIN": chain, "TR2_ATTN_DQ_CHAIN_ASC": "0"},
                                  {"TR2_ATTN_DQ_CHAIN": chain, "TR2_ATTN_DQ_CHAIN_ASC": "1"})


# gpu/blas.py's WORKSPACE_BY_PLAN: the cuBLAS workspace only as large as the run's products need. Every cuBLASLt
# product gets the workspace size its plan names either way, so the losses must be the full workspace's to the bit
# (eager, and graph: the workspace is sized in the warm-up, never inside the capture), and the peak in use falls by
# what the workspace no longer holds. float32 (TF32) is the build whose peak was above PyTorch's.
def test_the_workspace_by_plan_changes_no_bit(tmp_path):
    from tr2.cupy_side.gpu.blas import WORKSPACE_BYTES
    from tr2.data import write_batch_order
    from tr2.models import load_model
    cfg = load_model("nanogpt")
    order = write_batch_order(tmp_path / "order.npy", cfg.dataset, cfg.block_size, cfg.batch_size, STEPS, seed=1337)
    common = ["--model", "nanogpt", "--dtype", "float32", "--batches", order]
    full, full_out = _train(tmp_path, "full", *common, "--save-init", tmp_path / "init.npz",
                            env={"TR2_CUBLAS_WORKSPACE_BY_PLAN": "0"})
    common += ["--init", tmp_path / "init.npz"]
    by_plan, by_plan_out = _train(tmp_path, "by-plan", *common, env={"TR2_CUBLAS_WORKSPACE_BY_PLAN": "1"})
    graph, graph_out = _train(tmp_path, "by-plan-graph", *common, "--cuda-graph",
                              env={"TR2_CUBLAS_WORKSPACE_BY_PLAN": "1"})

    def workspace(out):
        m = re.search(r"cuBLAS workspace: (\d+) bytes, the largest a cuBLASLt plan of this run needs (\d+)", out)
        assert m, out[-2000:]
        return int(m.group(1)), int(m.group(2))

    def peak(out):
        return int(re.search(r"peak memory: (\d+) bytes", out).group(1))

    (ws_full, _), (ws, largest), (ws_graph, largest_graph) = map(workspace, (full_out, by_plan_out, graph_out))
    print(f"nanogpt float32: workspace {ws_full} -> {ws} bytes (largest plan {largest}; graph {ws_graph}); "
          f"peak {peak(full_out)} -> {peak(by_plan_out)} eager, graph {peak(graph_out)}")
    assert ws_full == WORKSPACE_BYTES and ws == largest and ws_graph == largest_graph == largest
    assert ws < WORKSPACE_BYTES   # else this test tests nothing: the char model's products need less
    assert by_plan == full, f"the workspace by plan changed the losses: {_max_rel(full, by_plan)}"
    assert graph == full, f"the workspace by plan in the graph: {_max_rel(full, graph)}"
    # the allocations are the same but the workspace's; CuPy rounds each to 512 bytes, and growing the workspace
    # frees the smaller one first, so the peak falls by at least what the workspace shrank, less a rounding
    assert peak(by_plan_out) <= peak(full_out) - (WORKSPACE_BYTES - ws) + 512
    assert full[STEPS] < full[0] - 0.2


# gpu/memsets.py: cuBLAS's memsets taken off the captured step's chain (TR2_MEMSET_EARLY=1: one workspace a stream;
# 2: a second workspace a stream for the products of small workspaces, taken in turn, so that a product right after
# another can have its memset moved too). The products' algorithms and workspace sizes are the same, so a whole run
# with it, eager and in the graph, must have the losses of the run without it to the bit; the log must say memsets
# were moved (else the test tests nothing), and where two workspaces alternate and every plan is small enough to
# take either, that none stayed for want of one. float32 (TF32) and float16 for their own products' algorithms.
@pytest.mark.parametrize("model, dtype, value", [
    ("nanogpt", "bfloat16", "1"), ("gpt2-small", "bfloat16", "1"), ("gpt2-small", "bfloat16", "2"),
    ("nanogpt", "float32", "2"), ("gpt2-small", "float16", "2"),
    # 3: the memsets made leaves, each product's counter in a slot of its own zeroed at the graph's start
    ("nanogpt", "bfloat16", "3"), ("gpt2-small", "bfloat16", "3"), ("nanogpt", "float32", "3"),
    ("gpt2-small", "float16", "3"),
    # 4: the leaves then destroyed after the capture, before the graph is instantiated
    ("nanogpt", "bfloat16", "4"), ("gpt2-small", "bfloat16", "4"), ("nanogpt", "float32", "4")])
def test_early_memsets_change_no_bit(tmp_path, model, dtype, value):
    from tr2.cupy_side.gpu import memsets
    from tr2.data import write_batch_order
    from tr2.models import load_model
    cfg = load_model(model)
    order = write_batch_order(tmp_path / "order.npy", cfg.dataset, cfg.block_size, cfg.batch_size, STEPS, seed=1337)
    common = ["--model", model, "--dtype", dtype, "--batches", order] + (["--half-roundings"] if dtype != "float32" else [])
    without, _ = _train(tmp_path, "off", *common, "--save-init", tmp_path / "init.npz", env={"TR2_MEMSET_EARLY": "0"})
    common += ["--init", tmp_path / "init.npz"]
    eager, eager_out = _train(tmp_path, "on", *common, env={"TR2_MEMSET_EARLY": value})
    graph, out = _train(tmp_path, "on-graph", *common, "--cuda-graph", env={"TR2_MEMSET_EARLY": value})
    m = re.search(r"cuBLAS memsets in the capture: (\d+), (\d+) moved off the chain \(TR2_MEMSET_EARLY=(\d)\)(.*)", out)
    assert m, out[-3000:]
    seen, moved, left = int(m.group(1)), int(m.group(2)), m.group(4)
    print(f"{model} {dtype} TR2_MEMSET_EARLY={value}: {moved} of {seen} memsets moved{left}; "
          f"graph vs without max rel {_max_rel(without, graph)[0]:.2e}, eager {_max_rel(without, eager)[0]:.2e}")
    print("  " + "\n  ".join(line for line in out.splitlines() if "cuBLAS workspace" in line or "peak memory" in line))
    assert m.group(3) == value, m.group(0)
    # bf16's products are known to have memsets (the committed traces: 18 a step of nanogpt, 50 of gpt2-small); the
    # other builds' products may have none, and then their case checks the bits alone
    assert (seen > 0 if dtype == "bfloat16" else True) and (moved > 0 if seen else True), m.group(0)
    largest = int(re.search(r"the largest a cuBLASLt plan of this run needs (\d+)", out).group(1))
    if value == "2" and largest <= memsets.SECOND_BYTES:   # every product takes the two workspaces in turn
        assert "the previous product on this workspace is the work right before it" not in left
    if value in ("3", "4") and largest <= memsets.SLOT_BYTES:   # every product with a workspace has a slot: all leaves
        assert moved == seen and "no slot of its own" not in left, m.group(0)
    if value == "4":   # every leaf destroyed: nothing depends on one, and CuPy instantiates at the first launch
        assert re.search(rf"; {moved} leaves removed after the capture(;|$)", left, re.M), m.group(0)
    assert eager == without, f"TR2_MEMSET_EARLY={value} changed the eager losses: {_max_rel(without, eager)}"
    assert graph == without, f"the graph with its memsets moved parts from the run without: {_max_rel(without, graph)}"
    assert without[STEPS] < without[0] - 0.2


# gpu/deferred_finals.py (TR2_LN_DW_DEFER=1): every LayerNorm's dw final of a backward in one launch at its end, the
# same partials summed in the same order, so the run's losses are the run without it, eager and in the graph.
@pytest.mark.parametrize("model, dtype", [("nanogpt", "bfloat16"), ("gpt2-small", "bfloat16"), ("nanogpt", "float32")])
def test_deferred_layernorm_finals_change_no_bit(tmp_path, model, dtype):
    without, eager, graph, out = _with_and_without(tmp_path, model, dtype, "TR2_LN_DW_DEFER")
    from tr2.models import load_model
    n = 2 * load_model(model).n_layer + 1   # every LayerNorm of the backward took a row of the stack
    assert f"LayerNorm dw finals deferred (TR2_LN_DW_DEFER=1): {n} of {n} LayerNorms in one launch" in out, out[-2000:]
    print(f"{model} {dtype} TR2_LN_DW_DEFER=1: graph vs without max rel {_max_rel(without, graph)[0]:.2e}, eager "
          f"{_max_rel(without, eager)[0]:.2e}; " + "; ".join(line for line in out.splitlines() if "peak memory" in line))
    assert eager == without, f"the deferred finals changed the eager losses: {_max_rel(without, eager)}"
    assert graph == without, f"the deferred finals changed the graph's losses: {_max_rel(without, graph)}"
    assert without[STEPS] < without[0] - 0.2
