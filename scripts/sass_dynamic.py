"""Executed instructions and stall samples per SASS opcode, from Nsight Compute's source page
(`ncu -i REP --page source --csv --print-source sass`, gzipped or not): which instructions a kernel runs, not which
it holds (nvdisasm's static counts, results/cpu-checks-20261204, say only the latter).

    python scripts/sass_dynamic.py A.csv.gz [B.csv.gz ...] [--top N]
    python scripts/sass_dynamic.py A.csv.gz [B.csv.gz ...] --lines STG,STSM,UTMASTG

The second form lists, for the instructions whose mnemonic (modifiers kept) starts with one of the prefixes, how
many lines execute how many times each: where in the kernel (a loop, a once-an-item epilogue) they sit.

Per file: the kernel, its executed warp instructions in all, then the N heaviest opcodes (the mnemonic without its
modifiers, so FFMA.FTZ counts as FFMA) with their executed count, share and the warp-stall samples on them; then the
samples by stall reason.
"""
from __future__ import annotations

import csv
import gzip
import io
import sys
from collections import Counter


def read(path: str):
    raw = gzip.open(path, "rt") if path.endswith(".gz") else open(path)
    with raw as f:
        lines = f.read().splitlines()
    kernel = next(csv.reader([lines[0]]))[1]
    rows = list(csv.DictReader(io.StringIO("\n".join(lines[1:]))))
    return kernel, rows


def mnemonic(source: str) -> str:
    """The instruction's mnemonic with its modifiers (FFMA.FTZ), its predicate guard left out."""
    words = source.split()
    if words and words[0].startswith("@"):
        words = words[1:]
    return words[0] if words else "?"


def opcode(source: str) -> str:
    return mnemonic(source).split(".")[0]


def summarize(path: str, top: int) -> None:
    kernel, rows = read(path)
    executed, stalls = Counter(), Counter()
    for r in rows:
        op = opcode(r["Source"])
        executed[op] += int(r["Instructions Executed"] or 0)
        stalls[op] += int(r["Warp Stall Sampling (All Samples)"] or 0)
    total, samples = sum(executed.values()), sum(stalls.values())
    print(f"{kernel}: {total:,} warp instructions executed, {samples:,} stall samples, {len(rows)} SASS lines")
    print(f"  {'opcode':<10} {'executed':>12} {'share':>7} {'samples':>8} {'share':>7}")
    for op, n in executed.most_common(top):
        print(f"  {op:<10} {n:>12,} {n / total:>7.1%} {stalls[op]:>8,} {stalls[op] / max(samples, 1):>7.1%}")
    reasons = Counter()
    for r in rows:
        for key, value in r.items():
            if key and key.startswith("stall_") and "(Not Issued)" not in key:
                reasons[key[len("stall_"):]] += int(value or 0)
    print("  stall samples by reason: " + ", ".join(
        f"{k} {v:,} ({v / max(samples, 1):.0%})" for k, v in reasons.most_common(8) if v))


def lines_by_count(path: str, prefixes: list[str]) -> list[tuple[str, int, int]]:
    """(mnemonic, executed count a line, lines) for the executed lines whose mnemonic starts with a prefix, the
    heaviest first."""
    _, rows = read(path)
    found = Counter()
    for r in rows:
        n = int(r["Instructions Executed"] or 0)
        op = mnemonic(r["Source"])
        if n and any(op.startswith(p) for p in prefixes):
            found[(op, n)] += 1
    return [(op, n, k) for (op, n), k in sorted(found.items(), key=lambda kv: -kv[0][1] * kv[1])]


def main(argv) -> int:
    if "--lines" in argv:
        i = argv.index("--lines")
        prefixes = argv[i + 1].split(",")
        for path in argv[:i] + argv[i + 2:]:
            print(read(path)[0])
            for op, n, k in lines_by_count(path, prefixes):
                print(f"  {op:16} executed {n:6d} times a line, {k:3d} lines")
        return 0
    top = 25
    if "--top" in argv:
        i = argv.index("--top")
        top = int(argv[i + 1])
        argv = argv[:i] + argv[i + 2:]
    for path in argv:
        summarize(path, top)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
