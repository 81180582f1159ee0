"""TR-2, stitched: `python -m tr2.report --card NAME [--dirs DIR ...] [--out report/TR-2.html]`.

Takes the chosen results folders (default: the newest finished folder of each stage for the card),
computes the verdict table from their summary.json files and writes it as
`<out folder>/TR-2-<card>.json`, executes notebooks/front.ipynb with papermill on that table (the
front page), then merges the front page and each folder's executed `<stage>.ipynb` (the cells tagged
`parameters` and `injected-parameters` dropped) into one notebook and exports it with nbconvert's
HTMLExporter, inputs hidden, images embedded, no remote script (no MathJax, no require.js, no widget
manager): one HTML file that reads offline.

The rules the front page applies (protocol §3 rules 4-6, §7, §10 with amendment 1, amendment 7.3):
- the speed of a configuration (its times, the ratio and the verdict) is published only where both
  correctness checks passed: method A for its model and element type, method B for its model;
  elsewhere the row says why it is withheld;
- the verdict is the series' own (tr2.series.compare): faster when the cupy side's slowest run is
  faster than the fastest run of PyTorch's fastest mode, level when not faster and its median less
  than 5% above, slower otherwise, with the ratio of the medians;
- every number carries its conditions (runs, median, range, card, versions, date, commit) and a
  link, relative to the HTML file, to the results folder it comes from;
- a report of a card whose device is the CPU says at its top that it is a CPU demonstration, not
  a measurement of a GPU.
"""
from __future__ import annotations

import argparse
import copy
import datetime
import html
import json
import os
import re
import sys
import tempfile
from pathlib import Path

import yaml

from . import REPO_ROOT, RESULTS_DIR, Tr2Error
from .stage import STAGES

STAGE_TITLES = {
    "series": "Step time: the series (protocol §5)",
    "method_a": "Correctness, method A: families of runs (§7 A)",
    "method_b": "Correctness, method B: one shared start (§7 B)",
    "footprint": "What each side needs at run time: the footprint (§8)",
    "families": "Where the time goes: kernel families (§6)",
}
DROP_TAGS = {"parameters", "injected-parameters"}
FRONT_NOTEBOOK = REPO_ROOT / "notebooks" / "front.ipynb"
DEFAULT_OUT = REPO_ROOT / "report" / "TR-2.html"

# nbconvert's lab template without any remote script: no require.js, no MathJax, no mermaid, no widgets
OFFLINE_TEMPLATE = """{%- extends 'index.html.j2' -%}
{%- block html_head_js -%}{%- endblock html_head_js -%}
{%- block jupyter_widgets -%}{%- endblock jupyter_widgets -%}
{%- block html_head_js_mathjax -%}{%- endblock html_head_js_mathjax -%}
{%- block html_head_js_mermaidjs -%}{%- endblock html_head_js_mermaidjs -%}
"""
_REMOTE = re.compile(r"""<(?:script|link|img|iframe)\b[^>]*\b(?:src|href)\s*=\s*["']?(?:https?:)?//[^"'\s>]+""", re.I)
_CSS_REMOTE = re.compile(r"""@import\s+(?:url\()?["']?(?:https?:)?//|url\(\s*["']?(?:https?:)?//""", re.I)


# ---------------------------------------------------------------------------------------------
# folders


def _dirty(value) -> bool:
    """machine.json's dirty flag: a bool, or the string the GPU machine's environment handed over (runs of 2026-11-29)."""
    if isinstance(value, str):
        return value.strip().lower() in ("true", "1", "yes")
    return bool(value)

def stage_of(d) -> str | None:
    d = Path(d)
    s = _read_json(d / "summary.json") or {}
    if s.get("stage") in STAGES:
        return s["stage"]
    for st in sorted(STAGES, key=len, reverse=True):
        if d.name.startswith(st + "-"):
            return st
    return None


def choose_dirs(card_name: str, dirs=None, root=None) -> list[Path]:
    """The folders the report stitches, in stage order: the given ones, or the newest finished one of each
    stage for the card (a folder holding summary.json and its executed notebook)."""
    if dirs:
        out = []
        for d in dirs:
            p = Path(d).resolve()
            if not p.is_dir():
                raise Tr2Error(f"--dirs: {str(d)!r} is not a folder; allowed: results folders of stages")
            if stage_of(p) is None:
                raise Tr2Error(f"--dirs: {str(d)!r} is no stage's results folder; allowed: folders named "
                               f"<stage>-<stamp>-<card> with stage one of {' | '.join(STAGES)}")
            out.append(p)
        order = {s: i for i, s in enumerate(STAGES)}
        return sorted(out, key=lambda p: (order[stage_of(p)], p.name))
    from .runner import latest
    out = []
    for st in STAGES:
        p = latest(st, card_name, root=root or RESULTS_DIR, finished=True)
        if p is not None:
            out.append(Path(p).resolve())
    return out


