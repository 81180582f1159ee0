"""Models, data, weights, schedule and the trainer's argument checks: the pieces both sides share."""
import math
import subprocess
import sys

import numpy as np
import pytest

from tr2 import Tr2Error, data, weights
from tr2.models import count_params, list_models, load_model
from tr2.schedule import get_lr


@pytest.mark.parametrize("name, millions", [("nanogpt", 10.65), ("gpt2-small", 123.59), ("gpt2-medium", 353.55)])
def test_parameter_counts_are_nanogpts(name, millions):
    # nanoGPT prints "number of parameters: X.XXM" without the position embeddings.
    assert round(count_params(load_model(name)) / 1e6, 2) == millions


def test_model_hyperparameters():
    m1 = load_model("nanogpt")
    assert (m1.n_layer, m1.n_head, m1.n_embd, m1.block_size, m1.batch_size, m1.vocab_size) == (6, 6, 384, 256, 64, 65)
    assert (m1.dropout, m1.learning_rate, m1.min_lr, m1.beta2, m1.max_iters) == (0.2, 1e-3, 1e-4, 0.99, 5000)
    m2 = load_model("gpt2-medium")
    assert (m2.n_layer, m2.n_head, m2.n_embd, m2.vocab_size, m2.beta2, m2.lr_decay_iters) == (24, 16, 1024, 50304, 0.95, 2000)
    for name in list_models():
        cfg = load_model(name)
        assert (cfg.beta1, cfg.weight_decay, cfg.grad_clip, cfg.eps_ln) == (0.9, 0.1, 1.0, 1e-5)


def test_unknown_model_is_a_clear_error():
    with pytest.raises(Tr2Error, match="'gpt3'.*allowed: nanogpt"):
        load_model("gpt3")


def test_char_data_as_nanogpt_prepares_it():
    vocab = data.char_vocab()
    assert len(vocab) == 65 and vocab[0] == "\n" and vocab[1] == " "
    train, val = data.load_split("shakespeare_char", "train"), data.load_split("shakespeare_char", "val")
    # nanoGPT's prepare.py reports 1,003,854 train and 111,540 val tokens.
    assert (len(train), len(val)) == (1003854, 111540)
    assert train.dtype == np.uint16 and train.max() == 64


def test_bpe_tokens_read_and_checked():
    assert len(data.load_split("shakespeare", "train")) == 301966
    assert len(data.load_split("shakespeare", "val")) == 36059


def test_wrong_data_file_names_the_fix(tmp_path, monkeypatch):
    (tmp_path / "val.bin").write_bytes(b"\0\0")
    monkeypatch.setenv("TR2_DATA", str(tmp_path))
    data._md5.cache_clear()
    with pytest.raises(Tr2Error, match="md5 .* differs"):
        data.data_file("val.bin")


def test_batches_shift_by_one():
    d = np.arange(1000, dtype=np.uint16)
    x, y = data.make_batch(d, np.array([3, 500]), 8)
    assert x.shape == (2, 8) and (y == x + 1).all() and x[1, 0] == 500


def test_batch_order_round_trip(tmp_path):
    path = data.write_batch_order(tmp_path / "order.npy", "shakespeare_char", 64, 8, steps=20, seed=7)
    offsets, meta = data.read_batch_order(path)
    assert offsets.shape == (21, 8) and meta["seed"] == 7
    again = data.write_batch_order(tmp_path / "again.npy", "shakespeare_char", 64, 8, steps=20, seed=7)
    assert (data.read_batch_order(again)[0] == offsets).all()
    src = data.BatchSource("shakespeare_char", 64, 8, seed=0, order_path=path)
    x, _ = src.train_batch(5)
    train = data.load_split("shakespeare_char", "train")
    assert (x[0] == train[offsets[5, 0]: offsets[5, 0] + 64]).all()
    with pytest.raises(Tr2Error, match="block_size=64"):
        data.BatchSource("shakespeare_char", 32, 8, seed=0, order_path=path)


