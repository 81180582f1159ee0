"""The plots of the results, drawn from tr2.explore's tables (each returns its figure): the stages save them
in their folders (series.png, method_a.png, method_b.png, families.png, bytes.png), notebooks/explore.ipynb
draws them over any folders it selects."""
from __future__ import annotations

import numpy as np

from .summary import pyplot

SIDE_COLORS = {"torch": "tab:blue", "cupy": "tab:orange", "nanogpt": "tab:green"}


def _panels(n, width=5.0, height=3.6, ncols=3):
    """n panels in rows of at most ncols (a notebook's width holds three); the unused ones hidden."""
    plt = pyplot()
    n = max(n, 1)
    cols, rows = min(n, ncols), -(-n // ncols)
    fig, axes = plt.subplots(rows, cols, figsize=(width * cols, height * rows), squeeze=False)
    axes = list(axes.flat)
    for ax in axes[n:]:
        ax.set_visible(False)
    return fig, axes[:n]


def _steps_axis(ax, title, ylabel):
    ax.set_title(title, fontsize=9)
    ax.set_xlabel("step")
    ax.set_ylabel(ylabel)
    ax.legend(fontsize=7)


def step_time_boxes(runs):
    """Step times per configuration side by side, from a series' runs (tr2.explore.runs): a panel per folder
    and model (the scales of a CPU and a GPU folder have nothing in common), a box of the valid timed runs with
    each run a point; the discarded runs (round 0) open circles, void runs crosses."""
    groups = list(runs.groupby(["folder", "model"], sort=False))
    fig, axes = _panels(len(groups), width=6.0, ncols=2)
    for ax, ((f, m), d) in zip(axes, groups):
        configs = sorted(d["config"].unique())
        timed = d[d["round"] > 0]
        valid = timed[timed["valid"] == True]  # noqa: E712 - None is not valid
        ax.boxplot([valid.loc[valid["config"] == c, "step_ms"].to_numpy() for c in configs], widths=0.5)
        for part, style in ((valid, dict(marker="o", color="tab:red", alpha=0.6)),
                            (d[d["round"] == 0], dict(marker="o", mfc="none", color="grey")),
                            (timed[timed["void"].notna()], dict(marker="x", color="black"))):
            for i, c in enumerate(configs, start=1):
                ys = part.loc[part["config"] == c, "step_ms"].dropna().to_numpy()
                ax.plot(np.full(len(ys), i), ys, ls="none", ms=4, **style)
        ax.set_xticks(range(1, len(configs) + 1), [c.split("/", 1)[1].replace("/", "\n") for c in configs], fontsize=7)
        ax.set_ylabel("ms per step (outside clock)")
        ax.set_xlabel("circles: discarded runs, x: void runs", fontsize=8)
        ax.set_title(f"{f}\n{m}", fontsize=9)
    fig.tight_layout()
    return fig


SIDE_ORDER = ("torch", "nanogpt", "cupy")   # the reference first; the cupy side drawn over it


def _sides(names):
    return sorted(names, key=lambda s: (SIDE_ORDER.index(s) if s in SIDE_ORDER else len(SIDE_ORDER), s))


def _plain_log_ticks(ax):
    """A log y axis labelled in plain numbers (4, 5, 6 rather than 4x10^0): a loss spans less than a decade."""
    from matplotlib.ticker import FuncFormatter, MaxNLocator, NullLocator
    ax.set_yscale("log")
    # ticks at round values (4, 5, 6 or 1.5, 2, 2.5): the log axis' own fall on its decades, outside a loss' span
    ax.yaxis.set_major_locator(MaxNLocator(nbins=8, steps=[1, 2, 2.5, 5, 10]))
    ax.yaxis.set_minor_locator(NullLocator())
    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))


def _judge_from_of(judge_from, verdicts, folder, model, dtype):
    """The first judged step of one configuration: `judge_from` where given, else its row of `verdicts`."""
    if judge_from is not None:
        return judge_from
    if verdicts is None or verdicts.empty:
        return None
    rows = verdicts[(verdicts["folder"] == folder) & (verdicts["model"] == model) & (verdicts["dtype"] == dtype)]
    values = rows["judge_from"].dropna()
    return None if values.empty else values.iloc[0]


