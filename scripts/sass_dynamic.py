"""Executed instructions and stall samples per SASS opcode, from Nsight Compute's source page
(`ncu -i REP --page source --csv --print-source sass`, gzipped or not): which instructions a kernel runs, not which
it holds (nvdisasm's static counts, results/cpu-checks-20261204, say only the latter).

    python scripts/sass_dynamic.py A.csv.gz [B.csv.gz ...] [--top N]
    python scripts/sass_dynamic.py A.csv.gz [B.csv.gz ...] --lines STG,STSM,UTMASTG
    python scripts/sass_dynamic.py A.csv.gz [B.csv.gz ...] --hot N

The second form lists, for the instructions whose mnemonic (modifiers kept) starts with one of the prefixes, how
many lines execute how many times each: where in the kernel (a loop, a once-an-item epilogue) they sit.
The third lists the N lines with the most stall samples, in the kernel's order: each line's index, its instruction,
samples, executed count and its two largest stall reasons (where a kernel waits: a barrier's branch, a product's
wait).

    python scripts/sass_dynamic.py A.csv.gz [B.csv.gz ...] --runs PERCENT

The fourth cuts the kernel into runs of consecutive executed lines with one execution count (a line run once a warp
is the prologue or the end; a loop body's lines run once a warp and iteration) and lists, in the kernel's order,
those holding at least PERCENT of the stall samples: the lines, their count, samples, share, three largest reasons
and four most frequent opcodes. Where a kernel spends its waiting, phase by phase (the float32 dQ's prologue held a
third of its samples: docs/perf.md, fifty-first session).

Per file: the kernel, its executed warp instructions in all, then the N heaviest opcodes (the mnemonic without its
modifiers, so FFMA.FTZ counts as FFMA) with their executed count, share and the warp-stall samples on them; then the
samples by stall reason.
"""
from __future__ import annotations

import csv
import gzip
import io
import pathlib
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


def _reasons(r) -> Counter:
    """A source-page row's stall samples by reason (the Not Issued columns left out)."""
    return Counter({k[len("stall_"):]: int(v or 0) for k, v in r.items()
                    if k and k.startswith("stall_") and "(Not Issued)" not in k})


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
        reasons += _reasons(r)
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


def hot_lines(path: str, n: int) -> list[tuple]:
    """(line index, instruction, samples, executed, [(reason, samples), two largest]) of the n lines with the most
    stall samples, in the kernel's order."""
    _, rows = read(path)
    samples = [int(r["Warp Stall Sampling (All Samples)"] or 0) for r in rows]
    top = sorted(sorted(range(len(rows)), key=lambda i: -samples[i])[:n])
    out = []
    for i in top:
        r = rows[i]
        out.append((i, " ".join(r["Source"].split()), samples[i], int(r["Instructions Executed"] or 0),
                    [kv for kv in _reasons(r).most_common(2) if kv[1]]))
    return out


def runs(path: str) -> list[dict]:
    """Runs of consecutive executed lines with one execution count, in the kernel's order (lines never executed
    skipped, not breaking a run): first and last line index, executed count a line, lines, samples, reasons
    (Counter), opcodes (Counter)."""
    _, rows = read(path)
    out = []
    for i, r in enumerate(rows):
        n = int(r["Instructions Executed"] or 0)
        if not n:
            continue
        if not out or out[-1]["executed"] != n:
            out.append({"first": i, "last": i, "executed": n, "lines": 0, "samples": 0, "reasons": Counter(),
                        "opcodes": Counter()})
        run = out[-1]
        run["last"], run["lines"] = i, run["lines"] + 1
        run["samples"] += int(r["Warp Stall Sampling (All Samples)"] or 0)
        run["reasons"] += _reasons(r)
        run["opcodes"][opcode(r["Source"])] += 1
    return out


def _whole_at_least_1(text: str):
    return int(text) if text.isdigit() and int(text) >= 1 else None


def _percent(text: str):
    try:
        x = float(text)
    except ValueError:
        return None
    return x if 0 <= x <= 100 else None


