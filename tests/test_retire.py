"""Retiring runs (tr2.retire, `python -m tr2.runner STAGE --retire DIR --runs PATTERN... --reason TEXT`): the records
and their files move, nothing is deleted, the folder is no longer finished, `--resume DIR` runs exactly the retired
runs again at the new commit, the summary covers the whole set, and the report's commits table shows both commits."""
import hashlib
import json
import re
import subprocess
import sys

import pytest

from tr2 import REPO_ROOT, explore, method_a, runner, stage
from tr2.results import is_finished, read_jsonl
from tr2.sysinfo import lib_digest
from test_method_a import FAKE, _card

A, B = "a" * 40, "b" * 40
CUPY = "tiny/float32/cupy/*"


def snapshot(d) -> dict:
    """Every file under d (the lock's too) with its bytes' digest: 'nothing changed' made checkable."""
    return {str(p.relative_to(d)): hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(d.rglob("*")) if p.is_file()}


@pytest.fixture
def fake_trainer(tmp_path, monkeypatch):
    fake = tmp_path / "fake_train.py"
    fake.write_text(FAKE)
    calls = tmp_path / "calls.txt"
    monkeypatch.setenv("TR2_TRAINER", f"{sys.executable} {fake}")
    monkeypatch.setenv("FAKE_CALLS", str(calls))
    return calls


@pytest.fixture
def finished(tmp_path, monkeypatch, fake_trainer):
    """A finished method A folder of three seeds a side, run at commit A (its executed notebook stood in for)."""
    monkeypatch.setenv("TR2_GIT_COMMIT", A)
    d = tmp_path / "results" / "method_a-20261203-120000-test"
    method_a.run(_card([1, 2, 3]), d)
    method_a.summarize(d)
    (d / "method_a.ipynb").write_text("{}")
    assert is_finished(d)
    monkeypatch.setenv("TR2_GIT_COMMIT", B)   # what follows happens at a later commit
    fake_trainer.write_text("")
    return d


def retire(d, *patterns, reason="the cupy side's kernel changed its bits", stage_name="method_a"):
    return runner.main([stage_name, "--retire", str(d), "--runs", *patterns, "--reason", reason])


def test_every_record_carries_the_commit_of_its_session(finished):
    recs = read_jsonl(finished / "runs.jsonl")
    assert len(recs) == 6 and {r["commit"] for r in recs} == {A}
    assert [s["commit"] for s in read_jsonl(finished / "sessions.jsonl")] == [A]
    # and the program that ran, which the commit (the caller's word here: TR2_GIT_COMMIT) does not prove
    assert {r["lib_digest"] for r in recs} == {lib_digest()}
    assert [s["lib_digest"] for s in read_jsonl(finished / "sessions.jsonl")] == [lib_digest()]


def test_retire_moves_records_and_files_and_unfinishes_the_folder(finished, capsys):
    before = {r["key"]: r for r in read_jsonl(finished / "runs.jsonl")}
    metrics = {k: (finished / r["metrics"]).read_bytes() for k, r in before.items()}
    assert retire(finished, CUPY) == 0
    assert "retired 3 record(s) of 3 run(s)" in capsys.readouterr().out
    kept = read_jsonl(finished / "runs.jsonl")
    assert [r["key"] for r in kept] == [f"tiny/float32/torch/{s}" for s in (1, 2, 3)]
    gone = read_jsonl(finished / "retired.jsonl")
    assert [r["key"] for r in gone] == [f"tiny/float32/cupy/{s}" for s in (1, 2, 3)]
    for r in gone:
        assert r["retired_reason"] == "the cupy side's kernel changed its bits" and r["retired_by_commit"] == B
        assert r["retired_at"].endswith("+00:00") and r["commit"] == A
        assert r["retired_files"] == {"metrics": "retired/" + r["metrics"], "log": "retired/" + r["log"]}
        assert not (finished / r["metrics"]).exists() and not (finished / r["log"]).exists()
        assert (finished / r["retired_files"]["metrics"]).read_bytes() == metrics[r["key"]]   # moved, not rewritten
        assert {k: v for k, v in r.items() if not k.startswith("retired_")} == before[r["key"]]
    # the marks of a finished stage moved too: the report's choice of folders passes it over until the resume
    assert not is_finished(finished)
    assert (finished / "retired" / "summary.json").is_file() and (finished / "retired" / "method_a.ipynb").is_file()
    assert not list(finished.glob(".*.tmp*"))   # the runs file was replaced whole


