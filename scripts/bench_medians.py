"""Medians of every bench run under a results folder: one line a model, type and configuration, with each run's
call and time beside, and the ratio to the same model and type's fastest torch mode.

    python3 scripts/bench_medians.py results/h200-perf-20261202d [> summary.txt]

Reads each call's bench.jsonl (scripts/device_bench.py's records; a folder's call number is the digits after
"call" in its first path part). A failed run counts as a run with no time: it is listed, not in the median.
"""
import collections
import re
import statistics
import sys
from pathlib import Path

from tr2.results import read_jsonl


def configuration(r: dict) -> str:
    """cupy-graph@LIB, cupy-eager, torch-MODE: the names device_bench.py's table uses."""
    how = r.get("mode") or ("graph" if r.get("cuda_graph") else "eager")
    return f"{r['side']}-{how}" + (f"@{r['lib']}" if r.get("lib") else "")


def collect(folder: Path) -> dict:
    runs = collections.defaultdict(list)
    for f in sorted(folder.glob("**/bench.jsonl")):
        call = re.sub(r"\D", "", f.relative_to(folder).parts[0].split("-")[0]) or "?"
        for r in read_jsonl(f):   # a torn last line (a call stopped mid-write) is left out
            ms = r.get("step_ms") if r.get("status") == "ok" else None
            runs[(r["model"], r["dtype"], configuration(r))].append((call, ms, r.get("peak_bytes")))
    return runs


def table(runs: dict) -> list:
    medians = {k: statistics.median([ms for _, ms, _ in v if ms]) for k, v in runs.items() if any(ms for _, ms, _ in v)}
    lines = [f"{'model':12s} {'type':9s} {'configuration':24s} {'median ms':>10s} {'n':>2s} {'/torch':>7s} "
             f"{'peak GB':>8s}  runs (call: ms)"]
    for k in sorted(runs):
        torch = [m for (mo, dt, c), m in medians.items() if (mo, dt) == k[:2] and c.startswith("torch-")]
        med = medians.get(k)
        ratio = f"{med / min(torch):7.3f}" if med and torch and k[2].startswith("cupy") else f"{'-':>7s}"
        peaks = sorted({p for _, _, p in runs[k] if p})
        lines.append(f"{k[0]:12s} {k[1]:9s} {k[2]:24s} {med if med else float('nan'):10.3f} "
                     f"{sum(1 for _, ms, _ in runs[k] if ms):2d} {ratio} "
                     f"{(peaks[-1] / 1e9 if peaks else float('nan')):8.3f}  "
                     + " ".join(f"{c}:{ms:.3f}" if ms else f"{c}:failed" for c, ms, _ in runs[k]))
    return lines


if __name__ == "__main__":
    if len(sys.argv) != 2 or not Path(sys.argv[1]).is_dir():
        sys.exit("usage: python3 scripts/bench_medians.py RESULTS_FOLDER (a folder holding calls' bench.jsonl)")
    print("\n".join(table(collect(Path(sys.argv[1])))))