def _prefixes(text: str):
    parts = text.split(",")
    return parts if all(parts) else None


# Each option: what its value is, and its reading (None where the value is not allowed). One option at most a call.
OPTIONS = {"--top": ("N, the heaviest opcodes listed (a whole number, 1 or more; default 25)", _whole_at_least_1),
           "--lines": ("PREFIXES, mnemonic prefixes joined by commas (STG,STSM)", _prefixes),
           "--hot": ("N, the lines with the most stall samples (a whole number, 1 or more)", _whole_at_least_1),
           "--runs": ("PERCENT, the least share of the samples a run listed holds (a number from 0 to 100)",
                      _percent)}


class UsageError(ValueError):
    pass


def parse(argv) -> tuple[str, object, list[str]]:
    """argv -> (option, its value as read, the files); ("--top", 25) where no option is given. Refuses, naming the
    argument, its value and what is allowed: an unknown option, two options, an option without its value, a value of
    the wrong kind, no file, a file that is not there."""
    option, value, files = "--top", 25, []
    given = None
    i = 0
    while i < len(argv):
        a = argv[i]
        if not a.startswith("-"):
            files.append(a)
            i += 1
            continue
        if a not in OPTIONS:
            raise UsageError(f"unknown option {a!r}: allowed are {', '.join(OPTIONS)} (and -h for help)")
        if given is not None:
            raise UsageError(f"{a!r} given after {given!r}: one option a call")
        what, reading = OPTIONS[a]
        if i + 1 >= len(argv):
            raise UsageError(f"{a} needs a value: {what}")
        value = reading(argv[i + 1])
        if value is None:
            raise UsageError(f"{a} {argv[i + 1]!r}: the value is {what}")
        option = given = a
        i += 2
    if not files:
        raise UsageError("no source page given (ncu -i REP --page source --csv --print-source sass, gzipped or not)")
    missing = [f for f in files if not pathlib.Path(f).is_file()]
    if missing:
        raise UsageError(f"no such file: {', '.join(missing)}")
    return option, value, files


def main(argv) -> int:
    if any(a in ("-h", "--help") for a in argv):
        print(__doc__)
        return 0
    try:
        option, value, files = parse(argv)
    except UsageError as e:
        print(f"sass_dynamic.py: {e}", file=sys.stderr)
        return 2
    if option == "--runs":
        least = value
        for path in files:
            kernel, _ = read(path)
            found = runs(path)
            total = sum(run["samples"] for run in found)
            print(f"{kernel}: {total:,} stall samples in {len(found)} runs of lines; those with {least:g}% or more:")
            for run in found:
                if run["samples"] < least / 100 * total:
                    continue
                why = ", ".join(f"{k} {v}" for k, v in run["reasons"].most_common(3) if v)
                ops = " ".join(f"{k} {v}" for k, v in run["opcodes"].most_common(4))
                print(f"  lines {run['first']:5d}-{run['last']:5d} executed {run['executed']:7d} a line, {run['lines']:4d} "
                      f"lines, {run['samples']:6d} samples ({run['samples'] / max(total, 1):5.1%}): {why} | {ops}")
        return 0
    if option == "--hot":
        n = value
        for path in files:
            kernel, rows = read(path)
            total = sum(int(r["Warp Stall Sampling (All Samples)"] or 0) for r in rows)
            print(f"{kernel}: {total:,} stall samples")
            for k, source, smp, ex, reasons in hot_lines(path, n):
                why = ", ".join(f"{name} {v}" for name, v in reasons)
                print(f"  {k:5d} {source[:60]:60} {smp:6d} ({smp / max(total, 1):4.0%}) executed {ex:8d}  {why}")
        return 0
    if option == "--lines":
        prefixes = value
        for path in files:
            print(read(path)[0])
            for op, n, k in lines_by_count(path, prefixes):
                print(f"  {op:16} executed {n:6d} times a line, {k:3d} lines")
        return 0
    for path in files:
        summarize(path, value)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
