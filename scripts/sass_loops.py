"""Where a kernel's instructions of some kinds sit relative to its loops, from cuobjdump's SASS: which loop (a
backward branch's span) holds the tensor-core products (HMMA) and which the local-memory spills (LDL/STL). Used to
check that a kernel compiled with two bodies (attention.cu's DROP) spills only in the one with dropout.

    cuobjdump -sass -fun KERNEL file.cubin | python scripts/sass_loops.py
"""
from __future__ import annotations

import re
import sys

KINDS = ("HMMA", "LDL", "STL", "MUFU", "SHFL")
LINE = re.compile(r"\s+/\*([0-9a-f]{4,})\*/\s+(?:@!?U?P[T0-9]\s+)?([A-Z][A-Z0-9_.]*)(.*?);")


def main() -> int:
    ins = [(int(m.group(1), 16), m.group(2), m.group(3)) for m in map(LINE.match, sys.stdin) if m]
    loops = []
    for addr, op, rest in ins:
        target = re.search(r"0x([0-9a-f]+)", rest) if op.startswith("BRA") else None
        if target and int(target.group(1), 16) < addr:
            loops.append((int(target.group(1), 16), addr))
    print(f"{len(ins)} instructions; loops (start, end, instructions): "
          + ", ".join(f"{i}: {a:#x}-{b:#x} ({(b - a) // 16})" for i, (a, b) in enumerate(loops)))
    for kind in KINDS:
        where: dict[tuple, int] = {}
        for addr, op, _ in ins:
            if op.startswith(kind):
                key = tuple(i for i, (a, b) in enumerate(loops) if a <= addr <= b)
                where[key] = where.get(key, 0) + 1
        print(f"{kind:5s} " + ", ".join(f"loops {list(k) or 'none'}: {n}" for k, n in sorted(where.items())))
    return 0


if __name__ == "__main__":
    sys.exit(main())