def _read_json(path):
    try:
        return json.loads(Path(path).read_text())
    except (OSError, json.JSONDecodeError):
        return None


def _read_card(d):
    try:
        return yaml.safe_load((Path(d) / "card.yaml").read_text()) or {}
    except (OSError, yaml.YAMLError):
        return {}


def link(d, html_dir) -> str:
    """The results folder as a link relative to the HTML file's folder, ending in '/'."""
    rel = os.path.relpath(Path(d).resolve(), Path(html_dir).resolve())
    return rel.replace(os.sep, "/") + "/"


def folder_conditions(d) -> dict:
    """Card, machine, versions, date and commit of a results folder (card.yaml and machine.json)."""
    d = Path(d)
    card = _read_card(d)
    m = _read_json(d / "machine.json") or {}
    gpus = m.get("gpus") or []
    return {
        "card": card.get("card"), "machine": card.get("machine"), "device": card.get("device"),
        "gpu": ", ".join(g.get("name", "?") for g in gpus) or None,
        "driver": ", ".join(sorted({g.get("driver") for g in gpus if g.get("driver")})) or None,
        "host": m.get("host"), "date": m.get("date"), "commit": m.get("commit"), "dirty": _dirty(m.get("dirty")),
        "versions": {k: m.get(k) for k in ("python", "torch", "torch_cuda", "cudnn", "triton", "cupy", "numpy")},
    }


def folder_info(d, html_dir) -> dict:
    d = Path(d)
    st = stage_of(d)
    summary = _read_json(d / "summary.json") or {}
    c = folder_conditions(d)
    for k in ("first_run", "last_run", "rounds", "steps", "window"):
        v = (summary.get("conditions") or {}).get(k) if isinstance(summary.get("conditions"), dict) else None
        if v is not None:
            c[k] = v
    return {"stage": st, "name": d.name, "path": str(d), "link": link(d, html_dir),
            "notebook": (d / f"{st}.ipynb").is_file(), "conditions": c}


# ---------------------------------------------------------------------------------------------
# the verdict table

def _range_of(r):
    if not r:
        return None
    return {"runs": r.get("runs"), "median": r.get("median"), "fastest": r.get("fastest"), "slowest": r.get("slowest")}


def _check_of(v, link_, what):
    if v is None:
        return {"passed": None, "reason": f"{what} has not run for this card", "link": None}
    return {"passed": v.get("passed"), "reason": v.get("reason"), "link": link_}


