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


def graph_ms(fn, reps: int) -> float:
    """ms a call with the host out of the way: `reps` calls recorded as one CUDA graph (gpu/graph.py's StepGraph: a
    stream and memory pool of its own, the same calls run eagerly first), replayed once untimed, then once between
    two events. The training step runs as such a graph. mean_ms charges a form for its host work a call (tensor maps
    encoded, extra launches) wherever the host falls behind the GPU; here only the GPU's time counts."""
    from tr2.cupy_side.gpu.graph import StepGraph

    def body():
        for _ in range(reps):
            fn()

    g = StepGraph(body)
    g.warmup()
    g.capture()
    g.replay()
    a, b = cp.cuda.Event(), cp.cuda.Event()
    a.record(g.stream)
    g.replay()
    b.record(g.stream)
    b.synchronize()
    ms = cp.cuda.get_elapsed_time(a, b) / reps
    g.graph = None
    g.pool.free_all_blocks()
    return ms


def ring_count(raw: str, key: str = "TR2_VARIANT_RING") -> int:
    """How many input buffers a variant script cycles through (the environment's `key`): 1 where unset, a value
    below 1 or not an integer stops the script naming it. One buffer replays the same inputs, which then sit in the
    L2 (60 MB on the H200, a GPT-2 layer's qkv 38-50 MB); a ring larger than the L2 makes every call read its inputs
    from memory, as the training step's reads mostly do."""
    if raw is None or raw.strip() == "":
        return 1
    try:
        n = int(raw.strip())
    except ValueError:
        n = 0
    if n < 1:
        raise SystemExit(f"{key}={raw!r}: allowed values are whole numbers from 1 (1: the same inputs every call)")
    return n


def cycling(call, buffers):
    """A call of no arguments that hands `call` the next of `buffers` each time, in order, round the ring: so that a
    CUDA graph recorded over `reps` calls reads them in turn."""
    state = {"i": 0}

    def next_call():
        buf = buffers[state["i"] % len(buffers)]
        state["i"] += 1
        return call(buf)
    return next_call


def timer(name: str):
    """TR2_VARIANT_TIMING's timer for the variant scripts: graph (default, graph_ms) or eager (mean_ms); a value
    outside them stops the script naming it."""
    if name not in ("graph", "eager"):
        raise SystemExit(f"TR2_VARIANT_TIMING={name!r}: allowed values are graph, eager")
    return graph_ms if name == "graph" else mean_ms
