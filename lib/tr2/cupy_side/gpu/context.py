"""What every wrapper needs: the product element kind, the flags, the workspace, the cuBLAS handle and the
half-type copies of the weights the products read."""
from __future__ import annotations

import weakref
from dataclasses import dataclass, field

import numpy as np
import cupy as cp

from . import blas
from .halfbits import KINDS, KIND_F32
from .runtime import Workspace


@dataclass
class GpuContext:
    dtype: str = "float32"          # float32 | bfloat16 | float16: the type the products read
    tf32: bool = True               # float32 products in TF32
    half_roundings: bool = False    # products' outputs and attention probabilities rounded to the half type
    ws: Workspace = field(default_factory=Workspace)
    _cublas: blas.Cublas | None = None
    # id(float32 master) -> (weak reference to the master, its half-type copy); see keep_half_copy
    _copies: dict = field(default_factory=dict)

    def __post_init__(self):
        if self.dtype not in KINDS:
            raise ValueError(f"dtype {self.dtype!r}: the CUDA backend runs float32, bfloat16 or float16")

    @property
    def kind(self) -> int:
        return KINDS[self.dtype]

    @property
    def half(self) -> bool:
        return self.kind != KIND_F32

    @property
    def round_kind(self) -> int:
        """The kind product outputs and attention probabilities are rounded to (0: not rounded)."""
        return self.kind if (self.half and self.half_roundings) else KIND_F32

    @property
    def store_dtype(self):
        """CuPy dtype of a product's input buffer: float32, or uint16 bits for the half types."""
        return np.uint16 if self.half else np.float32

    @property
    def out_dtype(self):
        """CuPy dtype of a product's output (and attention's): uint16 half bits where the build rounds product
        outputs to the half type (half roundings), else float32."""
        return np.uint16 if self.round_kind != KIND_F32 else np.float32

    @property
    def act_kind(self) -> int:
        """The kind of activations that only feed products (LayerNorm's and GELU's outputs, the logits'
        gradient): the half type in the half builds, where the product would round them to it anyway."""
        return self.kind

    def kind_of(self, a) -> int:
        """An activation's kind from its dtype: float32, or (uint16 bits) the build's half type."""
        if a.dtype == np.float32:
            return KIND_F32
        if a.dtype == np.uint16 and self.half:
            return self.kind
        raise ValueError(f"activation of dtype {a.dtype}; allowed: float32, or uint16 half bits in a half build")

    def keep_half_copy(self, w: "cp.ndarray") -> None:
        """Give the float32 weight w a persistent copy in the build's half type (uint16 bits), cast once here.
        From then on the products read the copy (`half_copy`) and adamw_update rewrites it with the master
        (kernels/adamw.cu), so no cast of w runs in a step. Only the optimizer may change w afterwards: a
        copy is not refreshed by any other write. Nothing in float32 builds (the products read w itself).
        The entry goes when w is freed (a weak reference), so a new array at w's address never finds it."""
        if not self.half or self.half_copy(w) is not None:
            return
        if not (isinstance(w, cp.ndarray) and w.dtype == np.float32 and w.flags.c_contiguous):
            raise ValueError("a half copy is kept of a C-contiguous float32 CuPy array (the master the optimizer updates)")
        from .cast import to_half
        from .matmul import padded_rows
        key = id(w)
        # a weight with zero rows below it (CudaBackend.classifier_weight) gets a copy with zero rows below it too
        rows = padded_rows(w).shape[0]
        copy = cp.empty(w.shape, dtype=np.uint16) if rows == w.shape[0] else cp.zeros((rows,) + w.shape[1:], np.uint16)[:w.shape[0]]
        self._copies[key] = (weakref.ref(w, lambda _ref, key=key: self._copies.pop(key, None)),
                             to_half(w, self.kind, out=copy))

    def half_copy(self, w) -> "cp.ndarray | None":
        """w's half copy (keep_half_copy), or None where it has none."""
        entry = self._copies.get(id(w))
        return entry[1] if entry is not None and entry[0]() is w else None

    @property
    def cuda_type(self) -> int:
        return blas.DATA_TYPES[self.dtype]

    @property
    def compute(self) -> int:
        return blas.compute_type(self.dtype, self.tf32)

    @property
    def cublas(self) -> blas.Cublas:
        if self._cublas is None:
            self._cublas = blas.get_cublas()
        self._cublas.set_math(self.half_roundings)
        return self._cublas


def dev(a, dtype=None) -> "cp.ndarray":
    """A C-contiguous CuPy array (host arrays are copied to the device)."""
    a = cp.asarray(a) if not isinstance(a, cp.ndarray) else a
    if dtype is not None and a.dtype != np.dtype(dtype):
        a = a.astype(dtype)
    return cp.ascontiguousarray(a)
