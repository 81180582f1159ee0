"""scripts/edition_call.sh, the device call of a card run in pieces, run here on the smoke card: a stage on a fresh
folder, the card's folders back in results.tgz without their .npz, and a bad stage name refused in one line."""
import json
import os
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from tr2 import REPO_ROOT, RESULTS_DIR
from tr2.sysinfo import lib_digest

SCRIPT = REPO_ROOT / "scripts" / "edition_call.sh"


def _call(out, *specs, limit="300"):
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}  # python3: ours
    return subprocess.run(["bash", str(SCRIPT), str(out), limit, *specs], cwd=REPO_ROOT, env=env,
                          capture_output=True, text=True, timeout=600)


@pytest.mark.parametrize("args,says", [
    (("sries=smoke",), "stage 'sries' in 'sries=smoke' is not allowed; allowed: series | method_a | method_b"),
    (("series",), "'series' names no TARGET; allowed: STAGE=CARD (a fresh folder) or STAGE=results/FOLDER"),
    (("series=",), "'series=' names no TARGET"),
    (("--limit", "10m", "series=smoke"), "LIMIT_S '10m' is not allowed; allowed: whole seconds, 30 or more"),
    ((), "at least one STAGE=TARGET needed, 1 argument(s) given; usage: bash scripts/edition_call.sh OUT LIMIT_S"),
])
def test_bad_arguments_are_refused_before_anything_runs(tmp_path, args, says):
    if args[:1] == ("--limit",):
        p = _call(tmp_path / "out", *args[2:], limit=args[1])
    elif not args:
        p = subprocess.run(["bash", str(SCRIPT), str(tmp_path / "out")], capture_output=True, text=True)
    else:
        p = _call(tmp_path / "out", *args)
    assert p.returncode == 2 and says in p.stderr, p.stderr
    assert not (tmp_path / "out").exists()   # nothing written


@pytest.mark.slow
def test_a_stage_on_a_fresh_folder_comes_back_packed(tmp_path):
    before = set(RESULTS_DIR.glob("method_b-*-smoke"))
    out = tmp_path / "out"
    # a folder of the same card that the call does not write in stays out of the archive (unpacked later, a stale copy
    # would overwrite what another call added to it)
    old = RESULTS_DIR / "series-20000101-000000-smoke"
    try:
        shutil.rmtree(old, ignore_errors=True)   # a run killed before its cleanup left one (ignored by git: *-smoke)
        (old / "logs").mkdir(parents=True)
        (old / "runs.jsonl").write_text("")
        os.utime(old / "runs.jsonl", (946684800, 946684800))
        os.utime(old / "logs", (946684800, 946684800))
        os.utime(old, (946684800, 946684800))
        p = _call(out, "method_b=smoke")
        made = set(RESULTS_DIR.glob("method_b-*-smoke")) - before
        assert p.returncode == 0, p.stdout + p.stderr + "".join(f.read_text() for f in out.glob("*.log"))
        assert len(made) == 1
        (folder,) = made
        assert (out / "times.txt").read_text().startswith("method_b rc 0 ")
        assert (out / "machine.txt").is_file() and (out / "method_b.log").is_file()
        assert list(folder.glob("runs/tiny/init.npz"))  # written here, and left out of what goes back
        with tarfile.open(out / "results.tgz") as t:
            names = t.getnames()
        assert f"results/{folder.name}/runs.jsonl" in names and f"results/{folder.name}/summary.json" in names
        assert not [n for n in names if n.endswith(".npz")]
        assert not [n for n in names if old.name in n]
    finally:
        shutil.rmtree(old, ignore_errors=True)
        for d in set(RESULTS_DIR.glob("method_b-*-smoke")) - before:
            shutil.rmtree(d, ignore_errors=True)


def test_the_stages_run_requiring_the_cards_gpu_and_its_products_record(tmp_path):
    """The stages see TR2_REQUIRE_CARD_GPU=1 and TR2_REQUIRE_PRODUCTS=1 (lib/tr2/cards.py check_machine,
    lib/tr2/cupy_side/products.py check_required): a stand-in python3 first on PATH records what `-m tr2.runner`
    was given, in the environment the script hands it."""
    stub = tmp_path / "bin" / "python3"
    stub.parent.mkdir()
    seen = tmp_path / "seen.txt"
    stub.write_text("#!/bin/sh\n"
                    f'case "$*" in *tr2.runner*) echo "$* CARD_GPU=$TR2_REQUIRE_CARD_GPU PRODUCTS=$TR2_REQUIRE_PRODUCTS" '
                    f'>>{seen};; esac\nexit 0\n')
    stub.chmod(0o755)
    env = {**os.environ, "PATH": f"{stub.parent}{os.pathsep}{os.environ['PATH']}"}
    env.pop("TR2_REQUIRE_PRODUCTS", None)
    p = subprocess.run(["bash", str(SCRIPT), str(tmp_path / "out"), "60", "series=no-such-card-here"], cwd=REPO_ROOT,
                       env=env, capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stdout + p.stderr
    assert seen.read_text() == "-m tr2.runner series --card no-such-card-here --runs-only CARD_GPU=1 PRODUCTS=1\n"


def _begun_folder(tmp_path, commit, digest):
    """A results folder as a stage begins one: its machine.json names the commit and lib/tr2's digest."""
    d = tmp_path / "series-20000101-000000-smoke"
    (d / "logs").mkdir(parents=True)
    (d / "machine.json").write_text(json.dumps({"commit": commit, "lib_digest": digest}))
    return d


def _resume(tmp_path, folder, commit):
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
           "TR2_GIT_COMMIT": commit}
    return subprocess.run(["bash", str(SCRIPT), str(tmp_path / "out"), "60", f"series={folder}"], cwd=REPO_ROOT,
                          env=env, capture_output=True, text=True, timeout=300)


@pytest.mark.parametrize("named", ["a" * 40, "a" * 7])   # in full, or abbreviated
def test_a_resume_naming_the_folders_commit_over_another_program_is_refused(tmp_path, named):
    commit = "a" * 40
    d = _begun_folder(tmp_path, commit, "0" * 16)   # no lib/tr2 has this digest
    p = _resume(tmp_path, d, named)
    assert p.returncode == 2, p.stdout + p.stderr
    assert (f"was begun at {'a' * 12} with lib/tr2 digest {'0' * 16}, and TR2_GIT_COMMIT names that commit while "
            f"lib/tr2 here has digest {lib_digest()}") in p.stderr, p.stderr
    assert "allowed: lib/tr2 as at aaaaaaaaaaaa (git restore --source=aaaaaaaaaaaa -- lib/tr2)" in p.stderr
    assert not (tmp_path / "out").exists()   # refused before anything ran or was written


@pytest.mark.parametrize("case", ["same program", "another commit named"])
def test_a_resume_of_the_same_program_or_at_another_named_commit_passes_the_check(tmp_path, case):
    commit = "b" * 40
    d = _begun_folder(tmp_path, commit, lib_digest() if case == "same program" else "0" * 16)
    p = _resume(tmp_path, d, commit if case == "same program" else "c" * 40)
    # the stage itself then ran on the stand-in folder (and stopped on it): the check let it through
    assert "was begun at" not in p.stderr, p.stderr
    assert (tmp_path / "out" / "times.txt").read_text().startswith("series rc "), p.stdout + p.stderr
