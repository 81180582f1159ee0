"""Footprint (protocol §8, amendments 2 and 3): what each side needs where it trains.

For each configuration of the card (the card's first model; every element type; each PyTorch mode;
the cupy build its half types compare), one short training run is started as

    python -c WRAPPER DUMP --side S --model M --dtype D ... (the trainer's own arguments)

where WRAPPER calls `tr2.train.main` and, when it returns, writes the modules in `sys.modules`
and its own `/proc/self/maps` to DUMP. While it trains, `/proc/<pid>/maps` of the process and
its descendants (Inductor's compile workers) is read a few times a second; the union of all
readings is the set of shared libraries the run mapped. From it come NVIDIA's libraries by name,
whether NVRTC was opened (amendment 2: an opened libnvrtc shows that a kernel was compiled at run
time), and the bytes of the run-time set by category:

    interpreter       the executable, libpython and the standard-library files it imported
    python_packages   the installed distributions of the imported third-party modules (tr2: its folder)
    nvidia_libraries  NVIDIA's libraries mapped (cuBLAS, NVRTC, cuDNN, ...), wherever they live
    nvidia_driver     the driver's libraries mapped (libcuda, libnvidia-*): the host provides them
    other_libraries   every other shared library mapped (the C library, libstdc++, ...)

Each file counts once, in the first category above that claims it, in the order
nvidia_driver, nvidia_libraries, interpreter, python_packages, other_libraries.

The images: docker/cupy.Dockerfile and docker/torch.Dockerfile are the smallest images that
train with each side. Where Docker runs (`docker info` answers), they are built from a context
holding lib/tr2 and params/models.yaml, measured (`docker image inspect`) with their file lists,
and proved by a short training run; where it does not, the summary says so, and the install sets
measured here stand instead: the distributions pip would bring for each side, with the
interpreter's standard library as a slim Python image keeps it.

Writes in the results folder: footprint.jsonl (one record per run, resumable), logs/,
libraries.csv, distributions.csv, install_sets.json, docker.json, footprint.csv, summary.json.
"""
from __future__ import annotations

import csv
import io
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import sysconfig
import tempfile
import time
from pathlib import Path

from . import PARAMS_DIR, REPO_ROOT, retry
from .results import append_jsonl, read_jsonl, write_json_atomic, write_text_atomic, write_yaml_atomic

STAGE = "footprint"
STEPS = 10                      # iterations trained per footprint run (0..STEPS): the start is what matters
POLL_FAST_S, POLL_SLOW_S = 0.05, 0.25
CATEGORIES = ("interpreter", "python_packages", "nvidia_libraries", "nvidia_driver", "other_libraries")
IMAGE_CATEGORIES = tuple(c for c in CATEGORIES if c != "nvidia_driver")   # what an image must hold

# ---------------------------------------------------------------------------------------------
# /proc/<pid>/maps

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
    """Amendment 2: an opened libnvrtc shows that NVRTC compiled at least one module."""
    return any(library_name(p).startswith("libnvrtc") for p in paths)


# ---------------------------------------------------------------------------------------------
# the traced run

WRAPPER = r"""
import sys
_dump = sys.argv[1]
_argv = sys.argv[2:]
sys.argv = ["tr2.train"] + _argv
def _write(rc):
    mods = {}
    for name, mod in list(sys.modules.items()):
        try:
            f = getattr(mod, "__file__", None)
        except Exception:
            f = None
        mods[name] = f if isinstance(f, str) else None
    try:
        with open("/proc/self/maps") as fh:
            maps = fh.read()
    except OSError:
        maps = ""
    import json, sysconfig
    with open(_dump, "w") as fh:
        json.dump({"returncode": rc, "modules": mods, "maps": maps, "executable": sys.executable,
                   "prefix": sys.prefix, "base_prefix": sys.base_prefix, "version": sys.version.split()[0],
                   "stdlib": sysconfig.get_path("stdlib"),
                   "site": sorted({sysconfig.get_path("purelib"), sysconfig.get_path("platlib")} | set(p for p in sys.path if p.endswith(("site-packages", "dist-packages"))))}, fh)
_rc = 1
try:
    from tr2.train import main
    _rc = main(_argv)
except SystemExit as e:
    _rc = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
finally:
    _write(_rc)
sys.exit(_rc)
"""


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
    """Reads /proc/<pid>/maps of a running process and its descendants in a thread, a few times a second;
    `libraries` is the union (main process first, then what only its children mapped). For a stage that
    starts the trainer itself (the series' discarded run, amendment 2):

        with MapsPoller(proc.pid) as poller:
            proc.wait()
        nvidia_libraries(poller.all_libraries()), nvrtc_opened(poller.all_libraries())
    """

    def __init__(self, pid: int, interval_s: float = POLL_SLOW_S):
        import threading
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


