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


def probe_args(argv, out: str, reps: int) -> tuple:
    """A gradient-pass probe's arguments [OUT.jsonl] [rounds] [reps] [models] [dtypes]: (out, rounds (3), reps,
    models (gpt2-small, gpt2-medium), dtypes (bfloat16, float16)), the output file emptied (a row is appended as each
    model and type is measured: a stopped call keeps the finished ones)."""
    out = argv[0] if argv else out
    rounds = int(argv[1]) if len(argv) > 1 else 3
    reps = int(argv[2]) if len(argv) > 2 else reps
    models = (argv[3] if len(argv) > 3 else "gpt2-small,gpt2-medium").split(",")
    dtypes = (argv[4] if len(argv) > 4 else "bfloat16,float16").split(",")
    open(out, "w").close()
    return out, rounds, reps, models, dtypes


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


def energy_summary(e0_mj: int, e1_mj: int, wall_s: float, event_ms: float, calls: int, samples: list[dict]) -> dict:
    """One sustained window's figures: ms a call by the events, joules a call and mean watts by the card's energy
    counter (millijoules since the driver loaded, read before and after the window), the SM clock's median and range
    and the power's median over the samples taken inside it. A counter that went backwards or did not move (a
    driver that does not count) gives None for the energy figures, never a number."""
    import statistics as st
    moved = e1_mj - e0_mj
    joules = moved / 1000.0 if moved > 0 else None
    mhz = [s["sm_mhz"] for s in samples if s.get("sm_mhz") is not None]
    watts = [s["power_w"] for s in samples if s.get("power_w") is not None]
    return {"ms": event_ms / calls, "calls": calls, "wall_s": wall_s,
            "joules_a_call": joules / calls if joules is not None else None,
            "mean_w": joules / wall_s if joules is not None and wall_s > 0 else None,
            "sm_mhz": st.median(mhz) if mhz else None, "sm_mhz_range": [min(mhz), max(mhz)] if mhz else None,
            "power_w": st.median(watts) if watts else None, "samples": len(samples)}


def sustained(fn, seconds: float = 1.5, reps: int = 20, warm_s: float = 0.5, in_flight: int = 4) -> dict:
    """A call timed the way the training step runs it on a loaded card: at the clock the card holds under its power
    limit, not the boost clock a short burst gets. Calls back to back on the current stream for warm_s (the clock
    settles), then for `seconds` between two events, at most `in_flight` groups of `reps` calls queued, with the
    card's energy counter read before and after and its clock and power sampled every 20 ms (tr2.sysinfo's sampler).
    Eager, not a graph: the probes' cuBLAS forms launch on a stream fixed when they were made; for kernels of 20 us
    and more the host stays ahead. Why: the GPT-2 steps run at the H200's 700 W limit (docs/perf.md, twenty-first
    session), where a kernel's time follows its energy; a short burst at 1980 MHz ranks kernels by another measure."""
    import time

    import pynvml

    from tr2.sysinfo import GpuSampler

    pynvml.nvmlInit()
    handle = pynvml.nvmlDeviceGetHandleByIndex(0)
    marks = [cp.cuda.Event(disable_timing=True) for _ in range(in_flight)]

    def run_for(limit_s: float) -> int:
        n, t0 = 0, time.monotonic()
        while time.monotonic() - t0 < limit_s:
            if n >= in_flight:
                marks[n % in_flight].synchronize()   # keeps the queue short, so the window ends when it says
            for _ in range(reps):
                fn()
            marks[n % in_flight].record()
            n += 1
        return n

    run_for(warm_s)
    cp.cuda.runtime.deviceSynchronize()
    with GpuSampler(interval=0.02) as sampler:
        a, b = cp.cuda.Event(), cp.cuda.Event()
        e0, w0 = pynvml.nvmlDeviceGetTotalEnergyConsumption(handle), time.monotonic()
        a.record()
        groups = run_for(seconds)
        b.record()
        b.synchronize()
        e1, w1 = pynvml.nvmlDeviceGetTotalEnergyConsumption(handle), time.monotonic()
    return energy_summary(e0, e1, w1 - w0, cp.cuda.get_elapsed_time(a, b), groups * reps, sampler.samples)
