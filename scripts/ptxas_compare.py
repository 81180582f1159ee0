"""Two outputs of scripts/ptxas_usage.py side by side: the kernels whose registers or spills differ, and those
new or gone (a change that should leave a file's register budget alone, shown to).

    python3 scripts/ptxas_compare.py BEFORE.txt AFTER.txt
"""
from __future__ import annotations

import re
import sys


def usage(path: str) -> dict[str, dict]:
    """kernel -> {'registers': n, 'spills': (stores, loads)} from ptxas_usage.py's lines."""
    out: dict[str, dict] = {}
    for line in open(path):
        m = re.match(r"(\S+)\s+(.*)", line.strip())
        if not m:
            continue
        kernel, rest = m.groups()
        regs = re.search(r"Used (\d+) registers", rest)
        spills = re.search(r"(\d+) bytes spill stores, (\d+) bytes spill loads", rest)
        if regs:
            out.setdefault(kernel, {})["registers"] = int(regs.group(1))
        if spills:
            out.setdefault(kernel, {})["spills"] = (int(spills.group(1)), int(spills.group(2)))
    return out


def main(argv) -> int:
    if len(argv) != 2:
        print(__doc__.strip(), file=sys.stderr)
        return 2
    before, after = usage(argv[0]), usage(argv[1])
    both = [k for k in after if k in before]
    print(f"before {len(before)} kernels, after {len(after)}, in both {len(both)}; "
          f"new: {sorted(set(after) - set(before))}; gone: {sorted(set(before) - set(after))}")
    differ = [k for k in both if before[k] != after[k]]
    print(f"{len(differ)} differ in registers or spills")
    for k in differ:
        print(f"  {k}: {before[k]} -> {after[k]}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
