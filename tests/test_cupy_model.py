"""The cupy side's model, optimizer and trainer on the NumPy backend: whole-model gradients against
finite differences, AdamW + clipping against torch, the loss scaler's rule, nanoGPT's schedule, and
the trainer end to end."""
import json
import math
import os
import re
import subprocess
import sys

import numpy as np
import pytest
import torch

from tr2 import train as tr2_train
from tr2.cupy_side import train as cupy_train
from tr2.cupy_side.backend import get_backend
from tr2.cupy_side.model import GPT
from tr2.cupy_side import rng
from tr2.cupy_side.ops import adamw as adamw_ops
from tr2.cupy_side.optim import AdamW, LossScaler, apply_update, optimizer_step
from tr2.models import load_model
from tr2.schedule import get_lr
from tr2.weights import init_numpy, param_shapes

ITER_LINE = re.compile(r"^iter (\d+): loss ([0-9.]+), time ([0-9.]+)ms$")


def small_cfg(**over):
    kw = dict(n_layer=2, n_head=2, n_embd=8, block_size=6, batch_size=2, dropout=0.1)
    kw.update(over)
    return load_model("tiny", **kw)


def random_weights(cfg, seed=0):
    """Weights larger than nanoGPT's init, so every nonlinearity bends (a stronger gradient test)."""
    gen = np.random.default_rng(seed)
    return {k: (1 + 0.3 * gen.standard_normal(s) if len(s) == 1 else 0.3 * gen.standard_normal(s))
            for k, s in param_shapes(cfg).items()}


def batch(cfg, seed=1):
    gen = np.random.default_rng(seed)
    shape = (cfg.batch_size, cfg.block_size)
    return gen.integers(0, cfg.vocab_size, shape), gen.integers(0, cfg.vocab_size, shape)


# ---------------------------------------------------------------------------------------------
# the model

def test_model_gradient_matches_finite_differences():
    cfg = small_cfg()
    model = GPT(cfg, get_backend("cpu", "float64"), random_weights(cfg), seed=5)
    X, Y = batch(cfg)
    step = 3  # dropout on: the masks are a function of (seed, step), so the loss is a smooth function
    model.forward(X, Y, step)
    grads = model.backward()
    assert list(grads) == list(param_shapes(cfg))
    gen = np.random.default_rng(2)
    h = 1e-5
    for name, p in model.params.items():
        flat = p.reshape(-1)
        for j in gen.choice(flat.size, 3, replace=False):
            keep = flat[j]
            flat[j] = keep + h
            up = float(model.forward(X, Y, step, training=True))
            flat[j] = keep - h
            down = float(model.forward(X, Y, step, training=True))
            flat[j] = keep
            numeric = (up - down) / (2 * h)
            analytic = grads[name].reshape(-1)[j]
            assert abs(analytic - numeric) <= 1e-6 * abs(numeric) + 1e-9, (name, j, analytic, numeric)


def test_values_no_backward_reads_are_released_in_the_forward():
    """The c_proj products' outputs are freed once the forward has used them; the inputs backward needs (here:
    c_attn's and c_fc's outputs) stay. Weak references to every product's output show which arrays a training
    forward leaves alive; the gradients are unchanged. The embedding's output is the stream after its dropout (one
    operation: no array of the sum before the dropout reaches the model), which ln_1's backward reads."""
    import weakref
    cfg = small_cfg(dropout=0.1)
    w = random_weights(cfg)
    be = get_backend("cpu", "float64")
    model = GPT(cfg, be, w, seed=5)
    X, Y = batch(cfg)
    model.forward(X, Y, 3)
    want = {k: v.copy() for k, v in model.backward().items()}
    outputs, embedded = [], []
    matmul, embedding = be.matmul_forward, be.embedding_forward

    def recording_matmul(x, wt):
        y = matmul(x, wt)
        outputs.append(weakref.ref(y))
        return y

    def recording_embedding(*args):
        y = embedding(*args)
        embedded.append(weakref.ref(y))
        return y
    be.matmul_forward, be.embedding_forward = recording_matmul, recording_embedding
    try:
        model.forward(X, Y, 3)
        alive = [r() is not None for r in outputs]
        # per block: c_attn, attn c_proj, c_fc, mlp c_proj; then lm_head (its logits hold the logits' gradient)
        assert alive == [True, False, True, False] * cfg.n_layer + [True]
        assert len(embedded) == 1 and embedded[0]() is not None
        got = model.backward()
    finally:
        be.matmul_forward, be.embedding_forward = matmul, embedding
    for k in want:
        np.testing.assert_array_equal(got[k], want[k])


