"""The outside clock (protocol rules 10-16): one reader starts a program and stamps every output line as it arrives.

`run_clocked(cmd, log_path, ...)` starts `cmd` in a fresh process (its own process group, Python
unbuffered), reads its stdout and stderr together, stamps each line with `time.monotonic()` the
moment it arrives and writes `<monotonic seconds>\\t<line>` to the log at once (flushed per line, so a
crash loses nothing that arrived). The step time is the time from the `iter A` line to the `iter B`
line divided by B - A, with (A, B) the window (protocol: 100 and 400); the program's own reading beside it (analyze).

Whatever the program does, the answer is a record, never an exception:
status 'ok' | 'oom' | 'failed' | 'no-window' | 'timeout', with a one-line `reason` for all but 'ok'.
"""
from __future__ import annotations

import contextlib
import ctypes
import os
import select
import signal
import subprocess
import sys
import time
from pathlib import Path

from . import REPO_ROOT
from .trainlog import PEAK_RE, parse_iter

OOM_LINE = "out of memory:"
OOM_EXIT = 3
# What an uncaught out-of-memory error looks like when a program dies of it without its own line.
OOM_PATTERNS = ("CUDA out of memory", "OutOfMemoryError", "cudaErrorMemoryAllocation",
                "CUBLAS_STATUS_ALLOC_FAILED", "out of memory")
TAIL_LINES = 30


def read_stamped_log(path) -> list[tuple[float, str]]:
    """The (stamp, line) pairs of a stamped log; a torn last line is kept as far as it goes."""
    out = []
    for raw in Path(path).read_text(errors="replace").splitlines():
        t, sep, line = raw.partition("\t")
        if sep:
            with contextlib.suppress(ValueError):  # no stamp before the tab: not a line the clock wrote
                out.append((float(t), line))
    return out


def analyze(lines: list[tuple[float, str]], window=(100, 400)) -> dict:
    """The clock's numbers from stamped lines: step_ms, own_step_ms, own_vs_clock, peak_bytes, reserved_bytes, iters,
    and window_t, the stamps of the window's two iter lines (None without them).

    own_step_ms is the mean of the time fields of the iter lines after window[0] up to window[1],
    each weighted by the steps it covers (the plain mean when the lines are evenly spaced, as they are
    every 10 steps), so it covers exactly the clock's window when the lines fall on its ends.
    """
    a, b = int(window[0]), int(window[1])
    stamps: dict[int, float] = {}
    own: list[tuple[int, float]] = []
    peak = reserved = oom_line = last_step = None
    for t, line in lines:
        if (it := parse_iter(line)) is not None:
            step, _loss, ms = it
            if step not in stamps:  # the first line of a step counts
                stamps[step] = t
                own.append((step, ms))
            last_step = step
        elif m := PEAK_RE.match(line):
            peak = int(m.group(1))
            reserved = int(m.group(2)) if m.group(2) else None
        elif line.startswith(OOM_LINE) and oom_line is None:
            oom_line = line
    out = {"step_ms": None, "own_step_ms": None, "own_vs_clock": None, "peak_bytes": peak, "reserved_bytes": reserved,
           "iters": len(own), "last_step": last_step, "oom_line": oom_line,
           "has_window": a in stamps and b in stamps, "missing": [s for s in (a, b) if s not in stamps],
           "window_t": None}
    if out["has_window"]:
        out["window_t"] = [stamps[a], stamps[b]]   # the reader's monotonic seconds: a sampler's in this process too
        out["step_ms"] = (stamps[b] - stamps[a]) * 1000.0 / (b - a)
        prev, total, covered = a, 0.0, 0
        for step, ms in sorted(own):
            if a < step <= b:
                total += ms * (step - prev)
                covered += step - prev
                prev = step
        if covered:
            out["own_step_ms"] = total / covered
        if out["own_step_ms"] is not None and out["step_ms"] > 0:
            out["own_vs_clock"] = (out["own_step_ms"] - out["step_ms"]) / out["step_ms"]
    return out


try:  # looked up here, not in the forked child (no dlopen between fork and exec)
    _PRCTL = ctypes.CDLL("libc.so.6", use_errno=True).prctl if sys.platform.startswith("linux") else None
except Exception:
    _PRCTL = None


def _die_with_parent() -> None:
    """In the child before exec (Linux): SIGKILL when the reader dies, so a killed series leaves no trainer
    holding the card."""
    with contextlib.suppress(Exception):
        _PRCTL(1, 9, 0, 0, 0)  # PR_SET_PDEATHSIG, SIGKILL


def _killpg(pgid: int, sig=signal.SIGKILL) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


def _kill_group(proc: subprocess.Popen, grace_s: float = 2.0) -> None:
    """SIGTERM, then SIGKILL to the whole process group the program leads (start_new_session), its workers
    included: the leader may be gone while something it started lives on."""
    for sig, wait in ((signal.SIGTERM, grace_s), (signal.SIGKILL, 5.0)):
        _killpg(proc.pid, sig)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=wait)
            _killpg(proc.pid)
            return


