"""nanoGPT's GPT as explicit operations: every step calls the backend and records its backward on a tape.

    x = dropout(wte[idx] + wpe[:T])
    for each block:
        x = x + dropout(c_proj(attention(c_attn(ln_1(x)))))     attention drops its weights too
        x = x + dropout(c_proj(gelu(c_fc(ln_2(x)))))
    logits = ln_f(x) @ wte.T                                    lm_head tied to the token embedding
    loss = cross_entropy(logits, targets)

Each residual add runs with the residual dropout before it and the LayerNorm after it as one operation
(residual_layernorm: ln_2 after the attention's add, the next block's ln_1 or ln_f after the MLP's); the first
block's ln_1 runs with the embedding (its dropout inside the embedding's kernel), its backward as a residual add's.

The weights are the dict of tr2.weights (nanoGPT's state_dict names). The activations between
operations are 2-D [B*T, C] except where an operation wants [B, T, ...]; the reshapes are views.
This file does no array arithmetic of its own: all of it goes through the backend, so the CUDA
backend runs this same file.

Dropout: each site of each step has its own counters (rng.py), so a step's masks are a function of
(seed, step) only; forward(training=False) drops nothing and records nothing (evaluation). The step's
part of the counter lives on the device (`step_counter`, written by `set_step`) and the site's part is
a constant, so the same launches, captured once in a CUDA graph, draw each step's masks at replay.
"""
from __future__ import annotations

import numpy as np

from .. import Tr2Error
from ..models import ModelConfig
from ..weights import param_shapes
from . import rng
from .tape import Node, Tape

WTE, WPE, LN_F = "transformer.wte.weight", "transformer.wpe.weight", "transformer.ln_f.weight"
PRODUCT_WEIGHTS = ("attn.c_attn.weight", "attn.c_proj.weight", "mlp.c_fc.weight", "mlp.c_proj.weight")