def trace_run(train_argv: list[str], log_path, dump_path, env=None, timeout_s=None, python=None) -> dict:
    """Run the trainer under the wrapper; poll the maps of its process tree while it runs.

    Returns {status, returncode, wall_s, polls, libraries (main process), libraries_children,
    modules (name -> file), interpreter facts}.
    """
    python = python or sys.executable
    log_path, dump_path = Path(log_path), Path(dump_path)
    log_path.parent.mkdir(parents=True, exist_ok=True)
    if dump_path.exists():
        dump_path.unlink()
    cmd = [python, "-u", "-c", WRAPPER, str(dump_path), *train_argv]
    t0 = time.monotonic()
    status = "ok"
    with open(log_path, "w") as log:
        log.write("$ python -m tr2.train " + " ".join(train_argv) + "\n")
        log.flush()
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=str(REPO_ROOT),
                                start_new_session=True)
        with MapsPoller(proc.pid) as poller:
            try:
                proc.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                status = "timeout"
                try:
                    os.killpg(proc.pid, signal.SIGKILL)    # the run's own group: it and its compile workers
                except ProcessLookupError:
                    pass
                proc.wait()
    main_libs, child_libs, polls = poller.libraries, poller.children, poller.polls
    wall = time.monotonic() - t0
    dump = {}
    if dump_path.exists():
        try:
            dump = json.loads(dump_path.read_text())
        except json.JSONDecodeError:
            dump = {}
    for lib in parse_maps(dump.get("maps", "")):   # the process's own last reading, at exit
        main_libs.setdefault(lib, True)
    returncode = proc.returncode
    if status == "ok" and returncode != 0:
        status = "oom" if returncode == 3 else "failed"
    return {
        "status": status, "returncode": returncode, "wall_s": round(wall, 3), "polls": polls,
        "libraries": list(main_libs), "libraries_children": [p for p in child_libs if p not in main_libs],
        "modules": dump.get("modules", {}), "executable": dump.get("executable", python),
        "stdlib": dump.get("stdlib") or sysconfig.get_path("stdlib"),
        "site": dump.get("site") or [sysconfig.get_path("purelib"), sysconfig.get_path("platlib")],
        "python": dump.get("version"),
    }


# ---------------------------------------------------------------------------------------------
# bytes of the run-time set

_SLIM_DROP_DIRS = {"site-packages", "dist-packages", "test", "tests", "idle_test", "__pycache__"}


def _size(path) -> int:
    try:
        return os.stat(path).st_size
    except OSError:
        return 0


def _under(path: str, roots) -> bool:
    return any(r and (path == r or path.startswith(r.rstrip("/") + "/")) for r in roots)


def _tree_files(top) -> list[str]:
    out = []
    for root, dirs, files in os.walk(top):
        dirs[:] = [d for d in dirs if d not in ("__pycache__", ".ipynb_checkpoints")]
        out.extend(os.path.join(root, f) for f in files)
    return out


def _distribution_files(dist) -> list[str]:
    files = []
    for f in dist.files or []:
        p = os.path.realpath(str(dist.locate_file(f)))
        if os.path.isfile(p):
            files.append(p)
    return files


