"""The attention forward's kernels against each other in one process, on each model's shape (bf16 under half
roundings, dropout as the model trains): the mma.sync kernel (mma), the wgmma kernel (wg1, one warpgroup a block) and
the TMA forward with 128-key tiles, resident (tmawr, form 7), each on every shape whatever gpu/attention.py's
WG_MAX_T (which gives the rows of at most 256 wg1 and the longer ones tmawr). Rounds in rotating order; each figure
one call's share of `reps` calls, recorded as one CUDA graph and replayed (TR2_VARIANT_TIMING=graph, the default: the
host's work a call not counted, as in the training step's graph) or issued back to back (TR2_VARIANT_TIMING=eager:
the host's work counts where it falls behind); the table gives each variant's median over the rounds and its ratio
to mma.sync. (One CUDA-event median a process, as attention_bench.py takes, moved by up to 30% between processes:
results/h200-perf-20261201c call 3.) The forms measured slower and removed (the pipelined and ping-pong wgmma
forwards, the TMA forward's forms 1-6 and 8, mma.sync at three blocks an SM: attention.cu's header) were variants
here until then (before the removal, at ee6b673).

    python3 scripts/attention_forward_variants.py OUT.jsonl [rounds] [reps]

TR2_VARIANT_RING=N cycles each form's calls through N qkv buffers, so that with N x the qkv's bytes past the L2
(N = 4 on the GPT-2 shapes) every call reads its inputs from memory, as in the step, where the same tmaw forward
took 66.8 us a layer of gpt2-small against 56.0 alone (docs/perf.md, "Twentieth session").
"""
from __future__ import annotations

import json
import os
import statistics
import sys

import numpy as np
import cupy as cp

from tr2.cupy_side.gpu import attention
from tr2.cupy_side.gpu.backend import CudaBackend
from tr2.cupy_side.gpu.cast import to_half
from tr2.models import load_model

from event_timing import cycling, ring_count, timer

# why graph by default: the TMA forms encode tensor maps on the host every call, and timed back to back the host
# fell behind the GPU (call 4 of results/h200-perf-20261203e: tmaw 61.5 us under Nsight Compute, 76 us so)
TIMING = os.environ.get("TR2_VARIANT_TIMING", "graph")
TIME = timer(TIMING)
# TR2_VARIANT_RING=N: each form's calls cycle through N qkv buffers of the shape (default 1, the same qkv every call)
RING = ring_count(os.environ.get("TR2_VARIANT_RING"))

MODELS = ("nanogpt", "gpt2-small", "gpt2-medium")
SETTINGS = ("USE_WGMMA", "WG_MAX_T", "FWD_TMA_LONG")
# each variant's SETTINGS at rows of T: wg1 takes every row (WG_MAX_T = T), tmawr every row (WG_MAX_T = 0: all "long")
VARIANTS = {"mma": lambda T: (False, T, 0),
            "wg1": lambda T: (True, T, 0),
            "tmawr": lambda T: (True, 0, 7)}   # one block an SM, the query blocks by tickets
# TR2_FWD_VARIANTS=mma,tmawr: only those (mma, the reference of the table, always)
ONLY = [v for v in os.environ.get("TR2_FWD_VARIANTS", "").split(",") if v]
unknown = set(ONLY) - set(VARIANTS)
if unknown:
    raise SystemExit(f"TR2_FWD_VARIANTS: no variant {sorted(unknown)}; allowed: {', '.join(VARIANTS)}")


def use(variant: str, T: int) -> None:
    for name, value in zip(SETTINGS, VARIANTS[variant](T)):
        setattr(attention, name, value)


def main() -> int:
    path = sys.argv[1]
    rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 5
    reps = int(sys.argv[3]) if len(sys.argv) > 3 else 20
    be = CudaBackend("bfloat16", tf32=True, half_roundings=True)
    own = tuple(getattr(attention, name) for name in SETTINGS)
    names = ["mma"] + [v for v in VARIANTS if v != "mma" and (not ONLY or v in ONLY)]
    table = []
    for model in MODELS:
        cfg = load_model(model)
        B, T, C, H = cfg.batch_size, cfg.block_size, cfg.n_embd, cfg.n_head
        rs = np.random.default_rng(0)
        qkvs = [to_half(cp.asarray(rs.standard_normal((B, T, 3 * C), dtype=np.float32)), be.ctx.kind)
                for _ in range(RING)]
        times = {v: [] for v in names}
        for r in range(rounds):
            for v in names[r % len(names):] + names[:r % len(names)]:
                use(v, T)
                ms = TIME(cycling(lambda qkv: be.attention_forward(qkv, H, cfg.dropout, 1337, 1 << 32), qkvs), reps)
                times[v].append(ms)
                with open(path, "a") as f:
                    f.write(json.dumps({"model": model, "variant": v, "round": r, "fwd_ms": ms, "reps": reps,
                                        "timing": TIMING, "ring": RING,
                                        "B": B, "T": T, "H": H, "dropout": cfg.dropout}) + "\n")
        base = statistics.median(times["mma"])
        for v in names:
            m = statistics.median(times[v])
            table.append(f"{model:12} {v:5} {m:8.4f} ms  x{m / base:5.3f}  per step {m * cfg.n_layer:7.3f} ms  "
                         f"rounds {' '.join(f'{t:.4f}' for t in times[v])}")
        cp.get_default_memory_pool().free_all_blocks()
    for name, value in zip(SETTINGS, own):
        setattr(attention, name, value)
    print("\n".join(table))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
