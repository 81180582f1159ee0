"""Footprint (docs/protocol.md, rules 60-62): what each side needs where it trains.

For each configuration of the card (its first model; every element type; each PyTorch mode; the cupy build its
half types compare) one short training run, traced (traced.py: `/proc/<pid>/maps` of the run and its children
polled while it trains, and its modules and maps at exit), gives the shared libraries it mapped: NVIDIA's by name,
whether NVRTC was opened (rule 61: an opened libnvrtc shows a kernel compiled at run time), and the bytes of its
run-time set by category (runtime_sets.py), each file counted once, in the first category that claims it:

    nvidia_driver     the driver's libraries mapped (libcuda, libnvidia-*): the host provides them
    nvidia_libraries  NVIDIA's libraries mapped (cuBLAS, NVRTC, cuDNN, ...), wherever they live
    interpreter       the executable, libpython and the standard-library files it imported
    python_packages   the installed distributions of the imported third-party modules (tr2: its folder)
    other_libraries   every other shared library mapped (the C library, libstdc++, ...)

Where Docker runs, each side's smallest image (docker/*.Dockerfile) is built, measured and tried (images.py);
where it does not, the summary says so and the install sets pip would bring stand instead. Writes footprint.jsonl
(a record per run, resumable), logs/, footprint.csv, libraries.csv, distributions.csv, install_sets.json,
docker.json, summary.json and bytes.png.
"""
from __future__ import annotations

import os
import shutil
from pathlib import Path

from .. import configs, explore, retry
from .. import explore_plots as plots
from ..configs import RunConfig, compile_caches
from ..data import data_dirs
from ..results import read_json, read_jsonl, write_json_atomic
from ..stage import open_folder, run_plan
from ..summary import finish, save_figure, write_csv
from ..trainlog import last_loss, parse_nvrtc_line
from .images import docker_available, measure_images  # noqa: F401 - docker_available: part of the package's face
from .maps import MapsPoller, library_name, nvidia_kind, nvidia_libraries, nvrtc_opened, parse_maps  # noqa: F401
from .runtime_sets import (CATEGORIES, IMAGE_CATEGORIES, _size, classify_run, install_set,  # noqa: F401
                           interpreter_install, side_requirements, tr2_files)
from .traced import trace_run

STAGE = "footprint"
STEPS = 10                      # iterations trained per footprint run (0..STEPS): the start is what matters


def configurations(card: dict) -> list[RunConfig]:
    """The card's first model: per element type the cupy build its verdict compares, then each PyTorch mode."""
    return configs.configurations(card, models=card["models"][:1], compared_only=True, cupy_first=True)


def train_argv(c: RunConfig, device: str, steps: int = STEPS) -> list[str]:
    return c.train_args(device, steps, log_interval=1).to_argv()


def measure(c: RunConfig, results_dir, device: str, timeout_s=None, env=None) -> dict:
    """One traced run of configuration c; the record appended to footprint.jsonl (no path lists)."""
    results_dir = Path(results_dir)
    env = dict(os.environ if env is None else env)
    # cold caches, as in a configuration's first run: whatever compiles at the start, compiles here
    cache = results_dir / "cache" / c.slug
    shutil.rmtree(cache, ignore_errors=True)  # a run killed half-way: its start again is cold too
    env.update(compile_caches(c.slug, results_dir / "cache"), CUPY_CACHE_DIR=str(cache / "cupy"), PYTHONUNBUFFERED="1")
    log = results_dir / "logs" / f"{c.slug}.log"
    trace = trace_run(train_argv(c, device), log, results_dir / "logs" / f"{c.slug}.dump.json", env=env,
                      timeout_s=timeout_s)
    cls = classify_run(trace)
    # every file with its size: the largest raw output of a GPU run (about 2 MB a run), so compressed
    write_csv(results_dir / "files" / f"{c.slug}.csv.gz",
              sorted(cls["rows"], key=lambda r: (r["category"], r["owner"], r["path"])), ["path", "category", "owner", "bytes"])
    text = log.read_text(errors="replace")
    mapped_main = set(trace["libraries"])
    all_libs = trace["libraries"] + trace["libraries_children"]   # a child's: only what the main process did not map
    return {
        **c.as_record(), "device": device, "steps": STEPS, "status": trace["status"],
        "returncode": trace["returncode"], "wall_s": trace["wall_s"], "polls": trace["polls"],
        "last_loss": last_loss(text),
        # what compiled at run time, by the cupy side's own account (trainlog.nvrtc_line; None for other programs)
        "nvrtc_compiled": compiled_modules(parse_nvrtc_line(text)),
        "libraries": [{"name": library_name(p), "path": p, "nvidia": nvidia_kind(p),
                       "process": "main" if p in mapped_main else "child"} for p in all_libs],
        "nvidia_libraries": nvidia_libraries(all_libs),
        "nvrtc": nvrtc_opened(all_libs),
        "modules": len(trace["modules"]),
        "bytes": cls["bytes"], "total_bytes": sum(cls["bytes"].values()),
        "image_bytes": sum(cls["bytes"][c2] for c2 in IMAGE_CATEGORIES),
        "distributions": cls["distributions"], "files_csv": f"files/{c.slug}.csv.gz",
        "log": f"logs/{c.slug}.log", "python": trace["python"],
    }


