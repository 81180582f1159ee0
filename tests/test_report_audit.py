"""The H200 report read as a sceptic would (results/cpu-checks-20261205/report-audit.md): each test here is one of the
audit's fixes to the code that writes TR-2, and fails on the code before it."""
import json
from pathlib import Path

import matplotlib
import nbformat
import pytest
import yaml

import tr2.report as rp
from tr2 import REPO_ROOT, explore
from tr2 import explore_plots as plots
from tr2.report import verdicts
from tr2.summary import save_figure
from test_report import CARD, MACHINE, _beside_folders, _folder, make_results

bs4 = pytest.importorskip("bs4")
matplotlib.use("Agg")

GPU = dict(CARD, card="h200-lean", machine="nvidia-h200", device="cuda", torch_modes=["reduce-overhead"],
           cuda_graph=True, method_a={"torch_mode": "default"},
           edition={"of": "h200", "reason": "The minutes hold a third of the card; three seeds a side."})


def _gpu_results(root, card=GPU):
    """The fake results of test_report on a reduced GPU card: one PyTorch mode, the cupy side graphed."""
    make_results(root, card=card)
    series = sorted(root.glob("series-*"))[-1]
    s = json.loads((series / "summary.json").read_text())
    for v in s["verdicts"]:
        v["torch_mode"] = "reduce-overhead"
    s["configurations"] = [{"config": f"{v['model']}/{v['dtype']}/{v['build']}", "cuda_graph": True}
                           for v in s["verdicts"]]
    (series / "summary.json").write_text(json.dumps(s))
    return rp.choose_dirs(card["card"], root=root)


def _page(tmp_path, card=GPU):
    dirs = _gpu_results(tmp_path / "results", card)
    data = rp.build_table(card["card"], dirs, tmp_path)
    return data, bs4.BeautifulSoup(rp.front_page_html(data), "html.parser")


# 1. the stage notebooks' paragraph about their parameters cell, which the report drops

def test_the_report_drops_the_paragraph_about_the_dropped_parameters_cell(tmp_path):
    """Every stitched stage of the H200 report said "The defaults below are the `smoke` card's: a tiny model on the
    CPU, which proves the pipeline runs and measures nothing" above a parameters cell the report leaves out."""
    root = tmp_path / "results"
    make_results(root)
    nb_path = sorted(root.glob("series-*"))[-1] / "series.ipynb"
    nb = nbformat.read(str(nb_path), as_version=4)
    nb.cells[0].source = ("# series notebook\n\nThe clock. Both sides print their iter lines.\n\n"
                          "The defaults below are the `smoke` card's: a tiny model on the CPU, which proves the pipeline "
                          "runs and measures\nnothing.")
    nb.cells.insert(1, nbformat.v4.new_markdown_cell("The defaults below are the `smoke` card's: the tiny model."))
    nbformat.write(nb, str(nb_path))
    html_path, _ = rp.build_report("demo", root=root, out=tmp_path / "report" / "TR-2.html")
    text = " ".join(bs4.BeautifulSoup(html_path.read_text(), "html.parser").get_text().split())
    assert "The clock. Both sides print their iter lines." in text
    assert "The defaults below" not in text and "measures nothing" not in text
    from tr2.report.stitch import drop_defaults_note
    assert drop_defaults_note("a\n\nb\n") == "a\n\nb\n"   # a cell without it is left as it was


# 2. the commits table's machines, where most calls recorded none