def classify_run(trace: dict) -> dict:
    """Assign every file of a run's run-time set to one category; returns rows, bytes and distributions."""
    import importlib.metadata as md

    libs = list(trace.get("libraries", [])) + list(trace.get("libraries_children", []))
    stdlib = os.path.realpath(trace.get("stdlib") or sysconfig.get_path("stdlib"))
    site = [os.path.realpath(s) for s in trace.get("site", []) if s]
    claimed: dict[str, tuple[str, str]] = {}     # realpath -> (category, owner)

    def claim(path, category, owner):
        rp = os.path.realpath(path)
        if rp not in claimed and os.path.isfile(rp):
            claimed[rp] = (category, owner)

    for lib in libs:
        kind = nvidia_kind(lib)
        if kind:
            claim(lib, "nvidia_driver" if kind == "driver" else "nvidia_libraries", library_name(lib))
    exe = trace.get("executable") or sys.executable
    claim(exe, "interpreter", "python")
    for lib in libs:
        if library_name(lib).startswith("libpython"):
            claim(lib, "interpreter", "python")
        elif _under(os.path.realpath(lib), [stdlib]) and not _under(os.path.realpath(lib), site):
            claim(lib, "interpreter", "python")

    modules = trace.get("modules", {})
    tops: dict[str, list[str]] = {}
    for name, f in modules.items():
        if not f:
            continue
        rf = os.path.realpath(f)
        if _under(rf, [stdlib]) and not _under(rf, site):
            claim(rf, "interpreter", "python")
            continue
        tops.setdefault(name.split(".")[0], []).append(rf)

    try:
        pkg_dists = md.packages_distributions()
    except Exception:
        pkg_dists = {}
    dists_used: dict[str, dict] = {}
    for top, files in sorted(tops.items()):
        owners = []
        for dname in dict.fromkeys(pkg_dists.get(top, [])):
            try:
                dist = md.distribution(dname)
            except md.PackageNotFoundError:
                continue
            dfiles = _distribution_files(dist)
            if set(files) & set(dfiles):
                owners.append((dist.metadata["Name"], dist.version, dfiles))
        if owners:
            for dname, version, dfiles in owners:
                if dname in dists_used:
                    continue
                for p in dfiles:
                    claim(p, "python_packages", dname)
                dists_used[dname] = {"distribution": dname, "version": version, "modules": top}
        else:   # not installed as a distribution (an editable install such as tr2): its package folder
            pkg = sys.modules.get(top)
            mod_file = modules.get(top)
            if mod_file and os.path.basename(mod_file) == "__init__.py":
                tree = _tree_files(os.path.dirname(os.path.realpath(mod_file)))
            else:
                tree = files
            for p in tree:
                claim(p, "python_packages", top)
            dists_used.setdefault(top, {"distribution": top, "version": getattr(pkg, "__version__", None),
                                         "modules": top})
    for lib in libs:
        claim(lib, "other_libraries", library_name(lib))

    rows = [{"path": p, "category": c, "owner": o, "bytes": _size(p)} for p, (c, o) in claimed.items()]
    by_cat = {c: 0 for c in CATEGORIES}
    for r in rows:
        by_cat[r["category"]] += r["bytes"]
    for d in dists_used.values():
        d["bytes"] = sum(r["bytes"] for r in rows if r["category"] == "python_packages" and r["owner"] == d["distribution"])
    return {"rows": rows, "bytes": by_cat, "distributions": sorted(dists_used.values(), key=lambda d: -d["bytes"])}


# ---------------------------------------------------------------------------------------------
# install sets: what pip brings for each side, measured in this environment

SIDE_REQUIREMENTS = {"torch": ["torch", "numpy", "pyyaml"], "cupy": ["numpy", "pyyaml"]}


def _cupy_requirements() -> list[str]:
    """The cupy wheel installed here and NVIDIA's wheels of the libraries the cupy side opens."""
    import importlib.metadata as md
    names = []
    for dist in md.distributions():
        n = (dist.metadata["Name"] or "").lower()
        if n.startswith("cupy-cuda") or n == "cupy":
            names.append(n)
        elif re.match(r"^nvidia-(cublas|cuda-nvrtc|cuda-runtime)(-cu\d+)?$", n):
            names.append(n)
    return sorted(set(names))


def side_requirements(side: str) -> list[str]:
    reqs = list(SIDE_REQUIREMENTS[side])
    if side == "cupy":
        reqs = _cupy_requirements() + reqs
    return reqs


def install_set(requirements: list[str]) -> dict:
    """The closure of `requirements` over installed distributions (markers evaluated, no extras)."""
    import importlib.metadata as md
    try:
        from packaging.requirements import Requirement
        from packaging.utils import canonicalize_name
    except ImportError:     # pragma: no cover - packaging ships with pip/setuptools
        Requirement = None

        def canonicalize_name(n):
            return re.sub(r"[-_.]+", "-", n).lower()
    todo, seen, dists, missing = list(requirements), set(), [], []
    while todo:
        req = todo.pop(0)
        name = canonicalize_name(re.split(r"[\s;<>=!~\[(]", req.strip(), 1)[0])
        if name in seen:
            continue
        seen.add(name)
        try:
            dist = md.distribution(name)
        except md.PackageNotFoundError:
            missing.append(name)
            continue
        files = _distribution_files(dist)
        dists.append({"distribution": dist.metadata["Name"], "version": dist.version,
                      "files": len(files), "bytes": sum(_size(p) for p in files)})
        for r in dist.requires or []:
            if Requirement is not None:
                try:
                    rq = Requirement(r)
                except Exception:
                    continue
                if rq.marker is not None:
                    try:
                        if not rq.marker.evaluate({"extra": ""}):
                            continue
                    except Exception:
                        continue
                todo.append(rq.name)
            elif ";" not in r:
                todo.append(r)
    dists.sort(key=lambda d: -d["bytes"])
    return {"requirements": requirements, "distributions": dists, "missing": sorted(missing),
            "bytes": sum(d["bytes"] for d in dists)}


