"""Every stage's results folder under results/ as pandas DataFrames, for exploring them (notebooks/explore.ipynb).

The loader reads only the files the stages write (card.yaml, machine.json, runs.jsonl and each stage's CSV
tables) and writes nothing. `index` lists the folders with the card, models, types and commit each ran
with; `select` filters that list; each table function takes such a list (or a folder) and returns one
DataFrame, a row per record, with the folder's name, card and commit in front so that folders can be set
side by side. A folder that lacks a table (a stage stopped early, a stage of another kind) adds no rows.
"""
from __future__ import annotations

from pathlib import Path

import pandas as pd
from .results import STAGES, parse_folder_name, read_json, read_jsonl, read_yaml, results_folders, stage_of
from .retry import drop_retried

FOLDER_COLUMNS = ["folder", "card", "commit"]  # in front of every table's rows


def folder_row(path) -> dict:
    """One folder's line of the index: stage, stamp, the card's name and lists, the machine and commit."""
    p = Path(path)
    name = parse_folder_name(p)
    card, machine = read_yaml(p / "card.yaml"), read_json(p / "machine.json")
    gpus = machine.get("gpus") or []
    return {"folder": p.name, "stage": name.stage, "stamp": name.stamp,
            "card": card.get("card"), "device": card.get("device"),
            "models": tuple(card.get("models") or ()), "dtypes": tuple(card.get("dtypes") or ()),
            "commit": machine.get("commit"), "dirty": machine.get("dirty"), "date": machine.get("date"),
            "host": machine.get("host"), "gpu": gpus[0].get("name") if gpus else None,
            "finished": (p / "summary.json").is_file(), "path": p}


def index(root=None) -> pd.DataFrame:
    """Every stage's results folder under root (default results/), oldest first: one row each."""
    rows = [folder_row(p) for p in results_folders(root)]
    cols = ["folder", "stage", "stamp", "card", "device", "models", "dtypes", "commit", "dirty", "date", "host",
            "gpu", "finished", "path"]
    return pd.DataFrame(rows, columns=cols).sort_values(["stamp", "folder"], ignore_index=True)


def select(idx: pd.DataFrame, stage=None, card=None, model=None, dtype=None, commit=None) -> pd.DataFrame:
    """The folders of the index that match every filter given: stage and card by name, model and dtype
    when the card lists them, commit by prefix (a short hash matches its full one)."""
    keep = pd.Series(True, index=idx.index)
    if stage is not None:
        keep &= idx["stage"] == stage
    if card is not None:
        keep &= idx["card"] == card
    if model is not None:
        keep &= idx["models"].map(lambda ms: model in ms)
    if dtype is not None:
        keep &= idx["dtypes"].map(lambda ts: dtype in ts)
    if commit is not None:
        keep &= idx["commit"].map(lambda c: isinstance(c, str) and c.startswith(commit))
    return idx[keep].reset_index(drop=True)


def _folders(where, stage) -> list[dict]:
    """The index rows of one stage from an index, one folder path, or a list of paths."""
    if isinstance(where, pd.DataFrame):
        rows = where.to_dict("records")
    else:
        paths = [where] if isinstance(where, (str, Path)) else list(where)
        rows = [folder_row(p) for p in paths if stage_of(p)]
    return [r for r in rows if r["stage"] == stage]


def _gather(where, stage, read, model=None, dtype=None) -> pd.DataFrame:
    """read(path) of each folder of the stage, the folder columns in front, then the model and dtype filters."""
    parts = []
    for r in _folders(where, stage):
        df = read(Path(r["path"]))
        if df is None or df.empty:
            continue
        for i, col in enumerate(FOLDER_COLUMNS):
            df.insert(i, col, r[col])
        parts.append(df)
    if not parts:
        return pd.DataFrame(columns=FOLDER_COLUMNS)
    out = pd.concat(parts, ignore_index=True)
    if model is not None and "model" in out:
        out = out[out["model"] == model]
    if dtype is not None and "dtype" in out:
        out = out[out["dtype"] == dtype]
    return out.reset_index(drop=True)