def test_calls_that_recorded_no_machine_are_not_counted_as_on_one(tmp_path):
    """Method A's 13 calls read "13 on 1 machine" where 11 of them ran before calls recorded their GPUs (the edition's
    sessions 1-3 ran on fresh machines): the count speaks for the recorded calls only, and says so."""
    make_results(tmp_path / "results")
    dirs = rp.choose_dirs("demo", root=tmp_path / "results")
    a = next(d for d in dirs if Path(d).name.startswith("method_a-"))
    lines = [{"stage": "method_a", "started": f"2026-11-29T10:0{i}:00+00:00", "commit": MACHINE["commit"]}
             for i in range(3)]
    lines += [{"stage": "method_a", "started": f"2026-11-29T11:0{i}:00+00:00", "commit": MACHINE["commit"],
               "gpus": ["GPU-aaaa"]} for i in range(2)]
    (a / "sessions.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    soup = bs4.BeautifulSoup(rp.front_page_html(rp.build_table("demo", dirs, tmp_path)), "html.parser")
    cell = soup.find(id="commits-table").find("tr", attrs={"data-folder": a.name}).find("td", class_="calls")
    assert cell["data-machines"] == "1" and cell["data-unrecorded"] == "3"
    assert " ".join(cell.get_text().split()) == \
        "5: the 2 that recorded their machine on 1 machine, 3 made before calls recorded it"


# 3. a key retired twice: each resume at the commit of its own reruns

def _twice_retired(tmp_path):
    """The edition's method A as records: made at A, retired at B and rerun at C, seeds added at D and made at E,
    the rerun key and an added one retired again at F and rerun there."""
    A, B, C, D, E, F = (x * 40 for x in "abcdef")
    d = tmp_path / "results" / "method_a-20261202-170258-test"
    d.mkdir(parents=True)
    (d / "card.yaml").write_text(yaml.safe_dump(dict(CARD, card="test")))
    (d / "machine.json").write_text(json.dumps(MACHINE))
    (d / "summary.json").write_text(json.dumps({"stage": "method_a", "configs": []}))
    (d / "sessions.jsonl").write_text("".join(json.dumps({"stage": "method_a", "commit": c}) + "\n"
                                              for c in (A, C, E, F)))
    rec = lambda key, commit, **kw: {"key": key, "status": "ok", "wall_s": 1.0, "commit": commit, **kw}  # noqa: E731
    retired = [rec("m/bf16/cupy/1", A, retired_at="2026-12-03T12:58:43+00:00", retired_by_commit=B, retired_reason="one"),
               rec("m/bf16/cupy/1", C, retired_at="2026-12-04T21:18:19+00:00", retired_by_commit=F, retired_reason="two"),
               rec("m/bf16/cupy/4", E, retired_at="2026-12-04T21:18:19+00:00", retired_by_commit=F, retired_reason="two")]
    kept = [rec("m/bf16/torch/1", A), rec("m/bf16/cupy/1", F), rec("m/bf16/torch/4", E), rec("m/bf16/cupy/4", F)]
    (d / "retired.jsonl").write_text("".join(json.dumps(r) + "\n" for r in retired))
    (d / "runs.jsonl").write_text("".join(json.dumps(r) + "\n" for r in kept))
    (d / "extended.jsonl").write_text(json.dumps({"extended_at": "2026-12-04T10:20:20+00:00", "extended_by_commit": D,
                                                  "added": [4], "runs": ["m/bf16/torch/4", "m/bf16/cupy/4"],
                                                  "extended_reason": "five seeds"}) + "\n")
    return d, (A, B, C, D, E, F)


def test_a_key_retired_twice_is_rerun_at_each_retirements_own_commit(tmp_path):
    """The edition's first retirement (at 82bbfca) was rerun at 062562a, whose records a second retirement (at
    f2e0be6) took out again: the reproduce command resumed the first at f2e0be6, the second one's commit."""
    d, (A, B, C, D, E, F) = _twice_retired(tmp_path)
    got = {g["reason"]: g["rerun_commits"] for g in explore.retired_runs(d)}
    assert got == {"one": [C], "two": [F]}
    (x,) = explore.extensions(d)
    assert x["run_commits"] == [E]   # where the added runs were made, one of them retired since
    command = verdicts.commands("test", [verdicts.folder_info(d, tmp_path)], tmp_path)[d.name]
    steps = command.split(" && ")
    first = steps.index(next(s for s in steps if "--reason one" in s))
    # the resume acts on the folder the command's first step made ($D), not on the committed one
    assert steps[first + 1:first + 3] == [f"git checkout {C[:12]}", 'python -m tr2.runner method_a --resume "$D"']
    assert f"git checkout {E[:12]}" in steps[steps.index(next(s for s in steps if "--extend" in s)) + 1]


# 4. the edition's reductions: each stage's keys as its own folder ran them

def test_a_reduction_undone_by_an_extension_is_not_listed(tmp_path):
    """The series folder's card says three seeds; the method A folder's card was extended to the full card's five:
    the banner listed "method_a.seeds: [1337, 1338, 1339] (published: ...)" beside the note that said they were five."""
    full = yaml.safe_load((REPO_ROOT / "params" / "cards" / "h200.yaml").read_text())
    card = {**full, "card": "h200-lean", "torch_modes": ["reduce-overhead"],
            "method_a": {**full["method_a"], "seeds": [1337, 1338, 1339]}, "edition": GPU["edition"]}
    dirs = _gpu_results(tmp_path / "results", card)
    a = next(d for d in dirs if Path(d).name.startswith("method_a-"))
    (a / "card.yaml").write_text(yaml.safe_dump({**card, "method_a": full["method_a"]}))
    data = rp.build_table("h200-lean", dirs, tmp_path)
    assert data["edition"]["changes"] == [
        "torch_modes: ['reduce-overhead'] (published: ['eager', 'default', 'reduce-overhead', 'max-autotune'])"]


# 5. what "PyTorch's fastest mode" is, what the cupy side timed and what the checks ran, beside the verdicts

def test_the_front_page_says_which_modes_were_not_timed_and_what_the_checks_ran(tmp_path):
    data, soup = _page(tmp_path)
    note = " ".join(soup.find(id="comparison-note").get_text().split())
    assert "PyTorch ran in one mode only, reduce-overhead (torch.compile (Inductor) with CUDA graphs)" in note
    assert "Not timed here: eager" in note and "max-autotune (torch.compile with autotuned kernels and CUDA graphs)" in note
    assert "which the full card h200 times; no verdict on this page speaks for them" in note
    assert "cupy-hr (bfloat16, with --half-roundings" in note and "the whole step replayed as one CUDA graph" in note
    assert "method A's torch side in default mode" in note and "the cupy side without its CUDA graph" in note
    # before the step-time table and in its caption
    text = str(soup)
    assert text.index('id="comparison-note"') < text.index('id="verdict-table"')
    caption = " ".join(soup.find(id="verdict-table").find("caption").get_text().split())
    assert caption.startswith("PyTorch's fastest mode: the fastest of those this card ran (reduce-overhead); "
                              "not timed: eager, default, max-autotune.")
    # the published card itself names no mode as untimed
    full, soup = _page(tmp_path / "full", dict(GPU, card="h200", torch_modes=["eager", "reduce-overhead"], edition=None))
    assert full["compared"]["torch_modes_not_run"] == [] and "Not timed here" not in soup.get_text()


def test_the_header_names_whose_commit_it_gives_when_the_stages_differ(tmp_path):
    make_results(tmp_path / "results")
    dirs = rp.choose_dirs("demo", root=tmp_path / "results")
    a = next(d for d in dirs if Path(d).name.startswith("method_a-"))
    (a / "machine.json").write_text(json.dumps(dict(MACHINE, commit="fedcba9876543210")))
    data = rp.build_table("demo", dirs, tmp_path)
    head = " ".join(bs4.BeautifulSoup(rp.front_page_html(data), "html.parser").find(class_="tr2-edition").get_text().split())
    assert data["commits_differ"] and "at tr2 commit 0123456789ab (the series'; the stages' runs were made at 2 commits" in head


def test_method_a_says_how_near_its_limit_it_came(tmp_path):
    """The correctness table gave method B's numbers and none of method A's: the judged step nearest its limit."""
    root = tmp_path / "results"
    make_results(root)
    a = sorted(root.glob("method_a-*"))[-1]
    s = json.loads((a / "summary.json").read_text())
    s["configs"][0]["seeds"] = [1, 2, 3, 4, 5]
    s["configs"][0]["verdict"]["steps"] = [
        {"step": 1000, "diff": 0.002, "allowed": 0.02, "ok": True}, {"step": 1250, "diff": 0.015, "allowed": 0.019, "ok": True},
        {"step": 1500, "diff": 0.018, "allowed": 0.05, "ok": True}]
    (a / "summary.json").write_text(json.dumps(s))
    data = rp.build_table("demo", rp.choose_dirs("demo", root=root), tmp_path)
    soup = bs4.BeautifulSoup(rp.front_page_html(data), "html.parser")
    row = soup.find(id="correctness-table").find("tr", attrs={"data-model": "tiny", "data-dtype": "float32"})
    why = " ".join(row.find_all("td")[3].get_text().split())
    assert why == ("5 seeds a side: within ranges; nearest its limit at step 1250: medians 0.0150 apart, 0.0190 allowed "
                   "(79% of it)")


def test_method_a_has_a_chart_of_its_margins(tmp_path):
    """The stage's plot shows losses from 1.5 to 4.3 where the judged differences are 0.01-0.02; the front page draws
    each judged evaluation's signed difference over what was allowed, axes named."""
    root = tmp_path / "results"
    make_results(root)
    a = sorted(root.glob("method_a-*"))[-1]
    s = json.loads((a / "summary.json").read_text())
    s["configs"][0]["verdict"]["steps"] = [
        {"step": 1000, "diff": 0.002, "allowed": 0.02, "cupy_median": 1.5, "torch_median": 1.502, "ok": True},
        {"step": 1250, "diff": 0.015, "allowed": 0.019, "cupy_median": 1.515, "torch_median": 1.5, "ok": True}]
    (a / "summary.json").write_text(json.dumps(s))
    data = rp.build_table("demo", rp.choose_dirs("demo", root=root), tmp_path)
    row = next(r for r in data["rows"] if (r["model"], r["dtype"]) == ("tiny", "float32"))
    assert row["method_a"]["closest"]["shares"] == [[1000, -0.1], [1250, 0.7895]]
    fig = bs4.BeautifulSoup(rp.front_page_html(data), "html.parser").find(id="method-a-chart")
    assert fig is not None and fig.find("svg") is not None
    svg = str(fig.find("svg"))
    assert "training step of the evaluation" in svg and "(cupy - torch median) / larger range" in svg
    assert "the limit (rule 41)" in svg and "beyond the dashed lines at ±1 the check fails" in fig.get_text()


def test_a_check_beside_that_shares_the_cards_seeds_says_it_is_not_independent(tmp_path):
    """The char model's float32 replication beside the edition drew seeds 1340-1344, and the edition's method A, extended
    to 1337-1341, ran 1340 and 1341 too (their cupy runs identical to the byte): the page called it a check that
    bears on the card's without saying it shares two of its five seeds a side."""
    root = tmp_path / "results"
    make_results(root)
    a, b = _beside_folders(root)
    own = next(d for d in rp.choose_dirs("demo", root=root) if d.name.startswith("method_a-"))
    s = json.loads((own / "summary.json").read_text())
    for c in s["configs"]:
        c["seeds"] = [4, 5, 6, 7, 8]
    (own / "summary.json").write_text(json.dumps(s))
    data = rp.build_table("demo", rp.choose_dirs("demo", root=root), tmp_path, [a, b])
    assert [c["shared_seeds"] for f in data["beside"] for c in f["checks"]] == [[4, 5], []]
    rows = bs4.BeautifulSoup(rp.front_page_html(data), "html.parser").select("#beside-table tbody tr")
    assert "not independent of this card's check: it shares seeds 4, 5 with this card's method A for tiny bfloat16" in \
        " ".join(rows[0].get_text().split())
    assert "not independent" not in rows[1].get_text()


def test_the_footprint_names_the_model_it_ran(tmp_path):
    root = tmp_path / "results"
    make_results(root)
    f = sorted(root.glob("footprint-*"))[-1]
    (f / "footprint.jsonl").write_text("".join(json.dumps({"key": k, "model": "nanogpt", "wall_s": 2.0}) + "\n"
                                               for k in ("a", "b")))
    data = rp.build_table("demo", rp.choose_dirs("demo", root=root), tmp_path)
    text = " ".join(bs4.BeautifulSoup(rp.front_page_html(data), "html.parser").get_text().split())
    assert "From one short run of each configuration of nanogpt only (10 steps" in text


def test_a_stitch_at_uncommitted_code_says_so(tmp_path, monkeypatch):
    monkeypatch.setattr(verdicts, "git_commit", lambda: {"commit": "ab" * 20, "dirty": True})
    make_results(tmp_path / "results")
    data = rp.build_table("demo", rp.choose_dirs("demo", root=tmp_path / "results"), tmp_path)
    head = " ".join(bs4.BeautifulSoup(rp.front_page_html(data), "html.parser").find(class_="tr2-edition").get_text().split())
    assert head.endswith("at commit abababababab (with uncommitted changes).")


def test_the_verdict_chart_is_the_same_bytes_each_time(tmp_path):
    """A restitch changed every id and the date of the chart's SVG, so its diff hid what had changed."""
    data, _ = _page(tmp_path)
    first = rp.front.verdict_chart_svg(data)
    assert first and first == rp.front.verdict_chart_svg(data) and "<dc:date>" not in first


# 6. the plots: a legend clear of the axis label, bars with room

def _boxes(fig):
    fig.canvas.draw()
    r = fig.canvas.get_renderer()
    (ax,) = [a for a in fig.axes if a.get_visible()]
    return ax, ax.get_legend().get_window_extent(r), ax.xaxis.label.get_window_extent(r), r


def test_the_footprint_plots_legend_does_not_cover_its_axis_label(tmp_path):
    """bytes.png of the H200 edition: save_figure's own tight_layout undid the strip kept for a figure legend."""
    cats = ["interpreter", "python_packages", "nvidia_libraries", "nvidia_driver", "other_libraries"]
    import pandas as pd
    table = pd.DataFrame([{"side": s, "dtype": t, "mode": m, "status": "ok", **{f"bytes_{c}": 1e8 * (i + 1) for i, c in enumerate(cats)}}
                          for s, m in (("cupy", None), ("torch", "reduce-overhead")) for t in ("float32", "bfloat16")])
    fig = plots.footprint_bytes(table, cats)
    fig.suptitle("What each run needed where it trained, by category")
    fig.tight_layout()   # as save_figure lays it out
    ax, legend, label, _ = _boxes(fig)
    assert ax.get_legend() is not None and not legend.overlaps(label) and legend.y1 <= label.y0
    save_figure(fig, tmp_path / "bytes.png", "t")


def test_the_families_plot_leaves_the_bars_room(tmp_path):
    """families.png of the H200 edition: a legend beside the bars and long run labels left them about an inch."""
    import pandas as pd
    fams = ["matmul/gemm", "attention", "triton-fused", "adamw", "layernorm", "gelu", "cross-entropy",
            "reduction/norm", "memset", "copy/cast", "other", "elementwise/residual", "embedding", "dropout"]
    rows = [{"card": "h200-edition", "model": m, "dtype": t, "label": lab, "family": f, "us_per_step": 100.0 * (i + 1)}
            for m in ("nanogpt", "gpt2-small") for t in ("float32", "bfloat16")
            for lab in ("torch reduce-overhead", "cupy half-roundings graph") for i, f in enumerate(fams)]
    fig = plots.family_bars(pd.DataFrame(rows))
    fig.suptitle("Kernel families per step in the profiled runs' window (they explain a step time, never stand in for one)")
    fig.tight_layout()
    ax, legend, label, r = _boxes(fig)
    assert ax.get_window_extent(r).width >= 0.4 * fig.bbox.width
    assert not legend.overlaps(label) and not legend.overlaps(ax.get_window_extent(r))


def test_a_row_without_a_method_a_folder_renders(tmp_path):
    """A configuration whose method A has no finished folder (its card.yaml unreadable, or the stage not run) has a
    check without seeds: the row says so, and the template must not ask the missing check for its seeds."""
    root = tmp_path / "results"
    make_results(root)
    dirs = [d for d in rp.choose_dirs("demo", root=root) if "method_a-" not in str(d)]
    data = rp.build_table("demo", dirs, tmp_path)
    soup = bs4.BeautifulSoup(rp.front_page_html(data), "html.parser")
    row = soup.find(id="correctness-table").find("tr", attrs={"data-model": "tiny", "data-dtype": "float32"})
    assert "method A has no finished folder" in row.get_text()


def test_measured_to_is_the_last_runs_end_where_the_records_say_it(tmp_path):
    """The header's "to" was the latest start a folder records (a stage's folder start where its runs carry no time):
    the families folder's, four minutes before its last run ended. Records now carry their end (tr2.stage)."""
    root = tmp_path / "results"
    make_results(root)
    data = rp.build_table("demo", rp.choose_dirs("demo", root=root), tmp_path)
    text = " ".join(bs4.BeautifulSoup(rp.front_page_html(data), "html.parser").find(class_="tr2-edition").get_text().split())
    assert not data["measured_to_is_end"] and "the last start its folders record" in text
    ends = {"series": "2026-11-29T10:21:00+00:00", "method_a": "2026-11-29T11:00:00+00:00",
            "method_b": "2026-11-29T11:30:00+00:00", "footprint": "2026-11-29T11:45:07+00:00"}
    for d in rp.choose_dirs("demo", root=root):
        stage = d.name.split("-")[0]
        name = "footprint.jsonl" if stage == "footprint" else "runs.jsonl"
        (d / name).write_text(json.dumps({"key": "k", "wall_s": 1.0, "ended": ends[stage]}) + "\n")
    data = rp.build_table("demo", rp.choose_dirs("demo", root=root), tmp_path)
    text = " ".join(bs4.BeautifulSoup(rp.front_page_html(data), "html.parser").find(class_="tr2-edition").get_text().split())
    assert data["measured_to_is_end"] and data["measured_to"] == "2026-11-29T11:45:07+00:00"
    assert "the last start its folders record" not in text


def test_last_end_reads_each_form_of_a_records_time():
    assert explore.last_end([]) is None
    assert explore.last_end([{"wall_s": 3}]) is None   # method A's records of before 2026-12-05
    got = explore.last_end([{"started": "2026-12-04T21:25:33+00:00", "wall_s": 30.2},   # the series'
                            {"ended_unix": 1796419600.0},                             # a parallel run's
                            {"ended": "2026-12-04T21:20:00+00:00"},
                            {"ended": "garbage"}])
    assert got == "2026-12-04T21:26:40+00:00"   # 1796419600 is 21:26:40 UTC


def _evidence(tmp_path, monkeypatch, entries):
    d = tmp_path / "evidence"
    d.mkdir(exist_ok=True)
    (d / "demo.yaml").write_text(yaml.safe_dump(entries))
    monkeypatch.setattr(verdicts, "EVIDENCE_DIR", d)


def test_checks_outside_the_stages_are_shown_confirmed_by_their_logs(tmp_path, monkeypatch):
    """The page said the timed paths are vouched for "as far as those compute what the checked ones do, which no
    table on this page shows": a card's evidence file lists committed GPU logs, each confirmed by its outcome lines."""
    log = tmp_path / "pytest_graph.log"
    log.write_text("....\n4 passed, 20 deselected in 50.0s\n")
    entry = {"kind": "graph = eager", "what": "the graph trains as the eager loop", "log": str(log), "commit": "a" * 40,
             "outcome": ["4 passed"], "covers": ["tiny/float32"]}
    _evidence(tmp_path, monkeypatch, [entry, {**entry, "outcome": ["5 passed"], "covers": ["nanogpt/float32"]},
                                      {**entry, "log": str(tmp_path / "gone.log"), "covers": ["tiny/bfloat16"]}])
    root = tmp_path / "results"
    make_results(root)
    data = rp.build_table("demo", rp.choose_dirs("demo", root=root), tmp_path)
    ev = data["evidence"]
    assert [e["confirmed"] for e in ev["entries"]] == [True, False, False]
    assert ev["entries"][1]["problem"] == "its log does not say '5 passed'"
    assert "is not in the repository" in ev["entries"][2]["problem"]
    timed = [f"{r['model']}/{r['dtype']}" for r in data["rows"] if r["primary"]]
    assert ev["uncovered"]["graph = eager"] == [c for c in timed if c != "tiny/float32"]
    soup = bs4.BeautifulSoup(rp.front_page_html(data), "html.parser")
    rows = soup.find(id="evidence").find("tbody").find_all("tr")
    assert [r["data-confirmed"] for r in rows] == ["yes", "no", "no"]
    assert rows[0].find("a")["href"].endswith("pytest_graph.log")
    assert "not confirmed" in " ".join(rows[1].get_text().split())
    gap = " ".join(soup.find(class_="evidence-gap").get_text().split())
    assert gap.startswith("graph = eager: not shown for") and "tiny/float32" not in gap


def test_a_kind_of_check_about_configurations_the_series_leaves_out_leaves_no_gap(tmp_path, monkeypatch):
    """Entries that time configurations the series does not (GPT-2 medium, float16 beside the H200 edition's rows)
    lack nothing on the timed rows: no "not shown for" line for their kind. A kind whose entry names a timed
    configuration keeps its gap line: here that entry is unconfirmed, so every timed configuration is a gap."""
    log = tmp_path / "bench.log"
    log.write_text("bench r0 gpt2-medium-float16-cupy-graph: ok clock 42.7\n")
    outside = {"kind": "left out, timed beside", "what": "one run", "log": str(log), "commit": "a" * 40,
               "outcome": ["clock 42.7"], "covers": ["gpt2-medium/float16"]}
    unconfirmed = {**outside, "kind": "graph = eager", "outcome": ["9 passed"], "covers": ["tiny/float32"]}
    _evidence(tmp_path, monkeypatch, [outside, unconfirmed])
    root = tmp_path / "results"
    make_results(root)
    data = rp.build_table("demo", rp.choose_dirs("demo", root=root), tmp_path)
    timed = [f"{r['model']}/{r['dtype']}" for r in data["rows"] if r["primary"]]
    assert "tiny/float32" in timed and "gpt2-medium/float16" not in timed
    assert data["evidence"]["uncovered"] == {"left out, timed beside": [], "graph = eager": timed}
    soup = bs4.BeautifulSoup(rp.front_page_html(data), "html.parser")
    gaps = [" ".join(g.get_text().split()) for g in soup.find_all(class_="evidence-gap")]
    assert len(gaps) == 1 and gaps[0].startswith("graph = eager: not shown for")


def test_a_mode_timed_beside_the_series_is_named_where_the_page_says_it_was_not_timed(tmp_path, monkeypatch):
    """The page said "Not timed here: default ... no verdict on this page speaks for it" while the checks below it
    timed default beside reduce-overhead, faster on one configuration: the sentence now says where each mode left
    out of the series was timed beside it, from the confirmed entries that name the mode (an unconfirmed one counts
    for nothing)."""
    log = tmp_path / "bench.log"
    log.write_text("bench r0 tiny-float32-torch-default: ok clock 1.5 ms\n")
    entry = {"kind": "default beside", "what": "default timed once", "log": str(log), "commit": "a" * 40,
             "outcome": ["torch-default: ok clock 1.5"], "covers": ["tiny/float32"], "mode": "default"}
    _evidence(tmp_path, monkeypatch, [entry, {**entry, "outcome": ["clock 9.9"], "covers": ["nanogpt/float32"]},
                                      {**entry, "mode": "max-autotune", "covers": ["gpt2-small/float32"]},
                                      {**entry, "kind": "graph = eager", "mode": None}])
    root = tmp_path / "results"
    make_results(root)
    data = rp.build_table("demo", rp.choose_dirs("demo", root=root), tmp_path)
    assert data["evidence"]["modes_timed"] == {"default": ["tiny/float32"], "max-autotune": ["gpt2-small/float32"]}
    data["compared"] = {**data["compared"], "torch_modes_not_run": ["default", "eager"], "published": "h200",
                        "mode_notes": {**data["compared"]["mode_notes"], **verdicts.TORCH_MODES}}
    soup = bs4.BeautifulSoup(rp.front_page_html(data), "html.parser")
    said = " ".join(soup.find(id="modes-beside").get_text().split())
    modes = " and ".join(data["compared"]["torch_modes"])
    assert said == f"Outside the series, the checks below timed beside {modes} (no verdict): default on tiny/float32."
    data["evidence"] = {**data["evidence"], "modes_timed": {}}
    assert bs4.BeautifulSoup(rp.front_page_html(data), "html.parser").find(id="modes-beside") is None


def _row(data, model, dtype):
    return next(r for r in data["rows"] if r["primary"] and (r["model"], r["dtype"]) == (model, dtype))


def test_a_mode_faster_outside_the_series_is_marked_beside_its_row(tmp_path, monkeypatch):
    """The page called the series' one mode "PyTorch's fastest" on a row where a check outside the series had timed
    another mode faster in one call (the H200 edition's gpt2-small float32: default x0.994 of reduce-overhead in three
    rounds). The row is now marked, with the factor from the log's own clock lines, the runs behind it and the ratio
    it would read against that mode, said to be an estimate; a slower mode, an unconfirmed entry and an entry with
    fewer runs of the same mode change nothing."""
    log = tmp_path / "bench.log"
    lines = ["bench r0 tiny-float32-torch-eager: ok clock 2.000", "bench r1 tiny-float32-torch-eager: ok clock 2.100",
             "bench r0 tiny-float32-torch-default: ok clock 1.800", "bench r1 tiny-float32-torch-default: ok clock 1.900",
             "bench r0 tiny-float32-torch-max-autotune: ok clock 2.500"]
    log.write_text("\n".join(lines) + "\n")
    entry = {"kind": "modes beside", "what": "timed beside", "log": str(log), "commit": "b" * 40, "outcome": lines,
             "covers": ["tiny/float32"], "mode": "default"}
    fewer = {**entry, "outcome": [lines[0], lines[2]]}
    unconfirmed = {**entry, "outcome": [lines[0], "bench r0 tiny-float32-torch-default: ok clock 0.500"]}
    _evidence(tmp_path, monkeypatch, [entry, fewer, unconfirmed])
    root = tmp_path / "results"
    make_results(root)
    data = rp.build_table("demo", rp.choose_dirs("demo", root=root), tmp_path)
    row = _row(data, "tiny", "float32")
    assert row["torch_mode"] == "eager"
    [b] = row["faster_beside"]
    assert (b["mode"], b["runs"], b["commit"]) == ("default", 2, "b" * 40)
    assert b["factor"] == pytest.approx(1.85 / 2.05) and b["ratio_against"] == pytest.approx(row["ratio"] / b["factor"])
    assert all(not r["faster_beside"] for r in data["rows"] if r is not row)
    soup = bs4.BeautifulSoup(rp.front_page_html(data), "html.parser")
    cell = soup.find(id="glance-table").find("tr", attrs={"data-model": "tiny", "data-dtype": "float32"})
    assert "†" in cell.get_text()
    said = " ".join(soup.find(id="faster-beside").get_text().split())
    assert f"tiny float32: default x{1.85 / 2.05:.4f} of eager (the medians of 2 runs each;" in said
    assert f"about {row['ratio'] / b['factor']:.3f}" in said and "an estimate, not a measurement" in said
    assert "a mode it did not time ran faster than that one on 1 of them (tiny float32" in \
        " ".join(soup.find(class_="tr2-abstract").get_text().split())
    _evidence(tmp_path, monkeypatch, [fewer])
    data = rp.build_table("demo", rp.choose_dirs("demo", root=root), tmp_path)
    said = " ".join(bs4.BeautifulSoup(rp.front_page_html(data), "html.parser").find(id="faster-beside").get_text().split())
    assert "one run each: too few to rank the two modes" in said
    _evidence(tmp_path, monkeypatch, [unconfirmed])
    data = rp.build_table("demo", rp.choose_dirs("demo", root=root), tmp_path)
    assert not _row(data, "tiny", "float32")["faster_beside"]
    assert bs4.BeautifulSoup(rp.front_page_html(data), "html.parser").find(id="faster-beside") is None


def test_pytorchs_attention_kernels_are_named_beside_each_verdict(tmp_path):
    """Protocol §9: PyTorch is named with its attention kernels every time. The page named them only in the families
    section; the verdicts now have them beside, with ours, from the card's families folder (its attention family)."""
    root = tmp_path / "results"
    make_results(root)
    d = _folder(root, "families", {"conditions": {"steps": 40}})
    (d / "kernels.csv").write_text(
        "key,model,dtype,side,mode,half_roundings,name,family,total_us,launches,us_per_step,launches_per_step\n"
        'tiny/float32/torch-eager,tiny,float32,torch,eager,False,"fmha_cutlassF_f32_x(Params p)",attention,20,2,10.0,1\n'
        "tiny/float32/torch-eager,tiny,float32,torch,eager,False,fmha_cutlassB_f32_x,attention,60,2,30.0,1\n"
        "tiny/float32/torch-eager,tiny,float32,torch,eager,False,gemm_x,matmul/gemm,60,2,30.0,1\n"
        "tiny/float32/cupy,tiny,float32,cupy,,False,attn_forward_tf32_hs32,attention,8,2,4.0,1\n")
    data = rp.build_table("demo", rp.choose_dirs("demo", root=root), tmp_path)
    a = _row(data, "tiny", "float32")["attention"]
    assert a["torch"]["kernels"] == [("fmha_cutlassB_f32_x", 30.0), ("fmha_cutlassF_f32_x", 10.0)]
    assert a["cupy"]["kernels"] == [("attn_forward_tf32_hs32", 4.0)] and a["torch_key"] == "tiny/float32/torch-eager"
    soup = bs4.BeautifulSoup(rp.front_page_html(data), "html.parser")
    rows = soup.find(id="attention-kernels").find("tbody").find_all("tr")
    assert [(r["data-model"], r["data-dtype"]) for r in rows] == [("tiny", "float32")]   # the published rows only
    text = " ".join(rows[0].get_text(" ").split())
    assert "eager fmha_cutlassB_f32_x 30.0 fmha_cutlassF_f32_x 10.0 (sum 40.0) attn_forward_tf32_hs32 4.0 (sum 4.0)" in text


def test_the_cards_other_series_show_how_pytorchs_time_moves_between_them(tmp_path):
    """A sceptic's question the page left open: the ranges inside one series (three runs, one machine, one hour) are
    far narrower than PyTorch's own medians across the card's series (the H200 edition's gpt2-small bf16: 18.84-19.10
    ms over five). The card's other finished series are listed beside, with that spread per configuration."""
    import copy
    from test_report import VERDICTS, _folder
    root = tmp_path / "results"
    make_results(root)
    older = copy.deepcopy(VERDICTS)
    older[0]["theirs"] = {"runs": 2, "median": 7.0, "fastest": 6.9, "slowest": 7.07}
    _folder(root, "series", {"verdicts": older}, stamp="20261128-100000")
    data = rp.build_table("demo", rp.choose_dirs("demo", root=root), tmp_path)
    names = [s["name"] for s in data["other_series"]]
    assert names == ["series-20261128-090000-demo", "series-20261128-100000-demo", "series-20261129-100000-demo"]
    assert [s["shown"] for s in data["other_series"]] == [False, False, True]
    b = next(x for x in data["between_series"] if x["config"] == "tiny/float32")
    assert (b["series"], b["low"], b["high"]) == (2, 6.81, 7.0)
    assert b["spread"] == pytest.approx(7.0 / 6.81 - 1) and b["inside"] == pytest.approx(max(7.07 / 6.9, 6.95 / 6.7) - 1)
    soup = bs4.BeautifulSoup(rp.front_page_html(data), "html.parser")
    said = " ".join(soup.find(id="other-series").find_next("p").get_text().split())
    assert f"tiny/float32: PyTorch's eager median 6.810–7.000 ms over 2 series, {100 * (7.0 / 6.81 - 1):.2f}% apart" in said
    rows = soup.find(id="other-series-table").find("tbody").find_all("tr")
    assert {r["data-series"] for r in rows} == {"series-20261128-100000-demo", "series-20261129-100000-demo"}
    assert all("2.13.0+cpu" in r.get_text() for r in rows)   # each series' PyTorch named (MACHINE's)
    # the card's one series alone: nothing to set beside it, and no section
    import shutil
    one = tmp_path / "one"
    make_results(one)
    shutil.rmtree(one / "series-20261128-090000-demo")
    alone = rp.build_table("demo", rp.choose_dirs("demo", root=one), tmp_path)
    assert alone["other_series"] == [] and alone["between_series"] == []
    assert bs4.BeautifulSoup(rp.front_page_html(alone), "html.parser").find(id="other-series") is None


def test_a_malformed_evidence_file_is_one_line(tmp_path, monkeypatch):
    from tr2 import Tr2Error
    root = tmp_path / "results"
    make_results(root)
    for bad, words in (({"kind": "x"}, "not a list of entries"),
                       ([{"kind": "x", "what": "y", "log": "z", "commit": "c"}], "entry 1 lacks outcome, covers"),
                       ([{"kind": "x", "what": "y", "log": "z", "commit": "c", "outcome": "1 passed", "covers": ["a"]}],
                        "outcome and covers as lists"),
                       ([{"kind": "x", "what": "y", "log": "z", "commit": "c", "outcome": ["1 passed"], "covers": ["a"],
                          "mode": "turbo"}], "entry 1 has mode 'turbo'; allowed: eager, default, reduce-overhead"),
                       ([{"kind": "x", "what": "y", "log": "z", "commit": "c", "outcome": ["1 passed"], "covers": ["a"],
                          "mode": ["default"]}], r"entry 1 has mode \['default'\]; allowed")):
        _evidence(tmp_path, monkeypatch, bad)
        with pytest.raises(Tr2Error, match=words):
            rp.build_table("demo", rp.choose_dirs("demo", root=root), tmp_path)


def test_the_committed_evidence_of_the_h200_edition_is_confirmed_by_its_logs():
    """Each entry's log is committed and says what the entry claims (a moved or edited log fails here)."""
    ev = verdicts.evidence("h200-edition", REPO_ROOT / "report",
                           ["nanogpt/float32", "nanogpt/bfloat16", "gpt2-small/float32", "gpt2-small/bfloat16"])
    assert ev["entries"] and all(e["confirmed"] for e in ev["entries"]), [e["problem"] for e in ev["entries"]]
    assert all(e["link"].startswith("../results/") for e in ev["entries"])
    assert ev["uncovered"] == {"the timed path computes what the checked one does (graph = eager)": [],
                               "method A's cupy runs are of the series' program": [],
                               "PyTorch's max-autotune, which the series leaves out, timed beside reduce-overhead "
                               "(no verdict)": [],
                               "PyTorch's default mode, which the series leaves out, timed beside reduce-overhead "
                               "(no verdict)": [],
                               "configurations the series leaves out (float16, GPT-2 medium), timed beside "
                               "reduce-overhead (no verdict)": [],
                               "how each side computes attention (what the ratios compare)": [],
                               "how the cupy side's products were chosen (protocol amendment 4.3)": []}
    assert ev["modes_timed"] == {"max-autotune": ["nanogpt/float32", "nanogpt/bfloat16", "gpt2-small/float32",
                                                  "gpt2-small/bfloat16"],
                                 "default": ["nanogpt/float32", "nanogpt/bfloat16", "gpt2-small/float32",
                                             "gpt2-small/bfloat16"]}
