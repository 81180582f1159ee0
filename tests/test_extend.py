"""Adding seeds to a finished method A folder (tr2.extend, `python -m tr2.runner method_a --extend DIR --seeds S...
--reason TEXT`): the card is rewritten with the seeds appended and kept as it was, the folder is no longer finished,
`--resume DIR` runs exactly the new seeds' runs and judges every seed, and the report replays the extension."""
import difflib
import json
import shlex

import pytest
import yaml

from tr2 import explore, method_a, runner, stage
from tr2.cards import load_card
from tr2.results import is_finished, read_jsonl
from test_retire import A, B, CUPY, fake_trainer, finished, retire, snapshot  # noqa: F401 - fixtures used by name

C, D = "c" * 40, "d" * 40
REASON = "the protocol's five seeds a side"
NEW = [f"tiny/float32/{side}/{seed}" for seed in (4, 5) for side in ("torch", "cupy")]   # method_a.plan's order


@pytest.fixture
def folder(finished):   # noqa: F811 - test_retire's fixture, imported above so that pytest finds it
    """test_retire's finished method A folder: three seeds a side at commit A, the later steps at commit B."""
    return finished


@pytest.fixture
def calls(fake_trainer):   # noqa: F811 - likewise
    """The file where the fake trainer writes side/seed of each run it makes."""
    return fake_trainer


def extend(d, *seeds, reason=REASON, stage_name="method_a"):
    return runner.main([stage_name, "--extend", str(d), "--seeds", *map(str, seeds), "--reason", reason])


def test_the_card_gains_the_seeds_alone_and_is_kept_as_it_was(folder, capsys):
    before = (folder / "card.yaml").read_text()
    runs, summary = (folder / "runs.jsonl").read_bytes(), (folder / "summary.json").read_bytes()
    assert extend(folder, 4, 5) == 0
    assert "extended from [1, 2, 3] to [1, 2, 3, 4, 5]" in capsys.readouterr().out
    want = yaml.safe_load(before)
    want["method_a"]["seeds"] = [1, 2, 3, 4, 5]
    assert yaml.safe_load((folder / "card.yaml").read_text()) == want
    # the rewrite differs from the card in the seeds' lines alone, appended where the list ends
    diff = list(difflib.ndiff(before.splitlines(), (folder / "card.yaml").read_text().splitlines()))
    assert [line for line in diff if line[0] in "+-?"] == ["+   - 4", "+   - 5"]
    assert diff[diff.index("+   - 4") - 1] == "    - 3"
    assert (folder / "retired" / "card.yaml").read_text() == before
    # the marks of a finished stage moved aside, unchanged: the report passes the folder over until the resume
    assert not is_finished(folder)
    assert (folder / "retired" / "summary.json").read_bytes() == summary
    assert (folder / "retired" / "method_a.ipynb").is_file() and not (folder / "summary.json").exists()
    assert (folder / "runs.jsonl").read_bytes() == runs   # no record touched
    (rec,) = read_jsonl(folder / "extended.jsonl")
    assert {k: rec[k] for k in ("card_key", "before", "added", "after", "runs", "extended_reason",
                                "extended_by_commit")} == {
        "card_key": "method_a.seeds", "before": [1, 2, 3], "added": [4, 5], "after": [1, 2, 3, 4, 5], "runs": NEW,
        "extended_reason": REASON, "extended_by_commit": B}
    assert rec["extended_at"].endswith("+00:00")
    assert rec["extended_files"] == {"card.yaml": "retired/card.yaml", "summary.json": "retired/summary.json",
                                     "method_a.ipynb": "retired/method_a.ipynb"}
    assert not list(folder.glob(".*.tmp*"))


def test_the_seeds_go_in_the_order_given(folder):
    assert extend(folder, 9, 7) == 0
    assert load_card(folder / "card.yaml")["method_a"]["seeds"] == [1, 2, 3, 9, 7]


def test_the_resume_plans_exactly_the_new_seeds_runs(folder, monkeypatch):
    assert method_a.remaining(load_card(folder / "card.yaml"), folder) == []
    assert extend(folder, 4, 5) == 0
    card = load_card(folder / "card.yaml")
    assert [r["key"] for r in method_a.remaining(card, folder)] == NEW
    ran = []

    def run_one(r, card_, d):   # the stage's own plan and skipping, no trainer
        ran.append(r["key"])
        return {**r, "status": "ok", "wall_s": 0.0}
    monkeypatch.setattr(method_a, "run_one", run_one)
    method_a.run(card, folder)
    assert ran == NEW
    method_a.run(card, folder)   # nothing left to run
    assert ran == NEW and method_a.remaining(card, folder) == []


