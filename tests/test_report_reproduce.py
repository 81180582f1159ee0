"""The front page's honesty about how its folders ran and how to make them again (results/cpu-checks-20261205k's review):
the working tree state as machine.json recorded it (True, False, or not recorded: the GPU machine's copy has no .git),
and reproduce commands that reproduce: the report's names the file it wrote, a stage's chain acts on the folder its
first step makes, and the runs read the products records the folder's runs read. Each test fails on the code before."""
import hashlib
import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

import nbformat
import pandas as pd
import pytest
import yaml

import tr2.report as rp
from tr2 import REPO_ROOT, results, runner
from tr2.cupy_side import products
from tr2.report import verdicts
from tr2.report.stitch import DEFAULT_OUT
from tr2.trainlog import products_record_text
from test_report import CARD, MACHINE, _beside_folders, make_results

bs4 = pytest.importorskip("bs4")

NOT_RECORDED = "working tree state not recorded: no git on the machine"
_MISSING = object()


# 1. the working tree state: True, False, or not recorded

@pytest.mark.parametrize("value, state", [(True, True), (False, False), ("unknown", None), ("True", True),
                                          ("false", False), ("1", True), (None, None), (_MISSING, None)])
def test_dirty_is_true_false_or_not_recorded(tmp_path, value, state):
    """machine.json's "unknown" (no .git on the GPU machine) read as False: the page said the tree was clean."""
    m = {k: v for k, v in MACHINE.items() if k != "dirty"} | ({} if value is _MISSING else {"dirty": value})
    results.write_json_atomic(tmp_path / "machine.json", m)
    assert results.conditions(tmp_path)["dirty"] is state
    assert results.dirty_text(value if value is not _MISSING else None) == results.DIRTY_TEXT[state]


def _three_states(root):
    """make_results' folders, the series' tree not recorded, method A's dirty, method B's clean (as git said)."""
    make_results(root)
    dirs = rp.choose_dirs("demo", root=root)
    by = {Path(d).name.split("-")[0]: Path(d) for d in dirs}
    for stage, value in (("series", "unknown"), ("method_a", True), ("method_b", False), ("footprint", "unknown")):
        results.write_json_atomic(by[stage] / "machine.json", dict(MACHINE, dirty=value))
    return dirs, by


def test_the_front_page_says_a_tree_state_not_recorded_and_never_claims_clean_without_git(tmp_path):
    dirs, by = _three_states(tmp_path / "results")
    data = rp.build_table("demo", dirs, tmp_path)
    assert [f["conditions"]["dirty"] for f in data["folders"]] == [None, True, False, None]
    soup = bs4.BeautifulSoup(rp.front_page_html(data), "html.parser")
    text = lambda el: " ".join(el.get_text().split())  # noqa: E731
    head = text(soup.find(class_="tr2-edition"))   # the series' commit, at the top
    assert f"commit 0123456789ab ({NOT_RECORDED})" in head
    conditions = {tr.find("a").get_text(): text(tr) for tr in soup.find(id="conditions-table").find("tbody").find_all("tr")}
    assert f"0123456789ab ({NOT_RECORDED})" in conditions[by["series"].name]
    assert "0123456789ab (uncommitted changes)" in conditions[by["method_a"].name]
    assert "0123456789ab (clean)" in conditions[by["method_b"].name]
    commits = {tr["data-folder"]: text(tr.find("td", class_="commits"))
               for tr in soup.find(id="commits-table").find_all("tr", attrs={"data-folder": True})}
    assert commits[by["series"].name].endswith(f"({NOT_RECORDED})")
    assert commits[by["method_a"].name].endswith("(uncommitted changes)")
    assert "(" not in commits[by["method_b"].name]   # clean, as git said: nothing added


def _conditions_cell(nb_path, dirty):
    """A stage notebook as one executed before the state was tri-state: its conditions table (explore.condition_table,
    from summary.json's copy) says dirty False."""
    nb = nbformat.read(str(nb_path), as_version=4)
    table = pd.Series({"commit": "0123456789abcdef", "dirty": dirty, "driver": "580"}, dtype=object).to_frame("value")
    cell = nbformat.v4.new_code_cell("ex.condition_table(results_dir)")
    cell.outputs = [nbformat.v4.new_output("execute_result", data={"text/html": table.to_html(),
                                                                   "text/plain": table.to_string()}, execution_count=1)]
    nb.cells.append(cell)
    nbformat.write(nb, str(nb_path))


