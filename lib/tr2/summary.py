"""What the stages' summaries share: statistics, CSV, the write order (summary.json with its conditions, then the plot)."""
from __future__ import annotations

import csv
import io
import math
import statistics
import sys
from pathlib import Path

from .cards import load_card
from .results import conditions as folder_conditions
from .results import write_json_atomic, write_text_atomic

def stats(values) -> dict:
    """n, median, min, max and range of a list of numbers (NaN and inf kept out, counted)."""
    values = list(values)
    vals = sorted(float(v) for v in values if v is not None and math.isfinite(float(v)))
    bad = len(values) - len(vals)
    if not vals:
        return {"n": 0, "median": None, "min": None, "max": None, "range": None, "nonfinite": bad}
    return {"n": len(vals), "median": statistics.median(vals), "min": vals[0], "max": vals[-1],
            "range": vals[-1] - vals[0], "nonfinite": bad}


def load_dir_card(results_dir) -> dict:
    return load_card(Path(results_dir) / "card.yaml")


def write_csv(path, rows, fields) -> None:
    """rows (dicts) as CSV with these columns; None is an empty cell."""
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=fields, lineterminator="\n")
    w.writeheader()
    w.writerows({k: ("" if r.get(k) is None else r.get(k)) for k in fields} for r in rows)
    write_text_atomic(path, buf.getvalue())


def finish(d, summary: dict, records, plot=None, **conditions) -> dict:
    """A stage's summary written with its wall time and its conditions (the folder's, tr2.results.conditions,
    then the stage's own): summary.json first, then `plot()`, which draws the stage's figure from it; a plot
    that fails records why and never loses the numbers."""
    summary.update(wall_s=round(sum(r.get("wall_s") or 0 for r in records), 1),  # the runs' own time, summed
                   conditions={**folder_conditions(d), **conditions})
    write_json_atomic(Path(d) / "summary.json", summary)
    try:
        if plot is not None:
            plot()
    except Exception as e:  # noqa: BLE001
        summary["plot_error"] = repr(e)
        write_json_atomic(Path(d) / "summary.json", summary)
    return summary


def all_passed(judged: list):
    """A stage's verdict from its parts': None when any part has none (or there is no part), else all passed."""
    return (None if any(p is None for p in judged) else all(judged)) if judged else None


def pyplot():
    """matplotlib's pyplot, drawing off screen outside a notebook."""
    import matplotlib
    if "ipykernel" not in sys.modules:
        matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt


def save_figure(fig, path, title: str) -> Path:
    """The stage's plot under its title, written beside its numbers (atomically) and closed."""
    fig.suptitle(title)
    fig.tight_layout()
    tmp = Path(path).with_name(f".{Path(path).name}.tmp.png")
    fig.savefig(tmp, dpi=110)
    tmp.replace(path)
    pyplot().close(fig)
    return Path(path)