def _csv(name):
    def read(path):
        f = path / name
        return pd.read_csv(f) if f.is_file() and f.stat().st_size else None
    return read


def _series_runs(path):
    # a retried failure stays in runs.jsonl before its rerun's record; the last one counts (tr2.retry)
    records = drop_retried(read_jsonl(path / "runs.jsonl"), lambda r: (r.get("round"), r.get("config")))
    cols = ["round", "config", "model", "dtype", "side", "build", "mode", "half_roundings", "status", "valid",
            "step_ms", "own_step_ms", "own_vs_clock", "peak_bytes", "nvml_peak_bytes", "wall_s", "started", "reason",
            "log"]
    return pd.DataFrame([{c: r.get(c) for c in cols} for r in records], columns=cols) if records else None


def runs(where, model=None, dtype=None) -> pd.DataFrame:
    """Every run of every series (round 0 is the discarded one), as runs.jsonl records it."""
    return _gather(where, "series", _series_runs, model, dtype)


def step_times(where, model=None, dtype=None) -> pd.DataFrame:
    """The step times the series' statistics use: the valid timed runs (ms per step by the outside clock)."""
    r = runs(where, model, dtype)
    if r.empty:
        return r
    return r[(r["round"] > 0) & (r["valid"] == True)].reset_index(drop=True)  # noqa: E712 - None is not valid


def series_table(where, model=None, dtype=None) -> pd.DataFrame:
    """series.csv of each series: per configuration median, range, own reading, memory."""
    return _gather(where, "series", _csv("series.csv"), model, dtype)


def series_verdicts(where, model=None, dtype=None) -> pd.DataFrame:
    """verdicts.csv of each series: per model, type and cupy build, against PyTorch's fastest mode."""
    return _gather(where, "series", _csv("verdicts.csv"), model, dtype)


def curves_a(where, model=None, dtype=None) -> pd.DataFrame:
    """Method A: every evaluation of every seed (method_a.csv): train and validation loss per step."""
    return _gather(where, "method_a", _csv("method_a.csv"), model, dtype)


def bands_a(curves: pd.DataFrame) -> pd.DataFrame:
    """Method A's families: per folder, model, type, side and step the median and range of the validation loss
    over the seeds (what rule 41 compares: medians against the larger range)."""
    keys = ["folder", "card", "commit", "model", "dtype", "side", "step"]
    if curves.empty:
        return pd.DataFrame(columns=keys + ["n", "median", "min", "max", "range"])
    g = curves.groupby(keys, dropna=False)["val"]
    out = g.agg(n="count", median="median", min="min", max="max").reset_index()
    out["range"] = out["max"] - out["min"]
    return out


# method_b.csv names a run's relative difference from the torch run rel_<x>; most x are the run's column
# name, the floors' are shortened (tr2.method_b writes them so)
_REL_OF = {"rel_once": "floor_once", "rel_every": "floor_every", "rel_none_vs_trainer": "floor_none"}


def _method_b_long(path):
    f = path / "method_b.csv"
    if not f.is_file():
        return None
    wide = pd.read_csv(f)
    rel_cols = [c for c in wide if c.startswith("rel_")]
    loss = wide.drop(columns=rel_cols).melt(["model", "step"], var_name="run", value_name="loss")
    rel = wide[["model", "step", *rel_cols]].melt(["model", "step"], var_name="run", value_name="rel")
    rel["run"] = rel["run"].map(lambda c: _REL_OF.get(c, c[len("rel_"):]))
    out = loss.merge(rel, on=["model", "step", "run"], how="left").dropna(subset=["loss"])
    out["floor"] = out["run"].str.startswith("floor_")
    return out.sort_values(["model", "run", "step"], ignore_index=True)


