"""CudaBackend: the cupy side's operations as CUDA kernels (kernels/*.cu through CuPy's RawModule) and
cuBLAS products (gpu/blas.py), with exactly NumpyBackend's attributes, methods and signatures
(tr2/cupy_side/backend.py documents them), so model.py, optim.py and train.py run on it unchanged.

Every launch goes to CuPy's current stream and nothing here waits for the device, except to_host.
Activations are float32 CuPy arrays, or in the half builds uint16 arrays holding the build's half type where
the producer rounds to it (product outputs under half roundings) or the consumer reads it (products'
inputs): `_act` takes either, `_f32` only float32 (weights, gradients, the residual stream).
Per-step scratch lives in a workspace keyed by shape (allocated once); per-step scalars the kernels
read (AdamW's hyper, the loss gradient, the clip and loss scales) stay in device memory. Values handed
back to the model (activations, gradients, saved state) are fresh arrays from CuPy's memory pool, which
recycles them step after step without new device allocations.
"""
from __future__ import annotations

import numpy as np
import cupy as cp

from ...trainlog import products_record_text
from ..ops import loss_scale
from ..ops.precision import make_precision
from . import adamw as _adamw
from . import attention as _attention
from . import cross_entropy as _ce
from . import dropout as _dropout
from . import embedding as _embedding
from . import gelu as _gelu
from . import global_norm as _global_norm
from . import layernorm as _layernorm
from . import matmul as _matmul
from . import nvrtc_watch as _nvrtc_watch
from . import residual as _residual
from . import residual_layernorm as _residual_layernorm
from .cast import from_half, zero
from .context import GpuContext
from .halfbits import from_bits
from .runtime import PeakTracker, compile_all
from .staging import InputBlock, Staging
from .tensors import TiedGradient
from . import kernel_switch

DTYPES = ("float32", "bfloat16", "float16")
# The tied wte's gradient as lm_head's half dW plus the embedding's sums, read so by the global norm and AdamW
# (tensors.TiedGradient; the same bits, tested against the widened form on the GPU), instead of a widening pass over
# the whole [V, C] and the embedding's adds into its float32 copy. On since the thirty-fourth session: its GPU tests
# passed (the same bits as the widened form, eager and graph) and the step was faster on the H200 by 0.013-0.038 ms
# (results/h200-perf-20261205/call2-tied-ca4cf49; docs/perf.md); TR2_TIED_WTE=0 gives the widening pass back.
TIED_WTE = bool(kernel_switch("TR2_TIED_WTE", 1))


def _f32(a) -> "cp.ndarray":
    """A C-contiguous float32 CuPy array (weights', gradients' and the residual stream's type)."""
    if not isinstance(a, cp.ndarray):
        a = cp.asarray(a, dtype=np.float32)
    elif a.dtype == np.uint16:
        raise ValueError("a half-type activation (uint16 bits) where float32 is required: widen it by its kind")
    elif a.dtype != np.float32:
        a = a.astype(np.float32)
    return a if a.flags.c_contiguous else cp.ascontiguousarray(a)


def _u64(a):
    """offset_add: None, or a uint64 device array whose first element the kernels add to the offset."""
    if a is None:
        return None
    if not (isinstance(a, cp.ndarray) and a.dtype == np.uint64 and a.size >= 1 and a.flags.c_contiguous):
        raise ValueError("offset_add: a C-contiguous uint64 CuPy array of one element, or None")
    return a


def _i64(a) -> "cp.ndarray":
    if not isinstance(a, cp.ndarray):
        a = cp.asarray(a, dtype=np.int64)
    elif a.dtype != np.int64:
        a = a.astype(np.int64)
    return a if a.flags.c_contiguous else cp.ascontiguousarray(a)


