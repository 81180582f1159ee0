"""The smallest images that train with each side (docker/*.Dockerfile): built, measured and tried where Docker runs."""
from __future__ import annotations

import csv
import importlib.metadata as md
import io
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

from .. import REPO_ROOT
from ..results import write_text_atomic
from ..trainlog import last_loss
from .runtime_sets import _cupy_requirements, tr2_files

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
    try:
        return f"{name}=={md.version(name)}"
    except md.PackageNotFoundError:
        return None


def image_build_args(side: str, card: dict) -> dict:
    """Build arguments that pin each image to the versions this environment runs."""
    args = {"PYTHON_VERSION": "%d.%d" % sys.version_info[:2]}
    if side == "torch":
        if spec := _pinned("torch"):
            args["TORCH_SPEC"] = spec.split("+")[0]
        if url := os.environ.get("TR2_TORCH_INDEX_URL"):
            args["TORCH_INDEX_URL"] = url
        compiled = any(m != "eager" for m in card.get("torch_modes", []))
        args["COMPILER"] = ("g++" if card.get("device") == "cpu" else "gcc") if compiled else ""
    elif card.get("device") == "cpu":   # the NumPy forms: no CuPy, no NVIDIA library
        args["CUPY_SPEC"], args["CUDA_WHEELS"] = "", ""
    else:
        if cupy := [r for r in _cupy_requirements() if r.startswith("cupy")]:
            args["CUPY_SPEC"] = _pinned(cupy[0]) or cupy[0]
        if wheels := [w for r in _cupy_requirements() if r.startswith("nvidia-") and (w := _pinned(r))]:
            args["CUDA_WHEELS"] = " ".join(wheels)
    return args


def _docker(*args, timeout=None, **kw):
    return subprocess.run(["docker", *args], capture_output=True, text=True, timeout=timeout, **kw)


def image_file_list(tag: str) -> list[tuple[str, int]]:
    """(path, bytes) of every regular file of the image, read from `docker export` of a created container."""
    cid = _docker("create", tag, timeout=120).stdout.strip()
    if not cid:
        return []
    try:
        p = subprocess.Popen(["docker", "export", cid], stdout=subprocess.PIPE)
        with tarfile.open(fileobj=p.stdout, mode="r|") as tar:
            out = [("/" + m.name.lstrip("./"), m.size) for m in tar if m.isfile()]
        p.wait()
        return out
    finally:
        _docker("rm", "-f", cid, timeout=120)


def _docker_logged(args, log: Path, timeout_s) -> tuple[str, int | None]:
    """A docker command's output, written to log ('timeout' where it ran past timeout_s), and its exit code."""
    try:
        r = _docker(*args, timeout=timeout_s)
        text, rc = r.stdout + r.stderr, r.returncode
    except subprocess.TimeoutExpired:
        text, rc = "timeout\n", None
    write_text_atomic(log, text)
    return text, rc


def measure_images(card: dict, results_dir, steps: int, data_dir=None, timeout_s=1800) -> dict:
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
            rec = out["images"][side] = {"tag": tag, "dockerfile": f"docker/{side}.Dockerfile", "build_args": args}
            cmd = ["build", "-f", str(ctx / "docker" / f"{side}.Dockerfile"), "-t", tag]
            for k, v in args.items():
                cmd += ["--build-arg", f"{k}={v}"]
            log = results_dir / "logs" / f"image-{side}-build.log"
            _text, rc = _docker_logged([*cmd, str(ctx)], log, timeout_s)
            rec["build_log"] = str(log.relative_to(results_dir))
            if rc != 0:
                rec["status"] = "build failed"
                continue
            size = _docker("image", "inspect", "-f", "{{.Size}}", tag, timeout=60).stdout.strip()
            rec["size_bytes"] = int(size) if size.isdigit() else None
            files = image_file_list(tag)
            flist = results_dir / f"image-{side}-files.csv"
            buf = io.StringIO()
            csv.writer(buf).writerows([["path", "bytes"], *sorted(files)])
            write_text_atomic(flist, buf.getvalue())
            rec["files"], rec["file_list"] = len(files), flist.name
            # the proof: a short training run in the image
            dtype = card["dtypes"][0]
            run = ["run", "--rm"]
            if card.get("device") == "cuda":
                run += ["--gpus", "all"]
            if data_dir:
                run += ["-v", f"{os.path.realpath(data_dir)}:/data:ro", "-e", "TR2_DATA=/data"]
            run += [tag, "--side", side, "--model", model, "--dtype", dtype, "--steps", str(steps),
                    "--device", card.get("device", "auto")]
            tlog = results_dir / "logs" / f"image-{side}-train.log"
            text, rc = _docker_logged(run, tlog, timeout_s)
            rec.update(status="trained" if rc == 0 else "train failed", train_log=str(tlog.relative_to(results_dir)),
                       train_returncode=rc, last_loss=last_loss(text),
                       train_config={"model": model, "dtype": dtype, "steps": steps})
    return out
