"""How finely the card's energy counter resolves a short window: the evidence the joules rule needs (docs/perf.md,
twenty-eighth session: the series now reads the counter at the timed window's own iter lines, so a window's energy
no longer depends on the sampling interval, only on the counter's own resolution).

    python3 scripts/probes/energy_counter_probe.py OUT.json [seconds]

Under a steady load (bf16 products of 8192 x 8192 on a side thread, the queue kept full), the counter
(nvmlDeviceGetTotalEnergyConsumption, mJ) is read in a tight loop for `seconds` (default 8); every change is kept
with the host's monotonic time. Reported: how often it changes (the intervals between changes: median, 90th
percentile, max) and by how much; then, for windows of 0.5, 1, 1.3 (the char model's), 2, 3 and 4 s laid at every
change, the mean power of each window read from the counter at its two ends (as a marked window reads it) against
the mean over the whole run: the largest relative difference per window length. A steady load draws a steady
power, so that difference is what the counter's resolution (and the load's own wobble) costs a window of that
length. Prints a table, writes OUT.json. No GPU: one line, exit 2.
"""
from __future__ import annotations

import json
import statistics
import sys
import threading
import time

WINDOWS_S = (0.5, 1.0, 1.3, 2.0, 3.0, 4.0)


def changes(readings: list[tuple[float, int]]) -> list[tuple[float, int]]:
    """The readings at which the counter's value changed (the first reading kept as the start)."""
    out = readings[:1]
    for t, e in readings[1:]:
        if e != out[-1][1]:
            out.append((t, e))
    return out


def window_spread(points: list[tuple[float, int]], length_s: float) -> dict:
    """For windows of length_s starting at each change: the mean power from the counter at the window's ends (the
    last change at or before each end), against the whole run's mean; the largest and the median relative
    difference, and how many windows."""
    if len(points) < 2 or points[-1][0] - points[0][0] < length_s:
        return {"window_s": length_s, "windows": 0, "max_rel": None, "median_rel": None}
    whole = (points[-1][1] - points[0][1]) / 1000.0 / (points[-1][0] - points[0][0])

    def at(t):
        lo, hi = 0, len(points) - 1
        while lo < hi:   # the last change at or before t
            mid = (lo + hi + 1) // 2
            if points[mid][0] <= t:
                lo = mid
            else:
                hi = mid - 1
        return points[lo][1]
    rel = []
    for t0, _e in points:
        t1 = t0 + length_s
        if t1 > points[-1][0]:
            break
        rel.append(abs((at(t1) - at(t0)) / 1000.0 / length_s - whole) / whole)
    return {"window_s": length_s, "windows": len(rel), "max_rel": max(rel) if rel else None,
            "median_rel": statistics.median(rel) if rel else None, "whole_w": whole}


def main(argv) -> int:
    out = argv[0] if argv else "energy_counter.json"
    seconds = float(argv[1]) if len(argv) > 1 else 8.0
    try:
        import pynvml
        import torch
        pynvml.nvmlInit()
        h = pynvml.nvmlDeviceGetHandleByIndex(0)
        if not torch.cuda.is_available():
            raise RuntimeError("torch sees no CUDA device")
    except Exception as e:  # noqa: BLE001
        print(f"energy_counter_probe: no GPU to probe ({type(e).__name__}: {e})", file=sys.stderr)
        return 2
    a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    stop = threading.Event()

    def load():
        while not stop.is_set():
            for _ in range(20):
                torch.mm(a, b)
            torch.cuda.synchronize()
    th = threading.Thread(target=load, daemon=True)
    th.start()
    time.sleep(2.0)   # the clock and power settle under the load first
    readings = []
    t_end = time.monotonic() + seconds
    while (t := time.monotonic()) < t_end:
        readings.append((t, int(pynvml.nvmlDeviceGetTotalEnergyConsumption(h))))
    stop.set()
    th.join(timeout=10)
    pts = changes(readings)
    gaps = [b[0] - a[0] for a, b in zip(pts, pts[1:])]
    steps = [b[1] - a[1] for a, b in zip(pts, pts[1:])]
    q = statistics.quantiles(gaps, n=10) if len(gaps) >= 10 else [None] * 9
    result = {"seconds": seconds, "reads": len(readings), "changes": len(pts) - 1,
              "interval_s": {"median": statistics.median(gaps) if gaps else None, "p90": q[8],
                             "max": max(gaps) if gaps else None},
              "step_mj": {"median": statistics.median(steps) if steps else None, "max": max(steps) if steps else None},
              "windows": [window_spread(pts, w) for w in WINDOWS_S],
              "gpu": pynvml.nvmlDeviceGetName(h) if hasattr(pynvml, "nvmlDeviceGetName") else None}
    with open(out, "w") as fh:
        json.dump(result, fh, indent=1, default=str)
    print(f"reads {result['reads']} in {seconds:g} s, changes {result['changes']}: interval median "
          f"{result['interval_s']['median']} s, p90 {result['interval_s']['p90']}, max {result['interval_s']['max']}")
    for w in result["windows"]:
        print(f"window {w['window_s']:4.1f} s: {w['windows']:5d} windows, max rel {w['max_rel']}, median rel "
              f"{w['median_rel']}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
