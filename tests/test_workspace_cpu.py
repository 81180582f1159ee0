"""gpu/runtime.py's Workspace, checked without a GPU over a stand-in CuPy: buffers kept by (name, shape, type), and
constant's tables (the staggered chain's item order) copied to the device once, when first asked for."""
import types

import numpy as np


def _workspace(over_stand_in_cupy, monkeypatch):
    runtime = over_stand_in_cupy("tr2.cupy_side.gpu.runtime")
    copies = []

    def asarray(values):
        copies.append(values)
        return ("device", len(copies))
    monkeypatch.setattr(runtime, "cp", types.SimpleNamespace(
        asarray=asarray, empty=lambda shape, dtype: ("empty", shape), zeros=lambda shape, dtype: ("zeros", shape)))
    return runtime.Workspace(), copies


def test_a_constant_is_copied_once_a_name_and_kept(over_stand_in_cupy, monkeypatch):
    ws, copies = _workspace(over_stand_in_cupy, monkeypatch)
    table = np.arange(6, dtype=np.int32)
    first = ws.constant("order:96:8:8", table)
    assert ws.constant("order:96:8:8", table) is first and len(copies) == 1 and copies[0] is table
    other = ws.constant("order:96:8:16", table[::-1].copy())   # another name: another table
    assert other is not first and len(copies) == 2
    # a constant, a scratch buffer and a zeroed one of the same name and shape are three buffers
    assert ws.get("order:96:8:8", (6,), np.int32) == ("empty", (6,))
    assert ws.zeros("order:96:8:8", (6,), np.int32) == ("zeros", (6,))
    assert len(copies) == 2 and ws.constant("order:96:8:8", table) is first