def compiled_modules(account):
    """The modules a run compiled at run time, 'CuPy:<kernels>' and 'tr2:<file>', from its parsed NVRTC line; None
    where the run gave no account (PyTorch's sides; logs before the line existed), '?' standing for CuPy's modules
    where its compiles were not watched."""
    if account is None:
        return None
    cupy = ["CuPy:?"] if account["cupy"] is None else [f"CuPy:{m}" for m in account["cupy"]]
    return cupy + [f"tr2:{m}" for m in account["tr2"]]


def run(card: dict, results_dir=None) -> Path:
    """Resumable (tr2.stage): configurations already in footprint.jsonl are not run again."""
    with open_folder(STAGE, card, results_dir) as folder:
        rd = folder.path
        timeout = card["series"]["timeout_s"]
        run_plan(folder, configurations(card), lambda c: measure(c, rd, card["device"], timeout_s=timeout),
                 desc="footprint", key=lambda c: c.key, finished=lambda rec: True, retry=retry.should_retry,
                 note=retry.note, runs="footprint.jsonl")  # tr2.retry: a failure for a gone cause runs again
        if not (rd / "install_sets.json").exists():
            sets = {side: install_set(side_requirements(side)) for side in ("cupy", "torch")}
            tr2_bytes = sum(_size(p) for p in tr2_files())
            write_json_atomic(rd / "install_sets.json", {"interpreter": interpreter_install(), "sides": sets,
                                                         "tr2": {"files": len(tr2_files()), "bytes": tr2_bytes}})
        if not (rd / "docker.json").exists():
            # the images mount tr2.data's first data folder that exists ($TR2_DATA, when set, is the only one)
            data_dir = next((str(d) for d in data_dirs() if d.is_dir()), None)
            write_json_atomic(rd / "docker.json", measure_images(card, rd, STEPS, data_dir=data_dir))
    summarize(rd)
    return rd


CSV_FIELDS = ["side", "model", "dtype", "mode", "half_roundings", "status", "libraries", "nvidia_libraries",
              "nvrtc", "nvrtc_compiled", *[f"bytes_{c}" for c in CATEGORIES], "bytes_image", "bytes_total", "log"]


def _compiled_text(modules) -> str:
    """footprint.csv's cell: '' where the run gave no account, 'none', or the modules separated by spaces."""
    return "" if modules is None else (" ".join(modules) or "none")


