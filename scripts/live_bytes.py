"""What the cupy side keeps alive after a training forward, by the line of model.py that made it: the NumPy form of
the step (the same model.py and tape as on the GPU) under tracemalloc, on the CPU. The saved activations are the
same arrays the CUDA build keeps (its kernels allocate what the NumPy ops allocate, bar workspaces), so this is the
forward's share of the GPU's peak without a GPU; the backward's transients differ (NumPy's ops make temporaries).

    python scripts/live_bytes.py [model] [dtype] [tf32]      (default nanogpt float32 on; about a minute for nanogpt)

tf32 `off`: products in plain float32. With `on` the NumPy backend rounds each product's operands to TF32 into copies
(an operand's size again, at every product), which the GPU does inside cuBLAS with no copy: `off` puts the backward's
peak where the GPU's allocations would, as far as NumPy's own temporaries allow.
"""
from __future__ import annotations

import sys
import time
import tracemalloc

import numpy as np

from tr2 import Tr2Error
from tr2.cupy_side.backend import get_backend
from tr2.cupy_side.model import GPT
from tr2.models import load_model
from tr2.weights import init_numpy


def main(argv) -> int:
    model = argv[0] if argv else "nanogpt"
    dtype = argv[1] if len(argv) > 1 else "float32"
    tf32 = argv[2] if len(argv) > 2 else "on"
    if len(argv) > 3:
        print(f"live_bytes.py: {len(argv)} arguments; at most 3: [model] [dtype] [tf32]", file=sys.stderr)
        return 2
    if tf32 not in ("on", "off"):
        print(f"live_bytes.py: tf32 {tf32!r}; allowed: on, off", file=sys.stderr)
        return 2
    try:
        cfg = load_model(model)
        be = get_backend("cpu", dtype, tf32=tf32 == "on")
    except (Tr2Error, ValueError) as e:
        print(f"live_bytes.py: {e}", file=sys.stderr)
        return 2
    gpt = GPT(cfg, be, init_numpy(cfg, 1), seed=1)
    x = np.random.default_rng(0).integers(0, cfg.vocab_size, (cfg.batch_size, cfg.block_size))
    X, Y = be.to_device(x, dtype=np.int64), be.to_device(x, dtype=np.int64)
    unit = cfg.batch_size * cfg.block_size * cfg.n_embd * be.float_dtype.itemsize
    tracemalloc.start(12)
    base = tracemalloc.take_snapshot()
    t = time.time()
    gpt.forward(X, Y, step=0, training=True)
    snap = tracemalloc.take_snapshot()
    live, peak = tracemalloc.get_traced_memory()
    print(f"{model} {dtype} tf32 {tf32}: forward {time.time() - t:.1f} s; alive after it {live / 1e6:.1f} MB (peak during it "
          f"{peak / 1e6:.1f}); unit N x C = {unit / 1e6:.1f} MB")
    rows = []
    for s in snap.compare_to(base, "traceback"):
        if s.size_diff > 1e6:
            frames = [f for f in s.traceback if "/tr2/" in f.filename][:3]
            rows.append((s.size_diff, s.count_diff, " <- ".join(f"{f.filename.split('/tr2/')[-1]}:{f.lineno}"
                                                              for f in frames)))
    for size, n, where in sorted(rows, reverse=True):
        print(f"{size / 1e6:9.1f} MB {size / unit:7.2f} units {n:4d} arrays  {where}")
    print(f"listed {sum(r[0] for r in rows) / 1e6:.1f} MB = {sum(r[0] for r in rows) / unit / cfg.n_layer:.2f} units "
          f"a block over {cfg.n_layer} blocks")
    tracemalloc.reset_peak()
    t = time.time()
    gpt.backward()
    live2, peak2 = tracemalloc.get_traced_memory()
    print(f"backward {time.time() - t:.1f} s: peak during it {peak2 / 1e6:.1f} MB (NumPy temporaries included), "
          f"alive after it {live2 / 1e6:.1f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
