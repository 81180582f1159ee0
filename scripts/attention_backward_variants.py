"""The attention backward's forms against each other in one process, on each model's shape (bf16 under half
roundings, dropout as the model trains): `recompute` (attn_backward_dq recomputes S and dPd, then dK/dV),
`ds` (the row dots, dK/dV writing dS^T, dQ one product over it) and, where a head has at most two key blocks
(the char model), `fold` (dQ's parts added in key-block order inside the dK/dV kernel), `ds64` (ds with dQ at
64 queries a block: must give ds's bits), `ds_l2` (ds with ds_t's stores and loads marked evict-first in L2,
DS_EVICT_FIRST: must give ds's bits; alone it can show only what the backward's own rereads gain, not the step's
next kernels), `wg1` and `wg2` (ds_l2 with dK/dV on wgmma, USE_WG_DKDV, one or two warpgroups a block; within a
rounding of ds_l2: the tensor cores' sums need not round alike; measured the same bits), `wg1o` and `wg2o` (the
same with WG_DKDV_OVERLAP: the same bits again), `wg1d`, `wg2d` (WG_DKDV_ROW_DOTS) and `wg2p`
(WG_DKDV_PINGPONG), `tma` (WG_DKDV_TMA: the same bits as wg2), `wg1q`, `wg2q`, `tmaq` (those with DQ_TMA), `tma3`,
`tmad`, `tmad3`, `tmar`, `tmarr` (DKDV_TMA_FORM: tma's bits), `tmarrq` (tmarr with DQ_TMA: tmaq's bits), `tmaqr`, `tmarrqr`
(tmaq and tmarrq with DQ_TMA_RESIDENT: tmaq's bits), `tmarrqf` (tmarrq with DQ_TMA_ORDER 1: tmarrq's bits),
`tmarrqfg1`, `tmarrqfg2`, `tmarrqfg4` (tmarrqf a group of 1, 2, 4 batches at a time, DS_GROUP_BATCHES: its bits). First
the forms' outputs against `recompute` (dv must be its bits under `ds`; dq and dk within a rounding of their half
outputs: the row dots are summed in another order); then rounds in rotating order, each
figure one backward call's share (whatever launches the form makes) of `reps` calls, recorded as one CUDA graph
and replayed (TR2_VARIANT_TIMING=graph, the default: the host's work a call not counted, as in the training
step's graph) or issued back to back (TR2_VARIANT_TIMING=eager); the table gives each
form's median over the rounds and its ratio to `recompute`.

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

MODELS = ("nanogpt", "gpt2-small", "gpt2-medium")
# the SETTINGS' values of each form; ds64 and ds_l2: ds's bits
SETTINGS = ("FOLD_KEY_BLOCKS", "USE_DS", "DQ_DS_QUERIES", "DS_EVICT_FIRST", "USE_WG_DKDV", "WG_DKDV_WARPGROUPS",
            "WG_DKDV_OVERLAP", "WG_DKDV_ROW_DOTS", "WG_DKDV_PINGPONG", "WG_DKDV_BLOCKS", "WG_DKDV_TMA", "DQ_TMA",
            "DKDV_TMA_FORM", "DQ_TMA_RESIDENT", "DQ_TMA_ORDER", "DS_GROUP_BATCHES")
_BASE = dict(FOLD_KEY_BLOCKS=0, USE_DS=True, DQ_DS_QUERIES=128, DS_EVICT_FIRST=True, USE_WG_DKDV=True,
             WG_DKDV_WARPGROUPS=1, WG_DKDV_OVERLAP=False, WG_DKDV_ROW_DOTS=False, WG_DKDV_PINGPONG=False,
             WG_DKDV_BLOCKS=2, WG_DKDV_TMA=False, DQ_TMA=False, DKDV_TMA_FORM=0, DQ_TMA_RESIDENT=False,
             DQ_TMA_ORDER=0, DS_GROUP_BATCHES=0)


def _form(**changes) -> tuple:
    """SETTINGS' values of a form: wg1's (ds_l2 with dK/dV on one wgmma warpgroup) with `changes`; a change that names
    no setting stops the script (the form would silently run as another)."""
    unknown = set(changes) - set(SETTINGS)
    if unknown:
        raise SystemExit(f"attention_backward_variants: no setting {sorted(unknown)}; allowed: {', '.join(SETTINGS)}")
    return tuple({**_BASE, **changes}[name] for name in SETTINGS)


_MMA_SYNC = dict(USE_WG_DKDV=False, DS_EVICT_FIRST=False)
FORMS = {"recompute": _form(**_MMA_SYNC, USE_DS=False), "ds": _form(**_MMA_SYNC), "ds64": _form(**_MMA_SYNC, DQ_DS_QUERIES=64),
         "ds_l2": _form(USE_WG_DKDV=False), "fold": _form(**_MMA_SYNC, USE_DS=False, FOLD_KEY_BLOCKS=2),
         "wg1": _form(), "wg2": _form(WG_DKDV_WARPGROUPS=2),
         "wg1o": _form(WG_DKDV_OVERLAP=True), "wg2o": _form(WG_DKDV_WARPGROUPS=2, WG_DKDV_OVERLAP=True),
         # D computed inside the dK/dV kernel, no row-dots launch (the same bits as wg1 / wg2)
         "wg1d": _form(WG_DKDV_ROW_DOTS=True), "wg2d": _form(WG_DKDV_WARPGROUPS=2, WG_DKDV_ROW_DOTS=True),
         # two warpgroups in ping-pong (the same bits as wg2)
         "wg2p": _form(WG_DKDV_WARPGROUPS=2, WG_DKDV_PINGPONG=True),
         # one warpgroup compiled for three blocks an SM (the same bits as wg1)
         "wg1t": _form(WG_DKDV_BLOCKS=3),
         # dK/dV on a TMA producer with setmaxnreg, 128 keys a block (the same bits as wg2)
         "tma": _form(WG_DKDV_WARPGROUPS=2, WG_DKDV_TMA=True),
         # dQ on a TMA producer and wgmma after wg1, wg2 or tma (dk, dv their bits)
         "wg1q": _form(DQ_TMA=True), "wg2q": _form(WG_DKDV_WARPGROUPS=2, DQ_TMA=True),
         "tmaq": _form(WG_DKDV_WARPGROUPS=2, WG_DKDV_TMA=True, DQ_TMA=True),
         # the TMA dK/dV's forms: three stages, the deferred wait, both (tma's bits)
         "tma3": _form(WG_DKDV_WARPGROUPS=2, WG_DKDV_TMA=True, DKDV_TMA_FORM=1),
         "tmad": _form(WG_DKDV_WARPGROUPS=2, WG_DKDV_TMA=True, DKDV_TMA_FORM=2),
         "tmad3": _form(WG_DKDV_WARPGROUPS=2, WG_DKDV_TMA=True, DKDV_TMA_FORM=3),
         "tmar": _form(WG_DKDV_WARPGROUPS=2, WG_DKDV_TMA=True, DKDV_TMA_FORM=4),
         # tma resident (one block an SM, the key blocks by tickets), and with the TMA dQ as the step runs it
         "tmarr": _form(WG_DKDV_WARPGROUPS=2, WG_DKDV_TMA=True, DKDV_TMA_FORM=5),
         "tmarrq": _form(WG_DKDV_WARPGROUPS=2, WG_DKDV_TMA=True, DKDV_TMA_FORM=5, DQ_TMA=True),
         # the TMA dQ resident after tma, and after tmarr (both resident)
         "tmaqr": _form(WG_DKDV_WARPGROUPS=2, WG_DKDV_TMA=True, DQ_TMA=True, DQ_TMA_RESIDENT=True),
         "tmarrqr": _form(WG_DKDV_WARPGROUPS=2, WG_DKDV_TMA=True, DKDV_TMA_FORM=5, DQ_TMA=True, DQ_TMA_RESIDENT=True),
         # tmarrq with the TMA dQ's grid swapped, a head's query blocks together (tmarrq's bits)
         "tmarrqf": _form(WG_DKDV_WARPGROUPS=2, WG_DKDV_TMA=True, DKDV_TMA_FORM=5, DQ_TMA=True, DQ_TMA_ORDER=1),
         # tmarrqf a group of 1, 2 or 4 batches at a time, each group's dQ after its dK/dV (tmarrqf's bits)
         **{f"tmarrqfg{g}": _form(WG_DKDV_WARPGROUPS=2, WG_DKDV_TMA=True, DKDV_TMA_FORM=5, DQ_TMA=True, DQ_TMA_ORDER=1,
                                  DS_GROUP_BATCHES=g) for g in (1, 2, 4)}}
# forms built to give another's bits (dq, dk and dv alike): each pair is checked where both ran
SAME_BITS = {"ds64": "ds", "ds_l2": "ds", "wg2": "wg1", "tma": "wg2", "tma3": "tma", "tmad": "tma", "tmad3": "tma",
             "tmar": "tma", "wg1q": "wg1", "wg2q": "wg2", "tmaq": "tma", "tmarr": "tma", "tmarrq": "tmaq", "tmaqr": "tmaq",
             "tmarrqr": "tmaq", "tmarrqf": "tmarrq", "tmarrqfg1": "tmarrqf", "tmarrqfg2": "tmarrqf",
             "tmarrqfg4": "tmarrqf"}
SEED, OFFSET = 1337, 1 << 32
_OWN = tuple(getattr(attention, name) for name in SETTINGS)
# TR2_BWD_FORMS=ds_l2,wg1,wg2: only those forms (recompute, the reference of the table, always)
ONLY = [f for f in os.environ.get("TR2_BWD_FORMS", "").split(",") if f]


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
             and (not f.startswith("wg") or attention.runtime.built_for(attention.FILE) == "sm_90a")]
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
