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
