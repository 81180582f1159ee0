"""Where the GPU stands idle in a profiled window: the gaps between one kernel (or copy, or memset) and the next in a
Chrome trace of tr2.profile_run --trace, summed a step and grouped by the pair of kernels around them.

    python3 scripts/trace_gaps.py TRACE.json STEPS [TOP]
    python3 scripts/trace_gaps.py --memsets TRACE.json[.gz] STEPS
    python3 scripts/trace_gaps.py --starts TRACE.json[.gz] STEPS

The second form: what cuBLAS's memsets before its products cost (gpu/memsets.py), each memset's wait from the end of
the activity before it to the start of the one after it (the product), apart for memsets after one of our kernels and
after another product, beside the median gap between two kernels.
The third form: when each replay of the step's graph starts, the time from its last input copy (host to device) to
the first kernel after it, the replays right after a loss read (a device-to-host copy) apart, and the host's
cudaGraphLaunch calls (gpu/memsets.py's value 4 is judged by the first: a graph that waits for its whole launch
starts hundreds of µs after a loss read).

Why: a step's time by the outside clock exceeds its kernels' sum (gpt2-small bf16, call 2-4 of
results/h200-perf-20261204: ours 16.26 ms a step against 15.29 ms of kernels, PyTorch's 19.12 against 18.41), and
which boundaries that time sits at decides what can shrink it: one long gap a step (the host, the graph's launch) or
a small one at every kernel boundary (launch latency, a dependency the next kernel's prologue cannot overlap).
Overlapping events (two streams) count as busy while any runs.
"""
from __future__ import annotations

import gzip
import json
import statistics
import sys
from collections import defaultdict

GPU_CATS = ("kernel", "gpu_memcpy", "gpu_memset")


def gpu_activities(trace: dict) -> list[tuple[float, float, str, str]]:
    """(start µs, end µs, name, category) of the trace's GPU activities, by start."""
    return sorted((float(e["ts"]), float(e["ts"]) + float(e.get("dur", 0.0)), e.get("name", "?"), e["cat"])
                  for e in trace.get("traceEvents", []) if e.get("ph") == "X" and e.get("cat") in GPU_CATS)


def gpu_events(trace: dict) -> list[tuple[float, float, str]]:
    """(start µs, end µs, name) of the trace's GPU activities, by start."""
    return [a[:3] for a in gpu_activities(trace)]


def gaps(events: list[tuple[float, float, str]]) -> tuple[float, float, list[tuple[float, str, str]]]:
    """(span µs, busy µs, [(gap µs, the name before, the name after)]) over events sorted by start: a gap is time
    no event covers between the first start and the last end."""
    if not events:
        return 0.0, 0.0, []
    out, busy = [], 0.0
    cur_start, cur_end, cur_name = events[0]
    for s, e, n in events[1:]:
        if s > cur_end:
            busy += cur_end - cur_start
            out.append((s - cur_end, cur_name, n))
            cur_start, cur_end, cur_name = s, e, n
        elif e > cur_end:
            cur_end, cur_name = e, n
    busy += cur_end - cur_start
    return cur_end - events[0][0], busy, out


def short(name: str, width: int = 48) -> str:
    return name if len(name) <= width else name[:width - 3] + "..."


def report(trace: dict, steps: int, top: int = 20) -> str:
    span, busy, gs = gaps(gpu_events(trace))
    lines = [f"span {span / steps:9.1f} us a step, kernels busy {busy / steps:9.1f}, idle {(span - busy) / steps:8.1f} "
             f"({len(gs) / steps:.1f} gaps a step; {steps} steps)"]
    for lo, hi in ((0, 2), (2, 4), (4, 8), (8, 20), (20, 100), (100, float("inf"))):
        sel = [g for g, _, _ in gs if lo <= g < hi]
        lines.append(f"  gaps {lo:>5}-{hi:<5} us: {len(sel) / steps:7.1f} a step, {sum(sel) / steps:8.1f} us a step")
    pairs: dict = defaultdict(lambda: [0.0, 0])
    for g, a, b in gs:
        pairs[(a, b)][0] += g
        pairs[(a, b)][1] += 1
    lines.append(f"the {top} pairs with the most idle time (us a step, gaps a step, mean us):")
    for (a, b), (t, n) in sorted(pairs.items(), key=lambda kv: -kv[1][0])[:top]:
        lines.append(f"  {t / steps:8.1f} {n / steps:5.1f} {t / n:6.1f}  {short(a)} -> {short(b)}")
    return "\n".join(lines)


PRODUCT_PREFIXES = ("nvjet", "sm90_xmma", "cutlass", "ampere_", "sm80_xmma")


