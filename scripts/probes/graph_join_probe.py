"""What a captured CUDA graph pays for a memset node between two kernels, against a kernel doing the memset's work,
against the memset on a branch joined before the second kernel (TR2_MEMSET_EARLY's form), and against the memset on
a branch nothing waits on until the capture's end: the time a
replay takes per pair of kernels, each mode captured as REPS repetitions in one graph, medians of ROUNDS replays.

    python3 scripts/probes/graph_join_probe.py [REPS] [ROUNDS]

Why: the thirty-eighth session's trace of gpt2-small bf16 (results/h200-perf-20261205d) has our kernel -> product
gaps of 0.35 µs but memset -> product gaps of 2.9 µs, and with the memsets moved off the chain (value 2) the
product waits as long after the kernel before it: the dependency on a memset node, in line or joined from a branch,
looks like the cost, not the memset.
"""
from __future__ import annotations

import statistics
import sys

SRC = r'''
extern "C" __global__ void work(float* x, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) { float v = x[i]; for (int j = 0; j < 64; j++) v = v * 1.0001f + 0.5f; x[i] = v; }
}
extern "C" __global__ void zero4(unsigned* p) { if (threadIdx.x == 0 && blockIdx.x == 0) *p = 0u; }
'''


def main(argv) -> int:
    try:
        reps = int(argv[0]) if argv else 200
        rounds = int(argv[1]) if len(argv) > 1 else 7
        if reps < 1 or rounds < 1 or len(argv) > 2:
            raise ValueError
    except ValueError:
        print(f"graph_join_probe.py: arguments {' '.join(argv)!r}; allowed: [REPS] [ROUNDS], whole numbers from 1",
              file=sys.stderr)
        return 2
    import cupy as cp   # the GPU's: after the arguments, so that a mistyped one says so on any machine
    import numpy as np
    mod = cp.RawModule(code=SRC)
    work, zero4 = mod.get_function("work"), mod.get_function("zero4")
    n = 132 * 4 * 256                     # one wave of short blocks: the kernel itself a few µs
    x = cp.zeros(n, cp.float32)
    ws = cp.zeros(256, cp.uint8)
    s, side = cp.cuda.Stream(non_blocking=True), cp.cuda.Stream(non_blocking=True)

    def k():
        work((n // 256,), (256,), (x, np.int32(n)), stream=s)

    def capture(mode):
        s.begin_capture()
        for _ in range(reps):
            if mode in ("branch", "leaf"):      # the memset forked before the first kernel: joined before the second
                # (branch), or only once at the capture's end (leaf: nothing waits on it)
                e = cp.cuda.Event(disable_timing=True)
                e.record(s)
                side.wait_event(e)
                cp.cuda.runtime.memsetAsync(ws.data.ptr, 0, 4, side.ptr)
                j = cp.cuda.Event(disable_timing=True)
                j.record(side)
            k()
            if mode == "memset":
                cp.cuda.runtime.memsetAsync(ws.data.ptr, 0, 4, s.ptr)
            elif mode == "kernel":
                zero4((1,), (32,), (ws,), stream=s)
            elif mode == "branch":
                s.wait_event(j)
            k()
        if mode == "leaf":
            s.wait_event(j)
        return s.end_capture()

    modes = ["none", "memset", "kernel", "branch", "leaf"]
    graphs = {m: capture(m) for m in modes}
    for g in graphs.values():
        g.launch(s)
    s.synchronize()
    times = {m: [] for m in modes}
    for r in range(rounds):
        for m in modes[r % len(modes):] + modes[:r % len(modes)]:
            a, b = cp.cuda.Event(), cp.cuda.Event()
            a.record(s)
            graphs[m].launch(s)
            b.record(s)
            b.synchronize()
            times[m].append(cp.cuda.get_elapsed_time(a, b) * 1000 / reps)
    base = statistics.median(times["none"])
    print(f"graph of {reps} pairs of kernels, median of {rounds} replays, µs a pair")
    for m in modes:
        t = statistics.median(times[m])
        print(f"{m:>7}: {t:8.2f}  ({t - base:+.2f} against none)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
