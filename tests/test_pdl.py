"""gpu/pdl.py without a GPU: the driver structures' layout (cuda.h's, on a 64-bit host), the one launch attribute,
the packing of kernel arguments, and that every kernel begins with grid_dependency_entry (a kernel without it,
launched programmatically, could read its inputs before the kernel writing them had finished)."""
from __future__ import annotations

import ctypes
import re

import numpy as np
import pytest

from tr2.cupy_side import gpu
from tr2.cupy_side.gpu import pdl


def test_the_structures_have_cuda_h_layout():
    assert ctypes.sizeof(ctypes.c_void_p) == 8
    assert ctypes.sizeof(pdl.LaunchAttribute) == 72 and pdl.LaunchAttribute.value.offset == 8
    c = pdl.LaunchConfig
    assert [c.gridDimX.offset, c.blockDimX.offset, c.sharedMemBytes.offset] == [0, 12, 24]
    assert [c.hStream.offset, c.attrs.offset, c.numAttrs.offset, ctypes.sizeof(c)] == [32, 40, 48, 56]


def test_the_attribute_allows_programmatic_serialization():
    a = pdl.programmatic_attribute()
    assert a.id == 6
    raw = bytes(a)[8:]
    assert raw[:4] == (1).to_bytes(4, "little") and raw[4:] == bytes(60)


def test_dims():
    assert pdl.dims(7) == (7, 1, 1)
    assert pdl.dims((3, 4)) == (3, 4, 1)
    assert pdl.dims((2, 3, 4)) == (2, 3, 4)
    for bad in [(0,), (1, 2, 3, 4), ()]:
        with pytest.raises(ValueError, match="allowed are one to three positive sizes"):
            pdl.dims(bad)


class _FakeDeviceArray:
    """What argument_bytes reads of a CuPy array: .data.ptr."""
    class _Ptr:
        ptr = 0x7F00_1234_5678
    data = _Ptr()


def test_arguments_become_the_bytes_the_kernel_reads():
    held = pdl.argument_bytes([np.int32(-2), np.uint64(2 ** 63 + 5), np.float32(0.5), _FakeDeviceArray(), np.int64(9)])
    assert [h.tobytes() for h in held] == [
        (-2).to_bytes(4, "little", signed=True), (2 ** 63 + 5).to_bytes(8, "little"), np.float32(0.5).tobytes(),
        (0x7F00_1234_5678).to_bytes(8, "little"), (9).to_bytes(8, "little")]


@pytest.mark.parametrize("bad, kind", [(5, "int"), (0.5, "float"), (np.zeros(3), "ndarray"), (None, "NoneType")])
def test_an_argument_of_unknown_size_is_refused(bad, kind):
    with pytest.raises(TypeError, match=rf"kernel argument 1 is a {kind}; allowed are a CuPy array"):
        pdl.argument_bytes([np.int32(1), bad])


def _kernel_bodies(text: str):
    """(kernel name, the body's first statement) of every extern "C" __global__ kernel in a .cu file's text."""
    for m in re.finditer(r'extern "C" __global__[\s\\]+void[\s\\]+(?:__launch_bounds__\([^)]*\)[\s\\]*)?([\w#]+)\s*\(',
                         text):
        body = text.index("{", m.end())
        first = text[body + 1:].lstrip(" \\\n")
        yield m.group(1), first.split(";", 1)[0].strip() + ";"


def test_every_kernel_begins_with_grid_dependency_entry():
    seen = 0
    for name in gpu.kernel_files():
        for kernel, first in _kernel_bodies((gpu.KERNELS_DIR / name).read_text()):
            assert first == "grid_dependency_entry();", f"{name}: {kernel} begins with {first!r}"
            seen += 1
    assert seen >= 60   # every file's kernels were found, not none


def test_the_entry_waits_before_it_lets_the_next_kernel_go():
    src = (gpu.KERNELS_DIR / "common.cuh").read_text()
    body = src[src.index("void grid_dependency_entry()"):]
    body = body[:body.index("\n}\n")]
    assert body.index("griddepcontrol.wait") < body.index("griddepcontrol.launch_dependents")