def test_values_are_released_in_the_backward_once_their_last_reader_has_run():
    """GELU's output (N x 4C a block, read by the MLP's c_proj backward alone) is gone before GELU's backward runs,
    and GELU's input (c_fc's output) before c_fc's backward: autograd's lifetimes. Before, the tape's nodes held each
    until their own closures went, so GELU's output stayed through GELU's backward, at the step's peak. Weak
    references to GELU's inputs and outputs, checked at each backward call that follows; the gradients unchanged."""
    import weakref
    cfg = small_cfg(dropout=0.1)
    be = get_backend("cpu", "float64")
    model = GPT(cfg, be, random_weights(cfg), seed=5)
    X, Y = batch(cfg)
    model.forward(X, Y, 3)
    want = {k: v.copy() for k, v in model.backward().items()}
    ins, outs, seen = [], [], []
    gelu_forward, gelu_backward, matmul_backward = be.gelu_forward, be.gelu_backward, be.matmul_backward
    c_fc_shape = (4 * cfg.n_embd, cfg.n_embd)

    def recording_gelu_forward(x):
        y = gelu_forward(x)
        ins.append(weakref.ref(x))
        outs.append(weakref.ref(y))
        return y

    def checking_gelu_backward(dy, x):
        block = cfg.n_layer - 1 - sum(1 for s in seen if s[0] == "gelu")   # backward runs the blocks last first
        seen.append(("gelu", block, outs[block]() is None))
        return gelu_backward(dy, x)

    def checking_matmul_backward(dy, x, w):
        if w.shape == c_fc_shape:
            block = cfg.n_layer - 1 - sum(1 for s in seen if s[0] == "c_fc")
            seen.append(("c_fc", block, ins[block]() is None))
        return matmul_backward(dy, x, w)
    be.gelu_forward, be.gelu_backward, be.matmul_backward = (recording_gelu_forward, checking_gelu_backward,
                                                            checking_matmul_backward)
    try:
        model.forward(X, Y, 3)
        assert all(r() is not None for r in ins + outs)   # the forward keeps both: backward reads them
        got = model.backward()
    finally:
        be.gelu_forward, be.gelu_backward, be.matmul_backward = gelu_forward, gelu_backward, matmul_backward
    blocks = list(range(cfg.n_layer - 1, -1, -1))
    assert [s for s in seen if s[0] == "gelu"] == [("gelu", b, True) for b in blocks]
    assert [s for s in seen if s[0] == "c_fc"] == [("c_fc", b, True) for b in blocks]
    for k in want:
        np.testing.assert_array_equal(got[k], want[k])


class _UnfusedEmbedding:
    """A backend that runs the model's first block as it ran before the embedding's dropout moved inside the
    embedding's kernel and ln_1's backward became a residual add's: the embedding, then dropout_forward; then
    LayerNorm's backward (layernorm_backward), the tape's add of the first residual add's gradient
    (residual_forward), dropout_backward, and the embedding's backward of that. Records what it gets."""

    def __init__(self, be):
        self.be, self.calls = be, []

    def __getattr__(self, name):
        return getattr(self.be, name)

    def embedding_forward(self, idx, wte, wpe, *drop):
        self.calls.append(("forward", drop))
        x = self.be.embedding_forward(idx, wte, wpe)
        return self.be.dropout_forward(x, *drop) if drop else x

    def embedding_backward(self, dx, idx, dwte, dwpe):
        self.calls.append(("backward", ()))
        self.be.embedding_backward(dx, idx, dwte, dwpe)

    def embedding_backward_tied(self, dx, idx, dwte, dwpe):
        g = self.be.gradient_f32(dwte)
        self.embedding_backward(dx, idx, g, dwpe)
        return g

    def residual_layernorm_backward(self, dy, dskip, s, w, mean, rstd, p, seed, offset, offset_add=None,
                                    branch_float32=False):
        if not branch_float32:   # a block's residual add: as it is
            return self.be.residual_layernorm_backward(dy, dskip, s, w, mean, rstd, p, seed, offset, offset_add)
        self.calls.append(("first layernorm", (p, seed, offset, offset_add)))
        dx, dw = self.be.layernorm_backward(dy, s, w, mean, rstd)
        total = self.be.residual_forward(dskip, dx)   # the tape's add: the gradient it held, then ln_1's
        return total, self.be.dropout_backward(total, p, seed, offset, offset_add), dw


