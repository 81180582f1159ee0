"""Where the folded dQ backward's time goes: variants of attention.cu's half-build backward with one part taken
out each, built here (NVRTC) and timed on the GPU beside the kernels of the commit before the fold.

    python scripts/attention_variants.py build DIR        (CPU machine: DIR/<variant>.cubin)
    python scripts/attention_variants.py time DIR OUT.jsonl [old.cubin]   (GPU machine)

Variants (text patches of the source; the numbers they produce are wrong on purpose except `fused`):
  fused    as committed
  nowait   no spin on the counter (the barrier stays): what waiting costs
  normw    no wait and no read-add-write of dq_acc (each block's part stored once): what the ordered sum costs
  nodq     no dQ product either (dS^T still staged): what the fifth product costs
A dev tool for docs/perf.md; it decides nothing by itself.
"""
from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import numpy as np

VARIANTS = ("fused", "nowait", "normw", "nodq")
WAIT = """                if (threadIdx.x == 0)
                    for (u32 spins = 0; ld_acquire(turn) != kb; ++spins) {
                        if (spins == (1u << 25)) __trap();
                        __nanosleep(32);
                    }"""
RMW_LOAD = "if (kb > 0) {   // the blocks before, then this one"
DQ_PRODUCT = "if (ks < nks) {"


def patched(src: str, variant: str) -> str:
    def sub(s, old, new):
        if old not in s:
            raise SystemExit(f"attention_variants: the source no longer has the text {variant} patches: {old[:60]!r}")
        return s.replace(old, new)
    if variant in ("nowait", "normw", "nodq"):
        src = sub(src, WAIT, "")
    if variant in ("normw", "nodq"):
        src = sub(src, RMW_LOAD, "if (false) {")
    if variant == "nodq":
        src = sub(src, DQ_PRODUCT, "if (false) {")
    return src


def build(out: Path) -> None:
    from tr2.cupy_side.gpu import load_source
    from tr2.cupy_side.gpu.cubins import Nvrtc
    nv = Nvrtc()
    out.mkdir(parents=True, exist_ok=True)
    src = load_source("attention.cu")
    for v in VARIANTS:
        (out / f"{v}.cubin").write_bytes(nv.compile(patched(src, v), f"attention_{v}.cu", "sm_90"))
        print(f"built {v}")


def time_all(d: Path, jsonl: Path, old: str | None) -> None:
    import cupy as cp
    from tr2.cupy_side.gpu import attention as att
    from tr2.cupy_side.gpu.backend import CudaBackend
    from tr2.cupy_side.gpu.cast import to_half
    from tr2.cupy_side.gpu.runtime import i32
    from tr2.models import load_model
    from event_timing import mean_ms

    def ms(fn):
        return mean_ms(fn, 20)

    rows = []
    for model in ("gpt2-small", "nanogpt", "gpt2-medium"):
        cfg = load_model(model)
        be = CudaBackend("bfloat16", tf32=True, half_roundings=True)
        ctx = be.ctx
        B, T, C, H = cfg.batch_size, cfg.block_size, cfg.n_embd, cfg.n_head
        hs, p = C // H, cfg.dropout
        rs = np.random.default_rng(0)
        qkv = to_half(cp.asarray(rs.standard_normal((B, T, 3 * C), dtype=np.float32)), ctx.kind)
        dout = to_half(cp.asarray(rs.standard_normal((B, T, C), dtype=np.float32)), ctx.kind)
        out, saved = be.attention_forward(qkv, H, p, 1337, 1 << 32)
        be.attention_backward(dout, qkv, saved, H, p, 1337, 1 << 32)   # the workspace, the committed cubin loaded
        rows.append({"model": model, "variant": "committed (wrapper: row dots + fused)",
                     "ms": ms(lambda: be.attention_backward(dout, qkv, saved, H, p, 1337, 1 << 32))})
        D = ctx.ws.get("att_D", (B, H, T), np.float32)
        n_tiles = -(-T // att._geometry(ctx)["backward_dkdv"])
        sync = ctx.ws.get("att_sync", (B * H * n_tiles + 1,), np.int32)
        dq_acc = ctx.ws.get("att_dq_acc", (B * H, T, hs), np.float32)
        dqkv = cp.empty((B, T, 3 * C), dtype=ctx.out_dtype)
        nbytes = att.shared_bytes(ctx, "backward")
        grid = (B * H, -(-T // att.block_rows(ctx)))
        tail = (i32(ctx.round_kind),) + att._dropout_args(p, 1337, 1 << 32, None)
        for v in VARIANTS:
            mod = cp.RawModule(path=str(d / f"{v}.cubin"))
            fn = mod.get_function(f"attn_backward_bf16r_hs{hs}")
            fn.max_dynamic_shared_size_bytes = nbytes

            def run():
                sync.fill(0)
                fn(grid, (att.THREADS,), (dqkv, qkv, dout, saved.lse, D, dq_acc, sync, i32(T), i32(H)) + tail,
                   shared_mem=nbytes)
            rows.append({"model": model, "variant": v, "ms": ms(run)})
        if old:   # the two kernels before the fold (the commit's cubin): dQ (writes D), then dK/dV
            mod = cp.RawModule(path=old)
            fdq, fkv = mod.get_function(f"attn_backward_dq_bf16r_hs{hs}"), mod.get_function(f"attn_backward_dkdv_bf16r_hs{hs}")
            sm_dq, sm_kv = att.shared_bytes(ctx, "backward_dq"), att.shared_bytes(ctx, "backward_dkdv")
            fdq.max_dynamic_shared_size_bytes, fkv.max_dynamic_shared_size_bytes = sm_dq, sm_kv

            def run_old():
                fdq(grid, (att.THREADS,), (dqkv, qkv, dout, saved.lse, D, saved.out, i32(T), i32(H)) + tail, shared_mem=sm_dq)
                fkv(grid, (att.THREADS,), (dqkv, qkv, dout, saved.lse, D, i32(T), i32(H)) + tail, shared_mem=sm_kv)
            rows.append({"model": model, "variant": "before the fold (dQ + dK/dV)", "ms": ms(run_old)})
        for r in rows[-(len(VARIANTS) + 1 + bool(old)):]:
            print(f"{r['model']:12s} {r['variant']:40s} {r['ms'] * 1000:8.1f} us", flush=True)
    with open(jsonl, "w") as f:   # (call 3 of results/h200-perf-20261201b lost this file: `out` was shadowed)
        for r in rows:
            f.write(json.dumps({**r, "time": time.time()}) + "\n")


def main(argv) -> int:
    if argv[:1] == ["build"] and len(argv) == 2:
        build(Path(argv[1]))
    elif argv[:1] == ["time"] and len(argv) in (3, 4):
        time_all(Path(argv[1]), Path(argv[2]), argv[3] if len(argv) == 4 else None)
    else:
        sys.stderr.write(__doc__.split("\n\n")[1] + "\n")
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
