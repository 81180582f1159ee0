"""What a result must carry: machine, GPU, driver and software versions, date and git commit; GPU sampling."""
from __future__ import annotations

import datetime
import hashlib
import io
import os
import platform
import subprocess
import sys
import tarfile
import threading
import time
from pathlib import Path
from typing import Optional

from . import REPO_ROOT


def _version(module: str):
    try:
        mod = __import__(module)
        return getattr(mod, "__version__", "unknown")
    except Exception:
        return None


def git_commit() -> dict:
    def git(*a):
        # Only a zero exit counts: outside a repository `git rev-parse HEAD` can echo "HEAD" back.
        try:
            p = subprocess.run(["git", *a], cwd=REPO_ROOT, capture_output=True, text=True, timeout=10)
        except Exception:
            return ""
        return p.stdout.strip() if p.returncode == 0 else ""
    # The caller's word first: the GPU machine's copy of the tree may carry no .git, or a stale one
    # (a run on 2026-11-29 recorded the commit before the one it ran).
    named = os.environ.get("TR2_GIT_COMMIT", "").strip()
    if named:
        dirty = os.environ.get("TR2_GIT_DIRTY", "").strip().lower()
        return {"commit": named, "dirty": {"true": True, "1": True, "false": False, "0": False}.get(dirty, "unknown")}
    commit = git("rev-parse", "HEAD")
    if not commit:
        return {"commit": None, "dirty": "unknown"}
    status = git("status", "--porcelain", "--untracked-files=no")
    return {"commit": commit, "dirty": bool(status)}


# The program's sources: what lib_digest covers (compiled caches and notebooks' outputs are not the program).
LIB_SUFFIXES = (".py", ".cu", ".cuh")


def _is_source(path) -> bool:
    """Whether a path under lib/tr2 is one of the sources lib_digest covers."""
    path = Path(path)
    return path.suffix in LIB_SUFFIXES and "__pycache__" not in path.parts


def _digest(entries) -> str:
    """16 hex digits of SHA-256 over (path relative to the repository, content) pairs, in the order of the paths."""
    h = hashlib.sha256()
    for rel, data in sorted(entries):
        h.update(rel.encode() + b"\0" + hashlib.sha256(data).hexdigest().encode() + b"\n")
    return h.hexdigest()[:16]


def lib_digest(root=REPO_ROOT) -> Optional[str]:
    """The digest of lib/tr2's sources as they are on disk here (None where there is no lib/tr2). Why: a record's commit
    is the caller's word (TR2_GIT_COMMIT) or the copy's .git, and on the GPU machine either can be stale (the
    fortieth session's calls 3-4 recorded 6c2f2ed while 0ea40e0's tree ran); the digest is of what actually ran, and
    `python -m tr2.sysinfo lib-digest COMMIT` gives a commit's, to compare."""
    base = Path(root) / "lib" / "tr2"
    if not base.is_dir():
        return None
    files = [f for f in base.rglob("*") if f.is_file() and _is_source(f)]
    return _digest((f.relative_to(root).as_posix(), f.read_bytes()) for f in files)


def commit_lib_digest(commit: str, root=REPO_ROOT) -> str:
    """lib_digest of lib/tr2 as committed at `commit` (git archive); a ValueError naming the commit where git cannot
    give it."""
    p = subprocess.run(["git", "archive", "--format=tar", commit, "--", "lib/tr2"], cwd=root, capture_output=True)
    if p.returncode != 0:
        raise ValueError(f"commit {commit!r}: git archive failed: {p.stderr.decode(errors='replace').strip()}")
    with tarfile.open(fileobj=io.BytesIO(p.stdout)) as tar:
        entries = [(m.name, tar.extractfile(m).read()) for m in tar.getmembers() if m.isfile() and _is_source(m.name)]
    return _digest(entries)


def gpu_info() -> list[dict]:
    """nvidia-smi's GPUs (none where it is missing): name, driver, memory, top SM clock and UUID (which machine: the
    device tool lends a different one to a later call, and a stage resumed there says so in sessions.jsonl)."""
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version,memory.total,clocks.max.sm,uuid",
                              "--format=csv,noheader,nounits"], capture_output=True, text=True, timeout=20)
    except Exception:
        return []
    return parse_gpu_lines(out.stdout)


def parse_gpu_lines(text: str) -> list[dict]:
    """gpu_info's reading of nvidia-smi's CSV lines (name, driver, memory, clock, uuid); a line of other fields is
    left out."""
    gpus = []
    for line in text.strip().splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) == 5:
            gpus.append({"name": parts[0], "driver": parts[1], "memory_mib": parts[2], "max_sm_mhz": parts[3],
                         "uuid": parts[4]})
    return gpus


