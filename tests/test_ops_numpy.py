"""The cupy side's NumPy operations: each backward against central differences in float64, each
forward and backward against PyTorch's autograd of the same operation (CPU, float64), the dropout
generator against a transcription of architecture.md, and the rounding helpers against torch's casts."""
import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from tr2.cupy_side import rng
from tr2.cupy_side.backend import NumpyBackend, get_backend
from tr2.cupy_side.ops import (adamw, attention, cross_entropy, dropout, embedding, gelu, layernorm, matmul, norm,
                               residual, residual_layernorm)
from tr2.cupy_side.ops.precision import (EXACT, make_precision, round_to_bf16, round_to_fp16, round_to_tf32)
from tr2.cupy_side.ops.special import erf

RTOL_FD = 1e-6   # central differences with h = 1e-6 in float64: truncation ~h^2, cancellation ~1e-10
RTOL_TORCH = 1e-12


@pytest.fixture
def gen():
    return np.random.default_rng(20261129)


def numeric_grad(loss_of, x: np.ndarray, entries, h: float = 1e-6) -> np.ndarray:
    """d loss / d x at the given flat entries by central differences (x is perturbed in place, restored)."""
    flat = x.reshape(-1)
    out = []
    for j in entries:
        keep = flat[j]
        flat[j] = keep + h
        up = loss_of()
        flat[j] = keep - h
        down = loss_of()
        flat[j] = keep
        out.append((up - down) / (2 * h))
    return np.array(out)


def assert_fd(loss_of, x, analytic, gen, max_entries=40):
    n = x.size
    entries = np.arange(n) if n <= max_entries else gen.choice(n, max_entries, replace=False)
    num = numeric_grad(loss_of, x, entries)
    np.testing.assert_allclose(analytic.reshape(-1)[entries], num, rtol=RTOL_FD, atol=1e-8)


def t64(a, grad=True):
    return torch.tensor(np.asarray(a), dtype=torch.float64, requires_grad=grad)


# ---------------------------------------------------------------------------------------------
# embedding

@pytest.mark.parametrize("B, T, V, C, Tmax", [(2, 5, 7, 3, 6), (1, 1, 2, 1, 1), (3, 4, 11, 5, 9)])
def test_embedding_fd_and_torch(gen, B, T, V, C, Tmax):
    idx = gen.integers(0, V, (B, T))
    idx[0, 0] = idx[-1, -1]  # a repeated token: its rows must add
    wte, wpe = gen.standard_normal((V, C)), gen.standard_normal((Tmax, C))
    G = gen.standard_normal((B, T, C))
    x = embedding.forward(idx, wte, wpe)
    dwte, dwpe = np.zeros_like(wte), np.zeros_like(wpe)
    embedding.backward(G, idx, dwte, dwpe)

    def loss():
        return float(np.sum(embedding.forward(idx, wte, wpe) * G))
    assert_fd(loss, wte, dwte, gen)
    assert_fd(loss, wpe, dwpe, gen)

    twte, twpe = t64(wte), t64(wpe)
    tx = F.embedding(torch.from_numpy(idx), twte) + twpe[:T]
    (tx * torch.from_numpy(G)).sum().backward()
    np.testing.assert_allclose(x, tx.detach().numpy(), rtol=RTOL_TORCH)
    np.testing.assert_allclose(dwte, twte.grad.numpy(), rtol=RTOL_TORCH, atol=1e-14)
    np.testing.assert_allclose(dwpe, twpe.grad.numpy(), rtol=RTOL_TORCH, atol=1e-14)


def test_embedding_backward_accumulates(gen):
    idx = gen.integers(0, 4, (2, 3))
    G = gen.standard_normal((2, 3, 5))
    dwte, dwpe = np.ones((4, 5)), np.ones((3, 5))
    embedding.backward(G, idx, dwte, dwpe)
    fresh_te, fresh_pe = np.zeros((4, 5)), np.zeros((3, 5))
    embedding.backward(G, idx, fresh_te, fresh_pe)
    np.testing.assert_allclose(dwte, fresh_te + 1)
    np.testing.assert_allclose(dwpe, fresh_pe + 1)


