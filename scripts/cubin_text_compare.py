"""Each kernel's machine code in two cubins compared byte for byte: the .text.<kernel> sections that `readelf -S -W`
lists, read from the files by offset and size. No CUDA toolkit needed (cuobjdump is not always at hand); the
sections hold the encoded instructions, so equal bytes are equal SASS.

    python3 scripts/cubin_text_compare.py BEFORE.cubin AFTER.cubin
"""
from __future__ import annotations

import re
import subprocess
import sys

_SECTION = re.compile(r"\s*\[\s*\d+\]\s+(\.text\.\S+)\s+\S+\s+[0-9a-f]+\s+([0-9a-f]+)\s+([0-9a-f]+)")


def text_sections(path: str) -> dict[str, bytes]:
    listing = subprocess.run(["readelf", "-S", "-W", path], capture_output=True, text=True, check=True).stdout
    data = open(path, "rb").read()
    out = {}
    for line in listing.splitlines():
        m = _SECTION.match(line)
        if m:
            off, size = int(m.group(2), 16), int(m.group(3), 16)
            out[m.group(1)[len(".text."):]] = data[off:off + size]
    return out


def main(argv=None) -> int:
    before, after = (text_sections(p) for p in (argv or sys.argv[1:3]))
    common = [k for k in before if k in after]
    differ = [k for k in common if before[k] != after[k]]
    print(f"before {len(before)} kernels, after {len(after)}: {len(common) - len(differ)} identical "
          f"({sum(len(before[k]) for k in common if k not in differ)} bytes), {len(differ)} differing, "
          f"{len(before) - len(common)} gone, {len(after) - len(common)} new")
    for k in differ:
        print(f"DIFFERS {k} {len(before[k])} -> {len(after[k])} bytes")
    for k in before:
        if k not in after:
            print(f"GONE    {k}")
    for k in after:
        if k not in before:
            print(f"NEW     {k} {len(after[k])} bytes")
    return 1 if differ else 0


if __name__ == "__main__":
    raise SystemExit(main())