def is_product(name: str) -> bool:
    """Whether a kernel is one of cuBLAS's products (the names its Hopper and Ampere kernels go by)."""
    return name.startswith(PRODUCT_PREFIXES)


def memset_waits(trace: dict) -> dict:
    """For each memset between two activities: the time from the end of the one before to the start of the one after,
    grouped 'after a product' / 'after another kernel'; and the median gap between two kernels that follow each other.
    Returns {group: [waits µs]} with the key 'kernel -> kernel' holding those gaps."""
    ev = gpu_activities(trace)
    out: dict = {"after a product": [], "after another kernel": [], "kernel -> kernel": []}
    for i in range(1, len(ev)):
        before, this = ev[i - 1], ev[i]
        if this[3] == "gpu_memset" and i + 1 < len(ev) and before[3] == "kernel":
            group = "after a product" if is_product(before[2]) else "after another kernel"
            out[group].append(ev[i + 1][0] - before[1])
        elif this[3] == "kernel" and before[3] == "kernel":
            out["kernel -> kernel"].append(this[0] - before[1])
    return out


def memset_report(trace: dict, steps: int) -> str:
    waits = memset_waits(trace)
    between = waits.pop("kernel -> kernel")
    median = statistics.median(between) if between else 0.0
    lines = [f"median gap kernel -> kernel {median:.2f} us ({len(between) / steps:.1f} a step; {steps} steps)"]
    for group, ws in waits.items():
        if ws:
            lines.append(f"memsets {group}: {len(ws) / steps:.1f} a step, {sum(ws) / len(ws):.2f} us each from the "
                         f"activity before to the one after, {sum(ws) / steps:.1f} us a step; less a kernel -> "
                         f"kernel gap each: {(sum(ws) - median * len(ws)) / steps:.1f} us a step")
    return "\n".join(lines)


def replay_starts(trace: dict) -> dict:
    """{'after a loss read': [µs], 'launched ahead': [µs], 'graph launch': [µs]}: for each run of host-to-device copies
    (a replay's inputs), the time from the last copy's end to the next kernel's start, grouped by whether a
    device-to-host copy (the loss read) came before the copies since the last kernel; and the durations of the host's
    cudaGraphLaunch calls."""
    ev = gpu_activities(trace)
    out: dict = {"after a loss read": [], "launched ahead": [], "graph launch": []}
    read = False
    for i, (start, end, name, cat) in enumerate(ev):
        if cat == "gpu_memcpy" and "DtoH" in name:
            read = True
        elif cat == "gpu_memcpy" and "HtoD" in name:
            nxt = ev[i + 1] if i + 1 < len(ev) else None
            if nxt is not None and nxt[3] == "kernel":
                out["after a loss read" if read else "launched ahead"].append(nxt[0] - end)
                read = False
    out["graph launch"] = [float(e.get("dur", 0.0)) for e in trace.get("traceEvents", [])
                           if e.get("ph") == "X" and e.get("name") == "cudaGraphLaunch"]
    return out


def starts_report(trace: dict, steps: int) -> str:
    lines = []
    for group, ws in replay_starts(trace).items():
        what = "the host's calls" if group == "graph launch" else "first kernel after the input copy"
        if ws:
            lines.append(f"{group}: {len(ws)} ({what}), median {statistics.median(ws):.1f} us, min {min(ws):.1f}, "
                         f"max {max(ws):.1f}, {sum(ws) / steps:.1f} us a step; each: "
                         + " ".join(f"{w:.1f}" for w in ws))
        else:
            lines.append(f"{group}: none")
    return "\n".join(lines)


def _load(path: str) -> dict:
    with (gzip.open(path, "rt") if path.endswith(".gz") else open(path)) as f:
        return json.load(f)


def _positive(name: str, text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise ValueError(f"{name} {text!r}: allowed is a whole number of at least 1")
    return value


def main(argv) -> int:
    form = argv[0] if argv[:1] in (["--memsets"], ["--starts"]) else None
    args = argv[1:] if form else argv
    if len(args) not in ((2,) if form else (2, 3)) or args[0].startswith("--"):
        print("\n".join(line.strip() for line in __doc__.splitlines() if line.strip().startswith("python3")), file=sys.stderr)
        return 2
    try:
        steps = _positive("STEPS", args[1])
        top = _positive("TOP", args[2]) if len(args) > 2 else 20
        trace = _load(args[0])
    except (OSError, ValueError, EOFError) as e:   # json's and gzip's errors are ValueError and OSError kinds
        print(f"trace_gaps: {e}", file=sys.stderr)
        return 2
    if form == "--memsets":
        print(memset_report(trace, steps))
    elif form == "--starts":
        print(starts_report(trace, steps))
    else:
        print(report(trace, steps, top))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