def test_a_stitched_notebooks_conditions_table_says_what_machine_json_recorded(tmp_path):
    """The H200 page's stitched stage notebooks each showed "dirty False" for a tree no git had looked at."""
    dirs, by = _three_states(tmp_path / "results")
    _conditions_cell(by["series"] / "series.ipynb", False)     # machine.json: "unknown"
    _conditions_cell(by["method_a"] / "method_a.ipynb", None)  # machine.json: True
    html, _ = rp.build_report("demo", root=tmp_path / "results", out=tmp_path / "report" / "TR-2.html")
    soup = bs4.BeautifulSoup(html.read_text(), "html.parser")
    cells = [" ".join(th.find_next("td").get_text().split()) for th in soup.find_all("th") if th.get_text() == "dirty"]
    assert cells == [NOT_RECORDED, "uncommitted changes"]
    page = " ".join(soup.get_text().split())
    assert f"· commit 0123456789ab ({NOT_RECORDED}). The stage's executed notebook" in page   # the series' header
    assert "· commit 0123456789ab (uncommitted changes). The stage's executed notebook" in page
    from tr2.report.stitch import dirty_row
    plain = pd.Series({"dirty": False, "driver": "580"}, dtype=object).to_frame("value").to_string()
    assert dirty_row(plain, None, html=False).splitlines()[1].split(None, 1) == ["dirty", NOT_RECORDED]


# 2a. the report's command names the file it wrote

def test_the_report_command_names_the_file_the_page_was_written_to(tmp_path):
    """The H200 page's command had no --out: run, it would have overwritten the CPU report, report/TR-2.html."""
    root = tmp_path / "results"
    make_results(root)
    a, b = _beside_folders(root)
    out = tmp_path / "pages" / "TR-2-demo-edition.html"
    assert rp.main(["--card", "demo", "--root", str(root), "--out", str(out), "--beside", str(a), str(b)]) == 0
    data = json.loads((out.parent / "TR-2-demo.json").read_text())
    argv = shlex.split(data["commands"]["report"])
    assert argv[:3] == ["python", "-m", "tr2.report"]
    args = argv[3:]
    assert Path(args[args.index("--out") + 1]) == out
    dirs = args[args.index("--dirs") + 1:args.index("--beside")]
    assert [results.folder_path(x) for x in dirs] == [results.folder_path(f["path"]) for f in data["folders"]]
    beside = args[args.index("--beside") + 1:args.index("--out")]
    assert [results.folder_path(x) for x in beside] == [a, b]
    default = DEFAULT_OUT.stat().st_mtime_ns if DEFAULT_OUT.exists() else None
    out.unlink()
    assert rp.main(args) == 0 and out.is_file()            # the command, run, writes that page again
    assert json.loads((out.parent / "TR-2-demo.json").read_text())["commands"] == data["commands"]
    assert (DEFAULT_OUT.stat().st_mtime_ns if DEFAULT_OUT.exists() else None) == default   # and not the CPU report


# 2b. a stage's chain acts on the folder its first step makes

A, B, C, D, E1, E2 = (x * 40 for x in "abcdef")
SMOKE = yaml.safe_load((REPO_ROOT / "params" / "cards" / "smoke.yaml").read_text())


def _retired_and_extended(root):
    """A method A folder of the smoke card: made at A, two runs retired at B and run again at C, a seed added at D whose
    runs a resume split over two calls made at E1 and E2."""
    d = root / "method_a-20261202-170258-smoke"
    (d / "logs").mkdir(parents=True)
    (d / "card.yaml").write_text(yaml.safe_dump(SMOKE))
    (d / "machine.json").write_text(json.dumps(dict(MACHINE, commit=A, dirty="unknown")))
    (d / "summary.json").write_text(json.dumps({"stage": "method_a", "configs": []}))
    (d / "sessions.jsonl").write_text("".join(json.dumps({"stage": "method_a", "commit": c}) + "\n" for c in (A, C, E1, E2)))
    rec = lambda key, commit, **kw: {"key": key, "status": "ok", "wall_s": 1.0, "commit": commit, **kw}  # noqa: E731
    retired = [rec(f"tiny/float32/cupy/{s}", A, retired_at="2026-12-03T12:58:43+00:00", retired_by_commit=B,
                   retired_reason="the kernel's bits") for s in (1, 2)]
    kept = [rec("tiny/float32/torch/1", A), rec("tiny/float32/cupy/1", C), rec("tiny/float32/cupy/2", C),
            rec("tiny/float32/torch/3", E1), rec("tiny/float32/cupy/3", E2)]
    (d / "retired.jsonl").write_text("".join(json.dumps(r) + "\n" for r in retired))
    (d / "runs.jsonl").write_text("".join(json.dumps(r) + "\n" for r in kept))
    (d / "extended.jsonl").write_text(json.dumps({"extended_at": "2026-12-04T10:20:20+00:00", "extended_by_commit": D,
                                                  "added": [3], "runs": ["tiny/float32/torch/3", "tiny/float32/cupy/3"],
                                                  "extended_reason": "five seeds"}) + "\n")
    return d


