"""One profiled training run (protocol rules 30-33): the trainer in this process under torch.profiler.

    python -m tr2.profile_run --window A B --out DIR [--trace] <the trainer's arguments>

The side's own `run(args, cfg)` trains as `python -m tr2.train` would (same argument checks), with
its iter line every L = gcd(A, B) steps. Those lines come right after a loss read that waits for the
device, so the profiler's steps are cut on them: torch.profiler's schedule waits until the line of
step A (one warm-up cycle just before it, which starts CUPTI outside the window), records from the
line of step A to the line of step B, i.e. steps A+1..B, and the kernel table is taken then.

Activities: on CUDA, CUPTI's kernels, memcpys and memsets, whoever launched them (PyTorch, cuBLAS,
Inductor's Triton, and our kernels launched through CuPy in the same process); the table's time is
each kernel's device time. On a CPU card, the CPU operators: aten ops and record_function ranges,
by self CPU time. The cupy side's backend ops are wrapped in record_function ranges named after the
op (layernorm_forward, matmul_backward, ...), which is what its CPU (NumPy) table consists of.

Writes DIR/profile.json: status ok | oom | failed, the table [{name, total_us, launches}], steps in
the window, the attention backends torch.backends allows, on CUDA the device's idle time between kernels
(`gaps`, kernel_gaps), and DIR/trace.json with --trace. Exit code
as the trainer's: 0, 2 (bad arguments: one line, and neither DIR nor a file made), 3 (out of memory), 1 (any other
failure).
"""
from __future__ import annotations

import contextlib
import dataclasses
import json
import math
import sys
import time
import traceback
from pathlib import Path

import torch
from torch.autograd import DeviceType
from torch.profiler import ProfilerActivity, profile, record_function, schedule

from . import Tr2Error
from .cupy_side import backend as cupy_backend
from .cupy_side.gpu import OP_METHODS
from .torch_side.train import is_oom
from .train import run as train_run
from .results import write_text_atomic
from .trainargs import Parser, parse
from .trainlog import oom_line, parse_iter

# The backend's ops (docs/architecture.md's table, as tr2.cupy_side.gpu lists them), and any other method named
# *_forward/_backward/_update; its utilities (to_device, to_host, zeros, ...) are not operations and stay unwrapped.
BACKEND_OPS = frozenset(m for methods in OP_METHODS.values() for m in methods)


class LineTap:
    """A stdout stand-in: passes every write through and calls on_iter(step) for each `iter N:` line."""

    def __init__(self, inner, on_iter):
        self.inner, self.on_iter, self._buf = inner, on_iter, ""
        self.steps_seen = []

    def write(self, s):
        n = self.inner.write(s)
        *lines, self._buf = (self._buf + s).split("\n")
        for it in filter(None, map(parse_iter, lines)):
            self.steps_seen.append(it[0])
            self.on_iter(it[0])
        return n

    def flush(self):
        self.inner.flush()

    def __getattr__(self, name):
        return getattr(self.inner, name)


class _Annotated:
    """A backend whose op methods run inside torch.profiler.record_function(<op name>)."""

    def __init__(self, backend):
        object.__setattr__(self, "_backend", backend)

    def __getattr__(self, name):
        attr = getattr(self._backend, name)
        if callable(attr) and (name in BACKEND_OPS or name.endswith(("_forward", "_backward", "_update"))):
            def wrapped(*a, **k):
                with record_function(name):
                    return attr(*a, **k)
            wrapped.__name__ = name
            return wrapped
        return attr

    def __setattr__(self, name, value):
        setattr(self._backend, name, value)

    def __repr__(self):
        # the run's log names the backend by its repr, which says which products record it read (gpu/backend.py)
        return repr(self._backend)


def annotate_cupy_backend() -> bool:
    """Wrap tr2.cupy_side.backend.get_backend so every backend it returns names its ops to the profiler."""
    if getattr(cupy_backend.get_backend, "_tr2_annotated", False):
        return True
    orig = cupy_backend.get_backend

    def get_backend(*a, **k):
        b = orig(*a, **k)
        # a subclass named like the backend, so the side's startup line still names its backend
        return type(type(b).__name__, (_Annotated,), {})(b)
    get_backend._tr2_annotated = True
    cupy_backend.get_backend = get_backend
    # Modules that imported the name before us keep the original: rebind it there too.
    for name, mod in list(sys.modules.items()):
        if name.startswith("tr2.cupy_side") and getattr(mod, "get_backend", None) is orig:
            mod.get_backend = get_backend
    return True


