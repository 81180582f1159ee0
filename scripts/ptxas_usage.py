"""ptxas's resource lines (registers, stack, spills) of one kernel file's functions, compiled here by NVRTC with the
options cubins.py uses, for the architecture given, and a line for each kernel whose wgmma ptxas serialized;
optionally with the source's text replaced first (a launch bound, a flag), to record what a variant would cost
without building it. Exit 3 where no NVRTC is found.

    TR2_NVRTC=.../libnvrtc.so.12 PYTHONPATH=lib python3 scripts/ptxas_usage.py attention.cu sm_90a \
        [--only REGEX] [--keep REGEX] [--kernels DIR] [--replace OLD NEW ...]
"""
from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

from tr2.cupy_side import gpu
from tr2.cupy_side.gpu import cubins, load_source


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("file")
    ap.add_argument("arch")
    ap.add_argument("--only", default=".", help="print the functions whose names match this regex")
    ap.add_argument("--replace", nargs=2, action="append", default=[], metavar=("OLD", "NEW"))
    ap.add_argument("--kernels", default=None, help="read the kernel sources from this folder (another commit's "
                    "lib/tr2/cupy_side/kernels) instead of this lib's")
    ap.add_argument("--keep", default=None, help="drop the instantiation lines (an upper-case macro called at the "
                    "start of a line) that do not match this regex: a quicker compile of the kernels asked for")
    a = ap.parse_args(argv)
    if a.kernels:
        gpu.KERNELS_DIR = Path(a.kernels)
    src = load_source(a.file)
    for old, new in a.replace:
        if old not in src:
            print(f"--replace: {old!r} not in {a.file}", file=sys.stderr)
            return 2
        src = src.replace(old, new)
    if a.keep:
        src = "\n".join(line for line in src.splitlines()
                        if not re.match(r"^[A-Z][A-Z0-9_]*\(.*\)\s*$", line) or re.search(a.keep, line))
    try:
        nvrtc = cubins.Nvrtc()
    except cubins.NvrtcNotFound as e:
        print(e)
        return 3
    nvrtc.compile(src, a.file, a.arch, ("-Xptxas", "-v"))
    log = nvrtc.last_log
    fn = None
    for line in log.splitlines():
        m = re.search(r"Compiling entry function '(\w+)'", line)
        if m:
            fn = m.group(1)
        elif fn and re.search(a.only, fn) and ("Used" in line or "spill" in line):
            what = re.sub(r"ptxas\s+info\s+:\s*", "", line).strip()
            print(f"{fn:40} {what}")
    # ptxas names the kernels whose warpgroup MMAs it serialized (each product then waits for the one before it)
    # before their resource lines, in lines of their own
    for fn in sorted(set(serialized(log))):
        if re.search(a.only, fn):
            print(f"{fn:40} wgmma serialized (C7512/C7515/C7520)")
    return 0


def serialized(log: str) -> list:
    """The functions ptxas's log says it serialized the wgmma of, in the log's order: C7515 and C7520 (a dependence),
    C7512 (too few registers: "... serialized due to insufficient register resources for the function 'f'", without
    "in"; first met in the fifty-eighth session, where the reader had missed it)."""
    return re.findall(r"\((?:C7512|C7515|C7520)\) Potential Performance Loss: wgmma\.mma_async instructions are "
                      r"serialized .*? (?:in|for) (?:the )?function '(\w+)'", log)


if __name__ == "__main__":
    raise SystemExit(main())
