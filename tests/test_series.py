"""The series: configurations, rotation, the 1% rule, the verdicts, OOM and failures, resumption.

The trainer is a fake program whose step time and behaviour each test sets per configuration.
"""
import copy
import json
import shutil
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from tr2 import REPO_ROOT, Tr2Error
from tr2 import series
from tr2.cards import load_card
from tr2.configs import RunConfig
from tr2.results import read_jsonl

PY = sys.executable

FAKE = textwrap.dedent("""
    import sys, time
    config, steps, ms, own = sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), float(sys.argv[4])
    behaviour, count = sys.argv[5], sys.argv[6]
    with open(count, "a") as f:
        f.write(config + "\\n")
    n_started = sum(1 for line in open(count) if line.strip() == config)
    if behaviour == "fail":
        print("iter 0: loss 4.0000, time 1.00ms", flush=True)
        print("Traceback (most recent call last):", flush=True)
        print("ValueError: shapes do not match", flush=True)
        sys.exit(1)
    if behaviour == "nodata-first" and n_started == 1:
        print("tr2.train: error: data file 'input.txt' not found; put nanoGPT's input.txt under data/", flush=True)
        sys.exit(2)
    if behaviour == "oom" or (behaviour.startswith("oom-at-") and n_started == int(behaviour[7:])):
        print("out of memory: tried to allocate 9.00 GiB", flush=True)
        sys.exit(3)
    if behaviour == "sleep":
        time.sleep(60)
    if behaviour == "short":
        steps = 10
    t0 = time.perf_counter(); last, last_n = t0, -1
    for i in range(steps + 1):
        target = t0 + (i + 1) * ms / 1000.0
        while time.perf_counter() < target:
            time.sleep(max(0.0, target - time.perf_counter()))
        if i % 10 == 0:
            now = time.perf_counter()
            print(f"iter {i}: loss 2.0000, time {own * (now - last) * 1000 / (i - last_n):.4f}ms", flush=True)
            last, last_n = now, i
    print("peak memory: 1000 bytes", flush=True)
""")


@pytest.fixture
def card(monkeypatch):
    # The fake's short windows (tens of ms) carry the reader's scheduling jitter on a busy 2-core machine,
    # a few percent: these tests loosen the 1% rule to 50% (its own test below keeps 1%, on 1 s windows).
    monkeypatch.setattr(series, "OWN_TOLERANCE", 0.5)
    c = load_card(REPO_ROOT / "params" / "cards" / "smoke.yaml")
    c["card"] = "test"
    c["dtypes"] = ["float32", "bfloat16"]
    c["torch_modes"] = ["eager", "default"]
    c["series"].update(rounds=2, steps=20, window=[10, 20], timeout_s=30)
    return c  # 7 configurations: f32 torch x2 + cupy; bf16 torch x2 + cupy + cupy-hr; 21 runs


class Fake:
    """The fake trainer: step ms, own-reading factor and behaviour per configuration id."""

    def __init__(self, tmp_path, ms=None, own=None, behaviour=None):
        self.path = tmp_path / "fake.py"
        self.path.write_text(FAKE)
        self.count = tmp_path / "started.txt"
        self.ms, self.own, self.behaviour = ms or {}, own or {}, behaviour or {}

    def __call__(self, config, card):
        cid = config.key
        # wide apart, so verdicts stay put on a busy machine; windows of 30 ms and more, so the reader's latency
        # (up to ~10 ms on a loaded 2-core machine, which voided a 10 ms window in CI) stays within the loosened rule
        default_ms = 3.0 if config.side == "cupy" else 15.0
        return [PY, str(self.path), cid, str(card["series"]["steps"]), str(self.ms.get(cid, default_ms)),
                str(self.own.get(cid, 1.0)), self.behaviour.get(cid, "ok"), str(self.count)]

    def started(self):
        return self.count.read_text().split() if self.count.exists() else []


def keys(d):
    return [(x["round"], x["config"]) for x in read_jsonl(d / "runs.jsonl")]