def _shell_env():
    """The shell the commands run in: `python` is this interpreter, tr2 importable."""
    return {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
            "PYTHONPATH": str(REPO_ROOT / "lib")}


def test_a_stage_chain_retires_and_extends_the_folder_its_first_step_made(tmp_path):
    """The edition's method A chain was `make method-a` (a new folder, stamped now) and then --retire/--extend/--resume
    of the committed folder results/<name>: every later step acted on the wrong folder."""
    d = _retired_and_extended(tmp_path / "results")
    repro = tmp_path / "repro"
    cmd = verdicts.commands("smoke", [verdicts.folder_info(d, tmp_path)], tmp_path, repro=str(repro))[d.name]
    body, _, note = cmd.partition("  # ")
    steps = body.split(" && ")
    root = f"{repro}/{d.name}"
    first = steps.index(f"python -m tr2.runner method_a --card smoke --root {root}")
    assert steps[first - 1] == f"git checkout {A[:12]}" and not any(s.startswith("make ") for s in steps)
    assert steps[first + 1] == f"D=$(python -m tr2.runner latest method_a --card smoke --root {root})"
    later = steps[first + 2:]
    acting = [s for s in later if s.startswith("python -m tr2.runner")]
    assert [s.split()[4] for s in acting] == ["--retire", "--resume", "--extend", "--resume"]
    assert all(shlex.split(s)[5] == "$D" for s in acting) and str(d) not in cmd and f"results/{d.name} " not in cmd
    # the resumes at the commits their runs were made at: the retired runs' at C, the added seed's at the first of its
    # two (the runner cannot stop a resume after given runs: the note says so)
    assert later[later.index(next(s for s in later if "--retire" in s)) + 1] == f"git checkout {C[:12]}"
    assert later[later.index(next(s for s in later if "--extend" in s)) + 1] == f"git checkout {E1[:12]}"
    assert f"not exact: 1 of its runs were made at {E2[:12]}" in note
    # what the steps do: the runner makes the folder under the root (prepare, before papermill), and the step after
    # names it as $D
    argv = shlex.split(steps[first])[3:]
    made = runner.prepare(argv[0], argv[argv.index("--card") + 1], None, argv[argv.index("--root") + 1])[1]
    assert made.parent == Path(root).resolve()
    got = subprocess.run(["bash", "-c", f'{steps[first + 1]} && printf %s "$D"'], capture_output=True, text=True,
                         cwd=REPO_ROOT, env=_shell_env(), timeout=120)
    assert got.returncode == 0, got.stderr
    assert Path(got.stdout).resolve() == made


def test_the_runners_root_is_documented_for_the_commands_that_use_it(capsys):
    with pytest.raises(SystemExit):
        runner.main(["--help"])
    assert "--root" in capsys.readouterr().out


# 2c. the runs read the products records the folder's runs read

GPU = dict(CARD, card="gpu-demo", machine="nvidia-h200", device="cuda")
RECORD = json.dumps({"card": "NVIDIA H200", "cublaslt_version": 130100, "products": {}}).encode()
SHA = hashlib.sha256(RECORD).hexdigest()
CACHE = "/work/main/.cache/products/nvidia-h200-cublaslt130100.json"   # where the GPU machine's runs read it


# what the GPU machine's runs have in their environment besides any switch: paths, the commit handed in, the deadline
MACHINE_ENV = {"TR2_DATA": "/work/main/data", "TR2_DEADLINE": "1796492999", "TR2_GIT_COMMIT": A,
               "TR2_KERNEL_CACHE": "/work/main/.cache/kernels", "TR2_PRODUCTS_DIR": "/work/main/.cache/products",
               "TR2_PYTHON": "python3", "TR2_REQUIRE_CARD_GPU": "1"}