def interpreter_install(python=None) -> dict:
    """The interpreter as a slim Python image keeps it: executable, libpython, standard library
    without tests, caches and site-packages."""
    stdlib = os.path.realpath(sysconfig.get_path("stdlib"))
    exe = os.path.realpath(python or sys.executable)
    files = {exe}
    libdir = sysconfig.get_config_var("LIBDIR") or ""
    ldlib = sysconfig.get_config_var("LDLIBRARY") or ""
    if libdir and (ldlib.endswith(".so") or ".so." in ldlib):
        p = os.path.join(libdir, ldlib)
        if os.path.exists(p):
            files.add(os.path.realpath(p))
    for root, dirs, fs in os.walk(stdlib):
        dirs[:] = [d for d in dirs if d not in _SLIM_DROP_DIRS]
        for f in fs:
            if not f.endswith((".pyc", ".pyo", ".a")):
                files.add(os.path.realpath(os.path.join(root, f)))
    return {"python": sys.version.split()[0], "stdlib": stdlib, "files": len(files),
            "bytes": sum(_size(p) for p in files)}


def tr2_files() -> list[Path]:
    """What an image copies of this project: lib/tr2 (no caches) and params/models.yaml."""
    files = [Path(p) for p in _tree_files(REPO_ROOT / "lib" / "tr2")]
    return files + [PARAMS_DIR / "models.yaml"]


# ---------------------------------------------------------------------------------------------
# Docker

DOCKER_DIR = REPO_ROOT / "docker"


def docker_available(timeout_s: float = 20) -> tuple[bool, str]:
    exe = shutil.which("docker")
    if not exe:
        return False, "no docker command on this machine"
    try:
        p = subprocess.run([exe, "info", "--format", "{{.ServerVersion}}"], capture_output=True, text=True,
                           timeout=timeout_s)
    except subprocess.TimeoutExpired:
        return False, "docker info did not answer within %d s" % timeout_s
    if p.returncode != 0 or not p.stdout.strip():
        msg = " ".join((p.stderr or p.stdout).split())[:300]
        return False, "the Docker daemon does not run here: " + (msg or f"docker info exited {p.returncode}")
    return True, "Docker server " + p.stdout.strip()


def build_context(dest) -> Path:
    """A build context holding lib/tr2 (no caches) and params/models.yaml, and the Dockerfiles."""
    dest = Path(dest)
    for f in tr2_files():
        target = dest / f.relative_to(REPO_ROOT)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(f, target)
    (dest / "docker").mkdir(parents=True, exist_ok=True)
    for f in DOCKER_DIR.glob("*"):
        if f.is_file():
            shutil.copy2(f, dest / "docker" / f.name)
    return dest


def _pinned(name: str):
    import importlib.metadata as md
    try:
        return f"{name}=={md.version(name)}"
    except md.PackageNotFoundError:
        return None


def image_build_args(side: str, card: dict) -> dict:
    """Build arguments that pin each image to the versions this environment runs."""
    args = {"PYTHON_VERSION": "%d.%d" % sys.version_info[:2]}
    if side == "torch":
        spec = _pinned("torch")
        if spec:
            args["TORCH_SPEC"] = spec.split("+")[0]
        if os.environ.get("TR2_TORCH_INDEX_URL"):
            args["TORCH_INDEX_URL"] = os.environ["TR2_TORCH_INDEX_URL"]
        compiled = [m for m in card.get("torch_modes", []) if m != "eager"]
        args["COMPILER"] = ("g++" if card.get("device") == "cpu" else "gcc") if compiled else ""
    elif card.get("device") == "cpu":   # the NumPy forms: no CuPy, no NVIDIA library
        args["CUPY_SPEC"], args["CUDA_WHEELS"] = "", ""
    else:
        cupy = [r for r in _cupy_requirements() if r.startswith("cupy")]
        if cupy:
            args["CUPY_SPEC"] = _pinned(cupy[0]) or cupy[0]
        wheels = [_pinned(r) for r in _cupy_requirements() if r.startswith("nvidia-")]
        if any(wheels):
            args["CUDA_WHEELS"] = " ".join(w for w in wheels if w)
    return args


def _docker(*args, timeout=None, **kw):
    return subprocess.run(["docker", *args], capture_output=True, text=True, timeout=timeout, **kw)


