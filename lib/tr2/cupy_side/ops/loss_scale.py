"""GradScaler's dynamic loss scale after a float16 step, as torch.amp.GradScaler.update does it:

    found = found_inf != 0                    (the step's gradients overflowed: optim.AdamW skipped it)
    good = 0 if found else good_steps + 1     (torch's _growth_tracker)
    grow = good == growth_interval
    scale = scale * backoff_factor if found else (scale * growth_factor if grow else scale)
    good_steps = 0 if grow else good

scale, good_steps: 0-d arrays of the same float type, updated in place; found_inf a 0-d array or a bool. xp:
numpy, or cupy (the GPU test's reference of adamw.cu's loss_scale_update, one thread's arithmetic in the same
order). Array operations only: on the GPU nothing waits for the device.
"""
from __future__ import annotations


def update(xp, scale, good_steps, found_inf, growth_factor: float, backoff_factor: float, growth_interval: int) -> None:
    found = xp.asarray(found_inf, dtype=scale.dtype) != 0
    good = xp.where(found, 0.0, good_steps + 1.0)
    grow = good == growth_interval
    scale[...] = xp.where(found, scale * backoff_factor, xp.where(grow, scale * growth_factor, scale))
    good_steps[...] = xp.where(grow, 0.0, good)