def build_table(card_name: str, dirs, html_dir) -> dict:
    """The front page's data: every model and element type of the series with its verdict, gated by the
    correctness checks; the checks; the footprint; every folder's conditions."""
    dirs = [Path(d) for d in dirs]
    infos = [folder_info(d, html_dir) for d in dirs]
    by_stage: dict[str, list] = {}
    for d, info in zip(dirs, infos):
        by_stage.setdefault(info["stage"], []).append((d, info, _read_json(d / "summary.json") or {}))

    # correctness: method A per (model, dtype), method B per model; a later folder overrides an earlier one
    check_a, check_b = {}, {}
    for d, info, s in by_stage.get("method_a", []):
        for c in s.get("configs", []):
            check_a[(c["model"], c["dtype"])] = _check_of(c.get("verdict") or {}, info["link"], "method A")
    for d, info, s in by_stage.get("method_b", []):
        for m in s.get("models", []):
            v = dict(m.get("verdict") or {})
            full = v.get("full")
            if isinstance(full, dict) and "passed" in full and m.get("judge_last_step") != m.get("steps"):
                v["reason"] = (v.get("reason") or "") + f" (over all {m.get('steps')} steps: " + \
                    ("passed" if full.get("passed") else "not passed") + ", amendment 6.2)"
            check_b[m["model"]] = _check_of(v, info["link"], "method B")

    rows = []
    seen = {}
    for d, info, s in by_stage.get("series", []):
        cond = info["conditions"]
        for v in s.get("verdicts", []):
            key = (v["model"], v["dtype"], v["build"])
            a = check_a.get((v["model"], v["dtype"])) or _check_of(None, None, "method A")
            b = check_b.get(v["model"]) or _check_of(None, None, "method B")
            correct = a["passed"] is True and b["passed"] is True
            why = []
            for name, chk in (("method A", a), ("method B", b)):
                if chk["passed"] is True:
                    continue
                if chk.get("link") is None:       # the stage has no folder for this card
                    why.append(chk["reason"])
                else:
                    why.append(name + (" failed" if chk["passed"] is False else " gave no verdict")
                               + (f": {chk['reason']}" if chk.get("reason") else ""))
            published = correct and v.get("verdict") is not None
            if correct and v.get("verdict") is None:
                why.append("the series gives no verdict" + (f": {v['reason']}" if v.get("reason") else ""))
            row = {
                "model": v["model"], "dtype": v["dtype"], "build": v["build"], "primary": bool(v.get("primary")),
                "half_roundings": v["build"].endswith("-hr"),
                "cupy": _range_of(v.get("ours")) if published else None,
                "torch": ({"mode": v.get("torch_mode"), **(_range_of(v.get("theirs")) or {})} if published else None),
                "ratio": v.get("ratio") if published else None,
                "verdict": v.get("verdict") if published else None,
                "speed_published": published,
                "withheld": None if published else ("; ".join(why) or "no verdict"),
                "method_a": a, "method_b": b, "correctness_passed": correct,
                "oom_modes": v.get("oom_modes") or [], "modes_without_time": v.get("modes_without_time") or [],
                "notes": v.get("notes") or [], "complete": v.get("complete"),
                "series": info["name"], "link": info["link"],
                "conditions": {"card": cond.get("card"), "gpu": cond.get("gpu") or cond.get("device"),
                               "rounds": cond.get("rounds"), "window": cond.get("window"), "date": cond.get("date"),
                               "commit": cond.get("commit"), "torch": cond["versions"].get("torch"),
                               "cupy": cond["versions"].get("cupy")},
            }
            if key in seen:
                rows[seen[key]] = row
            else:
                seen[key] = len(rows)
                rows.append(row)

    primary = [r for r in rows if r["primary"]]
    counts = {k: sum(1 for r in primary if r["verdict"] == k) for k in ("faster", "level", "slower")}
    counts["no verdict"] = sum(1 for r in primary if r["verdict"] is None)
    counts["comparisons"] = len(primary)

    footprint = None
    for d, info, s in by_stage.get("footprint", []):
        footprint = {"link": info["link"], "folder": info["name"], "sides": s.get("sides", {}),
                     "docker": {k: (s.get("docker") or {}).get(k) for k in ("available", "message", "image_ratio_torch_to_cupy")},
                     "images": {side: {k: i.get(k) for k in ("size_bytes", "status", "files")}
                                for side, i in ((s.get("docker") or {}).get("images") or {}).items()},
                     "install_set_bytes": s.get("install_set_bytes"),
                     "steps": (s.get("conditions") or {}).get("steps"),
                     "conditions": info["conditions"]}

    devices = {i["conditions"].get("device") for i in infos if i["conditions"].get("device")}
    cards = {i["conditions"].get("card") for i in infos if i["conditions"].get("card")}
    dates = sorted(x for i in infos for x in (i["conditions"].get("first_run") or i["conditions"].get("date"),
                                              i["conditions"].get("last_run") or i["conditions"].get("date")) if x)
    from .sysinfo import git_commit
    return {
        "card": card_name, "cards_in_folders": sorted(cards), "devices": sorted(devices),
        "cpu_demonstration": "cpu" in devices or (not devices and _card_device(card_name) == "cpu"),
        "generated": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "report_commit": git_commit(),
        "measured_from": dates[0] if dates else None, "measured_to": dates[-1] if dates else None,
        "folders": infos, "rows": rows, "counts": counts, "footprint": footprint,
        "stages_missing": [s for s in STAGES if s not in by_stage],
    }


def _card_device(card_name):
    try:
        return (yaml.safe_load((REPO_ROOT / "params" / "cards" / f"{card_name}.yaml").read_text()) or {}).get("device")
    except (OSError, yaml.YAMLError):
        return None


# ---------------------------------------------------------------------------------------------
# formatting: the front page's HTML (the notebook only displays these)

def fmt_ms(x) -> str:
    if x is None:
        return "—"
    x = float(x)
    return f"{x:.3f}" if x < 10 else (f"{x:.2f}" if x < 100 else f"{x:.1f}")


def fmt_ratio(x) -> str:
    return "—" if x is None else f"{float(x):.3f}"


def fmt_mb(b) -> str:
    return "—" if b is None else f"{b / 1e6:.1f}"


def _e(x) -> str:
    return html.escape("" if x is None else str(x))


def _num_td(cls, value, text, **attrs) -> str:
    """A cell showing `text`, holding the full number in data-value (and any range in data-fastest/-slowest)."""
    extra = "".join(f' data-{k}="{_dv(v)}"' for k, v in attrs.items())
    return f'<td class="{cls}" data-value="{_dv(value)}"{extra}>{_e(text)}</td>'


def _check_text(c) -> str:
    return {True: "passed", False: "failed"}.get(c.get("passed"), "no verdict")


def banner_html(data) -> str:
    if not data.get("cpu_demonstration"):
        return ""
    return ('<div class="tr2-banner" style="border:3px solid #b00;background:#fee;padding:0.8em 1em;'
            'margin:0 0 1em 0;font-size:1.15em"><b>A CPU demonstration, not a measurement of a GPU.</b> '
            f'The card <code>{_e(data["card"])}</code> ran on the processor: the cupy side ran its NumPy forms '
            'and PyTorch its CPU path, on a small model. Its times show that the pipeline works; they say '
            'nothing about either side on an NVIDIA card, and no number below may be quoted as one.</div>')