def summarize(results_dir) -> dict:
    """footprint.csv, libraries.csv, distributions.csv, summary.json and bytes.png from the folder's records."""
    rd = Path(results_dir)
    records = retry.drop_retried(read_jsonl(rd / "footprint.jsonl"), lambda r: r.get("key"))  # the rerun replaces it
    installs, docker = read_json(rd / "install_sets.json"), read_json(rd / "docker.json")
    write_csv(rd / "footprint.csv", [{
        **r, "mode": r.get("mode") or "", "half_roundings": bool(r.get("half_roundings")),
        "libraries": len(r["libraries"]), "nvidia_libraries": " ".join(r["nvidia_libraries"]),
        "nvrtc": "yes" if r["nvrtc"] else "no", "nvrtc_compiled": _compiled_text(r.get("nvrtc_compiled")),
        **{f"bytes_{c}": r["bytes"].get(c, 0) for c in CATEGORIES},
        "bytes_image": r["image_bytes"], "bytes_total": r["total_bytes"]} for r in records], CSV_FIELDS)
    write_csv(rd / "libraries.csv", [{**r, **lib, "library": lib["name"]} for r in records for lib in r["libraries"]],
              ["side", "dtype", "mode", "library", "nvidia", "process", "path"])
    write_csv(rd / "distributions.csv", [{**r, **d} for r in records for d in r.get("distributions", [])],
              ["side", "dtype", "mode", "distribution", "version", "bytes"])

    sides = {}
    for side in ("cupy", "torch"):
        rs = [r for r in records if r["side"] == side]
        ok = [r for r in rs if r["status"] == "ok"]
        if not rs:
            continue
        biggest = max(ok or rs, key=lambda r: r["total_bytes"])
        sides[side] = {
            "runs": len(rs), "runs_ok": len(ok),
            "nvidia_libraries": sorted({n for r in rs for n in r["nvidia_libraries"]}),
            "nvrtc": any(r["nvrtc"] for r in rs),
            "nvrtc_runs": [r["key"] for r in rs if r["nvrtc"]],
            # None: no run of the side gave an account of what it compiled
            "nvrtc_compiled": (None if all(r.get("nvrtc_compiled") is None for r in rs)
                               else sorted({m for r in rs for m in r.get("nvrtc_compiled") or []})),
            "bytes": biggest["bytes"], "total_bytes": biggest["total_bytes"], "image_bytes": biggest["image_bytes"],
            "largest_run": biggest["key"],
        }
    ratio = (sides["torch"]["image_bytes"] / sides["cupy"]["image_bytes"]
             if "cupy" in sides and "torch" in sides and sides["cupy"]["image_bytes"] else None)
    images = docker.get("images", {})
    image_ratio = (images["torch"]["size_bytes"] / images["cupy"]["size_bytes"] if docker.get("available")
                   and all((images.get(s) or {}).get("size_bytes") for s in ("cupy", "torch")) else None)
    # an install set: the interpreter, the side's distributions and tr2's files
    base = (installs.get("interpreter") or {}).get("bytes", 0) + (installs.get("tr2") or {}).get("bytes", 0)
    summary = {
        "stage": STAGE, "results_dir": rd.name,
        "runs": [{k: r[k] for k in ("key", "side", "model", "dtype", "mode", "half_roundings", "status",
                                    "returncode", "wall_s", "polls", "nvidia_libraries", "nvrtc", "bytes",
                                    "total_bytes", "image_bytes", "log", "last_loss")}
                 | {"libraries": len(r["libraries"]), "nvrtc_compiled": r.get("nvrtc_compiled")}
                 for r in records],
        "sides": sides,
        "run_time_set_ratio_torch_to_cupy": ratio,
        "install_sets": installs,
        "install_set_bytes": {side: base + st["bytes"] for side, st in installs.get("sides", {}).items()} or None,
        "docker": {"available": docker.get("available"), "message": docker.get("message"),
                   "images": images, "image_ratio_torch_to_cupy": image_ratio,
                   "note": "the driver's libcuda comes from the host in both images"},
    }
    return finish(rd, summary, records, lambda: save_figure(
        plots.footprint_bytes(explore.footprint(rd)["footprint"], CATEGORIES), rd / "bytes.png",
        "What each run needed where it trained, by category"),
        steps=STEPS, runs_per_configuration=1, caches="cold (fresh Inductor, Triton and CuPy caches)",
        how="union of /proc/<pid>/maps of the training process and its children, polled while it trained, "
            "and the process's own reading at exit")