@pytest.mark.parametrize("dropout", [0.0, 0.2])
@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_embedding_dropout_and_first_layernorm_are_the_unfused_model(dropout, dtype):
    """The model's first block (the embedding's dropout inside its kernel; ln_1's backward as a residual add's, with
    the stream's other gradient as dskip and the mask applied there, in float32) gives the loss and gradients of the
    unfused operations, to the bit, two steps; it passes the embedding site's offset and the device step counter,
    no dropout arguments to the embedding at p = 0, in evaluation or in backward (the mask is applied before it)."""
    cfg = small_cfg(dropout=dropout)
    w = random_weights(cfg)
    X, Y = batch(cfg)
    fused = GPT(cfg, get_backend("cpu", dtype), w, seed=5)
    unfused_be = _UnfusedEmbedding(get_backend("cpu", dtype))
    unfused = GPT(cfg, unfused_be, w, seed=5)
    for step in (3, 4):
        losses = [float(m.forward(X, Y, step)) for m in (fused, unfused)]
        grads = [m.backward() for m in (fused, unfused)]
        assert losses[0] == losses[1]
        for k in grads[0]:
            assert np.array_equal(grads[0][k], grads[1][k]), k
    offset = rng.site_offset(0, unfused.n_sites, rng.SITE_EMBEDDING)
    want = (dropout, 5, offset) if dropout else ()
    assert [k for k, _ in unfused_be.calls] == ["forward", "first layernorm", "backward"] * 2
    for kind, args in unfused_be.calls:
        if kind == "forward":
            assert args[:3] == want and len(args) == (4 if dropout else 0)
            assert not dropout or args[3] is unfused.step_counter
        elif kind == "first layernorm":
            assert args[:3] == (dropout, 5, offset) and args[3] is unfused.step_counter
        else:
            assert args == ()
    unfused_be.calls.clear()
    assert float(fused.forward(X, Y, 3, training=False)) == float(unfused.forward(X, Y, 3, training=False))
    assert unfused_be.calls == [("forward", ())]


def test_dropout_depends_on_step_and_is_off_in_evaluation():
    cfg = small_cfg(dropout=0.2)
    w = random_weights(cfg)
    model = GPT(cfg, get_backend("cpu", "float64"), w, seed=5)
    X, Y = batch(cfg)
    a, b, c = (float(model.forward(X, Y, s)) for s in (4, 4, 5))
    assert a == b and a != c
    plain = GPT(small_cfg(dropout=0.0), get_backend("cpu", "float64"), w)
    assert float(model.forward(X, Y, 4, training=False)) == float(plain.forward(X, Y, 4))
    with pytest.raises(RuntimeError):
        model.backward()  # an evaluation forward records nothing


def test_step_counter_on_the_device_numbers_the_masks_as_the_step_argument():
    """A captured step passes step=None and reads the counter set_step wrote: the same masks as step=s."""
    cfg = small_cfg(dropout=0.2)
    model = GPT(cfg, get_backend("cpu", "float64"), random_weights(cfg), seed=5)
    X, Y = batch(cfg)
    by_arg = [float(model.forward(X, Y, s)) for s in (3, 4)]
    by_counter = []
    for s in (3, 4):
        model.set_step(s)
        by_counter.append(float(model.forward(X, Y, None)))
    assert by_counter == by_arg and by_arg[0] != by_arg[1]
    assert int(model.step_counter[0]) == rng.site_offset(4, model.n_sites, 0)


