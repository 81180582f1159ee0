"""AdamW in PyTorch's form, one call for all tensors, updating params, m and v in place.

hyper = [lr, beta1, beta2, eps, weight_decay, bias_corr1, bias_corr2, grad_scale, skip] (an array, so that a
captured CUDA graph can read a new step's values from memory), bias_corr_k = 1 - beta_k^t. skip != 0: nothing
changes (a float16 step whose gradients overflowed; GradScaler skips optimizer.step). With
g = grad * grad_scale (grad_scale folds in the clip coefficient and the loss scaler's 1/scale):

    p *= 1 - lr * weight_decay          only tensors of 2+ dimensions (nanoGPT's parameter groups)
    m += (1 - beta1) * (g - m)          torch's lerp
    v  = beta2 * v + (1 - beta2) * g^2
    p -= lr / bias_corr1 * m / (sqrt(v) / sqrt(bias_corr2) + eps)

This is torch.optim.AdamW's _single_tensor_adamw step, operation for operation.

copies (the CUDA kernel's half copies, kernels/adamw.cu): copies[i], where not None, is rewritten from the new
p[i] as `rounding(p)`, the build's half-type rounding (precision.py's operand rounding in a half build). It is
exactly what a product reads when it rounds p as its operand, so holding it changes no product. The NumPy
backend passes none (its products round as they go); the GPU tests take this form as the kernel's reference.
"""
from __future__ import annotations

import numpy as np

HYPER = ("lr", "beta1", "beta2", "eps", "weight_decay", "bias_corr1", "bias_corr2", "grad_scale", "skip")
LR, BETA1, BETA2, EPS, WEIGHT_DECAY, BIAS_CORR1, BIAS_CORR2, GRAD_SCALE, SKIP = range(len(HYPER))
CLIP_EPS = 1e-6  # torch.nn.utils.clip_grad_norm_: clip_coef = max_norm / (total_norm + 1e-6)


def scalars(xp, hyper, t, gnorm, scale, max_norm: float, beta1: float, beta2: float) -> None:
    """The step's scalars before update, in place, in hyper's type (t in float64), as nanoGPT's loop gets them:

        inv = 1 / scale                      (the float16 loss scale: scaler.unscale_; 1 without one)
        norm = gnorm * inv
        skip = 1 where norm is not finite    (loss scaling only: GradScaler skips the step; else left as set_lr wrote)
        grad_scale = min(1, max_norm / (norm + CLIP_EPS)) * inv      (clip_grad_norm_'s coefficient; 1 if max_norm is 0)
        t = t + (1 - skip)                   (torch's state['step']: a skipped step does not count)
        bias_corr_k = 1 - beta_k^t           (float64, as torch computes them in Python floats; stored rounded)

    gnorm: 0-d array, the global norm of the gradients (None where max_norm is 0 and there is no scale); scale:
    0-d array or None. xp: numpy, or cupy (the GPU tests' reference of adamw.cu's adamw_scalars, one thread's
    arithmetic in the same order). Array operations only: on the GPU nothing waits for the device.
    """
    dt = hyper.dtype.type
    scaled = scale is not None
    inv = dt(1.0) / scale if scaled else dt(1.0)
    norm = gnorm * inv if gnorm is not None else None
    if scaled:
        hyper[SKIP] = (~xp.isfinite(norm)).astype(hyper.dtype)
    clip = xp.minimum(dt(1.0), dt(max_norm) / (norm + dt(CLIP_EPS))) if max_norm != 0.0 else dt(1.0)
    hyper[GRAD_SCALE] = clip * inv
    t += 1.0 - hyper[SKIP].astype(np.float64) if scaled else 1.0
    hyper[BIAS_CORR1] = 1.0 - beta1 ** t
    hyper[BIAS_CORR2] = 1.0 - beta2 ** t


def update(params, grads, ms, vs, hyper, copies=None, rounding=None) -> None:
    if hyper[SKIP] != 0:
        return
    lr, beta1, beta2, eps, wd, bc1, bc2, grad_scale = (hyper[k] for k in range(SKIP))
    one = hyper.dtype.type(1.0)
    step_size = lr / bc1
    bc2_sqrt = np.sqrt(bc2)
    copies = [None] * len(params) if copies is None else copies
    for p, grad, m, v, copy in zip(params, grads, ms, vs, copies):
        g = grad * grad_scale
        if p.ndim >= 2:
            p *= one - lr * wd
        m += (one - beta1) * (g - m)
        v *= beta2
        v += (one - beta2) * (g * g)
        denom = np.sqrt(v) / bc2_sqrt
        denom += eps
        p -= step_size * (m / denom)
        if copy is not None:
            copy[...] = rounding(p)