def _verdict_said(verdicts, folder, model, dtype):
    if verdicts is None or verdicts.empty:
        return None
    rows = verdicts[(verdicts["folder"] == folder) & (verdicts["model"] == model) & (verdicts["dtype"] == dtype)]
    if rows.empty:
        return None
    passed = rows["passed"].iloc[0]
    return "no verdict" if passed is None or passed != passed else ("passed" if passed else "failed")


def method_a(curves_a, judge_from=None, verdicts=None):
    """Method A with every seed's curve (protocol §7 A: all the curves of a configuration on one plot), from the
    evaluations of tr2.explore.curves_a: a row per folder, model and type, three panels.

    Left, the whole run (log axis, the loss falls from the initial ~11 or ~4): each seed's validation loss a thin
    line in its side's colour, the median over the side's seeds a thick one, the judged evaluations shaded. Middle,
    the judged evaluations alone, zoomed: the same lines, each side's range over its seeds shaded (what rule 41
    compares). Right, rule 41 at each judged evaluation: |median_torch - median_cupy| (a dot; a red cross where it
    exceeds) against the larger of the two ranges (a bar), from the curves drawn. `judge_from`: the first judged
    step (the card's method_a.judge_from); where None, each configuration's from `verdicts`
    (tr2.explore.verdicts_a), which also names the verdict, else the second evaluation on. Each seed's line
    carries the gid "<side> seed <seed>"."""
    plt = pyplot()
    data = curves_a.dropna(subset=["val"]) if not curves_a.empty else curves_a
    groups = list(data.groupby(["folder", "model", "dtype"], sort=False)) if not data.empty else []
    rows = max(len(groups), 1)
    fig, axes = plt.subplots(rows, 3, figsize=(16.0, 4.0 * rows), squeeze=False,
                             gridspec_kw={"width_ratios": [1.0, 1.0, 0.75]})
    if not groups:
        for ax in axes.flat:
            ax.set_visible(False)
    for (whole, zoom, rule), ((f, m, t), d) in zip(axes, groups):
        sides = _sides(d["side"].unique())
        steps = sorted(d["step"].unique())
        start = _judge_from_of(judge_from, verdicts, f, m, t)
        given = start is not None
        if not given:   # no judged step named: the evaluations after the first (the initial loss towers over them)
            start = steps[1] if len(steps) > 1 else steps[0]
        fam = d.groupby(["side", "step"])["val"].agg(["median", "min", "max", "count"])
        for side in sides:
            color, s = SIDE_COLORS.get(side), d[d["side"] == side]
            seeds = sorted(s["seed"].unique())
            med = fam.loc[side]
            for i, seed in enumerate(seeds):
                c = s[s["seed"] == seed].sort_values("step")
                label = (f"{side}: {len(seeds)} seeds" if len(seeds) > 1 else f"{side}: seed {seed}") if i == 0 else None
                for ax, part in ((whole, c), (zoom, c[c["step"] >= start])):
                    ax.plot(part["step"], part["val"], color=color, lw=0.8, alpha=0.75, label=label,
                            gid=f"{side} seed {seed}")
            if len(seeds) > 1:
                for ax, part in ((whole, med), (zoom, med[med.index >= start])):
                    ax.plot(part.index, part["median"], color=color, lw=2.6, alpha=0.9, label=f"{side}: median",
                            gid=f"{side} median")
                part = med[med.index >= start]
                zoom.fill_between(part.index, part["min"], part["max"], color=color, alpha=0.15, lw=0,
                                  label=f"{side}: range")
        end = max(steps)
        whole.axvspan(start, end, color="0.92", zorder=0,
                      label=f"judged: steps {start:g} on" if given else f"zoomed: steps {start:g} on")
        _plain_log_ticks(whole)
        whole.set_title(f"{f}\n{m}, {t}: the whole run", fontsize=9)
        whole.set_xlabel("step")
        whole.set_ylabel("validation loss (log axis)")
        whole.legend(fontsize=7, loc="upper right")
        zoom.set_title(f"judged evaluations (step {start:g} on)" if given else f"steps {start:g} on (no judged step "
                       "given)", fontsize=9)
        zoom.set_xlabel("step")
        zoom.set_ylabel("validation loss")
        zoom.legend(fontsize=7, loc="best", ncols=2)
        _rule_panel(rule, fam, sides, start, _verdict_said(verdicts, f, m, t))
    fig.tight_layout()
    return fig


