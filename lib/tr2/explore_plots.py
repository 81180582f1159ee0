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


def bands(bands_a, judge_from=None):
    """Method A: the validation loss of each side, median over the seeds with its range shaded; a dotted line at
    `judge_from`, the first judged evaluation, where given."""
    groups = list(bands_a.groupby(["folder", "model", "dtype"], sort=False))
    fig, axes = _panels(len(groups))
    for ax, ((f, m, t), d) in zip(axes, groups):
        for side, s in d.groupby("side"):
            ax.plot(s["step"], s["median"], color=SIDE_COLORS.get(side), marker=".", label=f"{side} (n={s['n'].max()})")
            ax.fill_between(s["step"], s["min"], s["max"], color=SIDE_COLORS.get(side), alpha=0.25)
        if judge_from is not None:
            ax.axvline(judge_from, color="grey", ls=":", lw=1, label="judged from")
        _steps_axis(ax, f"{f}\n{m}, {t}", "validation loss")
    fig.tight_layout()
    return fig


def method_b(curves_b, verdicts=None, lines=()):
    """Method B: each run's relative difference from the torch run, log scale; the floors dashed grey. With
    `verdicts` (tr2.explore.verdicts_b), a line at each model's last judged step; `lines`: (label, y) pairs,
    the rule's tolerances."""
    groups = list(curves_b.dropna(subset=["rel"]).groupby(["folder", "model"], sort=False))
    fig, axes = _panels(len(groups), width=6.5, height=4.2, ncols=2)
    for ax, ((f, m), d) in zip(axes, groups):
        for run, s in d.groupby("run"):
            floor = bool(s["floor"].iloc[0])
            # a difference of exactly 0 has no place on a log axis: drawn at the axis' bottom instead
            ax.plot(s["step"], s["rel"].clip(lower=1e-9), lw=1, label=run, ls="--" if floor else "-",
                    color=None if not floor else {"floor_none": "0.2", "floor_once": "0.5"}.get(run, "0.75"))
        for (label, y), ls in zip(lines, ("--", ":", "-.", (0, (1, 3)))):
            ax.axhline(y, color="k", ls=ls, lw=0.8, label=label)
        for j in [] if verdicts is None else verdicts.loc[(verdicts["folder"] == f) & (verdicts["model"] == m), "judged_through"]:
            if j < d["step"].max():  # judged short of the last step: later steps judge nothing
                ax.axvline(j, color="grey", ls="-.", lw=1, label=f"judged through step {j:g}")
        ax.set_yscale("log")
        _steps_axis(ax, f"{f}\n{m}", "|loss - reference| / reference")
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
