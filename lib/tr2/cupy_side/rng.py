"""Dropout's counter-based generator: the same bits in NumPy and in the CUDA kernels (architecture.md).

Element i of a dropout site draws from nothing but (seed, offset + i // 2): a splitmix64 finalizer applied
to seed + counter * golden-ratio constant, all mod 2^64, whose 64-bit output serves two elements, 24 bits
each. No state is carried between calls, so the backward pass regenerates the forward's mask from (seed,
offset), a CUDA thread computes its own elements independently, and both forms agree bit for bit.

    x = seed + (offset + (i >> 1)) * 0x9E3779B97F4A7C15      (mod 2^64)
    z = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9
    z = (z ^ (z >> 27)) * 0x94D049BB133111EB
    z ^= z >> 31
    k = z >> 40 for even i, (z >> 16) & 0xFFFFFF for odd i   (bits 40..63, bits 16..39)
    u = k * 2^-24                                            (24 bits: exact in float32)
    kept when u >= p (compared in float32), scaled by 1/(1-p)

Why one draw for two elements: the finalizer's three 64-bit multiplies were a large part of the char
model's attention, which draws for every score in the forward and again in the backward (it regenerates
the mask); a kernel thread holds pairs of adjacent elements, so one draw a pair halves that work. The two
fields do not overlap, and 24 bits are all an element's float32 u can hold.

Offsets: each dropout site of each step owns 2^32 counters, offset = (step * n_sites + site) << 32,
sites numbered in forward order: 0 the embedding, then per layer i: 1+3i the attention weights,
2+3i the attention's residual branch, 3+3i the MLP's residual branch. Element i is the row-major flat
index in the dropped tensor: [B, T, C] for the embedding and the residual branches, [B, H, T, T] for
the attention weights (masked-out entries included).
"""
from __future__ import annotations

import numpy as np

_MASK64 = (1 << 64) - 1
GOLDEN = np.uint64(0x9E3779B97F4A7C15)
MIX1 = np.uint64(0xBF58476D1CE4E5B9)
MIX2 = np.uint64(0x94D049BB133111EB)
_TWO_POW_M24 = np.float32(2.0 ** -24)


def n_sites(n_layer: int) -> int:
    """Dropout sites of one forward pass: the embedding, then three per layer."""
    return 1 + 3 * n_layer


SITE_EMBEDDING = 0


def site_attention(layer: int) -> int:
    return 1 + 3 * layer


def site_attention_residual(layer: int) -> int:
    return 2 + 3 * layer


def site_mlp_residual(layer: int) -> int:
    return 3 + 3 * layer


def site_offset(step: int, n_sites: int, site: int) -> int:
    """The first counter of `site` at `step`: (step * n_sites + site) << 32 (a Python int below 2^64)."""
    if not 0 <= site < n_sites:
        raise ValueError(f"site {site} is outside 0..{n_sites - 1}")
    return ((step * n_sites + site) << 32) & _MASK64


def _shr(x: np.ndarray, bits: int) -> np.ndarray:
    """x >> bits for uint64 arrays, as a floor division by 2^bits: the same value, and NumPy runs it
    vectorized (its shift by a scalar takes a slow element-by-element path, ~6x slower)."""
    return x // np.uint64(1 << bits)


def uniform(seed: int, offset: int, n: int) -> np.ndarray:
    """float32[n]: the generator's u for elements 0..n-1 of a site (multiples of 2^-24 in [0, 1))."""
    # NumPy's uint64 array arithmetic wraps mod 2^64, which is exactly the arithmetic specified.
    x = np.arange((n + 1) // 2, dtype=np.uint64)   # the counters of elements 2c and 2c + 1
    x += np.uint64(offset & _MASK64)
    x *= GOLDEN
    x += np.uint64(seed & _MASK64)
    z = x ^ _shr(x, 30)
    z *= MIX1
    z ^= _shr(z, 27)
    z *= MIX2
    z ^= _shr(z, 31)
    u = np.empty(2 * z.size, dtype=np.float32)   # 24-bit integers convert to float32 exactly
    u[0::2] = _shr(z, 40)          # even elements: bits 40..63
    z //= np.uint64(1 << 16)
    z &= np.uint64(0xFFFFFF)
    u[1::2] = z                    # odd elements: bits 16..39
    u *= _TWO_POW_M24
    return u[:n]


def keep_mask(seed: int, offset: int, shape, p: float) -> np.ndarray:
    """bool[shape]: which elements dropout keeps (u >= p, p taken as float32, as the kernels compare)."""
    n = int(np.prod(shape, dtype=np.int64))
    return (uniform(seed, offset, n) >= np.float32(p)).reshape(shape)


def keep_scale(p: float, dtype) -> np.generic:
    """The factor a kept element is multiplied by: 1/(1-p), computed in double, held in the arrays' dtype."""
    return np.dtype(dtype).type(1.0 / (1.0 - p))
