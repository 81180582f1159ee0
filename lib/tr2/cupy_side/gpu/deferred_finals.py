"""The LayerNorm weight gradients of one backward finished by one launch at its end (TR2_LN_DW_DEFER; written
in the thirty-ninth session, measured and on by default since the fortieth: gpu/layernorm.py's DEFER_FINALS).

Why: each LayerNorm backward writes its blocks' dw partials [G, C], and a final kernel adds them in a fixed order
(layernorm_backward.cuh's layernorm_dw_final_body: thread row k of a block sums the partial rows g = k, k + 32, ...
in turn, then one thread a column adds the 32 sums in turn). That kernel has (C + 31) / 32 blocks, 24 on
gpt2-small's 3.1 MB of partials: 3.1 us a launch at 1.0 TB/s, 25 launches a step (77.8 us,
results/cpu-roofline-20261204/table.txt) and about 20 us a step of gaps around them
(results/h200-perf-20261205e/call4-4e2713e/gaps-ibme3.txt). Nothing reads a LayerNorm's dw before the gradient norm
that follows the backward, so each LayerNorm of the backward writes its partials into a row of one stack
[L, G, C] and leaves its dw, a row of [L, C], to one launch at the backward's end (layernorm.cu's
layernorm_dw_final_stacked: the same body on row blockIdx.y, (C + 31) / 32 x L blocks). The same partials added by
the same body in the same order: the same bits.

What it costs: the partials are held until the backward's end, L G C float32 (79 MB on gpt2-small, 41 MB on
nanogpt, 205 MB on gpt2-medium), allocated at the backward's first LayerNorm (ln_f's, after the classifier's
products).

`Stack` is the bookkeeping (no CuPy: `empty` makes the arrays), `final_reference` the NumPy form of the final with
its order of additions, the kernel's reference to the bit.
"""
from __future__ import annotations

import numpy as np


class Stack:
    """One backward's stacked partials: `take` hands each LayerNorm its rows in turn."""

    def __init__(self, count: int, empty):
        """count: the LayerNorms the backward will run (the model's 2 n_layer + 1); empty(shape): a float32 array."""
        if count < 1:
            raise ValueError(f"deferred finals: count {count}; allowed: one or more LayerNorms")
        self.count, self.empty = int(count), empty
        self.parts = self.dws = None
        self.G = self.C = None
        self.used = 0

    def take(self, G: int, C: int):
        """(part [G, C], dw [C]): the next LayerNorm's rows of the stack (allocated at the first call, at its shape);
        None where every row is taken or the shape is another (that LayerNorm then finishes its dw at once)."""
        if self.parts is None:
            self.G, self.C = int(G), int(C)
            self.parts = self.empty((self.count, self.G, self.C))
            self.dws = self.empty((self.count, self.C))
        if (G, C) != (self.G, self.C) or self.used == self.count:
            return None
        i, self.used = self.used, self.used + 1
        return self.parts[i], self.dws[i]


def final_reference(part: np.ndarray) -> np.ndarray:
    """dw [C] from partials [G, C] (float32) in layernorm_dw_final_body's order of additions: 32 running sums, row
    g into sum g mod 32 in increasing g, then the 32 sums in turn; float32 throughout, so the kernel's bits."""
    part = np.asarray(part, dtype=np.float32)
    G, C = part.shape
    sums = np.zeros((32, C), dtype=np.float32)
    for g in range(G):
        sums[g % 32] += part[g]
    dw = np.zeros(C, dtype=np.float32)
    for k in range(32):
        dw += sums[k]
    return dw
