"""Helpers of scripts/gpu_check.sh on the GPU machine: the environment record and the closing table.

    python3 scripts/gpu_check.py env OUT        writes OUT/env.json (card, driver, versions, NVRTC arch,
                                                libcublas, date, git commit and dirty count from
                                                TR2_GIT_COMMIT / TR2_GIT_DIRTY when .git did not travel)
    python3 scripts/gpu_check.py summary OUT    reads OUT/kernel_errors.json (+ junit.xml, train logs),
                                                writes OUT/summary.json and prints a short table last
"""
from __future__ import annotations

import datetime
import json
import os
import platform
import re
import subprocess
import sys
import time
from pathlib import Path


def _run(cmd) -> str:
    try:
        return subprocess.run(cmd, capture_output=True, text=True, timeout=60).stdout.strip()
    except Exception as e:  # noqa: BLE001
        return f"unavailable: {e}"


def _git() -> dict:
    commit = os.environ.get("TR2_GIT_COMMIT") or _run(["git", "rev-parse", "HEAD"])
    dirty = os.environ.get("TR2_GIT_DIRTY")
    if dirty is None:
        dirty = str(len([ln for ln in _run(["git", "status", "--short"]).splitlines() if ln.strip()]))
    return {"commit": commit, "dirty_count": dirty}


def env(out: Path) -> dict:
    info = {"date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "host": platform.node(), "python": sys.version.split()[0], "platform": platform.platform(),
            "git": _git(),
            "nvidia_smi": _run(["nvidia-smi", "--query-gpu=name,driver_version,memory.total,clocks.max.sm,"
                                "clocks.sm,temperature.gpu,power.draw", "--format=csv"]),
            "nvcc": _run(["nvcc", "--version"]).splitlines()[-1:]}
    for mod in ("numpy", "cupy", "torch"):
        try:
            info[mod] = __import__(mod).__version__
        except Exception as e:  # noqa: BLE001
            info[mod] = f"unavailable: {e}"
    try:
        import cupy as cp
        t0 = time.perf_counter()
        sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "lib"))
        from tr2.cupy_side.gpu import blas
        from tr2.cupy_side.gpu.runtime import compile_all
        built = compile_all()
        info["kernels_built"] = {k: len(v) for k, v in built.items()}
        info["build_seconds"] = round(time.perf_counter() - t0, 2)
        info["compute_capability"] = cp.cuda.Device().compute_capability
        info["nvrtc"] = list(cp.cuda.nvrtc.getVersion())
        try:
            from cupy.cuda import compiler
            info["cupy_nvrtc_arch"] = str(compiler._get_arch())
        except Exception as e:  # noqa: BLE001
            info["cupy_nvrtc_arch"] = f"unknown: {e}"
        cb = blas.get_cublas()
        info["libcublas"] = cb.path
        info["cublas_version"] = cb.version
        info["cuda_runtime"] = cp.cuda.runtime.runtimeGetVersion()
        info["cuda_driver"] = cp.cuda.runtime.driverGetVersion()
        info["device_name"] = cp.cuda.runtime.getDeviceProperties(0)["name"].decode()
    except Exception as e:  # noqa: BLE001
        info["gpu_error"] = f"{type(e).__name__}: {e}"
    (out / "env.json").write_text(json.dumps(info, indent=1))
    print(json.dumps({k: info.get(k) for k in ("device_name", "compute_capability", "nvrtc", "cupy_nvrtc_arch",
                                              "libcublas", "cublas_version", "build_seconds", "gpu_error")}))
    return info


def _group(name: str) -> str:
    n = name.split(" [")[0]
    for key in ("tiny AdamW", "tiny step", "graph-captured", "cast", "generator", "keep mask", "dropout",
                "embedding", "layernorm", "matmul", "attention", "gelu", "residual", "cross-entropy", "adamw",
                "global norm", "round_f32"):
        if n.startswith(key):
            return key
    return n