def image_file_list(tag: str) -> list[tuple[str, int]]:
    """(path, bytes) of every regular file of the image, read from `docker export` of a created container."""
    import tarfile
    cid = _docker("create", tag, timeout=120).stdout.strip()
    if not cid:
        return []
    try:
        p = subprocess.Popen(["docker", "export", cid], stdout=subprocess.PIPE)
        out = []
        with tarfile.open(fileobj=p.stdout, mode="r|") as tar:
            for m in tar:
                if m.isfile():
                    out.append(("/" + m.name.lstrip("./"), m.size))
        p.wait()
        return out
    finally:
        _docker("rm", "-f", cid, timeout=120)


def measure_images(card: dict, results_dir, data_dir=None, timeout_s=1800) -> dict:
    """Build, measure and try each side's image where Docker runs; otherwise say why not."""
    results_dir = Path(results_dir)
    ok, message = docker_available()
    out = {"available": ok, "message": message, "images": {}}
    if not ok:
        return out
    model = card["models"][0]
    with tempfile.TemporaryDirectory(prefix="tr2-image-") as tmp:
        ctx = build_context(tmp)
        for side in ("cupy", "torch"):
            tag = f"tr2-footprint-{side}:{card['card']}"
            args = image_build_args(side, card)
            rec = {"tag": tag, "dockerfile": f"docker/{side}.Dockerfile", "build_args": args}
            cmd = ["build", "-f", str(ctx / "docker" / f"{side}.Dockerfile"), "-t", tag]
            for k, v in args.items():
                cmd += ["--build-arg", f"{k}={v}"]
            try:
                b = _docker(*cmd, str(ctx), timeout=timeout_s)
            except subprocess.TimeoutExpired:
                b = None
            log = results_dir / "logs" / f"image-{side}-build.log"
            write_text_atomic(log, (b.stdout + b.stderr) if b else "timeout\n")
            rec["build_log"] = str(log.relative_to(results_dir))
            if b is None or b.returncode != 0:
                rec["status"] = "build failed"
                out["images"][side] = rec
                continue
            size = _docker("image", "inspect", "-f", "{{.Size}}", tag, timeout=60).stdout.strip()
            rec["size_bytes"] = int(size) if size.isdigit() else None
            files = image_file_list(tag)
            flist = results_dir / f"image-{side}-files.csv"
            buf = io.StringIO()
            w = csv.writer(buf)
            w.writerow(["path", "bytes"])
            w.writerows(sorted(files))
            write_text_atomic(flist, buf.getvalue())
            rec["files"], rec["file_list"] = len(files), flist.name
            # the proof: a short training run in the image
            dtype = card["dtypes"][0]
            run = ["run", "--rm"]
            if card.get("device") == "cuda":
                run += ["--gpus", "all"]
            if data_dir:
                run += ["-v", f"{os.path.realpath(data_dir)}:/data:ro", "-e", "TR2_DATA=/data"]
            run += [tag, "--side", side, "--model", model, "--dtype", dtype, "--steps", str(STEPS),
                    "--device", card.get("device", "auto")]
            try:
                r = _docker(*run, timeout=timeout_s)
                text, rc = r.stdout + r.stderr, r.returncode
            except subprocess.TimeoutExpired:
                text, rc = "timeout\n", None
            tlog = results_dir / "logs" / f"image-{side}-train.log"
            write_text_atomic(tlog, text)
            losses = re.findall(r"iter (\d+): loss ([0-9.]+)", text)
            rec.update(status="trained" if rc == 0 else "train failed", train_log=str(tlog.relative_to(results_dir)),
                       train_returncode=rc, last_loss=float(losses[-1][1]) if losses else None,
                       train_config={"model": model, "dtype": dtype, "steps": STEPS})
            out["images"][side] = rec
    return out


# ---------------------------------------------------------------------------------------------
# the stage

def configurations(card: dict) -> list[dict]:
    """One run per side and element type, and per PyTorch mode; the cupy build its verdict compares."""
    model = card["models"][0]
    hr = bool(True in card.get("half_roundings", [False]))
    out = []
    for dtype in card["dtypes"]:
        out.append({"side": "cupy", "model": model, "dtype": dtype, "mode": None,
                    "half_roundings": hr and dtype != "float32"})
        for mode in card["torch_modes"]:
            out.append({"side": "torch", "model": model, "dtype": dtype, "mode": mode, "half_roundings": False})
    return out


def config_key(c: dict) -> str:
    k = f"{c['side']}-{c['model']}-{c['dtype']}"
    if c["side"] == "torch":
        k += f"-{c['mode']}"
    elif c.get("half_roundings"):
        k += "-hr"
    return k


