"""The instruction mix of a kernel's loops that hold tensor-core products, from nvdisasm's listing of a whole cubin
(`nvdisasm -c FILE.cubin > FILE.sass`; nvdisasm from the `nvidia-cuda-nvdisasm` wheel runs without a GPU): for each
backward branch of KERNEL whose span holds at least MIN_HGMMA HGMMA instructions, the span's instruction count and
its counts of chosen opcodes. Static counts, what the compiler emitted; what runs how often needs Nsight Compute's
source view (scripts/sass_dynamic.py).

    python scripts/sass_loop_mix.py FILE.sass KERNEL [MIN_HGMMA]
"""
from __future__ import annotations

import collections
import re
import sys

OPCODES = ("HGMMA", "MUFU", "FFMA", "FADD", "FMUL", "FMNMX", "R2UR", "IMAD", "LOP3", "SHF", "VIADD", "IADD3",
           "UIADD3", "ISETP", "BAR", "SYNCS")
_LINE = re.compile(r"\s+/\*([0-9a-f]{4,})\*/\s+(@!?U?P[T0-9]\s+)?([A-Z][A-Z0-9_.]*)(.*?);")
_LABEL = re.compile(r"^(\.L_x_\d+):")


def instructions(lines: list[str], kernel: str):
    """(address, opcode, operands) of the kernel's section, and its labels' addresses."""
    start = next(i for i, line in enumerate(lines) if line.startswith(f".text.{kernel}:"))
    end = next((i for i in range(start + 1, len(lines)) if lines[i].startswith(".text.")), len(lines))
    ins, labels, pending = [], {}, []
    for line in lines[start:end]:
        label = _LABEL.match(line)
        if label:
            pending.append(label.group(1))
            continue
        m = _LINE.match(line)
        if m:
            addr = int(m.group(1), 16)
            labels.update((p, addr) for p in pending)
            pending = []
            ins.append((addr, m.group(3), m.group(4)))
    return ins, labels


def loops(ins, labels):
    """(start, end, opcode counts) of each backward branch's span."""
    for addr, op, rest in ins:
        target = re.search(r"\((\.L_x_\d+)\)", rest) if op.startswith("BRA") else None
        if target and labels.get(target.group(1), addr) < addr:
            start = labels[target.group(1)]
            ops = collections.Counter(o.split(".")[0] for a, o, _ in ins if start <= a <= addr)
            yield start, addr, ops


def main(argv) -> int:
    path, kernel = argv[0], argv[1]
    least = int(argv[2]) if len(argv) > 2 else 12
    with open(path) as f:
        ins, labels = instructions(f.read().split("\n"), kernel)
    print(f"{kernel}: {len(ins)} instructions")
    for start, end, ops in loops(ins, labels):
        if ops["HGMMA"] >= least:
            print(f"  loop {start:#x}-{end:#x}: {sum(ops.values())} instructions; "
                  + " ".join(f"{k} {ops[k]}" for k in OPCODES))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
