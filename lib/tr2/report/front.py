"""The front page of TR-2, front.html.j2 filled directly from the verdict table (no notebook round trip). The
rule texts' numbers come from the modules that own the rules (tr2.series for the verdict, tr2.method_b for the
tolerances)."""
from __future__ import annotations

import io
from pathlib import Path

import jinja2
from markupsafe import Markup

from .. import method_b, series
from ..summary import pyplot

STAGE_TITLES = {
    "series": "Step time: the series (protocol rules 10-16)",
    "method_a": "Correctness, method A: families of runs (rules 40-42)",
    "method_b": "Correctness, method B: one shared start (rules 50-54)",
    "footprint": "What each side needs at run time: the footprint (rules 60-62)",
    "families": "Where the time goes: kernel families (rules 30-33)",
}
LEVEL_PCT = f"{100 * (series.LEVEL_RATIO - 1):g}"
VERDICT_RULE = (f"faster when the cupy side's slowest run is faster than the fastest run of PyTorch's fastest mode; "
                f"level when not faster and its median less than {LEVEL_PCT}% above; slower otherwise "
                f"(tr2.series.compare, level below a ratio of {series.LEVEL_RATIO:g})")


def _none_as(text: str, fmt):
    """The format fmt, with `text` for a number not recorded (None)."""
    return lambda x: text if x is None else fmt(x)


def fmt_ms(x) -> str:
    if x is None:
        return "—"
    x = float(x)
    return f"{x:.3f}" if x < 10 else (f"{x:.2f}" if x < 100 else f"{x:.1f}")


fmt_ratio = _none_as("—", lambda x: f"{float(x):.3f}")


def verdict_chart_svg(data) -> str:
    """The verdicts at a glance: per model and type (primary builds) the ratio of medians, cupy over PyTorch's
    fastest mode, with the range from (cupy fastest / PyTorch slowest) to (cupy slowest / PyTorch fastest);
    lines at 1 (equal) and at the level threshold. A withheld speed is a label, not a point. Inline SVG."""
    plt = pyplot()
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
    # the same chart the same bytes: ids from a fixed salt and no date, so that a restitch changes the page only where
    # its numbers or words change
    with plt.rc_context({"svg.hashsalt": "tr2-verdict-chart"}):
        fig.savefig(buf, format="svg", metadata={"Date": None})
    plt.close(fig)
    svg = buf.getvalue()
    return svg[svg.index("<svg"):]


def method_a_chart_svg(data) -> str:
    """Method A at a glance: per model and type, each judged evaluation's difference of the two sides' medians (cupy's
    less torch's) over what rule 41 allows there (the larger range), against the step; lines at +-1, beyond which the
    check fails. The curves' own plot shows losses on a scale where these differences cannot be seen, and the sign
    shows a lean of one side that the verdict, which reads the size alone, does not. Inline SVG; "" where no row has
    judged evaluations."""
    seen, series_ = set(), []
    for r in data["rows"]:
        c = (r.get("method_a") or {}).get("closest") or {}
        if (r["model"], r["dtype"]) not in seen and c.get("shares"):
            seen.add((r["model"], r["dtype"]))
            series_.append((f"{r['model']} {r['dtype']}", c["shares"]))
    if not series_:
        return ""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(7.5, 3.2))
    top = 1.0
    for label, pts in series_:
        xs, ys = zip(*pts)
        ax.plot(xs, ys, marker=".", lw=1, label=label)
        top = max(top, *map(abs, ys))
    ax.axhline(1.0, color="#cf222e", lw=1, ls="--", label="the limit (rule 41)")
    ax.axhline(-1.0, color="#cf222e", lw=1, ls="--")
    ax.axhline(0.0, color="#888", lw=0.8)
    ax.set_ylim(-top * 1.1, top * 1.1)
    ax.set_xlabel("training step of the evaluation")
    ax.set_ylabel("(cupy - torch median) / larger range")
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.0, 1.0), frameon=False)
    fig.tight_layout()
    buf = io.StringIO()
    with plt.rc_context({"svg.hashsalt": "tr2-method-a-chart"}):
        fig.savefig(buf, format="svg", metadata={"Date": None})
    plt.close(fig)
    svg = buf.getvalue()
    return svg[svg.index("<svg"):]


def _template():
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(str(Path(__file__).parent)), autoescape=True,
                             undefined=jinja2.StrictUndefined, trim_blocks=True, lstrip_blocks=True,
                             finalize=lambda x: "" if x is None else x)  # None shows as nothing
    env.filters.update(ms=fmt_ms, ratio=fmt_ratio, mb=_none_as("—", lambda b: f"{b / 1e6:.1f}"),
                       check=lambda c: {True: "passed", False: "failed"}.get(c.get("passed"), "no verdict"),
                       dv=_none_as("", lambda x: repr(float(x))), pct=_none_as("—", "{:.2g}%".format),
                       rate=_none_as("—", "{:,.0f}".format),
                       count=_none_as("—", lambda x: f"{x / 1e6:.2f} M" if x >= 1e6 else f"{x:,}"),
                       gib=_none_as("not recorded", lambda x: f"{x / 2**30:.1f} GiB"))
    return env.get_template("front.html.j2")


def front_page_html(data) -> str:
    """The front page: front.html.j2 filled directly from the verdict table."""
    checks = {}
    for r in data["rows"]:  # the correctness checks of each model and type, once
        checks.setdefault((r["model"], r["dtype"]), r)
    return _template().render(
        d=data, chart=Markup(verdict_chart_svg(data)), a_chart=Markup(method_a_chart_svg(data)),
        verdict_rule=VERDICT_RULE, titles=STAGE_TITLES,
        primary=[r for r in data["rows"] if r["primary"]], checks=list(checks.values()), level_pct=LEVEL_PCT,
        step0_rel=f"{method_b.STEP0_REL:g}", step_pct=f"{100 * method_b.STEP_REL:g}")
