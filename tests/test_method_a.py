"""Method A: the verdict at its edges, and a stage killed mid-run that resumes with only the missing runs."""
import json
import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest
import yaml

from tr2 import method_a
from tr2.cards import validate_card
from tr2.results import read_jsonl


def fam(*curves):
    """{seed: {step: val}} from one list of (step, val) pairs per seed."""
    return {1337 + i: dict(c) for i, c in enumerate(curves)}


def test_verdict_passes_at_the_edge_and_fails_just_past_it():
    torch_ = fam([(100, 2.0)], [(100, 2.5)])            # median 2.25, range 0.5
    at_edge = fam([(100, 2.75)], [(100, 2.75)])         # median 2.75: |diff| = 0.5 = the larger range
    v = method_a.verdict(torch_, at_edge, judge_from=100)
    assert v["passed"] is True
    assert v["steps"][0]["diff"] == 0.5 and v["steps"][0]["allowed"] == 0.5
    past = fam([(100, 2.75)], [(100, 2.8125)])          # median 2.78125, range 0.0625: diff 0.53125 > 0.5
    v = method_a.verdict(torch_, past, judge_from=100)
    assert v["passed"] is False and v["steps"][0]["ok"] is False
    assert "100" in v["reason"]


def test_verdict_takes_the_larger_of_the_two_ranges():
    torch_ = fam([(10, 3.0)], [(10, 3.0)])              # range 0
    cupy = fam([(10, 3.0)], [(10, 4.0)])                # median 3.5, range 1.0 -> diff 0.5 <= 1.0
    assert method_a.verdict(torch_, cupy, 0)["passed"] is True
    assert method_a.verdict(cupy, torch_, 0)["passed"] is True   # symmetric


def test_verdict_judges_only_from_judge_from_on():
    torch_ = fam([(0, 4.0), (50, 3.0), (100, 2.0)], [(0, 4.0), (50, 3.0), (100, 2.25)])
    cupy = fam([(0, 9.0), (50, 9.0), (100, 2.0)], [(0, 9.0), (50, 9.0), (100, 2.25)])
    v = method_a.verdict(torch_, cupy, judge_from=100)
    assert v["passed"] is True and [r["step"] for r in v["steps"]] == [100]
    assert method_a.verdict(torch_, cupy, judge_from=50)["passed"] is False


def test_verdict_median_of_an_odd_family():
    torch_ = fam([(5, 1.0)], [(5, 2.0)], [(5, 10.0)])    # median 2 (not the mean), range 9
    cupy = fam([(5, 11.0)], [(5, 11.0)], [(5, 11.0)])    # median 11: diff 9 = range -> pass
    assert method_a.verdict(torch_, cupy, 0)["passed"] is True
    cupy = fam([(5, 11.5)], [(5, 11.5)], [(5, 11.5)])
    assert method_a.verdict(torch_, cupy, 0)["passed"] is False


def test_verdict_missing_or_nonfinite_evaluation_fails_the_step():
    torch_ = fam([(100, 2.0), (200, 1.0)], [(100, 2.0), (200, 1.0)])
    cupy = fam([(100, 2.0), (200, 1.0)], [(100, 2.0)])  # the second seed lacks step 200
    v = method_a.verdict(torch_, cupy, 100)
    assert v["passed"] is False and v["steps"][1]["ok"] is False
    cupy = fam([(100, 2.0), (200, 1.0)], [(100, 2.0), (200, float("nan"))])
    assert method_a.verdict(torch_, cupy, 100)["passed"] is False


def test_one_seed_a_side_is_read_not_judged():
    v = method_a.verdict(fam([(100, 2.0)]), fam([(100, 2.0)]), 100)
    assert v["passed"] is None and "protocol rule 42" in v["reason"]
    assert v["steps"][0]["ok"] is True  # the numbers are still there


# ---- resumption ------------------------------------------------------------------------------------