def front_matter_html(data) -> str:
    f = data["folders"]
    series = [i for i in f if i["stage"] == "series"]
    c = (series[0] if series else (f[0] if f else {"conditions": {}}))["conditions"]
    v = c.get("versions") or {}
    commit = (data.get("report_commit") or {}).get("commit")
    parts = [banner_html(data),
             '<h1 id="tr2-title">TR-2: a GPT trained by hand-written CUDA kernels (CuPy), measured beside PyTorch</h1>']
    if not f:
        parts.append(f'<p>No finished results folder of any stage for the card <code>{_e(data["card"])}</code>: '
                     'nothing to report yet. Run a stage with <code>python -m tr2.runner STAGE --card CARD</code>.</p>')
        return "\n".join(parts)
    gpu = c.get("gpu") or ("the processor" if c.get("device") == "cpu" else c.get("device"))
    parts.append(
        f'<p class="tr2-edition">Card <code>{_e(data["card"])}</code> (machine {_e(c.get("machine"))}: {_e(gpu)}'
        + (f', driver {_e(c.get("driver"))}' if c.get("driver") else "") + "). "
        f'Measured from {_e(data.get("measured_from"))} to {_e(data.get("measured_to"))} at tr2 commit '
        f'<code>{_e((c.get("commit") or "none")[:12])}</code>{" (uncommitted changes)" if c.get("dirty") else ""}, '
        f'with PyTorch {_e(v.get("torch"))}, CuPy {_e(v.get("cupy") or "not installed")}, Triton {_e(v.get("triton") or "not installed")}, '
        f'NumPy {_e(v.get("numpy"))}, Python {_e(v.get("python"))}, by the protocol fixed before measuring '
        f'(its §3 rules, §5 clock, §7 checks, §10 verdicts and amendments 1-8). Stitched {_e(data["generated"])}'
        f' at commit <code>{_e((commit or "none")[:12])}</code>.</p>')
    n = data["counts"]
    if n["comparisons"]:
        parts.append(
            f'<p class="tr2-abstract">Against the fastest of PyTorch\'s modes on this card, per model and element type, '
            f'the cupy program is faster in {n["faster"]}, level in {n["level"]} and slower in {n["slower"]} of the '
            f'{n["comparisons"]} comparisons; {n["no verdict"]} have no verdict, because their correctness checks have '
            'not passed or their series gave none (a speed is published only where both checks passed).</p>')
    if data.get("stages_missing"):
        parts.append('<p>Stages without a finished folder for this card, so not in this report: '
                     + ", ".join(f"<code>{_e(s)}</code>" for s in data["stages_missing"]) + ".</p>")
    return "\n".join(parts)


def contents_html(data) -> str:
    items = [f'<li><a href="#stage-{_e(i["name"])}">{_e(STAGE_TITLES.get(i["stage"], i["stage"]))}</a> — '
             f'raw data: <a href="{_e(i["link"])}">{_e(i["name"])}</a></li>'
             for i in data["folders"] if i["notebook"]]
    if not items:
        return ""
    return "<h2>Contents</h2><ol>" + "".join(items) + "</ol>"


def _rows_table(rows, table_id, caption) -> str:
    head = ("<tr><th>model</th><th>type</th><th>cupy build</th><th>cupy median [fastest–slowest], ms</th>"
            "<th>cupy runs</th><th>PyTorch's fastest mode</th><th>its median [fastest–slowest], ms</th>"
            "<th>its runs</th><th>ratio of medians</th><th>verdict</th><th>method A</th><th>method B</th>"
            "<th>raw data</th></tr>")
    body = []
    for r in rows:
        cu, to = r["cupy"] or {}, r["torch"] or {}
        verdict = r["verdict"] if r["speed_published"] else "no verdict"
        cu_text = (f'{fmt_ms(cu.get("median"))} [{fmt_ms(cu.get("fastest"))}–{fmt_ms(cu.get("slowest"))}]'
                   if r["speed_published"] else "withheld")
        to_text = (f'{fmt_ms(to.get("median"))} [{fmt_ms(to.get("fastest"))}–{fmt_ms(to.get("slowest"))}]'
                   if r["speed_published"] else "withheld")
        mode = to.get("mode") if r["speed_published"] else "—"
        if r["speed_published"] and r["oom_modes"]:
            mode = f'{mode} (out of memory: {", ".join(r["oom_modes"])})'
        note = "" if r["speed_published"] else f'<div class="tr2-why">withheld: {_e(r["withheld"])}</div>'
        a, b = r["method_a"], r["method_b"]
        a_cell = (f'<a href="{_e(a["link"])}">{_check_text(a)}</a>' if a.get("link") else _check_text(a))
        b_cell = (f'<a href="{_e(b["link"])}">{_check_text(b)}</a>' if b.get("link") else _check_text(b))
        body.append(
            f'<tr data-model="{_e(r["model"])}" data-dtype="{_e(r["dtype"])}" data-build="{_e(r["build"])}">'
            f'<td>{_e(r["model"])}</td><td>{_e(r["dtype"])}</td><td>{_e(r["build"])}</td>'
            + _num_td("cupy-median", cu.get("median"), cu_text, fastest=cu.get("fastest"), slowest=cu.get("slowest"))
            + f'<td class="cupy-runs">{_e(cu.get("runs", "—"))}</td>'
            f'<td class="torch-mode">{_e(mode)}</td>'
            + _num_td("torch-median", to.get("median"), to_text, fastest=to.get("fastest"), slowest=to.get("slowest"))
            + f'<td class="torch-runs">{_e(to.get("runs", "—"))}</td>'
            + _num_td("ratio", r["ratio"], fmt_ratio(r["ratio"]))
            + f'<td class="verdict"><b>{_e(verdict)}</b>{note}</td>'
            f'<td class="method-a">{a_cell}</td><td class="method-b">{b_cell}</td>'
            f'<td><a href="{_e(r["link"])}">{_e(r["series"])}</a></td></tr>')
    return (f'<table id="{table_id}" class="tr2-table" border="1" style="border-collapse:collapse">'
            f'<caption style="caption-side:bottom;text-align:left">{caption}</caption>'
            f'<thead>{head}</thead><tbody>{"".join(body)}</tbody></table>')


