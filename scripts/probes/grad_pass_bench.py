"""The gradients' global norm and the tied wte's widening on a model's gradients, the _wide kernels
(TR2_GLOBAL_NORM_WIDE, TR2_CAST_WIDE; kernels/global_norm.cu's and cast.cu's headers) against the one-load-a-turn
kernels: the bits compared first (the norm, every chunk's partial sum, the widened wte), then the µs a call of each
(`reps` calls recorded as one CUDA graph and replayed, event_timing.graph_ms), the forms alternating over rounds in
one process. The gradients are those a half-roundings step hands the norm: the four products' weights in the half
type, every other parameter (the tied wte widened, the LayerNorms', the biases, wpe) in float32; values random, scaled
over 2^-12..2^12.

    PYTHONPATH=lib:scripts python3 scripts/probes/grad_pass_bench.py [OUT.jsonl] [rounds] [reps] [models] [dtypes]
"""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import cupy as cp

REPO = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(REPO / "lib"), str(REPO / "scripts")]

from event_timing import graph_ms, probe_args  # noqa: E402
from tr2.cupy_side.gpu import cast, global_norm as gn, halfbits  # noqa: E402
from tr2.cupy_side.gpu.backend import CudaBackend  # noqa: E402
from tr2.cupy_side.model import PRODUCT_WEIGHTS, WTE  # noqa: E402
from tr2.models import load_model  # noqa: E402
from tr2.results import jsonl_line  # noqa: E402
from tr2.weights import param_shapes  # noqa: E402


def use(wide: bool) -> None:
    gn.WIDE = cast.WIDE = wide


def gradients(model: str, kind: int, rs) -> tuple[list, "cp.ndarray"]:
    """(the step's gradient list as the norm reads it, the wte's half bits as the lm_head product leaves them)."""
    grads, wte_bits = [], None
    for name, shape in param_shapes(load_model(model)).items():
        a = (rs.standard_normal(shape, dtype=np.float32)
             * np.float32(2.0) ** rs.integers(-12, 13, shape).astype(np.float32))
        if name.endswith(PRODUCT_WEIGHTS):
            grads.append(cp.asarray(halfbits.to_bits(a, kind)))
            continue
        if name == WTE:
            wte_bits = cp.asarray(halfbits.to_bits(a, kind))
        grads.append(cp.asarray(a))
    return grads, wte_bits


def main(argv) -> int:
    out, rounds, reps, models, dtypes = probe_args(argv, "grad_pass.jsonl", 20)
    rs = np.random.default_rng(0)
    ok = True
    for model in models:
        for dtype in dtypes:
            be = CudaBackend(dtype, tf32=True, half_roundings=True)
            kind = halfbits.KINDS[dtype]
            grads, wte_bits = gradients(model, kind, rs)
            got = {}
            for wide in (False, True):
                use(wide)
                norm = cp.asnumpy(be.global_norm(grads))
                (part,) = be.ctx.ws.named("gn_partial")
                got[wide] = (norm.view(np.uint32), cp.asnumpy(part).view(np.uint32),
                             cp.asnumpy(cast.from_half(wte_bits, kind)).view(np.uint32))
            same = {what: bool(np.array_equal(got[True][i], got[False][i]))
                    for i, what in enumerate(("norm", "partials", "wte_widened"))}
            ok = ok and all(same.values())
            wte_f32 = cp.empty(wte_bits.shape, np.float32)
            calls = {"norm": lambda: be.global_norm(grads), "cast": lambda: cast.from_half(wte_bits, kind, out=wte_f32)}
            times = {(c, w): [] for c in calls for w in (False, True)}
            for r in range(rounds):
                for wide in ((False, True) if r % 2 == 0 else (True, False)):
                    use(wide)
                    for c, fn in calls.items():
                        times[(c, wide)].append(1e3 * graph_ms(fn, reps))
            use(True)
            n_half = sum(int(g.size) for g in grads if g.dtype == np.uint16)
            n_f32 = sum(int(g.size) for g in grads if g.dtype == np.float32)
            row = {"model": model, "dtype": dtype, "same_bits": same, "grad_bytes": 2 * n_half + 4 * n_f32,
                   "wte_elements": int(wte_bits.size), "reps": reps, "rounds": rounds,
                   **{f"{c}_{'wide' if w else 'loop'}_us": float(np.median(t)) for (c, w), t in times.items()},
                   **{f"{c}_{'wide' if w else 'loop'}_rounds_us": t for (c, w), t in times.items()}}
            with open(out, "a") as fh:
                fh.write(jsonl_line(row))
            gb = row["grad_bytes"] / 1e9
            print(f"{model:11s} {dtype:9s} same bits {same}: norm {row['norm_loop_us']:.1f} -> {row['norm_wide_us']:.1f}"
                  f" us ({gb / row['norm_loop_us'] * 1e3:.2f} -> {gb / row['norm_wide_us'] * 1e3:.2f} TB/s of"
                  f" {gb:.3f} GB); wte widening {row['cast_loop_us']:.1f} -> {row['cast_wide_us']:.1f} us", flush=True)
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