def _build(rec: dict) -> str:
    m = re.search(r"\[(.*?)\]", rec["name"])
    if not m:
        return "float32"
    s = m.group(1)
    if "float32" in s:
        return "tf32" if "tf32=True" in s else "float32"
    for d in ("bfloat16", "float16"):
        if d in s:
            return d + ("+hr" if ("hr=True" in s or "/True" in s) else "")
    return s


def _ref(name: str) -> str:
    """What the check compares with, where the name says more than the group does."""
    n = name.split(" [")[0]
    if "vs float64" in n:
        return " vs f64"
    if n.startswith("tiny step grad"):
        return " grads"
    if n.startswith("tiny step") and "loss" in n:
        return " loss"
    return ""


def _train_sections(text: str) -> dict:
    """train.log holds one section per run, each opened by a line '=== NAME ==='."""
    out, name = {}, None
    for ln in text.splitlines():
        m = re.match(r"^=== (.+) ===$", ln)
        if m:
            name = m.group(1)
            out[name] = []
        elif name is not None:
            out[name].append(ln)
    return out


def summary(out: Path) -> int:
    recs = json.loads((out / "kernel_errors.json").read_text()) if (out / "kernel_errors.json").is_file() else []
    table: dict = {}
    for r in recs:
        if r.get("test") == "build":
            continue
        key = (_group(r["name"]) + _ref(r["name"]), _build(r), r.get("tol"))
        t = table.setdefault(key, {"checks": 0, "failed": 0, "max_rel_norm": 0.0, "tol": None, "bit_identical": None})
        t["checks"] += 1
        t["failed"] += 0 if r.get("passed") else 1
        if "rel_norm" in r:
            t["max_rel_norm"] = max(t["max_rel_norm"], r["rel_norm"])
            t["tol"] = r["tol"] if t["tol"] is None else min(t["tol"], r["tol"])
        if "bit_identical" in r:
            t["bit_identical"] = (t["bit_identical"] is not False) and r["bit_identical"]
    junit = {}
    if (out / "junit.xml").is_file():
        txt = (out / "junit.xml").read_text()
        for k in ("tests", "failures", "errors", "skipped"):
            mm = re.search(rf'<testsuite [^>]*\b{k}="(\d+)"', txt)
            junit[k] = int(mm.group(1)) if mm else None
    trains = {}
    sections = {}
    for log in sorted(out.glob("train*.log")):
        secs = _train_sections(log.read_text())
        sections.update(secs if secs else {log.stem: log.read_text().splitlines()})
    for name, lines in sections.items():
        keep = [ln for ln in lines if ln.startswith(("iter ", "peak memory", "out of memory", "Traceback", "exit "))
                or "Error" in ln]
        trains[name] = keep[-4:]
    env_info = json.loads((out / "env.json").read_text()) if (out / "env.json").is_file() else {}
    rows = [{"kernel": k[0], "build": k[1], **v} for k, v in sorted(table.items(), key=lambda kv: (kv[0][0], kv[0][1]))]
    (out / "summary.json").write_text(json.dumps({"env": env_info, "pytest": junit, "table": rows, "train": trains},
                                                 indent=1))
    for name, lines in trains.items():
        print(f"{name}: " + " | ".join(lines))
    print(f"pytest: {junit}")
    print(f"{'kernel':<22}{'build':<12}{'checks':>7}{'fail':>5}{'max rel err':>13}{'tol':>9}  bits")
    for r in rows:
        bits = "" if r["bit_identical"] is None else ("identical" if r["bit_identical"] else "DIFFER")
        tol = "" if r["tol"] is None else f"{r['tol']:.0e}"
        err = "" if r["tol"] is None else f"{r['max_rel_norm']:.2e}"
        print(f"{r['kernel']:<22}{r['build']:<12}{r['checks']:>7}{r['failed']:>5}{err:>13}{tol:>9}  {bits}")
    return 0


if __name__ == "__main__":
    what, where = sys.argv[1], Path(sys.argv[2])
    where.mkdir(parents=True, exist_ok=True)
    sys.exit(env(where) and 0 if what == "env" else summary(where))
