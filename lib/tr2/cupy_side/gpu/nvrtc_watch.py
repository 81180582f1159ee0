"""NVRTC at run time: which modules were compiled in this process, by CuPy and by tr2, and whether libnvrtc is mapped.

Issue 9 (item 4) asks that a training run load its cubins and not open NVRTC at all where they are built; the
footprint stage (protocol rule 61) sees only that libnvrtc was mapped, not why. Two things compile here: gpu/cubins.py
(a missing or stale cubin, with its notice; `cubins.COMPILED`), and CuPy itself, the first time the process uses one
of its own kernels (an elementwise operation, a reduction, a copy into a strided view, `fill` of a value other than
0). A CuPy kernel found in CuPy's disk cache opens NVRTC all the same: cupy/cuda/compiler.py's
`_compile_with_cache_cuda` compiles an empty program to learn the compiler's version before it looks the kernel up.
`install` wraps that one function to record each module's kernel names; it is what every CuPy kernel compiles
through (CuPy 13-14), and where a CuPy lacks it, the line says the CuPy side was not watched.

Each CuPy module is named with the tr2 lines that led to it, innermost first, at most three
(`cupy_fill@cupy_side/gpu/backend.py:121<cupy_side/model.py:59<cupy_side/train.py:64`): the compile happens deep
inside CuPy, and without the caller a name like cupy_fill does not say which of our calls to change.

The train log's line (trainlog.nvrtc_line) then says what compiled and whether libnvrtc was mapped; the footprint
reads it back (trainlog.parse_nvrtc_line) beside the maps it polled.
"""
from __future__ import annotations

import os
import re
import sys
from pathlib import Path

from ...trainlog import nvrtc_line
from . import cubins

_KERNEL = re.compile(r"__global__\s+(?:__launch_bounds__\s*\([^)]*\)\s*)?void\s+(\w+)")

_TR2_ROOT = str(Path(__file__).resolve().parents[2])   # lib/tr2
_CALLERS = 3

_cupy_modules: list[str] = []
_watched: bool | None = None   # None: install() not called; False: this CuPy has no function to wrap


def module_name(source: str) -> str:
    """The kernels a module defines, joined by '+' ('unnamed' where the source names none)."""
    return "+".join(dict.fromkeys(_KERNEL.findall(source))) or "unnamed"


def callers(frames, root: str = _TR2_ROOT, most: int = _CALLERS) -> str:
    """'@file:line<file:line...': the innermost `most` of frames' (filename, line) pairs that lie in tr2 (paths relative
    to root; this module's own frames left out), or '' where none does."""
    here = os.path.abspath(__file__)
    found = []
    for filename, lineno in frames:
        path = os.path.abspath(filename)
        if path != here and path.startswith(root + os.sep):
            found.append(f"{os.path.relpath(path, root)}:{lineno}")
            if len(found) == most:
                break
    return "@" + "<".join(found) if found else ""


def _stack():
    f = sys._getframe(1)
    while f is not None:
        yield f.f_code.co_filename, f.f_lineno
        f = f.f_back


def install(compiler=None) -> bool:
    """Record every module CuPy compiles from now on in this process (once; later calls do nothing). compiler:
    cupy.cuda.compiler, or a stand-in (tests). Returns whether CuPy's compiles are watched."""
    global _watched
    if _watched is not None:
        return _watched
    if compiler is None:
        from cupy.cuda import compiler
    inner = getattr(compiler, "_compile_with_cache_cuda", None)
    if inner is None:
        _watched = False
        return False

    def recording(source, *args, **kwargs):
        _cupy_modules.append(module_name(source) + callers(_stack()))
        return inner(source, *args, **kwargs)

    compiler._compile_with_cache_cuda = recording
    _watched = True
    return True


def libnvrtc_mapped(maps_path: str = "/proc/self/maps") -> bool:
    """Whether a libnvrtc (or libnvrtc-builtins) file is mapped: footprint.maps.nvrtc_opened's test, written out here
    because importing tr2.footprint would map its own libraries into the process it measures."""
    with open(maps_path) as f:
        fields = (line.split(None, 5) for line in f)
        return any(len(x) == 6 and os.path.basename(x[5].strip()).startswith("libnvrtc") for x in fields)


def line() -> str:
    """The train log's account: libnvrtc mapped or not, and the modules CuPy and tr2 compiled in this process."""
    return nvrtc_line(libnvrtc_mapped(), list(_cupy_modules) if _watched else None, list(cubins.COMPILED))
