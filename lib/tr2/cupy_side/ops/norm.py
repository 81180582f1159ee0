"""The global gradient norm: sqrt of the sum of squares over every gradient tensor (what
torch.nn.utils.clip_grad_norm_ computes, as the norm of the per-tensor norms).

Sums of float32 squares are accumulated in float64 so the result is the correctly rounded float32
norm (torch's reduction is accurate to about an ulp; a float32 running sum over a million squares is
not). The result is a 0-d array in the gradients' type: a non-finite gradient makes it non-finite,
which is how the loss scaler detects overflow.
"""
from __future__ import annotations

import numpy as np


def forward(grads) -> np.ndarray:
    grads = list(grads)
    total = 0.0
    for g in grads:
        flat = np.asarray(g, dtype=np.float64).reshape(-1)
        total += float(np.dot(flat, flat))
    dtype = grads[0].dtype if grads else np.float32
    return np.asarray(np.sqrt(total), dtype=dtype)


global_norm = forward
