"""The order in which the *_backward_dwsum kernels (kernels/layernorm_backward.cuh, layernorm_dw_finish) add the
LayerNorm weight gradient's block partials, in NumPy: the CPU tests check it against a float64 sum and against every
order of the blocks' arrival, the GPU tests ask the kernels for its bits. NumPy only (no CuPy): it runs anywhere."""
from __future__ import annotations

import numpy as np

from . import kernel_define

GROUP = kernel_define("layernorm_backward.cuh", "LN_DW_GROUP")   # GS: consecutive blocks whose partials one block adds
THREADS = kernel_define("layernorm_backward.cuh", "LN_DW_THREADS")


def groups_of(G: int, group: int = GROUP) -> list[range]:
    """The blocks of each group, in order: GS consecutive ones, the last group shorter where G is no multiple of GS."""
    return [range(first, min(first + group, G)) for first in range(0, G, group)]


def sum_in_order(rows: np.ndarray, warps: int) -> np.ndarray:
    """add_rows_in_order: warp k adds rows k, k + R, ... (R = warps) in order from 0, then the R warp sums in order."""
    rows = np.asarray(rows, dtype=np.float32)
    total = np.zeros(rows.shape[1], dtype=np.float32)
    for k in range(warps):
        t = np.zeros(rows.shape[1], dtype=np.float32)
        for j in range(k, rows.shape[0], warps):
            t = t + rows[j]
        total = total + t
    return total


def dw_in_order(part: np.ndarray, warps: int = THREADS // 32, group: int = GROUP) -> np.ndarray:
    """dw from the partials [G, C]: each group's partials summed in order, then the group sums in order."""
    part = np.asarray(part, dtype=np.float32)
    group_sums = np.stack([sum_in_order(part[blocks.start:blocks.stop], warps) for blocks in groups_of(len(part), group)])
    return sum_in_order(group_sums, warps)


def finish_by_tickets(part: np.ndarray, arrival, warps: int = THREADS // 32, group: int = GROUP):
    """layernorm_dw_finish's protocol with the blocks arriving in the order `arrival` (a permutation of range(G)):
    each takes a ticket from its group's counter; the one that takes the group's last sums the group, then takes a
    ticket from the top counter; the one that takes its last sums the group sums. Returns (dw, the counters after the
    launch, {group: the block that summed it}, the block that summed dw)."""
    part = np.asarray(part, dtype=np.float32)
    groups = groups_of(len(part), group)
    counters = np.zeros(len(groups) + 1, dtype=np.int64)
    group_sums = np.full((len(groups), part.shape[1]), np.nan, dtype=np.float32)   # nan: a sum read before written
    group_finisher, dw, dw_finisher = {}, None, None
    for b in arrival:
        q = b // group
        ticket, counters[q] = counters[q], counters[q] + 1
        if ticket != len(groups[q]) - 1:
            continue
        counters[q] = 0
        group_finisher[q] = b
        group_sums[q] = sum_in_order(part[groups[q].start:groups[q].stop], warps)
        ticket, counters[-1] = counters[-1], counters[-1] + 1
        if ticket != len(groups) - 1:
            continue
        counters[-1] = 0
        dw, dw_finisher = sum_in_order(group_sums, warps), b
    return dw, counters, group_finisher, dw_finisher