class CudaBackend:
    """See NumpyBackend (tr2/cupy_side/backend.py) for every attribute and method; float64 is not built
    on the GPU (the trainer offers float32, bfloat16 and float16)."""

    xp = cp
    device = "cuda"

    def __init__(self, dtype: str = "float32", tf32: bool = True, half_roundings: bool = False):
        if dtype not in DTYPES:
            raise ValueError(f"dtype: {dtype!r}; allowed on the GPU: {', '.join(DTYPES)}")
        if cp.cuda.runtime.getDeviceCount() < 1:
            raise RuntimeError("no CUDA device")
        self.dtype = dtype
        self.tf32 = tf32
        self.half_roundings = half_roundings
        self.prec = make_precision(dtype, tf32, half_roundings)
        self.float_dtype = np.dtype(np.float32)
        self.ctx = GpuContext(dtype=dtype, tf32=tf32, half_roundings=half_roundings)
        self._staging = Staging()
        self._peak = PeakTracker.install()
        _nvrtc_watch.install()  # from here every module CuPy compiles is named in the train log's NVRTC line
        compile_all()          # every kernel built (or loaded from CuPy's cache) before the first step
        if self.ctx.half:
            _gelu.prepare(self.ctx.kind)   # GELU's half tables filled now, eagerly: never first inside a captured step
        self.ctx.cublas        # the cuBLAS handle and its workspace, before the first step

    def __repr__(self):
        lt = self.ctx.cublas.lt   # the run's log says which products record it read (gpu/lt.py)
        how = (f"cuBLASLt, {products_record_text(lt.record_path, len(lt.record), lt.record_sha256)}" if lt is not None
               else "cublasGemmEx")
        return f"CudaBackend({self.dtype!r}, products {self.prec.name} through {how})"

    # ---- utilities ----
    def to_device(self, a, dtype=None) -> "cp.ndarray":
        if isinstance(a, cp.ndarray):
            return cp.array(a, dtype=dtype or self.float_dtype, copy=True)
        host = np.asarray(a, dtype=dtype or self.float_dtype)
        if host.ndim == 0:
            # CuPy makes a 0-d array by ndarray.fill, whose kernel NVRTC compiles at run time for any value but 0 (the
            # model's default dloss, 1.0: the H200 NVRTC test's cupy_fill); as one element copied, then viewed as 0-d
            return cp.array(host.reshape(1), copy=True).reshape(())
        return cp.array(host, copy=True)

    def to_host(self, a) -> np.ndarray:
        """A host copy; half-type activations (uint16 bits) come back as their float32 values, a TiedGradient as its
        float32 values."""
        if isinstance(a, TiedGradient):
            return cp.asnumpy(a.dense())
        if isinstance(a, cp.ndarray) and a.dtype == np.uint16:
            return from_bits(cp.asnumpy(a), self.ctx.kind)
        return cp.asnumpy(a) if isinstance(a, cp.ndarray) else np.asarray(a)

    def _rows(self, a) -> "cp.ndarray":
        """_act, except that the first columns of a C-contiguous buffer (forward's padded logits, gpu/matmul.py, and
        the dlogits written over them) pass as they are: the classifier's kernels read them in place."""
        if (isinstance(a, cp.ndarray) and a.ndim == 2 and a.base is not None
                and _matmul.column_base(a, a.base.shape[-1]) is not None):
            if a.dtype == np.uint16:
                self.ctx.kind_of(a)
            elif a.dtype != np.float32:
                raise ValueError(f"logits of dtype {a.dtype}: float32 or the build's half bits (uint16)")
            return a
        return self._act(a)

    def _act(self, a) -> "cp.ndarray":
        """An activation as the kernels take it: float32, or the build's half type as uint16 bits."""
        if isinstance(a, cp.ndarray) and a.dtype == np.uint16:
            self.ctx.kind_of(a)   # refuses half bits in a float32 build
            return a if a.flags.c_contiguous else cp.ascontiguousarray(a)
        return _f32(a)

    def _widen(self, a) -> "cp.ndarray":
        """float32 values of an activation (half bits widened exactly)."""
        a = self._act(a)
        return from_half(a, self.ctx.kind) if a.dtype == np.uint16 else a

    def zeros(self, shape) -> "cp.ndarray":
        return zero(cp.empty(shape, dtype=self.float_dtype))   # a memset (cast.zero)

    def write(self, dst, host) -> None:
        host = np.ascontiguousarray(host)
        if host.shape != dst.shape or host.dtype != dst.dtype:
            raise ValueError(f"write: {host.dtype}{list(host.shape)} into {dst.dtype}{list(dst.shape)}; "
                             "allowed: the destination's dtype and shape")
        if not dst.flags.c_contiguous:
            raise ValueError("write: the destination must be C-contiguous")
        # on the current stream: after the work queued there (a graph's replay reading dst), before the next;
        # through page-locked memory, so that the host does not wait for the stream (gpu/staging.py)
        self._staging.write(dst, host, cp.cuda.get_current_stream())

    def input_block(self, specs):
        """Inputs rewritten every step as views of one device buffer, written by one copy (gpu/staging.py)."""
        return InputBlock(specs)

    def write_block(self, block, hosts) -> None:
        # as write: on the current stream, through page-locked memory
        block.write(hosts, cp.cuda.get_current_stream())

    def peak_memory_bytes(self) -> int:
        """Peak bytes in use in CuPy's memory pools (the default one, and the CUDA graph's through
        `pool_allocator`) since this process installed the tracker."""
        return self._peak.peak_bytes()

    def reserved_memory_bytes(self) -> int:
        return self._peak.reserved_bytes()

    def workspace_line(self) -> str:
        return self.ctx.cublas.workspace_line()

    def layernorm_finals_line(self) -> str | None:
        return _layernorm.deferred_line()

    def nvrtc_line(self) -> str:
        return _nvrtc_watch.line()

    def pool_allocator(self, pool):
        """An allocator for another memory pool (the CUDA graph's) that the peak counts."""
        return self._peak.malloc_for(pool)

    def classifier_weight(self, w) -> "cp.ndarray":
        """The tied wte [V, C] on the device as the first V rows of a zero-filled [Vp, C] buffer, Vp the next multiple
        of 8: the logits' rows then start on 16-byte boundaries (gpu/matmul.py's forward; the char model's V = 65).
        A C-contiguous float32 view; the embedding, AdamW and the norm see V rows, the products all Vp."""
        w = np.asarray(w, dtype=self.float_dtype)
        V = w.shape[0]
        Vp = -(-V // 8) * 8
        if Vp == V:
            return self.to_device(w)
        # padded on the host and copied whole: a CuPy assignment into the device buffer's rows would compile CuPy's
        # copy kernel, and so open NVRTC, in a run whose own kernels are all cubins (gpu/nvrtc_watch.py)
        host = np.zeros((Vp,) + w.shape[1:], dtype=self.float_dtype)
        host[:V] = w
        return self.to_device(host)[:V]

    def product_weights(self, weights) -> None:
        """Half builds: each weight gets its half copy, cast once now and rewritten by adamw_update from then on
        (GpuContext.keep_half_copy); the products read it. float32 builds: nothing."""
        for w in weights:
            self.ctx.keep_half_copy(w)

    def synchronize(self) -> None:
        cp.cuda.get_current_stream().synchronize()

    def backward_begin(self, layernorms: int) -> None:
        _layernorm.begin_deferred(layernorms)   # TR2_LN_DW_DEFER: their dw finals at backward_done

    def backward_done(self) -> None:
        """What follows the backward (the gradient norm, AdamW) runs after the deferred LayerNorm finals
        (gpu/layernorm.py)."""
        _layernorm.finish_deferred()

    # ---- operations ----
    def embedding_forward(self, idx, wte, wpe, p=0.0, seed=0, offset=0, offset_add=None):
        return _embedding.forward(_i64(idx), _f32(wte), _f32(wpe), float(p), int(seed), int(offset),
                                  _u64(offset_add))

    def embedding_backward(self, dx, idx, dwte, dwpe):
        for a in (dwte, dwpe):
            if not (isinstance(a, cp.ndarray) and a.dtype == np.float32 and a.flags.c_contiguous):
                raise ValueError("embedding_backward accumulates in place: dwte and dwpe must be C-contiguous "
                                 "float32 CuPy arrays")
        _embedding.backward(self.ctx.ws, _f32(dx), _i64(idx), dwte, dwpe)

    def embedding_backward_tied(self, dx, idx, dwte, dwpe):
        """The tied wte's gradient: lm_head's dW plus the embedding's sums. With TIED_WTE and dW in the half type,
        a TiedGradient (no widening pass: the norm and AdamW add the sums as they read it); else dW widened and
        the sums added into it, as before."""
        if TIED_WTE and isinstance(dwte, cp.ndarray) and dwte.dtype == np.uint16 and dwte.flags.c_contiguous:
            self.ctx.kind_of(dwte)
            if not (isinstance(dwpe, cp.ndarray) and dwpe.dtype == np.float32 and dwpe.flags.c_contiguous):
                raise ValueError("embedding_backward_tied accumulates into dwpe in place: a C-contiguous float32 "
                                 "CuPy array")
            sums = cp.empty(dwte.shape, dtype=np.float32)
            starts = _embedding.backward(self.ctx.ws, _f32(dx), _i64(idx), sums, dwpe, sums=True)
            return TiedGradient(dwte, sums, starts, self.ctx.kind)
        g = self.gradient_f32(dwte)
        self.embedding_backward(dx, idx, g, dwpe)
        return g

    def layernorm_forward(self, x, w, eps):
        return _layernorm.forward(self.ctx, _f32(x), _f32(w), eps)

    def layernorm_backward(self, dy, x, w, mean, rstd):
        return _layernorm.backward(self.ctx, self._act(dy), _f32(x), _f32(w), _f32(mean), _f32(rstd))

    def matmul_forward(self, x, w):
        return _matmul.forward(self.ctx, self._act(x), _f32(w))

    def matmul_backward(self, dy, x, w):
        return _matmul.backward(self.ctx, self._rows(dy), self._act(x), _f32(w))

    def attention_forward(self, qkv, n_head, p, seed, offset, offset_add=None):
        return _attention.forward(self.ctx, self._act(qkv), int(n_head), float(p), int(seed), int(offset),
                                  _u64(offset_add))

    def attention_backward(self, dout, qkv, saved, n_head, p, seed, offset, offset_add=None):
        return _attention.backward(self.ctx, self._act(dout), self._act(qkv), saved, int(n_head), float(p),
                                   int(seed), int(offset), _u64(offset_add))

    def gelu_forward(self, x):
        return _gelu.forward(self.ctx, self._act(x))

    def gelu_backward(self, dy, x):
        return _gelu.backward(self.ctx, self._act(dy), self._act(x))

    def dropout_forward(self, x, p, seed, offset, offset_add=None):
        if p == 0.0:
            return x
        x = self._act(x)
        return _dropout.forward(x, float(p), int(seed), int(offset), _u64(offset_add), self.ctx.kind_of(x))

    def dropout_backward(self, dy, p, seed, offset, offset_add=None):
        if p == 0.0:
            return dy
        dy = self._act(dy)
        return _dropout.backward(dy, float(p), int(seed), int(offset), _u64(offset_add), self.ctx.kind_of(dy))

    def residual_forward(self, a, b):
        b = self._act(b)
        return _residual.forward(self._widen(a), b, self.ctx.kind_of(b))

    def residual_layernorm_forward(self, x, b, w, eps, p, seed, offset, offset_add=None):
        return _residual_layernorm.forward(self.ctx, _f32(x), self._act(b), _f32(w), float(eps), float(p), int(seed),
                                           int(offset), _u64(offset_add))

    def residual_layernorm_backward(self, dy, dskip, s, w, mean, rstd, p, seed, offset, offset_add=None,
                                    branch_float32=False):
        return _residual_layernorm.backward(self.ctx, self._act(dy), None if dskip is None else _f32(dskip), _f32(s),
                                            _f32(w), _f32(mean), _f32(rstd), float(p), int(seed), int(offset),
                                            _u64(offset_add), branch_float32=bool(branch_float32))

    def cross_entropy_forward(self, logits, targets):
        return _ce.forward(self.ctx, self._rows(logits), _i64(targets))

    def cross_entropy_forward_backward(self, logits, targets, dloss):
        return _ce.forward_backward(self.ctx, self._rows(logits), _i64(targets), dloss)

    def adamw_scalars(self, hyper, t, gnorm, scale, max_norm, beta1, beta2):
        _adamw.scalars(hyper, t, gnorm, scale, float(max_norm), float(beta1), float(beta2))

    def _grad(self, g):
        """A gradient as the multi-tensor kernels take it: _act's, or a TiedGradient as it is."""
        return g if isinstance(g, TiedGradient) else self._act(g)

    def adamw_update(self, params, grads, ms, vs, hyper):
        _adamw.update(self.ctx, list(params), [self._grad(g) for g in grads], list(ms), list(vs), hyper)

    def loss_scale_update(self, scale, good_steps, found_inf, growth_factor, backoff_factor, growth_interval):
        if _adamw.LOSS_SCALE_KERNEL and isinstance(found_inf, cp.ndarray):   # the step's verdict: one launch
            _adamw.loss_scale_update(scale, good_steps, found_inf, growth_factor, backoff_factor, growth_interval)
        else:   # the same arithmetic as CuPy's launches on 0-d arrays (ops/loss_scale.update)
            loss_scale.update(cp, scale, good_steps, found_inf, growth_factor, backoff_factor, growth_interval)

    def global_norm(self, grads):
        return _global_norm.global_norm(self.ctx, [self._grad(g) for g in grads])

    def gradient_f32(self, g):
        return g.dense() if isinstance(g, TiedGradient) else self._widen(g)
