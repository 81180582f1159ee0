"""The plots of notebooks/explore.ipynb, drawn from tr2.explore's tables (each returns its figure)."""
from __future__ import annotations

import numpy as np

from .summary import pyplot

SIDE_COLORS = {"torch": "tab:blue", "cupy": "tab:orange"}


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


def step_time_boxes(step_times):
    """Step-time distributions per configuration side by side: one panel per series folder (the scales of a
    CPU and a GPU folder have nothing in common), a box and the runs' points per configuration."""
    folders = list(dict.fromkeys(step_times["folder"]))
    fig, axes = _panels(len(folders), width=6.0, ncols=2)
    for ax, f in zip(axes, folders):
        d = step_times[step_times["folder"] == f]
        configs = sorted(d["config"].unique())
        data = [d.loc[d["config"] == c, "step_ms"].to_numpy() for c in configs]
        ax.boxplot(data, vert=False, widths=0.5)
        for i, ys in enumerate(data, start=1):
            ax.plot(ys, np.full(len(ys), i), "o", color="tab:red", alpha=0.6, ms=4)
        ax.set_yticks(range(1, len(configs) + 1), configs, fontsize=8)
        ax.set_xlabel("ms per step (outside clock)")
        ax.set_title(f, fontsize=9)
    fig.tight_layout()
    return fig


def bands(bands_a):
    """Method A: the validation loss of each side, median over the seeds with its range shaded."""
    groups = list(bands_a.groupby(["folder", "model", "dtype"], sort=False))
    fig, axes = _panels(len(groups))
    for ax, ((f, m, t), d) in zip(axes, groups):
        for side, s in d.groupby("side"):
            ax.plot(s["step"], s["median"], color=SIDE_COLORS.get(side), label=f"{side} (n={s['n'].max()})")
            ax.fill_between(s["step"], s["min"], s["max"], color=SIDE_COLORS.get(side), alpha=0.25)
        _steps_axis(ax, f"{f}\n{m}, {t}", "validation loss")
    fig.tight_layout()
    return fig


def method_b(curves_b):
    """Method B: each run's relative difference from the torch run, log scale; the floors dashed grey."""
    groups = list(curves_b.dropna(subset=["rel"]).groupby(["folder", "model"], sort=False))
    fig, axes = _panels(len(groups))
    for ax, ((f, m), d) in zip(axes, groups):
        for run, s in d.groupby("run"):
            floor = bool(s["floor"].iloc[0])
            # a difference of exactly 0 has no place on a log axis: drawn at the axis' bottom instead
            ax.plot(s["step"], s["rel"].clip(lower=1e-9), lw=1, label=run, ls="--" if floor else "-",
                    color=None if not floor else {"floor_none": "0.2", "floor_once": "0.5"}.get(run, "0.75"))
        ax.set_yscale("log")
        _steps_axis(ax, f"{f}\n{m}", "|loss - torch| / torch")
    fig.tight_layout()
    return fig


def family_bars(families):
    """Kernel families: microseconds per step of each family, one stacked bar per profiled run."""
    table = families.assign(run=families["card"] + ": " + families["label"]).pivot_table(
        index="run", columns="family", values="us_per_step", aggfunc="sum").fillna(0.0)
    table = table[table.sum().sort_values(ascending=False).index]
    fig, ax = _panels(1, width=9.0, height=0.6 * len(table) + 1.8)
    table.plot.barh(stacked=True, ax=ax[0], colormap="tab20")
    ax[0].set_xlabel("µs per step")
    ax[0].legend(fontsize=7, ncols=2, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    fig.tight_layout()
    return fig


def comparison(cmp):
    """Two folders compared (tr2.explore.compare): b - a along the steps where rows have steps, else a and b
    side by side per row."""
    fig, axes = _panels(1, width=8.0)
    ax = axes[0]
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