@pytest.mark.parametrize("p", [0.0, 0.3])
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_embedding_dropout_is_the_unfused_ops_and_fd(gen, p, dtype):
    """The embedding with its dropout inside equals the embedding then dropout, to the bit; the mask is the [B*T, C]
    array's (element row * C + c of the site); p = 0 is the plain embedding. Gradients (the embedding's backward of
    dropout's backward of the upstream gradient, as model.py composes them) against central differences (the mask:
    a constant)."""
    B, T, V, C, Tmax = 3, 5, 7, 6, 8
    seed, offset = 11, rng.site_offset(3, 7, rng.SITE_EMBEDDING)
    idx = gen.integers(0, V, (B, T))
    idx[0, 0] = idx[-1, -1]
    wte, wpe, G = (gen.standard_normal(s).astype(dtype) for s in ((V, C), (Tmax, C), (B, T, C)))
    x = embedding.forward(idx, wte, wpe, p, seed, offset)
    plain = embedding.forward(idx, wte, wpe)
    assert x.dtype == dtype and np.array_equal(x, dropout.forward(plain, p, seed, offset))
    keep = rng.keep_mask(seed, offset, (B * T, C), p).reshape(B, T, C)
    assert np.array_equal(x, np.where(keep, plain * rng.keep_scale(p, dtype), 0))
    dwte, dwpe = np.ones((V, C), dtype), np.ones((Tmax, C), dtype)
    embedding.backward(dropout.backward(G, p, seed, offset), idx, dwte, dwpe)
    if p == 0.0:
        assert np.array_equal(x, plain)
    if dtype is np.float64:
        def loss():
            return float(np.sum(embedding.forward(idx, wte, wpe, p, seed, offset) * G))
        assert_fd(loss, wte, dwte - 1, gen)
        assert_fd(loss, wpe, dwpe - 1, gen)


# ---------------------------------------------------------------------------------------------
# layernorm