def test_the_resume_runs_the_new_seeds_and_judges_every_seed(folder, calls, monkeypatch):
    assert extend(folder, 4, 5) == 0
    monkeypatch.setenv("TR2_GIT_COMMIT", C)   # the resume at a later commit, as on the device
    assert runner.main(["method_a", "--resume", str(folder), "--runs-only"]) == 0
    assert calls.read_text().split() == ["torch/4", "cupy/4", "torch/5", "cupy/5"]
    s = json.loads((folder / "summary.json").read_text())
    (c,) = s["configs"]
    assert c["seeds"] == [1, 2, 3, 4, 5] and c["verdict"]["seeds"] == {"torch": 5, "cupy": 5}
    assert c["runs"] == {side: {str(k): "ok" for k in range(1, 6)} for side in ("torch", "cupy")}
    assert c["final_val"]["torch"]["n"] == 5 and c["verdict"]["passed"] is True
    assert s["runs"] == {"finished": 10, "planned": 10, "records": 10}
    assert [x["added"] for x in s["extended"]] == [[4, 5]]
    assert explore.commit_runs(folder) == [{"commit": A, "runs": 6, "retired": 0, "calls": 1},
                                             {"commit": C, "runs": 4, "retired": 0, "calls": 1}]
    (x,) = explore.extensions(folder)
    assert x["run_commits"] == [C] and x["extended_by_commit"] == B
    (note,) = method_a.extension_notes(folder)
    assert "[1, 2, 3] became [1, 2, 3, 4, 5]" in note and REASON in note and "retired/card.yaml" in note


def test_a_second_extension_keeps_both_cards(folder, calls):
    first = (folder / "card.yaml").read_text()
    assert extend(folder, 4) == 0
    method_a.run(load_card(folder / "card.yaml"), folder)
    method_a.summarize(folder)
    second = (folder / "card.yaml").read_text()
    assert extend(folder, 5, reason="again") == 0
    assert (folder / "retired" / "card.yaml").read_text() == first
    assert (folder / "retired" / "card-2.yaml").read_text() == second
    assert read_jsonl(folder / "extended.jsonl")[-1]["extended_files"] == {
        "card.yaml": "retired/card-2.yaml", "summary.json": "retired/summary-2.json"}   # no notebook was rendered
    assert [r["key"] for r in method_a.remaining(load_card(folder / "card.yaml"), folder)] == \
        ["tiny/float32/torch/5", "tiny/float32/cupy/5"]


@pytest.mark.parametrize("args, said", [
    (["--seeds", "4", "2", "--reason", "x"], "--seeds: 2 is in the folder's card already (method_a.seeds: [1, 2, 3]); allowed: seeds "
                            "it does not list (e.g. 5)"),
    (["--seeds", "x", "--reason", "x"], "--seeds: 'x' is not allowed; allowed: integers from 0 to"),
    (["--seeds", "1.5", "--reason", "x"], "--seeds: '1.5' is not allowed"),
    (["--seeds", "-4", "--reason", "x"], "--seeds: '-4' is not allowed"),
    (["--seeds", "4", "4", "--reason", "x"], "--seeds: [4, 4] lists 4 twice"),
    (["--seeds", "4"], "--reason: missing"),
    (["--seeds", "4", "--reason", " "], "--reason: ' ' is empty"),
    (["--reason", "x"], "--seeds: missing"),
    (["--seeds", "4", "--reason", "x", "--resume", "{d}"], "--extend: given with --resume"),
    (["--seeds", "4", "--reason", "x", "--runs-only"], "--extend: given with --runs-only"),
    (["--seeds", "4", "--reason", "x", "--retire", "{d}", "--runs", CUPY], "--extend: given with --retire"),
])
def test_bad_extensions_are_refused_in_one_line_changing_nothing(folder, capsys, args, said):
    before = snapshot(folder)
    argv = ["method_a", "--extend", str(folder), *[a.format(d=folder) for a in args]]
    assert runner.main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and said in err[0], err
    assert snapshot(folder) == before