def _dv(x) -> str:
    return "" if x is None else repr(float(x))


def _series_caption(data) -> str:
    rows = data["rows"]
    if not rows:
        return ""
    c = rows[0]["conditions"]
    w = c.get("window") or [None, None]
    return (f'Milliseconds per step by the outside clock, from the report line of step {_e(w[0])} to that of step '
            f'{_e(w[1])}, divided by the steps between; median of each configuration\'s timed runs (one discarded '
            f'run first; {_e(c.get("rounds"))} rounds, order rotated), with the fastest and slowest run in brackets. '
            f'Card {_e(c.get("card"))} on {_e(c.get("gpu"))}; PyTorch {_e(c.get("torch"))}, CuPy '
            f'{_e(c.get("cupy") or "not installed")}; {_e(c.get("date"))}; commit {_e((c.get("commit") or "none")[:12])}. '
            'Ratio: the cupy median over PyTorch\'s. Verdicts (§10, amendment 1): <i>faster</i> when the cupy side\'s '
            'slowest run is faster than the fastest run of PyTorch\'s fastest mode; <i>level</i> when not faster and its '
            'median less than 5% above; <i>slower</i> when 5% or more above. A configuration whose correctness checks '
            '(method A for its model and type, method B for its model) have not both passed has no verdict, and its '
            'speed is withheld (rule 6). Each row links its raw data.')


def verdict_table_html(data) -> str:
    rows = [r for r in data["rows"] if r["primary"]]
    if not rows:
        return "<h2>Step time</h2><p>No series for this card: no step time, no verdict.</p>"
    return ("<h2>Step time: every model and element type against PyTorch's fastest mode</h2>"
            + _rows_table(rows, "verdict-table", _series_caption(data)))


def halves_table_html(data) -> str:
    rows = [r for r in data["rows"] if not r["primary"]]
    if not rows:
        return ""
    return ("<h3>The half types without the half roundings</h3><p>Each half type's cupy build without "
            "<code>--half-roundings</code>, every digit kept, against the same PyTorch mode. The correctness checks "
            "ran the build the verdict compares (with the half roundings).</p>"
            + _rows_table(rows, "halves-table", "Conditions, statistics and verdicts as in the table above."))


def oom_html(data) -> str:
    rows = [r for r in data["rows"] if r["oom_modes"] or r["modes_without_time"]]
    if not rows:
        return ""
    items = "".join(f'<li>{_e(r["model"])} {_e(r["dtype"])}: PyTorch modes without a time: '
                    f'{_e(", ".join(r["modes_without_time"] or r["oom_modes"]))}'
                    f'{" (out of memory: " + _e(", ".join(r["oom_modes"])) + ")" if r["oom_modes"] else ""}; '
                    f'the comparison is against the fastest of the modes that ran (amendments 5 and 8). '
                    f'<a href="{_e(r["link"])}">raw data</a></li>' for r in rows if r["primary"])
    return f"<h3>Where a mode has no time</h3><ul>{items}</ul>" if items else ""


