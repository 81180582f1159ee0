"""Attention alone on the GPU: our fused kernels against PyTorch's scaled_dot_product_attention, same shapes,
same process, CUDA events. Per model: forward, and backward (row dots + dK/dV + dQ; PyTorch's autograd
backward), each the median of `reps` timed calls after warm-ups, and the per-step figure (times n_layer).

    python3 scripts/attention_bench.py OUT.jsonl [reps]

TR2_ATTN_BENCH_BUILDS narrows the builds (e.g. "bfloat16:hr,float16:hr"; "exact" for the exact build);
TR2_ATTN_BENCH_NO_DROPOUT=1 adds, for a model that trains with dropout, rows with dropout 0 (both sides), so
that the generator's share of the time shows.

PyTorch gets q, k, v as [B, H, T, hs] views of one (B, T, 3C) tensor, as nanoGPT hands them over, in the
build's type (bfloat16 / float16; float32 with TF32 allowed), dropout as the model trains. Ours gets qkv and dO
as its kernels read them: half-type bits in the half builds (as c_attn and c_proj hand them over under half
roundings; cast once, outside the timing), float32 otherwise. (Until 2026-11-30 the half builds were handed
float32 and the timing held a cast of qkv and of dO each call.) A micro-benchmark, not a step time: the
series is the measure.
"""
from __future__ import annotations

import dataclasses
import json
import os
import sys

import numpy as np
import cupy as cp
import torch
import torch.nn.functional as F

from tr2.cupy_side.gpu.backend import CudaBackend
from tr2.cupy_side.gpu.cast import to_half
from tr2.models import load_model

from event_timing import median_ms

MODELS = ("nanogpt", "gpt2-small", "gpt2-medium")
BUILDS = [("bfloat16", True), ("bfloat16", False), ("float16", True), ("float32", False)]   # (dtype, half_roundings)


def _builds() -> list[tuple[str, bool]]:
    spec = os.environ.get("TR2_ATTN_BENCH_BUILDS", "").strip()
    if not spec:
        return BUILDS
    out = []
    for item in spec.split(","):
        dtype, _, rounding = item.strip().partition(":")
        if (dtype, rounding == "hr") not in BUILDS or rounding not in ("hr", "exact"):
            raise SystemExit(f"TR2_ATTN_BENCH_BUILDS: {item!r} is not one of "
                             + ", ".join(f"{d}:{'hr' if h else 'exact'}" for d, h in BUILDS))
        out.append((dtype, rounding == "hr"))
    return out


def ours(cfg, dtype, hr, reps):
    be = CudaBackend(dtype, tf32=True, half_roundings=hr)
    B, T, C, H = cfg.batch_size, cfg.block_size, cfg.n_embd, cfg.n_head
    rs = np.random.default_rng(0)
    qkv = cp.asarray(rs.standard_normal((B, T, 3 * C), dtype=np.float32))
    dout = cp.asarray(rs.standard_normal((B, T, C), dtype=np.float32))
    if be.ctx.half:   # what the kernels read: the casts stay outside the timing
        qkv, dout = to_half(qkv, be.ctx.kind), to_half(dout, be.ctx.kind)
    p = cfg.dropout
    out, saved = be.attention_forward(qkv, H, p, 1337, 1 << 32)
    fwd = median_ms(lambda: be.attention_forward(qkv, H, p, 1337, 1 << 32), reps)
    bwd = median_ms(lambda: be.attention_backward(dout, qkv, saved, H, p, 1337, 1 << 32), reps)
    return fwd, bwd


def theirs(cfg, dtype, reps):
    torch.backends.cuda.matmul.allow_tf32 = True
    torch.backends.cudnn.allow_tf32 = True
    dt = {"bfloat16": torch.bfloat16, "float16": torch.float16, "float32": torch.float32}[dtype]
    B, T, C, H = cfg.batch_size, cfg.block_size, cfg.n_embd, cfg.n_head
    qkv = torch.randn(B, T, 3 * C, device="cuda", dtype=dt, requires_grad=True)

    def heads():
        q, k, v = qkv.split(C, dim=2)
        return [a.view(B, T, H, C // H).transpose(1, 2) for a in (q, k, v)]

    def fwd():
        q, k, v = heads()
        return F.scaled_dot_product_attention(q, k, v, dropout_p=cfg.dropout, is_causal=True)

    y = fwd()
    g = torch.randn_like(y)
    f_ms = median_ms(lambda: fwd(), reps)

    def fb():
        qkv.grad = None
        fwd().backward(g)
    fb_ms = median_ms(fb, reps)
    return f_ms, fb_ms - f_ms


def main():
    path = sys.argv[1]
    reps = int(sys.argv[2]) if len(sys.argv) > 2 else 20
    rows = []
    no_dropout = os.environ.get("TR2_ATTN_BENCH_NO_DROPOUT") == "1"
    cfgs = []
    for model in MODELS:
        cfg = load_model(model)
        cfgs.append((model, cfg))
        if no_dropout and cfg.dropout > 0:
            cfgs.append((model, dataclasses.replace(cfg, dropout=0.0)))
    for model, cfg in cfgs:
        for dtype, hr in _builds():
            of, ob = ours(cfg, dtype, hr, reps)
            tf, tb = theirs(cfg, dtype, reps)
            r = {"model": model, "dtype": dtype, "half_roundings": hr, "B": cfg.batch_size, "T": cfg.block_size,
                 "H": cfg.n_head, "hs": cfg.n_embd // cfg.n_head, "dropout": cfg.dropout, "n_layer": cfg.n_layer,
                 "ours_fwd_ms": of, "ours_bwd_ms": ob, "torch_fwd_ms": tf, "torch_bwd_ms": tb,
                 "ours_step_ms": (of + ob) * cfg.n_layer, "torch_step_ms": (tf + tb) * cfg.n_layer, "reps": reps}
            rows.append(r)
            with open(path, "a") as f:
                f.write(json.dumps(r) + "\n")
            cp.get_default_memory_pool().free_all_blocks()
            torch.cuda.empty_cache()
    print(f"{'model':12} {'p':4} {'type':9} {'hr':3} {'ours fwd':>9} {'ours bwd':>9} {'torch fwd':>9} {'torch bwd':>9} "
          f"{'ours/step':>9} {'torch/step':>10}")
    for r in rows:
        hr = "hr" if r["half_roundings"] else "-"
        print(f"{r['model']:12} {r['dropout']:4.2f} {r['dtype']:9} {hr:3} "
              f"{r['ours_fwd_ms']:9.3f} {r['ours_bwd_ms']:9.3f} {r['torch_fwd_ms']:9.3f} "
              f"{r['torch_bwd_ms']:9.3f} {r['ours_step_ms']:9.2f} {r['torch_step_ms']:10.2f}")


if __name__ == "__main__":
    main()