def kernel_table(events, device: str) -> list[dict]:
    """{name, total_us, launches} per name: device kernels on CUDA, self CPU time of CPU events otherwise."""
    rows: dict[str, list] = {}
    for e in events:
        name = e.name
        if name.startswith("ProfilerStep"):
            continue
        if device == "cuda":
            if e.device_type != DeviceType.CUDA or getattr(e, "is_user_annotation", False):
                continue
            t = e.time_range.elapsed_us()
        else:
            if e.device_type != DeviceType.CPU or getattr(e, "is_python_function", False):
                continue
            t = e.self_cpu_time_total
            step = _optimizer_step(e)
            if step is not None and step is not e:
                name = f"{step.name}/{name}"  # the optimizer's operators, apart from the model's alike ones
        r = rows.setdefault(name, [0.0, 0])
        r[0] += float(t)
        r[1] += 1
    return sorted(({"name": n, "total_us": round(v[0], 3), "launches": v[1]} for n, v in rows.items()),
                  key=lambda r: -r["total_us"])


def kernel_gaps(events, top: int = 12) -> dict:
    """Where the device waits between kernels in the window (CUDA only; "kernels" here are every device activity the
    kernel table counts: kernels, and CUPTI's memcpys and memsets): `span_us` from the first one's start to the last
    one's end, `busy_us` the union of their intervals (activities that overlap, on two streams or a copy engine, count
    once), `idle_us` the rest, `kernels` their number, and `pairs`: the `top` (kernel before, kernel after) pairs by
    their idle time in all (total_us, count, max_us), each gap charged to the kernel that ended last before it and
    the one that starts it. Why: the step by the outside clock exceeds its kernels' time (docs/perf.md, twenty-eighth
    session: 0.69 ms a step on gpt2-small bf16 against PyTorch's 0.32), and a table of kernel times cannot say where."""
    ks = sorted(((e.time_range.start, e.time_range.end, e.name) for e in events
                 if e.device_type == DeviceType.CUDA and not getattr(e, "is_user_annotation", False)
                 and not e.name.startswith("ProfilerStep")), key=lambda k: (k[0], k[1]))
    if not ks:
        return {"kernels": 0, "span_us": 0.0, "busy_us": 0.0, "idle_us": 0.0, "pairs": []}
    busy, pairs = 0.0, {}
    run_start, run_end, last_name = ks[0][0], ks[0][1], ks[0][2]
    for start, end, name in ks[1:]:
        if start > run_end:   # the device idles from run_end to start
            busy += run_end - run_start
            p = pairs.setdefault((last_name, name), [0.0, 0, 0.0])
            gap = start - run_end
            p[0] += gap
            p[1] += 1
            p[2] = max(p[2], gap)
            run_start = start
        if end >= run_end:
            run_end, last_name = end, name
    busy += run_end - run_start
    span = run_end - ks[0][0]   # run_end: the latest end of all
    rows = sorted(({"before": a, "after": b, "total_us": round(v[0], 3), "count": v[1], "max_us": round(v[2], 3)}
                   for (a, b), v in pairs.items()), key=lambda r: -r["total_us"])
    return {"kernels": len(ks), "span_us": round(span, 3), "busy_us": round(busy, 3),
            "idle_us": round(span - busy, 3), "pairs": rows[:top]}


def _optimizer_step(e):
    """The enclosing `Optimizer.step#...` range of a CPU event, if any (itself included)."""
    seen = 0
    while e is not None and seen < 200:
        if e.name.startswith("Optimizer.step#"):
            return e
        e, seen = e.cpu_parent, seen + 1
    return None


def sdp_backends() -> dict:
    """The scaled-dot-product attention backends torch.backends.cuda allows in this environment."""
    out = {}
    for name in ("flash", "mem_efficient", "math", "cudnn"):
        fn = getattr(torch.backends.cuda, f"{name}_sdp_enabled", None)
        if fn is not None:
            try:
                out[name] = bool(fn())
            except Exception:  # noqa: BLE001
                out[name] = None
    return out


