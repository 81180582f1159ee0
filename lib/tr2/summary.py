"""What the stages' summaries share: statistics, the conditions every number carries, CSV and the write order."""
from __future__ import annotations

import csv
import io
import math
import sys
from pathlib import Path

from .cards import load_card
from .results import read_json, write_json_atomic, write_text_atomic

VERSIONS = ("python", "numpy", "torch", "torch_cuda", "cudnn", "cupy", "triton")


def stats(values) -> dict:
    """n, median, min, max and range of a list of numbers (NaN and inf kept out, counted)."""
    values = list(values)
    vals = sorted(float(v) for v in values if v is not None and math.isfinite(float(v)))
    bad = len(values) - len(vals)
    if not vals:
        return {"n": 0, "median": None, "min": None, "max": None, "range": None, "nonfinite": bad}
    n = len(vals)
    med = vals[n // 2] if n % 2 else 0.5 * (vals[n // 2 - 1] + vals[n // 2])
    return {"n": n, "median": med, "min": vals[0], "max": vals[-1], "range": vals[-1] - vals[0], "nonfinite": bad}


def load_dir_card(results_dir) -> dict:
    return load_card(Path(results_dir) / "card.yaml")


def conditions(results_dir) -> dict:
    """What every number carries (docs/protocol.md, rule 4): card, machine and versions, date, commit."""
    d = Path(results_dir)
    machine = read_json(d / "machine.json")
    card = load_dir_card(d) if (d / "card.yaml").is_file() else None
    return {"card": card, "machine": machine, "date": machine.get("date"), "commit": machine.get("commit"),
            "dirty": machine.get("dirty"), "results_dir": str(d)}


def condition_fields(card: dict, machine: dict) -> dict:
    """The same conditions as one flat block (a summary's `conditions`)."""
    gpus = machine.get("gpus")
    return {"card": card.get("card"), "machine": card.get("machine"), "device": card.get("device"),
            "versions": {k: machine.get(k) for k in VERSIONS}, "gpus": gpus, "host": machine.get("host"),
            "gpu": (gpus or [{}])[0].get("name") if card.get("device") == "cuda" else None,
            "commit": machine.get("commit"), "dirty": machine.get("dirty"), "date": machine.get("date")}


def write_csv(path, rows, fields) -> None:
    """rows (dicts) as CSV with these columns; None is an empty cell."""
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=fields, extrasaction="ignore", lineterminator="\n")
    w.writeheader()
    for r in rows:
        w.writerow({k: ("" if r.get(k) is None else r.get(k)) for k in fields})
    write_text_atomic(path, buf.getvalue())


def write_summary(d: Path, summary: dict, draw) -> dict:
    """summary.json first, then the stage's plot: a plot that fails records why and never loses the numbers."""
    write_json_atomic(Path(d) / "summary.json", summary)
    try:
        draw()
    except Exception as e:  # noqa: BLE001
        summary["plot_error"] = repr(e)
        write_json_atomic(Path(d) / "summary.json", summary)
    return summary


def finish(d, summary: dict, records, draw) -> dict:
    """A stage's summary with its wall time and conditions, written: summary.json first, then the plot."""
    summary.update(wall_s=wall_s(records), **conditions(d))
    return write_summary(d, summary, draw)


def all_passed(judged: list):
    """A stage's verdict from its parts': None when any part has none (or there is no part), else all passed."""
    return (None if any(p is None for p in judged) else all(judged)) if judged else None


def wall_s(records) -> float:
    return round(sum(r.get("wall_s") or 0 for r in records), 1)


def pyplot():
    """matplotlib's pyplot, drawing off screen outside a notebook."""
    import matplotlib
    if "ipykernel" not in sys.modules:
        matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt


def save_figure(fig, path, title: str) -> Path:
    """The stage's plot under its title, written beside its numbers and closed."""
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    pyplot().close(fig)
    return Path(path)
