"""Shared libraries a process mapped: /proc/<pid>/maps read, NVIDIA's libraries and the driver's told apart."""
from __future__ import annotations

import os
import re
import threading
import time

POLL_FAST_S, POLL_SLOW_S = 0.05, 0.25  # the first 5 s fast (imports map most libraries), then slower

_SO = re.compile(r"\.so(\.[0-9][0-9A-Za-z_.-]*)?$")

# NVIDIA's libraries, by the name before ".so" (first match wins): (pattern, is the driver's)
_NVIDIA = [
    (re.compile(r"^libcuda$"), True),
    (re.compile(r"^libnvidia-.+$"), True),            # libnvidia-ml, -ptxjitcompiler, -gpucomp, ...
    (re.compile(r"^libnvcuvid$|^libnvoptix$|^libcudadebugger$"), True),
    (re.compile(r"^libcudart$|^libcudadevrt$"), False),
    (re.compile(r"^libcublas(Lt)?$|^libnvblas$"), False),
    (re.compile(r"^libnvrtc(-builtins)?$"), False),
    (re.compile(r"^libcudnn.*$"), False),
    (re.compile(r"^libnccl.*$"), False),
    (re.compile(r"^libnvJitLink$|^libnvjitlink$"), False),
    (re.compile(r"^libcupti$|^libnvperf.*$|^libpcsamplingutil$|^libcheckpoint$"), False),
    (re.compile(r"^libcufft.*$|^libcurand$|^libcusparse.*$|^libcusolver.*$|^libcufile.*$"), False),
    (re.compile(r"^libnvToolsExt$|^libnvtx.*$|^libnvshmem.*$|^libnpp.*$|^libnvjpeg$|^libcutensor.*$"), False),
    (re.compile(r"^libnvfatbin$|^libnvptxcompiler.*$|^libnvvm$|^libcudss.*$|^libcublasmp.*$|^libcal$"), False),
]


def parse_maps(text: str) -> list[str]:
    """The files of shared libraries in a /proc/<pid>/maps text, each once, in order of first mapping.

    A line is `address perms offset dev inode [pathname]`; the pathname may hold spaces and may end
    in ' (deleted)'. Anonymous mappings, [heap], [stack], [vdso] and non-library files are left out.
    """
    out, seen = [], set()
    for line in text.splitlines():
        parts = line.split(None, 5)
        if len(parts) < 6:
            continue
        path = parts[5].strip()
        if path.endswith(" (deleted)"):
            path = path[: -len(" (deleted)")]
        if not path.startswith("/") or not is_shared_library(path):
            continue
        if path not in seen:
            seen.add(path)
            out.append(path)
    return out


def is_shared_library(path: str) -> bool:
    return bool(_SO.search(os.path.basename(path)))


def library_name(path: str) -> str:
    """'libcublasLt' for '/x/libcublasLt.so.13.1.0.3'; 'libnvrtc-builtins' for '.../libnvrtc-builtins.so.13.0'."""
    base = os.path.basename(path)
    i = base.find(".so")
    return base[:i] if i > 0 else base


def nvidia_kind(path: str):
    """'driver' for the driver's libraries, 'library' for NVIDIA's other libraries, None otherwise."""
    name = library_name(path)
    for pat, is_driver in _NVIDIA:
        if pat.match(name):
            return "driver" if is_driver else "library"
    # a library of NVIDIA's wheels (site-packages/nvidia/...) that the list above does not name
    if name.startswith("lib") and re.search(r"[/\\]site-packages[/\\]nvidia[/\\]", path):
        return "library"
    return None


def nvidia_libraries(paths) -> list[str]:
    """NVIDIA's libraries (driver included) by name, sorted, each once."""
    return sorted({library_name(p) for p in paths if nvidia_kind(p)})


def nvrtc_opened(paths) -> bool:
    """Protocol rule 61: an opened libnvrtc shows that NVRTC compiled at least one module."""
    return any(library_name(p).startswith("libnvrtc") for p in paths)


def _children_map() -> dict:
    kids: dict[int, list[int]] = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/stat") as f:
                stat = f.read()
            ppid = int(stat.rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        kids.setdefault(ppid, []).append(int(entry.name))
    return kids


def process_tree(pid: int) -> list[int]:
    kids, out, todo = _children_map(), [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        todo.extend(kids.get(p, []))
    return out


def read_maps(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/maps") as f:
            return f.read()
    except OSError:
        return ""


class MapsPoller:
    """Reads /proc/<pid>/maps of a running process and its descendants in a thread, a few times a second, while
    in its `with` block; `libraries` is the union of the main process's, `children` what only its children mapped."""

    def __init__(self, pid: int, interval_s: float = POLL_SLOW_S):
        self.pid, self.interval_s = pid, interval_s
        self.libraries: dict[str, bool] = {}
        self.children: dict[str, bool] = {}
        self.polls = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def poll(self) -> None:
        for p in process_tree(self.pid):
            for lib in parse_maps(read_maps(p)):
                (self.libraries if p == self.pid else self.children).setdefault(lib, True)
        self.polls += 1

    def _loop(self):
        t0 = time.monotonic()
        while not self._stop.is_set():
            self.poll()
            self._stop.wait(POLL_FAST_S if time.monotonic() - t0 < 5 else self.interval_s)

    def all_libraries(self) -> list[str]:
        return list(self.libraries) + [p for p in self.children if p not in self.libraries]

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join(timeout=5)
        return False