def test_configurations_of_the_h200_card():
    c = load_card(REPO_ROOT / "params" / "cards" / "h200.yaml")
    confs = series.configurations(c)
    # per model: our 4 torch modes, nanoGPT's train.py in the same 4 (torch_loops), then 1 cupy build in float32
    # and 2 in each half type
    assert len(confs) == 3 * (9 + 10 + 10)
    ids = [x.key for x in confs[:29]]
    assert ids[:9] == ["nanogpt/float32/torch-eager", "nanogpt/float32/torch-default",
                       "nanogpt/float32/torch-reduce-overhead", "nanogpt/float32/torch-max-autotune",
                       "nanogpt/float32/nanogpt-eager", "nanogpt/float32/nanogpt-default",
                       "nanogpt/float32/nanogpt-reduce-overhead", "nanogpt/float32/nanogpt-max-autotune",
                       "nanogpt/float32/cupy"]
    assert ids[17:19] == ["nanogpt/bfloat16/cupy", "nanogpt/bfloat16/cupy-hr"]
    assert len(series.plan(c)) == 87 * 6
    cmd = series.trainer_command(confs[7], c)
    assert cmd[cmd.index("--side") + 1] == "nanogpt" and cmd[cmd.index("--nanogpt") + 1] == "../shared/nanoGPT"
    cmd = series.trainer_command(confs[18], c)
    assert cmd[1:4] == ["-u", "-m", "tr2.train"] and "--half-roundings" in cmd and "--mode" not in cmd
    assert cmd[cmd.index("--eval-interval") + 1] == "0" and cmd[cmd.index("--steps") + 1] == "400"
    cmd = series.trainer_command(confs[3], c)
    assert cmd[cmd.index("--mode") + 1] == "max-autotune" and cmd[cmd.index("--device") + 1] == "cuda"


def test_rotation_order(card):
    assert series.rotation(3, 0) == [0, 1, 2]
    assert series.rotation(3, 1) == [1, 2, 0]
    assert series.rotation(3, 2) == [2, 0, 1]
    assert series.rotation(3, 4) == [1, 2, 0]
    card["models"], card["dtypes"], card["torch_modes"] = ["tiny"], ["float32"], ["eager", "default"]
    p = [(r, c.build) for r, c in series.plan(card)]
    assert p == [(0, "torch-eager"), (0, "torch-default"), (0, "cupy"),
                 (1, "torch-default"), (1, "cupy"), (1, "torch-eager"),
                 (2, "cupy"), (2, "torch-eager"), (2, "torch-default")]


def test_verdict_rule():
    # faster: our slowest run below PyTorch's fastest-mode fastest run
    v = series.compare([9.0, 9.5, 9.9], {"eager": [20.0, 21.0, 22.0], "default": [10.0, 10.5, 11.0]})
    assert v["verdict"] == "faster" and v["mode"] == "default" and v["ratio"] == pytest.approx(9.5 / 10.5)
    assert v["ours"] == {"runs": 3, "median": 9.5, "fastest": 9.0, "slowest": 9.9}
    assert v["theirs"] == {"runs": 3, "median": 10.5, "fastest": 10.0, "slowest": 11.0}
    # ranges overlap, our median below theirs: level, never faster (protocol rule 21)
    assert series.compare([9.0, 9.5, 10.2], {"default": [10.0, 10.5, 11.0]})["verdict"] == "level"
    # our median less than 5% above: level
    assert series.compare([10.9, 11.0, 11.1], {"default": [10.0, 10.5, 11.0]})["verdict"] == "level"
    # exactly 5% above: slower
    assert series.compare([104.0, 105.0, 106.0], {"default": [99.0, 100.0, 101.0]})["verdict"] == "slower"
    v = series.compare([12.0, 12.0, 12.0], {"default": [10.0, 10.0, 10.0]})
    assert v["verdict"] == "slower" and v["ratio"] == pytest.approx(1.2)
    # the compared mode is the one with the lowest median, not the lowest single run
    v = series.compare([9.7], {"eager": [9.8, 30.0, 30.0], "default": [10.0, 10.0, 10.0]})
    assert v["mode"] == "default" and v["verdict"] == "faster"


