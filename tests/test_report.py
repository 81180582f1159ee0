"""tr2.report: a fake set of results folders stitched into TR-2; the HTML's table against the JSON."""
import base64
import json
import os
import re
from pathlib import Path

import nbformat
import pytest
import yaml

import tr2.report as rp
from tr2 import REPO_ROOT
from tr2.report import verdicts
from tr2.report.front import fmt_ms, fmt_ratio
from tr2.results import folder_path, stored_path, write_json_atomic, write_yaml_atomic

bs4 = pytest.importorskip("bs4")

PNG = base64.b64encode(bytes.fromhex(
    "89504e470d0a1a0a0000000d49484452000000010000000108060000001f15c4890000000d49444154789c6360f8cfc0f01f0005"
    "0001ff8a2b6e9e0000000049454e44ae426082")).decode()

CARD = {"card": "demo", "machine": "cpu", "device": "cpu", "models": ["tiny", "nanogpt"],
        "dtypes": ["float32", "bfloat16"], "torch_modes": ["eager", "default"], "half_roundings": [False, True]}
MACHINE = {"date": "2026-11-29T10:00:00+00:00", "host": "vm", "python": "3.11.7", "numpy": "2.4.6",
           "torch": "2.13.0+cpu", "cupy": None, "triton": None, "gpus": [], "commit": "0123456789abcdef", "dirty": False}


def _rng(median, fastest, slowest, runs=2):
    return {"runs": runs, "median": median, "fastest": fastest, "slowest": slowest}


VERDICTS = [
    # tiny float32: A passed, B passed -> published
    {"model": "tiny", "dtype": "float32", "build": "cupy", "primary": True, "verdict": "slower", "reason": None,
     "torch_mode": "eager", "ratio": 1.8123456, "ours": _rng(12.3456, 12.0001, 12.9), "theirs": _rng(6.81, 6.7, 6.95),
     "oom_modes": [], "modes_without_time": [], "complete": True, "notes": []},
    # tiny bfloat16: method A failed -> no verdict, speed withheld
    {"model": "tiny", "dtype": "bfloat16", "build": "cupy", "primary": False, "verdict": "level", "reason": None,
     "torch_mode": "default", "ratio": 1.01, "ours": _rng(20.0, 19.0, 21.0), "theirs": _rng(19.8, 19.5, 20.2),
     "oom_modes": [], "modes_without_time": [], "complete": True, "notes": []},
    {"model": "tiny", "dtype": "bfloat16", "build": "cupy-hr", "primary": True, "verdict": "faster", "reason": None,
     "torch_mode": "default", "ratio": 0.5, "ours": _rng(9.0, 8.5, 9.5), "theirs": _rng(18.0, 17.9, 18.2),
     "oom_modes": ["default"], "modes_without_time": ["default"], "complete": True, "notes": []},
    # nanogpt float32: method B gave no verdict -> withheld
    {"model": "nanogpt", "dtype": "float32", "build": "cupy", "primary": True, "verdict": "faster", "reason": None,
     "torch_mode": "default", "ratio": 0.9, "ours": _rng(150.25, 149.0, 151.0), "theirs": _rng(166.9, 165.0, 170.0),
     "oom_modes": [], "modes_without_time": [], "complete": True, "notes": []},
]


def _notebook(stage, marker):
    nb = nbformat.v4.new_notebook()
    p = nbformat.v4.new_code_cell('card = "smoke"\nresults_dir = None')
    p.metadata["tags"] = ["parameters"]
    inj = nbformat.v4.new_code_cell(f'print("{marker}-INJECTED")')
    inj.metadata["tags"] = ["injected-parameters"]
    inj.outputs = [nbformat.v4.new_output("stream", name="stdout", text=f"{marker}-INJECTED\n")]
    body = nbformat.v4.new_code_cell("show()")
    body.outputs = [
        nbformat.v4.new_output("stream", name="stdout", text=f"{stage} output {marker}-BODY\n"),
        nbformat.v4.new_output("stream", name="stderr", text="runs:  50%|#####     | 1/2\rruns: 100%|##########| 2/2\n"),
        nbformat.v4.new_output("display_data", data={"image/png": PNG, "text/plain": "<Figure>"}),
    ]
    nb.cells = [nbformat.v4.new_markdown_cell(f"# {stage} notebook\n\n![its plot]({stage}.png) [its logs](logs/)"),
                p, inj, body]
    return nb


