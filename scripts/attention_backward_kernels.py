"""Each kernel of the attention backward's forms timed alone, in one process (bf16 under half roundings, each
model's shape and dropout): every launch gpu/attention.py makes is bracketed by CUDA events, over `reps` backward
calls after one warm-up, in rotating rounds of the forms (scripts/attention_backward_variants.py's FORMS); the table
gives each kernel's median over the rounds of its mean µs a launch. The events' gaps between kernels are not in it.

    python3 scripts/attention_backward_kernels.py OUT.jsonl [rounds] [reps] [models]
"""
from __future__ import annotations

import json
import statistics
import sys
from collections import defaultdict

import cupy as cp

from tr2.cupy_side.gpu import attention
from tr2.cupy_side.gpu.backend import CudaBackend

from attention_backward_variants import OFFSET, SEED, inputs, restore, use

_launch = attention.launch
_events: list = []


def timed_launch(filename, name, *args, **kwargs):
    a, b = cp.cuda.Event(), cp.cuda.Event()
    a.record()
    _launch(filename, name, *args, **kwargs)
    b.record()
    _events.append((name, a, b))


def main() -> int:
    path = sys.argv[1]
    rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 3
    reps = int(sys.argv[3]) if len(sys.argv) > 3 else 10
    models = sys.argv[4].split(",") if len(sys.argv) > 4 else ["nanogpt", "gpt2-small"]
    be = CudaBackend("bfloat16", tf32=True, half_roundings=True)
    table = []
    for model in models:
        cfg, qkv, dout, saved, names = inputs(be, model)
        B, T, H = cfg.batch_size, cfg.block_size, cfg.n_head
        per = defaultdict(list)   # (form, kernel) -> µs a launch, one figure a round
        for r in range(rounds):
            for f in names[r % len(names):] + names[:r % len(names)]:
                use(f)
                be.attention_backward(dout, qkv, saved, H, cfg.dropout, SEED, OFFSET)   # warm-up, untimed
                attention.launch = timed_launch
                _events.clear()
                for _ in range(reps):
                    be.attention_backward(dout, qkv, saved, H, cfg.dropout, SEED, OFFSET)
                attention.launch = _launch
                _events[-1][2].synchronize()
                sums = defaultdict(float)
                for name, a, b in _events:
                    sums[name] += cp.cuda.get_elapsed_time(a, b) * 1000.0 / reps
                for name, us in sums.items():
                    per[(f, name)].append(us)
                    with open(path, "a") as fh:
                        fh.write(json.dumps({"model": model, "form": f, "kernel": name, "round": r, "us": us,
                                             "reps": reps, "B": B, "T": T, "H": H}) + "\n")
        for f in names:
            total = 0.0
            for (form, name), v in per.items():
                if form == f:
                    m = statistics.median(v)
                    total += m
                    table.append(f"{model:12} {f:9} {name:34} {m:8.1f} us")
            table.append(f"{model:12} {f:9} {'(sum)':34} {total:8.1f} us  per step {total * cfg.n_layer / 1000:6.3f} ms")
        be.ctx.ws.clear()
        cp.get_default_memory_pool().free_all_blocks()
    restore()
    print("\n".join(table))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