def test_verdict_excludes_modes_without_time():
    # max-autotune ran out of memory: the comparison is against the fastest mode that ran (protocol rule 20)
    v = series.compare([10.0, 10.1], {"eager": [20.0, 20.0], "default": [12.0, 12.5], "max-autotune": []})
    assert v["mode"] == "default" and v["verdict"] == "faster" and v["modes_without_time"] == ["max-autotune"]
    v = series.compare([10.0], {"eager": None, "default": []})
    assert v["verdict"] is None and v["reason"] == "no PyTorch mode has a time"
    assert series.compare([], {"eager": [1.0]})["verdict"] is None


def test_own_reading_rule():
    cupy = RunConfig("tiny", "float32", "cupy")
    torch = RunConfig("tiny", "float32", "torch", mode="eager")
    ok = {"status": "ok", "step_ms": 10.0, "own_step_ms": 10.09, "own_vs_clock": 0.009}
    bad = {"status": "ok", "step_ms": 10.0, "own_step_ms": 10.2, "own_vs_clock": 0.02}
    assert series.own_check(cupy, ok) is None
    assert "+2.00%" in series.own_check(cupy, bad)
    assert series.own_check(torch, bad) is None  # PyTorch's own reading is recorded, never compared
    assert series.own_check(cupy, {**ok, "own_vs_clock": None, "own_step_ms": None}) == "no own reading in the window"


def test_own_reading_rule_end_to_end(tmp_path):
    """The 1% rule as the series applies it: honest is valid on windows of 1.6 s (the reader's latency on a loaded
    2-core machine, up to ~10 ms, stays well inside 1%; 0.8 s windows failed now and then there), off by 5% is void."""
    c = load_card(REPO_ROOT / "params" / "cards" / "smoke.yaml")
    c["series"].update(rounds=1, steps=50, window=[10, 50])
    fake = Fake(tmp_path, ms={"tiny/float32/cupy": 40.0, "tiny/float32/torch-eager": 1.0})
    d = tmp_path / "honest"
    series.run(c, d, trainer=fake, progress=False)
    recs = read_jsonl(d / "runs.jsonl")
    cupy = [x for x in recs if x["side"] == "cupy"]
    assert len(cupy) == 2 and all(x["void"] is None and abs(x["own_vs_clock"]) < 0.01 for x in cupy)
    assert cupy[1]["valid"] and not cupy[0]["valid"]  # the warm run never counts
    c["series"].update(steps=30, window=[10, 30])
    fake = Fake(tmp_path, ms={"tiny/float32/cupy": 20.0}, own={"tiny/float32/cupy": 1.05})
    d = tmp_path / "off"
    series.run(c, d, trainer=fake, progress=False)
    cupy = [x for x in read_jsonl(d / "runs.jsonl") if x["side"] == "cupy"]
    assert all(not x["valid"] and "differs from the clock" in x["void"] for x in cupy)


def test_a_whole_series(card, tmp_path):
    fake = Fake(tmp_path, own={"tiny/float32/cupy": 3.0, "tiny/float32/torch-eager": 3.0})
    d = tmp_path / "res"
    series.run(card, d, trainer=fake, progress=False)
    assert len(keys(d)) == 21 == len(set(keys(d))) == len(fake.started())
    recs = read_jsonl(d / "runs.jsonl")
    cupy32 = [x for x in recs if x["config"] == "tiny/float32/cupy" and not x["warm"]]
    assert all(not x["valid"] and "differs from the clock" in x["void"] for x in cupy32)  # the 1% rule
    eager = [x for x in recs if x["config"] == "tiny/float32/torch-eager" and not x["warm"]]
    assert all(x["valid"] and x["void"] is None and x["own_vs_clock"] > 1.0 for x in eager)
    assert all(x["log"].startswith("logs/r") and (d / x["log"]).is_file() for x in recs)
    s = series.summarize(d)
    for f in ("summary.json", "series.csv", "verdicts.csv", "series.png", "card.yaml", "machine.json"):
        assert (d / f).is_file(), f
    rows = {r["config"]: r for r in s["configurations"]}
    assert rows["tiny/float32/cupy"]["status"] == "void" and rows["tiny/float32/cupy"]["runs"] == 0
    r = rows["tiny/bfloat16/cupy-hr"]
    assert r["status"] == "ok" and r["runs"] == 2 and 2.9 < r["median_ms"] < 9.0 and r["peak_bytes"] == 1000
    v = {(x["dtype"], x["build"]): x for x in s["verdicts"]}
    assert v[("bfloat16", "cupy-hr")]["verdict"] == "faster" and v[("bfloat16", "cupy-hr")]["primary"]
    assert v[("bfloat16", "cupy")]["verdict"] == "faster" and not v[("bfloat16", "cupy")]["primary"]
    assert v[("float32", "cupy")]["verdict"] is None  # every run void: no time
    assert s["conditions"]["runs_recorded"] == 21 and s["conditions"]["card"] == "test"
    assert json.loads((d / "summary.json").read_text())["verdicts"][0]["model"] == "tiny"
    import csv
    assert len(list(csv.DictReader(open(d / "series.csv")))) == 7


