"""A kernel's float arithmetic as the compiler emitted it, from nvdisasm listings (`nvdisasm -c FILE.cubin >
FILE.sass`): the counts of FFMA, FADD and FMUL (modifiers kept apart from the opcode), and whether two kernels emit
the same sequence of them. Why: where ptxas contracts a multiply and an add into an FFMA decides the roundings, so a
kernel built to give another's bits is checked here on the CPU before any device time (docs/perf.md, twenty-seventh
session: moving w into shared memory changed the contractions and the bits of the LayerNorm backward). A filter, not a
proof (results/cpu-checks-20261204c/layernorm-bulk-float-ops.txt): counts far apart went with other bits, equal counts
with the same bits in all but one case (an extra FMUL); the sequence compares equal only where the schedule did not
move either (a change elsewhere in the file), and then the bits were the same. The GPU tests decide.

    python scripts/sass_float_ops.py A.sass KERNEL_A [B.sass KERNEL_B ...]
"""
from __future__ import annotations

import collections
import sys

from sass_loop_mix import instructions

FLOAT_OPS = ("FFMA", "FADD", "FMUL")


def float_ops(path: str, kernel: str) -> list[str]:
    """The kernel's float instructions (mnemonic with modifiers) in address order."""
    with open(path) as f:
        ins, _ = instructions(f.read().split("\n"), kernel)
    return [op for _, op, _ in ins if op.split(".")[0] in FLOAT_OPS]


def main(argv) -> int:
    if len(argv) < 2 or len(argv) % 2:
        print(__doc__.strip().splitlines()[-1], file=sys.stderr)
        return 2
    pairs = list(zip(argv[::2], argv[1::2]))
    first = None
    for path, kernel in pairs:
        seq = float_ops(path, kernel)
        counts = collections.Counter(op.split(".")[0] for op in seq)
        same = "" if first is None else f"  same sequence as the first: {'yes' if seq == first else 'no'}"
        print(f"{kernel} ({path}): " + " ".join(f"{k} {counts[k]}" for k in FLOAT_OPS) + same)
        first = seq if first is None else first
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