def correctness_html(data) -> str:
    pairs = {}
    for r in data["rows"]:
        pairs.setdefault((r["model"], r["dtype"]), r)
    if not pairs:
        return ""
    body = "".join(
        f'<tr data-model="{_e(m)}" data-dtype="{_e(t)}"><td>{_e(m)}</td><td>{_e(t)}</td>'
        f'<td class="method-a">{_check_text(r["method_a"])}</td><td>{_e(r["method_a"].get("reason"))}</td>'
        f'<td class="method-b">{_check_text(r["method_b"])}</td><td>{_e(r["method_b"].get("reason"))}</td></tr>'
        for (m, t), r in pairs.items())
    return ("<h2>Correctness: the same model, trained alike</h2><p>Method A: families of runs over the card's seeds, "
            "passed when at every evaluation from the judged step on the two sides' median validation losses differ by "
            "no more than the larger of their ranges (one seed a side: read, not judged). Method B: one shared start and "
            "batch order, dropout 0, float32 without TF32; step 0 within 1e-5 relative, each judged step within 1%. "
            "The stages' sections below hold the curves and the numbers.</p>"
            '<table id="correctness-table" class="tr2-table" border="1" style="border-collapse:collapse"><thead><tr>'
            "<th>model</th><th>type</th><th>method A</th><th>why</th><th>method B</th><th>why</th></tr></thead>"
            f"<tbody>{body}</tbody></table>")


def footprint_html(data) -> str:
    fp = data.get("footprint")
    if not fp:
        return ""
    rows = []
    for side, s in fp["sides"].items():
        inst = (fp.get("install_set_bytes") or {}).get(side)
        img = (fp.get("images") or {}).get(side) or {}
        rows.append(f'<tr data-side="{_e(side)}"><td>{_e(side)}</td><td>{_e(", ".join(s.get("nvidia_libraries") or []) or "none")}</td>'
                    f'<td>{"yes" if s.get("nvrtc") else "no"}</td>'
                    + _num_td("runtime-bytes", s.get("total_bytes"), fmt_mb(s.get("total_bytes")))
                    + _num_td("image-bytes", s.get("image_bytes"), fmt_mb(s.get("image_bytes")))
                    + _num_td("install-bytes", inst, fmt_mb(inst))
                    + _num_td("docker-bytes", img.get("size_bytes"), fmt_mb(img.get("size_bytes")))
                    + f'<td>{_e(s.get("runs_ok"))} of {_e(s.get("runs"))}</td></tr>')
    dk = fp.get("docker") or {}
    c = fp["conditions"]
    docker_line = ("Docker ran: each side's image was built from <code>docker/</code> and measured."
                   if dk.get("available") else
                   f"Docker did not run where this stage ran ({_e(dk.get('message'))}): no image was built or measured; "
                   "the install sets measured there stand instead.")
    return ("<h2>What each side needs at run time</h2>"
            f'<p>From one short run of each configuration ({_e(fp.get("steps"))} steps, cold caches), the shared libraries '
            "mapped into the training process and its children, read from <code>/proc/&lt;pid&gt;/maps</code> while it "
            f"trained (amendment 2). {docker_line} Card {_e(c.get('card'))}, {_e(c.get('date'))}, commit "
            f"{_e((c.get('commit') or 'none')[:12])}; raw data: <a href=\"{_e(fp['link'])}\">{_e(fp['folder'])}</a>.</p>"
            '<table id="footprint-table" class="tr2-table" border="1" style="border-collapse:collapse"><thead><tr>'
            "<th>side</th><th>NVIDIA libraries opened (all runs)</th><th>NVRTC opened</th>"
            "<th>run-time set, MB (largest run)</th><th>without the driver's libraries, MB</th>"
            "<th>install set, MB</th><th>image, MB</th><th>runs ok</th></tr></thead>"
            f"<tbody>{''.join(rows)}</tbody></table>")


def conditions_html(data) -> str:
    if not data["folders"]:
        return ""
    body = []
    for i in data["folders"]:
        c = i["conditions"]
        v = c.get("versions") or {}
        body.append(
            f'<tr><td>{_e(i["stage"])}</td><td><a href="{_e(i["link"])}">{_e(i["name"])}</a></td>'
            f'<td>{_e(c.get("card"))}</td><td>{_e(c.get("gpu") or c.get("device"))}</td><td>{_e(c.get("driver"))}</td>'
            f'<td>{_e(c.get("date"))}</td><td><code>{_e((c.get("commit") or "none")[:12])}</code>'
            f'{" dirty" if c.get("dirty") else ""}</td>'
            f'<td>{_e(", ".join(f"{k} {x}" for k, x in v.items() if x is not None))}</td></tr>')
    return ("<h2>Conditions of every folder</h2>"
            '<table id="conditions-table" class="tr2-table" border="1" style="border-collapse:collapse"><thead><tr>'
            "<th>stage</th><th>results folder (raw data)</th><th>card</th><th>GPU</th><th>driver</th><th>date</th>"
            f"<th>commit</th><th>versions</th></tr></thead><tbody>{''.join(body)}</tbody></table>")


