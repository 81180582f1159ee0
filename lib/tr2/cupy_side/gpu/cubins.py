"""Kernels built ahead of time: every .cu file compiled once by NVRTC to a cubin for one architecture, kept
in a cache folder under a name keyed by the source's hash and the compile options.

A training run loads the cubins (cuModuleLoad through CuPy's RawModule(path=...)) and never opens NVRTC
when they are all there. A missing or stale cubin (its key changed with the source or the options) is
compiled once, written atomically, and kept, with a one-line notice on stderr. NVRTC needs no GPU, so
`python -m tr2.cupy_side.gpu.cubins --arch sm_90` (or `make kernels`) builds them on any machine.

The folder: $TR2_KERNEL_CACHE, else .cache/kernels/ in the checkout. Each cubin has a JSON beside it
with the source file, the options, the architecture and the NVRTC version that built it.
"""
from __future__ import annotations

import ctypes
import hashlib
import json
import os
import re
import sys
import tempfile
from pathlib import Path

from . import COMPILE_OPTIONS, find_nvidia_lib, kernel_files, load_source

# CuPy's RawModule adds -ftz=true to what it is given; cubins built here add it too, so a kernel computes the
# same whether CuPy or this module compiled it.
NVRTC_OPTIONS = COMPILE_OPTIONS + ("-ftz=true",)
REPO = Path(__file__).resolve().parents[4]


def cache_dir() -> Path:
    env = os.environ.get("TR2_KERNEL_CACHE")
    return Path(env) if env else REPO / ".cache" / "kernels"


# Files with kernels on Hopper's architecture-specific instructions (wgmma): built for sm_90a where the GPU is an
# sm_90 (H100, H200). A cubin for sm_90a loads only there; elsewhere the file is built for the GPU's own
# architecture, and those kernels trap (attention.cu's ATTN_WGMMA) and are never launched (gpu/attention.py).
ARCH_SPECIFIC = ("attention.cu",)


def target(filename: str, arch: str) -> str:
    """The architecture NVRTC builds filename for on a GPU of architecture arch."""
    return arch + "a" if filename in ARCH_SPECIFIC and arch == "sm_90" else arch


def key(filename: str, arch: str) -> str:
    """The cubin's file name: the kernel file's stem, the architecture and a hash of source and options."""
    arch = target(filename, arch)
    h = hashlib.sha256()
    h.update(load_source(filename).encode())
    h.update("\0".join(NVRTC_OPTIONS + (arch,)).encode())
    return f"{Path(filename).stem}-{arch}-{h.hexdigest()[:20]}.cubin"


def path_for(filename: str, arch: str) -> Path:
    return cache_dir() / key(filename, arch)


# ---------------------------------------------------------------------------------------------- NVRTC
class NvrtcNotFound(RuntimeError):
    pass


def _find_libnvrtc() -> str:
    """$TR2_NVRTC, else where gpu.find_nvidia_lib finds it (CuPy's CUDA wheels among the places)."""
    path = find_nvidia_lib("nvrtc", env="TR2_NVRTC")
    if path is None:
        raise NvrtcNotFound("NVRTC not found: install CuPy's CUDA wheels (nvidia-cuda-nvrtc) or set TR2_NVRTC")
    return path


class Nvrtc:
    def __init__(self, path: str | None = None):
        self.path = path or _find_libnvrtc()
        self.lib = ctypes.CDLL(self.path)

    def version(self) -> str:
        major, minor = ctypes.c_int(), ctypes.c_int()
        self.lib.nvrtcVersion(ctypes.byref(major), ctypes.byref(minor))
        return f"{major.value}.{minor.value}"

    def compile(self, source: str, name: str, arch: str, extra: tuple = ()) -> bytes:
        """source -> cubin bytes for arch (e.g. 'sm_90'); raises with NVRTC's log on an error. extra: options added
        after the build's own (e.g. -Xptxas -v); the log of the compile is left in self.last_log."""
        lib = self.lib
        prog = ctypes.c_void_p()
        rc = lib.nvrtcCreateProgram(ctypes.byref(prog), source.encode(), name.encode(), 0, None, None)
        if rc:
            raise RuntimeError(f"nvrtcCreateProgram({name}) failed: {rc}")
        try:
            opts = [o.encode() for o in NVRTC_OPTIONS + (f"--gpu-architecture={arch}",) + tuple(extra)]
            rc = lib.nvrtcCompileProgram(prog, len(opts), (ctypes.c_char_p * len(opts))(*opts))
            n = ctypes.c_size_t()
            lib.nvrtcGetProgramLogSize(prog, ctypes.byref(n))
            log = ctypes.create_string_buffer(n.value)
            lib.nvrtcGetProgramLog(prog, log)
            self.last_log = log.value.decode(errors="replace")
            if rc:
                raise RuntimeError(f"NVRTC could not compile {name} for {arch}:\n{self.last_log}")
            n = ctypes.c_size_t()
            lib.nvrtcGetCUBINSize(prog, ctypes.byref(n))
            buf = ctypes.create_string_buffer(n.value)
            lib.nvrtcGetCUBIN(prog, buf)
            return buf.raw[:n.value]
        finally:
            lib.nvrtcDestroyProgram(ctypes.byref(prog))


