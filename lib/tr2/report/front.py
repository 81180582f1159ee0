"""The front page of TR-2, filled directly from the verdict table (no notebook round trip).

`front.html.j2` lays out the part a reader takes in at a glance (the chart of the verdicts, the machine, the
commits, the comparison with tokens per second, parameter counts and spreads, the commands that reproduce
each table); the functions below render the detailed tables it includes. The rule texts come from the
modules that own the rules (tr2.series for the verdict, tr2.method_a and tr2.method_b for the checks).
"""
from __future__ import annotations

import html
from pathlib import Path

STAGE_TITLES = {
    "series": "Step time: the series (protocol rules 10-16)",
    "method_a": "Correctness, method A: families of runs (rules 40-42)",
    "method_b": "Correctness, method B: one shared start (rules 50-54)",
    "footprint": "What each side needs at run time: the footprint (rules 60-62)",
    "families": "Where the time goes: kernel families (rules 30-33)",
}


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
        '(docs/protocol.md: its general rules 1-9, the clock of rules 10-16, the verdicts of rules 20-22 and the checks '
        f'of rules 40-54). Stitched {_e(data["generated"])}'
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
            'Ratio: the cupy median over PyTorch\'s. Verdicts (protocol rules 20-21): <i>faster</i> when the cupy side\'s '
            'slowest run is faster than the fastest run of PyTorch\'s fastest mode; <i>level</i> when not faster and its '
            f'median less than {_level_pct()}% above; <i>slower</i> when {_level_pct()}% or more above. A configuration '
            'whose correctness checks (method A for its model and type, method B for its model) have not both passed has '
            'no verdict, and its speed is withheld (protocol rule 6). Each row links its raw data.')


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
                    f'the comparison is against the fastest of the modes that ran (protocol rules 8.2 and 20). '
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
            f"batch order, dropout 0, float32 without TF32; step 0 within {_mb().STEP0_REL:g} relative, each judged step within "
            f"{100 * _mb().STEP_REL:g}%. "
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
            f"trained (protocol rule 61). {docker_line} Card {_e(c.get('card'))}, {_e(c.get('date'))}, commit "
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


def _level_pct() -> str:
    from .. import series  # the verdict rule's owner
    return f"{100 * (series.LEVEL_RATIO - 1):g}"


def _mb():
    from .. import method_b  # method B's tolerances' owner
    return method_b


def verdict_rule_text() -> str:
    from .. import series
    return (f"faster when the cupy side's slowest run is faster than the fastest run of PyTorch's fastest mode; level "
            f"when not faster and its median less than {_level_pct()}% above; slower otherwise (tr2.series.compare, "
            f"level below a ratio of {series.LEVEL_RATIO:g})")


def verdict_chart_svg(data) -> str:
    """The verdicts at a glance: per model and type (primary builds) the ratio of medians, cupy over PyTorch's
    fastest mode, with the range from (cupy fastest / PyTorch slowest) to (cupy slowest / PyTorch fastest);
    lines at 1 (equal) and at the level threshold. A withheld speed is a label, not a point. Inline SVG."""
    import io

    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from .. import series
    rows = [r for r in data["rows"] if r["primary"]]
    if not rows:
        return ""
    colours = {"faster": "#1a7f37", "level": "#9a6700", "slower": "#cf222e"}
    fig, ax = plt.subplots(figsize=(7.5, 0.55 * len(rows) + 1.3))
    his = [1.0]
    for y, r in enumerate(rows):
        if not r["speed_published"]:
            ax.text(1.0, y, "  withheld: " + (r["withheld"] or "no verdict")[:70], va="center", fontsize=8, color="#555")
            continue
        cu, to = r["cupy"], r["torch"]
        lo, hi = cu["fastest"] / to["slowest"], cu["slowest"] / to["fastest"]
        his += [lo, hi]
        c = colours.get(r["verdict"], "#444")
        ax.errorbar([r["ratio"]], [y], xerr=[[r["ratio"] - lo], [hi - r["ratio"]]], fmt="o", color=c, capsize=4)
        ax.annotate(f"{r['ratio']:.3g} {r['verdict']}", (r["ratio"], y), xytext=(0, 7), textcoords="offset points",
                    ha="center", fontsize=8, color=c)
    ax.axvline(1.0, color="#888", lw=1)
    ax.axvline(series.LEVEL_RATIO, color="#bbb", lw=1, ls="--")
    ax.set_yticks(range(len(rows)), [f"{r['model']} {r['dtype']}" for r in rows])
    ax.set_ylim(-0.7, len(rows) - 0.3)
    ax.invert_yaxis()
    ax.set_xlim(min(0.9, min(his) * 0.95), max(his) * 1.08)
    ax.set_xlabel("cupy step time / PyTorch's fastest mode (below 1: cupy faster)")
    fig.tight_layout()
    buf = io.StringIO()
    fig.savefig(buf, format="svg")
    plt.close(fig)
    svg = buf.getvalue()
    return svg[svg.index("<svg"):]


def _template():
    import jinja2
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(str(Path(__file__).parent)), autoescape=True,
                             undefined=jinja2.StrictUndefined, trim_blocks=True, lstrip_blocks=True)
    env.filters.update(ms=fmt_ms, ratio=fmt_ratio, mb=fmt_mb,
                       pct=lambda x: "—" if x is None else f"{x:.2g}%",
                       rate=lambda x: "—" if x is None else f"{x:,.0f}",
                       count=lambda x: "—" if x is None else (f"{x / 1e6:.2f} M" if x >= 1e6 else f"{x:,}"),
                       gib=lambda x: "not recorded" if x is None else f"{x / 2**30:.1f} GiB")
    return env.get_template("front.html.j2")


def front_page_html(data) -> str:
    """The front page: front.html.j2 filled directly from the verdict table."""
    from markupsafe import Markup
    details = [verdict_table_html(data), halves_table_html(data), oom_html(data), correctness_html(data),
               footprint_html(data), conditions_html(data)]
    return _template().render(
        d=data, front_matter=Markup(front_matter_html(data)), contents=Markup(contents_html(data)),
        chart=Markup(verdict_chart_svg(data)), verdict_rule=verdict_rule_text(),
        primary=[r for r in data["rows"] if r["primary"]], details=Markup("\n".join(x for x in details if x)))
