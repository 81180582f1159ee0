"""The torch side on the CPU: nanoGPT's model (sizes, names, initialization), weight files, one AdamW step,
and the trainer end to end. Fast (a few seconds each) except the compile check, marked slow."""
from __future__ import annotations

import json
import math
import os
import re
import subprocess
import sys
from contextlib import nullcontext

import numpy as np
import pytest
import torch

from tr2.data import write_batch_order
from tr2.models import count_params, load_model
from tr2.schedule import get_lr
from tr2.torch_side.model import GPT, load_weights_into, to_weights
from tr2.torch_side.train import train_step
from tr2.trainlog import read_metrics
from tr2.weights import load_weights, param_shapes, save_weights

ITER_RE = re.compile(r"^iter (\d+): loss ([0-9.]+), time ([0-9.]+)ms$")


pytestmark = pytest.mark.usefixtures("one_torch_thread")


def run_trainer(*argv, timeout=300):
    """`python -m tr2.train ...` in a fresh process; returns (returncode, stdout lines, stderr)."""
    # one thread: on a loaded 2-core machine torch's OpenMP pool made the tiny model's steps 20x slower
    env = dict(os.environ, PYTHONUNBUFFERED="1", OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
    p = subprocess.run([sys.executable, "-m", "tr2.train", *map(str, argv)], capture_output=True, text=True,
                       timeout=timeout, env=env)
    return p.returncode, p.stdout.splitlines(), p.stderr


def iter_losses(lines) -> dict[int, float]:
    return {int(m.group(1)): float(m.group(2)) for m in map(ITER_RE.match, lines) if m}


def read_losses(path) -> dict[int, float]:
    return read_metrics(path)["loss"]


# ---- the model --------------------------------------------------------------------------------------

# nanoGPT's own "number of parameters: %.2fM" for these shapes (non-embedding: wpe left out, tied wte once).
NANOGPT_COUNTS = {"nanogpt": (10_646_784, "10.65M"), "gpt2-small": (123_587_328, "123.59M"),
                  "gpt2-medium": (353_551_360, "353.55M")}


@pytest.mark.parametrize("name", sorted(NANOGPT_COUNTS))
def test_param_count_equals_nanogpt(name):
    cfg = load_model(name)
    with torch.device("meta"):  # shapes only: no memory, no time, even for gpt2-medium
        model = GPT(cfg)
    n = model.get_num_params()
    want_n, want_s = NANOGPT_COUNTS[name]
    assert n == want_n == count_params(cfg)
    assert f"{n / 1e6:.2f}M" == want_s
    assert model.get_num_params(non_embedding=False) == n + cfg.block_size * cfg.n_embd


def test_state_dict_names_are_nanogpts():
    cfg = load_model("tiny")
    model = GPT(cfg)
    sd = model.state_dict()
    shapes = param_shapes(cfg)
    # nanoGPT's state_dict: the transformer's tensors in module order, then the tied lm_head.weight; no biases,
    # no attention-mask buffer (the flash path registers none).
    assert list(sd) == list(shapes) + ["lm_head.weight"]
    for k, shape in shapes.items():
        assert tuple(sd[k].shape) == shape, k
    assert model.lm_head.weight is model.transformer.wte.weight  # tied: one Parameter
    assert [n for n, _ in model.named_parameters()] == list(shapes)  # the tie counted once, under wte's name


def test_init_distributions():
    cfg = load_model("nanogpt")  # 10.6M draws: sample std within ~0.3% of the true one, so 3% is a wide margin
    torch.manual_seed(1337)
    model = GPT(cfg)
    w = to_weights(model)
    std_proj = 0.02 / math.sqrt(2 * cfg.n_layer)
    for k, a in w.items():
        if a.ndim == 1:
            assert np.all(a == 1.0), k  # LayerNorm weights start at exactly 1
            continue
        want = std_proj if k.endswith("c_proj.weight") else 0.02
        assert abs(a.std() / want - 1) < 0.03, (k, a.std(), want)
        assert abs(a.mean()) < 0.05 * want, (k, a.mean())  # mean within 5% of a std of 0


def test_init_is_seeded():
    cfg = load_model("tiny")
    torch.manual_seed(7)
    a = to_weights(GPT(cfg))
    torch.manual_seed(7)
    b = to_weights(GPT(cfg))
    torch.manual_seed(8)
    c = to_weights(GPT(cfg))
    assert all(np.array_equal(a[k], b[k]) for k in a)
    assert not np.array_equal(a["transformer.wte.weight"], c["transformer.wte.weight"])


def test_weights_round_trip_through_npz(tmp_path):
    cfg = load_model("tiny")
    torch.manual_seed(1)
    src = GPT(cfg)
    save_weights(tmp_path / "w.npz", to_weights(src))
    loaded = load_weights(tmp_path / "w.npz", cfg)
    assert set(loaded) == set(param_shapes(cfg))  # lm_head.weight left out of the file: it is tied
    torch.manual_seed(2)
    dst = GPT(cfg)
    load_weights_into(dst, loaded)
    for k, v in src.state_dict().items():
        assert torch.equal(v, dst.state_dict()[k]), k  # bit-exact, lm_head included through the tie
    bad = dict(loaded)
    bad["transformer.ln_f.weight"] = np.ones(cfg.n_embd + 1, np.float32)
    with pytest.raises(ValueError):
        load_weights_into(dst, bad)


# ---- one optimizer step -----------------------------------------------------------------------------

def reference_clip_adamw(params64, grads64, lr, cfg, clip, step=1):
    """PyTorch's clip_grad_norm_ then AdamW, in float64 NumPy from fresh state: bias-corrected m and v,
    eps after the square root, decoupled decay p·(1 − lr·wd) on tensors of 2+ dims only."""
    norm = math.sqrt(sum(float((g * g).sum()) for g in grads64.values()))
    coef = min(1.0, clip / (norm + 1e-6))  # torch adds 1e-6 to the norm and never scales up
    out = {}
    for k, p in params64.items():
        g = grads64[k] * coef
        m = (1 - cfg.beta1) * g
        v = (1 - cfg.beta2) * g * g
        wd = cfg.weight_decay if p.ndim >= 2 else 0.0
        p = p * (1 - lr * wd)
        mhat, vhat = m / (1 - cfg.beta1 ** step), v / (1 - cfg.beta2 ** step)
        out[k] = p - lr * mhat / (np.sqrt(vhat) + cfg.eps_adam)
    return out, norm


def test_adamw_step_matches_reference():
    cfg = load_model("tiny", dropout=0.0)
    torch.manual_seed(3)
    model = GPT(cfg)
    opt = model.configure_optimizers(cfg.weight_decay, cfg.learning_rate, (cfg.beta1, cfg.beta2), cfg.eps_adam, "cpu")
    names = {id(p): n for n, p in model.named_parameters()}
    decay = {names[id(p)] for p in opt.param_groups[0]["params"]}
    assert opt.param_groups[0]["weight_decay"] == cfg.weight_decay and opt.param_groups[1]["weight_decay"] == 0.0
    assert decay == {k for k, s in param_shapes(cfg).items() if len(s) >= 2}

    lr = get_lr(150, cfg)  # after warm-up: an update of ~1e-3, far above float32's rounding of the weights
    for g in opt.param_groups:
        g["lr"] = lr
    gen = torch.Generator().manual_seed(0)
    X = torch.randint(cfg.vocab_size, (cfg.batch_size, cfg.block_size), generator=gen)
    Y = torch.randint(cfg.vocab_size, (cfg.batch_size, cfg.block_size), generator=gen)
    p0 = {k: v.astype(np.float64) for k, v in to_weights(model).items()}
    # the gradients the step will see (the CPU forward/backward is deterministic)
    _, loss = model(X, Y)
    loss.backward()
    g0 = {n: p.grad.double().numpy().copy() for n, p in model.named_parameters()}
    model.zero_grad(set_to_none=True)

    clip = 0.05  # below the initial gradient norm (~0.6), so the clip is exercised
    want, norm = reference_clip_adamw(p0, g0, lr, cfg, clip)
    assert norm > clip
    scaler = torch.amp.GradScaler("cpu", enabled=False)
    train_step(model, model, opt, scaler, nullcontext(), X, Y, clip)
    got = {k: v.astype(np.float64) for k, v in to_weights(model).items()}
    for k in want:
        d_got, d_want = got[k] - p0[k], want[k] - p0[k]
        # the update (~lr) against float32 arithmetic on weights of ~0.02..1: 2e-4 of the update is ~20 ulps
        rel = np.linalg.norm(d_got - d_want) / np.linalg.norm(d_want)
        assert rel < 2e-4, (k, rel)


# ---- the trainer ------------------------------------------------------------------------------------

def test_trainer_prints_falling_losses():
    rc, lines, err = run_trainer("--side", "torch", "--model", "tiny", "--steps", 60, "--device", "cpu")
    assert rc == 0, err
    losses = iter_losses(lines)
    assert sorted(losses) == list(range(0, 61, 10))  # iterations 0..60 inclusive, a line every 10
    assert abs(losses[0] - math.log(65)) < 0.1  # untrained: about ln(vocab)
    assert losses[60] < losses[0] - 0.3  # tiny falls from ~4.19 to ~3.35 in 60 steps
    for a, b in zip(sorted(losses)[:-1], sorted(losses)[1:]):
        assert losses[b] < losses[a] + 0.05, (a, losses[a], b, losses[b])  # falling, give or take batch noise
    assert lines[-1] == "peak memory: 0 bytes"
    assert "number of parameters: 0.10M" in lines


def _main(argv, capsys):
    from tr2.train import main
    rc = main([str(a) for a in argv])
    return rc, capsys.readouterr().out.splitlines()


def test_save_init_then_init_with_recorded_batches(tmp_path, capsys):
    order = write_batch_order(tmp_path / "order.npy", "shakespeare_char", 64, 8, steps=5, seed=11)
    common = ["--side", "torch", "--model", "tiny", "--steps", 5, "--device", "cpu", "--dropout", 0,
              "--batches", order, "--no-tf32"]
    rc, _ = _main(common + ["--save-init", tmp_path / "w.npz", "--metrics", tmp_path / "a.jsonl"], capsys)
    assert rc == 0
    # another seed: only --init makes the start the same
    rc, _ = _main(common + ["--init", tmp_path / "w.npz", "--seed", 99, "--metrics", tmp_path / "b.jsonl"], capsys)
    assert rc == 0
    a, b = read_losses(tmp_path / "a.jsonl"), read_losses(tmp_path / "b.jsonl")
    assert sorted(a) == list(range(6))  # every step's loss when --metrics is given
    assert a == b  # same start, same batches, no dropout, one CPU: the same digits


def test_float16_on_cpu_with_evaluation(tmp_path, capsys):
    rc, lines = _main(["--side", "torch", "--model", "tiny", "--steps", 4, "--device", "cpu", "--dtype", "float16",
                       "--eval-interval", 2, "--eval-iters", 2, "--log-interval", 2,
                       "--metrics", tmp_path / "m.jsonl"], capsys)
    assert rc == 0
    assert any("GradScaler" in ln for ln in lines)
    evals = [ln for ln in lines if ln.startswith("step ")]
    assert [int(ln.split()[1].rstrip(":")) for ln in evals] == [0, 2, 4]
    recs = [json.loads(x) for x in (tmp_path / "m.jsonl").read_text().splitlines()]
    assert [r["step"] for r in recs if r["kind"] == "eval"] == [0, 2, 4]
    assert all(math.isfinite(r["loss"]) for r in recs if r["kind"] == "loss")


def test_out_of_memory_is_exit_3(monkeypatch, capsys):
    def boom(self, idx, targets=None):
        raise torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")
    monkeypatch.setattr(GPT, "forward", boom)
    rc, lines = _main(["--side", "torch", "--model", "tiny", "--steps", 2, "--device", "cpu"], capsys)
    assert rc == 3
    assert lines[-1] == "out of memory: CUDA out of memory. Tried to allocate 2.00 GiB"


def test_bad_init_file_is_one_line_error(tmp_path, capsys):
    save_weights(tmp_path / "w.npz", {"transformer.wte.weight": np.zeros((65, 64), np.float32)})
    from tr2.train import main
    rc = main(["--side", "torch", "--model", "tiny", "--steps", "1", "--device", "cpu", "--init", str(tmp_path / "w.npz")])
    err = capsys.readouterr().err
    assert rc == 2 and err.startswith("tr2.train: error: --init:") and err.count("\n") == 1


@pytest.mark.slow
def test_compile_default_matches_eager_at_step_0(tmp_path):
    """torch.compile (Inductor, C++ on the CPU) against eager: 20-40 s here, most of it compiling."""
    common = ["--side", "torch", "--model", "tiny", "--steps", 1, "--device", "cpu", "--dropout", 0, "--no-tf32"]
    rc, _, err = run_trainer(*common, "--metrics", tmp_path / "eager.jsonl")
    assert rc == 0, err
    rc, lines, err = run_trainer(*common, "--mode", "default", "--metrics", tmp_path / "default.jsonl")
    if rc != 0 and ("CppCompileError" in err or "InvalidCxxCompiler" in err):
        pytest.skip("torch.compile has no working C++ compiler here")
    assert rc == 0, err
    e, d = read_losses(tmp_path / "eager.jsonl"), read_losses(tmp_path / "default.jsonl")
    # Same weights and batch; Inductor fuses and reorders float32 sums, so digits past ~1e-7 may differ.
    assert abs(d[0] - e[0]) / e[0] < 1e-5, (e[0], d[0])
    assert abs(d[1] - e[1]) / e[1] < 1e-4, (e[1], d[1])  # after one update: still float32 noise only
