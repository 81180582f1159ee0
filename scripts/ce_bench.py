"""The loss and its gradient on GPT-2's logits (8192 x 50304: gpt2-small's and gpt2-medium's, batch 8 x 1024), a form
of the shared-memory rows against the one-row kernel (cross_entropy_forward_backward_smem), under half roundings, bf16
and f16. FORM: `ex2` (TR2_CE_GRAD_EX2's gradient pass by exp2: the loss must be the one-row kernel's bits, each dlogit
within one unit of its last place). The bits compared first, then the µs a launch of each (`reps` launches recorded as
one CUDA graph and replayed, TR2_VARIANT_TIMING=graph, the default; or eager), the forms alternating over rounds in one
process. The kernel writes dlogits over the logits, so each timed launch reads the previous launch's output: the same
bytes and the same arithmetic, other values. (FORM `double`, TR2_CE_SMEM_DB's double-buffered rows, went with them:
cross_entropy.cu's header.)

    PYTHONPATH=lib python3 scripts/ce_bench.py [OUT.jsonl] [rounds] [reps] [dtypes] [FORM: ex2 (default)]
"""
from __future__ import annotations

import os
import sys

import numpy as np
import cupy as cp

from event_timing import graph_ms, median_ms, timer
from tr2.cupy_side.gpu import cross_entropy as gpu_ce
from tr2.cupy_side.gpu.backend import CudaBackend
from tr2.cupy_side.gpu.cast import to_half
from tr2.models import load_model
from tr2.results import jsonl_line

TIMING = os.environ.get("TR2_VARIANT_TIMING", "graph")
timer(TIMING)   # stops the script on a value other than graph or eager
TIME = graph_ms if TIMING == "graph" else median_ms
# a form: the wrapper's switch that selects it (gpu/cross_entropy.py)
SWITCHES = {"ex2": "GRAD_EX2"}


def use(form: str) -> None:
    """The wrapper's switches as the form asks (one-row: all off, the default)."""
    for name, switch in SWITCHES.items():
        setattr(gpu_ce, switch, form == name)


def ulp_steps(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Units of the last place between two arrays of half-type bits (uint16); 65536 where the signs differ."""
    a, b = a.astype(np.int64), b.astype(np.int64)
    return np.where((a >> 15) == (b >> 15), np.abs(a - b), 1 << 16)


def main(argv) -> int:
    out = argv[0] if argv else "ce_bench.jsonl"
    rounds = int(argv[1]) if len(argv) > 1 else 3
    reps = int(argv[2]) if len(argv) > 2 else 20
    dtypes = (argv[3] if len(argv) > 3 else "bfloat16,float16").split(",")
    form = argv[4] if len(argv) > 4 else "ex2"
    if form not in SWITCHES:
        raise SystemExit(f"ce_bench: FORM {form!r}; allowed: {', '.join(SWITCHES)}")
    forms = (form, "one-row")
    cfg = load_model("gpt2-small")
    N, V = cfg.batch_size * cfg.block_size, cfg.vocab_size
    rs = np.random.default_rng(0)
    rows = []
    open(out, "w").close()   # each dtype's row is added as it is measured: a stopped call keeps the finished ones
    for dtype in dtypes:
        be = CudaBackend(dtype, tf32=True, half_roundings=True)
        logits = to_half(cp.asarray(rs.standard_normal((N, V), dtype=np.float32) * np.float32(3.0)), be.ctx.kind)
        targets = cp.asarray(rs.integers(0, V, size=N).astype(np.int64))
        dloss = be.to_device(1.0)
        outputs = {}
        for f in forms:
            use(f)
            lg = logits.copy()
            loss, dl = be.cross_entropy_forward_backward(lg, targets, dloss)
            outputs[f] = (cp.asnumpy(loss), cp.asnumpy(dl))
        (loss_a, dl_a), (loss_b, dl_b) = outputs[form], outputs["one-row"]
        steps = ulp_steps(dl_a, dl_b)
        same = bool(np.array_equal(loss_a, loss_b) and np.array_equal(dl_a, dl_b))
        # the form's promise: ex2 the loss's bits and dlogits within an ulp
        kept = bool(np.array_equal(loss_a, loss_b) and steps.max() <= 1)
        times = {f: [] for f in forms}
        lg = logits.copy()
        for r in range(rounds):
            for f in (forms if r % 2 == 0 else forms[::-1]):
                use(f)
                times[f].append(1e3 * TIME(lambda: be.cross_entropy_forward_backward(lg, targets, dloss), reps))
        use("one-row")   # the default
        row = {"dtype": dtype, "shape": [N, V], "form": form, "bits_equal": same, "promise_kept": kept,
               "dlogits_max_ulps": int(steps.max()), "dlogits_moved_share": float((steps > 0).mean()),
               "timing": TIMING, **{f"{f}_us": float(np.median(t)) for f, t in times.items()},
               **{f"{f}_rounds_us": t for f, t in times.items()}}
        rows.append(row)
        with open(out, "a") as fh:
            fh.write(jsonl_line(row))
        print(f"{dtype:9s} {N} x {V} {form}: bits equal {same}, promise kept {kept} (dlogits: max "
              f"{row['dlogits_max_ulps']} ulp, {row['dlogits_moved_share']:.4%} moved): one-row "
              f"{row['one-row_us']:.1f} -> {form} {row[f'{form}_us']:.1f} us a launch "
              f"(x{row[f'{form}_us'] / row['one-row_us']:.3f})", flush=True)
    return 0 if all(r["promise_kept"] for r in rows) else 1


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