def test_resume_runs_exactly_the_retired_runs_and_summarizes_them_all(finished, fake_trainer):
    assert retire(finished, CUPY) == 0
    method_a.run(_card([1, 2, 3]), finished)
    assert fake_trainer.read_text().split() == ["cupy/1", "cupy/2", "cupy/3"]
    recs = read_jsonl(finished / "runs.jsonl")
    assert {r["key"]: r["commit"] for r in recs} == {**{f"tiny/float32/torch/{s}": A for s in (1, 2, 3)},
                                                      **{f"tiny/float32/cupy/{s}": B for s in (1, 2, 3)}}
    s = method_a.summarize(finished)
    assert s["runs"] == {"finished": 6, "planned": 6, "records": 6} and s["configs"][0]["verdict"]["passed"] is True
    assert explore.commit_runs(finished) == [{"commit": A, "runs": 3, "retired": 3, "calls": 1},
                                             {"commit": B, "runs": 3, "retired": 0, "calls": 1}]
    method_a.run(_card([1, 2, 3]), finished)   # nothing left to run
    assert fake_trainer.read_text().split() == ["cupy/1", "cupy/2", "cupy/3"]


def test_a_run_retired_twice_keeps_both_files(finished):
    assert retire(finished, "tiny/float32/cupy/1") == 0
    first = (finished / "retired" / "runs" / "tiny_float32_cupy_1.metrics.jsonl").read_bytes()
    method_a.run(_card([1, 2, 3]), finished)
    assert retire(finished, "tiny/float32/cupy/1", reason="again") == 0
    assert (finished / "retired" / "runs" / "tiny_float32_cupy_1.metrics.jsonl").read_bytes() == first
    again = read_jsonl(finished / "retired.jsonl")[-1]
    assert again["retired_files"]["metrics"] == "retired/runs/tiny_float32_cupy_1.metrics-2.jsonl"
    assert again["retired_files"]["log"] == "retired/logs/method_a-tiny_float32_cupy_1-2.log"
    assert (finished / again["retired_files"]["metrics"]).is_file() and again["commit"] == B


def test_a_record_without_a_commit_counts_at_the_first_session(finished):
    recs = read_jsonl(finished / "runs.jsonl")
    (finished / "runs.jsonl").write_text("".join(json.dumps({k: v for k, v in r.items() if k != "commit"}) + "\n"
                                                 for r in recs))
    assert explore.commit_runs(finished) == [{"commit": A, "runs": 6, "retired": 0, "calls": 1}]
    assert set(explore.records(finished, "method_a")["run_commit"]) == {A}


@pytest.mark.parametrize("args, said", [
    (["--runs", CUPY, "tiny/float32/cupy/9", "--reason", "x"], "--runs: 'tiny/float32/cupy/9' matches no record"),
    (["--runs", CUPY, "--reason", "  "], "--reason: '  ' is empty"),
    (["--runs", CUPY], "--reason: missing"),
    ([], "--runs: missing"),
    (["--runs", CUPY, "--reason", "x", "--resume", "{d}"], "--retire: given with --resume"),
])
def test_bad_retirements_are_refused_in_one_line_changing_nothing(finished, capsys, args, said):
    before = snapshot(finished)
    argv = ["method_a", "--retire", str(finished), *[a.format(d=finished) for a in args]]
    assert runner.main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and said in err[0], err
    assert snapshot(finished) == before


