"""Which of the v tile's two descriptor offsets is which: the wgmma forward (attention.cu's attention_forward_wg)
with each order of (LBO, SBO), against the mma.sync forward and the NumPy form, bf16 and f16 under half roundings,
with and without dropout. Prints a line per try and, last, `V_STRIDES=lbo,sbo` of the order that matches (or
`V_STRIDES=none`). On the GPU machine:   python3 scripts/attention_wg_probe.py
"""
from __future__ import annotations

import numpy as np
import cupy as cp

from tr2.cupy_side import rng
from tr2.cupy_side.backend import NumpyBackend
from tr2.cupy_side.gpu import attention
from tr2.cupy_side.gpu.backend import CudaBackend

TOL = 3e-2   # the half builds' attention tolerance is far below this; a wrong layout gives errors of order 1


def rel(a, b) -> float:
    return float(np.abs(a - b).max() / max(np.abs(b).max(), 1e-30))


def main() -> int:
    B, T, H, hs = 2, 200, 3, 64
    rs = np.random.default_rng(5)
    qkv = rs.standard_normal((B, T, 3 * H * hs), dtype=np.float32)
    seed, offset = 1337, rng.site_offset(11, 7, 1)
    found = []
    for order in ((1024, 128), (128, 1024)):
        ok = True
        for dtype in ("bfloat16", "float16"):
            be = CudaBackend(dtype, False, True)
            ref = NumpyBackend(dtype, False, True)
            for p in (0.0, 0.2):
                attention.V_STRIDES, attention.USE_WGMMA = order, True
                wg, _ = be.attention_forward(cp.asarray(qkv), H, p, seed, offset)
                attention.USE_WGMMA = False
                mma, _ = be.attention_forward(cp.asarray(qkv), H, p, seed, offset)
                attention.USE_WGMMA = True
                want, _ = ref.attention_forward(qkv, H, p, seed, offset)
                e_ref, e_mma = rel(be.to_host(wg), want), rel(be.to_host(wg), be.to_host(mma))
                good = e_ref < TOL and e_mma < TOL
                ok &= good
                print(f"v strides {order} {dtype} p={p}: |wg - numpy| {e_ref:.2e}  |wg - mma.sync| {e_mma:.2e}  "
                      f"(mma.sync - numpy {rel(be.to_host(mma), want):.2e})  {'ok' if good else 'WRONG'}")
        if ok:
            found.append(order)
    print("V_STRIDES=" + (",".join(map(str, found[0])) if len(found) == 1 else "none"))
    return 0 if len(found) == 1 else 1


if __name__ == "__main__":
    raise SystemExit(main())
