"""A stage in two places: `python -m tr2.runner STAGE --runs-only` runs the stage's runs and summary without the
notebook (the GPU machine, where papermill's wheels no longer travel beside the tree), and `--render DIR` executes
the notebook over the finished folder on any machine, running nothing and checking nothing of the machine."""
from __future__ import annotations

import json
import shutil
import subprocess
import sys

import pytest

from tr2 import REPO_ROOT, RESULTS_DIR
from tr2.runner import papermill_command

PY = sys.executable
# The quick card's series, run on an H200 (device: cuda); rendered here, where no GPU is.
GPU_SERIES = RESULTS_DIR / "series-20261201-032228-h200-quick"


def _runner(*args, cwd=REPO_ROOT):
    return subprocess.run([PY, "-m", "tr2.runner", *map(str, args)], cwd=cwd, capture_output=True, text=True,
                          timeout=600)


def _errors(notebook) -> list[str]:
    nb = json.loads(notebook.read_text())
    return [o.get("ename", "") for c in nb["cells"] if c["cell_type"] == "code" for o in c.get("outputs", [])
            if o.get("output_type") == "error"]


def test_papermill_command_passes_render_only_when_rendering(tmp_path):
    plain = papermill_command("series", tmp_path / "card.yaml", tmp_path)
    render = papermill_command("series", tmp_path / "card.yaml", tmp_path, render=True)
    assert "render_only" not in plain
    assert render[render.index("render_only") - 1:render.index("render_only") + 2] == ["-p", "render_only", "True"]


@pytest.mark.slow
def test_runs_only_then_render_on_the_smoke_card(tmp_path):
    res = _runner("series", "--card", "smoke", "--runs-only", "--root", tmp_path / "results")
    assert res.returncode == 0, res.stderr[-2000:]
    d = next((tmp_path / "results").glob("series-*-smoke"))
    assert not (d / "series.ipynb").exists()             # no notebook ran
    assert (d / "summary.json").is_file() and (d / "runs.jsonl").is_file()
    assert f"--render {d}" in res.stdout
    runs, sessions = (d / "runs.jsonl").read_bytes(), (d / "sessions.jsonl").read_bytes()
    res = _runner("series", "--render", d)
    assert res.returncode == 0, res.stderr[-2000:]
    assert (d / "series.ipynb").is_file() and _errors(d / "series.ipynb") == []
    assert (d / "runs.jsonl").read_bytes() == runs          # nothing ran again
    assert (d / "sessions.jsonl").read_bytes() == sessions  # the stage did not even open its folder


@pytest.mark.slow
def test_a_gpu_cards_folder_renders_on_a_machine_without_a_gpu(tmp_path):
    """The quick card's H200 series folder (card device: cuda) rendered here: the card is not checked against this
    machine, no run is made, the executed notebook holds no error."""
    d = tmp_path / GPU_SERIES.name
    shutil.copytree(GPU_SERIES, d, ignore=shutil.ignore_patterns("series.ipynb", "cache"))
    assert "device: cuda" in (d / "card.yaml").read_text()
    runs = (d / "runs.jsonl").read_bytes()
    res = _runner("series", "--render", d)
    assert res.returncode == 0, res.stderr[-2000:]
    assert (d / "series.ipynb").is_file() and _errors(d / "series.ipynb") == []
    assert (d / "runs.jsonl").read_bytes() == runs


@pytest.mark.parametrize("extra, words", [
    (["--card", "smoke"], ["--render: given with --card", "--render DIR alone"]),
    (["--runs-only"], ["--render: given with --runs-only"]),
    (["--resume", str(GPU_SERIES)], ["--render: given with --resume"]),
])
def test_render_takes_no_other_option(tmp_path, extra, words):
    res = _runner("series", "--render", GPU_SERIES, *extra)
    assert res.returncode == 2 and res.stdout == ""
    assert all(w in res.stderr for w in words), res.stderr


def test_render_refuses_a_folder_whose_stage_has_not_ended(tmp_path):
    d = tmp_path / GPU_SERIES.name
    shutil.copytree(GPU_SERIES, d, ignore=shutil.ignore_patterns("series.ipynb", "summary.json", "cache"))
    res = _runner("series", "--render", d)
    assert res.returncode == 2 and res.stdout == ""
    assert "holds no summary.json" in res.stderr and f"--resume {d} --runs-only" in res.stderr, res.stderr
    assert not (d / "series.ipynb").exists()


@pytest.mark.parametrize("stage, folder, words", [
    ("series", "nothing-here", ["--render:", "is not a folder", "allowed"]),
    ("method_a", str(GPU_SERIES), ["--render:", "is a folder of stage series", "allowed: a folder of stage method_a"]),
    ("dance", str(GPU_SERIES), ["stage: 'dance'", "allowed"]),
])
def test_render_refuses_what_is_no_folder_of_the_stage(tmp_path, stage, folder, words):
    res = _runner(stage, "--render", folder if folder != "nothing-here" else tmp_path / folder)
    assert res.returncode == 2 and res.stdout == ""
    assert all(w in res.stderr for w in words), res.stderr
    assert "Traceback" not in res.stderr