def run_clocked(cmd, log_path, env=None, timeout_s=None, window=(100, 400), cwd=None, on_line=None) -> dict:
    """Run `cmd` under the outside clock; see the module docstring. Never raises for what the program does.
    on_line(t, line), where given, sees each line as it is stamped (the series reads the card's energy counter at
    the window's iter lines); it must be quick, and what it raises stops the run as an interrupt would."""
    log_path = Path(log_path)
    log_path.parent.mkdir(parents=True, exist_ok=True)
    full_env = {**(os.environ if env is None else env), "PYTHONUNBUFFERED": "1"}
    cmd = [str(c) for c in cmd]
    lines: list[tuple[float, str]] = []
    forced = None   # (status, reason) when the reader ended the program
    t_start = time.monotonic()
    with open(log_path, "w", buffering=1) as log:   # line-buffered: each stamped line is on disk as it arrives
        def emit(t: float, raw: bytes) -> None:
            line = raw.decode("utf-8", errors="replace").rstrip("\r")
            lines.append((t, line))
            log.write(f"{t:.6f}\t{line}\n")
            if on_line is not None:
                on_line(t, line)

        try:
            proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                    env=full_env, cwd=cwd, start_new_session=True, bufsize=0,
                                    preexec_fn=_die_with_parent if _PRCTL is not None else None)
        except OSError as e:
            res = analyze([], window)
            res.update(status="failed", reason=f"could not start: {e}", returncode=None,
                       wall_s=0.0, log=str(log_path), tail=[], t0=t_start, cmd=cmd)
            return res
        fd = proc.stdout.fileno()
        deadline = None if timeout_s is None else t_start + float(timeout_s)
        buf = b""
        exited_at = None
        try:
            while True:
                now = time.monotonic()
                if deadline is not None and now >= deadline:
                    forced = ("timeout", f"ran past {float(timeout_s):g} s; process group killed")
                    _kill_group(proc)
                    break
                wait = 0.2 if deadline is None else max(0.0, min(0.2, deadline - now))
                if select.select([fd], [], [], wait)[0]:
                    chunk = os.read(fd, 65536)
                    t = time.monotonic()
                    if not chunk:
                        break  # EOF: every writer closed the pipe
                    *done, buf = (buf + chunk).split(b"\n")
                    for raw in done:
                        emit(t, raw)
                    continue
                # Nothing to read: the program may have exited while something it started holds the pipe.
                if proc.poll() is not None:
                    exited_at = exited_at or time.monotonic()
                    if time.monotonic() - exited_at > 1.0:
                        break
        except BaseException:
            _kill_group(proc)  # an interrupted reader leaves no program behind
            raise
        finally:
            if buf:
                emit(time.monotonic(), buf)
            with contextlib.suppress(OSError):
                proc.stdout.close()
        try:
            returncode = proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            _kill_group(proc)
            returncode = proc.poll()
        _killpg(proc.pid)  # what the program left behind in its group (compile workers holding the pipe)
    wall_s = time.monotonic() - t_start

    res = analyze(lines, window)
    tail = [line for _t, line in lines[-TAIL_LINES:]]
    died_of_oom = next((line.strip() for _t, line in lines if any(p in line for p in OOM_PATTERNS)), None)
    if forced:
        status, reason = forced
    elif res["oom_line"] is not None or returncode == OOM_EXIT:
        status = "oom"
        reason = res["oom_line"] or f"exit code {returncode} (the trainer's out-of-memory code)"
    elif returncode != 0 and died_of_oom is not None:
        status, reason = "oom", died_of_oom
    elif returncode != 0:
        status = "failed"
        last = next((line.strip() for line in reversed(tail) if line.strip()), "(no output)")
        reason = f"exit code {returncode}: {last}"
    elif not res["has_window"]:
        status = "no-window"
        reason = (f"no iter line for step {' and '.join(map(str, res['missing']))} (last iter line: "
                  f"{res['last_step']}); the window is [{window[0]}, {window[1]}]")
    else:
        status, reason = "ok", None
    res.update(status=status, reason=reason, returncode=returncode, wall_s=wall_s, log=str(log_path),
               tail=tail, t0=t_start, cmd=cmd)
    return res


def run_logged(cmd, log_path, env=None, timeout_s=None) -> dict:
    """Run a program that is not timed (the correctness and profile stages) under the same reader.

    Returns {status: ok|oom|failed|timeout, returncode, wall_s, log, reason}; a program with no iter line
    in a window is ok here. `env` adds to this process's environment; tr2 is found from anywhere.
    """
    full_env = {**os.environ, **(env or {})}
    full_env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO_ROOT / "lib"), full_env.get("PYTHONPATH")) if p)
    res = run_clocked(cmd, log_path, env=full_env, timeout_s=timeout_s, window=(0, 1), cwd=str(REPO_ROOT))
    status, reason = res["status"], res.get("reason")
    if status == "no-window":  # these runs are not timed; a missing iter line means nothing here
        status, reason = "ok", None
    return {"status": status, "returncode": res["returncode"], "wall_s": round(res["wall_s"], 3),
            "log": str(log_path), "reason": reason}


def log_text(path) -> str:
    """The lines of a stamped log without their stamps."""
    return "\n".join(line for _t, line in read_stamped_log(path))
