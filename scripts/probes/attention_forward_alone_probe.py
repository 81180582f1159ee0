"""Our half-type attention forward and PyTorch's (cuDNN's flash fprop) alone, on the GPU's own clock, with the L2
warm and cold: is what ours loses in the step (62 against cuDNN's 50 µs a layer of gpt2-small bf16 in the H200
edition's families, where ours alone in graphs ran 49-56) its own, or what the step's L2 does to it?

    python3 scripts/probes/attention_forward_alone_probe.py OUT.jsonl [reps] [models]

For each model (default gpt2-small,gpt2-medium), bf16 under half roundings: `reps` forwards of ours, then of
PyTorch's scaled_dot_product_attention on the same shapes (as nanoGPT hands q, k, v over), each side twice: back to
back ("warm": the previous call's qkv partly in the L2) and with a 256 MB buffer written between calls ("cold":
qkv comes from DRAM, as after the c_attn product in the step, nearly). Timed by torch.profiler (CUPTI: kernel
durations, so host time is out); per kernel name the median and quartiles in µs. Rows go to OUT.jsonl as they are
measured. No GPU: one line, exit 2.

TR2_PROBE_FORMS: the TMA forward's forms of ours to time on rows over 256 (gpu/attention.py's FWD_TMA_LONG, set in
turn; default "7", the program's), each a side "ours" (form 7) or "ours-fN". Form 7 is the only one left (forms 10
and 11, which this probe measured in the fifty-seventh session, were removed on 2026-12-07); another value stops the
probe.
"""
from __future__ import annotations

import json
import os
import statistics
import sys

MODELS_DEFAULT = ("gpt2-small", "gpt2-medium")
FLUSH_BYTES = 256 << 20


def quartiles(xs: list[float]) -> tuple[float, float, float]:
    q = statistics.quantiles(xs, n=4) if len(xs) > 1 else [xs[0]] * 3
    return q[0], statistics.median(xs), q[2]


def kernel_durations(prof, skip: tuple[str, ...]) -> dict[str, list[float]]:
    """µs per launch by kernel name, leaving out names containing any of `skip` (the flush's fill)."""
    from torch.autograd import DeviceType
    out: dict[str, list[float]] = {}
    for e in prof.events():
        if e.device_type != DeviceType.CUDA or getattr(e, "is_user_annotation", False):
            continue
        if any(s in e.name for s in skip):
            continue
        out.setdefault(e.name, []).append(float(e.time_range.elapsed_us()))
    return out


def main() -> int:
    try:
        import cupy as cp
        import torch
        import torch.nn.functional as F
        if not torch.cuda.is_available():
            raise RuntimeError("torch sees no CUDA device")
    except Exception as e:   # noqa: BLE001 - the probe's one line when there is no GPU
        print(f"attention_forward_alone_probe: no GPU ({e})")
        return 2
    import numpy as np
    from torch.profiler import ProfilerActivity, profile

    from tr2.cupy_side.gpu import attention
    from tr2.cupy_side.gpu.backend import CudaBackend
    from tr2.cupy_side.gpu.cast import to_half
    from tr2.models import load_model

    path = sys.argv[1]
    reps = int(sys.argv[2]) if len(sys.argv) > 2 else 30
    models = sys.argv[3].split(",") if len(sys.argv) > 3 else MODELS_DEFAULT
    forms = [int(f) for f in os.environ.get("TR2_PROBE_FORMS", "7").split(",")]
    if set(forms) - {7}:
        raise SystemExit(f"TR2_PROBE_FORMS={os.environ['TR2_PROBE_FORMS']}: allowed: 7 (the TMA forward's one form)")
    flush = torch.empty(FLUSH_BYTES, dtype=torch.uint8, device="cuda")
    rows = []
    for model in models:
        cfg = load_model(model)
        B, T, C, H = cfg.batch_size, cfg.block_size, cfg.n_embd, cfg.n_head
        be = CudaBackend("bfloat16", tf32=True, half_roundings=True)
        rs = np.random.default_rng(0)
        qkv_ours = to_half(cp.asarray(rs.standard_normal((B, T, 3 * C), dtype=np.float32)), be.ctx.kind)
        qkv_t = torch.randn(B, T, 3 * C, device="cuda", dtype=torch.bfloat16)

        def theirs():
            q, k, v = qkv_t.split(C, dim=2)
            q, k, v = (a.view(B, T, H, C // H).transpose(1, 2) for a in (q, k, v))
            return F.scaled_dot_product_attention(q, k, v, dropout_p=0.0, is_causal=True)

        def ours_form(form):
            def ours():
                attention.FWD_TMA_LONG = form
                return be.attention_forward(qkv_ours, H, 0.0, 1337, 1 << 32)
            return ours

        sides = [("ours" if f == 7 else f"ours-f{f}", ours_form(f)) for f in forms] + [("torch", theirs)]
        for side, fn in sides:
            for l2 in ("warm", "cold"):
                for _ in range(3):
                    fn()
                torch.cuda.synchronize()
                cp.cuda.Device().synchronize()
                with profile(activities=[ProfilerActivity.CUDA]) as prof:
                    for _ in range(reps):
                        if l2 == "cold":
                            flush.fill_(1)
                        fn()
                    torch.cuda.synchronize()
                    cp.cuda.Device().synchronize()
                by_name = kernel_durations(prof, ("fill", "Fill", "Memset", "memset"))
                for name, ds in sorted(by_name.items(), key=lambda kv: -sum(kv[1])):
                    if len(ds) < reps // 2:
                        continue
                    q1, med, q3 = quartiles(ds)
                    r = {"model": model, "dtype": "bfloat16", "half_roundings": True, "B": B, "T": T, "H": H,
                         "side": side, "l2": l2, "kernel": name, "n": len(ds), "us_median": med, "us_q1": q1,
                         "us_q3": q3}
                    rows.append(r)
                    with open(path, "a") as f:
                        f.write(json.dumps(r) + "\n")
        qkv_ours = qkv_t = None   # the closures hold the names, not the arrays
        cp.get_default_memory_pool().free_all_blocks()
        torch.cuda.empty_cache()
    print(f"{'model':12} {'side':6} {'L2':5} {'µs (median)':>12} {'q1':>8} {'q3':>8} {'n':>4}  kernel")
    for r in rows:
        print(f"{r['model']:12} {r['side']:6} {r['l2']:5} {r['us_median']:12.2f} {r['us_q1']:8.2f} {r['us_q3']:8.2f} "
              f"{r['n']:4d}  {r['kernel'][:70]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
