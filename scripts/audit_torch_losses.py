"""Every committed log of our torch loop in a compiled mode (results/**/*.log): its model, type, mode, the time and
loss of iteration 0, and its loss at step 200, flagging runs whose loss at step 200 lies far above the others of
their model (a run that trained another program, as call 6 of results/h200-perf-20261201b did from a shared
Inductor cache) or whose iteration 0 took under 6 s (a compile served from a cache).

    python scripts/audit_torch_losses.py [results]
"""
from __future__ import annotations

import glob
import re
import sys

from tr2.clock import read_stamped_log
from tr2.trainlog import parse_iter

HEADER = re.compile(r"torch side: model (\S+), .*?dtype (\S+) .*?mode (\S+), tf32")
TOO_HIGH = {"nanogpt": 2.4, "gpt2-small": 4.2, "gpt2-medium": 4.6}   # the committed runs sit at 2.24-2.26, 4.06-4.09, 4.42-4.48


def main(argv) -> int:
    root = argv[0] if argv else "results"
    seen = flagged = 0
    for path in sorted(glob.glob(f"{root}/**/*.log", recursive=True)):
        with open(path, errors="replace") as f:
            text = f.read()
        m = HEADER.search(text)
        if not m or m.group(3).rstrip(",") == "eager":
            continue
        model, dtype, mode = m.group(1), m.group(2), m.group(3).rstrip(",")
        iters = {p[0]: p for _, line in read_stamped_log(path) if (p := parse_iter(line))}   # step -> (step, loss, ms)
        seen += 1
        it0, l200 = iters.get(0), iters[200][1] if 200 in iters else None
        high = l200 is not None and model in TOO_HIGH and l200 > TOO_HIGH[model]
        fast = it0 is not None and it0[2] < 6000 and model in TOO_HIGH
        if high or fast:
            flagged += high
            print(f"{'HIGH LOSS ' if high else 'cache hit '} {path}: {model} {dtype} {mode}, iter 0 loss "
                  f"{it0[1] if it0 else '?'} in {it0[2] if it0 else '?'} ms, loss at 200 {l200}")
    print(f"{seen} compiled-mode logs of the torch side read; {flagged} with a loss at step 200 out of line")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
