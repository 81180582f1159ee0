"""One backward of attention with the bulk form (TR2_ATTN_DQ_BULK=SPLIT, 1 or 2) beside the default,
on one model's shape (bf16 under half roundings, dropout as the model trains), before a device call spends its minutes
on the form: its first run hung (docs/perf.md, fifty-sixth session), which cost a whole call. One line: whether dk and
dv are the default's bits and how far dq lies from the default's (another order of sums, so not zero), then the
verdict; exit 0 where the form may go on, 1 where it may not. Run it under `timeout`: a hang is the first thing it
asks about.

    PYTHONPATH=lib:scripts python3 scripts/probes/dq_bulk_smoke.py [MODEL [SPLIT]]
"""
from __future__ import annotations

import sys

import numpy as np

# dq's sums differ from the default's by the order of float32 adds over 128-key blocks, each part from the same
# half-type operands: far below this bound; an order or a swizzle wrong lands at order 1
DQ_REL_BOUND = 1e-2


def verdict(dkdv_same: bool, dq_rel: float, finite: bool) -> tuple[bool, str]:
    """(may the form go on, why): dk and dv must be the default's bits, dq finite and within DQ_REL_BOUND of the
    default's (largest difference over the largest element)."""
    if not finite:
        return False, "dq holds non-finite values"
    if not dkdv_same:
        return False, "dk and dv are not the default's bits"
    if not dq_rel <= DQ_REL_BOUND:
        return False, f"dq lies {dq_rel:.2e} from the default's (bound {DQ_REL_BOUND:.0e})"
    return True, "dk and dv the default's bits, dq within the bound"


def main(argv=None) -> int:
    import cupy as cp

    from tr2.cupy_side.gpu import attention
    from tr2.cupy_side.gpu.backend import CudaBackend
    from tr2.cupy_side.gpu.cast import to_half
    from tr2.models import load_model

    args = list(argv if argv is not None else sys.argv[1:])
    model = args[0] if args else "gpt2-small"
    split = int(args[1]) if len(args) > 1 else 1
    cfg = load_model(model)
    B, T, C, H = cfg.batch_size, cfg.block_size, cfg.n_embd, cfg.n_head
    be = CudaBackend("bfloat16", tf32=True, half_roundings=True)
    rs = np.random.default_rng(0)
    qkv = to_half(cp.asarray(rs.standard_normal((B, T, 3 * C), dtype=np.float32)), be.ctx.kind)
    dout = to_half(cp.asarray(rs.standard_normal((B, T, C), dtype=np.float32)), be.ctx.kind)
    _, saved = be.attention_forward(qkv, H, cfg.dropout, 1337, 1 << 32)
    outs = {}
    for bulk in (0, 1):
        attention.DQ_BULK = split if bulk else 0
        outs[bulk] = be.to_host(be.attention_backward(dout, qkv, saved, H, cfg.dropout, 1337, 1 << 32))
        cp.cuda.Device().synchronize()
    default, bulk = (outs[k].astype(np.float64) for k in (0, 1))
    finite = bool(np.isfinite(bulk).all())
    dq_rel = float(np.abs(bulk[..., :C] - default[..., :C]).max() / max(np.abs(default[..., :C]).max(), 1e-30))
    same = bool(np.array_equal(outs[0][..., C:], outs[1][..., C:]))
    ok, why = verdict(same, dq_rel, finite)
    print(f"dq bulk smoke {model} bf16, split {split}: dk/dv {'the default bits' if same else 'DIFFER'}, dq max rel {dq_rel:.2e}: "
          f"{'PASS' if ok else 'FAIL'} ({why})", flush=True)
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
