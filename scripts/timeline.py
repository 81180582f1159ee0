"""Where a step's device time goes between kernels: the idle gaps of a Chrome trace (tr2.profile_run --trace).

    python scripts/timeline.py TRACE.json STEPS [--json OUT.json]

Reads the device events of the trace (kernels, memcpys, memsets: what CUPTI recorded, graph replays
included), sorts them by start, and reports per step: the events and their busy time (the union of their
intervals), the span from the first start to the last end, the idle time in between, the idle time by
gap size, by the kinds of the two events around each gap (ours = a CuPy kernel, cublas = nvjet/cutlass/
cublas, torch = aten/triton/cudnn, copy, memset), and the largest gaps with their neighbours' names.
A dev tool for docs/perf.md: it measures where the launch gaps are, it decides nothing.
"""
from __future__ import annotations

import json
import sys
from collections import defaultdict

GPU_CATS = ("kernel", "gpu_memcpy", "gpu_memset")
BUCKETS = (1.0, 2.0, 4.0, 8.0, 20.0, 100.0, float("inf"))   # upper edges, µs


def kind(name: str, cat: str) -> str:
    if cat == "gpu_memcpy":
        return "copy"
    if cat == "gpu_memset":
        return "memset"
    low = name.lower()
    if low.startswith(("nvjet", "cutlass", "sm90_xmma", "gemm")) or "cublas" in low or "gemv" in low:
        return "cublas"
    if low.startswith(("void at::", "at::", "triton", "cudnn", "void cudnn", "void at_cuda")) or "cudnn" in low:
        return "torch"
    return "ours"


def device_events(trace: dict) -> list[tuple[float, float, str, str]]:
    """(start µs, duration µs, name, kind) of every device event, by start."""
    evs = [(float(e["ts"]), float(e.get("dur", 0.0)), e.get("name", ""), kind(e.get("name", ""), e.get("cat", "")))
           for e in trace.get("traceEvents", []) if e.get("ph") == "X" and e.get("cat") in GPU_CATS]
    return sorted(evs)


def gaps(events, steps: int) -> dict:
    """The idle time between the events (overlaps count once), per step; see the module's docstring."""
    if not events:
        return {"events": 0}
    busy, idle = 0.0, 0.0
    by_bucket = defaultdict(float)
    by_count = defaultdict(int)
    by_pair = defaultdict(float)
    pair_count = defaultdict(int)
    largest = []
    end, prev = events[0][0], None
    for ts, dur, name, k in events:
        if ts > end:
            g = ts - end
            idle += g
            edge = next(b for b in BUCKETS if g <= b)
            by_bucket[edge] += g
            by_count[edge] += 1
            pair = f"{prev[3]}->{k}" if prev else f"start->{k}"
            by_pair[pair] += g
            pair_count[pair] += 1
            largest.append((g, prev[2] if prev else "", name))
            busy += dur
        else:
            busy += max(0.0, ts + dur - end)
        if ts + dur >= end:
            end, prev = ts + dur, (ts, dur, name, k)
    span = end - events[0][0]
    largest.sort(reverse=True)
    per = 1.0 / steps
    return {
        "steps": steps, "events_per_step": round(len(events) * per, 1),
        "span_us_per_step": round(span * per, 1), "busy_us_per_step": round(busy * per, 1),
        "idle_us_per_step": round(idle * per, 1),
        "idle_by_gap_us": {("<=%g" % b if b != float("inf") else ">100"): [round(by_bucket[b] * per, 1),
                                                                       round(by_count[b] * per, 1)]
                           for b in BUCKETS},
        "idle_by_pair_us": {p: [round(v * per, 1), round(pair_count[p] * per, 1)]
                            for p, v in sorted(by_pair.items(), key=lambda kv: -kv[1])},
        "largest": [[round(g, 1), a[:60], b[:60]] for g, a, b in largest[:12]],
    }


def table(r: dict) -> str:
    lines = [f"events/step {r['events_per_step']}  span {r['span_us_per_step']} us  busy {r['busy_us_per_step']}"
             f"  idle {r['idle_us_per_step']}  (per step, {r['steps']} steps)",
             "idle by gap size (us/step, gaps/step): " + ", ".join(f"{k}: {v[0]} ({v[1]})"
                                                                  for k, v in r["idle_by_gap_us"].items()),
             "idle by neighbours (us/step, gaps/step): " + ", ".join(f"{k}: {v[0]} ({v[1]})"
                                                                    for k, v in list(r["idle_by_pair_us"].items())[:8]),
             "largest gaps (us, before, after):"]
    lines += [f"  {g:8.1f}  {a}  ->  {b}" for g, a, b in r["largest"]]
    return "\n".join(lines)


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) not in (2, 4):
        sys.stderr.write(__doc__.split("\n\n")[1] + "\n")
        return 2
    with open(argv[0]) as f:
        r = gaps(device_events(json.load(f)), int(argv[1]))
    if r.get("events") == 0:
        print("no device events in the trace")
        return 1
    print(table(r))
    if len(argv) == 4 and argv[2] == "--json":
        with open(argv[3], "w") as f:
            json.dump(r, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