def front_page_html(data) -> str:
    """Everything the front page shows, in order (the notebook displays its parts one by one)."""
    return "\n".join(x for x in (front_matter_html(data), contents_html(data), verdict_table_html(data),
                                 halves_table_html(data), oom_html(data), correctness_html(data),
                                 footprint_html(data), conditions_html(data)) if x)


def load_front_data(card: str, dirs=None, table_json=None, html_dir=None, root=None) -> dict:
    """For notebooks/front.ipynb: the table report.py wrote, or (run on its own) one made from the folders."""
    if table_json:
        return json.loads(Path(table_json).read_text())
    html_dir = Path(html_dir) if html_dir else DEFAULT_OUT.parent
    return build_table(card, choose_dirs(card, dirs, root), html_dir)


# ---------------------------------------------------------------------------------------------
# stitching

def _clean_stream(text: str) -> str:
    """A progress bar's carriage returns: keep what the last one left on each line."""
    return "\n".join(line.rsplit("\r", 1)[-1] for line in text.split("\n"))


_MD_TARGET = re.compile(r"(!?)\[([^\]]*)\]\(\s*([^)\s]+)([^)]*)\)")
_HTML_TARGET = re.compile(r"""\b(src|href)=(["'])([^"']+)\2""")


def _is_relative(target: str) -> bool:
    return not (target.startswith(("#", "/", "data:", "mailto:")) or re.match(r"^[A-Za-z][A-Za-z0-9+.-]*:", target))


def rewrite_links(text: str, folder, html_dir) -> str:
    """A stage notebook's relative targets, meant from its results folder, made right from the HTML file:
    an image the folder holds is embedded (a data: URI), a link becomes relative to html_dir."""
    import base64
    import mimetypes
    folder, html_dir = Path(folder), Path(html_dir)

    def fix(target: str, image: bool) -> str:
        if not _is_relative(target):
            return target
        path = (folder / target).resolve()
        if image and path.is_file():
            mime = mimetypes.guess_type(str(path))[0] or "application/octet-stream"
            return f"data:{mime};base64," + base64.b64encode(path.read_bytes()).decode("ascii")
        rel = os.path.relpath(path, html_dir.resolve()).replace(os.sep, "/")
        return rel + ("/" if target.endswith("/") and not rel.endswith("/") else "")

    text = _MD_TARGET.sub(lambda m: f"{m.group(1)}[{m.group(2)}]({fix(m.group(3), bool(m.group(1)))}{m.group(4)})", text)
    return _HTML_TARGET.sub(lambda m: f"{m.group(1)}={m.group(2)}{fix(m.group(3), m.group(1) == 'src')}{m.group(2)}", text)


def _keep_cells(nb, folder=None, html_dir=None) -> list:
    out = []
    for cell in nb.cells:
        tags = set(cell.get("metadata", {}).get("tags", []))
        if tags & DROP_TAGS:
            continue
        cell = copy.deepcopy(cell)
        if folder is not None and cell.cell_type == "markdown":
            cell.source = rewrite_links(cell.source, folder, html_dir)
        if cell.cell_type == "code":
            outs = []
            for o in cell.get("outputs", []):
                if o.get("output_type") in ("display_data", "execute_result"):
                    data = o.get("data", {})
                    data.pop("application/vnd.jupyter.widget-view+json", None)
                    data.pop("application/javascript", None)
                    if not data:
                        continue
                    if folder is not None:
                        for mime in ("text/markdown", "text/html"):
                            if isinstance(data.get(mime), str):
                                data[mime] = rewrite_links(data[mime], folder, html_dir)
                if o.get("output_type") == "stream":
                    o["text"] = _clean_stream(o.get("text", ""))
                outs.append(o)
            cell["outputs"] = outs
        out.append(cell)
    return out


def stage_header(info) -> str:
    c = info["conditions"]
    return (f'<a id="stage-{info["name"]}"></a>\n\n---\n\n'
            f'**{STAGE_TITLES.get(info["stage"], info["stage"])}.** '
            f'Results folder (raw data): [{info["name"]}]({info["link"]}) · card `{c.get("card")}` · '
            f'{c.get("gpu") or c.get("device")} · {c.get("date")} · commit `{(c.get("commit") or "none")[:12]}`'
            f'{" (uncommitted changes)" if c.get("dirty") else ""}. The stage\'s executed notebook '
            f'(`{info["stage"]}.ipynb` in that folder) follows, its code hidden.')