@pytest.mark.parametrize("line", [b"not json {", b"\xff\xfe", b"[1, 2]"], ids=["text", "not-utf8", "a-list"])
def test_a_runs_file_line_that_is_no_record_is_refused_changing_nothing(finished, capsys, line):
    """The rewrite keeps the records read_jsonl reads: a damaged line before the last would have left the folder in
    neither file (not moved, not retired), so it is named instead (a list line ended in a traceback)."""
    lines = (finished / "runs.jsonl").read_bytes().splitlines(keepends=True)
    (finished / "runs.jsonl").write_bytes(b"".join(lines[:1] + [line + b"\n"] + lines[1:]))
    before = snapshot(finished)
    assert retire(finished, CUPY) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "runs.jsonl line 2 is not a JSON record" in err[0] and "allowed:" in err[0], err
    assert snapshot(finished) == before


def test_a_torn_last_line_is_no_refusal(finished, capsys):
    with open(finished / "runs.jsonl", "ab") as f:
        f.write(b'{"key": "tiny/flo')   # a kill mid-append: append_jsonl cuts it too
    assert retire(finished, CUPY) == 0
    assert read_jsonl(finished / "runs.jsonl") and not (finished / "runs.jsonl").read_bytes().endswith(b'flo')


def test_a_folder_of_another_stage_or_none_is_refused(finished, tmp_path, capsys):
    before = snapshot(finished)
    assert retire(finished, CUPY, stage_name="method_b") == 2
    assert "is a folder of stage method_a" in capsys.readouterr().err
    other = tmp_path / "not-a-results-folder"
    other.mkdir()
    assert retire(other, CUPY) == 2
    assert "--retire" in capsys.readouterr().err
    assert runner.main(["method_a", "--runs", CUPY]) == 2
    assert "--runs: given without --retire" in capsys.readouterr().err
    assert snapshot(finished) == before


def test_a_folder_a_stage_holds_is_refused(finished, capsys):
    held = stage._lock(finished, "method_a")
    before = snapshot(finished)
    try:
        assert retire(finished, CUPY) == 2
    finally:
        held.close()
    assert "is being worked on by stage method_a" in capsys.readouterr().err
    assert snapshot(finished) == before


def test_the_front_page_shows_a_folder_whose_runs_span_commits(finished, tmp_path):
    from tr2.report.front import front_page_html
    from tr2.report.verdicts import build_table
    bs4 = pytest.importorskip("bs4")
    one = build_table("test", [finished], tmp_path)
    assert one["commits_differ"] is False
    assert retire(finished, CUPY) == 0
    method_a.run(_card([1, 2, 3]), finished)
    method_a.summarize(finished)
    data = build_table("test", [finished], tmp_path)
    assert data["commits_differ"] is True   # one folder, one stage, two commits
    soup = bs4.BeautifulSoup(front_page_html(data), "html.parser")
    assert "different commits" in soup.find(id="commits-note").get_text()
    row = soup.find(id="commits-table").find("tr", attrs={"data-folder": finished.name})
    shown = {s["data-commit"]: (s["data-runs"], s["data-retired"]) for s in row.find_all("span", class_="commit")}
    assert shown == {A: ("3", "3"), B: ("3", "0")}
    retired = row.find("td", class_="retired")
    assert retired["data-value"] == "3" and "the cupy side's kernel changed its bits" in retired.get_text()
    assert "tiny/float32/cupy/1" in retired.get_text() and B[:12] in retired.get_text()
    # the folder's reproduce command runs it at its first commit, then retires and resumes as was done
    # the folder the command's first step made ($D, report.verdicts.commands), not the committed one
    assert '--retire "$D" --runs tiny/float32/cupy/1 tiny/float32/cupy/2' in data["commands"][finished.name]
    assert data["commands"][finished.name].endswith('python -m tr2.runner method_a --resume "$D"')


def test_the_reproduce_command_resumes_at_the_commit_the_new_runs_carry(finished, tmp_path, monkeypatch):
    """Retired at B, run again at a later commit C (the H200 edition: retired at 82bbfca, resumed at 062562a): the
    command checks out C before --resume, where the retirement's commit alone would claim B made the new runs."""
    from tr2.report.verdicts import build_table
    C = "c" * 40
    assert retire(finished, CUPY) == 0
    monkeypatch.setenv("TR2_GIT_COMMIT", C)
    method_a.run(_card([1, 2, 3]), finished)
    method_a.summarize(finished)
    (got,) = explore.retired_runs(finished)
    assert got["by_commit"] == B and got["rerun_commits"] == [C]
    command = build_table("test", [finished], tmp_path)["commands"][finished.name]
    retirement, resume = command.split(" --reason ")
    assert f"git checkout {B[:12]} && python -m tr2.runner method_a --retire" in retirement
    assert resume.endswith(f'&& git checkout {C[:12]} && python -m tr2.runner method_a --resume "$D"')


