"""The stage skeleton (tr2.stage): every stage survives a kill mid-append, and one folder holds one stage at a time.

Each stage's own piece of work (its run_one) is replaced by a fake that records each call and returns an
ok record at once, so what is tested is the skeleton as each stage drives it: its plan, its keys, its
runs file. The kill is real: a stage in a process of its own is stopped by SIGKILL while the bytes of
one record are half on disk.
"""
import json
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time

import pytest

from tr2 import REPO_ROOT, Tr2Error
from tr2 import families, footprint, method_a, method_b, series, stage
from tr2.cards import load_card
from tr2.results import append_jsonl, read_jsonl
from tr2.summary import stats

# stage -> (module, the name of its piece of work, its runs file)
STAGES = {"series": (series, "run_one", "runs.jsonl"), "method_a": (method_a, "run_one", "runs.jsonl"),
          "method_b": (method_b, "run_one", "runs.jsonl"), "families": (families, "run_one", "runs.jsonl"),
          "footprint": (footprint, "measure", "footprint.jsonl")}


def test_the_stage_list_is_the_skeletons():
    assert set(STAGES) == set(stage.STAGES) and len(STAGES) == len(stage.STAGES) == 5


def card():
    c = load_card(REPO_ROOT / "params" / "cards" / "smoke.yaml")
    c["card"] = "test"
    return c


def prepare(name: str, d):
    """What a stage does besides its plan, made already, so that only the plan runs."""
    d.mkdir(parents=True, exist_ok=True)
    if name == "footprint":
        (d / "install_sets.json").write_text("{}")
        (d / "docker.json").write_text("{}")