def test_the_verdict_takes_the_fastest_pytorch_loop_whichever_it_is(card, tmp_path):
    card = {**card, "dtypes": ["float32"], "torch_modes": ["eager"], "torch_loops": ["torch", "nanogpt"]}
    # nanoGPT's own loop faster than ours: the cupy side is compared against it (docs/protocol.md, rule 20)
    fake = Fake(tmp_path, ms={"tiny/float32/torch-eager": 20.0, "tiny/float32/nanogpt-eager": 5.0,
                              "tiny/float32/cupy": 10.0})
    d = tmp_path / "res"
    series.run(card, d, trainer=fake, progress=False)
    assert sorted(set(fake.started())) == ["tiny/float32/cupy", "tiny/float32/nanogpt-eager", "tiny/float32/torch-eager"]
    (v,) = series.summarize(d)["verdicts"]
    assert (v["torch_loop"], v["torch_mode"], v["torch_build"]) == ("nanogpt", "eager", "nanogpt-eager")
    assert v["verdict"] == "slower" and v["ratio"] > 1.0


def test_oom_ends_the_configuration_not_the_series(card, tmp_path):
    fake = Fake(tmp_path, behaviour={"tiny/bfloat16/cupy": "oom", "tiny/bfloat16/torch-default": "oom",
                                     "tiny/float32/torch-default": "oom-at-2"})
    d = tmp_path / "res"
    series.run(card, d, trainer=fake, progress=False)
    recs = read_jsonl(d / "runs.jsonl")
    by = {}
    for x in recs:
        by.setdefault(x["config"], []).append(x)
    assert [x["status"] for x in by["tiny/bfloat16/cupy"]] == ["oom"]  # warm run, then nothing more
    assert [x["status"] for x in by["tiny/float32/torch-default"]] == ["ok", "oom"]  # out of memory in round 1
    assert len(by["tiny/bfloat16/cupy-hr"]) == 3 and len(by["tiny/float32/cupy"]) == 3
    assert len(recs) == 21 - 2 - 2 - 1
    s = series.summarize(d)
    rows = {r["config"]: r for r in s["configurations"]}
    assert rows["tiny/float32/torch-default"]["status"] == "oom" and rows["tiny/float32/torch-default"]["median_ms"] is None
    assert rows["tiny/bfloat16/cupy"]["reason"].startswith("warm run: out of memory")
    v = {(x["dtype"], x["build"]): x for x in s["verdicts"]}
    assert v[("float32", "cupy")]["torch_mode"] == "eager" and v[("float32", "cupy")]["oom_modes"] == ["default"]
    assert v[("float32", "cupy")]["verdict"] == "faster"
    assert v[("bfloat16", "cupy")]["verdict"] is None and "out of memory" in v[("bfloat16", "cupy")]["reason"]
    assert v[("bfloat16", "cupy-hr")]["verdict"] == "faster" and v[("bfloat16", "cupy-hr")]["torch_mode"] == "eager"
    # a second pass over the finished folder runs nothing
    n = len(fake.started())
    series.run(card, d, trainer=fake, progress=False)
    assert len(fake.started()) == n