def merge(front_nb, stage_nbs, html_dir=None) -> "nbformat.NotebookNode":  # noqa: F821 - imported where used
    """One notebook: the front page's cells, then per stage a header and its cells (parameters dropped;
    relative links and images of a stage, meant from its folder, made right from html_dir)."""
    import nbformat
    nb = nbformat.v4.new_notebook()
    nb.metadata = {k: v for k, v in front_nb.metadata.items() if k in ("kernelspec", "language_info")}
    cells = _keep_cells(front_nb)
    for info, snb in stage_nbs:
        cells.append(nbformat.v4.new_markdown_cell(stage_header(info)))
        folder = info.get("path")
        cells.extend(_keep_cells(snb, folder, html_dir or DEFAULT_OUT.parent) if folder else _keep_cells(snb))
    for i, cell in enumerate(cells):
        cell["id"] = f"tr2-{i}"
        cell.get("metadata", {}).pop("papermill", None)
        if cell.cell_type == "code":
            cell.setdefault("execution_count", None)
    nb.cells = cells
    return nb


def export_html(nb, title: str) -> str:
    import jinja2
    from nbconvert import HTMLExporter
    exporter = HTMLExporter(template_name="lab", extra_loaders=[jinja2.DictLoader({"tr2_offline.html.j2": OFFLINE_TEMPLATE})],
                            template_file="tr2_offline.html.j2")
    exporter.exclude_input = True
    exporter.exclude_input_prompt = True
    exporter.exclude_output_prompt = True
    exporter.embed_images = True
    exporter.anchor_link_text = ""
    nb.metadata["title"] = title
    body, _resources = exporter.from_notebook_node(nb)
    return body


def remote_urls(text: str) -> list[str]:
    """Remote resources an HTML page would fetch: scripts, stylesheets, images, frames, CSS imports."""
    return [m.group(0) for m in _REMOTE.finditer(text)] + [m.group(0) for m in _CSS_REMOTE.finditer(text)]


def execute_front(table_json, card: str, dirs, html_dir, out_nb) -> Path:
    import papermill as pm
    pm.execute_notebook(str(FRONT_NOTEBOOK), str(out_nb), kernel_name="python3", progress_bar=False,
                        parameters={"card": card, "dirs": [str(d) for d in dirs], "table_json": str(table_json),
                                    "html_dir": str(html_dir)}, cwd=str(REPO_ROOT))
    return Path(out_nb)


def build_report(card: str, dirs=None, out=None, root=None, keep_front=None) -> tuple[Path, Path]:
    """Write the HTML and the verdict table's JSON; returns their paths."""
    import nbformat
    out = Path(out) if out else DEFAULT_OUT
    out = out.resolve()
    out.parent.mkdir(parents=True, exist_ok=True)
    chosen = choose_dirs(card, dirs, root)
    data = build_table(card, chosen, out.parent)
    from .results import write_json_atomic, write_text_atomic
    json_path = write_json_atomic(out.parent / f"TR-2-{card}.json", data)
    with tempfile.TemporaryDirectory(prefix="tr2-report-") as tmp:
        front_out = Path(keep_front) if keep_front else Path(tmp) / "front.ipynb"
        execute_front(json_path, card, chosen, out.parent, front_out)
        front = nbformat.read(str(front_out), as_version=4)
    stage_nbs = []
    for info, d in zip(data["folders"], chosen):
        p = Path(d) / f"{info['stage']}.ipynb"
        if p.is_file():
            stage_nbs.append((info, nbformat.read(str(p), as_version=4)))
    nb = merge(front, stage_nbs, out.parent)
    title = f"TR-2 ({card})" + (" - a CPU demonstration, not a GPU measurement" if data["cpu_demonstration"] else "")
    text = export_html(nb, title)
    bad = remote_urls(text)
    if bad:
        raise Tr2Error(f"report: the HTML would fetch {bad[0]!r}; allowed: an offline page (no remote resource)")
    write_text_atomic(out, text)
    return out, Path(json_path)


class _Parser(argparse.ArgumentParser):
    def error(self, message):
        sys.stderr.write(f"tr2.report: error: {message}\n")
        sys.exit(2)


def main(argv=None) -> int:
    p = _Parser(prog="python -m tr2.report", description="Stitch the executed notebooks of a card's results "
                "folders into one offline HTML report behind the front page (TR-2).")
    p.add_argument("--card", required=True, help="the card's name (or its file)")
    p.add_argument("--dirs", nargs="+", default=None, metavar="DIR",
                   help="results folders to stitch (default: the newest finished folder of each stage for the card)")
    p.add_argument("--out", default=str(DEFAULT_OUT), help="the HTML file (default report/TR-2.html); the verdict "
                   "table's data goes beside it as TR-2-<card>.json")
    p.add_argument("--root", default=None, help="where the results folders are (default results/)")
    p.add_argument("--keep-front", default=None, metavar="FILE", help="keep the executed front page notebook here")
    a = p.parse_args(argv)
    try:
        card = a.card
        if card.endswith((".yaml", ".yml")) or Path(card).is_file():
            from .cards import load_card
            card = load_card(card)["card"]
        html_path, json_path = build_report(card, a.dirs, a.out, a.root, a.keep_front)
    except Tr2Error as e:
        sys.stderr.write(f"tr2.report: error: {e}\n")
        return 2
    print(html_path)
    print(json_path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
