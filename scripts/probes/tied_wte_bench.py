"""The tied wte's gradient two ways (gpu/backend.py's TIED_WTE; docs/perf.md "Thirty-second session"): widened, lm_head's
half dW widened into float32 and embedding_backward_wte's sums added into it; tied, embedding_backward_wte_sums and a
TiedGradient the global norm and AdamW read. The bits first (the wte's dense gradient, the norm, every parameter and
moment and the wte's half copy after one AdamW update from the same state), then the µs a call of the whole tail each
way (embedding backward, norm, AdamW over every parameter; `reps` calls recorded as one CUDA graph and replayed,
event_timing.graph_ms), the forms alternating over rounds in one process. Tokens: the model's first batch of its
training data (so the present rows are as many as a step's); gradients random as a half-roundings step hands them
(grad_pass_bench.gradients: the products' dW in the half type).

    PYTHONPATH=lib:scripts python3 scripts/probes/tied_wte_bench.py [OUT.jsonl] [rounds] [reps] [models] [dtypes]
"""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import cupy as cp

REPO = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(REPO / "lib"), str(REPO / "scripts"), str(REPO / "scripts" / "probes")]

from event_timing import graph_ms, probe_args  # noqa: E402
from grad_pass_bench import gradients  # noqa: E402
from tr2 import data  # noqa: E402
from tr2.cupy_side.gpu import backend as gb, halfbits  # noqa: E402
from tr2.cupy_side.gpu.backend import CudaBackend  # noqa: E402
from tr2.cupy_side.model import PRODUCT_WEIGHTS, WPE, WTE  # noqa: E402
from tr2.models import load_model  # noqa: E402
from tr2.results import jsonl_line  # noqa: E402
from tr2.weights import param_shapes  # noqa: E402


def setup(be, model: str, kind: int, rs):
    """(names, params, grads (grad_pass_bench's; the wte's slot replaced in `tail`), moments m and v, the wte's half
    dW, idx [B, T], dout)."""
    cfg = load_model(model)
    grads, dw = gradients(model, kind, rs)
    names, shapes = list(param_shapes(cfg)), list(param_shapes(cfg).values())
    params = [cp.asarray(rs.standard_normal(sh, dtype=np.float32) * np.float32(0.02)) for sh in shapes]
    ms = [cp.asarray(rs.standard_normal(sh, dtype=np.float32) * np.float32(0.01)) for sh in shapes]
    vs = [cp.asarray(np.abs(rs.standard_normal(sh, dtype=np.float32)) * np.float32(0.001)) for sh in shapes]
    be.product_weights([p for n, p in zip(names, params) if n == WTE or n.endswith(PRODUCT_WEIGHTS)])
    tokens = data.load_split(cfg.dataset, "train")[: cfg.batch_size * cfg.block_size]
    idx = cp.asarray(np.asarray(tokens, dtype=np.int64).reshape(cfg.batch_size, cfg.block_size))
    dout = cp.asarray(rs.standard_normal((cfg.batch_size, cfg.block_size, cfg.n_embd), dtype=np.float32))
    return names, params, grads, ms, vs, dw, idx, dout


def tail(be, names, params, grads, ms, vs, dw, idx, dout, hyper):
    """The step's tail from the embedding's backward on: the wte's gradient, the norm, AdamW. Returns (norm, wte grad)."""
    i_wte, i_wpe = names.index(WTE), names.index(WPE)
    dwpe = cp.zeros(params[i_wpe].shape, np.float32)
    g = be.embedding_backward_tied(dout, idx, dw, dwpe)
    gs = list(grads)
    gs[i_wte], gs[i_wpe] = g, dwpe
    norm = be.global_norm(gs)
    be.adamw_update(params, gs, ms, vs, hyper)
    return norm, g


def main(argv) -> int:
    out, rounds, reps, models, dtypes = probe_args(argv, "tied_wte.jsonl", 10)
    ok = True
    for model in models:
        for dtype in dtypes:
            be = CudaBackend(dtype, tf32=True, half_roundings=True)
            kind = halfbits.KINDS[dtype]
            rs = np.random.default_rng(0)
            names, params, grads, ms, vs, dw, idx, dout = setup(be, model, kind, rs)
            hyper = be.to_device(np.array([6e-4, 0.9, 0.95, 1e-8, 0.1, 0.271, 0.1426, 0.37, 0.0], np.float32))
            got = {}
            for tied in (False, True):
                gb.TIED_WTE = tied
                p2, m2, v2 = [a.copy() for a in params], [a.copy() for a in ms], [a.copy() for a in vs]
                be.product_weights([p for n, p in zip(names, p2) if n == WTE or n.endswith(PRODUCT_WEIGHTS)])
                norm, g = tail(be, names, p2, grads, m2, v2, dw, idx, dout, hyper)
                wte = p2[names.index(WTE)]
                got[tied] = [cp.asnumpy(norm).view(np.uint32), be.to_host(g).view(np.uint32),
                             cp.asnumpy(be.ctx.half_copy(wte))] + [cp.asnumpy(a).view(np.uint32) for a in p2 + m2 + v2]
            same = all(np.array_equal(a, b) for a, b in zip(got[False], got[True]))
            present = int(np.count_nonzero(np.bincount(cp.asnumpy(idx).ravel(), minlength=dw.shape[0])))
            ok = ok and same
            times = {False: [], True: []}
            for r in range(rounds):
                for tied in ((False, True) if r % 2 == 0 else (True, False)):
                    gb.TIED_WTE = tied
                    times[tied].append(1e3 * graph_ms(
                        lambda: tail(be, names, params, grads, ms, vs, dw, idx, dout, hyper), reps))
            gb.TIED_WTE = False
            row = {"model": model, "dtype": dtype, "same_bits": same, "wte_rows": int(dw.shape[0]),
                   "present_rows": present, "reps": reps, "rounds": rounds,
                   "widened_us": float(np.median(times[False])), "tied_us": float(np.median(times[True])),
                   "widened_rounds_us": times[False], "tied_rounds_us": times[True]}
            with open(out, "a") as fh:
                fh.write(jsonl_line(row))
            print(f"{model:11s} {dtype:9s} same bits {same}; {present} of {row['wte_rows']} wte rows present; the "
                  f"tail (embedding backward, norm, AdamW) {row['widened_us']:.1f} -> {row['tied_us']:.1f} us", flush=True)
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