def _folder(root, stage, summary, stamp="20261129-100000", card=CARD, machine=MACHINE):
    d = root / f"{stage}-{stamp}-{card['card']}"
    (d / "logs").mkdir(parents=True)
    write_yaml_atomic(d / "card.yaml", card)
    write_json_atomic(d / "machine.json", machine)
    write_json_atomic(d / "summary.json", {"stage": stage, **summary})
    nbformat.write(_notebook(stage, stage.upper()), str(d / f"{stage}.ipynb"))
    (d / f"{stage}.png").write_bytes(base64.b64decode(PNG))
    return d


def make_results(root, card=CARD):
    _folder(root, "series", {"conditions": {"rounds": 2, "window": [10, 40], "first_run": "2026-11-29T10:00:01",
                                            "last_run": "2026-11-29T10:20:00"}, "verdicts": VERDICTS}, card=card)
    _folder(root, "method_a", {"configs": [
        {"model": "tiny", "dtype": "float32", "verdict": {"passed": True, "reason": "within ranges"}},
        {"model": "tiny", "dtype": "bfloat16", "verdict": {"passed": False, "reason": "failed at step(s) 40"}},
        {"model": "nanogpt", "dtype": "float32", "verdict": {"passed": True, "reason": "within ranges"}}]}, card=card)
    _folder(root, "method_b", {"models": [
        {"model": "tiny", "verdict": {"passed": True, "reason": "ok"}, "judge_last_step": 20, "steps": 20},
        {"model": "nanogpt", "verdict": {"passed": None, "reason": "runs missing: no verdict yet"},
         "judge_last_step": 20, "steps": 20}]}, card=card)
    _folder(root, "footprint", {"conditions": {"steps": 10}, "sides": {
        "cupy": {"runs": 1, "runs_ok": 1, "nvidia_libraries": ["libnvrtc"], "nvrtc": True, "total_bytes": 40_000_000,
                 "image_bytes": 40_000_000, "nvrtc_compiled": ["CuPy:cupy_copy__float32_float32"]},
        "torch": {"runs": 1, "runs_ok": 1, "nvidia_libraries": [], "nvrtc": False, "total_bytes": 967_000_000,
                  "image_bytes": 967_000_000}},
        "docker": {"available": False, "message": "the Docker daemon does not run here", "images": {}},
        "install_set_bytes": {"cupy": 129_000_000, "torch": 994_000_000}}, card=card)
    # an older series folder of the same card, not chosen by default
    _folder(root, "series", {"verdicts": []}, stamp="20261128-090000", card=card)


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    base = tmp_path_factory.mktemp("rep")
    root = base / "results"
    make_results(root)
    out = base / "report" / "TR-2.html"
    html_path, json_path = rp.build_report("demo", root=root, out=out)
    return base, root, html_path, json_path


def _soup(path):
    return bs4.BeautifulSoup(Path(path).read_text(), "html.parser")


def test_report_files_exist_and_choose_the_newest_folders(built):
    base, root, html_path, json_path = built
    assert html_path.is_file() and json_path == base / "report" / "TR-2-demo.json"
    data = json.loads(json_path.read_text())
    assert [f["stage"] for f in data["folders"]] == ["series", "method_a", "method_b", "footprint"]
    assert data["folders"][0]["name"] == "series-20261129-100000-demo"
    assert data["stages_missing"] == ["families"]