def cpu_info() -> dict:
    """The processor's model and cores, the memory, and the load when the stage starts (the report shows them)."""
    model = None
    try:
        model = next((line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo") if line.startswith("model name")), None)
    except OSError:
        pass
    try:
        mem = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        mem = None
    try:
        load = [round(x, 2) for x in os.getloadavg()]
    except OSError:
        load = None
    return {"cpu_model": model or platform.processor() or None, "cpu_cores": os.cpu_count(), "memory_bytes": mem,
            "loadavg": load}


def tr2_environment() -> dict:
    """The TR2_* variables set in this process's environment, sorted: the kernel switches (TR2_CE_GRAD_EX2=0,
    TR2_GELU_F16_FAST=0, ... give a run other kernels than the defaults), the caches and records (TR2_KERNEL_CACHE,
    TR2_PRODUCTS_DIR) and the commit handed in. A stage's folder then says what it ran with beyond the card."""
    return {k: v for k, v in sorted(os.environ.items()) if k.startswith("TR2_")}


def machine_info() -> dict:
    info = {
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "host": platform.node(),
        "platform": platform.platform(),
        "processor": platform.machine(),
        "python": sys.version.split()[0],
        "numpy": _version("numpy"),
        "torch": _version("torch"),
        "cupy": _version("cupy"),
        "triton": _version("triton"),
        "gpus": gpu_info(),
        **cpu_info(),
        **git_commit(),
        "lib_digest": lib_digest(),
        "tr2_environment": tr2_environment(),
    }
    try:
        import torch
        info["torch_cuda"] = torch.version.cuda
        info["cudnn"] = torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None
    except Exception:
        pass
    return info


class GpuSampler:
    """Samples clocks, temperature, power and memory of GPU 0 every `interval` seconds through NVML, in a thread."""

    def __init__(self, interval: float = 1.0, index: int = 0):
        self.interval, self.index = interval, index
        self.samples: list[dict] = []
        self._stop = threading.Event()
        self._thread = None
        self.available = False
        try:
            import pynvml
            pynvml.nvmlInit()
            self._nvml = pynvml
            self._handle = pynvml.nvmlDeviceGetHandleByIndex(index)
            self.available = True
        except Exception:
            self._nvml = None

    def _sample(self) -> dict:
        n, h = self._nvml, self._handle
        mem = n.nvmlDeviceGetMemoryInfo(h)
        return {
            "t": time.monotonic(),
            "sm_mhz": n.nvmlDeviceGetClockInfo(h, n.NVML_CLOCK_SM),
            "mem_mhz": n.nvmlDeviceGetClockInfo(h, n.NVML_CLOCK_MEM),
            "temp_c": n.nvmlDeviceGetTemperature(h, n.NVML_TEMPERATURE_GPU),
            "power_w": n.nvmlDeviceGetPowerUsage(h) / 1000.0,
            "mem_used_bytes": int(mem.used),
            "util_pct": n.nvmlDeviceGetUtilizationRates(h).gpu,
            "energy_mj": self._energy_mj(),
        }

    def mark(self, t: float, **tags) -> Optional[dict]:
        """A sample read now and filed at the host time t (the clock's stamp of the line that prompted it: a window's
        iter line), with read_lag_s, how long after t it was read, and the tags; None where the read fails. Why: a
        window's energy from samples every interval pairs the counter with the clock to within that interval; read at
        the window's own iter lines it spans the timed window itself (tr2.series.counter_watts)."""
        if not self.available:
            return None
        try:
            sample = self._sample()
        except Exception:
            return None
        sample.update(t=t, read_lag_s=sample["t"] - t, **tags)
        self.samples.append(sample)
        return sample

    def _energy_mj(self):
        """The card's energy counter (millijoules since the driver loaded; Volta and later), None where the driver
        has none: a window's mean power from its first and last samples (tr2.series.counter_watts)."""
        try:
            return int(self._nvml.nvmlDeviceGetTotalEnergyConsumption(self._handle))
        except Exception:
            return None

    def _loop(self):
        while not self._stop.is_set():
            try:
                self.samples.append(self._sample())
            except Exception:
                pass
            self._stop.wait(self.interval)

    def other_processes(self) -> list[int]:
        """PIDs of compute processes on the card: a run must start on an idle card."""
        if not self.available:
            return []
        try:
            return [p.pid for p in self._nvml.nvmlDeviceGetComputeRunningProcesses(self._handle)]
        except Exception:
            return []

    def __enter__(self):
        if self.available:
            self._thread = threading.Thread(target=self._loop, daemon=True)
            self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        if self._thread:
            self._thread.join(timeout=5)
        return False

    def peak_memory_bytes(self):
        return max((s["mem_used_bytes"] for s in self.samples), default=None)


def main(argv) -> int:
    """python -m tr2.sysinfo lib-digest [COMMIT]: the digest of lib/tr2's sources here, or as committed at COMMIT."""
    if not argv or argv[0] != "lib-digest" or len(argv) > 2:
        print("usage: python -m tr2.sysinfo lib-digest [COMMIT]", file=sys.stderr)
        return 2
    try:
        print(commit_lib_digest(argv[1]) if len(argv) == 2 else lib_digest())
    except ValueError as e:
        print(f"sysinfo: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
