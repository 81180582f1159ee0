"""The backend: the only thing the model, optimizer and trainer call to touch arrays.

`get_backend(device, dtype, tf32=True, half_roundings=False)` returns `NumpyBackend` for 'cpu' and
`tr2.cupy_side.gpu.backend.CudaBackend` for 'cuda' (imported only then, so a machine without CuPy
never imports it). Both have the same attributes and methods, documented on `NumpyBackend`; the CUDA
one replaces the NumPy one without any change to model.py, optim.py or train.py.
"""
from __future__ import annotations

import numpy as np

from .ops import (adamw, attention, cross_entropy, dropout, embedding, gelu, layernorm, loss_scale, matmul, norm,
                  residual, residual_layernorm)
from .ops.precision import DTYPES, make_precision

DEVICES = ("cpu", "cuda")


class NumpyBackend:
    """The NumPy form of every operation, bound to one build's element type.

    Constructor: `NumpyBackend(dtype, tf32=True, half_roundings=False)`; `CudaBackend` takes the same.
    dtype is 'float64' (reference), 'float32' (products in TF32 when tf32), 'bfloat16' or 'float16'
    (products read the half type; half_roundings also rounds product outputs and attention's
    probabilities). Weights, gradients, optimizer state and the residual stream are float32 in every
    build but float64, where everything is float64.

    Attributes
        xp            the array module (numpy; cupy on the GPU)
        dtype         the build's name, as given
        device        'cpu' or 'cuda'
        float_dtype   numpy dtype of weights, gradients, optimizer state, residual stream, loss

    Utilities (not operations; the model uses them to move and make arrays)
        to_device(a, dtype=None) -> array   a copy on the device, in float_dtype unless dtype is given
        to_host(a) -> np.ndarray            waits for the device where there is one
        zeros(shape) -> array               float_dtype zeros
        write(dst, host) -> None            host values into an existing array, in place (same dtype and
                                            shape): how per-step inputs reach buffers allocated once
        peak_memory_bytes() -> int          the device allocator's peak bytes in use (0 on the CPU)
        reserved_memory_bytes() -> int      the bytes its pools hold (0 on the CPU)
        classifier_weight(w) -> array       to_device for the tied wte [V, C]: the CUDA backend puts its rows at
                                            the top of a zero-filled buffer of a multiple of 8 rows (aligned
                                            logits rows for the products); NumPy: to_device
        product_weights(weights) -> None    the weights (float32 masters, updated only by adamw_update) that
                                            products read: the CUDA backend keeps a half-type copy of each in the
                                            half builds, cast once here and rewritten by adamw_update with the
                                            master, so no cast of a weight runs in a step; NumPy's products round
                                            their operands as they go (the same values), so nothing here

    Operations (architecture.md's table; N = B*T rows; "array" = this backend's array type)
        embedding_forward(idx[B,T], wte[V,C], wpe[Tmax,C], p=0.0, seed=0, offset=0, offset_add=None)
            -> x[B,T,C]                                                 x = dropout(wte[idx] + wpe[:T])
        embedding_backward(dx[B,T,C], idx, dwte, dwpe) -> None          accumulates dx (the sum's gradient, already
                                                                        through the dropout's mask) into dwte, dwpe;
                                                                        dx float32 (not half bits)
        embedding_backward_tied(dx, idx, dwte, dwpe) -> gradient        the tied wte's: lm_head's dW (dwte, read,
                                                                        not changed) plus the sums; NumPy: widened
                                                                        and added into; the CUDA form may hand back
                                                                        a TiedGradient (gpu/tensors.py) that
                                                                        global_norm, adamw_update, gradient_f32 and
                                                                        to_host take
        layernorm_forward(x[N,C], w[C], eps) -> (y[N,C], mean[N], rstd[N])
        layernorm_backward(dy, x, w, mean, rstd) -> (dx[N,C], dw[C])
        matmul_forward(x[N,K], w[M,K]) -> y[N,M]                        y = x @ w.T
        matmul_backward(dy[N,M], x, w) -> (dx[N,K], dw[M,K])
        attention_forward(qkv[B,T,3C], n_head, p, seed, offset, offset_add=None) -> (out[B,T,C], saved)
        attention_backward(dout[B,T,C], qkv, saved, n_head, p, seed, offset, offset_add=None) -> dqkv[B,T,3C]
        gelu_forward(x) -> y                                            exact (erf) GELU
        gelu_backward(dy, x) -> dx
        dropout_forward(x, p, seed, offset, offset_add=None) -> y       p == 0 returns x itself
        dropout_backward(dy, p, seed, offset, offset_add=None) -> dx
        residual_forward(a, b) -> a + b                                 a fresh array (the tape's add of gradients)
        residual_layernorm_forward(x[N,C], b[N,C], w[C], eps, p, seed, offset, offset_add=None)
            -> (s[N,C], y[N,C], mean[N], rstd[N])                       s = x + dropout(b), y = layernorm(s)
        residual_layernorm_backward(dy, dskip, s, w, mean, rstd, p, seed, offset, offset_add=None,
                                    branch_float32=False)
            -> (ds, db, dw)                                             dskip: s's other gradient, or None;
                                                                        db in float32 where branch_float32 (the
                                                                        embedding's gradient: no product reads it)
        cross_entropy_forward(logits[N,V], targets[N]) -> loss 0-d           evaluation: no gradient
        cross_entropy_forward_backward(logits, targets, dloss 0-d) -> (loss 0-d, dlogits[N,V])
                                                                        training: the loss and its gradient times
                                                                        dloss at once; dlogits may be the logits'
                                                                        own buffer, overwritten (the CUDA form)
        adamw_scalars(hyper, t, gnorm, scale, max_norm, beta1, beta2) -> None
                                                                        in place: the step's clip coefficient, skip,
                                                                        count t and bias corrections (ops/adamw.py)
        adamw_update(params, grads, ms, vs, hyper) -> None              in place; see ops/adamw.py
        loss_scale_update(scale, good_steps, found_inf, growth_factor,  in place: the float16 loss scale after a
                          backoff_factor, growth_interval) -> None      step (ops/loss_scale.py)
        global_norm(grads) -> 0-d array                                 sqrt of the sum of squares
        gradient_f32(g) -> array                                        a gradient as float32 values: the CUDA
                                                                        form hands a product's dW over in the
                                                                        half type under half roundings (its
                                                                        values), widened here where a float32
                                                                        array is needed (the tied wte)

    `saved` is opaque to callers: whatever the backend's forward needs its backward to get back.
    Gradients returned are treated as read-only by callers (backward may return its input itself).
    Dropout: p is a Python float, seed and offset Python ints (rng.py); offset_add, when given, a
    uint64 [1] array on the device whose value is added to offset (mod 2^64) where the mask is drawn:
    the step's part of the counter, written once per step (`write`), so that a captured step (a CUDA
    graph) draws new masks at each replay. The mask is regenerated in backward.
    hyper is a float_dtype array [lr, beta1, beta2, eps, weight_decay, bias_corr1, bias_corr2,
    grad_scale, skip] on the device (ops/adamw.HYPER).
    """

    xp = np
    device = "cpu"

    def __init__(self, dtype: str = "float32", tf32: bool = True, half_roundings: bool = False):
        if dtype not in DTYPES:
            raise ValueError(f"dtype: {dtype!r}; allowed: {', '.join(DTYPES)}")
        self.dtype = dtype
        self.tf32 = tf32
        self.half_roundings = half_roundings
        self.prec = make_precision(dtype, tf32, half_roundings)
        self.float_dtype = np.dtype(np.float64 if dtype == "float64" else np.float32)

    def __repr__(self):
        return f"NumpyBackend({self.dtype!r}, products {self.prec.name})"

    # ---- utilities ----
    def to_device(self, a, dtype=None) -> np.ndarray:
        return np.array(a, dtype=dtype or self.float_dtype, copy=True)

    def classifier_weight(self, w) -> np.ndarray:
        return self.to_device(w)

    def to_host(self, a) -> np.ndarray:
        return np.asarray(a)

    def zeros(self, shape) -> np.ndarray:
        return np.zeros(shape, dtype=self.float_dtype)

    def gradient_f32(self, g) -> np.ndarray:
        return g   # NumPy's products return dW as float32 values already rounded as the build rounds them

    def write(self, dst, host) -> None:
        host = np.asarray(host)
        if host.shape != dst.shape or host.dtype != dst.dtype:
            raise ValueError(f"write: {host.dtype}{list(host.shape)} into {dst.dtype}{list(dst.shape)}; "
                             "allowed: the destination's dtype and shape")
        dst[...] = host

    def input_block(self, specs):
        """Inputs rewritten every step as views of one buffer, written together (input_block.py)."""
        from .input_block import NumpyInputBlock
        return NumpyInputBlock(specs)

    def write_block(self, block, hosts) -> None:
        block.write(hosts)

    def peak_memory_bytes(self) -> int:
        return 0

    def reserved_memory_bytes(self) -> int:
        return 0

    def product_weights(self, weights) -> None:
        pass

    def backward_begin(self, layernorms: int) -> None:
        """A backward of `layernorms` LayerNorms starts (the CUDA backend may defer their dw finals to its end)."""

    def backward_done(self) -> None:
        """The backward has ended (the CUDA backend runs its deferred LayerNorm dw finals here); nothing to do."""

    # ---- operations ----
    def embedding_forward(self, idx, wte, wpe, p=0.0, seed=0, offset=0, offset_add=None):
        return embedding.forward(idx, wte, wpe, p, seed, _offset(offset, offset_add))

    def embedding_backward(self, dx, idx, dwte, dwpe):
        embedding.backward(dx, idx, dwte, dwpe)

    def embedding_backward_tied(self, dx, idx, dwte, dwpe):
        g = self.gradient_f32(dwte)
        self.embedding_backward(dx, idx, g, dwpe)
        return g

    def layernorm_forward(self, x, w, eps):
        return layernorm.forward(x, w, eps)

    def layernorm_backward(self, dy, x, w, mean, rstd):
        return layernorm.backward(dy, x, w, mean, rstd)

    def matmul_forward(self, x, w):
        return matmul.forward(x, w, self.prec)

    def matmul_backward(self, dy, x, w):
        return matmul.backward(dy, x, w, self.prec)

    def attention_forward(self, qkv, n_head, p, seed, offset, offset_add=None):
        return attention.forward(qkv, n_head, p, seed, _offset(offset, offset_add), self.prec)

    def attention_backward(self, dout, qkv, saved, n_head, p, seed, offset, offset_add=None):
        return attention.backward(dout, qkv, saved, n_head, p, seed, _offset(offset, offset_add), self.prec)

    def gelu_forward(self, x):
        return gelu.forward(x)

    def gelu_backward(self, dy, x):
        return gelu.backward(dy, x)

    def dropout_forward(self, x, p, seed, offset, offset_add=None):
        return dropout.forward(x, p, seed, _offset(offset, offset_add))

    def dropout_backward(self, dy, p, seed, offset, offset_add=None):
        return dropout.backward(dy, p, seed, _offset(offset, offset_add))

    def residual_forward(self, a, b):
        return residual.forward(a, b)

    def residual_layernorm_forward(self, x, b, w, eps, p, seed, offset, offset_add=None):
        return residual_layernorm.forward(x, b, w, eps, p, seed, _offset(offset, offset_add))

    def residual_layernorm_backward(self, dy, dskip, s, w, mean, rstd, p, seed, offset, offset_add=None,
                                    branch_float32=False):
        # branch_float32: the CUDA form's db type; NumPy's db is of float_dtype in every build
        return residual_layernorm.backward(dy, dskip, s, w, mean, rstd, p, seed, _offset(offset, offset_add))

    def cross_entropy_forward(self, logits, targets):
        return cross_entropy.forward(logits, targets)[0]

    def cross_entropy_forward_backward(self, logits, targets, dloss):
        return cross_entropy.forward_backward(logits, targets, dloss)

    def adamw_scalars(self, hyper, t, gnorm, scale, max_norm, beta1, beta2):
        adamw.scalars(np, hyper, t, gnorm, scale, float(max_norm), float(beta1), float(beta2))

    def adamw_update(self, params, grads, ms, vs, hyper):
        adamw.update(params, grads, ms, vs, hyper)

    def loss_scale_update(self, scale, good_steps, found_inf, growth_factor, backoff_factor, growth_interval):
        loss_scale.update(np, scale, good_steps, found_inf, growth_factor, backoff_factor, growth_interval)

    def global_norm(self, grads):
        return norm.global_norm(grads)


def _offset(offset: int, offset_add) -> int:
    """The counter where a site's draws start: offset + offset_add[0] mod 2^64, as the kernels add them."""
    if offset_add is None:
        return int(offset)
    return (int(offset) + int(offset_add.reshape(-1)[0])) & 0xFFFFFFFFFFFFFFFF


def get_backend(device: str, dtype: str, tf32: bool = True, half_roundings: bool = False):
    """The backend for device 'cpu' (NumPy) or 'cuda' (CuPy kernels; imported here, lazily)."""
    if device == "cpu":
        return NumpyBackend(dtype, tf32, half_roundings)
    if device == "cuda":
        from .gpu.backend import CudaBackend
        return CudaBackend(dtype, tf32, half_roundings)
    raise ValueError(f"device: {device!r}; allowed: {', '.join(DEVICES)}")