# ------------------------------------------------------------------- retiring what an identity check found changed

def _check(key, identical, step=None, status="ok"):
    """A line as scripts/identity_check.py writes it."""
    return {"key": key, "identical": identical, "status": status, "returncode": 0 if status == "ok" else 1,
            "first_difference": None if identical else {"step": step, "recorded": "{}", "new": "{}"},
            "commit": B, "recorded_commit": A, "lines_compared": 12}


def test_differing_retires_each_changed_configuration_once_with_the_check_named():
    from tr2.retire import differing
    todo = differing([_check("m/float32/cupy/1337", True), _check("m/bfloat16/cupy/1337", False, 40),
                      _check("m/bfloat16/cupy/1338", False, 60), _check("n/bfloat16/cupy/1", True)],
                     source="the identity check x.jsonl")
    assert [p for p, _ in todo] == ["m/bfloat16/cupy/*"]
    reason = todo[0][1]
    assert f"at {B}" in reason and f"recorded at {A}" in reason and "first difference at step 40" in reason
    assert "x.jsonl" in reason and "m/bfloat16/cupy/1337" in reason
    assert differing([_check("m/float32/cupy/1337", True)]) == []


@pytest.mark.parametrize("line, said", [
    (_check("m/bfloat16/cupy/1337", False, 3, status="failed"), "ended 'failed'"),
    (_check("m/float32/cupy/1337", True, status="timeout"), "ended 'timeout'"),
    ({**_check("m/float32/cupy/1337", True), "identical": None}, "identical is None"),
    ({**_check("x", True), "key": "nokey"}, "key 'nokey'"),
    ("not a record", "key None"),
])
def test_differing_refuses_a_check_that_cannot_decide(line, said):
    from tr2 import Tr2Error
    from tr2.retire import differing
    with pytest.raises(Tr2Error, match=re.escape(said)):
        differing([_check("m/float32/cupy/1", True), line])


def _retire_differing(*args):
    sys.path.insert(0, str(__import__("pathlib").Path(__file__).resolve().parents[1] / "scripts"))
    import retire_differing
    return retire_differing.main([str(a) for a in args])


def test_retire_differing_retires_the_changed_configurations_seeds(finished, tmp_path, capsys):
    ident = tmp_path / "identity.jsonl"
    ident.write_text(json.dumps(_check("tiny/float32/cupy/1", False, 7)) + "\n")
    before = snapshot(finished)
    assert _retire_differing(finished, ident, "--dry-run") == 0
    assert "would retire tiny/float32/cupy/*" in capsys.readouterr().out and snapshot(finished) == before
    assert _retire_differing(finished, ident) == 0
    assert "retired tiny/float32/cupy/*: 3 record(s)" in capsys.readouterr().out
    gone = read_jsonl(finished / "retired.jsonl")
    assert [r["key"] for r in gone] == [f"tiny/float32/cupy/{s}" for s in (1, 2, 3)]
    assert all("first difference at step 7" in r["retired_reason"] and "identity.jsonl" in r["retired_reason"]
               for r in gone)
    assert [r["key"] for r in read_jsonl(finished / "runs.jsonl")] == [f"tiny/float32/torch/{s}" for s in (1, 2, 3)]