def window_schedule(window) -> tuple[int, dict]:
    """(log_interval, schedule kwargs) cutting profiler steps on the iter lines of window[0] and window[1]."""
    a, b = int(window[0]), int(window[1])
    if not 0 <= a < b:
        raise ValueError(f"--window: {a} {b}; allowed: 0 <= A < B")
    L = math.gcd(a, b)  # gcd(0, b) = b
    # prof.step() is called at every iter line (steps 0, L, 2L, ...): profiler step m spans iterations
    # (m-1)L+1 .. mL (step 0: from the start through iteration 0). Active: m = A/L+1 .. B/L.
    return L, {"wait": a // L, "warmup": 1, "active": (b - a) // L, "repeat": 1}


def main(argv=None) -> int:
    p = Parser(prog="python -m tr2.profile_run", description=__doc__.split("\n")[0])
    p.add_argument("--window", type=int, nargs=2, required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--trace", action="store_true", help="also export a Chrome trace of the window")
    ns, train_argv = p.parse_known_args(argv)  # the rest: the trainer's own arguments
    out = Path(ns.out)
    # Bad arguments are refused before DIR is made, as the trainer's are: nothing written (the families stage reads
    # the exit code and the log, not a profile.json, for a run that never started).
    try:
        if out.exists() and not out.is_dir():
            raise Tr2Error(f"--out: {ns.out!r} is a file; allowed: a folder (made if missing) for profile.json")
        L, sched = window_schedule(ns.window)
        # the iter lines cut the profiler's steps: every L steps, whatever --log-interval the command carries
        args = dataclasses.replace(parse(train_argv), log_interval=L)
        if ns.window[1] > args.steps:
            raise Tr2Error(f"--window: {ns.window[1]} is past --steps {args.steps}; allowed: a window inside the "
                           f"run's steps 0..{args.steps}")
    except (Tr2Error, ValueError) as e:
        sys.stderr.write(f"tr2.profile_run: error: {e}\n")
        return 2
    out.mkdir(parents=True, exist_ok=True)
    record = {"window": list(ns.window), "status": "failed", "kernels": [], "started": time.time()}

    def finish(status, rc, **kw):
        record.update(status=status, returncode=rc, wall_s=round(time.time() - record.pop("started"), 3), **kw)
        write_text_atomic(out / "profile.json", json.dumps(record, indent=1) + "\n")
        return rc

    device = args.device
    record.update(side=args.side, model=args.model, dtype=args.dtype, mode=args.mode if args.side == "torch" else None,
                  half_roundings=args.half_roundings, steps=args.steps, device=device, log_interval=L,
                  steps_in_window=ns.window[1] - ns.window[0], torch=torch.__version__,
                  sdp_backends=sdp_backends() if device == "cuda" else None)
    activities = [ProfilerActivity.CPU]
    if device == "cuda":
        activities.append(ProfilerActivity.CUDA)
        torch.cuda.init()
        torch.zeros(1, device="cuda")  # the primary context exists before CUPTI starts (CuPy shares it)
    if args.side == "cupy":
        record["annotated_backend"] = annotate_cupy_backend()
    got = {}

    def on_ready(prof):
        got["table"] = kernel_table(prof.events(), device)
        if device == "cuda":
            got["gaps"] = kernel_gaps(prof.events())
        if ns.trace:
            prof.export_chrome_trace(str(out / "trace.json"))

    prof = profile(activities=activities, schedule=schedule(**sched), on_trace_ready=on_ready)
    tap = LineTap(sys.stdout, lambda step: prof.step())
    try:
        prof.start()
        try:
            with contextlib.redirect_stdout(tap):
                rc = train_run(args)
        finally:
            prof.stop()
    except Tr2Error as e:
        sys.stderr.write(f"tr2.profile_run: error: {e}\n")
        return finish("failed", 2, error=str(e))
    except Exception as e:  # noqa: BLE001
        if is_oom(e):
            print(oom_line(str(e)), flush=True)
            return finish("oom", 3, error=" ".join(str(e).split())[:500])
        traceback.print_exc()
        return finish("failed", 1, error=f"{type(e).__name__}: {e}"[:500])
    record["iter_lines"] = len(tap.steps_seen)
    if rc == 3:
        return finish("oom", 3, error="the trainer printed out of memory")
    if rc != 0:
        return finish("failed", rc, error=f"the trainer exited {rc}")
    if "table" not in got:
        return finish("failed", 1, error=f"the profiler's window never completed (iter lines seen: {tap.steps_seen})")
    record["kernels"] = got["table"]
    if "gaps" in got:
        record["gaps"] = got["gaps"]
    return finish("ok", 0)


if __name__ == "__main__":
    sys.exit(main())