def _rule_panel(ax, fam, sides, start, verdict=None):
    """Rule 41 at each evaluation from `start` on: the medians' distance against the larger range."""
    ref, other = ("torch", "cupy") if {"torch", "cupy"} <= set(sides) else (tuple(sides[:2]) + (None, None))[:2]
    title = f"rule 41: |median {ref} - median {other}|" + (f"\nverdict: {verdict}" if verdict else "")
    if other is None:
        ax.text(0.5, 0.5, "one side only: nothing to compare", ha="center", va="center", transform=ax.transAxes)
        ax.set_title(title, fontsize=9)
        return
    a, b = fam.loc[ref], fam.loc[other]
    both = a.index.intersection(b.index)
    both = both[both >= start]
    a, b = a.loc[both], b.loc[both]
    diff = (a["median"] - b["median"]).abs()
    allowed = np.maximum(a["max"] - a["min"], b["max"] - b["min"])
    if len(both) and min(a["count"].min(), b["count"].min()) < 2:
        # a side of one seed has no range: the distance is read, not judged (rule 42), so neither bar nor cross
        ax.plot(both, diff, ls="none", marker="o", ms=4, color="0.4", label="|median difference| (read)")
        title += "\na side of one seed: no range, nothing judged (rule 42)"
    else:
        width = 0.6 * (np.diff(both).min() if len(both) > 1 else 1.0)
        ax.bar(both, allowed, width=width, color="0.8", label="allowed: the larger range")
        ok = diff <= allowed
        if ok.any():
            ax.plot(both[ok], diff[ok], ls="none", marker="o", ms=4, color="tab:green",
                    label="|median difference|: within")
        if (~ok).any():
            ax.plot(both[~ok], diff[~ok], ls="none", marker="x", ms=7, mew=2, color="tab:red",
                    label="|median difference|: over")
    ax.set_ylim(bottom=0)
    ax.set_title(title, fontsize=9)
    ax.set_xlabel("step")
    ax.set_ylabel("validation loss difference")
    ax.legend(fontsize=7, loc="upper left")


FLOOR_GREYS = {"floor_none": "0.2", "floor_once": "0.5", "floor_every": "0.7"}
ALSO_COLORS = ("tab:purple", "tab:brown", "tab:pink", "tab:olive", "tab:cyan")


def _b_style(run, also):
    """How method B draws a run, alike in both panels: the torch side thick and pale beneath, the cupy side thin on
    top of it (where they agree both stay visible), nanoGPT's loop green, the floors dashed grey, the card's extra
    runs dotted."""
    if run == "torch":
        return dict(color=SIDE_COLORS["torch"], lw=2.6, alpha=0.55, zorder=3)
    if run in ("cupy", "nanogpt"):
        return dict(color=SIDE_COLORS[run], lw=1.0, zorder=4)
    if run.startswith("floor_"):
        return dict(color=FLOOR_GREYS.get(run, "0.8"), lw=0.9, ls="--", zorder=2)
    return dict(color=ALSO_COLORS[also.index(run) % len(ALSO_COLORS)], lw=0.9, ls=":", zorder=2)


def _b_against(run):
    """The run a method B run's relative difference is taken from (tr2.method_b.RELS and ALSO)."""
    if run in ("floor_once", "floor_every"):
        return "floor_none"
    return run.split("-", 1)[0] if "-" in run else "torch"


