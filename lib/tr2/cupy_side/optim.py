"""AdamW, gradient-norm clipping and float16 loss scaling, as nanoGPT's train.py gets them from PyTorch.

- AdamW: torch.optim.AdamW's arithmetic (ops/adamw.py), nanoGPT's groups (weight decay only on
  tensors of 2+ dimensions), bias corrections from the optimizer's own step count.
- Clipping: torch.nn.utils.clip_grad_norm_'s coefficient, min(1, max_norm / (norm + 1e-6)), folded
  into AdamW's grad_scale instead of rewriting the gradients.
- LossScaler: torch.amp.GradScaler's rule: start at 2^16; a step whose gradients are not all finite
  is skipped and halves the scale; 2000 finite steps in a row double it. The gradients are unscaled
  (grad_scale gets 1/scale) before the norm is clipped, as train.py calls scaler.unscale_ first.

Per-step scalars travel to adamw_update in a device array (`hyper`, allocated once), and the clip
coefficient is computed on the device from the norm, so that without float16 nothing here waits for
the device. A step splits in two: `AdamW.set_lr` writes the step's host values (learning rate, bias
corrections) into `hyper`, and `apply_update` is device work only (norm, clip, AdamW): a CUDA graph
can hold the second and the host runs the first before each replay.
"""
from __future__ import annotations

import numpy as np

CLIP_EPS = 1e-6  # torch.nn.utils.clip_grad_norm_: clip_coef = max_norm / (total_norm + 1e-6)


class AdamW:
    def __init__(self, backend, params: dict, betas, eps: float, weight_decay: float):
        """params: name -> backend array, updated in place by step()."""
        self.backend = backend
        self.names = list(params)
        self.params = [params[n] for n in self.names]
        self.ms = [backend.zeros(p.shape) for p in self.params]
        self.vs = [backend.zeros(p.shape) for p in self.params]
        self.beta1, self.beta2 = betas
        self.eps, self.weight_decay = eps, weight_decay
        self.t = 0  # updates done (torch's state['step']); a skipped step does not count
        self.hyper = backend.zeros((8,))

    def set_lr(self, lr: float) -> None:
        """Before an update: count it, and write lr and the bias corrections into hyper (host -> device)."""
        self.t += 1
        host = np.array([lr, self.beta1, self.beta2, self.eps, self.weight_decay,
                         1.0 - self.beta1 ** self.t, 1.0 - self.beta2 ** self.t, 1.0], dtype=self.backend.float_dtype)
        self.backend.write(self.hyper, host)

    def apply(self, grads: dict, grad_scale=1.0) -> None:
        """The update set_lr prepared, with g = grads * grad_scale (a Python float or a 0-d backend array
        that stays on the device)."""
        self.hyper[7] = grad_scale
        self.backend.adamw_update(self.params, [grads[n] for n in self.names], self.ms, self.vs, self.hyper)

    def step(self, grads: dict, lr: float, grad_scale=1.0) -> None:
        """One update with g = grads * grad_scale."""
        self.set_lr(lr)
        self.apply(grads, grad_scale)


class LossScaler:
    """GradScaler's dynamic loss scale (enabled for float16 only; disabled it is a constant 1)."""

    def __init__(self, enabled: bool, init_scale: float = 2.0 ** 16, growth_factor: float = 2.0,
                 backoff_factor: float = 0.5, growth_interval: int = 2000):
        self.enabled = enabled
        self.scale = init_scale if enabled else 1.0
        self.growth_factor, self.backoff_factor, self.growth_interval = growth_factor, backoff_factor, growth_interval
        self.good_steps = 0  # GradScaler's _growth_tracker

    def update(self, found_inf: bool) -> None:
        """After a step: halve on overflow, double after growth_interval clean steps in a row."""
        if not self.enabled:
            return
        if found_inf:
            self.scale *= self.backoff_factor
            self.good_steps = 0
        else:
            self.good_steps += 1
            if self.good_steps == self.growth_interval:
                self.scale *= self.growth_factor
                self.good_steps = 0


def clip_coefficient(backend, norm, max_norm: float):
    """min(1, max_norm / (norm + 1e-6)) as a device scalar in the norm's type (1 when max_norm is 0)."""
    xp = backend.xp
    dt = backend.float_dtype.type
    if max_norm == 0.0:
        return xp.full((), dt(1.0), dtype=backend.float_dtype)  # a fill, not a host copy: capturable
    return xp.minimum(dt(1.0), dt(max_norm) / (norm + dt(CLIP_EPS)))


def optimizer_step(backend, optimizer: AdamW, scaler: LossScaler, grads: dict, lr: float,
                   grad_clip: float) -> bool:
    """Everything after backward in nanoGPT's loop: unscale, clip, AdamW step, scaler update.

    grads were computed with dloss = scaler.scale. Returns False when the step was skipped (float16
    overflow), True otherwise. Overflow is read from the global norm: it is finite exactly when every
    gradient is (short of squares overflowing float32, far above any real gradient).
    """
    dt = backend.float_dtype.type
    inv_scale = dt(1.0 / scaler.scale)
    need_norm = grad_clip != 0.0 or scaler.enabled
    norm = backend.global_norm(list(grads.values())) * inv_scale if need_norm else None
    if scaler.enabled:
        found_inf = not bool(np.isfinite(backend.to_host(norm)))  # the one wait on the device, as GradScaler's
        scaler.update(found_inf)
        if found_inf:
            return False
    optimizer.set_lr(lr)
    apply_update(backend, optimizer, grads, grad_clip, inv_scale, norm)
    return True


def apply_update(backend, optimizer: AdamW, grads: dict, grad_clip: float, inv_scale=1.0, norm=None) -> None:
    """The device part of a step after backward: the clip coefficient from the global norm (computed
    here unless given, already unscaled) and AdamW from the hyper set_lr wrote. No host <-> device
    traffic and no wait: a captured CUDA graph can hold it (tr2.cupy_side.gpu.graph)."""
    xp = backend.xp
    dt = backend.float_dtype.type
    inv_scale = dt(inv_scale)
    if grad_clip != 0.0:
        if norm is None:
            norm = backend.global_norm(list(grads.values())) * inv_scale
        grad_scale = clip_coefficient(backend, norm, grad_clip) * inv_scale
    else:
        grad_scale = xp.full((), inv_scale, dtype=backend.float_dtype)
    optimizer.apply(grads, grad_scale)