def train_argv(c: dict, device: str, steps: int = STEPS) -> list[str]:
    argv = ["--side", c["side"], "--model", c["model"], "--dtype", c["dtype"], "--steps", str(steps),
            "--device", device, "--log-interval", "1"]
    if c["side"] == "torch":
        argv += ["--mode", c["mode"]]
    if c.get("half_roundings"):
        argv += ["--half-roundings"]
    return argv


def measure(c: dict, results_dir, device: str, timeout_s=None, env=None) -> dict:
    """One traced run of configuration c; the record appended to footprint.jsonl (no path lists)."""
    results_dir = Path(results_dir)
    key = config_key(c)
    env = dict(os.environ if env is None else env)
    # cold caches, as in a configuration's first run: whatever compiles at the start, compiles here
    cache = results_dir / "cache" / key
    if cache.exists():      # a run killed half-way: its start again is cold too
        shutil.rmtree(cache, ignore_errors=True)
    env["TORCHINDUCTOR_CACHE_DIR"] = str(cache / "inductor")
    env["TRITON_CACHE_DIR"] = str(cache / "triton")
    env["CUPY_CACHE_DIR"] = str(cache / "cupy")
    env["PYTHONUNBUFFERED"] = "1"
    trace = trace_run(train_argv(c, device), results_dir / "logs" / f"{key}.log",
                      results_dir / "logs" / f"{key}.dump.json", env=env, timeout_s=timeout_s)
    cls = classify_run(trace)
    buf = io.StringIO()
    w = csv.writer(buf)
    w.writerow(["path", "category", "owner", "bytes"])
    mapped_main, mapped_kids = set(trace["libraries"]), set(trace["libraries_children"])
    for r in sorted(cls["rows"], key=lambda r: (r["category"], r["owner"], r["path"])):
        w.writerow([r["path"], r["category"], r["owner"], r["bytes"]])
    write_text_atomic(results_dir / "files" / f"{key}.csv", buf.getvalue())
    all_libs = list(mapped_main) + [p for p in mapped_kids if p not in mapped_main]
    log_text = (results_dir / "logs" / f"{key}.log").read_text(errors="replace")
    losses = re.findall(r"iter (\d+): loss ([0-9.]+)", log_text)
    return {
        "key": key, **c, "device": device, "steps": STEPS, "status": trace["status"],
        "returncode": trace["returncode"], "wall_s": trace["wall_s"], "polls": trace["polls"],
        "last_loss": float(losses[-1][1]) if losses else None,
        "libraries": [{"name": library_name(p), "path": p, "nvidia": nvidia_kind(p),
                       "process": "main" if p in mapped_main else "child"} for p in all_libs],
        "nvidia_libraries": nvidia_libraries(all_libs),
        "nvrtc": nvrtc_opened(all_libs),
        "modules": len(trace["modules"]),
        "bytes": cls["bytes"], "total_bytes": sum(cls["bytes"].values()),
        "image_bytes": sum(cls["bytes"][c2] for c2 in IMAGE_CATEGORIES),
        "distributions": cls["distributions"], "files_csv": f"files/{key}.csv",
        "log": f"logs/{key}.log", "python": trace["python"],
    }


def run(card: dict, results_dir) -> None:
    """Resumable: configurations already in footprint.jsonl are not run again."""
    from .sysinfo import machine_info
    rd = Path(results_dir)
    (rd / "logs").mkdir(parents=True, exist_ok=True)
    if not (rd / "card.yaml").exists():
        write_yaml_atomic(rd / "card.yaml", card)
    if not (rd / "machine.json").exists():
        write_json_atomic(rd / "machine.json", machine_info())
    done = {r.get("key") for r in read_jsonl(rd / "footprint.jsonl") if not retry.should_retry(r)}  # tr2.retry
    timeout = (card.get("series") or {}).get("timeout_s")
    device = card.get("device", "auto")
    for c in configurations(card):
        if config_key(c) in done:
            continue
        append_jsonl(rd / "footprint.jsonl", measure(c, rd, device, timeout_s=timeout))
    if not (rd / "install_sets.json").exists():
        sets = {side: install_set(side_requirements(side)) for side in ("cupy", "torch")}
        tr2_bytes = sum(_size(p) for p in tr2_files())
        write_json_atomic(rd / "install_sets.json", {"interpreter": interpreter_install(), "sides": sets,
                                                     "tr2": {"files": len(tr2_files()), "bytes": tr2_bytes}})
    if not (rd / "docker.json").exists():
        write_json_atomic(rd / "docker.json", measure_images(card, rd, data_dir=_data_dir()))
    summarize(rd)


