"""What gpu/attention.py's backward() hands the kernels, recorded without a GPU: its launches (kernel, grid, block,
every argument) and tensor maps over stand-in arrays, for a lib/ checkout at its default settings.

    python3 scripts/attention_launch_plan.py LIB_PARENT > plan.json

Why: a change to backward()'s Python that must not change what the default path launches (the twenty-eighth
session's groups of batches reshaped it; the removal of the forms measured slower, at ee6b673, cut it down) is shown
so by two commits' plans being identical, before any device time; tests/test_attention_switches_cpu.py uses
record_backward for the default launches' names and grids. Shapes: gpt2-small's and
gpt2-medium's (8 x 12 / 16 heads of 1024), the char model's (64 x 6 of 256) and an odd one (3 x 2 of 1000, dropout),
bf16 and fp16 under half roundings.
"""
from __future__ import annotations

import json
import sys
import types
from pathlib import Path

import numpy as np


class FakeArray:
    """Just enough of a device array for backward()'s bookkeeping: a shape, an element type, an address, and slices
    of whole rows of the first axis."""

    def __init__(self, shape, dtype, ptr):
        self.shape, self.dtype = tuple(shape), np.dtype(dtype)
        self.itemsize, self.size = self.dtype.itemsize, int(np.prod(shape))
        self.data = types.SimpleNamespace(ptr=ptr)
        self.flags = types.SimpleNamespace(c_contiguous=True)

    def __getitem__(self, s):
        assert isinstance(s, slice) and s.step is None, s
        start, stop = s.start or 0, self.shape[0] if s.stop is None else s.stop
        row = int(np.prod(self.shape[1:])) * self.itemsize
        return FakeArray((stop - start,) + self.shape[1:], self.dtype, self.data.ptr + start * row)


def record_backward(attention, set_attr=setattr, B=8, H=12, T=1024, p=0.2, dtype="bfloat16", offset=1 << 32):
    """backward() of B x H heads of rows of T (head size 64) under half roundings, with its launches and tensor maps
    recorded (nothing runs; set_attr patches the module: a test's monkeypatch.setattr restores it): ([(kernel, grid,
    block, args, keywords)], the dqkv it returns); a map is ("map", address, rows, cols, planes)."""
    C, addresses = H * 64, iter(range(1 << 40, 1 << 50, 1 << 36))
    fake_cp = types.SimpleNamespace(empty=lambda shape, dtype: FakeArray(shape, dtype, next(addresses)),
                                    cuda=types.SimpleNamespace(Device=lambda: types.SimpleNamespace(id=0)))
    ws = types.SimpleNamespace(get=lambda name, shape, dt: FakeArray(shape, dt, next(addresses)),
                               zeros=lambda name, shape, dt: FakeArray(shape, dt, 7 << 32))
    ctx = types.SimpleNamespace(half=True, half_roundings=True, dtype=dtype, out_dtype=np.uint16, round_kind=1,
                                kind=1, tf32=True, ws=ws)
    launched = []

    def encode(matrix, rows, cols, dt, planes=0):
        assert matrix.size == rows * cols * (planes or 1), (matrix.shape, rows, cols, planes)
        return ("map", matrix.data.ptr, rows, cols, planes)
    set_attr(attention, "cp", fake_cp)
    set_attr(attention, "launch", lambda f, name, grid, block, args, **k: launched.append((name, grid, block, args, k)))
    set_attr(attention._tma, "encode", encode)
    set_attr(attention.runtime, "built_for", lambda f: "sm_90a")
    set_attr(attention.runtime, "sm_count", lambda d: 132)
    qkv = FakeArray((B, T, 3 * C), np.uint16, 1 << 33)
    saved = attention.AttentionSaved(FakeArray((B, T, C), np.uint16, 3 << 33),
                                     FakeArray((B, H, T), np.float32, 4 << 33), qkv)
    dqkv = attention.backward(ctx, FakeArray((B, T, C), np.uint16, 2 << 33), qkv, saved, H, p, 1337, offset)
    return launched, dqkv


def plain(x):
    """A launch as JSON: arrays by address, shape and type; numpy scalars by type and value."""
    if isinstance(x, FakeArray):
        return ["array", x.data.ptr, list(x.shape), str(x.dtype)]
    if isinstance(x, (tuple, list)):
        return [plain(v) for v in x]
    if isinstance(x, dict):
        return {k: plain(v) for k, v in x.items()}
    if isinstance(x, np.generic):
        return [type(x).__name__, x.item()]
    return x


def main(argv) -> int:
    sys.path.insert(0, argv[0] + "/lib")
    for name in [m for m in sys.modules if m == "tr2" or m.startswith("tr2.")]:   # imported already (a .pth hook)
        del sys.modules[name]                                                   # from another checkout: that one's
    sys.modules.setdefault("cupy", types.ModuleType("cupy"))   # imported at the top, touched only to launch
    from tr2.cupy_side.gpu import attention
    assert attention.__file__.startswith(str(Path(argv[0]).resolve())), attention.__file__
    plans = {f"{B}x{H}x{T} p{p} {dt}": plain(record_backward(attention, B=B, H=H, T=T, p=p, dtype=dt)[0])
             for B, H, T, p in [(8, 12, 1024, 0.0), (8, 16, 1024, 0.0), (64, 6, 256, 0.2), (3, 2, 1000, 0.2)]
             for dt in ("bfloat16", "float16")}
    print(json.dumps(plans, sort_keys=True))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