def test_split_optimizer_step_is_the_whole_step():
    """set_lr (host values in) then apply_update (device work only) moves the weights as optimizer_step does."""
    cfg = small_cfg(dropout=0.0)
    w = random_weights(cfg)
    be = get_backend("cpu", "float32")
    X, Y = batch(cfg)
    out = []
    for split in (False, True):
        model = GPT(cfg, be, w)
        opt = AdamW(be, model.params, (cfg.beta1, cfg.beta2), cfg.eps_adam, cfg.weight_decay)
        for it in range(3):
            model.forward(X, Y, it)
            grads = model.backward()
            if split:
                opt.set_lr(1e-3 * (it + 1))
                apply_update(be, opt, grads, 1.0)
            else:
                optimizer_step(be, opt, LossScaler(be, False), grads, 1e-3 * (it + 1), 1.0)
        out.append({k: v.copy() for k, v in model.params.items()})
    for k in out[0]:
        assert np.array_equal(out[0][k], out[1][k]), k


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_the_step_inputs_written_as_one_block_train_as_four_writes(dtype):
    """--cuda-graph's step writes the batch, the dropout step counter and AdamW's scalars by one copy into views of
    one buffer (train.step_inputs): three steps that read them (step=None, apply_update) give the bits of three
    steps fed by set_step and set_lr, with dropout on, and the model and optimizer read the block's views."""
    cfg = small_cfg(dropout=0.2)
    w = random_weights(cfg)
    be = get_backend("cpu", dtype)
    batches = [batch(cfg, seed=s) for s in range(3)]
    out = []
    for one_block in (False, True):
        model = GPT(cfg, be, w, seed=7)
        opt = AdamW(be, model.params, (cfg.beta1, cfg.beta2), cfg.eps_adam, cfg.weight_decay)
        if one_block:
            block, X, Y = cupy_train.step_inputs(be, model, opt, batches[0][0].shape)
            assert model.step_counter is block.views[2] and opt.hyper is block.views[3]
        losses = []
        for it, (x, y) in enumerate(batches):
            if one_block:
                cupy_train.write_step_inputs(be, block, model, opt, it + 1, x, y, 1e-3 * (it + 1))
            else:
                X, Y = x, y
                model.set_step(it + 1)
                opt.set_lr(1e-3 * (it + 1))
            losses.append(float(model.forward(X, Y, None)))
            apply_update(be, opt, model.backward(), 1.0)
        out.append((losses, {k: v.copy() for k, v in model.params.items()}))
    assert out[0][0] == out[1][0] and len(set(out[0][0])) == 3
    for k in out[0][1]:
        assert np.array_equal(out[0][1][k], out[1][1][k]), k


def test_loss_scale_multiplies_gradients():
    cfg = small_cfg()
    model = GPT(cfg, get_backend("cpu", "float64"), random_weights(cfg))
    X, Y = batch(cfg)
    model.forward(X, Y, 0)
    g1 = model.backward()
    model.forward(X, Y, 0, dloss=np.asarray(1024.0))
    g2 = model.backward()
    for k in g1:
        np.testing.assert_allclose(g2[k], 1024.0 * g1[k], rtol=1e-13, atol=1e-300)


@pytest.mark.parametrize("dtype, half_roundings, tol", [("float32", False, 1e-4), ("bfloat16", False, 0.05),
                                                        ("bfloat16", True, 0.1), ("float16", False, 0.02)])
def test_lower_precision_builds_track_float64(dtype, half_roundings, tol):
    cfg = small_cfg(dropout=0.1, n_embd=16)
    w = init_numpy(cfg, 3)
    X, Y = batch(cfg)
    ref = GPT(cfg, get_backend("cpu", "float64"), w, seed=1)
    ref_loss = float(ref.forward(X, Y, 2))
    ref_grads = ref.backward()
    be = get_backend("cpu", dtype, tf32=False, half_roundings=half_roundings)
    model = GPT(cfg, be, w, seed=1)
    loss = model.forward(X, Y, 2)
    assert loss.dtype == np.float32
    assert abs(float(loss) - ref_loss) < tol * ref_loss
    grads = model.backward()
    for k, g in grads.items():
        assert g.dtype == np.float32
        assert np.linalg.norm(g - ref_grads[k]) <= tol * np.linalg.norm(ref_grads[k]), k


# ---------------------------------------------------------------------------------------------
# optimizer, clipping, loss scaling

