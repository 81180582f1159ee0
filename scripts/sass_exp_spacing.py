"""Instructions between consecutive exponentials (MUFU.EX2) in one kernel's SASS, per run of them: how much
work each element of the softmax's recomputation costs. Reads `cuobjdump -sass -fun NAME CUBIN` text.
  usage: python scripts/sass_exp_spacing.py SASS.txt    -> one line per run: its length, median spacing, and its
  span over its exponentials (the compiler may group the exponentials, so the span is the fairer cost)"""
import re
import statistics
import sys


def instructions(text: str) -> list[str]:
    return [m.group(1) for m in re.finditer(r"^\s+/\*[0-9a-f]{4,5}\*/\s+(.*?)\s*;", text, re.M)]


def runs(ops: list[str], gap: int = 60) -> list[list[int]]:
    """The positions of MUFU.EX2, split where two lie more than `gap` instructions apart."""
    pos = [i for i, op in enumerate(ops) if "MUFU.EX2" in op]
    out = []
    for p in pos:
        if out and p - out[-1][-1] <= gap:
            out[-1].append(p)
        else:
            out.append([p])
    return out


if __name__ == "__main__":
    ops = instructions(open(sys.argv[1]).read())
    print(f"{len(ops)} instructions")
    for r in runs(ops):
        if len(r) > 1:
            d = [b - a for a, b in zip(r, r[1:])]
            print(f"run of {len(r):3d} exponentials at {r[0]:5d}: median {statistics.median(d):5.1f} instructions apart, "
                  f"{(r[-1] - r[0]) / (len(r) - 1):5.1f} an exponential over the run")
