"""scripts/identity_check.py on the CPU with the tiny model: a run stopped after N steps writes the first lines of the
whole run byte for byte (so `--steps N` is a prefix of the recorded run, not another run), the check finds a recorded
run identical, and finds the one digit altered in a recorded file at its step."""
import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

from tr2 import REPO_ROOT
from tr2.results import read_jsonl

_spec = importlib.util.spec_from_file_location("identity_check", REPO_ROOT / "scripts" / "identity_check.py")
identity_check = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(identity_check)

STEPS, SHORT, EVERY = 30, 12, 10


@pytest.fixture(autouse=True)
def one_thread_each(monkeypatch):
    """Every training run of these tests (the recorded ones and the check's reruns inherit this environment) on one
    OpenMP / MKL thread: what is tested is the check, and a rerun of torch's CPU kernels may round otherwise when
    its threads split the work otherwise. Once in some forty runs of this file on 2 cores, the torch run and its rerun
    differed at step 3 (results/cpu-checks-20261204h/README.md); 300 further runs of that training on 2 threads under
    load repeated it (the thirty-third session), so the cause is not known: one thread removes one candidate."""
    for name in ("OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        monkeypatch.setenv(name, "1")


def train(side: str, steps: int, metrics: Path) -> list:
    """The tiny model trained on the CPU; returns the command as a stage would record it."""
    cmd = [sys.executable, "-u", "-m", "tr2.train", "--side", side, "--model", "tiny", "--dtype", "float32",
           "--device", "cpu", "--steps", str(steps), "--seed", "1337", "--eval-interval", str(EVERY),
           "--log-interval", "10", "--eval-iters", "2", "--metrics", str(metrics)]
    subprocess.run(cmd, check=True, capture_output=True, cwd=REPO_ROOT, timeout=300)
    return cmd


@pytest.mark.parametrize("side", ["cupy", "torch"])
def test_a_run_of_fewer_steps_is_a_byte_prefix_of_the_whole_run(side, tmp_path):
    whole, short, at_eval = tmp_path / "whole.jsonl", tmp_path / "short.jsonl", tmp_path / "at_eval.jsonl"
    train(side, STEPS, whole)
    for path, n in ((short, SHORT), (at_eval, EVERY)):
        train(side, n, path)
        part, full = path.read_bytes(), whole.read_bytes()
        assert len(part) < len(full) and full.startswith(part), (side, n)
        assert json.loads(part.splitlines()[-1])["step"] == n   # ends with step n's loss, its evaluation before it
    steps = [json.loads(x)["step"] for x in at_eval.read_text().splitlines() if json.loads(x)["kind"] == "eval"]
    assert steps == [0, EVERY]


@pytest.fixture
def folder(tmp_path):
    """A method A folder of two recorded runs (one a side), their commands naming an interpreter of another machine."""
    d = tmp_path / "method_a-20261203-120000-test"
    (d / "runs").mkdir(parents=True)
    recs = []
    for side in ("cupy", "torch"):
        key = f"tiny/float32/{side}/1337"
        rel = f"runs/tiny_float32_{side}_1337.metrics.jsonl"
        cmd = train(side, STEPS, d / rel)
        recs.append({"key": key, "status": "ok", "metrics": rel, "cmd": ["/opt/elsewhere/bin/python3", *cmd[1:]],
                     "steps": STEPS, "commit": "c" * 40})
    (d / "runs.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs))
    return d


def check(folder, out, *runs, steps=SHORT) -> int:
    return identity_check.main([str(folder), "--runs", *runs, "--steps", str(steps), "--out", str(out)])


def test_the_recorded_runs_are_identical_and_one_altered_digit_is_found(folder, tmp_path):
    out = tmp_path / "out" / "identity.jsonl"
    assert check(folder, out, "tiny/float32/*") == 0
    rows = read_jsonl(out)
    assert [r["key"] for r in rows] == ["tiny/float32/cupy/1337", "tiny/float32/torch/1337"]
    for r in rows:   # steps 0..12: 13 losses and the evaluations at 0 and 10
        assert r["identical"] is True and r["first_difference"] is None and r["status"] == "ok"
        assert (r["steps_compared"], r["through_step"], r["lines_compared"]) == (SHORT + 1, SHORT, SHORT + 3)
        assert r["recorded_commit"] == "c" * 40 and "commit" in r
    assert (tmp_path / "out" / "identity.runs" / "tiny_float32_cupy_1337.metrics.jsonl").is_file()

    recorded = folder / "runs" / "tiny_float32_cupy_1337.metrics.jsonl"
    lines = recorded.read_text().splitlines()
    i = next(i for i, x in enumerate(lines) if (json.loads(x)["kind"], json.loads(x)["step"]) == ("loss", 7))
    original = lines[i]
    digit = original.rstrip("}")[-1]
    lines[i] = original.rstrip("}")[:-1] + str((int(digit) + 1) % 10) + "}"   # the loss's last digit, one up
    recorded.write_text("\n".join(lines) + "\n")
    again = tmp_path / "again.jsonl"
    assert check(folder, again, "tiny/float32/cupy/*") == 1
    (r,) = read_jsonl(again)
    assert r["identical"] is False
    assert r["first_difference"] == {"step": 7, "recorded": lines[i], "new": original}


def test_a_difference_past_the_steps_compared_is_not_seen(folder, tmp_path):
    recorded = folder / "runs" / "tiny_float32_torch_1337.metrics.jsonl"
    lines = recorded.read_text().splitlines()
    lines[-1] = lines[-1].replace('"loss": ', '"loss": 1')   # step 30, past step 12
    recorded.write_text("\n".join(lines) + "\n")
    assert check(folder, tmp_path / "o.jsonl", "tiny/float32/torch/1337") == 0


@pytest.mark.parametrize("runs, steps, said", [
    (["tiny/float32/cupy/9"], SHORT, "--runs: 'tiny/float32/cupy/9' matches no finished trainer run"),
    (["tiny/*"], STEPS + 1, f"--steps: {STEPS + 1} is not allowed; allowed: an integer from 0 to {STEPS}"),
    (["tiny/*"], -1, "--steps: -1 is not allowed"),
])
def test_bad_input_is_one_line(folder, tmp_path, capsys, runs, steps, said):
    out = tmp_path / "x.jsonl"
    assert check(folder, out, *runs, steps=steps) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and said in err[0], err
    assert not out.exists()


def test_a_folder_without_its_recorded_files_is_refused_before_any_rerun(folder, tmp_path, capsys):
    (folder / "runs" / "tiny_float32_cupy_1337.metrics.jsonl").unlink()   # the folder travelled without its files
    out = tmp_path / "x.jsonl"
    assert check(folder, out, "tiny/*") == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"identity_check: error: FOLDER: {folder.name} lacks the recorded metrics file(s) "
                   "runs/tiny_float32_cupy_1337.metrics.jsonl; allowed: a folder that holds its runs' files (on the "
                   "device: `scripts/device_tree.sh slim FOLDER` keeps them)"]
    assert not out.exists() and not (tmp_path / "x.runs").exists()   # nothing ran


def test_the_scratch_folder_can_lie_outside_the_output_folder(folder, tmp_path):
    """On the device $OUT returns 8 files at most: the reruns' files must be able to go elsewhere."""
    out, scratch = tmp_path / "out" / "identity.jsonl", tmp_path / "scratch"
    assert identity_check.main([str(folder), "--runs", "tiny/float32/cupy/*", "--steps", str(SHORT), "--out", str(out),
                                "--scratch", str(scratch)]) == 0
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["identity.jsonl"]
    assert (scratch / "tiny_float32_cupy_1337.metrics.jsonl").is_file()
