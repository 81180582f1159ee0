"""scripts/carry_check.py, the carry checked on the CPU machine before a device call (the products record of the card's
GPU, the cubins of this tree's kernels, the data files), and scripts/edition_call.sh's TR2_PREFLIGHT=1, which runs it
and nothing else; a resumed folder missing from the tree refused in one line."""
import hashlib
import os
import subprocess
import tarfile

import pytest
from conftest import load_script

from tr2 import REPO_ROOT

check = load_script(REPO_ROOT / "scripts" / "carry_check.py", "carry_check")
SCRIPT = REPO_ROOT / "scripts" / "edition_call.sh"
KERNELS = REPO_ROOT / "lib" / "tr2" / "cupy_side" / "kernels"


@pytest.mark.parametrize("files,ok", [
    (["nvidia-h200-cublaslt130100.json"], True),
    (["nvidia-h100-80gb-hbm3-cublaslt130100.json", "nvidia-h200-cublaslt120900.json"], True),
    (["nvidia-h100-80gb-hbm3-cublaslt130100.json"], False),   # the sixty-seventh session's carry
    (["nvidia-h200-cublaslt130100-5e9b8571.json"], False),    # a results folder's kept copy: no run reads that name
    ([], False),
])
def test_the_products_record_of_the_cards_gpu_is_asked_for(tmp_path, files, ok):
    for f in files:
        (tmp_path / f).write_text("{}")
    problem = check.products_problem("nvidia-h200", tmp_path)
    assert (problem is None) == ok, problem
    if not ok:
        assert "no products record for machine 'nvidia-h200'" in problem and "carry_prepare.sh" in problem
        assert (", ".join(sorted(files)) or "nothing") in problem   # what the folder holds, named


def test_an_absent_record_folder_is_a_problem(tmp_path):
    assert "it holds: nothing" in check.products_problem("nvidia-h200", tmp_path / "no-such-folder")


def _archive(tmp_path, names):
    tmp_path.mkdir()
    a = tmp_path / "kernels.tar.xz"
    src = tmp_path / "cubins"
    src.mkdir()
    with tarfile.open(a, "w:xz") as t:
        for n in names:
            (src / n).write_bytes(b"x")
            t.add(src / n, arcname=f"./{n}")
    return a


def test_the_archive_must_hold_every_kernel_sources_cubin(tmp_path):
    want = [check.path_for(f.name, "sm_90").name for f in sorted(KERNELS.glob("*.cu"))]
    assert len(want) > 5 and any(n.startswith("attention-sm_90a-") for n in want)
    assert check.kernels_problem(KERNELS, _archive(tmp_path / "all", want)) is None
    problem = check.kernels_problem(KERNELS, _archive(tmp_path / "one", want[1:]))
    assert problem is not None and f"lacks the cubins of this tree's sources: {want[0]} " in problem
    assert "no " in check.kernels_problem(KERNELS, tmp_path / "none.tar.xz")


def test_data_files_are_checked_by_name_and_md5(tmp_path, monkeypatch):
    (tmp_path / "input.txt").write_text("First Citizen:\n")
    good = hashlib.md5(b"First Citizen:\n").hexdigest()
    monkeypatch.setattr(check, "MD5", {"input.txt": good, "train.bin": "0" * 32})
    assert check.data_problem(["input.txt"], tmp_path) is None
    assert f"no {tmp_path / 'train.bin'}" in check.data_problem(["input.txt", "train.bin"], tmp_path)
    (tmp_path / "train.bin").write_bytes(b"\0\1")
    assert "md5 " + hashlib.md5(b"\0\1").hexdigest() + ", expected " + "0" * 32 in \
        check.data_problem(["input.txt", "train.bin"], tmp_path)


def test_a_cpu_card_asks_for_data_only(tmp_path):
    found = check.problems(["smoke"], tmp_path)   # nothing carried under tmp_path
    assert [what for what, _ in found] == ["data (input.txt)"]
    assert found[0][1].startswith(f"no {tmp_path / 'data' / 'input.txt'}")


def test_a_cuda_card_asks_for_the_whole_carry(tmp_path):
    whats = [what for what, problem in check.problems(["h200-edition"], tmp_path) if problem]
    assert whats == ["products record for nvidia-h200", "cubins of this tree's kernels", "nanoGPT",
                     "data (input.txt, train.bin, val.bin)"]


def _preflight(tmp_path, *specs, rc=0):
    """edition_call.sh with TR2_PREFLIGHT=1 and a stand-in python3 first on PATH that records how it was called
    and exits with rc."""
    stub = tmp_path / "bin" / "python3"
    stub.parent.mkdir(exist_ok=True)
    seen = tmp_path / "seen.txt"
    stub.write_text(f'#!/bin/sh\necho "$*" >>{seen}\nexit {rc}\n')
    stub.chmod(0o755)
    env = {**os.environ, "PATH": f"{stub.parent}{os.pathsep}{os.environ['PATH']}", "TR2_PREFLIGHT": "1"}
    p = subprocess.run(["bash", str(SCRIPT), str(tmp_path / "out"), "60", *specs], cwd=REPO_ROOT, env=env,
                       capture_output=True, text=True, timeout=120)
    return p, (seen.read_text() if seen.exists() else "")


@pytest.mark.parametrize("rc", [0, 1])
def test_the_preflight_runs_the_carry_check_of_each_card_once_and_nothing_else(tmp_path, rc):
    p, seen = _preflight(tmp_path, "series=h200-edition", "families=h200-edition", "method_b=smoke", rc=rc)
    assert seen == "scripts/carry_check.py h200-edition smoke\n", seen   # no runner, no device_env
    assert p.returncode == rc, p.stdout + p.stderr
    assert ("preflight passed" in p.stdout) == (rc == 0)
    assert not (tmp_path / "out").exists()   # nothing written


def test_a_resumed_folder_missing_here_is_refused_before_anything_runs(tmp_path):
    missing = "results/series-20000101-000000-h200-edition"
    assert not (REPO_ROOT / missing).exists()
    for preflight in ("1", "0"):
        env = {**os.environ, "TR2_PREFLIGHT": preflight}
        p = subprocess.run(["bash", str(SCRIPT), str(tmp_path / "out"), "60", f"series={missing}"], cwd=REPO_ROOT,
                           env=env, capture_output=True, text=True, timeout=120)
        assert p.returncode == 2, p.stdout + p.stderr
        assert f"'{missing}' in 'series={missing}' is no folder here; allowed: STAGE=CARD" in p.stderr
        assert not (tmp_path / "out").exists()


def test_a_bad_preflight_value_is_refused(tmp_path):
    env = {**os.environ, "TR2_PREFLIGHT": "yes"}
    p = subprocess.run(["bash", str(SCRIPT), str(tmp_path / "out"), "60", "series=smoke"], cwd=REPO_ROOT, env=env,
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 2 and "TR2_PREFLIGHT 'yes' is not allowed; allowed: 1" in p.stderr, p.stderr
    assert not (tmp_path / "out").exists()
