"""A kernel's main path through its loop, from cuobjdump's SASS: the instructions of its longest loop (a backward
branch's span) less the spans that predicated forward branches of more than MIN_SKIP instructions jump over (the
rarely taken ones: a group sent through the computing path, gelu.cu's fast kernels), and their opcodes counted. A
static count of the path the common case runs, for instructions an element before any device minute; what runs how
often needs Nsight Compute (scripts/sass_dynamic.py).

    cuobjdump -sass -fun KERNEL file.cubin | python scripts/sass_main_path.py [MIN_SKIP]
    (or: scripts/sass_cpu.sh FILE.cu KERNEL main_path)
"""
from __future__ import annotations

import re
import sys
from collections import Counter

LINE = re.compile(r"\s+/\*([0-9a-f]{4,})\*/\s+(@!?U?P[T0-9]\s+)?([A-Z][A-Z0-9_.]*)(.*?);")


def main(argv) -> int:
    min_skip = int(argv[0]) if argv else 40
    ins = [(int(m.group(1), 16), bool(m.group(2)), m.group(3), m.group(4)) for m in map(LINE.match, sys.stdin) if m]
    branches = []   # (address, target, predicated)
    for addr, guarded, op, rest in ins:
        target = re.search(r"0x([0-9a-f]+)", rest) if op.startswith("BRA") else None
        if target:
            branches.append((addr, int(target.group(1), 16), guarded))
    loops = [(t, a) for a, t, _ in branches if t < a]
    if not loops:
        print("no loop")
        return 1
    start, end = max(loops, key=lambda span: span[1] - span[0])
    body = [(addr, op) for addr, _, op, _ in ins if start <= addr <= end]
    skips = [(a, t) for a, t, guarded in branches if guarded and start <= a < t <= end and (t - a) // 16 > min_skip]
    main_path = [op for addr, op in body if not any(a < addr < t for a, t in skips)]
    counts = Counter(op.split(".")[0] for op in main_path)
    print(f"loop {start:#x}-{end:#x}: {len(body)} instructions; main path {len(main_path)} (less the spans "
          + (", ".join(f"{a:#x}-{t:#x}" for a, t in skips) or "none") + ")")
    print("  " + ", ".join(f"{op} {n}" for op, n in counts.most_common()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