def _write_atomic(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name + ".", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def build(filename: str, arch: str, nvrtc: Nvrtc | None = None) -> Path:
    """Compile one kernel file for arch into the cache (always; the caller decides whether it was needed)."""
    nvrtc = nvrtc or Nvrtc()
    path = path_for(filename, arch)
    cubin = nvrtc.compile(load_source(filename), filename, target(filename, arch))
    _write_atomic(path, cubin)
    meta = {"source": filename, "options": list(NVRTC_OPTIONS), "arch": target(filename, arch), "nvrtc": nvrtc.version(),
            "nvrtc_path": os.path.basename(nvrtc.path), "bytes": len(cubin)}
    _write_atomic(path.with_suffix(".json"), (json.dumps(meta, indent=1) + "\n").encode())
    return path


# The files this process compiled at run time (ensure, below): the train log's NVRTC line names them (nvrtc_watch).
COMPILED: list[str] = []


def ensure(filename: str, arch: str) -> Path:
    """The cubin of filename for arch, compiled (once, with a notice) when missing or stale."""
    path = path_for(filename, arch)
    if not path.is_file():
        print(f"tr2: compiling {filename} for {arch} (no cubin {path.name} in {cache_dir()})", file=sys.stderr,
              flush=True)
        build(filename, arch)
        COMPILED.append(filename)
    return path


ARCH_RE = re.compile(r"^sm_[1-9][0-9]{1,2}$")


def main(argv=None) -> int:
    from ...trainargs import Parser   # one-line refusals, an option given twice refused, as every tr2 entry point
    ap = Parser(prog="python -m tr2.cupy_side.gpu.cubins",
                description="Compile every kernel file to a cubin ahead of the run.")
    ap.add_argument("--arch", default=None, help="e.g. sm_90 (default: the architecture of the GPU here)")
    ap.add_argument("--force", action="store_true", help="compile even where a cubin of the same key exists")
    args = ap.parse_args(argv)
    arch = args.arch
    if arch is not None and not ARCH_RE.match(arch):
        # NVRTC would take the name and fail on its first file, after minutes of compiling for another name
        ap.error(f"--arch: {arch!r} is not allowed; allowed: sm_ and the compute capability's digits, e.g. sm_90 "
                 "(the 'a' of sm_90a is added where a file needs it)")
    if arch is None:
        try:
            import cupy as cp
            arch = "sm_" + cp.cuda.Device().compute_capability
        except Exception:
            ap.error("no GPU here to read the architecture from; pass --arch (e.g. sm_90)")
    try:
        nvrtc = Nvrtc()
    except (NvrtcNotFound, OSError) as e:
        given = f" (TR2_NVRTC={os.environ['TR2_NVRTC']!r})" if os.environ.get("TR2_NVRTC") else ""
        ap.error(f"{e}{given}; allowed: a libnvrtc that loads (the nvidia-cuda-nvrtc wheel, or TR2_NVRTC naming the file)")
    for fn in kernel_files():
        path = path_for(fn, arch)
        if path.is_file() and not args.force:
            print(f"  {fn:20s} kept     {path.name}")
            continue
        build(fn, arch, nvrtc)
        print(f"  {fn:20s} compiled {path.name} (NVRTC {nvrtc.version()})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