def test_a_failing_run_is_recorded_and_the_series_goes_on(card, tmp_path):
    fake = Fake(tmp_path, behaviour={"tiny/float32/torch-eager": "fail"})
    d = tmp_path / "res"
    series.run(card, d, trainer=fake, progress=False)
    recs = read_jsonl(d / "runs.jsonl")
    bad = [x for x in recs if x["config"] == "tiny/float32/torch-eager"]
    assert len(bad) == 1 and bad[0]["status"] == "failed"
    assert bad[0]["reason"] == "exit code 1: ValueError: shapes do not match"
    assert "Traceback (most recent call last):" in bad[0]["tail"]
    assert len(recs) == 21 - 2
    s = series.summarize(d)
    v = {(x["dtype"], x["build"]): x for x in s["verdicts"]}
    assert v[("float32", "cupy")]["verdict"] is None and "torch-eager failed" in v[("float32", "cupy")]["reason"]
    assert v[("bfloat16", "cupy-hr")]["verdict"] == "faster"
    assert not s["complete"]


def test_a_failure_for_want_of_data_is_retried_on_resume(card, tmp_path):
    """tr2.retry through the skeleton: the resumed series runs the configuration again, the new record says
    what it replaces, and the summary reads the last record of each run."""
    cid = "tiny/float32/torch-eager"
    fake = Fake(tmp_path, behaviour={cid: "nodata-first"})
    d = tmp_path / "res"
    series.run(card, d, trainer=fake, progress=False)
    recs = read_jsonl(d / "runs.jsonl")
    assert [x["status"] for x in recs if x["config"] == cid] == ["failed"] and len(recs) == 21 - 2
    assert series.summarize(d)["verdicts"][0]["verdict"] is None
    series.run(card, d, trainer=fake, progress=False)   # resume: the cause is gone
    recs = read_jsonl(d / "runs.jsonl")
    mine = [x for x in recs if x["config"] == cid]
    assert [x["status"] for x in mine] == ["failed", "ok", "ok", "ok"] and len(recs) == 21 + 1
    assert "no data" in mine[1]["retried"] and "input.txt" in mine[1]["retried"]
    assert "retried" not in mine[2] and fake.started().count(cid) == 4
    s = series.summarize(d)
    assert s["complete"] and s["conditions"]["runs_recorded"] == 21
    v = {(x["dtype"], x["build"]): x for x in s["verdicts"]}
    assert v[("float32", "cupy")]["verdict"] == "faster"
    series.run(card, d, trainer=fake, progress=False)   # nothing is left to run
    assert len(read_jsonl(d / "runs.jsonl")) == 22


def test_timeout_and_no_window_are_recorded(card, tmp_path, monkeypatch):
    # The fake trainer starts in milliseconds, so a 2 s timeout is meaningful here; a real card's floor is 10 s.
    import tr2.cards
    monkeypatch.setitem(tr2.cards.BOUNDS, "series.timeout_s", (1, 10))
    card["series"]["timeout_s"] = 2.0
    fake = Fake(tmp_path, behaviour={"tiny/float32/torch-eager": "sleep", "tiny/bfloat16/cupy": "short"},
                ms={"tiny/float32/torch-default": 150.0})
    d = tmp_path / "res"
    series.run(card, d, trainer=fake, progress=False)
    recs = {x["config"]: x for x in read_jsonl(d / "runs.jsonl") if x["round"] == 0}
    assert recs["tiny/float32/torch-eager"]["status"] == "timeout"
    assert recs["tiny/float32/torch-default"]["status"] == "timeout"  # 21 steps of 150 ms: past 2 s
    assert recs["tiny/bfloat16/cupy"]["status"] == "no-window" and "step 20" in recs["tiny/bfloat16/cupy"]["reason"]
    assert recs["tiny/float32/cupy"]["status"] == "ok"
    s = series.summarize(d)
    v = {(x["dtype"], x["build"]): x for x in s["verdicts"]}
    assert v[("float32", "cupy")]["verdict"] is None and "timeout" in v[("float32", "cupy")]["reason"]
    assert v[("bfloat16", "cupy")]["verdict"] is None and v[("bfloat16", "cupy-hr")]["verdict"] is not None


class Killed(Exception):
    pass


def kill_after(d, n):
    """An on_record hook that stops the stage once the folder holds n records (a kill between runs)."""
    def hook(rec):
        if len(keys(d)) == n:
            raise Killed
    return hook


