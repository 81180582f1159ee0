"""The attention backward's forms against each other in one process, on each model's shape (bf16 under half roundings,
dropout as the model trains): `recompute` (attn_backward_dq recomputes S and dPd, then dK/dV), `ds_l2` (the row dots,
the mma.sync dK/dV writing dS^T evict-first, dQ one mma.sync product over it: TR2_ATTN_WG_DKDV=0) and, where a head has
at most two key blocks (the char model), `fold` (dQ's parts added in key-block order inside the dK/dV kernel); on Hopper
`tmarr` (dK/dV on the TMA producer and wgmma, resident, then the mma.sync dQ: TR2_ATTN_DQ_TMA=0) and `tmarrqf` (the same
with dQ on the TMA producer, the query blocks fastest: TR2_ATTN_DQ_TMA=1), both with ds_l2's bits, and `tmarrqg`
(tmarrqf grouped: the dK/dV's heads in groups, ds_t stored without the evict-first policy, the dQ's heads newest first:
TR2_ATTN_DS_GROUPED=1; tmarrqf's bits) and `tmarrqc` (dQ chained through the dK/dV kernel, no ds_t: TR2_ATTN_DQ_CHAIN=1;
tmarrqg's dk and dv bits, dq in a new order; the keys descending: TR2_ATTN_DQ_CHAIN_ASC=0) and `tmarrqa` (the chain
keys ascending on key-block-major tickets: TR2_ATTN_DQ_CHAIN_ASC=1; tmarrqg's dk and dv bits, dq in another order). The
default is tmarrqa on rows of at most 256 (tmarr until the sixty-second session, tmarrqc until the sixty-fourth) and
tmarrqg on longer ones (tmarrqf until the sixty-first). The forms measured
slower and removed (ds and ds64 without the evict-first L2 policy or at 64 queries a block; the wgmma dK/dV kernels on
cp.async, wg1 / wg2 and their forms; the TMA dK/dV's other forms; the TMA dQ resident or with the heads fastest; the
groups of batches: attention.cu's header) were forms here until then (before the removal, at ee6b673), and so were the
bulk dQ forms (tmarb, tmarbk and the timing-only tmarbu, tmarbz: at 3d2f362), and the descending chain's staggered
and lagged forms (tmarrqs, tmarrql, tmarrqsl: at 97e8ecd). First the forms' outputs against
`recompute` (dv must be its bits under the dS-storing forms; dq and dk within a rounding of their half outputs: the row
dots are summed in another order); then rounds in rotating order, each figure one backward call's share (whatever
launches the form makes) of `reps` calls, recorded as one CUDA graph and replayed (TR2_VARIANT_TIMING=graph, the
default: the host's work a call not counted, as in the training step's graph) or issued back to back
(TR2_VARIANT_TIMING=eager); the table gives each form's median over the rounds and its ratio to `recompute`.

    python3 scripts/attention_backward_variants.py OUT.jsonl [rounds] [reps]
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

from event_timing import timer

# why graph by default: the TMA forms encode tensor maps on the host every call, and timed back to back the host
# fell behind the GPU (call 4 of results/h200-perf-20261203e: tmaw 61.5 us under Nsight Compute, 76 us so)
TIMING = os.environ.get("TR2_VARIANT_TIMING", "graph")
TIME = timer(TIMING)

# TR2_BWD_MODELS=gpt2-small,...: only those models
MODELS = tuple(m for m in os.environ.get("TR2_BWD_MODELS", "nanogpt,gpt2-small,gpt2-medium").split(",") if m)
SETTINGS = ("FOLD_KEY_BLOCKS", "USE_DS", "USE_WG_DKDV", "DQ_TMA", "DS_GROUPED", "DQ_CHAIN", "DQ_CHAIN_ASC")
_BASE = dict(FOLD_KEY_BLOCKS=0, USE_DS=True, USE_WG_DKDV=True, DQ_TMA=0, DS_GROUPED=False, DQ_CHAIN=False,
             DQ_CHAIN_ASC=False)


def _form(**changes) -> tuple:
    """SETTINGS' values of a form: tmarr's (the TMA dK/dV resident, the mma.sync dQ) with `changes`; a change that
    names no setting stops the script (the form would silently run as another)."""
    unknown = set(changes) - set(SETTINGS)
    if unknown:
        raise SystemExit(f"attention_backward_variants: no setting {sorted(unknown)}; allowed: {', '.join(SETTINGS)}")
    return tuple({**_BASE, **changes}[name] for name in SETTINGS)


FORMS = {"recompute": _form(USE_WG_DKDV=False, USE_DS=False), "ds_l2": _form(USE_WG_DKDV=False),
         "fold": _form(USE_WG_DKDV=False, USE_DS=False, FOLD_KEY_BLOCKS=2),
         "tmarr": _form(), "tmarrqf": _form(DQ_TMA=1), "tmarrqg": _form(DQ_TMA=1, DS_GROUPED=True),
         "tmarrqc": _form(DQ_TMA=1, DQ_CHAIN=True), "tmarrqa": _form(DQ_TMA=1, DQ_CHAIN=True, DQ_CHAIN_ASC=True)}
# where attention.cu is built for sm_90a
WGMMA_FORMS = ("tmarr", "tmarrqf", "tmarrqg", "tmarrqc", "tmarrqa")
# forms whose dk and dv are another's bits, dq not (a new order of its sum): each pair is checked where both ran
SAME_DKDV = {"tmarrqc": "tmarrqg", "tmarrqa": "tmarrqg"}
# forms built to give another's bits (dq, dk and dv alike): each pair is checked where both ran
SAME_BITS = {"tmarr": "ds_l2", "tmarrqf": "ds_l2", "tmarrqg": "tmarrqf"}
SEED, OFFSET = 1337, 1 << 32
_OWN = tuple(getattr(attention, name) for name in SETTINGS)
# TR2_BWD_FORMS=ds_l2,tmarr: only those forms (recompute, the reference of the table, always)
ONLY = [f for f in os.environ.get("TR2_BWD_FORMS", "").split(",") if f]
if set(ONLY) - set(FORMS):
    raise SystemExit(f"TR2_BWD_FORMS: no form {sorted(set(ONLY) - set(FORMS))}; allowed: {', '.join(FORMS)}")


def _set(values) -> None:
    for name, value in zip(SETTINGS, values):
        setattr(attention, name, value)


def use(form: str) -> None:
    _set(FORMS[form])


def restore() -> None:
    """gpu/attention.py's own choice."""
    _set(_OWN)