def _data_dir():
    for cand in (os.environ.get("TR2_DATA"), REPO_ROOT / "data", REPO_ROOT.parent / "shared" / "data" / "shakespeare"):
        if cand and Path(cand).is_dir():
            return str(cand)
    return None


CSV_FIELDS = ["side", "model", "dtype", "mode", "half_roundings", "status", "libraries", "nvidia_libraries",
              "nvrtc", *[f"bytes_{c}" for c in CATEGORIES], "bytes_image", "bytes_total", "log"]


def summarize(results_dir) -> dict:
    import yaml
    rd = Path(results_dir)
    records = retry.drop_retried(read_jsonl(rd / "footprint.jsonl"), lambda r: r.get("key"))
    machine = json.loads((rd / "machine.json").read_text()) if (rd / "machine.json").exists() else {}
    card = yaml.safe_load((rd / "card.yaml").read_text()) if (rd / "card.yaml").exists() else {}
    installs = json.loads((rd / "install_sets.json").read_text()) if (rd / "install_sets.json").exists() else {}
    docker = json.loads((rd / "docker.json").read_text()) if (rd / "docker.json").exists() else {}

    rows = []
    for r in records:
        rows.append({
            "side": r["side"], "model": r["model"], "dtype": r["dtype"], "mode": r.get("mode") or "",
            "half_roundings": bool(r.get("half_roundings")), "status": r["status"],
            "libraries": len(r["libraries"]), "nvidia_libraries": " ".join(r["nvidia_libraries"]),
            "nvrtc": "yes" if r["nvrtc"] else "no",
            **{f"bytes_{c}": r["bytes"].get(c, 0) for c in CATEGORIES},
            "bytes_image": r["image_bytes"], "bytes_total": r["total_bytes"], "log": r["log"],
        })
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=CSV_FIELDS)
    w.writeheader()
    w.writerows(rows)
    write_text_atomic(rd / "footprint.csv", buf.getvalue())

    lbuf = io.StringIO()
    lw = csv.writer(lbuf)
    lw.writerow(["side", "dtype", "mode", "library", "nvidia", "process", "path"])
    for r in records:
        for lib in r["libraries"]:
            lw.writerow([r["side"], r["dtype"], r.get("mode") or "", lib["name"], lib["nvidia"] or "",
                         lib["process"], lib["path"]])
    write_text_atomic(rd / "libraries.csv", lbuf.getvalue())

    dbuf = io.StringIO()
    dw = csv.writer(dbuf)
    dw.writerow(["side", "dtype", "mode", "distribution", "version", "bytes"])
    for r in records:
        for d in r.get("distributions", []):
            dw.writerow([r["side"], r["dtype"], r.get("mode") or "", d["distribution"], d.get("version"), d["bytes"]])
    write_text_atomic(rd / "distributions.csv", dbuf.getvalue())

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
            "bytes": biggest["bytes"], "total_bytes": biggest["total_bytes"], "image_bytes": biggest["image_bytes"],
            "largest_run": biggest["key"],
        }
    conditions = {
        "card": card.get("card"), "machine": card.get("machine"), "device": card.get("device"),
        "date": machine.get("date"), "commit": machine.get("commit"), "dirty": machine.get("dirty"),
        "versions": {k: machine.get(k) for k in ("python", "torch", "cupy", "triton", "numpy", "cudnn", "torch_cuda")},
        "gpus": machine.get("gpus"), "host": machine.get("host"),
        "steps": STEPS, "runs_per_configuration": 1, "caches": "cold (fresh Inductor, Triton and CuPy caches)",
        "how": "union of /proc/<pid>/maps of the training process and its children, polled while it trained, "
               "and the process's own reading at exit",
    }
    ratio = None
    if "cupy" in sides and "torch" in sides and sides["cupy"]["image_bytes"]:
        ratio = sides["torch"]["image_bytes"] / sides["cupy"]["image_bytes"]
    images = docker.get("images", {})
    image_ratio = None
    if docker.get("available") and all((images.get(s) or {}).get("size_bytes") for s in ("cupy", "torch")):
        image_ratio = images["torch"]["size_bytes"] / images["cupy"]["size_bytes"]
    summary = {
        "stage": STAGE, "results_dir": rd.name, "conditions": conditions,
        "runs": [{k: r[k] for k in ("key", "side", "model", "dtype", "mode", "half_roundings", "status",
                                    "returncode", "wall_s", "polls", "nvidia_libraries", "nvrtc", "bytes",
                                    "total_bytes", "image_bytes", "log", "last_loss")} | {"libraries": len(r["libraries"])}
                 for r in records],
        "sides": sides,
        "run_time_set_ratio_torch_to_cupy": ratio,
        "install_sets": installs,
        "install_set_bytes": None,
        "docker": {"available": docker.get("available"), "message": docker.get("message"),
                   "images": images, "image_ratio_torch_to_cupy": image_ratio,
                   "note": "the driver's libcuda comes from the host in both images"},
    }
    if installs:
        summary["install_set_bytes"] = install_totals(summary)
    write_json_atomic(rd / "summary.json", summary)
    return summary