def optimizer_case(dtype, seed=0):
    gen = np.random.default_rng(seed)
    shapes = {"a.weight": (6, 4), "b.weight": (4,), "c.weight": (3, 5)}
    params = {k: gen.standard_normal(s).astype(dtype) for k, s in shapes.items()}
    grad_steps = [{k: (gen.standard_normal(s) * scale).astype(dtype) for k, s in shapes.items()}
                  for scale in (3.0, 0.01, 1.0)]  # norms above, below and near the clip at 1.0
    return params, grad_steps


@pytest.mark.parametrize("dtype, rtol", [("float64", 1e-12), ("float32", 1e-6)])
def test_adamw_with_clipping_matches_torch(dtype, rtol):
    np_dtype = np.float64 if dtype == "float64" else np.float32
    params, grad_steps = optimizer_case(np_dtype)
    lr, betas, eps, wd, clip = 6e-4, (0.9, 0.95), 1e-8, 0.1, 1.0

    tparams = {k: torch.tensor(v, requires_grad=True) for k, v in params.items()}
    groups = [{"params": [p for p in tparams.values() if p.dim() >= 2], "weight_decay": wd},
              {"params": [p for p in tparams.values() if p.dim() < 2], "weight_decay": 0.0}]
    topt = torch.optim.AdamW(groups, lr=lr, betas=betas, eps=eps)

    be = get_backend("cpu", dtype)
    mine = {k: be.to_device(v) for k, v in params.items()}
    opt = AdamW(be, mine, betas, eps, wd)
    scaler = LossScaler(be, enabled=False)
    for it, grads in enumerate(grad_steps):
        step_lr = lr * (it + 1) / 3
        for k, p in tparams.items():
            p.grad = torch.tensor(grads[k])
        torch.nn.utils.clip_grad_norm_(list(tparams.values()), clip)
        for g in topt.param_groups:
            g["lr"] = step_lr
        topt.step()
        optimizer_step(be, opt, scaler, grads, step_lr, clip)
        assert opt.steps_taken() == it + 1
        for k in params:
            np.testing.assert_allclose(mine[k], tparams[k].detach().numpy(), rtol=rtol, atol=rtol * 1e-2)
    assert opt.steps_taken() == 3


def _scalars(gnorm, max_norm, scale=None, t=0.0):
    """ops/adamw.scalars on a fresh hyper (set_lr's zeros): (grad_scale, skip, t, bias_corr1, bias_corr2)."""
    h, tt = np.zeros(len(adamw_ops.HYPER), np.float32), np.array(t)
    adamw_ops.scalars(np, h, tt, None if gnorm is None else np.array(gnorm, np.float32),
                      None if scale is None else np.array(scale, np.float32), max_norm, 0.9, 0.95)
    return h[adamw_ops.GRAD_SCALE], h[adamw_ops.SKIP], float(tt), h[adamw_ops.BIAS_CORR1], h[adamw_ops.BIAS_CORR2]


def test_clip_coefficient_is_torchs():
    assert _scalars(3.0, 1.0)[0] == np.float32(1.0) / (np.float32(3.0) + np.float32(1e-6))
    assert _scalars(0.5, 1.0)[0] == 1.0
    assert _scalars(5.0, 0.0)[0] == 1.0 and _scalars(None, 0.0)[0] == 1.0


def test_step_scalars_unscale_skip_and_count():
    """With a loss scale: the norm and the coefficient unscaled by 1 / scale, a non-finite norm skips the step and
    does not count it; without one: skip untouched, every step counts; bias corrections from the count."""
    inv = np.float32(1.0) / np.float32(2.0 ** 16)
    gs, skip, t, bc1, bc2 = _scalars(3.0 * 2.0 ** 16, 1.0, scale=2.0 ** 16, t=4.0)
    assert gs == np.float32(1.0) / (np.float32(3.0) + np.float32(1e-6)) * inv and skip == 0.0 and t == 5.0
    assert bc1 == np.float32(1.0 - 0.9 ** 5) and bc2 == np.float32(1.0 - 0.95 ** 5)
    gs, skip, t, bc1, _ = _scalars(np.inf, 1.0, scale=2.0 ** 16, t=4.0)
    assert skip == 1.0 and t == 4.0 and bc1 == np.float32(1.0 - 0.9 ** 4)
    assert _scalars(np.nan, 1.0, scale=2.0 ** 16)[1] == 1.0
    assert _scalars(5.0 * 2.0 ** 16, 0.0, scale=2.0 ** 16)[0] == inv   # no clip: the unscaling alone
    assert _scalars(np.inf, 1.0)[1:3] == (0.0, 1.0)   # no scaler: no overflow test, the step counts