def inputs(be, model: str):
    """(cfg, qkv, dout, saved, forms): a model's random half-type q, k, v and dO, the forward's saved values, and the
    forms that apply (the fold where a head has at most two key blocks)."""
    cfg = load_model(model)
    B, T, C = cfg.batch_size, cfg.block_size, cfg.n_embd
    rs = np.random.default_rng(0)
    qkv = to_half(cp.asarray(rs.standard_normal((B, T, 3 * C), dtype=np.float32)), be.ctx.kind)
    dout = to_half(cp.asarray(rs.standard_normal((B, T, C), dtype=np.float32)), be.ctx.kind)
    use("recompute")
    _, saved = be.attention_forward(qkv, cfg.n_head, cfg.dropout, SEED, OFFSET)
    forms = [f for f in FORMS if (f != "fold" or -(-T // attention.block_rows(be.ctx)) <= 2)
             and (not ONLY or f in ONLY or f == "recompute")
             and (f not in WGMMA_FORMS or attention.runtime.built_for(attention.FILE) == "sm_90a")]
    return cfg, qkv, dout, saved, forms


def main() -> int:
    path = sys.argv[1]
    rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 5
    reps = int(sys.argv[3]) if len(sys.argv) > 3 else 20
    be = CudaBackend("bfloat16", tf32=True, half_roundings=True)
    table = []
    for model in MODELS:
        cfg, qkv, dout, saved, names = inputs(be, model)
        B, T, C, H = cfg.batch_size, cfg.block_size, cfg.n_embd, cfg.n_head
        seed, offset = SEED, OFFSET
        outs = {}
        for f in names:
            use(f)
            outs[f] = be.to_host(be.attention_backward(dout, qkv, saved, H, cfg.dropout, seed, offset)).astype(np.float64)
        for f, ref in SAME_BITS.items():
            if f in outs and ref in outs:
                same = np.array_equal(outs[f], outs[ref])
                print(f"{model:12} {f} {'has' if same else 'is NOT'} {ref}'s bits", flush=True)
        for f, ref in SAME_DKDV.items():
            if f in outs and ref in outs:
                same = np.array_equal(outs[f][..., C:], outs[ref][..., C:])
                print(f"{model:12} {f} {'has' if same else 'is NOT'} {ref}'s dk and dv bits", flush=True)
        for f in names:
            d = np.abs(outs[f] - outs["recompute"])
            rel = {part: float(d[..., s].max() / max(np.abs(outs["recompute"][..., s]).max(), 1e-30))
                   for part, s in (("dq", slice(0, C)), ("dk", slice(C, 2 * C)), ("dv", slice(2 * C, 3 * C)))}
            print(f"{model:12} {f:9} against recompute: max rel. difference dq {rel['dq']:.2e} dk {rel['dk']:.2e} "
                  f"dv {rel['dv']:.2e}", flush=True)
            with open(path, "a") as fh:
                fh.write(json.dumps({"model": model, "form": f, "against": "recompute", **rel}) + "\n")
        times = {f: [] for f in names}
        for r in range(rounds):
            for f in names[r % len(names):] + names[:r % len(names)]:
                use(f)
                ms = TIME(lambda: be.attention_backward(dout, qkv, saved, H, cfg.dropout, seed, offset), reps)
                times[f].append(ms)
                with open(path, "a") as fh:
                    fh.write(json.dumps({"model": model, "form": f, "round": r, "bwd_ms": ms, "reps": reps, "timing": TIMING,
                                         "B": B, "T": T, "H": H, "dropout": cfg.dropout}) + "\n")
        base = statistics.median(times["recompute"])
        for f in names:
            m = statistics.median(times[f])
            table.append(f"{model:12} {f:9} {m:8.4f} ms  x{m / base:5.3f}  per step {m * cfg.n_layer:7.3f} ms  "
                         f"rounds {' '.join(f'{t:.4f}' for t in times[f])}")
        be.ctx.ws.clear()
        cp.get_default_memory_pool().free_all_blocks()
    restore()
    print("\n".join(table))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
