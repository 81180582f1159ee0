"""CUDA-event timings for the dev scripts (attention_bench, attention_variants, ln_variants), one place."""
from __future__ import annotations

import statistics

import cupy as cp


def mean_ms(fn, reps: int) -> float:
    """ms a call: one warm-up call, then `reps` calls back to back between two events."""
    fn()
    cp.cuda.runtime.deviceSynchronize()
    a, b = cp.cuda.Event(), cp.cuda.Event()
    a.record()
    for _ in range(reps):
        fn()
    b.record()
    b.synchronize()
    return cp.cuda.get_elapsed_time(a, b) / reps


def median_ms(fn, reps: int, warmup: int = 3) -> float:
    """ms a call: the median of `reps` calls each timed between its own two events, after `warmup` calls."""
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(reps):
        a, b = cp.cuda.Event(), cp.cuda.Event()
        a.record()
        fn()
        b.record()
        b.synchronize()
        times.append(cp.cuda.get_elapsed_time(a, b))
    return statistics.median(times)