@pytest.mark.parametrize("N, C", [(5, 7), (3, 64), (1, 3)])
def test_layernorm_fd_and_torch(gen, N, C):
    x = gen.standard_normal((N, C)) * 2 + 0.5
    w = gen.standard_normal(C)
    G = gen.standard_normal((N, C))
    eps = 1e-5
    y, mean, rstd = layernorm.forward(x, w, eps)
    dx, dw = layernorm.backward(G, x, w, mean, rstd)

    def loss():
        return float(np.sum(layernorm.forward(x, w, eps)[0] * G))
    assert_fd(loss, x, dx, gen)
    assert_fd(loss, w, dw, gen)

    tx, tw = t64(x), t64(w)
    ty = F.layer_norm(tx, (C,), tw, None, eps)
    (ty * torch.from_numpy(G)).sum().backward()
    np.testing.assert_allclose(y, ty.detach().numpy(), rtol=RTOL_TORCH, atol=1e-13)
    np.testing.assert_allclose(dx, tx.grad.numpy(), rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(dw, tw.grad.numpy(), rtol=1e-10, atol=1e-12)


# ---------------------------------------------------------------------------------------------
# matmul

@pytest.mark.parametrize("N, K, M", [(5, 7, 3), (4, 1, 6), (9, 16, 17)])
def test_matmul_fd_and_torch(gen, N, K, M):
    x, w = gen.standard_normal((N, K)), gen.standard_normal((M, K))
    G = gen.standard_normal((N, M))
    y = matmul.forward(x, w)
    dx, dw = matmul.backward(G, x, w)

    def loss():
        return float(np.sum(matmul.forward(x, w) * G))
    assert_fd(loss, x, dx, gen)
    assert_fd(loss, w, dw, gen)

    tx, tw = t64(x), t64(w)
    ty = F.linear(tx, tw)
    (ty * torch.from_numpy(G)).sum().backward()
    np.testing.assert_allclose(y, ty.detach().numpy(), rtol=RTOL_TORCH, atol=1e-13)
    np.testing.assert_allclose(dx, tx.grad.numpy(), rtol=RTOL_TORCH, atol=1e-13)
    np.testing.assert_allclose(dw, tw.grad.numpy(), rtol=RTOL_TORCH, atol=1e-13)


# ---------------------------------------------------------------------------------------------
# attention

def torch_attention(qkv, n_head, factor=None):
    """The same operation in torch: SDPA without dropout, else written out with the given dropout factor."""
    B, T, C3 = qkv.shape
    C = C3 // 3
    q, k, v = (a.view(B, T, n_head, C // n_head).transpose(1, 2) for a in qkv.split(C, dim=2))
    if factor is None:
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    else:
        s = (q @ k.transpose(-2, -1)) / math.sqrt(C // n_head)
        s = s.masked_fill(torch.ones(T, T, dtype=torch.bool).triu(1), float("-inf"))
        y = (F.softmax(s, dim=-1) * factor) @ v
    return y.transpose(1, 2).reshape(B, T, C)


@pytest.mark.parametrize("B, T, H, hs", [(2, 5, 3, 3), (1, 1, 1, 4), (2, 7, 2, 5)])
@pytest.mark.parametrize("p", [0.0, 0.3])
def test_attention_fd_and_torch(gen, B, T, H, hs, p):
    C = H * hs
    qkv = gen.standard_normal((B, T, 3 * C))
    G = gen.standard_normal((B, T, C))
    seed, offset = 7, rng.site_offset(3, 4, 1)
    out, saved = attention.forward(qkv, H, p, seed, offset)
    dqkv = attention.backward(G, qkv, saved, H, p, seed, offset)
    assert out.shape == (B, T, C) and dqkv.shape == qkv.shape

    def loss():
        return float(np.sum(attention.forward(qkv, H, p, seed, offset)[0] * G))
    assert_fd(loss, qkv, dqkv, gen)

    factor = None
    if p > 0:
        factor = torch.from_numpy(rng.keep_mask(seed, offset, (B, H, T, T), p) / (1 - p))
    tq = t64(qkv)
    ty = torch_attention(tq, H, factor)
    (ty * torch.from_numpy(G)).sum().backward()
    np.testing.assert_allclose(out, ty.detach().numpy(), rtol=1e-11, atol=1e-13)
    np.testing.assert_allclose(dqkv, tq.grad.numpy(), rtol=1e-10, atol=1e-12)


def test_attention_is_causal(gen):
    B, T, H, hs = 1, 6, 2, 3
    qkv = gen.standard_normal((B, T, 3 * H * hs))
    out, _ = attention.forward(qkv, H, 0.0, 0, 0)
    changed = qkv.copy()
    changed[:, 4:] += 1.0  # later positions must not affect earlier outputs
    out2, _ = attention.forward(changed, H, 0.0, 0, 0)
    np.testing.assert_array_equal(out[:, :4], out2[:, :4])
    assert not np.allclose(out[:, 4:], out2[:, 4:])


# ---------------------------------------------------------------------------------------------
# gelu and erf

@pytest.mark.parametrize("shape", [(7,), (3, 11), (2, 3, 5)])
def test_gelu_fd_and_torch(gen, shape):
    x = gen.standard_normal(shape) * 4  # reaches every piece of erf (|x|/sqrt 2 beyond 2, 4 and 6)
    G = gen.standard_normal(shape)
    y = gelu.forward(x)
    dx = gelu.backward(G, x)

    def loss():
        return float(np.sum(gelu.forward(x) * G))
    assert_fd(loss, x, dx, gen)

    tx = t64(x)
    ty = F.gelu(tx)
    (ty * torch.from_numpy(G)).sum().backward()
    np.testing.assert_allclose(y, ty.detach().numpy(), rtol=1e-14, atol=1e-15)
    np.testing.assert_allclose(dx, tx.grad.numpy(), rtol=1e-14, atol=1e-15)


def test_erf_against_libm():
    ref = np.frompyfunc(math.erf, 1, 1)
    x = np.concatenate([np.linspace(-9, 9, 200_001), np.geomspace(1e-300, 1.0, 500), -np.geomspace(1e-300, 1.0, 500)])
    exact = ref(x).astype(np.float64)
    assert np.max(np.abs(erf(x) - exact)) < 4e-15
    small = np.abs(x) < 1e-3
    np.testing.assert_allclose(erf(x[small]), exact[small], rtol=1e-15)  # relative accuracy near 0
    x32 = x.astype(np.float32)
    got = erf(x32)
    assert got.dtype == np.float32
    assert np.max(np.abs(got - ref(x32.astype(np.float64)).astype(np.float64))) < 3e-7
    special = erf(np.array([np.inf, -np.inf, np.nan, 0.0, -0.0]))
    assert special[0] == 1 and special[1] == -1 and np.isnan(special[2])
    assert special[3] == 0 and np.signbit(special[4])


# ---------------------------------------------------------------------------------------------
# dropout and its generator

def spec_uniform(seed: int, offset: int, i: int) -> float:
    """architecture.md's generator, transcribed with Python integers: elements 2c and 2c + 1 share the
    output z of counter offset + c, the even one taking bits 40..63, the odd one bits 16..39."""
    m = (1 << 64) - 1
    x = (seed + (offset + i // 2) * 0x9E3779B97F4A7C15) & m
    z = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & m
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & m
    z ^= z >> 31
    k = (z >> 16) & 0xFFFFFF if i % 2 else z >> 40
    return k * 2.0 ** -24


@pytest.mark.parametrize("seed, offset", [(0, 0), (1337, rng.site_offset(5, 7, 3)), ((1 << 64) - 1, (1 << 64) - 10),
                                          (2 ** 63 + 12345, rng.site_offset(10 ** 6, 73, 72)), (5, 3)])
@pytest.mark.parametrize("n", [64, 65, 1])
def test_rng_matches_the_specification(seed, offset, n):
    u = rng.uniform(seed, offset, n)
    assert u.dtype == np.float32 and u.shape == (n,)
    assert [float(v) for v in u] == [spec_uniform(seed, offset, i) for i in range(n)]


def test_rng_site_offsets():
    assert rng.site_offset(0, 7, 0) == 0
    assert rng.site_offset(2, 7, 3) == (2 * 7 + 3) << 32
    assert rng.n_sites(2) == 7
    sites = [rng.SITE_EMBEDDING] + [f(i) for i in range(2) for f in
                                    (rng.site_attention, rng.site_attention_residual, rng.site_mlp_residual)]
    assert sites == list(range(7))
    with pytest.raises(ValueError):
        rng.site_offset(0, 7, 7)


def test_rng_deterministic_and_keep_rate():
    a = rng.keep_mask(1337, rng.site_offset(4, 7, 2), (1000, 1000), 0.1)
    b = rng.keep_mask(1337, rng.site_offset(4, 7, 2), (1000, 1000), 0.1)
    np.testing.assert_array_equal(a, b)
    assert abs(a.mean() - 0.9) < 6 * math.sqrt(0.09 / a.size)
    c = rng.keep_mask(1337, rng.site_offset(4, 7, 3), (1000, 1000), 0.1)  # the next site
    d = rng.keep_mask(1338, rng.site_offset(4, 7, 2), (1000, 1000), 0.1)  # another seed
    assert (a != c).mean() > 0.1 and (a != d).mean() > 0.1
    u = rng.uniform(9, 0, 100_000)
    assert u.min() >= 0 and u.max() < 1 and np.all(u * 2 ** 24 == np.floor(u * 2 ** 24))
    assert abs(u.mean() - 0.5) < 0.005
    # the two elements of a draw (its high and low bits) each look uniform, and unrelated to each other
    assert abs(u[0::2].mean() - 0.5) < 0.007 and abs(u[1::2].mean() - 0.5) < 0.007
    assert abs(np.corrcoef(u[0::2], u[1::2])[0, 1]) < 0.02
    # the first elements of a long draw are the short draw (the counter, not the length, decides), odd n too
    np.testing.assert_array_equal(rng.uniform(9, 0, 10), u[:10])
    np.testing.assert_array_equal(rng.uniform(9, 0, 11), u[:11])


@pytest.mark.parametrize("p", [0.0, 0.2, 0.5])
def test_dropout_fd_and_torch(gen, p):
    x = gen.standard_normal((3, 5, 4))
    G = gen.standard_normal((3, 5, 4))
    seed, offset = 11, rng.site_offset(1, 4, 2)
    y = dropout.forward(x, p, seed, offset)
    dx = dropout.backward(G, p, seed, offset)

    def loss():
        return float(np.sum(dropout.forward(x, p, seed, offset) * G))
    assert_fd(loss, x, dx, gen)

    keep = rng.keep_mask(seed, offset, x.shape, p)
    np.testing.assert_array_equal(y == 0, ~keep | (x == 0))
    tx = t64(x)
    ty = tx * torch.from_numpy(keep) / (1 - p)
    (ty * torch.from_numpy(G)).sum().backward()
    np.testing.assert_allclose(y, ty.detach().numpy(), rtol=1e-15)
    np.testing.assert_allclose(dx, tx.grad.numpy(), rtol=1e-15)


def test_dropout_keep_rate_float32(gen):
    x = np.ones((200, 1000), dtype=np.float32)
    y = dropout.forward(x, 0.25, 5, 0)
    assert y.dtype == np.float32
    assert set(np.unique(y)) == {0.0, np.float32(1 / 0.75)}
    assert abs((y > 0).mean() - 0.75) < 0.005


# ---------------------------------------------------------------------------------------------
# residual and cross-entropy

def test_residual(gen):
    a, b = (gen.standard_normal((4, 3)) for _ in range(2))
    np.testing.assert_array_equal(residual.forward(a, b), a + b)


@pytest.mark.parametrize("p, skip", [(0.0, True), (0.3, True), (0.3, False)])
def test_residual_layernorm_is_the_unfused_ops_and_fd(gen, p, skip):
    """The fused residual add + LayerNorm (dropout on the branch first) equals dropout, add and LayerNorm run one after
    the other, to the bit, forward and backward; its gradients against central differences (dropout's mask is a
    constant of (seed, offset))."""
    N, C, eps, seed, offset = 6, 5, 1e-5, 11, rng.site_offset(3, 7, 2)
    x, b, dy, dskip = (gen.standard_normal((N, C)) for _ in range(4))
    dskip = dskip if skip else None
    w = 1 + 0.3 * gen.standard_normal(C)
    s, y, mean, rstd = residual_layernorm.forward(x, b, w, eps, p, seed, offset)
    s0 = x + dropout.forward(b, p, seed, offset)
    y0, mean0, rstd0 = layernorm.forward(s0, w, eps)
    for got, want in ((s, s0), (y, y0), (mean, mean0), (rstd, rstd0)):
        assert np.array_equal(got, want)
    ds, db, dw = residual_layernorm.backward(dy, dskip, s, w, mean, rstd, p, seed, offset)
    dx0, dw0 = layernorm.backward(dy, s0, w, mean0, rstd0)
    ds0 = dx0 if dskip is None else dskip + dx0
    assert np.array_equal(ds, ds0) and np.array_equal(dw, dw0)
    assert np.array_equal(db, dropout.backward(ds0, p, seed, offset))

    def loss():   # <dy, y> + <dskip, s>: dskip is what s's other reader sends back
        s_, y_, _, _ = residual_layernorm.forward(x, b, w, eps, p, seed, offset)
        return float(np.sum(dy * y_) + (np.sum(dskip * s_) if skip else 0.0))
    assert_fd(loss, x, ds, gen)
    assert_fd(loss, b, db, gen)
    assert_fd(loss, w, dw, gen)


@pytest.mark.parametrize("N, V", [(5, 7), (8, 65), (1, 2)])
def test_cross_entropy_fd_and_torch(gen, N, V):
    logits = gen.standard_normal((N, V)) * 3
    targets = gen.integers(0, V, N)
    if N > 2:
        targets[1] = -1  # ignore_index, as nanoGPT passes
    dloss = 0.7
    loss, saved = cross_entropy.forward(logits, targets)
    dlogits = cross_entropy.backward(np.asarray(dloss), logits, targets, saved)

    def f():
        return dloss * float(cross_entropy.forward(logits, targets)[0])
    assert_fd(f, logits, dlogits, gen)

    tl = t64(logits)
    tloss = F.cross_entropy(tl, torch.from_numpy(targets), ignore_index=-1)
    (tloss * dloss).backward()
    assert loss.shape == () and abs(float(loss) - tloss.item()) <= 1e-14 * abs(tloss.item())
    np.testing.assert_allclose(dlogits, tl.grad.numpy(), rtol=1e-12, atol=1e-15)
    # the fused form (what a training pass calls) is the two, to the bit, and leaves the logits alone
    before = logits.copy()
    floss, fdlogits = cross_entropy.forward_backward(logits, targets, np.asarray(dloss))
    assert np.array_equal(floss, loss) and np.array_equal(fdlogits, dlogits) and np.array_equal(logits, before)


def test_cross_entropy_probabilities_exp2_stay_within_their_two_roundings(gen):
    """The EX2 gradient pass's arithmetic (kernels/cross_entropy.cu, TR2_CE_GRAD_EX2) against exp(x - lse) in float64:
    each probability within the two float32 roundings the form makes, half an ulp of lse * log2(e) and half an ulp of
    the fma's result, times ln 2, and log2(e)'s own rounding times |x - lse| (the special-function unit's own error is
    the GPU test's to bound); on GPT-2-like
    rows (|lse| < 16) that is under 4e-6 relative wherever p is above 2^-20."""
    N, V = 64, 4096
    logits = (gen.standard_normal((N, V)) * 3).astype(np.float32)
    logits[3, 11] = 40.0   # a row with a far max: its lse near 40
    x = logits.astype(np.float64)
    lse = np.log(np.exp(x - x.max(1, keepdims=True)).sum(1)) + x.max(1)
    lse32 = lse.astype(np.float32)
    p = cross_entropy.probabilities_exp2(logits, lse32)
    want = np.exp(x - lse32.astype(np.float64)[:, None])
    lse2 = lse32 * cross_entropy.LOG2E_F32
    arg = x * np.float64(cross_entropy.LOG2E_F32) - lse2.astype(np.float64)[:, None]
    # in the exponent: the two roundings (in units of log2) and log2(e)'s own float32 rounding times |x - lse|
    l2e_error = abs(float(cross_entropy.LOG2E_F32) * math.log(2) - 1.0)
    bound = ((np.spacing(np.abs(lse2)).astype(np.float64)[:, None] / 2 + np.spacing(np.abs(arg.astype(np.float32))) / 2)
             * math.log(2) + np.abs(x - lse32.astype(np.float64)[:, None]) * l2e_error + 1e-12) * 1.0001
    rel = np.abs(p / want - 1)
    assert (rel <= bound).all(), f"worst {np.max(rel / bound):.3f} x its bound"
    small_lse = np.abs(lse) < 16
    big = (want > 2.0 ** -20) & small_lse[:, None]
    assert big.sum() > N * V // 100 and rel[big].max() < 4e-6, rel[big].max()
    assert np.abs(lse[3] - 40.0) < 1e-3 and rel[3].max() <= bound[3].max()


# ---------------------------------------------------------------------------------------------
# global norm and AdamW

def test_global_norm_against_torch(gen):
    grads = [gen.standard_normal(s) for s in [(3, 4), (5,), (2, 3, 2)]]
    want = torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(torch.from_numpy(g)) for g in grads]))
    got = norm.global_norm(grads)
    assert got.shape == () and abs(float(got) - want.item()) < 1e-14 * want.item()
    g32 = [g.astype(np.float32) for g in grads]
    assert norm.global_norm(g32).dtype == np.float32
    g32[1][2] = np.inf
    assert not np.isfinite(norm.global_norm(g32))


def test_adamw_update_against_torch(gen):
    shapes = [(4, 3), (3,), (2, 2, 2)]
    lr, b1, b2, eps, wd = 3e-3, 0.9, 0.95, 1e-8, 0.1
    params = [gen.standard_normal(s) for s in shapes]
    tparams = [torch.tensor(p, requires_grad=True) for p in params]
    decay = [t for t in tparams if t.dim() >= 2]
    nodecay = [t for t in tparams if t.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": wd}, {"params": nodecay, "weight_decay": 0.0}],
                            lr=lr, betas=(b1, b2), eps=eps, foreach=False)
    ms = [np.zeros(s) for s in shapes]
    vs = [np.zeros(s) for s in shapes]
    for t in range(1, 4):
        grads = [gen.standard_normal(s) for s in shapes]
        for tp, g in zip(tparams, grads):
            tp.grad = torch.tensor(g)
        opt.step()
        hyper = np.array([lr, b1, b2, eps, wd, 1 - b1 ** t, 1 - b2 ** t, 1.0, 0.0])
        adamw.update(params, grads, ms, vs, hyper)
        for p, tp in zip(params, tparams):
            np.testing.assert_allclose(p, tp.detach().numpy(), rtol=1e-14, atol=1e-15)
    # grad_scale multiplies the gradients before anything else
    p1, p2 = [np.ones((2, 2))], [np.ones((2, 2))]
    g = gen.standard_normal((2, 2))
    adamw.update(p1, [g], [np.zeros((2, 2))], [np.zeros((2, 2))], np.array([lr, b1, b2, eps, wd, 0.1, 0.05, 0.5, 0.0]))
    adamw.update(p2, [g * 0.5], [np.zeros((2, 2))], [np.zeros((2, 2))], np.array([lr, b1, b2, eps, wd, 0.1, 0.05, 1.0, 0.0]))
    np.testing.assert_allclose(p1[0], p2[0], rtol=1e-15)


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_adamw_half_copies_are_what_products_read(gen, dtype):
    """The kernel's half copies (ops/adamw.py's copies): rewritten from the new p, they hold exactly the values a
    product reads when it rounds p as its operand, and the update of p itself does not change with them."""
    prec = make_precision(dtype)
    shapes = [(4, 3), (3,), (5, 2)]
    hyper = np.array([3e-3, 0.9, 0.95, 1e-8, 0.1, 1 - 0.9 ** 2, 1 - 0.95 ** 2, 0.5, 0.0], dtype=np.float32)
    params = [(gen.standard_normal(s) * 0.02).astype(np.float32) for s in shapes]
    grads = [gen.standard_normal(s).astype(np.float32) for s in shapes]
    ms = [np.zeros(s, np.float32) for s in shapes]
    vs = [np.zeros(s, np.float32) for s in shapes]
    plain = [p.copy() for p in params]
    copies = [np.full(s, np.nan, np.float32) for s in shapes[:2]] + [None]
    adamw.update(params, grads, ms, vs, hyper, copies, prec.operand)
    adamw.update(plain, grads, [np.zeros(s, np.float32) for s in shapes], [np.zeros(s, np.float32) for s in shapes],
                 hyper)
    for p, q, c in zip(params, plain, copies):
        assert np.array_equal(p, q)
        if c is not None:
            assert np.array_equal(c, prec.operand(p)) and not np.array_equal(c, p)
    x = gen.standard_normal((7, 3)).astype(np.float32)
    assert np.array_equal(matmul.forward(x, params[0], prec), prec.operand(x) @ copies[0].T)


# ---------------------------------------------------------------------------------------------
# rounding helpers and the emulated element types

def special_floats(gen):
    f32 = np.float32
    with np.errstate(over="ignore"):  # the largest scale makes some infinities, on purpose
        vals = [gen.standard_normal(20000).astype(f32) * f32(s) for s in (1e-40, 1e-30, 1e-6, 1, 1e3, 6e4, 1e30, 3e38)]
    bits = gen.integers(0, 2 ** 32, 20000, dtype=np.uint64).astype(np.uint32)
    vals.append(bits.view(f32))                                       # every kind of pattern, NaNs too
    ties = (gen.integers(0, 2 ** 16, 2000, dtype=np.uint64).astype(np.uint32) << np.uint32(16)) | np.uint32(0x8000)
    vals.append(ties.view(f32))                                       # exactly halfway between bf16 values
    vals.append(np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 65504, 65519.99, 65520, 3.4028235e38, 1e-45,
                          6.0e-8, 2.9e-8, 1 + 2 ** -11, 1 + 3 * 2 ** -11], dtype=f32))
    return np.concatenate(vals)


def same_values(a, b):
    return np.array_equal(a, b, equal_nan=True) and np.array_equal(np.signbit(a), np.signbit(b))


def test_round_to_bf16_matches_torch(gen):
    x = special_floats(gen)
    want = torch.from_numpy(x).to(torch.bfloat16).to(torch.float32).numpy()
    got = round_to_bf16(x)
    finite = ~np.isnan(x)
    assert got.dtype == np.float32
    assert same_values(got[finite], want[finite]) and np.isnan(got[~finite]).all()


def test_round_to_fp16_matches_torch(gen):
    x = special_floats(gen)
    want = torch.from_numpy(x).to(torch.float16).to(torch.float32).numpy()
    got = round_to_fp16(x)
    finite = ~np.isnan(x)
    assert same_values(got[finite], want[finite]) and np.isnan(got[~finite]).all()


def spec_tf32(v: np.float32) -> np.float32:
    """TF32 rounding with integers: keep 10 mantissa bits, round the 13 dropped bits to nearest even."""
    b = int(np.array(v, dtype=np.float32).view(np.uint32))
    kept, dropped = b >> 13, b & 0x1FFF
    if dropped > 0x1000 or (dropped == 0x1000 and kept & 1):
        kept += 1
    return np.array((kept << 13) & 0xFFFFFFFF, dtype=np.uint32).view(np.float32)


def test_round_to_tf32(gen):
    x = special_floats(gen)
    x = x[~np.isnan(x)][::20]
    got = round_to_tf32(x)
    want = np.array([spec_tf32(v) for v in x], dtype=np.float32)
    assert same_values(got, want)
    assert round_to_tf32(np.float32(1 + 2 ** -11)) == 1.0            # a tie rounds to the even neighbour
    assert round_to_tf32(np.float32(1 + 3 * 2 ** -11)) == 1 + 2 ** -9
    assert round_to_tf32(np.float32(1 + 2 ** -10)) == 1 + 2 ** -10   # representable: unchanged
    assert np.isnan(round_to_tf32(np.array([np.nan], dtype=np.float32))).all()
    assert round_to_tf32(np.float32(2.0)).shape == ()


def test_precision_policies():
    assert make_precision("float64") is EXACT
    p = make_precision("float32", tf32=False)
    x = np.float32(1 + 2 ** -20)
    assert p.operand(x) == x and p.dtype == np.float32
    assert make_precision("float32", tf32=True).operand(x) == 1.0
    bf = make_precision("bfloat16")
    assert bf.operand(x) == 1.0 and bf.output(x) == x and bf.internal(x) == x
    bfr = make_precision("bfloat16", half_roundings=True)
    assert bfr.output(x) == 1.0 and bfr.internal(x) == 1.0
    assert make_precision("float16").operand(np.float32(1e5)) == np.inf
    with pytest.raises(ValueError):
        make_precision("int8")


@pytest.mark.parametrize("dtype, half", [("bfloat16", torch.bfloat16), ("float16", torch.float16)])
def test_half_products_read_the_half_type(gen, dtype, half):
    x = gen.standard_normal((16, 24)).astype(np.float32)
    w = gen.standard_normal((8, 24)).astype(np.float32)
    rounder = round_to_bf16 if dtype == "bfloat16" else round_to_fp16
    y = matmul.forward(x, w, make_precision(dtype))
    np.testing.assert_allclose(y, rounder(x) @ rounder(w).T, rtol=1e-6, atol=1e-6)  # float32 accumulation
    # With half_roundings the output is the half type's too, as torch's half product (float32 accumulate,
    # round once): equal up to one rounding step where the accumulation order differs.
    yr = matmul.forward(x, w, make_precision(dtype, half_roundings=True))
    ref = (torch.from_numpy(x).to(half) @ torch.from_numpy(w).to(half).T).float().numpy()
    assert np.array_equal(yr, rounder(yr))
    ulp = 2.0 ** -7 if dtype == "bfloat16" else 2.0 ** -10
    np.testing.assert_allclose(yr, ref, rtol=ulp, atol=1e-3)
    assert np.mean(yr == ref) > 0.9


def test_attention_rounds_only_as_told(gen):
    qkv = gen.standard_normal((2, 5, 3 * 8)).astype(np.float32)
    dout = gen.standard_normal((2, 5, 8)).astype(np.float32)
    exact_out, saved = attention.forward(qkv.astype(np.float64), 2, 0.0, 0, 0)
    for name in ("float32", "bfloat16", "float16"):
        for hr in ((False, True) if name != "float32" else (False,)):
            prec = make_precision(name, tf32=True, half_roundings=hr)
            out, s = attention.forward(qkv, 2, 0.1, 3, 0, prec)
            d = attention.backward(dout, qkv, s, 2, 0.1, 3, 0, prec)
            assert out.dtype == np.float32 and d.dtype == np.float32
            if hr:
                assert np.array_equal(out, prec.output(out)) and np.array_equal(d, prec.output(d))
    out32, _ = attention.forward(qkv, 2, 0.0, 0, 0, make_precision("float32", tf32=False))
    np.testing.assert_allclose(out32, exact_out, rtol=1e-5, atol=1e-6)


# ---------------------------------------------------------------------------------------------
# the backend binds exactly the table's operations

TABLE = ["embedding_forward", "embedding_backward", "layernorm_forward", "layernorm_backward", "matmul_forward",
         "matmul_backward", "attention_forward", "attention_backward", "gelu_forward", "gelu_backward",
         "dropout_forward", "dropout_backward", "residual_forward", "residual_layernorm_forward",
         "residual_layernorm_backward", "cross_entropy_forward",
         "cross_entropy_forward_backward", "adamw_update", "loss_scale_update", "global_norm"]


def test_backend_has_the_table():
    be = get_backend("cpu", "float32")
    assert isinstance(be, NumpyBackend) and be.xp is np and be.float_dtype == np.float32
    for name in TABLE:
        assert callable(getattr(be, name)), name
    ops = {n for n in dir(be) if n.endswith(("_forward", "_backward", "_update")) or n == "global_norm"}
    assert ops == set(TABLE)
    assert get_backend("cpu", "float64").float_dtype == np.float64
    assert get_backend("cpu", "bfloat16").float_dtype == np.float32
    with pytest.raises(ValueError):
        get_backend("tpu", "float32")


def test_adamw_skip_flag_leaves_everything(gen):
    """hyper's skip (a float16 step that overflowed, decided on the device): params, m, v and copies unchanged."""
    p, g = [gen.standard_normal((3, 4)).astype(np.float32)], [gen.standard_normal((3, 4)).astype(np.float32)]
    m, v, c = [np.ones((3, 4), np.float32)], [np.ones((3, 4), np.float32)], [np.full((3, 4), 7.0, np.float32)]
    before = [a[0].copy() for a in (p, m, v, c)]
    hyper = np.array([3e-3, 0.9, 0.95, 1e-8, 0.1, 0.1, 0.05, 1.0, 1.0], dtype=np.float32)
    adamw.update(p, g, m, v, hyper, c, lambda x: x)
    for a, b in zip((p, m, v, c), before):
        assert np.array_equal(a[0], b)
    hyper[adamw.SKIP] = 0.0
    adamw.update(p, g, m, v, hyper, c, lambda x: x)
    assert not np.array_equal(p[0], before[0]) and np.array_equal(c[0], p[0])