def load_table(results_dir):
    """footprint.csv as a pandas DataFrame (for the notebook)."""
    import pandas as pd
    return pd.read_csv(Path(results_dir) / "footprint.csv", keep_default_na=False)


CATEGORY_LABELS = {
    "interpreter": "interpreter (executable, libpython, standard library imported)",
    "python_packages": "Python packages imported (their installed distributions)",
    "nvidia_libraries": "NVIDIA libraries mapped",
    "nvidia_driver": "NVIDIA driver libraries mapped (from the host)",
    "other_libraries": "other shared libraries mapped",
}


def plot_bytes(results_dir, path="bytes.png"):
    """Stacked bars: the bytes of each run's run-time set by category (MB); saved in the results folder."""
    import matplotlib
    import matplotlib.pyplot as plt
    df = load_table(results_dir)
    fig, ax = plt.subplots(figsize=(8, 1.8 + 0.45 * max(1, len(df))))
    labels = [f"{r.side} {r.dtype}" + (f" {r.mode}" if r.mode else "") + ("" if r.status == "ok" else f" ({r.status})")
              for r in df.itertuples()]
    left = [0.0] * len(df)
    colors = matplotlib.colormaps["tab10"].colors
    for i, c in enumerate(CATEGORIES):
        vals = [v / 1e6 for v in df[f"bytes_{c}"]]
        ax.barh(labels, vals, left=left, color=colors[i], label=c.replace("_", " "))
        left = [a + b for a, b in zip(left, vals)]
    ax.set_xlabel("MB (10^6 bytes) of the run-time set")
    ax.invert_yaxis()
    ax.set_title("What each run needed where it trained, by category")
    fig.legend(*ax.get_legend_handles_labels(), fontsize=8, loc="lower center", ncol=3, frameon=False)
    fig.tight_layout(rect=(0, 0.7 / fig.get_figheight(), 1, 1))
    if path:
        fig.savefig(Path(results_dir) / path, dpi=100)
    return fig


def libraries_table(results_dir):
    """NVIDIA's libraries by run: one column per run, 'main'/'child' where the run mapped it."""
    import pandas as pd
    df = pd.read_csv(Path(results_dir) / "libraries.csv", keep_default_na=False)
    df = df[df["nvidia"] != ""]
    if df.empty:
        return pd.DataFrame({"NVIDIA library": [], "mapped by": []})
    df = df.assign(run=df["side"] + " " + df["dtype"] + (" " + df["mode"]).where(df["mode"] != "", ""))
    t = df.pivot_table(index=["library", "nvidia"], columns="run", values="process", aggfunc="first", fill_value="")
    return t


def install_table(summary: dict):
    """The install sets: each side's distributions and their bytes, with the interpreter's."""
    import pandas as pd
    sets = summary.get("install_sets", {})
    rows = []
    interp = sets.get("interpreter", {})
    for side, s in sets.get("sides", {}).items():
        rows.append({"side": side, "what": f"Python {interp.get('python')} (slim: no tests, no caches)",
                     "version": interp.get("python"), "MB": interp.get("bytes", 0) / 1e6})
        for d in s["distributions"]:
            rows.append({"side": side, "what": d["distribution"], "version": d["version"], "MB": d["bytes"] / 1e6})
        rows.append({"side": side, "what": "tr2 (lib/tr2, params/models.yaml)", "version": "",
                     "MB": sets.get("tr2", {}).get("bytes", 0) / 1e6})
        for m in s.get("missing", []):
            rows.append({"side": side, "what": f"{m} (not installed here)", "version": "", "MB": float("nan")})
    return pd.DataFrame(rows)


def install_totals(summary: dict) -> dict:
    """side -> bytes of its install set: interpreter + distributions + tr2."""
    sets = summary.get("install_sets", {})
    base = sets.get("interpreter", {}).get("bytes", 0) + sets.get("tr2", {}).get("bytes", 0)
    return {side: base + s["bytes"] for side, s in sets.get("sides", {}).items()}
