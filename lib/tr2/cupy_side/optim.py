"""AdamW, gradient-norm clipping and float16 loss scaling, as nanoGPT's train.py gets them from PyTorch.

- AdamW: torch.optim.AdamW's arithmetic (ops/adamw.py), nanoGPT's groups (weight decay only on
  tensors of 2+ dimensions), bias corrections from the optimizer's own step count.
- Clipping: torch.nn.utils.clip_grad_norm_'s coefficient, min(1, max_norm / (norm + 1e-6)), folded
  into AdamW's grad_scale instead of rewriting the gradients.
- LossScaler: torch.amp.GradScaler's rule: start at 2^16; a step whose gradients are not all finite
  is skipped and halves the scale; 2000 finite steps in a row double it. The gradients are unscaled
  (grad_scale gets 1/scale) before the norm is clipped, as train.py calls scaler.unscale_ first.

Everything a step decides lives on the device: the clip coefficient (from the norm), the loss scale and its
run of good steps, whether a float16 step overflowed (the norm not finite: AdamW then skips, through a flag in
`hyper`), and the optimizer's step count with the bias corrections computed from it (in float64, as torch
computes them in Python floats). Nothing here waits for the device, in any element type. A step splits in
two: `AdamW.set_lr` writes the step's host values (the learning rate and the constants) into `hyper`, and
`apply_update` is device work only (norm, overflow, clip, bias corrections, AdamW, the scale's update): a CUDA
graph holds the second and the host runs the first before each replay. (Until 2026-11-30 the float16 step read
the norm on the host, as GradScaler's step does, and could not be captured.)
"""
from __future__ import annotations

import numpy as np

from .ops import adamw as adamw_ops


class AdamW:
    def __init__(self, backend, params: dict, betas, eps: float, weight_decay: float):
        """params: name -> backend array, updated in place by apply()."""
        self.backend = backend
        self.names = list(params)
        self.params = [params[n] for n in self.names]
        self.ms = [backend.zeros(p.shape) for p in self.params]
        self.vs = [backend.zeros(p.shape) for p in self.params]
        self.beta1, self.beta2 = betas
        self.eps, self.weight_decay = eps, weight_decay
        # updates done (torch's state['step']), on the device: a skipped float16 step does not count
        self.t = backend.to_device(0.0, dtype=np.float64)
        self.hyper = backend.zeros((len(adamw_ops.HYPER),))

    def set_lr(self, lr: float) -> None:
        """Before an update: lr and the constants into hyper (host -> device); apply() fills in the rest."""
        self.backend.write(self.hyper, self.hyper_host(lr))

    def hyper_host(self, lr: float) -> np.ndarray:
        """What set_lr writes into hyper, for a caller that writes it with other inputs."""
        host = np.zeros(self.hyper.shape, dtype=self.hyper.dtype)
        host[[adamw_ops.LR, adamw_ops.BETA1, adamw_ops.BETA2, adamw_ops.EPS, adamw_ops.WEIGHT_DECAY]] = (
            lr, self.beta1, self.beta2, self.eps, self.weight_decay)
        return host

    def apply(self, grads: dict, gnorm=None, max_norm: float = 0.0, scale=None) -> None:
        """The update set_lr prepared: the step's scalars (ops/adamw.scalars: the clip coefficient from gnorm,
        the global norm, and max_norm; unscaling by 1 / scale and the skip of an overflowed step where scale, the
        float16 loss scale, is given; the step count and bias corrections), then AdamW. Device work only: two
        launches on the GPU (adamw_scalars, adamw_update)."""
        self.backend.adamw_scalars(self.hyper, self.t, gnorm, scale, max_norm, self.beta1, self.beta2)
        self.backend.adamw_update(self.params, [grads[n] for n in self.names], self.ms, self.vs, self.hyper)

    def skipped(self):
        """1 where the last apply skipped its step (a float16 overflow), else 0: a 0-d backend array (a view)."""
        return self.hyper[adamw_ops.SKIP]

    def steps_taken(self) -> int:
        """torch's state['step'], read from the device (waits for it)."""
        return int(self.backend.to_host(self.t))


class LossScaler:
    """GradScaler's dynamic loss scale on the device (enabled for float16 only; disabled it is a constant 1).
    `scale` is the 0-d backend array backward starts from (the model's dloss)."""

    def __init__(self, backend, enabled: bool, init_scale: float = 2.0 ** 16, growth_factor: float = 2.0,
                 backoff_factor: float = 0.5, growth_interval: int = 2000):
        self.backend, self.enabled = backend, enabled
        self.scale = backend.to_device(init_scale if enabled else 1.0)
        self.good_steps = backend.to_device(0.0)   # GradScaler's _growth_tracker
        self.growth_factor, self.backoff_factor, self.growth_interval = growth_factor, backoff_factor, growth_interval

    def update(self, found_inf) -> None:
        """After a step (device work): halve on overflow, double after growth_interval clean steps in a row.
        found_inf: a 0-d backend array (1 where the step overflowed), or a bool."""
        if not self.enabled:
            return
        self.backend.loss_scale_update(self.scale, self.good_steps, found_inf, self.growth_factor,
                                       self.backoff_factor, self.growth_interval)   # ops/loss_scale.update

    def value(self) -> float:
        """The scale, read from the device (waits for it)."""
        return float(self.backend.to_host(self.scale))


def optimizer_step(backend, optimizer: AdamW, scaler: LossScaler, grads: dict, lr: float,
                   grad_clip: float) -> None:
    """Everything after backward in nanoGPT's loop: unscale, clip, AdamW step, scaler update (grads were
    computed with dloss = scaler.scale). An overflowed float16 step is skipped on the device."""
    optimizer.set_lr(lr)
    apply_update(backend, optimizer, grads, grad_clip, scaler)


def apply_update(backend, optimizer: AdamW, grads: dict, grad_clip: float, scaler: LossScaler | None = None) -> None:
    """The device part of a step after backward: the global norm, then AdamW.apply (with an enabled scaler the
    gradients' unscaling (1 / scale) and the overflow test: the global norm not finite, which it is exactly when
    some gradient is, short of squares overflowing float32, far above any real gradient; the clip coefficient;
    AdamW from the hyper set_lr wrote), then the scale's update. No host <-> device traffic and no wait: a
    captured CUDA graph can hold it (tr2.cupy_side.gpu.graph)."""
    scaled = scaler is not None and scaler.enabled
    norm = backend.global_norm(list(grads.values())) if (grad_clip != 0.0 or scaled) else None
    optimizer.apply(grads, norm, grad_clip, scaler.scale if scaled else None)
    if scaled:
        scaler.update(optimizer.skipped())