def curves_b(where, model=None) -> pd.DataFrame:
    """Method B in long form: per model, run and step the loss and its relative difference from the torch
    run of the same start; `floor` marks the torch side against itself (the noise floor the cupy run is read
    against), the other runs are the cupy side and the card's extra runs."""
    return _gather(where, "method_b", _method_b_long, model)


def footprint(where, model=None, dtype=None) -> dict:
    """The footprint's tables: footprint (bytes by category per run), libraries, distributions."""
    return {name: _gather(where, "footprint", _csv(f"{name}.csv"), model, dtype)
            for name in ("footprint", "libraries", "distributions")}


def kernel_families(where, model=None, dtype=None) -> pd.DataFrame:
    """families.csv of each families stage: microseconds and launches per step of each kernel family."""
    return _gather(where, "families", _csv("families.csv"), model, dtype)


def kernels(where, model=None, dtype=None) -> pd.DataFrame:
    """kernels.csv: every kernel name with its family, time and launches per step."""
    return _gather(where, "families", _csv("kernels.csv"), model, dtype)


def load(root=None, stage=None, card=None, model=None, dtype=None, commit=None) -> dict:
    """Every table of the folders that match the filters: name -> DataFrame (footprint's three included)."""
    idx = select(index(root), stage=stage, card=card, model=model, dtype=dtype, commit=commit)
    return {"index": idx, "runs": runs(idx, model, dtype), "step_times": step_times(idx, model, dtype),
            "series": series_table(idx, model, dtype), "verdicts": series_verdicts(idx, model, dtype),
            "curves_a": (ca := curves_a(idx, model, dtype)), "bands_a": bands_a(ca),
            "curves_b": curves_b(idx, model), **footprint(idx, model, dtype),
            "families": kernel_families(idx, model, dtype), "kernels": kernels(idx, model, dtype)}


# What two folders of one stage are compared by: the table, the columns that name a row, the number
_COMPARED = {
    "series": (series_table, ["config"], "median_ms"),
    "method_a": (curves_a, ["model", "dtype", "side", "seed", "step"], "val"),
    "method_b": (curves_b, ["model", "run", "step"], "loss"),
    "footprint": (lambda w: footprint(w)["footprint"], ["side", "model", "dtype", "mode", "half_roundings"],
                  "bytes_total"),
    "families": (kernel_families, ["key", "family"], "us_per_step"),
}


def compare(a, b) -> pd.DataFrame:
    """Two results folders of one stage row by row (e.g. the series of two commits): the stage's number in
    each (columns a and b), b/a and the difference. Rows only one folder holds stay, with the other empty."""
    sa, sb = stage_of(a), stage_of(b)
    if sa is None or sa != sb:
        raise ValueError(f"compare: {Path(a).name!r} and {Path(b).name!r} are not results folders of one stage")
    table, keys, value = _COMPARED[sa]
    ta, tb = (table(p)[keys + [value]] for p in (a, b))
    out = ta.merge(tb, on=keys, how="outer", suffixes=("_a", "_b")).rename(
        columns={f"{value}_a": "a", f"{value}_b": "b"})
    out["b_over_a"] = out["b"] / out["a"]
    out["b_minus_a"] = out["b"] - out["a"]
    out.attrs.update(stage=sa, value=value, a=Path(a).name, b=Path(b).name)
    return out


def pair(idx: pd.DataFrame, stages=STAGES):
    """Two folders worth comparing: the newest two of the first stage (in `stages`' order) that has two
    for the same models, oldest first, as paths; None when no stage has."""
    for st in stages:
        rows = idx[idx["stage"] == st]
        if len(rows) < 2:
            continue
        same = rows[rows["models"] == rows["models"].iloc[-1]]
        if len(same) >= 2:
            return Path(same["path"].iloc[-2]), Path(same["path"].iloc[-1])
    return None