def test_resume_after_a_kill_between_runs(card, tmp_path):
    card["dtypes"] = ["float32"]  # 3 configurations, 9 runs
    fake = Fake(tmp_path)
    d = tmp_path / "res"
    with pytest.raises(Killed):
        series.run(card, d, trainer=fake, progress=False, on_record=kill_after(d, 4))
    assert len(keys(d)) == 4
    series.run(card, d, trainer=fake, progress=False)
    ks = keys(d)
    assert len(ks) == 9 == len(set(ks)) and ks == [(r, c.key) for r, c in series.plan(card)]
    assert len(fake.started()) == 9  # nothing ran twice


def test_a_cold_compile_is_recorded_and_a_resume_without_the_caches_compiles_cold_again(card, tmp_path, capsys):
    """Issue 11, item 2: the warm run of each configuration is its cold compile, and so is its first run after a
    resume on a machine that lacks the folder's caches (they are git-ignored); the records and the summary say so,
    and the plan printed on resume estimates each kind of run from the runs this folder measured."""
    card["dtypes"], card["torch_modes"] = ["float32"], ["eager"]  # 2 configurations, 6 runs
    fake = Fake(tmp_path)
    d = tmp_path / "res"
    with pytest.raises(Killed):
        series.run(card, d, trainer=fake, progress=False, on_record=kill_after(d, 3))
    shutil.rmtree(d / "cache")  # a fresh machine: the caches did not travel with the folder
    capsys.readouterr()
    series.run(card, d, trainer=fake, progress=False)
    out = capsys.readouterr().out
    eager, cupy = "tiny/float32/torch-eager", "tiny/float32/cupy"
    recs = read_jsonl(d / "runs.jsonl")
    assert [(x["round"], x["config"]) for x in recs if x["cold_compile"]] == [(0, eager), (0, cupy), (1, eager), (2, cupy)]
    assert series.summarize(d)["conditions"]["cold_timed_runs"] == [f"r1/{eager}", f"r2/{cupy}"]
    assert out.startswith("series runs: 3 of 6 runs to go\n")
    assert f"1 x {eager} (cold compile): " in out and f"1 x {cupy} (cold compile): " in out  # measured in round 0
    assert f"1 x {eager} (caches warm): no estimate" in out  # its only warm run is still to go: no number invented
    assert "for 2 of the 3 runs, from the runs measured in this folder; no estimate for the other 1" in out