FAKE = textwrap.dedent('''
    """A stand-in for `python -m tr2.train`: writes a metrics file of evaluations like the trainer's."""
    import argparse, json, os, sys, time
    p = argparse.ArgumentParser()
    for a in ("--side", "--model", "--dtype", "--device", "--mode", "--metrics"):
        p.add_argument(a)
    for a in ("--steps", "--seed", "--eval-interval", "--eval-iters", "--log-interval"):
        p.add_argument(a, type=int)
    p.add_argument("--half-roundings", action="store_true")
    a = p.parse_args()
    with open(os.environ["FAKE_CALLS"], "a") as f:
        f.write(f"{a.side}/{a.seed}\\n")
    hang = os.environ.get("FAKE_HANG") == f"{a.side}/{a.seed}"
    time.sleep(float(os.environ.get("FAKE_SLEEP", "0")))
    with open(a.metrics, "a") as m:
        for step in range(0, a.steps + 1, a.eval_interval):
            val = 3.0 - 0.01 * step + 0.001 * (a.seed - 1) + (0.0005 if a.side == "cupy" else 0.0)
            m.write(json.dumps({"kind": "eval", "step": step, "train": val - 0.1, "val": val}) + "\\n")
            m.flush()
            print(f"step {step}: train loss {val - 0.1:.4f}, val loss {val:.4f}", flush=True)
            if hang and step >= a.eval_interval:
                with open(os.environ["FAKE_MARK"], "w") as f:
                    f.write(str(os.getpid()))
                time.sleep(600)
    print("peak memory: 0 bytes", flush=True)
''')


def _card(seeds, parallel=None):
    return validate_card({
        "card": "test", "machine": "cpu", "device": "cpu", "models": ["tiny"], "dtypes": ["float32"],
        "torch_modes": ["eager"], "half_roundings": [False],
        "series": {"rounds": 1, "steps": 40, "window": [10, 40], "timeout_s": 60, "sample_interval_s": 1.0},
        "method_a": {"seeds": seeds, "steps": 40, "eval_interval": 20, "eval_iters": 2, "judge_from": 20,
                     "torch_mode": "eager", **({} if parallel is None else {"parallel": parallel})},
        "method_b": {"steps": 5, "judge_steps": {}, "seed": 1337},
        "families": {"steps": 4, "window": [2, 4], "rules": "params/families.tsv"},
    })