def test_retire_differing_moves_nothing_when_all_repeat_or_the_check_cannot_decide(finished, tmp_path, capsys):
    ident = tmp_path / "identity.jsonl"
    before = snapshot(finished)
    ident.write_text(json.dumps(_check("tiny/float32/cupy/1", True)) + "\n")
    assert _retire_differing(finished, ident) == 0 and capsys.readouterr().out == ""
    ident.write_text(json.dumps(_check("tiny/float32/cupy/1", False, 2)) + "\n"
                     + json.dumps(_check("tiny/float32/cupy/2", False, 2, status="failed")) + "\n")
    assert _retire_differing(finished, ident) == 2
    assert "ended 'failed'" in capsys.readouterr().err
    ident.write_text("")
    assert _retire_differing(finished, ident) == 2 and "holds no line" in capsys.readouterr().err
    assert _retire_differing(finished, tmp_path / "none.jsonl") == 2 and "is not a file" in capsys.readouterr().err
    assert snapshot(finished) == before


def _head():
    p = subprocess.run(["git", "rev-parse", "HEAD"], cwd=REPO_ROOT, capture_output=True, text=True)
    if p.returncode != 0:
        pytest.skip("no git checkout here: no commit's lib/tr2 to compare with")
    return p.stdout.strip()


def _rename_commit(d, old, new, digest=None):
    """Every record of folder d naming commit `old` names `new` instead (and, given, the lib/tr2 digest `digest`)."""
    for name in ("machine.json",):
        m = json.loads((d / name).read_text())
        (d / name).write_text(json.dumps({**m, "commit": new, **({"lib_digest": digest} if digest else {})}))
    for name in ("sessions.jsonl", "runs.jsonl"):
        recs = read_jsonl(d / name)
        (d / name).write_text("".join(json.dumps({**r, "commit": new if r.get("commit") == old else r.get("commit"),
                                                  **({"lib_digest": digest} if digest else {})}) + "\n" for r in recs))


def test_program_digests_set_each_commits_records_beside_its_committed_lib(finished):
    """The programs a folder's records say ran (their lib/tr2 digests) against lib/tr2 as committed at the commit they
    name: equal; not equal (a later lib under an earlier commit's name); a commit this clone lacks (A: not told)."""
    got = explore.program_digests(finished)
    assert [(g["commit"], g["lib_digest"], g["records"], g["same"]) for g in got] == [(A, lib_digest(), 8, None)]
    head = _head()
    committed = explore.committed_digest(head)
    assert committed is not None and explore.committed_digest(A) is None
    _rename_commit(finished, A, head, committed)
    (g,) = explore.program_digests(finished)
    assert (g["commit"], g["lib_digest"], g["records"], g["committed_digest"], g["same"]) == (head, committed, 8,
                                                                                            committed, True)
    _rename_commit(finished, head, head, "0" * 16)
    (g,) = explore.program_digests(finished)
    assert (g["lib_digest"], g["committed_digest"], g["same"]) == ("0" * 16, committed, False)


def test_the_front_page_flags_records_whose_program_is_not_their_commits(finished, tmp_path):
    from tr2.report.front import front_page_html
    from tr2.report.verdicts import build_table
    bs4 = pytest.importorskip("bs4")
    head = _head()
    committed = explore.committed_digest(head)
    _rename_commit(finished, A, head, committed)
    data = build_table("test", [finished], tmp_path)
    assert data["programs_differ"] is False
    soup = bs4.BeautifulSoup(front_page_html(data), "html.parser")
    row = soup.find(id="commits-table").find("tr", attrs={"data-folder": finished.name})
    (shown,) = row.find_all("span", class_="program")
    assert shown["data-same"] == "yes" and f"{head[:12]}: {committed}, the commit's, 8 records" in " ".join(shown.get_text().split())
    assert "not the program" not in soup.find(id="commits-note").get_text()
    _rename_commit(finished, head, head, "0" * 16)
    data = build_table("test", [finished], tmp_path)
    assert data["programs_differ"] is True
    soup = bs4.BeautifulSoup(front_page_html(data), "html.parser")
    row = soup.find(id="commits-table").find("tr", attrs={"data-folder": finished.name})
    (shown,) = row.find_all("span", class_="program")
    assert shown["data-same"] == "no"
    assert f"{head[:12]}: {'0' * 16}, not the commit's ({committed}), 8 records" in " ".join(shown.get_text().split())
    assert "Some records name a commit whose lib/tr2 is not the program they recorded" in " ".join(
        soup.find(id="commits-note").get_text().split())