def test_no_parameter_cells_and_every_stage_stitched(built):
    _, _, html_path, _ = built
    text = html_path.read_text()
    for stage in ("SERIES", "METHOD_A", "METHOD_B", "FOOTPRINT"):
        assert f"{stage}-BODY" in text          # each stage's outputs are in
        assert f"{stage}-INJECTED" not in text  # papermill's injected cell is not
    assert 'card = "smoke"' not in text and "results_dir = None" not in text   # inputs hidden, parameters dropped
    assert "\r" not in text.split("<main>", 1)[1]          # progress bars collapsed
    assert text.count('src="data:image/png;base64,') >= 8   # images embedded: outputs and markdown's
    assert "series.png" not in text                          # the markdown image became data, not a path
    assert 'href="../results/series-20261129-100000-demo/logs/"' in text   # links made right from the HTML


def test_merged_notebook_drops_parameter_cells(built):
    _, root, _, _ = built
    stage = nbformat.read(str(next(root.glob("series-20261129-*")) / "series.ipynb"), as_version=4)
    info = {"stage": "series", "name": "series-x", "link": "../x/", "conditions": {}, "notebook": True}
    nb = rp.merge("<p>front</p>", [(info, stage)])
    tags = [t for c in nb.cells for t in c.metadata.get("tags", [])]
    assert "parameters" not in tags and "injected-parameters" not in tags
    assert len(nb.cells) == 4   # the front page, the header, the stage's title, its body
    nbformat.validate(nb)


def test_offline_no_remote_scripts(built):
    _, _, html_path, _ = built
    text = html_path.read_text()
    assert rp.remote_urls(text) == []
    soup = _soup(html_path)
    assert not [s for s in soup.find_all("script") if s.get("src")]
    assert not [tag for tag in soup.find_all("link") if (tag.get("href") or "").startswith(("http", "//"))]
    assert "MathJax.js" not in text and "require.min.js" not in text and "mermaid" not in text.lower()
    assert rp.remote_urls('<script src="https://cdn.example/x.js"></script>')   # the check itself sees one


def test_verdict_table_numbers_equal_the_json(built):
    _, _, html_path, json_path = built
    data = json.loads(json_path.read_text())
    table = _soup(html_path).find("table", id="verdict-table")
    assert table is not None
    trs = table.find("tbody").find_all("tr")
    rows = [r for r in data["rows"] if r["primary"]]
    assert len(trs) == len(rows) == 3
    for tr, r in zip(trs, rows):
        assert (tr["data-model"], tr["data-dtype"], tr["data-build"]) == (r["model"], r["dtype"], r["build"])
        cu, to = tr.find("td", class_="cupy-median"), tr.find("td", class_="torch-median")
        ratio = tr.find("td", class_="ratio")
        verdict = tr.find("td", class_="verdict").find("b").get_text()
        if r["speed_published"]:
            assert float(cu["data-value"]) == r["cupy"]["median"]
            assert float(cu["data-fastest"]) == r["cupy"]["fastest"] and float(cu["data-slowest"]) == r["cupy"]["slowest"]
            assert cu.get_text() == (f'{fmt_ms(r["cupy"]["median"])} [{fmt_ms(r["cupy"]["fastest"])}–'
                                     f'{fmt_ms(r["cupy"]["slowest"])}]')
            assert float(to["data-value"]) == r["torch"]["median"]
            assert tr.find("td", class_="torch-mode").get_text().startswith(r["torch"]["mode"])
            assert float(ratio["data-value"]) == r["ratio"] and ratio.get_text() == fmt_ratio(r["ratio"])
            assert tr.find("td", class_="cupy-runs").get_text() == str(r["cupy"]["runs"])
            assert verdict == r["verdict"]
        else:
            assert r["verdict"] is None and r["cupy"] is None and r["ratio"] is None
            assert cu["data-value"] == "" and cu.get_text() == "withheld" and ratio["data-value"] == ""
            assert verdict == "no verdict"
        assert tr.find_all("td")[-1].find("a")["href"] == r["link"]
    # the published row: the numbers of the series' summary, untouched
    pub = [r for r in data["rows"] if r["speed_published"]]
    assert [(r["model"], r["dtype"], r["verdict"], r["cupy"]["median"], r["ratio"]) for r in pub] == \
        [("tiny", "float32", "slower", 12.3456, 1.8123456)]
    assert data["counts"] == {"faster": 0, "level": 0, "slower": 1, "no verdict": 2, "comparisons": 3}