def _b_runs(runs):
    """Method B's runs in drawing order: the floors, the extra runs, nanoGPT's loop, the torch side, the cupy side."""
    def rank(r):
        return (0 if r.startswith("floor_") else 1 if r not in ("nanogpt", "torch", "cupy")
                else {"nanogpt": 2, "torch": 3, "cupy": 4}[r], r)
    return sorted(runs, key=rank)


def method_b(curves_b, verdicts=None, lines=()):
    """Method B (protocol §7 B: both curves on one plot), per folder and model two panels on one step axis. Above,
    every run's loss against the step (log axis): the torch and cupy sides, nanoGPT's loop and the floor runs where
    the folder holds them. Below, each run's relative difference from the run it is read against, log scale (the
    cupy side and nanoGPT's loop from the torch side, the perturbed floors from the unperturbed one, that from the
    torch side; a difference of exactly 0 at the axis' bottom); `lines`: (label, y) pairs, the rule's tolerances.
    With `verdicts` (tr2.explore.verdicts_b), the judged steps 0..J shaded in both panels (J = W where the floors
    set it) and a line at J where it falls short of the last step. Each run's lines carry the gid "loss <run>" and
    "rel <run>"."""
    plt = pyplot()
    data = curves_b.dropna(subset=["loss"]) if not curves_b.empty else curves_b
    groups = list(data.groupby(["folder", "model"], sort=False)) if not data.empty else []
    n = max(len(groups), 1)
    cols, rows = min(n, 2), -(-n // 2)
    fig, axes = plt.subplots(2 * rows, cols, figsize=(7.0 * cols, 7.6 * rows), squeeze=False,
                             gridspec_kw={"height_ratios": [1.0, 1.1] * rows})
    pairs = [(axes[2 * (i // cols), i % cols], axes[2 * (i // cols) + 1, i % cols]) for i in range(rows * cols)]
    for top, bottom in pairs[len(groups):]:
        top.set_visible(False)
        bottom.set_visible(False)
    for (top, bottom), ((f, m), d) in zip(pairs, groups):
        bottom.sharex(top)
        runs = _b_runs(d["run"].unique())
        also = [r for r in runs if not r.startswith("floor_") and r not in ("torch", "cupy", "nanogpt")]
        for run in runs:
            s, style = d[d["run"] == run].sort_values("step"), _b_style(run, also)
            top.plot(s["step"], s["loss"], label=run, gid=f"loss {run}", **style)
            r = s.dropna(subset=["rel"])
            if not r.empty:
                # a difference of exactly 0 has no place on a log axis: drawn at the axis' bottom instead
                bottom.plot(r["step"], r["rel"].clip(lower=1e-9), label=f"{run} vs {_b_against(run)}",
                            gid=f"rel {run}", **{**style, "lw": min(style["lw"], 1.2), "alpha": 1.0})
        for (label, y), ls in zip(lines, ("--", ":", "-.", (0, (1, 3)))):
            bottom.axhline(y, color="k", ls=ls, lw=0.8, label=label)
        judged = [] if verdicts is None else verdicts.loc[(verdicts["folder"] == f) & (verdicts["model"] == m)]
        for v in [] if len(judged) == 0 else judged.itertuples():
            j = v.judged_through
            if j is None or j != j:
                continue
            w = getattr(v, "W", None)
            said = f"judged: steps 0..{j:g}" + (" (W of the floors)" if w is not None and w == w and w == j else "")
            for ax in (top, bottom):
                ax.axvspan(0, j, color="tab:green", alpha=0.07, lw=0, zorder=0, label=said if ax is top else None)
                if j < d["step"].max():  # judged short of the last step: later steps judge nothing
                    ax.axvline(j, color="grey", ls="-.", lw=1, label=f"judged through step {j:g}" if ax is bottom else None)
        _plain_log_ticks(top)
        top.set_title(f"{f}\n{m}: the loss of every run (log axis)", fontsize=9)
        top.set_ylabel("training loss (the step's batch)")
        top.tick_params(labelbottom=False)
        top.legend(fontsize=7, loc="upper right")
        bottom.set_yscale("log")
        bottom.set_title("each run's relative difference from the run it is read against", fontsize=9)
        bottom.set_xlabel("step")
        bottom.set_ylabel("|loss - reference| / reference")
        bottom.legend(fontsize=7, loc="lower right", ncols=2)
    fig.tight_layout()
    return fig


def family_bars(families):
    """Kernel families: microseconds per step of each family, one stacked bar per profiled run."""
    table = families.assign(run=families["card"] + ": " + families["model"] + " " + families["dtype"] + " "
                            + families["label"]).pivot_table(index="run", columns="family", values="us_per_step",
                                                              aggfunc="sum", sort=False).fillna(0.0)
    table = table[table.sum().sort_values(ascending=False).index]
    # the legend below the bars, not beside them: beside, with the runs' long labels on the left, tight_layout left
    # the bars an inch of a 9-inch figure (the H200 edition's families.png)
    legend_rows = -(-len(table.columns) // 4)
    fig, (ax,) = _panels(1, width=10.0, height=0.45 * len(table) + 1.6 + 0.22 * legend_rows)
    table.plot.barh(stacked=True, ax=ax, colormap="tab20", width=0.7)
    ax.set_xlabel("µs per step (the profiled run's kernel time; CPU card: operators' self time)")
    ax.set_ylabel("")
    ax.invert_yaxis()
    ax.legend(fontsize=7, ncols=4, loc="upper center", bbox_to_anchor=(0.5, -0.09 - 0.4 / fig.get_figheight()),
              frameon=False)
    fig.tight_layout()
    return fig


def footprint_bytes(table, categories):
    """The footprint: the bytes of each run's run-time set by category (MB), one stacked bar per run."""
    fig, (ax,) = _panels(1, width=8.0, height=1.8 + 0.45 * max(1, len(table)))
    labels = [f"{r.side} {r.dtype}" + (f" {r.mode}" if isinstance(r.mode, str) and r.mode else "")
              + ("" if r.status == "ok" else f" ({r.status})") for r in table.itertuples()]
    left = np.zeros(len(table))
    for c in categories:
        vals = table[f"bytes_{c}"].to_numpy() / 1e6
        ax.barh(labels, vals, left=left, label=c.replace("_", " "))
        left += vals
    ax.set_xlabel("MB (10^6 bytes) of the run-time set")
    ax.invert_yaxis()
    # the legend under the axis label, as part of the axes, so that any later tight_layout (save_figure's) keeps
    # it clear of the label (a figure legend in a reserved strip was overlapped by it once save_figure laid out again)
    ax.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.12 - 0.35 / fig.get_figheight()), ncols=3,
              frameon=False)
    fig.tight_layout()
    return fig


def comparison(cmp):
    """Two folders compared (tr2.explore.compare): b - a along the steps where rows have steps, else a and b
    side by side per row."""
    fig, (ax,) = _panels(1, width=8.0)
    keys = [c for c in cmp.columns if c not in ("a", "b", "b_over_a", "b_minus_a")]
    if "step" in keys:
        others = [k for k in keys if k != "step"]
        # rows only one folder holds (a seed the other lacks) have no difference to draw
        for name, s in cmp.dropna(subset=["b_minus_a"]).groupby(others, dropna=False):
            ax.plot(s["step"], s["b_minus_a"], lw=1, label=" ".join(map(str, name)))
        ax.set_xlabel("step")
        ax.set_ylabel(f"{cmp.attrs.get('value')}: b - a")
        ax.legend(fontsize=7)
    else:
        labels = [" ".join(map(str, r)) for r in cmp[keys].itertuples(index=False)]
        y = np.arange(len(labels))
        ax.barh(y - 0.2, cmp["a"], height=0.4, label="a")
        ax.barh(y + 0.2, cmp["b"], height=0.4, label="b")
        ax.set_yticks(y, labels, fontsize=8)
        ax.set_xlabel(str(cmp.attrs.get("value")))
        ax.legend(fontsize=8)
    ax.set_title(f"a: {cmp.attrs.get('a')}\nb: {cmp.attrs.get('b')}", fontsize=8)
    fig.tight_layout()
    return fig