def test_loss_scaler_rule():
    be = get_backend("cpu", "float32")
    s = LossScaler(be, enabled=True, growth_interval=3)
    assert s.value() == 2.0 ** 16 and s.scale.shape == () and s.scale.dtype == np.float32
    s.update(found_inf=True)
    assert s.value() == 2.0 ** 15
    s.update(False), s.update(False)
    assert s.value() == 2.0 ** 15
    s.update(True)                       # an overflow resets the run of good steps
    s.update(False), s.update(False)
    assert s.value() == 2.0 ** 14
    s.update(be.to_device(0.0))          # the step's own verdict, a 0-d array on the device
    assert s.value() == 2.0 ** 15        # three good steps in a row double it
    assert LossScaler(be, enabled=True).growth_interval == 2000
    off = LossScaler(be, enabled=False)
    off.update(True)
    assert off.value() == 1.0


def test_scaled_step_skips_overflow_and_unscales():
    params, grad_steps = optimizer_case(np.float32)
    be = get_backend("cpu", "float32")
    scaled = {k: be.to_device(v) for k, v in params.items()}
    plain = {k: be.to_device(v) for k, v in params.items()}
    opt_s, opt_p = AdamW(be, scaled, (0.9, 0.99), 1e-8, 0.1), AdamW(be, plain, (0.9, 0.99), 1e-8, 0.1)
    scaler = LossScaler(be, enabled=True)

    bad = {k: v * np.float32(scaler.value()) for k, v in grad_steps[0].items()}
    bad["b.weight"][1] = np.inf
    optimizer_step(be, opt_s, scaler, bad, 1e-3, 1.0)
    assert scaler.value() == 2.0 ** 15 and opt_s.steps_taken() == 0
    for k in params:
        np.testing.assert_array_equal(scaled[k], params[k])       # skipped: nothing moved
        np.testing.assert_array_equal(opt_s.ms[opt_s.names.index(k)], 0.0)

    plain_scaler = LossScaler(be, enabled=False)
    for n, grads in enumerate(grad_steps, start=1):
        s = np.float32(scaler.value())
        optimizer_step(be, opt_s, scaler, {k: v * s for k, v in grads.items()}, 1e-3, 1.0)
        optimizer_step(be, opt_p, plain_scaler, grads, 1e-3, 1.0)
        assert opt_s.steps_taken() == opt_p.steps_taken() == n   # the skipped step did not count
    for k in params:
        np.testing.assert_allclose(scaled[k], plain[k], rtol=1e-6)  # a power-of-two scale unscales exactly


def test_bias_corrections_computed_on_the_device_are_the_hosts():
    """The step count and bias corrections moved to the device (float64 there, stored in float32): the values
    AdamW reads are what the host's Python floats gave, float32(1 - beta ** t), for the first steps and late ones."""
    be = get_backend("cpu", "float32")
    opt = AdamW(be, {"w": be.to_device(np.ones((2, 2)))}, (0.9, 0.95), 1e-8, 0.1)
    for t in range(1, 2001):
        opt.set_lr(1e-3)
        opt.apply({"w": be.to_device(np.full((2, 2), 1e-3))})
        if t in (1, 2, 3, 10, 777, 2000):
            assert opt.hyper[5] == np.float32(1.0 - 0.9 ** t) and opt.hyper[6] == np.float32(1.0 - 0.95 ** t), t


# ---------------------------------------------------------------------------------------------
# schedule

def nanogpt_get_lr(it, learning_rate, min_lr, warmup_iters, lr_decay_iters):
    """nanoGPT's train.py get_lr, transcribed: linear warm-up to lr, cosine down to min_lr, then min_lr."""
    if it < warmup_iters:
        return learning_rate * (it + 1) / (warmup_iters + 1)
    if it > lr_decay_iters:
        return min_lr
    ratio = (it - warmup_iters) / (lr_decay_iters - warmup_iters)
    assert 0 <= ratio <= 1
    return min_lr + 0.5 * (1.0 + math.cos(math.pi * ratio)) * (learning_rate - min_lr)