def test_killed_stage_resumes_with_only_the_missing_runs(tmp_path, monkeypatch):
    fake = tmp_path / "fake_train.py"
    fake.write_text(FAKE)
    calls, mark = tmp_path / "calls.txt", tmp_path / "hung.pid"
    card = _card([1, 2, 3])
    card_path = tmp_path / "card.yaml"
    card_path.write_text(yaml.safe_dump(card))
    d = tmp_path / "res"
    env = {**os.environ, "TR2_TRAINER": f"{sys.executable} {fake}", "FAKE_CALLS": str(calls), "FAKE_MARK": str(mark),
           "FAKE_HANG": "cupy/2"}
    code = ("import sys, tr2.method_a as m, tr2.cards as c; "
            "m.run(c.load_card(sys.argv[1]), sys.argv[2])")
    proc = subprocess.Popen([sys.executable, "-c", code, str(card_path), str(d)], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    hung_pid = None
    try:
        t0 = time.monotonic()
        while not mark.exists() or not mark.read_text():
            assert proc.poll() is None, "the stage ended before the hung run"
            assert time.monotonic() - t0 < 120, "the fake trainer never reached its hang"
            time.sleep(0.1)
        hung_pid = int(mark.read_text())
        proc.send_signal(signal.SIGKILL)  # killed hard, mid-run: no chance to clean up
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
        if hung_pid:
            try:
                os.kill(hung_pid, signal.SIGKILL)  # the trainer ran in its own session
            except ProcessLookupError:
                pass
    recs = read_jsonl(d / "runs.jsonl")
    assert [r["key"] for r in recs] == ["tiny/float32/torch/1", "tiny/float32/cupy/1", "tiny/float32/torch/2"]
    partial = d / "runs" / "tiny_float32_cupy_2.metrics.jsonl"
    assert partial.is_file()  # the killed run's half-written metrics are there...

    # ...and the rerun on the same folder starts only the missing runs, the killed one from scratch.
    calls.write_text("")
    monkeypatch.setenv("TR2_TRAINER", f"{sys.executable} {fake}")
    monkeypatch.setenv("FAKE_CALLS", str(calls))
    monkeypatch.setenv("FAKE_MARK", str(mark))
    monkeypatch.delenv("FAKE_HANG", raising=False)
    method_a.run(card, d)
    assert calls.read_text().split() == ["cupy/2", "torch/3", "cupy/3"]
    recs = read_jsonl(d / "runs.jsonl")
    assert len(recs) == 6 and all(r["status"] == "ok" for r in recs)
    ev = [json.loads(x) for x in partial.read_text().splitlines()]
    assert [e["step"] for e in ev] == [0, 20, 40]  # one complete run, nothing doubled

    method_a.run(card, d)  # a third run finds nothing to do
    assert calls.read_text().split() == ["cupy/2", "torch/3", "cupy/3"]

    s = method_a.summarize(d)
    (c,) = s["configs"]
    # seeds 1..3: torch medians 3-0.01*step+0.002, cupy 0.0005 above, ranges 0.002 -> passes
    assert c["verdict"]["passed"] is True and [r["step"] for r in c["verdict"]["steps"]] == [20, 40]
    assert c["final_val"]["torch"]["n"] == 3 and c["final_val"]["torch"]["step"] == 40
    assert (d / "method_a.csv").is_file() and (d / "method_a.png").is_file() and (d / "summary.json").is_file()
    assert s["conditions"]["card"] == "test" and "commit" in s["conditions"]  # every summary carries its conditions


def test_failed_run_ends_the_stage_and_is_retried(tmp_path, monkeypatch):
    bad = tmp_path / "bad.py"
    bad.write_text("import sys; print('boom'); sys.exit(1)\n")
    monkeypatch.setenv("TR2_TRAINER", f"{sys.executable} {bad}")
    card = _card([1])
    d = tmp_path / "res"
    with pytest.raises(Exception, match="failed"):
        method_a.run(card, d)
    recs = read_jsonl(d / "runs.jsonl")
    assert len(recs) == 1 and recs[0]["status"] == "failed"
    assert method_a.finished_keys(d / "runs.jsonl") == {}  # a failed run is not finished: a rerun retries it


def test_oom_is_recorded_and_the_stage_goes_on(tmp_path, monkeypatch):
    oom = tmp_path / "oom.py"
    oom.write_text("import sys; print('out of memory: CUDA out of memory. Tried to allocate 2 GiB', flush=True); sys.exit(3)\n")
    monkeypatch.setenv("TR2_TRAINER", f"{sys.executable} {oom}")
    card = _card([1, 2])
    d = method_a.run(card, tmp_path / "res")
    recs = read_jsonl(d / "runs.jsonl")
    assert len(recs) == 4 and {r["status"] for r in recs} == {"oom"}
    s = method_a.summarize(d)
    assert s["configs"][0]["verdict"]["passed"] is None and "out of memory" in s["configs"][0]["verdict"]["reason"]


def test_chance_of_failing_is_the_rules_false_failure_rate():
    """The rule's failure rate for two families of one distribution, against a plain loop over fresh draws (another
    generator, statistics.median, max - min): within five standard errors of the loop's 20,000 draws."""
    import random
    import statistics
    r = random.Random(7)
    for n_a, n_b in ((3, 3), (5, 5), (3, 5)):
        fails = 0
        for _ in range(20_000):
            a = [r.gauss(0, 1) for _ in range(n_a)]
            b = [r.gauss(0, 1) for _ in range(n_b)]
            fails += abs(statistics.median(a) - statistics.median(b)) > max(max(a) - min(a), max(b) - min(b))
        loop = fails / 20_000
        c = method_a.chance_of_failing(n_a, n_b, steps=17)
        assert abs(c["one_step"] - loop) < 5 * (loop * (1 - loop) / 20_000) ** 0.5 + 1e-4, (n_a, n_b, c, loop)
        assert c["any_step_bound"] == pytest.approx(1 - (1 - c["one_step"]) ** 17)
    three, five = method_a.chance_of_failing(3, 3, 1)["one_step"], method_a.chance_of_failing(5, 5, 1)["one_step"]
    assert 0.04 < three < 0.08 and five < 0.01   # more seeds, wider ranges: fewer failures by chance
    assert method_a.chance_of_failing(1, 1, 1)["one_step"] == 1.0   # no range: any difference fails


def test_a_failed_verdict_states_the_rules_chance_and_a_passed_one_does_not():
    torch_ = fam([(100, 2.0), (200, 2.0)], [(100, 2.1), (200, 2.1)], [(100, 2.2), (200, 2.2)])
    far = fam([(100, 3.0), (200, 2.1)], [(100, 3.1), (200, 2.1)], [(100, 3.2), (200, 2.1)])
    v = method_a.verdict(torch_, far, judge_from=100)
    assert v["passed"] is False and v["reason"].startswith("failed at step(s) 100 (")
    q = v["chance_of_failing"]
    assert q["steps"] == 2 and f"{100 * q['one_step']:.1f}% of the time" in v["reason"] and "any of these 2" in v["reason"]
    ok = method_a.verdict(torch_, torch_, judge_from=100)
    assert ok["passed"] is True and "%" not in ok["reason"] and ok["chance_of_failing"]["steps"] == 2
    one = method_a.verdict(fam([(100, 2.0)]), fam([(100, 2.0)]), judge_from=100)
    assert one["passed"] is None and one["chance_of_failing"] is None


def test_runs_sharing_the_machine_give_the_verdict_of_runs_one_at_a_time(tmp_path, monkeypatch):
    """method_a.parallel 3: the six runs overlap in time, every record says so, the summary equals the one of a folder
    run one at a time (the runs' losses do not depend on what ran beside them), and the notebook's note says that
    nothing was timed."""
    fake = tmp_path / "fake_train.py"
    fake.write_text(FAKE)
    monkeypatch.setenv("TR2_TRAINER", f"{sys.executable} {fake}")
    monkeypatch.setenv("FAKE_CALLS", str(tmp_path / "calls.txt"))
    monkeypatch.setenv("FAKE_SLEEP", "1.0")
    shared = method_a.run(_card([1, 2, 3], parallel=3), tmp_path / "shared")
    recs = read_jsonl(shared / "runs.jsonl")
    assert len(recs) == 6 and all(r["status"] == "ok" and r["parallel"] == 3 for r in recs)
    spans = sorted((r["started_unix"], r["ended_unix"]) for r in recs)
    assert sum(b > spans[0][0] for a, b in spans if a < spans[0][1]) >= 2   # the first run had company
    monkeypatch.setenv("FAKE_SLEEP", "0")
    alone = method_a.run(_card([1, 2, 3]), tmp_path / "alone")
    assert all("parallel" not in r for r in read_jsonl(alone / "runs.jsonl"))
    a, b = method_a.summarize(shared), method_a.summarize(alone)
    assert a["configs"] == b["configs"] and a["passed"] is True
    assert "times nothing" in method_a.sharing_note(_card([1], parallel=3))
    assert "one at a time" in method_a.sharing_note(_card([1]))


def test_parallel_is_a_card_key_with_bounds():
    assert _card([1])["method_a"]["parallel"] == 1   # left out: one run at a time, as every card before it
    assert _card([1], parallel=4)["method_a"]["parallel"] == 4
    for bad in (0, 17, 2.0, True, "2"):
        with pytest.raises(Exception, match=r"^method_a\.parallel: .* is not allowed; allowed: an integer from 1 to 16$"):
            _card([1], parallel=bad)