def test_what_is_no_finished_method_a_folder_is_refused(folder, tmp_path, capsys):
    before = snapshot(folder)
    assert extend(folder, 4, stage_name="method_b") == 2
    assert "--extend: stage 'method_b' is not allowed; allowed: method_a" in capsys.readouterr().err
    other = tmp_path / "not-a-results-folder"
    other.mkdir()
    assert extend(other, 4) == 2
    assert "--extend: " in capsys.readouterr().err
    assert runner.main(["method_a", "--seeds", "4"]) == 2
    assert "--seeds: given without --extend" in capsys.readouterr().err
    assert snapshot(folder) == before
    assert retire(folder, CUPY) == 0   # its summary moved aside: runs are missing until a resume
    before = snapshot(folder)
    assert extend(folder, 4) == 2
    assert "holds no summary.json, so its stage has not run to its end" in capsys.readouterr().err
    assert snapshot(folder) == before


def test_a_folder_a_stage_holds_is_refused(folder, capsys):
    held = stage._lock(folder, "method_a")
    before = snapshot(folder)
    try:
        assert extend(folder, 4) == 2
    finally:
        held.close()
    assert "is being worked on by stage method_a" in capsys.readouterr().err
    assert snapshot(folder) == before


def test_the_report_shows_the_extension_and_replays_it_after_the_retirement(folder, tmp_path, monkeypatch):
    """Retired at B, resumed at C, extended at C, resumed at D: the folder's command makes each change at its commit
    and each resume at the commit its records carry, in the order they were made."""
    from tr2.report.front import front_page_html
    from tr2.report.verdicts import build_table
    bs4 = pytest.importorskip("bs4")
    assert retire(folder, CUPY) == 0
    monkeypatch.setenv("TR2_GIT_COMMIT", C)
    method_a.run(load_card(folder / "card.yaml"), folder)
    method_a.summarize(folder)
    assert extend(folder, 4, 5) == 0
    monkeypatch.setenv("TR2_GIT_COMMIT", D)
    method_a.run(load_card(folder / "card.yaml"), folder)
    method_a.summarize(folder)
    data = build_table("test", [folder], tmp_path)
    d = '"$D"'   # the folder the command's first step made (report.verdicts.commands), not the committed one
    command = data["commands"][folder.name]
    tail = (f"python -m tr2.runner method_a --resume {d} && git checkout {C[:12]} && python -m tr2.runner method_a "
            f"--extend {d} --seeds 4 5 --reason {shlex.quote(REASON)} && git checkout {D[:12]} && "
            f"python -m tr2.runner method_a --resume {d}")
    assert f"git checkout {B[:12]} && python -m tr2.runner method_a --retire {d}" in command
    assert command.endswith(tail)
    soup = bs4.BeautifulSoup(front_page_html(data), "html.parser")
    row = soup.find(id="commits-table").find("tr", attrs={"data-folder": folder.name})
    (shown,) = row.find_all("span", class_="extended")
    assert shown["data-added"] == "4 5" and REASON in shown.get_text() and C[:12] in shown.get_text()
    assert "[1, 2, 3] became [1, 2, 3, 4, 5]" in " ".join(soup.find(id="extended-note").get_text().split())


def test_the_replay_follows_the_order_the_changes_were_made(folder, tmp_path, monkeypatch):
    from tr2.report.verdicts import build_table
    assert extend(folder, 4) == 0
    method_a.run(load_card(folder / "card.yaml"), folder)
    method_a.summarize(folder)
    assert retire(folder, "tiny/float32/cupy/4") == 0
    # the retirement stamped a second before the extension, as if made first: the replay follows the stamps
    (x,) = read_jsonl(folder / "extended.jsonl")
    (folder / "extended.jsonl").write_text(json.dumps({**x, "extended_at": "2030-01-01T00:00:01+00:00"}) + "\n")
    (r,) = read_jsonl(folder / "retired.jsonl")
    (folder / "retired.jsonl").write_text(json.dumps({**r, "retired_at": "2030-01-01T00:00:00+00:00"}) + "\n")
    command = build_table("test", [folder], tmp_path)["commands"][folder.name]
    assert command.index(" --retire ") < command.index(" --extend ")
    (folder / "retired.jsonl").write_text(json.dumps({**r, "retired_at": "2030-01-01T00:00:02+00:00"}) + "\n")
    command = build_table("test", [folder], tmp_path)["commands"][folder.name]
    assert command.index(" --extend ") < command.index(" --retire ")
