"""Shared libraries a process mapped: /proc/<pid>/maps read, NVIDIA's libraries and the driver's told apart."""
from __future__ import annotations

import os
import re
import threading
import time

POLL_FAST_S, POLL_SLOW_S = 0.05, 0.25  # the first 5 s fast (imports map most libraries), then slower

_SO = re.compile(r"\.so(\.[0-9][0-9A-Za-z_.-]*)?$")

# NVIDIA's libraries, by the name before ".so": the driver's (the host provides them), then the others
_DRIVER = re.compile(r"^(libcuda|libnvidia-.+|libnvcuvid|libnvoptix|libcudadebugger)$")   # libnvidia-ml, -ptxjitcompiler
_LIBRARY = re.compile("^(" + "|".join((
    r"libcudart|libcudadevrt|libcublas(Lt)?|libnvblas|libnvrtc(-builtins)?|libcudnn.*|libnccl.*|libnvJitLink|libnvjitlink",
    r"libcupti|libnvperf.*|libpcsamplingutil|libcheckpoint",
    r"libcufft.*|libcurand|libcusparse.*|libcusolver.*|libcufile.*",
    r"libnvToolsExt|libnvtx.*|libnvshmem.*|libnpp.*|libnvjpeg|libcutensor.*",
    r"libnvfatbin|libnvptxcompiler.*|libnvvm|libcudss.*|libcublasmp.*|libcal")) + ")$")


def parse_maps(text: str) -> list[str]:
    """The files of shared libraries in a /proc/<pid>/maps text, each once, in order of first mapping.

    A line is `address perms offset dev inode [pathname]`; the pathname may hold spaces and may end
    in ' (deleted)'. Anonymous mappings, [heap], [stack], [vdso] and non-library files are left out.
    """
    out = {}
    for parts in (line.split(None, 5) for line in text.splitlines()):
        path = parts[5].strip().removesuffix(" (deleted)") if len(parts) == 6 else ""
        if path.startswith("/") and _SO.search(os.path.basename(path)):
            out.setdefault(path)
    return list(out)


def library_name(path: str) -> str:
    """'libcublasLt' for '/x/libcublasLt.so.13.1.0.3'; 'libnvrtc-builtins' for '.../libnvrtc-builtins.so.13.0'."""
    base = os.path.basename(path)
    i = base.find(".so")
    return base[:i] if i > 0 else base


def nvidia_kind(path: str):
    """'driver' for the driver's libraries, 'library' for NVIDIA's other libraries, None otherwise."""
    name = library_name(path)
    if _DRIVER.match(name):
        return "driver"
    # or a library of NVIDIA's wheels (site-packages/nvidia/...) that the list above does not name
    if _LIBRARY.match(name) or (name.startswith("lib") and re.search(r"[/\\]site-packages[/\\]nvidia[/\\]", path)):
        return "library"
    return None


def nvidia_libraries(paths) -> list[str]:
    """NVIDIA's libraries (driver included) by name, sorted, each once."""
    return sorted({library_name(p) for p in paths if nvidia_kind(p)})


def nvrtc_opened(paths) -> bool:
    """Protocol rule 61: an opened libnvrtc shows that NVRTC compiled at least one module."""
    return any(library_name(p).startswith("libnvrtc") for p in paths)


def process_tree(pid: int) -> list[int]:
    kids: dict[int, list[int]] = {}
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            try:
                with open(f"/proc/{entry.name}/stat") as f:
                    ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            kids.setdefault(ppid, []).append(int(entry.name))
    out, todo = [], [pid]
    while todo:
        out.append(todo.pop())
        todo.extend(kids.get(out[-1], []))
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
