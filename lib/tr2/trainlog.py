"""The lines both training programs print (the outside clock reads them) and the metrics file."""
from __future__ import annotations

import json
import re
import sys
import time

from .results import read_jsonl

# The readers of the lines below, beside their writers: the outside clock, the profiler and the
# footprint's runs parse what these functions print.
# nanoGPT's own train.py (the nanogpt side) ends its line with ", mfu X%": the same line, read the same way
ITER_RE = re.compile(r"^iter (\d+): loss (\S+), time ([0-9.eE+\-]+|nan|inf)ms(?:, mfu \S+%)?\s*$")
# peak memory: the device allocator's largest bytes in use; reserved: the most it held from the driver (both sides
# print both where they run on a GPU; older logs have the first alone)
PEAK_RE = re.compile(r"^peak memory: (\d+) bytes(?:, reserved (\d+) bytes)?\s*$")


# The cupy side's account of NVRTC at the end of a GPU run (gpu/nvrtc_watch.py): whether libnvrtc is mapped, then the
# modules compiled in the process by CuPy (its own kernels; "?" where CuPy's compiles were not watched) and by tr2
# (cubins missing or stale). A module is its kernels' names joined by '+'.
NVRTC_RE = re.compile(r"^nvrtc at run time: libnvrtc mapped (yes|no); CuPy compiled (\d+|\?) modules? \[(.*?)\]; "
                      r"tr2 compiled (\d+) modules? \[(.*?)\]\s*$")


def nvrtc_line(mapped: bool, cupy_modules, tr2_modules) -> str:
    """cupy_modules None: CuPy's compiles were not watched."""
    def part(mods):
        return ("? modules [not watched]" if mods is None
                else f"{len(mods)} module{'' if len(mods) == 1 else 's'} [{' '.join(mods)}]")
    return (f"nvrtc at run time: libnvrtc mapped {'yes' if mapped else 'no'}; CuPy compiled {part(cupy_modules)}; "
            f"tr2 compiled {part(list(tr2_modules))}")


def parse_nvrtc_line(text: str):
    """{'mapped': bool, 'cupy': [modules] or None (not watched), 'tr2': [modules]} from the last NVRTC line of a
    program's output, or None where it has none (PyTorch's sides, the NumPy form, logs from before 2026-12-04)."""
    found = [m for m in map(NVRTC_RE.match, text.splitlines()) if m]
    if not found:
        return None
    m = found[-1]
    cupy = None if m.group(2) == "?" else m.group(3).split()
    return {"mapped": m.group(1) == "yes", "cupy": cupy, "tr2": m.group(5).split()}


# The products record a cupy GPU run read (gpu/backend.py's line at the start of the run): the path it read, how many
# products it holds and the sha256 of its bytes ("no file" where there was none: cuBLASLt's heuristic chose).
# A path is a cache's (.cache/products/...); the digest says which record it was, and the stages keep a copy of
# each record their runs read by it (tr2.products_kept). Logs from before 2026-12-05 carry no digest.
RECORD_RE = re.compile(r"record (.+?) \((\d+) products timed(?:, (?:sha256 ([0-9a-f]{64})|no file))?\)")


def products_record_text(path, count: int, digest: str | None) -> str:
    return f"record {path} ({count} products timed, {'sha256 ' + digest if digest else 'no file'})"


def parse_products_record(text: str) -> list[dict]:
    """Every products record a program's output names, in order: {'path', 'products', 'sha256'} (sha256 None where
    the run had no record file, or its log is from before the digest was printed)."""
    return [{"path": m.group(1), "products": int(m.group(2)), "sha256": m.group(3)} for m in RECORD_RE.finditer(text)]


def iter_line(step: int, loss: float, ms_per_step: float) -> str:
    return f"iter {step}: loss {loss:.4f}, time {ms_per_step:.2f}ms"


def parse_iter(line: str):
    """(step, loss, ms) of an `iter N: loss X, time Yms` line, else None."""
    m = ITER_RE.match(line)
    if not m:
        return None
    try:
        loss = float(m.group(2))
    except ValueError:
        loss = float("nan")
    return int(m.group(1)), loss, float(m.group(3))


def last_loss(text: str):
    """The loss of the last iter line in a program's output, or None."""
    found = [it for it in map(parse_iter, text.splitlines()) if it]
    return found[-1][1] if found else None


def eval_line(step: int, train_loss: float, val_loss: float) -> str:
    return f"step {step}: train loss {train_loss:.4f}, val loss {val_loss:.4f}"


def read_metrics(path) -> dict:
    """{'loss': {step: loss}, 'eval': {step: (train, val)}} from a trainer's --metrics file (empty when
    the file is missing; a torn last line is dropped)."""
    loss, ev = {}, {}
    for r in read_jsonl(path):
        if r.get("kind") == "loss":
            loss[int(r["step"])] = float(r["loss"])
        elif r.get("kind") == "eval":
            ev[int(r["step"])] = (float(r["train"]), float(r["val"]))
    return {"loss": loss, "eval": ev}


def peak_line(peak_bytes: int, reserved_bytes: int | None = None) -> str:
    line = f"peak memory: {int(peak_bytes)} bytes"
    return line if reserved_bytes is None else f"{line}, reserved {int(reserved_bytes)} bytes"


def oom_line(message: str) -> str:
    return "out of memory: " + " ".join(str(message).split())


class TrainLog:
    """Prints and flushes each line at once; keeps the program's own clock between iter lines."""

    def __init__(self, metrics_path=None, log_interval: int = 10, out=None, keep_losses: bool = False):
        self.out = out or sys.stdout
        # every step's loss in memory too, for a caller in this process (method B's floor)
        self.losses = [] if keep_losses else None
        self.log_interval = log_interval
        self.metrics = open(metrics_path, "a", buffering=1) if metrics_path else None
        self._t_last = time.perf_counter()
        self._step_last = -1

    def say(self, line: str) -> None:
        self.out.write(line + "\n")
        self.out.flush()

    def start(self) -> None:
        self._t_last = time.perf_counter()
        self._step_last = -1

    @property
    def every_step(self) -> bool:
        """Whether each step's loss is wanted (read from the device every step, not only on iter lines)."""
        return self.metrics is not None or self.losses is not None

    def wants_line(self, step: int) -> bool:
        return step % self.log_interval == 0

    def loss(self, step: int, loss_value: float, printed: bool) -> None:
        """Record step's loss (already read from the device); print the iter line when `printed`."""
        if self.losses is not None:
            self.losses.append(float(loss_value))
        if self.metrics:
            self.metrics.write(json.dumps({"kind": "loss", "step": step, "loss": float(loss_value)}) + "\n")
        if printed:
            now = time.perf_counter()
            ms = (now - self._t_last) * 1000.0 / (step - self._step_last)
            self._t_last, self._step_last = now, step
            self.say(iter_line(step, loss_value, ms))

    def evaluation(self, step: int, train_loss: float, val_loss: float) -> None:
        if self.metrics:
            self.metrics.write(json.dumps({"kind": "eval", "step": step, "train": float(train_loss), "val": float(val_loss)}) + "\n")
        self.say(eval_line(step, train_loss, val_loss))

    def pause_clock(self):
        """Evaluation is not training: the caller restarts the own clock after it with resume_clock()."""
        return time.perf_counter()

    def resume_clock(self, paused_at: float) -> None:
        self._t_last += time.perf_counter() - paused_at

    def close(self) -> None:
        if self.metrics:
            self.metrics.close()
