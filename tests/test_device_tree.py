"""scripts/device_tree.sh, run by bash on a small repository of its own: the tree the device tool carries can leave
results/ and report/ behind (all but the paths a call names) and come back whole, nothing committed changed; and the
size it reports counts each file as a tar archive holds it. scripts/h200_minutes.py is a stand-in here that lists
one source (tests/test_minutes.py tests the real list)."""
import shutil
import subprocess
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parent.parent / "scripts" / "device_tree.sh"
FILES = {"lib/tr2/a.py": "x = 1\n", "results/keep-me/run.json": "{}\n", "results/other/log.txt": "log\n",
         "results/model/bench.jsonl": "{}\n", "report/TR-2.html": "<html></html>\n", "README.md": "readme\n",
         "scripts/h200_minutes.py": "import sys\nif sys.argv[1:] == ['sources']:\n    print('results/model/bench.jsonl')\n"}


def git(repo: Path, *args) -> str:
    return subprocess.run(["git", *args], cwd=repo, capture_output=True, text=True, check=True).stdout


@pytest.fixture()
def repo(tmp_path):
    if shutil.which("git") is None:
        pytest.skip("no git")
    r = tmp_path / "repo"
    for name, text in FILES.items():
        (r / name).parent.mkdir(parents=True, exist_ok=True)
        (r / name).write_text(text)
    shutil.copy(SCRIPT, r / "scripts" / "device_tree.sh")
    git(r, "init", "-q")
    git(r, "-c", "user.email=t@t", "-c", "user.name=t", "add", ".")
    git(r, "-c", "user.email=t@t", "-c", "user.name=t", "commit", "-q", "-m", "files")
    return r


def run(repo: Path, *args) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", "scripts/device_tree.sh", *args], cwd=repo, capture_output=True, text=True)


def present(repo: Path) -> set:
    return {str(p.relative_to(repo)) for p in repo.rglob("*") if p.is_file() and ".git" not in p.parts}


def test_slim_leaves_results_and_report_behind_but_the_named_folders_and_full_restores_them(repo):
    r = run(repo, "slim", "results/keep-me/")
    assert r.returncode == 0, r.stderr
    assert present(repo) == {"lib/tr2/a.py", "results/keep-me/run.json", "README.md", "scripts/device_tree.sh",
                             "scripts/h200_minutes.py", "results/model/bench.jsonl"}
    assert "kept: results/keep-me/ and the 1 sources of scripts/h200_minutes.py" in r.stdout
    assert git(repo, "status", "--porcelain") == ""
    r = run(repo, "full")
    assert r.returncode == 0, r.stderr
    assert present(repo) == set(FILES) | {"scripts/device_tree.sh"}
    assert git(repo, "status", "--porcelain") == ""


def test_slim_keeps_the_minutes_models_sources_and_refuses_where_it_lists_none(repo):
    r = run(repo, "slim")
    assert r.returncode == 0, r.stderr
    assert {p for p in present(repo) if p.startswith(("results/", "report/"))} == {"results/model/bench.jsonl"}
    assert run(repo, "full").returncode == 0
    (repo / "scripts" / "h200_minutes.py").write_text("pass\n")
    r = run(repo, "slim")
    assert r.returncode == 2 and "h200_minutes.py sources listed nothing" in r.stderr
    assert present(repo) == set(FILES) | {"scripts/device_tree.sh"}


@pytest.mark.parametrize("path, said", [("lib/tr2", "is not under results/ or report/"),
                                        ("results/missing", "holds no tracked file")])
def test_slim_refuses_a_path_it_cannot_keep(repo, path, said):
    r = run(repo, "slim", path)
    assert r.returncode == 2 and said in r.stderr and path in r.stderr
    assert present(repo) == set(FILES) | {"scripts/device_tree.sh"}


def test_slim_refuses_while_results_hold_uncommitted_changes(repo):
    (repo / "results" / "new.json").write_text("{}\n")
    r = run(repo, "slim")
    assert r.returncode == 2 and "commit or stash" in r.stderr and "results/new.json" in r.stderr
    assert (repo / "results" / "other" / "log.txt").exists()


def test_size_counts_each_file_as_a_tar_archive_holds_it(repo):
    (repo / "carried").mkdir()
    (repo / "carried" / "blob.bin").write_bytes(b"\0" * 513)   # two 512-byte blocks and a header
    r = run(repo, "size", "carried")
    assert r.returncode == 0, r.stderr
    want = sum(512 + -(-len(text.encode()) // 512) * 512 for text in FILES.values())
    want += 512 + -(-SCRIPT.stat().st_size // 512) * 512   # the script, tracked too
    want += 512 + 1024
    assert r.stdout.startswith(f"device_tree: {want} bytes"), r.stdout