class GPT:
    def __init__(self, cfg: ModelConfig, backend, weights: dict, seed: int = 0):
        """weights: name -> array [shape of tr2.weights.param_shapes]; copied onto the backend.

        seed: the dropout generator's seed (the trainer passes --seed).
        """
        self.cfg, self.backend, self.seed = cfg, backend, seed
        shapes = param_shapes(cfg)
        missing = [k for k in shapes if k not in weights]
        if missing:
            raise Tr2Error(f"weights: {missing[0]!r} is missing for model {cfg.name}")
        self.params = {}
        for name, shape in shapes.items():
            if tuple(weights[name].shape) != shape:
                raise Tr2Error(f"weights: {name} has shape {tuple(weights[name].shape)}, model {cfg.name} needs {shape}")
            # the tied wte as the classifier's product wants it (CudaBackend: rows padded to a multiple of 8)
            self.params[name] = backend.classifier_weight(weights[name]) if name == WTE else backend.to_device(weights[name])
        # the weights the products read (the Linear layers and the tied lm_head): half copies on the GPU
        backend.product_weights([self.params[n] for n in self.params if n == WTE or n.endswith(PRODUCT_WEIGHTS)])
        self.n_sites = rng.n_sites(cfg.n_layer)
        self.step_counter = backend.to_device(np.zeros(1, dtype=np.uint64), dtype=np.uint64)
        self._one = backend.to_device(1.0)  # the default dloss, allocated once
        self.tape = Tape(add=backend.residual_forward)
        self.grads: dict = {}
        self._loss = None
        self._dloss = self._one
        self._p = 0.0

    # ---- one helper per operation: run its forward, push its backward ----

    def _add_grad(self, name: str, grad) -> None:
        """A weight's gradient; the tied wte receives two (lm_head, then the embedding adds in place)."""
        if name in self.grads:
            self.grads[name] = self.backend.residual_forward(self.grads[name], grad)
        else:
            self.grads[name] = grad

    def _embedding_layernorm(self, idx, name: str, site: int) -> tuple[Node, Node]:
        """(x, y): x = dropout(wte[idx] + wpe[:T]), the residual stream, the dropout (site `site`) inside the
        embedding's kernel (no array of the sum before it is made), and y = LayerNorm(x) with weight `name`, the
        first block's ln_1. Backward as a residual add's: x's gradient from the first residual add arrives as dskip,
        and residual_layernorm's backward writes LayerNorm's dx + dskip through the dropout's mask (db, float32),
        which the embedding's backward sums. Why: before, the tape added the two gradients (a kernel reading two
        streams and writing a third) and the embedding's backward drew the mask inside its ordered sums (30.0 +
        13.7 us a step of nanogpt against 16.8 + 5.3 without, call 4 of results/h200-perf-20261202b). The same
        operations in the same order: the same numbers."""
        be, B, T, p = self.backend, idx.shape[0], idx.shape[1], self._p
        wte, wpe, w = self.params[WTE], self.params[WPE], self.params[name]
        offset = rng.site_offset(0, self.n_sites, site)
        drop = () if p == 0.0 else (p, self.seed, offset, self.step_counter)
        x = Node(be.embedding_forward(idx, wte, wpe, *drop).reshape(B * T, -1))
        y, mean, rstd = be.layernorm_forward(x.value, w, self.cfg.eps_ln)
        out = Node(y)

        def backward():
            dskip, x.grad = x.grad, None   # from the first residual add (always: it reads x)
            _, demb, dw = be.residual_layernorm_backward(self.tape.take(out), dskip, x.value, w, mean, rstd, p,
                                                         self.seed, offset, self.step_counter, branch_float32=True)
            self._add_grad(name, dw)
            if WTE not in self.grads:  # only when lm_head's backward did not run first (it always does)
                self.grads[WTE] = be.zeros(self.params[WTE].shape)
                self.grads[WPE] = be.zeros(self.params[WPE].shape)
                be.embedding_backward(demb.reshape(B, T, -1), idx, self.grads[WTE], self.grads[WPE])
            else:   # lm_head's dW plus the embedding's sums (the backend says how it holds the sum)
                self.grads[WPE] = be.zeros(self.params[WPE].shape)
                self.grads[WTE] = be.embedding_backward_tied(demb.reshape(B, T, -1), idx, self.grads[WTE],
                                                             self.grads[WPE])
        self.tape.push(backward)
        return x, out

    def _linear(self, x: Node, name: str) -> Node:
        be, w = self.backend, self.params[name]
        out = Node(be.matmul_forward(x.value, w))

        def backward():
            dx, dw = be.matmul_backward(self.tape.take(out), x.value, w)
            # x feeds this product alone (a LayerNorm's output, the attention's, GELU's) and no backward after this
            # one reads its value (GELU's reads its input, not its output), so the node lets it go, as autograd
            # frees a product's saved input once that product's backward has run: held by the tape's nodes, GELU's
            # output (N x 4C) stayed through GELU's backward, at the step's peak (the attention's output stays
            # in its saved values until the attention's backward, which reads it)
            x.value = None
            self._add_grad(name, dw)
            self.tape.accumulate(x, dx)
        self.tape.push(backward)
        return out

    def _attention(self, qkv: Node, B: int, T: int, site: int) -> Node:
        be, H, p, seed, step = self.backend, self.cfg.n_head, self._p, self.seed, self.step_counter
        offset = rng.site_offset(0, self.n_sites, site)
        qkv3 = qkv.value.reshape(B, T, -1)
        y, saved = be.attention_forward(qkv3, H, p, seed, offset, step)
        out = Node(y.reshape(B * T, -1))

        def backward():
            dout = self.tape.take(out).reshape(B, T, -1)
            dqkv = be.attention_backward(dout, qkv3, saved, H, p, seed, offset, step)
            self.tape.accumulate(qkv, dqkv.reshape(B * T, -1))
        self.tape.push(backward)
        return out

    def _gelu(self, x: Node) -> Node:
        be = self.backend
        out = Node(be.gelu_forward(x.value))

        def backward():
            self.tape.accumulate(x, be.gelu_backward(self.tape.take(out), x.value))
            x.value = None   # c_fc's output: its product's backward takes only its gradient
        self.tape.push(backward)
        return out

    def _residual_layernorm(self, x: Node, b: Node, name: str, site: int) -> tuple[Node, Node]:
        """(s, y): s = x + dropout(b), the residual stream, and y = LayerNorm(s) with weight `name`, one operation.
        s's gradient from its other reader (the next residual add) reaches backward as dskip; none after the last
        block, where only ln_f reads s."""
        be, w, p, seed, step = self.backend, self.params[name], self._p, self.seed, self.step_counter
        offset = rng.site_offset(0, self.n_sites, site)
        s, y, mean, rstd = be.residual_layernorm_forward(x.value, b.value, w, self.cfg.eps_ln, p, seed, offset, step)
        out_s, out_y = Node(s), Node(y)
        # b (a c_proj product's output) is read by nothing after this: no backward needs its value (the product's
        # takes only its gradient, this one's s, mean and rstd), so its memory goes now instead of staying to the
        # end of backward with the tape's reference: N x C a block twice
        b.value = None

        def backward():
            dskip, out_s.grad = out_s.grad, None
            ds, db, dw = be.residual_layernorm_backward(self.tape.take(out_y), dskip, s, w, mean, rstd, p, seed,
                                                        offset, step)
            self._add_grad(name, dw)
            self.tape.accumulate(x, ds)
            self.tape.accumulate(b, db)
        self.tape.push(backward)
        return out_s, out_y

    def _cross_entropy(self, logits: Node, targets, dloss) -> Node:
        """Training: the loss and the logits' gradient (times dloss) from one call, the gradient handed on at
        backward. Evaluation (nothing recorded, no backward to come): the loss alone, the logits untouched."""
        be = self.backend
        if not self.tape.recording:
            return Node(be.cross_entropy_forward(logits.value, targets))
        loss, dlogits = be.cross_entropy_forward_backward(logits.value, targets, dloss)
        out = Node(loss)

        def backward():
            self.tape.take(out)  # the seed: dloss, already in dlogits
            self.tape.accumulate(logits, dlogits)
        self.tape.push(backward)
        return out

    # ---- the model ----

    def set_step(self, step: int) -> None:
        """Number the next training forward's dropout masks (host -> device: outside a captured graph)."""
        self.backend.write(self.step_counter, self.step_counter_host(step))

    def step_counter_host(self, step: int) -> np.ndarray:
        """What set_step writes into step_counter, for a caller that writes it with other inputs."""
        return np.array([rng.site_offset(step, self.n_sites, 0)], dtype=np.uint64)

    def forward(self, idx, targets, step, training: bool = True, dloss=None):
        """idx, targets: int64 [B, T] on the backend. Returns the mean loss (a 0-d backend array).

        step numbers the dropout masks (rng.site_offset); None keeps the number set_step wrote (a
        captured step writes nothing to the device). training=False turns dropout off and records
        nothing for backward (evaluation). dloss (training only): the gradient backward starts from, a
        0-d backend array or a number (default 1; the float16 loss scaler passes its scale). The
        classifier's gradient is computed in this pass (one kernel with the loss), so it is given here.
        """
        cfg = self.cfg
        B, T = idx.shape
        if T > cfg.block_size:
            raise ValueError(f"sequence of length {T} exceeds block_size {cfg.block_size}")
        self.tape.start(recording=training)
        self._p = cfg.dropout if training else 0.0
        if self._p > 0.0 and step is not None:
            self.set_step(step)

        x, a = self._embedding_layernorm(idx, "transformer.h.0.ln_1.weight", rng.SITE_EMBEDDING)
        for i in range(cfg.n_layer):
            h = f"transformer.h.{i}."
            a = self._linear(a, h + "attn.c_attn.weight")
            a = self._attention(a, B, T, rng.site_attention(i))
            a = self._linear(a, h + "attn.c_proj.weight")
            x, m = self._residual_layernorm(x, a, h + "ln_2.weight", rng.site_attention_residual(i))
            m = self._linear(m, h + "mlp.c_fc.weight")
            m = self._gelu(m)
            m = self._linear(m, h + "mlp.c_proj.weight")
            after = f"transformer.h.{i + 1}.ln_1.weight" if i + 1 < cfg.n_layer else LN_F
            x, a = self._residual_layernorm(x, m, after, rng.site_mlp_residual(i))
        logits = self._linear(a, WTE)  # lm_head: the token embedding, tied; a is ln_f's output
        self._dloss = self._one if dloss is None else dloss
        loss = self._cross_entropy(logits, targets.reshape(B * T), self._dloss)
        self._loss = loss if training else None
        return loss.value

    def backward(self) -> dict:
        """Gradients of the last training forward's loss times its dloss. Returns name -> gradient for every
        weight, in param_shapes' order."""
        if self._loss is None:
            raise RuntimeError("backward() needs a forward(..., training=True) before it")
        self.grads = {}
        self.backend.backward_begin(2 * self.cfg.n_layer + 1)   # ln_1 and ln_2 of each block, ln_f
        self.tape.backward(self._loss, self._dloss)
        self.backend.backward_done()
        self._loss = None
        return {name: self.grads[name] for name in self.params}