def test_no_verdict_without_passed_correctness(built):
    _, _, html_path, json_path = built
    data = json.loads(json_path.read_text())
    by = {(r["model"], r["dtype"], r["build"]): r for r in data["rows"]}
    failed_a = by[("tiny", "bfloat16", "cupy-hr")]
    assert failed_a["verdict"] is None and not failed_a["speed_published"]
    assert "method A failed" in failed_a["withheld"]
    no_b = by[("nanogpt", "float32", "cupy")]
    assert no_b["verdict"] is None and "method B gave no verdict" in no_b["withheld"]
    soup = _soup(html_path)
    tr = soup.find("table", id="verdict-table").find("tr", attrs={"data-model": "tiny", "data-dtype": "bfloat16"})
    cell = tr.find("td", class_="verdict").get_text()
    assert "faster" not in cell and "withheld" in cell
    # the build without half roundings stands in its own table, withheld too
    halves = soup.find("table", id="halves-table")
    assert halves is not None and "withheld" in halves.get_text()


def test_cpu_banner_first_and_links_relative(built):
    base, root, html_path, json_path = built
    text = html_path.read_text()
    banner = text.find("A CPU demonstration, not a measurement of a GPU")
    assert 0 < banner < text.find('id="verdict-table"')
    assert "CPU demonstration" in _soup(html_path).find("title").get_text()
    data = json.loads(json_path.read_text())
    for f in data["folders"]:
        assert not os.path.isabs(f["link"])
        assert (html_path.parent / f["link"]).resolve() == folder_path(f["path"]).resolve()


def test_no_banner_for_a_gpu_card(tmp_path):
    card = dict(CARD, card="gpu", machine="nvidia-h200", device="cuda")
    make_results(tmp_path / "results", card=card)
    dirs = rp.choose_dirs("gpu", root=tmp_path / "results")
    data = rp.build_table("gpu", dirs, tmp_path)
    assert not data["cpu_demonstration"]
    page = rp.front_page_html(data)
    assert "CPU demonstration" not in page and 'id="verdict-table"' in page


