"""Where the wgmma dK/dV kernel (attention.USE_WG_DKDV) departs from the mma.sync one at T = 65, 129 (call 3 of
results/h200-perf-20261201h: dq wrong there, right at T = 64, 192, 256, 1000, 1024): each form's ds_t (filled with
NaN bits first, so that what no kernel wrote shows), dk, dv and dq against the NumPy form, and the mma.sync kernel
also with ds_t's rows as wide as the wgmma form's (ldq a multiple of 64): whether the width alone breaks dQ.
On the GPU machine:   PYTHONPATH=lib python3 scripts/probes/wg_dkdv_debug.py
"""
from __future__ import annotations

import numpy as np
import cupy as cp

from tr2.cupy_side import rng
from tr2.cupy_side.backend import NumpyBackend
from tr2.cupy_side.gpu import attention
from tr2.cupy_side.gpu.backend import CudaBackend

CAPTURED = []


class _CupyShim:
    """attention.py's cp, with empty() of uint16 3-d arrays (ds_t) filled with NaN bits and kept."""
    def __getattr__(self, name):
        return getattr(cp, name)

    def empty(self, shape, dtype=np.float32):
        if np.dtype(dtype) == np.uint16 and len(shape) == 3:
            a = cp.full(shape, 0x7FC1, dtype=np.uint16)
            CAPTURED.append(a)
            return a
        return cp.empty(shape, dtype=dtype)


def rel(a, b) -> float:
    return float(np.linalg.norm(a - b) / max(np.linalg.norm(b), 1e-30))


def main() -> int:
    attention.cp = _CupyShim()
    plain_shape = attention.ds_shape
    be = CudaBackend("bfloat16", False, True)
    ref = NumpyBackend("bfloat16", False, True)
    attention.FOLD_KEY_BLOCKS = 0
    for T in (64, 65, 129):
        B, H, hs = 1, 1, 64
        C = H * hs
        rs = np.random.default_rng(T)
        qkv = rs.standard_normal((B, T, 3 * C), dtype=np.float32)
        dout = rs.standard_normal((B, T, C), dtype=np.float32)
        seed, offset, p = 1337, rng.site_offset(11, 7, 1), 0.0
        _, rsaved = ref.attention_forward(qkv, H, p, seed, offset)
        want = ref.attention_backward(dout, qkv, rsaved, H, p, seed, offset)
        _, saved = be.attention_forward(cp.asarray(qkv), H, p, seed, offset)
        forms = {}
        for name, wg, wide in (("mma", False, False), ("mma_wide", False, True), ("wg1", True, False)):
            attention.USE_WG_DKDV = wg
            attention.ds_shape = (lambda ctx, B_, H_, T_, hs_: (B_ * H_, T_, -(-T_ // 64) * 64)) if wide else plain_shape
            CAPTURED.clear()
            got = be.to_host(be.attention_backward(cp.asarray(dout), cp.asarray(qkv), saved, H, p, seed, offset))
            ds = next(cp.asnumpy(a) for a in CAPTURED if a.shape[:2] == (B * H, T) and a.shape[2] != 3 * C)
            forms[name] = (got, ds)
            errs = {part: rel(got[..., s], want[..., s]) for part, s in
                    (("dq", slice(0, C)), ("dk", slice(C, 2 * C)), ("dv", slice(2 * C, 3 * C)))}
            upper = np.triu(np.ones((T, T), dtype=bool))   # ds_t[j, i] for keys j <= queries i: what dQ sums
            unwritten = int(((ds[0, :, :T] == 0x7FC1) & upper).sum())
            print(f"T={T} {name:9} ldq={ds.shape[2]} dq {errs['dq']:.2e} dk {errs['dk']:.2e} dv {errs['dv']:.2e} "
                  f"ds_t (j <= i) never written: {unwritten}", flush=True)
        a, b = forms["mma_wide"][1][0, :, :T], forms["wg1"][1][0, :, :T]
        upper = np.triu(np.ones((T, T), dtype=bool))   # rows j = keys, columns i = queries, j <= i
        diff = np.argwhere((a != b) & upper)
        print(f"T={T} ds_t wg1 against mma_wide (j <= i): {len(diff)} elements differ; first {diff[:8].tolist()}", flush=True)
        if len(diff):
            j, i = diff[0]
            print(f"T={T} ds_t[{j}, {i}-{i + 7}] wg1 {b[j, i:i + 8].tolist()} mma_wide {a[j, i:i + 8].tolist()}")
            print(f"T={T} rows of ds_t with a difference: {sorted(set(int(r) for r, _ in diff))[:40]}")
            print(f"T={T} columns with a difference: {sorted(set(int(c) for _, c in diff))[:70]}")
        for part, s in (("dq", slice(0, C)), ("dk", slice(C, 2 * C)), ("dv", slice(2 * C, 3 * C))):
            d = np.argwhere(forms["wg1"][0][0][..., s] != forms["mma"][0][0][..., s])
            rows = sorted(set(int(r) for r, _ in d))
            print(f"T={T} {part} wg1 against mma: rows that differ {rows[:20]}{' ...' if len(rows) > 20 else ''}",
                  flush=True)
    attention.ds_shape = plain_shape
    attention.cp = cp
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