def test_weights_init_and_files(tmp_path):
    cfg = load_model("tiny")
    w = weights.init_numpy(cfg, seed=1)
    assert set(w) == set(weights.param_shapes(cfg))
    assert abs(w["transformer.wte.weight"].std() - 0.02) < 0.002
    assert abs(w["transformer.h.0.mlp.c_proj.weight"].std() - 0.02 / math.sqrt(2 * cfg.n_layer)) < 0.002
    assert (w["transformer.ln_f.weight"] == 1).all()
    back = weights.load_weights(weights.save_weights(tmp_path / "w.npz", w), cfg)
    assert all((back[k] == w[k]).all() for k in w)
    with pytest.raises(Tr2Error, match="does not fit model nanogpt"):
        weights.load_weights(tmp_path / "w.npz", load_model("nanogpt"))


def test_schedule_warmup_cosine_floor():
    cfg = load_model("nanogpt")
    assert get_lr(0, cfg) == pytest.approx(1e-3 / 101)
    assert get_lr(100, cfg) == pytest.approx(1e-3)
    assert get_lr(2550, cfg) == pytest.approx(1e-4 + 0.5 * 0.9e-3)
    assert get_lr(5000, cfg) == pytest.approx(1e-4) and get_lr(6000, cfg) == 1e-4


@pytest.mark.parametrize("argv, message", [
    (["--side", "jax", "--model", "tiny", "--steps", "1"], "--side: 'jax' is not allowed; allowed: cupy, torch"),
    (["--side", "torch", "--model", "gpt5", "--steps", "1"], "--model: 'gpt5' is not allowed"),
    (["--side", "torch", "--model", "tiny", "--steps", "1", "--dtype", "fp8"], "--dtype: 'fp8' is not allowed"),
    (["--side", "cupy", "--model", "tiny", "--steps", "1", "--mode", "default"], "only --side torch | nanogpt take a mode"),
    (["--side", "torch", "--model", "tiny", "--steps", "1", "--mode", "fast"], "--mode: 'fast' is not allowed"),
    (["--side", "torch", "--model", "tiny", "--steps", "-3"], "--steps: -3 is not allowed; allowed: an integer from 0 to 1000000"),
    (["--side", "torch", "--model", "tiny", "--steps", "1", "--dropout", "1.5"], "--dropout: 1.5 is out of range"),
    (["--side", "cupy", "--model", "tiny", "--steps", "1", "--half-roundings"], "allowed only with bfloat16 or float16"),
    (["--side", "torch", "--model", "tiny", "--steps", "1", "--cuda-graph"], "only --side cupy takes it"),
    (["--side", "cupy", "--model", "tiny", "--steps", "1", "--device", "cpu", "--cuda-graph"],
     "--cuda-graph: the run is on the cpu; allowed only on cuda"),
    (["--side", "torch", "--model", "tiny"], "the following arguments are required: --steps"),
    (["--side", "torch", "--model", "tiny", "--steps", "x"], "error: --steps: 'x' is not allowed; allowed: an integer"),
    (["--side", "torch", "--model", "tiny", "--steps", "1", "--eval-interval", "2.5"],
     "error: --eval-interval: '2.5' is not allowed; allowed: an integer"),
    (["--side", "torch", "--model", "tiny", "--steps", "1", "--dropout", "half"],
     "error: --dropout: 'half' is not allowed; allowed: a number"),
    (["--side", "torch", "--model", "tiny", "--steps", "1", "--metrics", "/no-such-tr2-folder/m.jsonl"],
     "--metrics: '/no-such-tr2-folder/m.jsonl' lies in '/no-such-tr2-folder', which is not a folder; allowed: a file "
     "path in an existing folder"),
    (["--side", "torch", "--model", "tiny", "--steps", "1", "--metrics", "/"], "--metrics: '/' is a folder; allowed"),
    (["--side", "torch", "--model", "tiny", "--steps", "1", "--save-init", "/no-such-tr2-folder/init.npz"],
     "--save-init: '/no-such-tr2-folder/init.npz' lies in '/no-such-tr2-folder', which is not a folder"),
])
def test_bad_arguments_give_one_line_and_exit_2(argv, message):
    p = subprocess.run([sys.executable, "-m", "tr2.train", *argv], capture_output=True, text=True, timeout=60)
    assert p.returncode == 2
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and message in lines[0], p.stderr
    assert p.stdout == ""