def test_bad_dirs_one_line_exit_2(tmp_path, capsys):
    assert rp.main(["--card", "demo", "--dirs", str(tmp_path / "nope"), "--out", str(tmp_path / "r.html")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--dirs" in err[0]


def test_cpu_front_page_holds_what_a_reader_needs(tmp_path):
    """Issue 12 point 4 on the committed CPU results: the chart, the machine, the commits, tokens per second,
    parameters and spreads, the commands; in the body no stderr block, no index column, no NaN, no absolute path."""
    out = tmp_path / "report" / "TR-2.html"
    html_path, json_path = rp.build_report("cpu", out=out)
    soup = _soup(html_path)
    text = html_path.read_text()
    assert soup.find(id="verdict-chart").find("svg") is not None
    machine = soup.find(id="machine-table").get_text()
    for what in ("processor", "memory", "GPU", "driver", "load during the series"):
        assert what in machine
    data = json.loads(json_path.read_text())
    # the folders' paths as the JSON stores them: relative to the repository, no machine's layout (an older JSON's
    # absolute paths read back as well)
    assert all(f["path"].startswith("results/") and folder_path(f["path"]).is_dir() for f in data["folders"])
    assert folder_path(str(REPO_ROOT / data["folders"][0]["path"])) == folder_path(data["folders"][0]["path"])
    assert stored_path(REPO_ROOT / data["folders"][0]["path"]) == data["folders"][0]["path"]
    commits = soup.find(id="commits-table")
    assert len(commits.find_all("tr")) == len(data["folders"]) + 2  # the header, a row a folder, the total
    minutes = [float(tr.find_all("td")[-1].get_text()) for tr in commits.find_all("tr")[1:]]
    assert minutes[-1] == data["minutes_of_runs"] > 0
    assert abs(sum(minutes[:-1]) - minutes[-1]) <= 0.05 * len(minutes)  # each shown to 0.1
    assert ("different commits" in soup.find(id="commits-note").get_text()) == data["commits_differ"]
    row = soup.find(id="glance-table").find("tbody").find("tr")
    assert row.find("td", class_="params")["data-value"] == str(data["rows"][0]["params"])
    assert len(row.find_all("td", class_="tokens")) == 2 and len(row.find_all("td", class_="spread")) == 2
    assert all(c.get_text().endswith("%") for c in row.find_all("td", class_="spread"))
    commands = soup.find(id="commands-table").get_text()
    assert "python -m tr2.runner series --card cpu --root results/repro/series-" in commands
    assert "python -m tr2.report --card cpu" in commands and f"--out {stored_path(out)}" in commands
    assert not soup.select('[data-mime-type="application/vnd.jupyter.stderr"]')   # (the CSS names it; no output is one)
    assert not re.search(r"(?<![.\w])" + re.escape(str(REPO_ROOT)), text) and "/site-packages" not in text.replace("site-packages/", "")
    for table in soup.find_all("table", class_="dataframe"):
        assert "NaN" not in table.get_text()
        if len(table.find("thead").find_all("tr")) == 1:   # an index without a name: row numbers
            first = [tr.find(["th", "td"]) for tr in table.find("tbody").find_all("tr")]
            assert not any(c.name == "th" and c.get_text().strip().isdigit() for c in first)
    links = [a["href"] for a in soup.find_all("a", href=True) if not a["href"].startswith(("#", "data:", "http"))]
    assert links and all((out.parent / h).resolve().exists() for h in links), links   # raw data opens from the file


def test_a_card_without_finished_folders_one_line_exit_2(tmp_path, capsys):
    """The quick card's first H200 call stopped in every stage; the report then raised an IndexError."""
    (tmp_path / "results").mkdir()
    assert rp.main(["--card", "demo", "--root", str(tmp_path / "results"), "--out", str(tmp_path / "r.html")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "no finished results folder" in err[0] and "'demo'" in err[0]
    assert not (tmp_path / "r.html").exists()


def test_an_unknown_card_names_the_cards_that_have_run(tmp_path, capsys):
    """A misspelt card: the error says there is no such card file and lists the cards a report can be made of."""
    root = tmp_path / "results"
    make_results(root)
    assert rp.main(["--card", "dmeo", "--root", str(root), "--out", str(tmp_path / "r.html")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"tr2.report: error: --card: 'dmeo' has no finished results folder of any stage under {root} and no "
                   "card file params/cards/dmeo.yaml; allowed: a card whose stages have run (demo)"]
    # a card file of the checkout that has not run yet: told how to run it
    assert rp.main(["--card", "smoke", "--root", str(root), "--out", str(tmp_path / "r.html")]) == 2
    assert capsys.readouterr().err.strip().endswith("(demo), or run this one first (make all CARD=smoke)")


def test_a_gpu_card_other_than_the_published_one_is_a_preview(tmp_path):
    """Protocol rule 9: the front page of a reduced GPU card (h200-quick) says what it changes from h200.yaml."""
    for name, is_preview in (("gpu", True), ("h200", False)):
        card = dict(CARD, card=name, machine="nvidia-h200", device="cuda")
        make_results(tmp_path / name, card=card)
        data = rp.build_table(name, rp.choose_dirs(name, root=tmp_path / name), tmp_path)
        page = rp.front_page_html(data)
        assert ("A preview, not the published protocol" in page) == is_preview, name
        if is_preview:
            assert data["preview"]["published"] == "h200"
            assert "models: ['tiny', 'nanogpt'] (published: ['nanogpt', 'gpt2-small', 'gpt2-medium'])" in \
                data["preview"]["changes"]
        else:
            assert data["preview"] is None
        assert data["edition"] is None and "published edition" not in page, name   # no card here claims one


REASON = "The GPU minutes granted hold a third of the full card's runs & no more, so two models are left out."


def _edition_page(tmp_path, card):
    make_results(tmp_path / card["card"], card=card)
    data = rp.build_table(card["card"], rp.choose_dirs(card["card"], root=tmp_path / card["card"]), tmp_path)
    return data, rp.front_page_html(data)


def test_the_published_cards_reduced_edition_says_so_and_why(tmp_path):
    """Issue 11: a card whose `edition` names h200 is the published edition, reduced: the front page gives the reason
    and every change from h200.yaml, points to the full card, and calls it no preview."""
    card = dict(CARD, card="h200-lean", machine="nvidia-h200", device="cuda", edition={"of": "h200", "reason": REASON})
    data, page = _edition_page(tmp_path, card)
    assert data["preview"] is None
    e = data["edition"]
    assert e["published"] == "h200" and e["reason"] == REASON
    assert "models: ['tiny', 'nanogpt'] (published: ['nanogpt', 'gpt2-small', 'gpt2-medium'])" in e["changes"]
    assert not any(line.startswith(("edition", "card:", "machine:")) for line in e["changes"])
    assert "A preview" not in page and "preview" not in rp.stitch.page_title("h200-lean", data)
    assert rp.stitch.page_title("h200-lean", data) == "TR-2 (h200-lean) - the published edition of h200, reduced"
    banner = bs4.BeautifulSoup(page, "html.parser").find("div", class_="tr2-reduced")
    text = " ".join(banner.get_text().split())
    assert text.startswith("The published edition of card h200, reduced from the full protocol.")
    assert "params/cards/h200.yaml" in text and REASON in text and "make all CARD=h200" in text
    assert [li.get_text() for li in banner.find_all("li")] == e["changes"]
    assert page.find("tr2-reduced") < page.find('id="tr2-title"')   # at the top, before the title


def test_an_edition_reason_edited_after_its_folders_ran_is_shown_beside_theirs(tmp_path, monkeypatch):
    """The banner gives the reason as the card stood when its folders ran ("default slower"); timings made since can
    contradict it (default faster on GPT-2 small in float32, timed after the H200 edition ran). Where the card file
    now says otherwise, the banner shows both, the folders' first; where the file says the same, or is gone, only
    theirs."""
    card = dict(CARD, card="h200-lean", machine="nvidia-h200", device="cuda", edition={"of": "h200", "reason": REASON})
    params = tmp_path / "params"
    (params / "cards").mkdir(parents=True)
    (params / "cards" / "h200.yaml").write_text((REPO_ROOT / "params" / "cards" / "h200.yaml").read_text())
    monkeypatch.setattr(verdicts, "PARAMS_DIR", params)
    later = "The same minutes, and default was found faster on one configuration after these folders ran."
    cases = ((None, None), (REASON, None), ("  " + REASON.replace(" ", "\n  "), None), (later, later))
    for n, (file_reason, shown) in enumerate(cases):
        if file_reason is not None:
            (params / "cards" / "h200-lean.yaml").write_text(yaml.safe_dump({**card, "edition": {"of": "h200",
                                                                                                  "reason": file_reason}}))
        data, page = _edition_page(tmp_path / f"case{n}", card)
        assert data["edition"]["reason"] == REASON and data["edition"]["reason_now"] == shown
        now = bs4.BeautifulSoup(page, "html.parser").find(id="reason-now")
        if shown is None:
            assert now is None
        else:
            text = " ".join(now.get_text().split())
            assert text.startswith("(That is the reason as the card stood when its folders ran") and later in text
            banner = " ".join(bs4.BeautifulSoup(page, "html.parser").find("div", class_="tr2-reduced").get_text().split())
            assert banner.index(REASON) < banner.index(later)


def test_a_reduced_edition_lists_exactly_what_it_runs_differently(tmp_path):
    """On a whole card (optional keys filled as the stages read them) the list is the reductions, nothing else."""
    full = yaml.safe_load((REPO_ROOT / "params" / "cards" / "h200.yaml").read_text())
    card = {**full, "card": "h200-lean", "torch_modes": ["eager", "default"],
            "method_a": {**full["method_a"], "seeds": [1337, 1338]}, "edition": {"of": "h200", "reason": REASON}}
    data, _page = _edition_page(tmp_path, card)
    assert data["edition"]["changes"] == [
        "torch_modes: ['eager', 'default'] (published: ['eager', 'default', 'reduce-overhead', 'max-autotune'])",
        "method_a.seeds: [1337, 1338] (published: [1337, 1338, 1339, 1340, 1341])"]


def test_an_edition_claimed_for_another_card_or_device_is_no_edition(tmp_path):
    """Only the published card of the device the folders ran on can be stood in for: a GPU card naming another card
    stays a preview; a CPU card naming h200 stays a CPU demonstration."""
    other = dict(CARD, card="gpu-claim", machine="nvidia-h200", device="cuda",
                 edition={"of": "h200-quick", "reason": REASON})
    data, page = _edition_page(tmp_path, other)
    assert data["edition"] is None and data["preview"]["published"] == "h200"
    assert "A preview, not the published protocol" in page and "published edition" not in page
    assert "edition" not in " ".join(data["preview"]["changes"])
    cpu = dict(CARD, card="cpu-claim", edition={"of": "h200", "reason": REASON})
    data, page = _edition_page(tmp_path, cpu)
    assert data["edition"] is None and data["preview"] is None and data["cpu_demonstration"]
    assert "A CPU demonstration" in page and "published edition" not in page and "A preview" not in page


def test_a_check_without_a_finished_folder_says_so(tmp_path):
    """A speed whose check has no finished folder (the stage not run, or its runs not all in: an edition mid-way)
    stays withheld, and the reason says which check and why, not that it failed."""
    card = dict(CARD, card="gpu", machine="nvidia-h200", device="cuda")
    make_results(tmp_path / "results", card=card)
    series = [d for d in rp.choose_dirs("gpu", root=tmp_path / "results") if d.name.startswith("series")]
    data = rp.build_table("gpu", series, tmp_path)
    assert data["rows"] and all(r["verdict"] is None for r in data["rows"])
    for r in data["rows"]:
        assert "method A has no finished folder for this card (not run, or its runs not all in)" in r["withheld"]
        assert "method B has no finished folder for this card" in r["withheld"] and "failed" not in r["withheld"]


# ---------------------------------------------------------------------------------------------------------
# --beside: checks of other cards shown beside the card's own (a replication, a model the card leaves out)

def _beside_folders(root):
    other = dict(CARD, card="replication")
    a = _folder(root, "method_a", {"configs": [
        {"model": "tiny", "dtype": "bfloat16", "seeds": [1, 2, 3, 4, 5], "steps": 40,
         "verdict": {"passed": True, "reason": "within ranges everywhere"}}]}, stamp="20261130-100000", card=other)
    b = _folder(root, "method_b", {"models": [
        {"model": "medium", "verdict": {"passed": True, "reason": "W = 88 of 200, set by every"},
         "judge_last_step": 88, "steps": 200}]}, stamp="20261130-110000", card=dict(CARD, card="medium-b"))
    return a, b


def test_checks_beside_the_card_are_shown_and_change_no_verdict(tmp_path):
    root = tmp_path / "results"
    make_results(root)
    a, b = _beside_folders(root)
    out = tmp_path / "report" / "TR-2.html"
    plain = rp.build_table("demo", rp.choose_dirs("demo", root=root), out.parent)
    html_path, json_path = rp.build_report("demo", root=root, out=out, beside=[a, b])
    data = json.loads(Path(json_path).read_text())
    assert [r["verdict"] for r in data["rows"]] == [r["verdict"] for r in plain["rows"]]   # tiny bf16 stays withheld
    assert [(f["stage"], f["card"], [(c["what"], c["passed"]) for c in f["checks"]]) for f in data["beside"]] == [
        ("method_a", "replication", [("tiny bfloat16", True)]), ("method_b", "medium-b", [("medium", True)])]
    assert data["beside"][0]["checks"][0]["reason"] == "5 seed(s) a side, 40 steps: within ranges everywhere"
    rows = _soup(html_path).select("#beside-table tbody tr")
    assert [r["data-folder"] for r in rows] == [a.name, b.name]
    assert [r.select_one(".verdict").text for r in rows] == ["passed", "passed"]
    assert rows[1].select_one("a")["href"] == f"../results/{b.name}/"
    assert rp.front_page_html(plain).count("beside-table") == 0   # none given: no section
    assert data["commands"]["report"].endswith(f" --beside {a} {b} --out {out}")   # (outside the repository: absolute)


@pytest.mark.parametrize("what, message", [
    ("nope", r"is not a folder; allowed: finished results folders of method_a or method_b"),
    ("series", r"is a series's folder; allowed: results folders of method_a or method_b \(the correctness checks\)"),
    ("unfinished", r"holds no summary\.json, so its stage has not run to its end; allowed: finished folders"),
    ("own", r"is of card 'demo' itself; allowed: folders of other cards"),
])
def test_a_bad_beside_folder_is_one_line_exit_2(tmp_path, capsys, what, message):
    root = tmp_path / "results"
    make_results(root)
    a, _ = _beside_folders(root)
    if what == "unfinished":
        (a / "summary.json").unlink()
    d = {"nope": tmp_path / "nope", "series": rp.choose_dirs("demo", root=root)[0], "unfinished": a,
         "own": [p for p in rp.choose_dirs("demo", root=root) if p.name.startswith("method_a")][0]}[what]
    assert rp.main(["--card", "demo", "--root", str(root), "--out", str(tmp_path / "r.html"), "--beside", str(d)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and re.match(r"^tr2\.report: error: --beside: '.*' " + message, err[0]), err


def test_the_commits_table_says_on_how_many_machines_a_folder_ran(tmp_path):
    """A folder resumed in a later device call may land on another machine (the H200 edition's series of
    2026-12-04 did): where its sessions recorded their GPUs the commits table says on how many machines; where they
    did not (older folders), nothing is claimed."""
    make_results(tmp_path / "results")
    dirs = rp.choose_dirs("demo", root=tmp_path / "results")
    series_dir = next(d for d in dirs if Path(d).name.startswith("series-"))
    (series_dir / "sessions.jsonl").write_text("".join(json.dumps(
        {"stage": "series", "started": f"2026-11-29T10:0{i}:00+00:00", "commit": MACHINE["commit"], "gpus": [g]}) + "\n"
        for i, g in enumerate(["GPU-aaaa", "GPU-bbbb", "GPU-aaaa"])))
    soup = bs4.BeautifulSoup(rp.front_page_html(rp.build_table("demo", dirs, tmp_path)), "html.parser")
    rows = {tr["data-folder"]: tr.find("td", class_="calls")
            for tr in soup.find(id="commits-table").find_all("tr", attrs={"data-folder": True})}
    assert rows[series_dir.name]["data-machines"] == "2"
    assert " ".join(rows[series_dir.name].get_text().split()) == "3 on 2 machines"
    others = [cell for name, cell in rows.items() if name != series_dir.name]
    assert others and all(c["data-machines"] == "" and "machine" not in c.get_text() for c in others)


def test_the_footprint_says_what_compiled_where_the_run_said(built):
    """The cupy side's account of NVRTC (trainlog.nvrtc_line) beside "NVRTC opened"; a side without one (PyTorch's,
    a folder from before the account) keeps the bare yes / no."""
    _, _, html_path, _ = built
    table = _soup(html_path).find("table", id="footprint-table")
    cells = {tr["data-side"]: " ".join(tr.find_all("td")[2].get_text().split())
             for tr in table.find_all("tr", attrs={"data-side": True})}
    assert cells == {"cupy": "yes; compiled at run time: CuPy:cupy_copy__float32_float32", "torch": "no"}
