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

# Each file counts once, in the first category that claims it (the order: the package's docstring)
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


def _tree_files(top, drop=("__pycache__", ".ipynb_checkpoints")) -> list[str]:
    out = []
    for root, dirs, files in os.walk(top):
        dirs[:] = [d for d in dirs if d not in drop]
        out.extend(os.path.join(root, f) for f in files)
    return out


def _distribution_files(dist) -> list[str]:
    files = (os.path.realpath(str(dist.locate_file(f))) for f in dist.files or [])
    return [p for p in files if os.path.isfile(p)]


def classify_run(trace: dict) -> dict:
    """Assign every file of a run's run-time set to one category; returns rows, bytes and distributions."""
    libs = [*trace.get("libraries", []), *trace.get("libraries_children", [])]
    stdlib = os.path.realpath(trace.get("stdlib") or sysconfig.get_path("stdlib"))
    site = [os.path.realpath(s) for s in trace.get("site", []) if s]
    claimed: dict[str, tuple[str, str]] = {}     # realpath -> (category, owner)

    def claim(path, category, owner):
        rp = os.path.realpath(path)
        if rp not in claimed and os.path.isfile(rp):
            claimed[rp] = (category, owner)

    def in_stdlib(path):   # the standard library, not a site-packages folder inside it
        rp = os.path.realpath(path)
        return _under(rp, [stdlib]) and not _under(rp, site)

    for lib in libs:
        if kind := nvidia_kind(lib):
            claim(lib, "nvidia_driver" if kind == "driver" else "nvidia_libraries", library_name(lib))
    claim(trace.get("executable") or sys.executable, "interpreter", "python")
    for lib in libs:
        if library_name(lib).startswith("libpython") or in_stdlib(lib):
            claim(lib, "interpreter", "python")

    modules = trace.get("modules", {})
    tops: dict[str, list[str]] = {}
    for name, f in modules.items():
        if f and in_stdlib(f):
            claim(f, "interpreter", "python")
        elif f:
            tops.setdefault(name.split(".")[0], []).append(os.path.realpath(f))

    try:
        pkg_dists = md.packages_distributions()
    except Exception:
        pkg_dists = {}
    dists_used: dict[str, dict] = {}
    for top, files in sorted(tops.items()):
        owned = False
        for dname in dict.fromkeys(pkg_dists.get(top, [])):
            try:
                dist = md.distribution(dname)
            except md.PackageNotFoundError:
                continue
            dfiles = _distribution_files(dist)
            if set(files) & set(dfiles):
                owned, name = True, dist.metadata["Name"]
                if name not in dists_used:
                    for p in dfiles:
                        claim(p, "python_packages", name)
                    dists_used[name] = {"distribution": name, "version": dist.version, "modules": top}
        if not owned:   # not installed as a distribution (an editable install such as tr2): its package folder
            mod_file = modules.get(top)
            if mod_file and os.path.basename(mod_file) == "__init__.py":
                files = _tree_files(os.path.dirname(os.path.realpath(mod_file)))
            for p in files:
                claim(p, "python_packages", top)
            dists_used.setdefault(top, {"distribution": top, "version": getattr(sys.modules.get(top), "__version__", None),
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
    names = {(dist.metadata["Name"] or "").lower() for dist in md.distributions()}
    return sorted(n for n in names if n == "cupy" or n.startswith("cupy-cuda")
                  or re.match(r"^nvidia-(cublas|cuda-nvrtc|cuda-runtime)(-cu\d+)?$", n))


def side_requirements(side: str) -> list[str]:
    return (_cupy_requirements() if side == "cupy" else []) + SIDE_REQUIREMENTS[side]


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


def interpreter_install() -> dict:
    """The interpreter as a slim Python image keeps it: executable, libpython, standard library
    without tests, caches and site-packages."""
    stdlib = os.path.realpath(sysconfig.get_path("stdlib"))
    exe = os.path.realpath(sys.executable)
    files = {exe}
    libdir = sysconfig.get_config_var("LIBDIR") or ""
    ldlib = sysconfig.get_config_var("LDLIBRARY") or ""
    if libdir and (ldlib.endswith(".so") or ".so." in ldlib):
        p = os.path.join(libdir, ldlib)
        if os.path.exists(p):
            files.add(os.path.realpath(p))
    files |= {os.path.realpath(f) for f in _tree_files(stdlib, _SLIM_DROP_DIRS) if not f.endswith((".pyc", ".pyo", ".a"))}
    return {"python": sys.version.split()[0], "stdlib": stdlib, "files": len(files),
            "bytes": sum(_size(p) for p in files)}


def tr2_files() -> list[Path]:
    """What an image copies of this project: lib/tr2 (no caches) and params/models.yaml."""
    files = [Path(p) for p in _tree_files(REPO_ROOT / "lib" / "tr2")]
    return files + [PARAMS_DIR / "models.yaml"]
