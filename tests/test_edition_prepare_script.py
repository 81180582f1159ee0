"""scripts/edition_prepare.sh, the edition's call prepared on the CPU machine in one command: what it refuses before
anything changes. (Its whole run, lib/tr2 restored, the carry built with NVRTC, the tree slimmed and the preflight
passed, is recorded in results/cpu-checks-20261208d/edition_prepare.txt: it needs NVRTC, which CI has not.)"""
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tr2 import REPO_ROOT

SCRIPT = REPO_ROOT / "scripts" / "edition_prepare.sh"


def _run(cwd, *args, **env):
    full = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}", **env}
    return subprocess.run(["bash", str(Path(cwd) / "scripts" / "edition_prepare.sh"), *args], cwd=cwd, env=full,
                          capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("args,env,says", [
    (("545",), {}, "LIMIT_S and at least one STAGE=TARGET needed, 1 argument(s) given"),
    (("9m", "series=smoke"), {}, "LIMIT_S '9m' is not allowed; allowed: whole seconds, 30 or more"),
    (("545", "series=smoke"), {"EDITION_COMMIT": "nosuchcommit"}, "EDITION_COMMIT 'nosuchcommit' is no commit here"),
    (("545", "series=smoke"), {"RECORD": "results/no-such-folder"}, "RECORD 'results/no-such-folder' is no folder here"),
])
def test_bad_input_is_refused_before_anything_changes(args, env, says):
    before = subprocess.run(["git", "status", "--porcelain"], cwd=REPO_ROOT, capture_output=True, text=True).stdout
    p = _run(REPO_ROOT, *args, **env)
    assert p.returncode == 2 and says in p.stderr, p.stderr
    assert subprocess.run(["git", "status", "--porcelain"], cwd=REPO_ROOT, capture_output=True,
                          text=True).stdout == before


def _sparse_clone(tmp_path) -> Path:
    """A clone holding lib/, scripts/ and the default record folder only, with this tree's script."""
    clone = tmp_path / "clone"
    subprocess.run(["git", "clone", "-q", "--no-checkout", str(REPO_ROOT), str(clone)], check=True)
    record = "results/h100-perf-20261205g/record"
    subprocess.run(["git", "sparse-checkout", "set", "--no-cone", "/lib/", "/scripts/", f"/{record}/"], cwd=clone,
                   check=True)
    subprocess.run(["git", "checkout", "-q", "HEAD"], cwd=clone, check=True)
    (clone / "scripts" / "edition_prepare.sh").write_text(SCRIPT.read_text())   # the script under test: this tree's
    return clone


def test_changes_under_lib_are_refused_and_kept(tmp_path):
    clone = _sparse_clone(tmp_path)
    init = clone / "lib" / "tr2" / "__init__.py"
    init.write_text(init.read_text() + "# an edit not committed\n")
    p = _run(clone, "545", "series=smoke")
    assert p.returncode == 2 and "changes under lib/ not committed" in p.stderr, p.stderr
    assert "lib/tr2/__init__.py" in p.stderr
    assert init.read_text().endswith("# an edit not committed\n")   # not restored over


def test_a_step_that_fails_after_the_restore_says_how_to_undo_it(tmp_path):
    clone = _sparse_clone(tmp_path)
    (tmp_path / "empty").mkdir()   # a record folder without a record: scripts/carry_prepare.sh (step 2) stops at once
    p = _run(clone, "545", "series=smoke", RECORD=str(tmp_path / "empty"))
    assert p.returncode != 0, p.stdout
    assert "holds no products record" in p.stderr, p.stderr
    assert ("edition_prepare.sh: stopped; to undo: git restore --source=HEAD -- lib/tr2; "
            "bash scripts/device_tree.sh full") in p.stderr, p.stderr
    # step 1 did run: lib/tr2 is the edition commit's now, as the message says
    changed = subprocess.run(["git", "status", "--porcelain", "--", "lib"], cwd=clone, capture_output=True,
                             text=True).stdout
    assert changed.strip(), "lib/tr2 was not restored"
    undo = subprocess.run(["git", "restore", "--source=HEAD", "--", "lib/tr2"], cwd=clone)
    assert undo.returncode == 0
    assert subprocess.run(["git", "status", "--porcelain", "--", "lib"], cwd=clone, capture_output=True,
                          text=True).stdout == ""
