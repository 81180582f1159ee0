"""gpu/deferred_finals.py without a GPU: the stack's bookkeeping, the NumPy form of the dw final (the order of its
additions, against an independent loop), and that the model announces as many LayerNorms as its backward runs (so
that with TR2_LN_DW_DEFER every one of them takes a row of the stack and no row is left over)."""
from __future__ import annotations

import numpy as np
import pytest

from tr2.cupy_side.backend import NumpyBackend
from tr2.cupy_side.gpu import deferred_finals
from tr2.cupy_side.model import GPT
from tr2.models import load_model
from tr2.weights import init_numpy


def _empty(shape):
    return np.full(shape, np.nan, dtype=np.float32)


def test_the_stack_hands_out_its_rows_in_turn_then_none():
    stack = deferred_finals.Stack(3, _empty)
    rows = [stack.take(5, 4) for _ in range(3)]
    assert stack.parts.shape == (3, 5, 4) and stack.dws.shape == (3, 4) and stack.used == 3
    for i, (part, dw) in enumerate(rows):
        assert part.shape == (5, 4) and dw.shape == (4,)
        assert np.shares_memory(part, stack.parts) and np.shares_memory(dw, stack.dws)
        part[...] = i
        assert (stack.parts[i] == i).all()
    assert stack.take(5, 4) is None   # full: that LayerNorm finishes its own dw


def test_a_layernorm_of_another_shape_gets_no_row():
    stack = deferred_finals.Stack(4, _empty)
    assert stack.take(5, 4) is not None and stack.take(5, 8) is None and stack.take(6, 4) is None
    assert stack.used == 1 and stack.take(5, 4) is not None


def test_an_empty_stack_is_refused():
    with pytest.raises(ValueError, match="count 0; allowed: one or more LayerNorms"):
        deferred_finals.Stack(0, _empty)


@pytest.mark.parametrize("G, C", [(1, 5), (31, 7), (32, 3), (1024, 96), (2048, 40)])
def test_the_final_adds_in_the_kernels_order(G, C):
    part = np.random.default_rng(G + C).standard_normal((G, C)).astype(np.float32) * 100
    got = deferred_finals.final_reference(part)
    want = np.empty(C, np.float32)
    for c in range(C):   # one column at a time, float32 scalars: thread row k's running sum, then the 32 in turn
        sums = [np.float32(0)] * 32
        for g in range(G):
            sums[g % 32] = np.float32(sums[g % 32] + part[g, c])
        u = np.float32(0)
        for k in range(32):
            u = np.float32(u + sums[k])
        want[c] = u
    assert got.dtype == np.float32 and np.array_equal(got.view(np.uint32), want.view(np.uint32))
    np.testing.assert_allclose(got, part.astype(np.float64).sum(0), rtol=1e-5, atol=1e-3 * np.sqrt(G))
    if G > 64:   # the order is the kernel's, not NumPy's pairwise sum: somewhere the bits differ
        assert not np.array_equal(got, part.sum(0, dtype=np.float32))


class _CountingBackend(NumpyBackend):
    def __init__(self):
        super().__init__("float32")
        self.announced, self.layernorms = [], 0

    def backward_begin(self, layernorms):
        self.announced.append(layernorms)

    def layernorm_backward(self, *args, **kw):
        self.layernorms += 1
        return super().layernorm_backward(*args, **kw)

    def residual_layernorm_backward(self, *args, **kw):
        self.layernorms += 1
        return super().residual_layernorm_backward(*args, **kw)


@pytest.mark.parametrize("n_layer, dropout", [(1, 0.0), (3, 0.1)])
def test_the_model_announces_as_many_layernorms_as_its_backward_runs(n_layer, dropout):
    cfg = load_model("tiny", n_layer=n_layer, n_head=2, n_embd=8, block_size=6, batch_size=2, dropout=dropout)
    be = _CountingBackend()
    model = GPT(cfg, be, init_numpy(cfg, 0), seed=3)
    x = np.random.default_rng(1).integers(0, cfg.vocab_size, (cfg.batch_size, cfg.block_size))
    model.forward(x, np.roll(x, 1, axis=1), 1)
    model.backward()
    assert be.announced == [2 * n_layer + 1] and be.layernorms == 2 * n_layer + 1