@pytest.mark.parametrize("model", ["nanogpt", "gpt2-small", "tiny"])
def test_schedule_is_nanogpts(model):
    cfg = load_model(model)
    for it in list(range(0, cfg.warmup_iters + 3)) + list(range(cfg.lr_decay_iters - 2, cfg.lr_decay_iters + 5)) + [
            cfg.lr_decay_iters // 2, cfg.max_iters]:
        want = nanogpt_get_lr(it, cfg.learning_rate, cfg.min_lr, cfg.warmup_iters, cfg.lr_decay_iters)
        assert get_lr(it, cfg) == want


# ---------------------------------------------------------------------------------------------
# the trainer

def iter_losses(text):
    return {int(m.group(1)): float(m.group(2)) for m in map(ITER_LINE.match, text.splitlines()) if m}


def test_trainer_float32_losses_fall():
    env = dict(os.environ, OPENBLAS_NUM_THREADS="1")  # tiny products: one BLAS thread is fastest and steadiest
    out = subprocess.run([sys.executable, "-m", "tr2.train", "--side", "cupy", "--model", "tiny", "--steps", "60",
                          "--dtype", "float32"], capture_output=True, text=True, timeout=300, env=env)
    assert out.returncode == 0, out.stderr
    losses = iter_losses(out.stdout)
    assert sorted(losses) == list(range(0, 61, 10))
    assert abs(losses[0] - math.log(65)) < 0.15           # starts near uniform over 65 characters
    assert losses[60] < losses[0] - 0.4
    assert losses[60] < losses[30] < losses[0]
    assert out.stdout.strip().splitlines()[-1] == "peak memory: 0 bytes"


@pytest.mark.parametrize("dtype, extra", [("float16", []), ("bfloat16", ["--half-roundings"])])
def test_trainer_half_types_with_eval_and_metrics(tmp_path, capsys, dtype, extra):
    metrics = tmp_path / "m.jsonl"
    rc = tr2_train.main(["--side", "cupy", "--model", "tiny", "--dtype", dtype, "--steps", "4", "--eval-interval", "4",
                         "--eval-iters", "2", "--log-interval", "2", "--metrics", str(metrics), *extra])
    assert rc == 0
    out = capsys.readouterr().out
    assert sorted(iter_losses(out)) == [0, 2, 4]
    assert len(re.findall(r"^step [04]: train loss [0-9.]+, val loss [0-9.]+$", out, re.M)) == 2
    rows = [json.loads(line) for line in metrics.read_text().splitlines()]
    assert [r["step"] for r in rows if r["kind"] == "loss"] == [0, 1, 2, 3, 4]
    assert all(math.isfinite(r["loss"]) for r in rows if r["kind"] == "loss")
    assert [r["step"] for r in rows if r["kind"] == "eval"] == [0, 4]


def test_trainer_init_roundtrip_and_batches(tmp_path, capsys):
    from tr2.data import write_batch_order
    order = write_batch_order(tmp_path / "order.npy", "shakespeare_char", 64, 8, 3, seed=9)
    init = tmp_path / "init.npz"
    common = ["--side", "cupy", "--model", "tiny", "--steps", "3", "--log-interval", "1", "--batches", str(order)]
    assert tr2_train.main(common + ["--save-init", str(init), "--seed", "4"]) == 0
    first = iter_losses(capsys.readouterr().out)
    assert tr2_train.main(common + ["--init", str(init), "--seed", "4"]) == 0
    assert iter_losses(capsys.readouterr().out) == first
    assert tr2_train.main(common + ["--init", str(init), "--seed", "4", "--dropout", "0"]) == 0
    assert iter_losses(capsys.readouterr().out) != first


def test_trainer_out_of_memory_exits_3(monkeypatch, capsys):
    def no_memory(*a, **k):
        raise MemoryError("Unable to allocate 1.00 TiB\nfor an array")
    monkeypatch.setattr(cupy_train.GPT, "forward", no_memory)
    rc = tr2_train.main(["--side", "cupy", "--model", "tiny", "--steps", "2"])
    assert rc == 3
    assert capsys.readouterr().out.strip().splitlines()[-1] == "out of memory: Unable to allocate 1.00 TiB for an array"
