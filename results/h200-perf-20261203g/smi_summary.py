"""The figures README.md and docs/perf.md quote from calls 6 and 7's nvidia-smi samples (100 ms), read again here:
python3 results/h200-perf-20261203g/smi_summary.py > results/h200-perf-20261203g/smi_summary.txt"""
import collections
import csv
import statistics
from pathlib import Path

HERE = Path(__file__).resolve().parent
for call in ("call6-062562a", "call7-062562a"):
    rows = [r for r in list(csv.reader(open(HERE / call / "smi.csv")))[1:] if len(r) > 5]
    mhz = [int(r[1].split()[0]) for r in rows]
    watts = [float(r[3].split()[0]) for r in rows]
    busy = [(m, w, r[5].strip()) for m, w, r in zip(mhz, watts, rows) if w > 300]
    print(f"{call}: {len(rows)} samples, power max {max(watts):.2f} W; samples at >= 1900 MHz: "
          f"{sum(m >= 1900 for m in mhz)}")
    if busy:
        print(f"  above 300 W: {len(busy)} samples, SM clock median {statistics.median(m for m, _, _ in busy):.0f} MHz, "
              f"min {min(m for m, _, _ in busy)}; clock event reasons {dict(collections.Counter(c for _, _, c in busy))}")
