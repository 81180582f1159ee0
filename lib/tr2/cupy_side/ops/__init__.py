"""The cupy side's operations in NumPy: one module per operation, each a forward/backward pair.

These are the reference every CUDA kernel is tested against and what runs where there is no GPU.
Each is pure NumPy and works in the dtype of its inputs (float64 for the reference tests, float32 for
training); products round their inputs as the build's `Precision` says (precision.py).
The model never calls these modules directly: it calls a backend (backend.py), which binds them.
"""
from . import (adamw, attention, cross_entropy, dropout, embedding, gelu, layernorm, matmul, norm,  # noqa: F401
               precision, residual, residual_layernorm)
from .precision import EXACT, Precision, make_precision, round_to_bf16, round_to_fp16, round_to_tf32  # noqa: F401