def _gpu_folder(root, stage, logs=(), kept=False, env=MACHINE_ENV):
    """A GPU folder whose runs' logs name products records: logs, one (path, count, digest) a run; kept: the stage kept
    the first in products/ and its record says so (tr2.products_kept, since 2026-12-05); env: machine.json's
    tr2_environment (None: not recorded, as before the thirtieth session)."""
    d = root / f"{stage}-20261205-120000-gpu-demo"
    (d / "logs").mkdir(parents=True)
    (d / "card.yaml").write_text(yaml.safe_dump(GPU))
    (d / "machine.json").write_text(json.dumps(dict(MACHINE, commit=A, dirty="unknown")
                                               | ({} if env is None else {"tr2_environment": env})))
    (d / "summary.json").write_text(json.dumps({"stage": stage}))
    recs = []
    for n, (path, count, digest) in enumerate(logs):
        log = f"logs/{stage}-{n}.log"
        (d / log).write_text(f"number of parameters: 1M\ncupy side: backend CudaBackend('float32', products f32 through "
                             f"cuBLASLt, {products_record_text(path, count, digest)})\niter 0: loss 4.0, time 1.00ms\n")
        rec = {"key": f"tiny/float32/cupy/{n}", "status": "ok", "wall_s": 1.0, "commit": A, "log": log}
        if kept and digest:
            name = f"products/{Path(path).stem}-{digest[:12]}.json"
            (d / "products").mkdir(exist_ok=True)
            (d / name).write_bytes(RECORD)
            rec["products_record"] = {"sha256": digest, "products": count, "read_from": path, "file": name}
        recs.append(rec)
    (d / ("footprint.jsonl" if stage == "footprint" else "runs.jsonl")).write_text("".join(json.dumps(r) + "\n" for r in recs))
    return d


def _before_checkout(cmd):
    steps = cmd.partition("  # ")[0].split(" && ")
    return steps[:next(i for i, s in enumerate(steps) if s.startswith("git checkout"))], steps


def test_a_stage_command_restores_the_products_record_its_runs_read(tmp_path, monkeypatch):
    """The H200 page's commands ran the cupy side with whatever .cache/products held, not the record the folder keeps."""
    root = tmp_path / "results"
    series = _gpu_folder(root, "series", [(CACHE, 3, SHA)] * 2, kept=True)
    old = _gpu_folder(root, "method_a", [(CACHE, 3, None)])                      # a log from before the digest
    other = _gpu_folder(root, "method_b", [(CACHE.replace("h200", "h100"), 5, None)])   # nothing keeps its record
    families = _gpu_folder(root, "families")                                      # logs that name none
    infos = [verdicts.folder_info(d, tmp_path) for d in (series, old, other, families)]
    cmds = verdicts.commands("gpu-demo", infos, tmp_path)

    where = f"results/repro/{series.name}/products"
    pre, steps = _before_checkout(cmds[series.name])
    assert pre == [f"mkdir -p {where}", f"cp {series}/products/nvidia-h200-cublaslt130100-{SHA[:12]}.json "
                                        f"{where}/nvidia-h200-cublaslt130100.json"]   # before the checkout: the
    # commit's tree need not hold the folder
    env = f'TR2_PRODUCTS_DIR="$PWD/{where}" '
    assert f"{env}python -m tr2.runner series --card gpu-demo --root results/repro/{series.name}" in steps
    assert "  # " not in cmds[series.name]   # exact: nothing to say
    # run, the steps put the record where the runs look for it (tr2.cupy_side.products.record_path under that variable)
    subprocess.run(["bash", "-c", " && ".join(pre)], cwd=tmp_path, check=True, timeout=60)
    monkeypatch.setenv("TR2_PRODUCTS_DIR", str(tmp_path / where))
    found = products.record_path("NVIDIA H200", 130100)
    assert found.is_file() and products.read_record_digest(found)[1] == SHA

    # a folder whose logs name the record without a digest: the one of that name and count that the page keeps, said
    pre, steps = _before_checkout(cmds[old.name])
    assert pre[1] == (f"cp {series}/products/nvidia-h200-cublaslt130100-{SHA[:12]}.json "
                      f"results/repro/{old.name}/products/nvidia-h200-cublaslt130100.json")
    assert steps[-1].startswith(f'TR2_PRODUCTS_DIR="$PWD/results/repro/{old.name}/products" python -m tr2.runner method_a')
    note = cmds[old.name].partition("  # ")[2]
    assert note.startswith("not exact: its runs' logs (before 2026-12-05) name nvidia-h200-cublaslt130100.json "
                           "(3 products) without a digest") and str(series) in note
    # none kept anywhere: the chain stops before the checkout and says where to put it
    pre, _ = _before_checkout(cmds[other.name])
    assert pre[-1] == f"test -f results/repro/{other.name}/products/nvidia-h100-cublaslt130100.json"
    assert subprocess.run(["bash", "-c", " && ".join(pre)], cwd=tmp_path, timeout=60).returncode != 0
    assert "put the one they read in" in cmds[other.name]
    # runs whose logs name none: nothing restored, and said
    assert "TR2_PRODUCTS_DIR" not in cmds[families.name].partition("  # ")[0]
    assert "do not name the products record" in cmds[families.name].partition("  # ")[2]