def test_resume_after_runs_jsonl_lost_its_tail(card, tmp_path):
    card["dtypes"] = ["float32"]
    fake = Fake(tmp_path)
    d = tmp_path / "res"
    series.run(card, d, trainer=fake, progress=False)
    lines = (d / "runs.jsonl").read_text().splitlines(keepends=True)
    # a kill mid-append: the last three records gone, a torn half-line in their place
    (d / "runs.jsonl").write_text("".join(lines[:-3]) + lines[-3][: len(lines[-3]) // 2])
    assert len(keys(d)) == 6
    series.run(card, d, trainer=fake, progress=False)
    ks = keys(d)
    assert len(ks) == 9 == len(set(ks)) and ks == [(r, c.key) for r, c in series.plan(card)]
    assert len(fake.started()) == 12  # exactly the three lost runs again
    assert (d / "runs.jsonl").read_text().count("\n") == 9  # the torn line was cut, not kept


DRIVER = textwrap.dedent("""
    import sys, yaml
    sys.path.insert(0, {tests!r})
    from tr2 import series
    from test_series import Fake
    import pathlib
    fake = Fake(pathlib.Path({tmp!r}), ms={{"tiny/float32/cupy": 25.0}})
    card = yaml.safe_load(open({card!r}))
    series.run(card, {res!r}, trainer=fake, progress=False)
""")


def test_resume_after_a_real_kill_mid_run(card, tmp_path):
    import yaml
    card["dtypes"] = ["float32"]  # round 1 runs torch-default, cupy, torch-eager
    card_file = tmp_path / "card.yaml"
    card_file.write_text(yaml.safe_dump(card))
    d = tmp_path / "res"
    driver = tmp_path / "driver.py"
    driver.write_text(DRIVER.format(tests=str(REPO_ROOT / "tests"), tmp=str(tmp_path), card=str(card_file), res=str(d)))
    proc = subprocess.Popen([PY, str(driver)])
    try:
        # wait for the slow cupy run (0.5 s) of round 1 to be in flight, then kill the series without warning
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            started = (tmp_path / "started.txt").read_text().split() if (tmp_path / "started.txt").exists() else []
            if started.count("tiny/float32/cupy") == 2:
                break
            time.sleep(0.02)
        else:
            pytest.fail("the series did not reach round 1's cupy run")
        time.sleep(0.1)
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    finally:
        if proc.poll() is None:
            proc.kill()
    done = keys(d)
    assert ("1", "tiny/float32/cupy") not in done and (1, "tiny/float32/cupy") not in done
    assert len(done) == 4  # round 0 and round 1's first run
    fake = Fake(tmp_path)
    series.run(card, d, trainer=fake, progress=False)
    ks = keys(d)
    assert len(ks) == 9 == len(set(ks))
    assert len(fake.started()) == 10  # the run in flight ran again; nothing else did


def test_resume_refuses_another_card(card, tmp_path):
    fake = Fake(tmp_path)
    card["dtypes"] = ["float32"]
    card["torch_modes"] = ["eager"]
    card["series"]["rounds"] = 1
    d = tmp_path / "res"
    series.run(card, d, trainer=fake, progress=False)
    other = copy.deepcopy(card)
    other["series"]["rounds"] = 5
    with pytest.raises(Tr2Error, match=r"^results_dir: .* holds another card \(key 'series' differs"):
        series.run(other, d, trainer=fake, progress=False)


def test_each_configuration_compiles_into_caches_of_its_own(card, tmp_path, monkeypatch):
    """Inductor's and Triton's caches: one folder a configuration under the series' cache (a shared one served a
    bfloat16 run what float16 had compiled, on the H200: configs.compile_caches); a configuration's rounds share."""
    seen = []

    def clocked(cmd, log, env=None, **kw):
        seen.append(env)
        return {"status": "ok", "reason": None, "returncode": 0, "step_ms": 1.0, "own_step_ms": None,
                "own_vs_clock": None, "peak_bytes": None, "iters": 3, "last_step": 2, "wall_s": 0.1, "tail": ""}
    monkeypatch.setattr(series, "run_clocked", clocked)
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "one-shared-cache"))   # as device_env.sh exports it
    d = tmp_path / "res"
    (d / "logs").mkdir(parents=True)
    configs = [RunConfig("tiny", dtype, "torch", mode="reduce-overhead") for dtype in ("float16", "bfloat16")]
    for r, c in ((0, configs[0]), (0, configs[1]), (1, configs[1])):
        series.run_one(r, c, card, d, trainer=lambda config, card: ["true"])
    dirs = [e["TORCHINDUCTOR_CACHE_DIR"] for e in seen]
    assert dirs[0] != dirs[1] and dirs[1] == dirs[2]
    assert all(x.startswith(str(d / "cache")) for x in dirs)
    assert [e["TRITON_CACHE_DIR"] for e in seen][0] != seen[1]["TRITON_CACHE_DIR"]


def test_the_summary_names_the_rounds_that_ran_on_more_than_one_machine():
    """A series resumed in a later device call may finish a round on another machine (results/series-20261204-142303-
    h200-edition did, before sessions recorded their GPUs): the summary counts the machines and names such rounds;
    the warm-up round (0) and runs without a recorded machine are left out."""
    sessions = [{"started": "2026-12-04T14:23:05+00:00", "gpus": ["GPU-a"]},
                {"started": "2026-12-04T14:33:20+00:00", "gpus": ["GPU-b"]}]
    records = [{"round": 0, "started": "2026-12-04T14:24:00+00:00"}, {"round": 0, "started": "2026-12-04T14:34:00+00:00"},
               {"round": 1, "started": "2026-12-04T14:25:00+00:00"}, {"round": 1, "started": "2026-12-04T14:26:00+00:00"},
               {"round": 3, "started": "2026-12-04T14:32:00+00:00"}, {"round": 3, "started": "2026-12-04T14:34:00+00:00"},
               {"round": 2, "started": None}]
    assert series.machines_of(sessions, records) == {"machines": 2, "rounds_across_machines": [3]}
    assert series.machines_of([{k: v for k, v in s.items() if k != "gpus"} for s in sessions], records) == \
        {"machines": None, "rounds_across_machines": []}
