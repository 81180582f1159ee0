"""The bytes of a run-time set by category, and the install sets pip would bring for each side."""
from __future__ import annotations

import importlib.metadata as md
import os
import re
import sys
import sysconfig
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from .. import PARAMS_DIR, REPO_ROOT
from .maps import library_name, nvidia_kind

# Each file counts once, in the first category that claims it: nvidia_driver, nvidia_libraries,
# interpreter, python_packages, other_libraries (see the package's docstring).
CATEGORIES = ("interpreter", "python_packages", "nvidia_libraries", "nvidia_driver", "other_libraries")
IMAGE_CATEGORIES = tuple(c for c in CATEGORIES if c != "nvidia_driver")   # what an image must hold

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
            try:
                rq = Requirement(r)
                if rq.marker is None or rq.marker.evaluate({"extra": ""}):
                    todo.append(rq.name)
            except Exception:  # noqa: BLE001 - a requirement or marker packaging cannot read: not followed
                continue
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