def test_products_read_lists_each_record_once_with_its_copy(tmp_path):
    d = _gpu_folder(tmp_path, "series", [(CACHE, 3, SHA), (CACHE, 3, SHA), (CACHE, 0, None)], kept=True)
    assert results.products_read(d) == [
        {"name": "nvidia-h200-cublaslt130100.json", "sha256": SHA, "products": 3,
         "kept": f"products/nvidia-h200-cublaslt130100-{SHA[:12]}.json", "not_kept": None, "runs": 2},
        {"name": "nvidia-h200-cublaslt130100.json", "sha256": None, "products": 0, "kept": None, "not_kept": None,
         "runs": 1}]


def test_a_stage_command_sets_the_kernel_switches_its_runs_ran_with(tmp_path):
    """The commands ran every folder with its commit's default kernels, whatever switches machine.json recorded (the
    forty-fourth session's note: "reproduce commands pass no recorded TR2_* switches")."""
    root = tmp_path / "results"
    switched = _gpu_folder(root, "series", [(CACHE, 3, SHA)], kept=True,
                           env=MACHINE_ENV | {"TR2_ATTN_F32_PAIRS": "1", "TR2_GELU_REVERSE": "0", "TR2_PDL": " ",
                                              "TR2_SIDE_STREAM": "1"})   # blank: unset; the last one retired since
    old = _gpu_folder(root, "method_a", [(CACHE, 3, SHA)], kept=True, env=None)
    plain = _gpu_folder(root, "method_b", [(CACHE, 3, SHA)], kept=True)
    (switched / "retired.jsonl").write_text(json.dumps({"key": "tiny/float32/cupy/9", "retired_at": "2026-12-05T13:00",
                                                        "by_commit": A, "reason": "r", "rerun_commits": [A]}) + "\n")
    infos = [verdicts.folder_info(d, tmp_path) for d in (switched, old, plain)]
    cmds = verdicts.commands("gpu-demo", infos, tmp_path)
    set_ = 'TR2_ATTN_F32_PAIRS=1 TR2_GELU_REVERSE=0 TR2_SIDE_STREAM=1 TR2_PRODUCTS_DIR="$PWD/'
    steps = cmds[switched.name].partition("  # ")[0].split(" && ")
    runs = [s for s in steps if "python -m tr2.runner series" in s and "latest" not in s]
    assert len(runs) == 3 and all(s.startswith(set_) for s in runs[::2]), runs   # the stage, and the resume after the
    # retirement (the retirement itself runs nothing)
    assert "--retire" in runs[1] and not runs[1].startswith("TR2_")
    assert not any(k in cmds[switched.name] for k in ("TR2_KERNEL_CACHE", "TR2_DEADLINE", "TR2_PDL", "TR2_DATA"))
    assert "  # " not in cmds[switched.name]
    assert "kernel switches its runs ran with are not recorded" in cmds[old.name].partition("  # ")[2]
    assert cmds[plain.name].partition("  # ")[0].split(" && ")[-1].startswith('TR2_PRODUCTS_DIR="$PWD/')
    assert "  # " not in cmds[plain.name]
    assert {"TR2_ATTN_F32_PAIRS", "TR2_GELU_REVERSE", "TR2_SIDE_STREAM"} <= results.kernel_switch_names()
    assert not {"TR2_KERNEL_CACHE", "TR2_PRODUCTS_DIR", "TR2_GIT_COMMIT"} & results.kernel_switch_names()