def arm(name: str, calls, kill_at=None, marker=None, setattr=setattr):
    """Replace the stage's piece of work with a fake that notes its call; with kill_at, the kill_at-th
    append writes half its line, flushes it and waits to be killed. (In this process, pass monkeypatch's
    setattr: the modules are put back after the test.)"""
    mod, attr, _runs = STAGES[name]

    def fake(*args, **kw):
        piece = args[:2] if name == "series" else args[0]  # the series: (round, configuration)
        with open(calls, "a") as f:
            f.write(repr(piece) + "\n")
        return {"status": "ok", "reason": None, "what": "x", "round": 0, "config": "x"}
    setattr(mod, attr, fake)
    if name == "footprint":  # its summary reads what the real runs record
        setattr(mod, "summarize", lambda d: {})
    if kill_at is None:
        return
    count = [0]

    def half_then_hang(path, record):
        count[0] += os.path.basename(path) == _runs  # sessions.jsonl is appended to as well
        if count[0] < kill_at:
            return append_jsonl(path, record)
        line = (json.dumps(record, sort_keys=True) + "\n").encode()
        with open(path, "ab") as f:
            f.write(line[: len(line) // 2])
            f.flush()
            os.fsync(f.fileno())
        with open(marker, "w") as m:
            m.write(str(os.getpid()))
        time.sleep(600)
    setattr(stage, "append_jsonl", half_then_hang)


def run_stage(name: str, c, d):
    mod = STAGES[name][0]
    if name == "series":
        mod.run(c, d, progress=False)
    else:
        mod.run(c, d)


DRIVER = textwrap.dedent("""
    import sys
    sys.path.insert(0, {tests!r})
    import test_stage as t
    t.arm({name!r}, {calls!r}, kill_at=2, marker={marker!r})
    t.run_stage({name!r}, t.card(), {d!r})
""")


@pytest.mark.parametrize("name", list(STAGES))
def test_a_kill_mid_append_loses_and_repeats_nothing(name, tmp_path, monkeypatch):
    d, calls, marker = tmp_path / "res", tmp_path / "calls.txt", tmp_path / "hung.pid"
    prepare(name, d)
    driver = tmp_path / "driver.py"
    driver.write_text(DRIVER.format(tests=str(REPO_ROOT / "tests"), name=name, calls=str(calls), marker=str(marker),
                                    d=str(d)))
    proc = subprocess.Popen([sys.executable, str(driver)], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        t0 = time.monotonic()
        while not marker.exists():
            assert proc.poll() is None, proc.stderr.read().decode()[-2000:]
            assert time.monotonic() - t0 < 120, "the stage never reached its second append"
            time.sleep(0.02)
        proc.send_signal(signal.SIGKILL)  # the second record is half on disk
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.stderr.close()
    runs = d / STAGES[name][2]
    assert not runs.read_bytes().endswith(b"\n")  # torn: the kill landed mid-append
    first = calls.read_text().splitlines()
    assert len(first) == 2 and len(read_jsonl(runs)) == 1

    calls.write_text("")
    arm(name, calls, setattr=monkeypatch.setattr)
    run_stage(name, card(), d)
    recs = read_jsonl(runs)
    keys = [r["key"] for r in recs]
    assert len(runs.read_text().splitlines()) == len(recs)  # the torn line was cut, every line a record
    assert len(keys) == len(set(keys)) >= 2  # every piece once
    again = calls.read_text().splitlines()
    assert again[0] == first[1] and first[0] not in again  # the torn piece ran again, the finished one did not
    assert len(again) == len(keys) - 1


def test_two_stages_on_one_folder_are_refused_in_one_line(tmp_path):
    d = tmp_path / "res"
    c = card()
    with stage.open_folder("method_a", c, d):
        with pytest.raises(Tr2Error) as e:
            series.run(c, d, progress=False)
        assert "\n" not in str(e.value)
        assert str(e.value).startswith(f"results_dir: {str(d.resolve())!r} is being worked on by stage method_a (pid ")
    with stage.open_folder("series", c, d):  # free again once the first is done
        pass


def test_a_second_process_is_refused_while_a_stage_runs(tmp_path):
    d = tmp_path / "res"
    code = ("import sys, time, tr2.stage as s, tr2.cards as c; card = c.load_card(sys.argv[1]); card['card'] = 'test'\n"
            "with s.open_folder('families', card, sys.argv[2]):\n    print('held', flush=True); time.sleep(60)")
    proc = subprocess.Popen([sys.executable, "-c", code, str(REPO_ROOT / "params" / "cards" / "smoke.yaml"), str(d)],
                            stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "held"
        r = subprocess.run([sys.executable, "-c", "import sys, tr2.cards as c, tr2.method_b as m; card = "
                            "c.load_card(sys.argv[1]); card['card'] = 'test'; m.run(card, sys.argv[2])",
                            str(REPO_ROOT / "params" / "cards" / "smoke.yaml"), str(d)], capture_output=True, text=True)
        assert r.returncode != 0
        assert "is being worked on by stage families" in r.stderr.strip().splitlines()[-1]
    finally:
        proc.kill()
        proc.wait()


def test_a_stage_on_a_folder_of_another_card_is_refused(tmp_path):
    d = tmp_path / "res"
    c = card()
    stage.open_folder("method_a", c, d).close()
    c["method_a"]["seeds"] = [1, 2]
    with pytest.raises(Tr2Error, match=r"holds another card \(key 'method_a' differs"):
        stage.open_folder("method_a", c, d)


def _machine(*names):
    return {"host": "test", "gpus": [{"name": n, "uuid": f"GPU-{i}"} for i, n in enumerate(names)]}


def test_a_cuda_folder_goes_on_only_on_its_gpu_model(tmp_path, monkeypatch):
    """A folder started on an H200 and resumed where an H100 came would hold two cards' times in one folder: refused
    in one line before its records are written; another H200 (another UUID) goes on, and so do cards of the CPU and
    machines whose record names no GPU."""
    d = tmp_path / "res"
    c = card()
    c["device"] = "cuda"
    monkeypatch.setattr(stage.sysinfo, "machine_info", lambda: _machine("NVIDIA H200"))
    stage.open_folder("series", c, d).close()
    held = (d / "machine.json").read_bytes()
    monkeypatch.setattr(stage.sysinfo, "machine_info", lambda: {**_machine("NVIDIA H200"), "host": "other"})
    stage.open_folder("series", c, d).close()   # another machine of the model: fine
    sessions = (d / "sessions.jsonl").read_bytes()
    monkeypatch.setattr(stage.sysinfo, "machine_info", lambda: _machine("NVIDIA H100 80GB HBM3"))
    with pytest.raises(Tr2Error) as e:
        stage.open_folder("series", c, d)
    assert str(e.value) == (f"results_dir: {str(d.resolve())!r} was started on NVIDIA H200 (its machine.json) and "
                            "this machine has NVIDIA H100 80GB HBM3; one folder holds one GPU model's runs; allowed: "
                            "go on with it on NVIDIA H200, or start a new folder for this card here")
    assert (d / "machine.json").read_bytes() == held and (d / "sessions.jsonl").read_bytes() == sessions
    with pytest.raises(Tr2Error, match=r"^results_dir: .* was started on NVIDIA H200"):
        series.run(c, d, progress=False)   # the stage itself, not only the runner, refuses
    monkeypatch.setattr(stage.sysinfo, "machine_info", lambda: {"host": "test", "gpus": []})
    stage.open_folder("series", c, d).close()   # nvidia-smi missing here: nothing to compare
    cpu = card()
    d2 = tmp_path / "cpu"
    monkeypatch.setattr(stage.sysinfo, "machine_info", lambda: _machine("NVIDIA H200"))
    stage.open_folder("series", cpu, d2).close()
    monkeypatch.setattr(stage.sysinfo, "machine_info", lambda: _machine("NVIDIA H100 80GB HBM3"))
    stage.open_folder("series", cpu, d2).close()   # a CPU card's runs do not use the GPU


def _program(commit, digest, dirty=False):
    return {**_machine(), "commit": commit, "dirty": dirty, "lib_digest": digest}


def test_a_folder_goes_on_under_its_commit_only_with_that_commits_program(tmp_path, monkeypatch):
    """The commit a record names is the caller's word (TR2_GIT_COMMIT on the GPU machine); a resume naming the
    folder's commit while lib/tr2 is another program would put that program's runs under the commit's name: refused in
    one line before anything is written. The same program goes on; another commit named goes on (a resume after
    tr2.retire); a dirty tree says itself that it is not its commit's program. The session lines and each run record
    carry the digest."""
    d = tmp_path / "res"
    c = card()
    monkeypatch.setattr(stage.sysinfo, "machine_info", lambda: _program("a" * 40, "1" * 16))
    stage.open_folder("series", c, d).close()
    stage.open_folder("series", c, d).close()   # the same program again: fine
    held, sessions = (d / "machine.json").read_bytes(), (d / "sessions.jsonl").read_bytes()
    assert [r["lib_digest"] for r in read_jsonl(d / "sessions.jsonl")] == ["1" * 16] * 2
    monkeypatch.setattr(stage.sysinfo, "machine_info", lambda: _program("a" * 40, "2" * 16))
    with pytest.raises(Tr2Error) as e:
        stage.open_folder("series", c, d)
    assert str(e.value) == (
        f"results_dir: {str(d.resolve())!r} holds records made at aaaaaaaaaaaa with lib/tr2 digest 1111111111111111, and "
        "this process names the same commit while lib/tr2 here has digest 2222222222222222: its runs would carry "
        "aaaaaaaaaaaa's name over another program; allowed: lib/tr2 as at aaaaaaaaaaaa (git restore "
        "--source=aaaaaaaaaaaa -- lib/tr2), or the name of the commit whose lib/tr2 is here (TR2_GIT_COMMIT, or "
        "commit the change)")
    assert (d / "machine.json").read_bytes() == held and (d / "sessions.jsonl").read_bytes() == sessions
    with pytest.raises(Tr2Error, match=r"^results_dir: .* holds records made at aaaaaaaaaaaa"):
        series.run(c, d, progress=False)   # the stage itself, not only the runner, refuses
    monkeypatch.setattr(stage.sysinfo, "machine_info", lambda: _program("a" * 40, "2" * 16, dirty=True))
    stage.open_folder("series", c, d).close()   # a dirty tree: not its commit's program, and says so
    monkeypatch.setattr(stage.sysinfo, "machine_info", lambda: _program("b" * 40, "2" * 16))
    folder = stage.open_folder("series", c, d)  # another commit named: a resume at another program, told apart
    try:
        assert (folder.commit, folder.lib_digest) == ("b" * 40, "2" * 16)
    finally:
        folder.close()


@pytest.mark.parametrize("earlier,now,hit", [
    ([{"commit": "c", "lib_digest": "x"}], ("c", "y", False), 0),
    ([{"commit": "c", "lib_digest": "x"}], ("c", "x", False), None),
    ([{"commit": "c", "lib_digest": "x"}], ("d", "y", False), None),
    ([{"commit": "c", "lib_digest": "x", "dirty": True}], ("c", "y", False), None),
    ([{"commit": "c", "lib_digest": "x"}], ("c", "y", True), None),
    ([{"commit": "c", "lib_digest": "x"}], ("c", "y", "unknown"), 0),     # the GPU machine: no .git to ask
    ([{"commit": "c"}, {"commit": "c", "lib_digest": None}], ("c", "y", False), None),   # records from before
    ([{"commit": "unknown", "lib_digest": "x"}], ("unknown", "y", False), None),
    ([{"commit": "c", "lib_digest": "y"}, {"commit": "c", "lib_digest": "x"}], ("c", "y", False), 1),
    ([{"commit": "a" * 40, "lib_digest": "x"}], ("a" * 7, "y", False), 0),   # abbreviated: one commit
    ([{"commit": "a" * 7, "lib_digest": "x"}], ("a" * 40, "y", False), 0),
    ([{"commit": "a" * 40, "lib_digest": "x"}], ("a" * 6, "y", False), None),   # too short to name one
])
def test_program_conflict_is_the_first_record_of_the_commit_under_another_program(earlier, now, hit):
    got = stage.program_conflict(earlier, *now)
    assert got is (None if hit is None else earlier[hit])


def test_the_h200_minutes_model_estimates_only_folders_started_on_an_h200(tmp_path):
    c = card()
    c["machine"] = "nvidia-h200"
    folder = stage.Folder(tmp_path, "series", None, c)
    assert stage.on_h200(folder)   # no machine.json yet: as before, by the card
    for names, want in ((["NVIDIA H200"], True), (["NVIDIA H100 80GB HBM3"], False), ([], True)):
        (tmp_path / "machine.json").write_text(json.dumps(_machine(*names)))
        assert stage.on_h200(folder) is want
    (tmp_path / "machine.json").write_text("{not json")
    assert stage.on_h200(folder)
    c["machine"] = "cpu"
    assert not stage.on_h200(folder)


def test_gpu_models_of_a_machine_record():
    assert stage.gpu_models(_machine("NVIDIA H200", "NVIDIA H200")) == ["NVIDIA H200"]
    assert stage.gpu_models(_machine("B", "A")) == ["A", "B"]
    assert stage.gpu_models({"error": "no nvidia-smi"}) == [] and stage.gpu_models(None) == []
    assert stage.gpu_models({"gpus": [{"uuid": "x"}, "junk", {"name": 3}]}) == []


def test_group_and_stage_stop_rules(tmp_path):
    """A record ending its group skips the group's later pieces (no record); one ending the stage stops it."""
    c = card()
    plan = [{"key": f"{g}/{i}", "g": g} for g in "ab" for i in range(3)]
    ran = []

    def run_one(p):
        ran.append(p["key"])
        return {"status": "oom" if p["key"] == "a/1" else ("failed" if p["key"] == "b/1" else "ok")}
    with stage.open_folder("method_b", c, tmp_path / "res") as f:
        with pytest.raises(Tr2Error, match=r"^test: b/1 failed \(None\); log None\. A failure other than out of memory"):
            stage.run_plan(f, plan, run_one, desc="test", group=lambda p: p["g"], show=False,
                           ends_group=lambda r: r["status"] == "oom", ends_stage=lambda r: r["status"] == "failed")
        assert ran == ["a/0", "a/1", "b/0", "b/1"]
        ran.clear()
        # rerun: the failure is retried; the ended group stays ended; a retry predicate reopens a finished piece
        with pytest.raises(Tr2Error):
            stage.run_plan(f, plan, run_one, desc="test", group=lambda p: p["g"], show=False,
                           ends_group=lambda r: r["status"] == "oom", ends_stage=lambda r: r["status"] == "failed",
                           retry=lambda r: r["key"] == "b/0")
        assert ran == ["b/0", "b/1"]
        ran.clear()
        # a record retried no longer ends its group: the out-of-memory piece and the rest of its group run
        stage.run_plan(f, plan, run_one, desc="test", group=lambda p: p["g"], show=False,
                       ends_group=lambda r: r["status"] == "oom", retry=lambda r: r["key"] == "a/1")
        assert ran == ["a/1", "b/1", "b/2"]


def test_stats_median_and_range():
    s = stats([3.0, 1.0, 2.0, 10.0])
    assert (s["n"], s["median"], s["min"], s["max"], s["range"]) == (4, 2.5, 1.0, 10.0, 9.0)


# ---------------------------------------------------------------------------------------------------------
# issue 11, item 2: every stage prints its plan and the minutes it will take, measured, never invented


def _records(d, times, status="ok"):
    for key, wall_s in times.items():
        append_jsonl(d / "runs.jsonl", {"key": key, "status": status, "wall_s": wall_s})


def test_the_plan_is_estimated_from_this_folders_runs_first(tmp_path, capsys):
    c = card()
    plan = [{"key": f"{m}/{i}", "m": m} for m in "ab" for i in range(3)]
    d = tmp_path / "method_a-20261201-100000-test"
    d.mkdir()
    _records(d, {"a/0": 60.0, "b/0": 120.0})
    with stage.open_folder("method_a", c, d) as f:
        stage.run_plan(f, plan, lambda p: {"status": "ok", "wall_s": 1.0}, desc="method A", show=False,
                       kind=lambda p: p["m"], record_kind=lambda r: r["key"][0])
    out = capsys.readouterr().out
    assert out.startswith("method A: 4 of 6 runs to go\n")
    assert "     2 x a: 60.0 s each, measured in this folder" in out and "2 x b: 2.0 min each" in out
    assert "  estimate: 6.0 minutes of the CPU (6.0 min) for 4 of the 4 runs, from the runs measured in this folder" in out


def test_the_plan_falls_back_to_the_newest_committed_folder_of_its_stage_and_card(tmp_path, capsys):
    c = card()
    root = tmp_path / "results"
    older, newer, other_card = (root / f"method_b-2026120{i}-100000-{name}" for i, name in ((1, "test"), (2, "test"),
                                                                                            (3, "cpu")))
    for folder, t in ((older, 30.0), (newer, 90.0), (other_card, 600.0)):
        folder.mkdir(parents=True)
        _records(folder, {"m/torch": t})
    d = root / "method_b-20261204-100000-test"
    plan = [{"key": "m/torch"}, {"key": "m/cupy"}]
    run = lambda: stage.run_plan(f, plan, lambda p: {"status": "ok"}, desc="method B", show=False)  # noqa: E731
    with stage.open_folder("method_b", c, d) as f:
        run()
    out = capsys.readouterr().out  # no git repository: the newest other folder, named as such
    assert f"measured in {newer.name}" in out and "1 x m/cupy: no estimate" in out
    assert (f"estimate: 1.5 minutes of the CPU (1.5 min) for 1 of the 2 runs, from the runs measured in results folder "
            f"{newer.name} (no git here to tell whether it is committed: the newest other folder of this stage and card); "
            "no estimate for the other 1") in out
    git = ["git", "-C", str(root), "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run([*git[:3], "init", "-q"], check=True)
    (d / "runs.jsonl").unlink()
    with stage.open_folder("method_b", c, d) as f:
        run()
    assert f"{newer.name} (not committed: the newest other folder of this stage and card)" in capsys.readouterr().out
    subprocess.run([*git, "add", older.name], check=True)
    subprocess.run([*git, "commit", "-qm", "x"], check=True)
    (d / "runs.jsonl").unlink()
    with stage.open_folder("method_b", c, d) as f:
        run()
    out = capsys.readouterr().out  # a committed folder is preferred to a newer one git does not track
    assert f"30.0 s each, measured in {older.name}" in out and f"{older.name} (committed)" in out


def test_the_runs_retired_from_a_folder_estimate_their_reruns(tmp_path, capsys, monkeypatch):
    """Retired runs were measured in this folder by an older program: they estimate the reruns, in the plan and at
    the deadline (found 2026-12-04: five retired gpt2-small runs of 90 s each started again with no estimate)."""
    from tr2 import retire
    c = card()
    d = tmp_path / "method_a-20261201-100000-test"
    d.mkdir()
    _records(d, {"a/0": 60.0, "b/0": 90.0, "b/1": 100.0, "b/2": 80.0})
    retire.retire("method_a", d, ["b/*"], "the test's program change")
    plan = [{"key": f"{m}/{i}", "m": m} for m in "ab" for i in range(3)]
    ran = []

    def run_one(p):
        ran.append(p["key"])
        return {"status": "ok", "wall_s": 1.0}
    kw = dict(desc="method A", show=False, kind=lambda p: p["m"], record_kind=lambda r: r["key"][0])
    monkeypatch.setenv("TR2_DEADLINE", str(time.time() + 100))   # a's 60 s x 1.2 fits; b's 90 s x 1.2 does not
    with stage.open_folder("method_a", c, d) as f:
        with pytest.raises(stage.DeadlineReached, match=r"^method A: stopped before b/0: its runs take 1\.5 min and "
                                                        r"TR2_DEADLINE leaves (99|100) s; 2 run\(s\) done"):
            stage.run_plan(f, plan, run_one, **kw)
    out = capsys.readouterr().out
    assert "3 x b: 1.5 min each, measured in the runs retired from this folder" in out
    assert "2 x a: 60.0 s each, measured in this folder" in out
    assert ("from the runs measured in the runs retired from this folder, this folder" in out
            and "no estimate for" not in out)
    assert ran == ["a/1", "a/2"]
    # another runs file of the stage: the retired records (of runs.jsonl) estimate nothing there
    text = stage.plan_text(stage.Folder(d, "method_a", None, c), ["b"], 1, "x", lambda r: r["key"][0], "other.jsonl")
    assert "1 x b: no estimate" in text


def test_no_estimate_where_nothing_was_measured(tmp_path, capsys):
    with stage.open_folder("families", card(), tmp_path / "families-20261201-100000-test") as f:
        _records(f.path, {"x": 5.0}, status="failed")  # a failed run's time estimates nothing
        stage.run_plan(f, [{"key": "x"}], lambda p: {"status": "ok"}, desc="families", show=False)
    out = capsys.readouterr().out
    assert "1 x x: no estimate" in out and "estimate: no estimate (no finished run of these kinds" in out
    assert "minutes" not in out


def test_a_new_h200_cards_first_plan_is_modelled_from_the_committed_runs(tmp_path):
    """Nothing measured for the card yet: the stage's minutes come from scripts/h200_minutes.py, said as modelled."""
    from tr2.cards import load_card
    c = load_card("h200-edition")
    d = tmp_path / "series-20261201-100000-h200-edition"
    d.mkdir()
    f = stage.Folder(d, "series", None, c)
    text = stage.plan_text(f, ["nanogpt/float32/cupy"], 32, "series runs", lambda r: r["key"], "runs.jsonl")
    assert "estimate: no estimate (no finished run" in text
    line = text.splitlines()[-1]
    assert line.startswith("  modelled instead: ") and " GPU minutes for all 32 runs of this stage " in line
    assert float(line.split()[2]) > 0 and "python scripts/h200_minutes.py plan --card h200-edition" in line
    assert stage.model_estimate(stage.Folder(d, "series", None, card())) is None  # off the H200: nothing modelled


# ---------------------------------------------------------------------------------------------------------
# a device call's limit: TR2_DEADLINE stops a stage before a run its measured runs say would be cut


def test_a_stage_starts_no_run_the_deadline_would_cut(tmp_path, monkeypatch):
    c = card()
    plan = [{"key": "c/0", "m": "c"}, {"key": "a/1", "m": "a"}, {"key": "a/2", "m": "a"}]
    d = tmp_path / "method_a-20261201-100000-test"
    d.mkdir()
    _records(d, {"a/0": 60.0})
    ran = []

    def run_one(p):
        ran.append(p["key"])
        return {"status": "ok", "wall_s": 1.0}
    kw = dict(desc="method A", show=False, kind=lambda p: p["m"], record_kind=lambda r: r["key"][0])
    # 50 s left: a's runs take 60 s, so a/1 does not start; c was never measured, so it runs (no estimate)
    monkeypatch.setenv("TR2_DEADLINE", str(time.time() + 50))
    with stage.open_folder("method_a", c, d) as f:
        with pytest.raises(stage.DeadlineReached, match=r"^method A: stopped before a/1: its runs take 60\.0 s and "
                                                        r"TR2_DEADLINE leaves (49|50) s; 1 run\(s\) done in this call"):
            stage.run_plan(f, plan, run_one, **kw)
    assert ran == ["c/0"] and [r["key"] for r in read_jsonl(d / "runs.jsonl")] == ["a/0", "c/0"]
    # 100 s left: 60 s x 1.2 fits, so the rest runs (each run here takes no time)
    monkeypatch.setenv("TR2_DEADLINE", str(time.time() + 100))
    with stage.open_folder("method_a", c, d) as f:
        stage.run_plan(f, plan, run_one, **kw)
    assert ran == ["c/0", "a/1", "a/2"]


def test_a_fresh_h200_folder_stops_before_a_run_the_model_says_would_be_cut(tmp_path, monkeypatch):
    """No run measured yet (a fresh folder, no other folder of its card): on an H200 card the deadline judges by
    scripts/h200_minutes.py's model of a run alone, times `parallel` (found 2026-12-03: a fresh folder's first
    piece ran into the call's timeout twice and lost the runs in flight)."""
    c = card()
    c["machine"] = "nvidia-h200"
    d = tmp_path / "method_a-20261203-100000-test"
    d.mkdir()
    plan = [{"key": "c/0", "m": "c"}, {"key": "a/1", "m": "a"}]
    monkeypatch.setattr(stage, "modelled_seconds", lambda folder: {"a": 80.0}.get)   # c: the model knows none
    ran = []

    def run_one(p):
        ran.append(p["key"])
        return {"status": "ok", "wall_s": 1.0}
    kw = dict(desc="method A", show=False, kind=lambda p: p["m"], record_kind=lambda r: r["key"][0])
    monkeypatch.setenv("TR2_DEADLINE", str(time.time() + 90))   # 80 s x 1.2 does not fit
    f = stage.Folder(d, "method_a", None, c)
    with pytest.raises(stage.DeadlineReached, match=r"^method A: stopped before a/1: its runs are modelled at "
                                                    r"80\.0 s by scripts/h200_minutes\.py and TR2_DEADLINE leaves "
                                                    r"(89|90) s; 1 run\(s\) done in this call"):
        stage.run_plan(f, plan, run_one, **kw)
    assert ran == ["c/0"]
    # sharing the card: four runs at once are modelled at four times a run alone
    monkeypatch.setenv("TR2_DEADLINE", str(time.time() + 300))
    with pytest.raises(stage.DeadlineReached, match=r"^method A: stopped before a/1: its runs are modelled at "
                                                    r"5\.3 min by scripts/h200_minutes\.py \(4 x 80\.0 s alone, 4 "
                                                    r"runs sharing the card\)"):
        stage.run_plan(f, plan, run_one, parallel=4, **kw)
    # a measured run of the kind wins over the model: 1.0 s measured, so a/1 runs
    stage.run_plan(f, [{"key": "a/0", "m": "a"}], run_one, **{**kw, "kind": lambda p: "x"})   # a/0: 1.0 s, ok
    stage.run_plan(f, plan, run_one, **kw)
    assert ran == ["c/0", "a/0", "a/1"]


def test_the_model_gives_a_runs_seconds_on_the_h200_only(tmp_path):
    from tr2.cards import load_card
    c = load_card("h200-methoda-parallel-4")
    d = tmp_path / "method_a-20261203-100000-h200-methoda-parallel-4"
    d.mkdir()
    seconds = stage.modelled_seconds(stage.Folder(d, "method_a", None, c))
    assert seconds("gpt2-small/float32/torch") > seconds("gpt2-small/float32/cupy") > 30   # minutes of runs, not 0
    assert seconds("no-such-model/float32/torch") is None
    assert stage.modelled_seconds(stage.Folder(d, "method_a", None, card())) is None   # off the H200: no model


@pytest.mark.parametrize("value", ["soon", "-5", "0", "nan", "inf"])
def test_a_bad_deadline_is_one_line(tmp_path, monkeypatch, value):
    # nan stopped every run that had an estimate, and a time before 1970 is a typo, not a deadline
    monkeypatch.setenv("TR2_DEADLINE", value)
    with pytest.raises(Tr2Error, match=rf"^TR2_DEADLINE: '{value}' is not allowed; allowed: a Unix time in seconds"):
        stage.deadline()
    monkeypatch.setenv("TR2_DEADLINE", " ")
    assert stage.deadline() is None
    monkeypatch.setenv("TR2_DEADLINE", "1796000000.5")
    assert stage.deadline() == 1796000000.5


def test_unreadable_bytes_read_as_an_unreadable_file_not_a_traceback(tmp_path):
    """A results folder's files with bytes that are not UTF-8 (a damaged copy): the readers of tr2.results say what
    they say of an unreadable file (read_yaml, read_json: {}; read_jsonl: the line dropped as a torn one), where
    `make report --dirs` and tr2.explore.index ended in a UnicodeDecodeError (audit of 2026-12-05)."""
    from tr2.results import read_json, read_yaml
    (tmp_path / "card.yaml").write_bytes(b"card: x\nmachine: \xff\xfe\n")
    (tmp_path / "summary.json").write_bytes(b'{"a": "\xff"}')
    assert read_yaml(tmp_path / "card.yaml") == {} and read_json(tmp_path / "summary.json") == {}
    runs = tmp_path / "runs.jsonl"
    runs.write_bytes(b'{"key": "a"}\n\xff\xfe\n[1, 2]\n"text"\n{"key": "b"}\n')
    assert read_jsonl(runs) == [{"key": "a"}, {"key": "b"}]   # every reader calls .get on a record: a list is none


def test_an_atomic_write_that_fails_leaves_no_temporary_file(tmp_path):
    from tr2.results import write_text_atomic
    (tmp_path / "out").mkdir()   # `--out` naming a folder: the replace fails at the very end
    with pytest.raises(OSError):
        write_text_atomic(tmp_path / "out", "text")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]   # no .out.tmp<pid> beside it


def test_the_runner_exits_75_at_the_deadline(tmp_path, monkeypatch, capsys):
    from tr2 import runner

    def stopped(*a):
        raise stage.DeadlineReached("method A: stopped before a/1: ...")
    monkeypatch.setattr(runner, "prepare", lambda *a: (card(), tmp_path, tmp_path / "card.yaml"))
    monkeypatch.setattr(runner, "run_here", stopped)
    assert runner.main(["method_a", "--card", "smoke", "--runs-only"]) == runner.DEADLINE_EXIT == 75
    err = capsys.readouterr().err
    assert err == "tr2.runner: method A: stopped before a/1: ...\n"   # no "error:": the call's time is up


# ---------------------------------------------------------------------------------------------------------
# issue 11, item 4: method A's runs may share the card (run_plan's parallel)


def _sleepy(seconds, fail=(), log=None, wall_s=None):
    """A run_one that takes `seconds` (a number, or a dict of a piece's key to its seconds with "*" for the rest;
    recording wall_s, default those), notes how many pieces were in flight when it started, and fails `fail`."""
    lock, state = threading.Lock(), {"now": 0, "most": 0}

    def run_one(p):
        took = seconds.get(p["key"], seconds["*"]) if isinstance(seconds, dict) else seconds
        with lock:
            state["now"] += 1
            state["most"] = max(state["most"], state["now"])
        time.sleep(took)
        with lock:
            state["now"] -= 1
            if log is not None:
                log.append(p["key"])
        return {"status": "failed" if p["key"] in fail else "ok", "wall_s": took if wall_s is None else wall_s}
    return run_one, state


def test_parallel_pieces_run_at_once_and_each_record_is_appended(tmp_path):
    plan = [{"key": f"k/{i}"} for i in range(5)]
    run_one, state = _sleepy(0.3)
    with stage.open_folder("method_a", card(), tmp_path / "res") as f:
        t0 = time.monotonic()
        out = stage.run_plan(f, plan, run_one, desc="test", show=False, parallel=2)
        took = time.monotonic() - t0
    recs = read_jsonl(tmp_path / "res" / "runs.jsonl")
    assert state["most"] == 2 and sorted(r["key"] for r in recs) == [p["key"] for p in plan] and len(out) == 5
    assert took < 5 * 0.3 * 0.85   # three waves of 0.3 s, not five runs one after another
    assert all(r["parallel"] == 2 and r["ended_unix"] - r["started_unix"] >= 0.29 for r in recs)
    with stage.open_folder("method_a", card(), tmp_path / "res") as f:   # a rerun finds nothing to do
        assert stage.run_plan(f, plan, run_one, desc="test", show=False, parallel=2) == []


def test_a_parallel_stop_waits_for_the_pieces_in_flight(tmp_path):
    """A failure ends the stage; the piece beside it still ends and is recorded, and nothing new starts."""
    plan = [{"key": f"k/{i}"} for i in range(6)]
    ended = []
    # the failure ends well before the piece beside it (with equal times either could end first, and a k/1 that ended
    # first would let k/2 start before k/0's failure was seen: the test failed so once, at eb42992)
    run_one, _ = _sleepy({"k/0": 0.05, "*": 0.5}, fail={"k/0"}, log=ended)
    with stage.open_folder("method_a", card(), tmp_path / "res") as f:
        with pytest.raises(Tr2Error, match=r"^test: k/0 failed"):
            stage.run_plan(f, plan, run_one, desc="test", show=False, parallel=2,
                           ends_stage=lambda r: r["status"] == "failed")
    recs = read_jsonl(tmp_path / "res" / "runs.jsonl")
    assert sorted(r["key"] for r in recs) == ["k/0", "k/1"] and sorted(ended) == ["k/0", "k/1"]
    # the rerun retries the failure and runs the rest
    run_one, _ = _sleepy(0.01)
    with stage.open_folder("method_a", card(), tmp_path / "res") as f:
        out = stage.run_plan(f, plan, run_one, desc="test", show=False, parallel=3)
    assert sorted(r["key"] for r in out) == ["k/0", "k/2", "k/3", "k/4", "k/5"]


def test_the_deadline_stops_parallel_starts_and_keeps_the_runs_in_flight(tmp_path, monkeypatch):
    d = tmp_path / "method_a-20261203-100000-test"
    d.mkdir()
    _records(d, {"a/0": 1.0})
    plan = [{"key": f"a/{i}"} for i in range(1, 5)]
    run_one, _ = _sleepy(0.5, wall_s=1.0)   # every run is measured at 1.0 s, so 1.2 s are needed to start one
    monkeypatch.setenv("TR2_DEADLINE", str(time.time() + 1.5))   # the first two start at once; 0.5 s later 1.0 s left
    with stage.open_folder("method_a", card(), d) as f:
        with pytest.raises(stage.DeadlineReached, match=r"^test: stopped before a/3: its runs take [0-9.]+ s and "
                                                        r"TR2_DEADLINE leaves [01] s; 2 run\(s\) done in this call"):
            stage.run_plan(f, plan, run_one, desc="test", show=False, parallel=2, record_kind=lambda r: "a",
                           kind=lambda p: "a")
    assert sorted(r["key"] for r in read_jsonl(d / "runs.jsonl")) == ["a/0", "a/1", "a/2"]


def test_parallel_must_be_a_whole_number_and_takes_no_groups(tmp_path):
    with stage.open_folder("method_a", card(), tmp_path / "res") as f:
        for bad in (0, 1.5, True, "2"):
            with pytest.raises(Tr2Error, match=r"^run_plan: parallel .* is not allowed; allowed: an integer >= 1$"):
                stage.run_plan(f, [], lambda p: {}, desc="test", show=False, parallel=bad)
        with pytest.raises(Tr2Error, match=r"^run_plan: parallel > 1 with groups is not allowed"):
            stage.run_plan(f, [], lambda p: {}, desc="test", show=False, parallel=2, group=lambda p: p["g"])


def test_each_session_records_its_machines_gpus(tmp_path, monkeypatch):
    """sessions.jsonl names the GPUs (UUIDs) of each session's machine, so a folder resumed on another machine says
    so (explore.run_machine, the report's commits table); [] on a machine without one."""
    from tr2 import sysinfo
    d = tmp_path / "res"
    monkeypatch.setattr(sysinfo, "gpu_info", lambda: [{"name": "NVIDIA H200", "uuid": "GPU-aaaa"}])
    with stage.open_folder("series", card(), d):
        pass
    monkeypatch.setattr(sysinfo, "gpu_info", lambda: [])
    with stage.open_folder("series", card(), d):
        pass
    lines = [json.loads(x) for x in (d / "sessions.jsonl").read_text().splitlines()]
    assert [x["gpus"] for x in lines] == [["GPU-aaaa"], []]


def test_each_run_record_says_which_products_record_its_log_names_and_the_folder_keeps_it(tmp_path):
    """A cupy GPU run's log names the products record it read with its sha256 (gpu/backend.py); the skeleton puts
    that in the run's record and a copy in the folder's products/, once per content (tr2.products_kept)."""
    import hashlib
    from tr2.trainlog import products_record_text
    record = tmp_path / "cache" / "nvidia-h200-cublaslt130100.json"
    record.parent.mkdir()
    record.write_text('{"card": "x", "cublaslt_version": 1, "products": {}}\n')
    digest = hashlib.sha256(record.read_bytes()).hexdigest()
    with stage.open_folder("series", card(), tmp_path / "res") as f:
        def run_one(p):
            (f.path / "logs").mkdir(exist_ok=True)
            text = "iter 0: loss 1.0, time 1.00ms\n"
            if p["key"] != "torch":   # PyTorch's side names no products record
                text = f"cupy side: backend CudaBackend(... through cuBLASLt, {products_record_text(record, 0, digest)})\n" + text
            (f.path / "logs" / f"{p['key']}.log").write_text(text)
            return {"status": "ok", "log": f"logs/{p['key']}.log"}
        stage.run_plan(f, [{"key": "cupy-a"}, {"key": "cupy-b"}, {"key": "torch"}], run_one, desc="test", show=False)
        recs = {r["key"]: r for r in f.records()}
        kept = f"products/nvidia-h200-cublaslt130100-{digest[:12]}.json"
        assert recs["cupy-a"]["products_record"] == {"sha256": digest, "products": 0, "read_from": str(record),
                                                     "file": kept}
        assert recs["cupy-b"]["products_record"]["file"] == kept
        assert "products_record" not in recs["torch"]
        assert (f.path / kept).read_bytes() == record.read_bytes()
        assert sorted(p.name for p in (f.path / "products").iterdir()) == [kept.split("/")[1]]
