"""The verdict table of TR-2 (the rules: tr2.report's docstring), pure, from the folders' card.yaml, machine.json
and summary.json, and which folders the report reads."""
from __future__ import annotations

import collections
import datetime
import os
import re
import shlex
import statistics
from pathlib import Path
from typing import Optional

from .. import PARAMS_DIR, Tr2Error
from ..cards import PUBLISHED, validate_card
from ..models import count_params, load_model
from .. import explore
from ..results import (STAGES, folder_cards, is_finished, latest, read_yaml, results_folders, stage_of,
                       stored_path)
from ..sysinfo import git_commit


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
            ran = folder_cards(p)
            if card_name not in ran:   # its verdicts would be published under a card that did not run them
                raise Tr2Error(f"--dirs: {str(d)!r} ran card {' or '.join(sorted(map(str, ran)))!r}, not {card_name!r}; "
                               f"allowed: folders of card {card_name} (a check of another card goes in --beside)")
            out.append(p)
        return sorted(out, key=lambda p: (STAGES.index(stage_of(p)), p.name))
    found = [p.resolve() for p in (latest(st, card_name, root, finished=True) for st in STAGES) if p is not None]
    if not found:
        have = sorted({c for p in results_folders(root) if is_finished(p) for c in folder_cards(p)})
        known = (PARAMS_DIR / "cards" / f"{card_name}.yaml").is_file()
        raise Tr2Error(f"--card: {card_name!r} has no finished results folder of any stage under "
                       f"{root or 'results/'}" + ("" if known else f" and no card file params/cards/{card_name}.yaml")
                       + "; allowed: a card whose stages have run"
                       + (f" ({', '.join(have)})" if have else " (none has run here yet)")
                       + (f", or run this one first (make all CARD={card_name})" if known else ""))
    return found


def link(d, html_dir) -> str:
    """The results folder as a link relative to the HTML file's folder, ending in '/'."""
    rel = os.path.relpath(Path(d).resolve(), Path(html_dir).resolve())
    return rel.replace(os.sep, "/") + "/"


def folder_info(d, html_dir) -> dict:
    """A folder as the front page shows it (tr2.explore.folder_row): its stage, name, path and link from the HTML
    file, whether its executed notebook is there, and its conditions with those its summary adds (the series':
    rounds, window, the dates of its first and last run; the footprint's steps)."""
    row = explore.folder_row(d)
    own = explore.summary(d).get("conditions") or {}
    c = {k: v for k, v in row.items() if k not in ("folder", "stage", "stamp", "finished", "path")}
    c.update({k: own[k] for k in ("first_run", "last_run", "rounds", "steps", "window") if own.get(k) is not None})
    return {"stage": row["stage"], "name": row["folder"], "path": stored_path(d), "link": link(d, html_dir),
            "notebook": is_finished(d), "conditions": c, "time": explore.run_time(d, row["stage"]),
            # calls made before sessions.jsonl recorded their GPUs: the count of machines says nothing of them
            "calls_machine_unrecorded": explore.calls_without_machine(d),
            "commits": explore.commit_runs(d, row["stage"]), "retired": explore.retired_runs(d),
            # the program each commit's records say ran, against lib/tr2 as committed there (the commit on the GPU
            # machine is the caller's word)
            "programs": explore.program_digests(d, row["stage"]),
            "extended": explore.extensions(d)}


def run_commits(info: dict) -> set:
    """The commits a folder's runs ran at (kept or retired since); its machine.json's where it holds no run."""
    ran = {c["commit"] for c in info["commits"] if c["runs"] or c["retired"]}
    return ran or {info["conditions"].get("commit")}


def _range_of(r, times=None, tokens_per_step=None):
    """A side's runs: count, median, range; the spread (median absolute deviation over the median, in percent,
    from the run times the series recorded) and tokens per second at the median."""
    if not r:
        return None
    out = {k: r.get(k) for k in ("runs", "median", "fastest", "slowest")} | {"mad_pct": None, "tokens_per_s": None}
    if times:
        med = statistics.median(times)
        out["mad_pct"] = 100 * statistics.median(abs(t - med) for t in times) / med if med else None
    if tokens_per_step and out["median"]:
        out["tokens_per_s"] = tokens_per_step / (out["median"] / 1000)
    return out


def _model_facts(name):
    """(parameters, tokens per step) of a model of params/models.yaml, or (None, None)."""
    try:
        cfg = load_model(name)
    except Tr2Error:
        return None, None
    return count_params(cfg), cfg.batch_size * cfg.block_size


def closest_a(judged, model, dtype) -> Optional[dict]:
    """Method A's judged evaluation nearest its limit (the largest difference of the medians over the larger range):
    its step, the difference and what was allowed, from the stage's judged table (explore.judged_a); None where
    nothing was judged."""
    if judged is None or judged.empty or "allowed" not in judged:
        return None
    j = judged[(judged["model"] == model) & (judged["dtype"] == dtype)]
    j = j[(j["allowed"] > 0) & j["diff"].notna()]
    if j.empty:
        return None
    r = j.loc[(j["diff"] / j["allowed"]).idxmax()]
    return {"step": int(r["step"]), "diff": float(r["diff"]), "allowed": float(r["allowed"]),
            "share": float(r["diff"] / r["allowed"]),
            # every judged evaluation's signed share of what was allowed (cupy's median above torch's: positive), for
            # the front page's chart
            "shares": [[int(x["step"]), round(float(_signed(x) / x["allowed"]), 4)] for _, x in j.sort_values("step").iterrows()]}


def _signed(x) -> float:
    """A judged evaluation's difference with its sign: cupy's median less torch's where both are recorded, else the
    unsigned difference the verdict used."""
    try:
        d = float(x["cupy_median"]) - float(x["torch_median"])
        return d if d == d else float(x["diff"])
    except (KeyError, TypeError, ValueError):
        return float(x["diff"])


# What each PyTorch mode does to the step (torch.compile's modes as PyTorch documents them): whether it compiles
# and whether it replays CUDA graphs; what a reader needs beside the cupy side's own graph.
TORCH_MODES = {"eager": "no compile, no CUDA graph", "default": "torch.compile (Inductor), no CUDA graph",
               "reduce-overhead": "torch.compile (Inductor) with CUDA graphs",
               "max-autotune": "torch.compile with autotuned kernels and CUDA graphs"}


def compared(dirs, infos, rows, devices) -> dict:
    """What the comparison ran, for the sentences beside the verdicts: the PyTorch modes the series timed and those
    of the device's published card it did not (where this card is another); each primary cupy build with its half
    roundings and CUDA graph as timed; how the checks ran each side (method A's torch mode and seeds, method B's
    plain float32; the cupy side without its CUDA graph in both, as the stages run it)."""
    cards = {info["stage"]: (_as_read(read_yaml(Path(d) / "card.yaml")) if (Path(d) / "card.yaml").is_file() else {})
             for d, info in zip(dirs, infos)}
    series_card = cards.get("series") or {}
    modes = list(series_card.get("torch_modes") or [])
    device = next(iter(devices), None) if len(devices) == 1 else None
    published = PUBLISHED.get(device)
    full = []
    if published and series_card and series_card.get("card") != published:
        full = list(_as_read(read_yaml(PARAMS_DIR / "cards" / f"{published}.yaml")).get("torch_modes") or [])
    builds = []
    for r in rows:
        if r["primary"] and not any(b["build"] == r["build"] and b["dtype"] == r["dtype"] for b in builds):
            builds.append({"model": r["model"], "dtype": r["dtype"], "build": r["build"],
                           "half_roundings": r["half_roundings"], "cuda_graph": r.get("cuda_graph")})
    a = (cards.get("method_a") or {}).get("method_a") or {}
    b = (cards.get("method_b") or {}).get("method_a") or {}   # method B's torch side runs in method_a.torch_mode
    return {"torch_modes": modes, "torch_modes_not_run": [m for m in full if m not in modes],
            "published": published if full else None,
            "mode_notes": {m: TORCH_MODES.get(m) for m in modes + [m for m in full if m not in modes]},
            "builds": builds, "cuda_graph": series_card.get("cuda_graph"),
            "checks": {"method_a": "method_a" in cards, "method_b": "method_b" in cards,
                       "torch_mode": a.get("torch_mode"), "torch_mode_b": b.get("torch_mode"),
                       "seeds": len(a.get("seeds") or ())}}


EVIDENCE_DIR = PARAMS_DIR / "evidence"
_EVIDENCE_KEYS = ("kind", "what", "log", "commit", "outcome", "covers")


def evidence(card_name: str, html_dir, timed) -> dict:
    """Checks outside the stage folders, shown beside the card's verdicts: params/evidence/<card>.yaml, a list of
    {kind, what, log, commit, outcome: [lines], covers: [model/dtype]}, and `mode` where the entry times a PyTorch
    mode beside the series' (one of TORCH_MODES). An entry is confirmed where its log (a committed file under the
    repository) holds every outcome line; `uncovered` names, per kind, the timed configurations (`timed`,
    model/dtype) that no confirmed entry of that kind covers (none where no entry of the kind names a timed one);
    `modes_timed`, per mode, those its confirmed entries cover (so the sentence that says a mode was not timed here
    can say where it was timed beside). No file: no entries."""
    path = EVIDENCE_DIR / f"{card_name}.yaml"
    if not path.is_file():
        return {"file": None, "entries": [], "uncovered": {}, "modes_timed": {}}
    where = f"params/evidence/{path.name}"
    raw = read_yaml(path)
    if not isinstance(raw, list) or not all(isinstance(e, dict) for e in raw):
        raise Tr2Error(f"{where}: not a list of entries; allowed: a YAML list of mappings with {', '.join(_EVIDENCE_KEYS)}")
    entries = []
    for n, e in enumerate(raw, 1):
        missing = [k for k in _EVIDENCE_KEYS if not e.get(k)]
        outcome, covers = e.get("outcome"), e.get("covers")
        if missing or not isinstance(outcome, list) or not isinstance(covers, list):
            raise Tr2Error(f"{where}: entry {n} lacks {', '.join(missing) or 'lists'}; allowed: every one of "
                           f"{', '.join(_EVIDENCE_KEYS)}, outcome and covers as lists")
        mode = e.get("mode")
        if mode is not None and (not isinstance(mode, str) or mode not in TORCH_MODES):
            raise Tr2Error(f"{where}: entry {n} has mode {mode!r}; allowed: {', '.join(TORCH_MODES)}, or no mode key")
        log = PARAMS_DIR.parent / str(e["log"])
        lines = explore.log_lines(log)
        problem = None if lines is not None else f"{e['log']} is not in the repository"
        lines = lines or []
        absent = [o for o in map(str, outcome) if not any(o in line for line in lines)]
        if problem is None and absent:
            problem = f"its log does not say {absent[0]!r}"
        entries.append({**{k: e[k] for k in _EVIDENCE_KEYS}, "outcome": [str(o) for o in outcome],
                        "covers": [str(c) for c in covers], "mode": mode, "link": link(log, html_dir).rstrip("/"),
                        "confirmed": problem is None, "problem": problem})
    def covered(key: str, value) -> set:   # the configurations the confirmed entries with e[key] == value cover
        return {c for e in entries if e[key] == value and e["confirmed"] for c in e["covers"]}

    uncovered = {}
    for kind in dict.fromkeys(e["kind"] for e in entries):
        # a kind none of whose entries names a timed configuration speaks of others (a type or model the series
        # leaves out): the timed rows lack nothing of it
        if not any(c in timed for e in entries if e["kind"] == kind for c in e["covers"]):
            uncovered[kind] = []
            continue
        done = covered("kind", kind)
        uncovered[kind] = [c for c in timed if c not in done]
    modes_timed = {}
    for mode in dict.fromkeys(e["mode"] for e in entries if e["mode"]):
        done = covered("mode", mode)
        if done:
            modes_timed[mode] = [c for c in timed if c in done] + sorted(done - set(timed))
    return {"file": where, "entries": entries, "uncovered": uncovered, "modes_timed": modes_timed}


# a bench log's line for one timed PyTorch run: "bench r<round> <model>-<dtype>-torch-<mode>: ok clock <ms>"
_TORCH_CLOCK = re.compile(r"bench r\d+ (?P<model>\S+?)-(?P<dtype>float32|bfloat16|float16)-torch-(?P<mode>[a-z-]+): "
                          r"ok clock (?P<ms>\d+(?:\.\d+)?)")


def torch_clocks(entry: dict) -> dict:
    """The PyTorch step times an evidence entry's outcome lines give, (model/dtype, mode) -> [ms], as its log says
    them (the lines are confirmed against the log before anything reads them)."""
    out: dict = {}
    for line in entry["outcome"]:
        m = _TORCH_CLOCK.search(line)
        if m:
            out.setdefault((f"{m['model']}/{m['dtype']}", m["mode"]), []).append(float(m["ms"]))
    return out


def modes_faster_beside(entries: list, config: str, series_mode: str) -> list[dict]:
    """The PyTorch modes that a confirmed evidence entry timed faster than the series' mode on one configuration, in
    the same call as that mode (so the two compare; the series' own runs are another call's): per mode the entry with
    the most runs of both, its factor (the mode's median over the series mode's median in that call), runs and
    commit. The series did not time these modes, so no verdict rests on them; the page names each beside the row."""
    best: dict = {}
    for e in entries:
        if not e["confirmed"]:
            continue
        clocks = torch_clocks(e)
        ref = clocks.get((config, series_mode))
        for (c, mode), times in clocks.items():
            if c != config or mode == series_mode or not ref:
                continue
            factor = statistics.median(times) / statistics.median(ref)
            runs = min(len(times), len(ref))
            if factor < 1 and (mode not in best or runs >= best[mode]["runs"]):
                best[mode] = {"mode": mode, "factor": factor, "runs": runs, "commit": e["commit"], "link": e["link"]}
    return sorted(best.values(), key=lambda b: b["factor"])


def attention_kernels(families_dir, html_dir) -> dict:
    """The attention family's kernels of each configuration a families folder profiled, key (model/dtype/build) ->
    {"kernels": [(name, µs a step)], "link"}, the slowest first; a kernel's name up to its argument list. Protocol
    §9: PyTorch is named with its attention kernels every time (the families rules decide which kernels count)."""
    if families_dir is None:
        return {}
    table = explore.kernels(families_dir)
    if table is None or table.empty or "family" not in table:
        return {}
    out: dict = {}
    for r in table[table["family"] == "attention"].sort_values("us_per_step", ascending=False).to_dict("records"):
        out.setdefault(r["key"], {"kernels": [], "link": link(families_dir, html_dir)})["kernels"].append(
            (str(r["name"]).split("(", 1)[0], float(r["us_per_step"])))
    return out


def other_series(card_name: str, shown, html_dir, root=None) -> list[dict]:
    """The card's other finished series folders beside the one the page shows (`shown`), oldest first, each with its
    primary rows' medians: per configuration, how PyTorch's own median moved between series (other days, machines and
    commits of ours) against the spread inside one series. A sceptic's question; no verdict reads these."""
    shown = {Path(d).resolve() for d in shown}
    out = []
    for d in results_folders(root, stage="series", card=card_name):
        if not is_finished(d):
            continue
        # the folder's conditions and summary only (folder_info would also read its runs, commits and retirements)
        row, summary = explore.folder_row(d), explore.summary(d)
        rows = [{"config": f"{v['model']}/{v['dtype']}", "build": v["build"], "torch_mode": v.get("torch_mode"),
                 "ours": (v.get("ours") or {}).get("median"), "theirs": (v.get("theirs") or {}).get("median"),
                 "theirs_range": [(v.get("theirs") or {}).get(k) for k in ("fastest", "slowest")],
                 "ratio": v.get("ratio")}
                for v in summary.get("verdicts", []) if v.get("primary")]
        out.append({"name": row["folder"], "link": link(d, html_dir), "shown": d.resolve() in shown,
                    "commit": (row.get("commit") or "")[:12],
                    "date": (summary.get("conditions") or {}).get("first_run") or row.get("date"),
                    "gpu": row.get("gpu"), "torch": (row.get("versions") or {}).get("torch"), "rows": rows})
    return out if len(out) > 1 else []


def between_series(series: list[dict]) -> list[dict]:
    """Per configuration and PyTorch mode: its medians across the series (`other_series`), their spread (largest over
    smallest, less one) and the widest range inside one series (its slowest over its fastest, less one)."""
    by: dict = {}
    for s in series:
        for r in s["rows"]:
            if r["theirs"] is not None:
                by.setdefault((r["config"], r["torch_mode"]), []).append(r)
    out = []
    for (config, mode), rows in by.items():
        medians = [r["theirs"] for r in rows]
        inside = [r["theirs_range"][1] / r["theirs_range"][0] - 1 for r in rows if None not in r["theirs_range"]]
        out.append({"config": config, "torch_mode": mode, "series": len(rows), "low": min(medians),
                    "high": max(medians), "spread": max(medians) / min(medians) - 1,
                    "inside": max(inside) if inside else None})
    return out


def _check_of(v, link_, what):
    if v is None:
        return {"passed": None, "reason": f"{what} has no finished folder for this card (not run, or its runs not all in)", "link": None}
    return {"passed": v.get("passed"), "reason": v.get("reason"), "link": link_}


def build_table(card_name: str, dirs, html_dir, beside=None) -> dict:
    """The front page's data: every model and element type of the series with its verdict, gated by the
    correctness checks; the checks; the footprint; every folder's conditions; the checks of other cards shown
    beside (`beside`: their folders; beside_checks)."""
    dirs = [Path(d) for d in dirs]
    beside_rows = beside_checks(beside, card_name, html_dir)
    infos = [folder_info(d, html_dir) for d in dirs]
    by_stage: dict[str, list] = {}
    for d, info in zip(dirs, infos):
        by_stage.setdefault(info["stage"], []).append((d, info, explore.summary(d)))

    # correctness: method A per (model, dtype), method B per model; a later folder overrides an earlier one
    check_a, check_b = {}, {}
    for d, info, _s in by_stage.get("method_a", []):
        judged = explore.judged_a(d)
        for c in explore.verdicts_a(d).to_dict("records"):
            check_a[(c["model"], c["dtype"])] = _check_of(c, info["link"], "method A") | {
                "closest": closest_a(judged, c["model"], c["dtype"]), "seeds": _whole(c.get("seeds"))}
    for d, info, _s in by_stage.get("method_b", []):
        for m in explore.verdicts_b(d).to_dict("records"):
            if m["judged_through"] != m["steps"] and m["all_steps_passed"] is not None:  # judged short of the end
                m["reason"] = (m["reason"] or "") + f" (over all {m['steps']} steps: " + \
                    ("passed" if m["all_steps_passed"] else "not passed") + ", protocol rule 52)"
            check_b[m["model"]] = _check_of(m, info["link"], "method B")

    # a check beside the card that drew some of the card's own seeds is not independent of the card's check: say so
    own_seeds = {(c.get("model"), c.get("dtype")): set(c.get("seeds") or ())
                 for d, _i, s in by_stage.get("method_a", []) for c in s.get("configs", [])}
    for f in beside_rows:
        for c in f["checks"]:
            shared = sorted(set(c.pop("seed_list", None) or ()) & own_seeds.get(tuple(c["what"].split(" ", 1)), set()))
            c["shared_seeds"] = shared

    rows = {}
    for d, info, s in by_stage.get("series", []):
        cond = info["conditions"]
        times = {c.get("config"): c.get("run_times_ms") or [] for c in s.get("configurations", [])}
        graphs = {c.get("config"): c.get("cuda_graph") for c in s.get("configurations", [])}
        for v in s.get("verdicts", []):
            n_params, tokens = _model_facts(v["model"])
            ours_t = times.get(f"{v['model']}/{v['dtype']}/{v['build']}")
            # the fastest PyTorch configuration, our loop's or nanoGPT's (summaries before the nanogpt side: ours)
            torch_build = v.get("torch_build") or f"torch-{v.get('torch_mode')}"
            theirs_t = times.get(f"{v['model']}/{v['dtype']}/{torch_build}")
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
            rows[(v["model"], v["dtype"], v["build"])] = {   # a later series replaces an earlier one's row in its place
                "model": v["model"], "dtype": v["dtype"], "build": v["build"], "primary": bool(v.get("primary")),
                "half_roundings": v["build"].endswith("-hr"),
                # the cupy side's whole step replayed as one CUDA graph in its timed runs (None: not recorded)
                "cuda_graph": graphs.get(f"{v['model']}/{v['dtype']}/{v['build']}"),
                "params": n_params, "tokens_per_step": tokens,
                "cupy": _range_of(v.get("ours"), ours_t, tokens) if published else None,
                "torch": ({"mode": v.get("torch_mode") if v.get("torch_loop", "torch") == "torch"
                           else f"nanoGPT's train.py, {v.get('torch_mode')}", **(_range_of(v.get("theirs"), theirs_t, tokens) or {})}
                          if published else None),
                "ratio": v.get("ratio") if published else None,
                "verdict": v.get("verdict") if published else None,
                "speed_published": published,
                "withheld": None if published else ("; ".join(why) or "no verdict"),
                "method_a": a, "method_b": b, "correctness_passed": correct,
                "oom_modes": v.get("oom_modes") or [], "modes_without_time": v.get("modes_without_time") or [],
                "notes": v.get("notes") or [], "complete": v.get("complete"),
                "series": info["name"], "link": info["link"],
                # the mode and loop as the series summary names them (the row's "torch" above is the page's words)
                "torch_mode": v.get("torch_mode"), "torch_loop": v.get("torch_loop", "torch"),
                "torch_build": torch_build,
                "conditions": {**{k: cond.get(k) for k in ("card", "rounds", "window", "date", "commit")},
                               "gpu": cond.get("gpu") or cond.get("device"), "torch": cond["versions"].get("torch"),
                               "cupy": cond["versions"].get("cupy")},
            }
    rows = list(rows.values())

    ev = evidence(card_name, html_dir, list(dict.fromkeys(f"{r['model']}/{r['dtype']}" for r in rows if r["primary"])))
    families = by_stage.get("families", [])
    attention = attention_kernels(families[-1][0] if families else None, html_dir)
    for r in rows:
        config = f"{r['model']}/{r['dtype']}"
        # a mode the series did not time, faster than its fastest outside it: named beside the row (no verdict)
        r["faster_beside"] = [b | {"ratio_against": r["ratio"] / b["factor"] if r["ratio"] is not None else None}
                              for b in (modes_faster_beside(ev["entries"], config, r["torch_mode"])
                                        if r["torch_loop"] == "torch" and r["torch_mode"] else [])]
        theirs = attention.get(f"{config}/{r['torch_build']}") or next(
            (a for k, a in attention.items() if k.startswith(f"{config}/torch-")), None)
        r["attention"] = {"cupy": attention.get(f"{config}/{r['build']}"), "torch": theirs,
                          "torch_key": next((k for k, a in attention.items() if a is theirs), None)}

    primary = [r for r in rows if r["primary"]]
    n = collections.Counter(r["verdict"] for r in primary)
    counts = {"faster": n["faster"], "level": n["level"], "slower": n["slower"], "no verdict": n[None],
              "comparisons": len(primary)}

    footprint = None
    for d, info, s in by_stage.get("footprint", []):
        footprint = {"link": info["link"], "folder": info["name"], "sides": s.get("sides", {}),
                     "docker": {k: (s.get("docker") or {}).get(k) for k in ("available", "message", "image_ratio_torch_to_cupy")},
                     "images": {side: {k: i.get(k) for k in ("size_bytes", "status", "files")}
                                for side, i in ((s.get("docker") or {}).get("images") or {}).items()},
                     "install_set_bytes": s.get("install_set_bytes"),
                     "steps": (s.get("conditions") or {}).get("steps"),
                     # the models its runs trained (the stage runs the card's first model only: say which)
                     "models": list(dict.fromkeys(r.get("model") for r in explore.kept_records(d, "footprint")
                                                  if isinstance(r, dict) and r.get("model"))),
                     "conditions": info["conditions"]}

    devices = {i["conditions"].get("device") for i in infos if i["conditions"].get("device")}
    cards = {i["conditions"].get("card") for i in infos if i["conditions"].get("card")}
    # from the first run's start to the last run's end where the records say it (explore.last_end), else to the
    # latest start a folder records (its last run's, or the stage's own: then the page says the end is not known)
    dates = sorted(x for i in infos for x in (i["conditions"].get("first_run") or i["conditions"].get("date"),
                                              i["conditions"].get("last_run") or i["conditions"].get("date")) if x)
    ends = [i["time"].get("last_end") for i in infos]
    end_known = bool(infos) and all(ends)
    if end_known:
        dates = sorted(dates + ends)
    commits = {i["stage"]: i["conditions"].get("commit") for i in infos}
    series = by_stage.get("series", [])
    preview, edition = rule9_banners(card_name, dirs, devices)
    cpu = "cpu" in devices or (not devices and read_yaml(PARAMS_DIR / "cards" / f"{card_name}.yaml").get("device") == "cpu")
    return {
        # a folder whose runs span commits (a resume after tr2.retire) differs as two stages at two commits do
        "commits": commits, "commits_differ": len(set(commits.values()).union(*map(run_commits, infos))) > 1,
        "run_commits": sorted(c for c in set(commits.values()).union(*map(run_commits, infos)) if c),
        "programs_differ": any(g["same"] is False for i in infos for g in i["programs"]),
        "minutes_of_runs": round(sum(i["time"]["seconds"] for i in infos) / 60, 1),
        "machine": _machine(series[-1][1] if series else infos[0], series[-1][0] if series else None),
        "commands": commands(card_name, infos, html_dir, beside_rows),
        "card": card_name, "cards_in_folders": sorted(cards), "devices": sorted(devices),
        "cpu_demonstration": cpu,
        "generated": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "report_commit": git_commit(),
        "measured_from": dates[0] if dates else None, "measured_to": dates[-1] if dates else None,
        "measured_to_is_end": end_known,
        "folders": infos, "rows": rows, "counts": counts, "footprint": footprint,
        "stages_missing": [s for s in STAGES if s not in by_stage],
        "preview": preview, "edition": edition, "beside": beside_rows,
        "compared": compared(dirs, infos, rows, devices),
        "evidence": ev,
        "other_series": (others := other_series(card_name, [d for d, _i, _s in series], html_dir,
                                                root=dirs[0].parent if dirs else None)),
        "between_series": between_series(others),
    }


# the stages whose folders of other cards a report may show beside its own (--beside): the correctness checks
BESIDE_STAGES = ("method_a", "method_b")


def _whole(x):
    """A count from a DataFrame record (numpy integers, floats, NaN for a missing value) as an int, or None."""
    try:
        return int(x) if x is not None and float(x) == float(x) else None
    except (TypeError, ValueError):
        return None


def _truth(x):
    """A verdict's passed from a DataFrame record as True, False or None (NaN and None: no verdict)."""
    return None if x is None or (isinstance(x, float) and x != x) else bool(x)


def beside_checks(dirs, card_name: str, html_dir) -> list[dict]:
    """Correctness checks that ran on other cards (a replication, a model the card leaves out), shown beside the
    report's own and changing none of its verdicts: per folder its stage, card, commit, date, GPU and link, and each
    verdict it gives (method A per model and type, method B per model, in the stage's own words)."""
    out = []
    for d in dirs or ():
        p = Path(d).resolve()
        if not p.is_dir():
            raise Tr2Error(f"--beside: {str(d)!r} is not a folder; allowed: finished results folders of "
                           f"{' or '.join(BESIDE_STAGES)}")
        stage = stage_of(p)
        if stage not in BESIDE_STAGES:
            raise Tr2Error(f"--beside: {str(d)!r} is {'a ' + stage if stage else 'no stage'}'s folder; allowed: "
                           f"results folders of {' or '.join(BESIDE_STAGES)} (the correctness checks)")
        if not (p / "summary.json").is_file():
            raise Tr2Error(f"--beside: {str(d)!r} holds no summary.json, so its stage has not run to its end; allowed: "
                           "finished folders")
        info = folder_info(p, html_dir)
        c = info["conditions"]
        if c.get("card") == card_name:
            raise Tr2Error(f"--beside: {str(d)!r} is of card {card_name!r} itself; allowed: folders of other cards "
                           "(the card's own folders are the report's)")
        checks = []
        if stage == "method_a":
            lists = {(c.get("model"), c.get("dtype")): c.get("seeds") or [] for c in explore.summary(p).get("configs", [])}
            for v in explore.verdicts_a(p).to_dict("records"):
                seeds, steps = _whole(v.get("seeds")), _whole(v.get("steps"))
                how = (f"{seeds} seed(s) a side" if seeds else "") + (f", {steps} steps" if seeds and steps else "")
                checks.append({"what": f"{v['model']} {v['dtype']}", "passed": _truth(v.get("passed")),
                               "reason": f"{how}: {v.get('reason')}" if how else v.get("reason"),
                               "seed_list": list(lists.get((v["model"], v["dtype"])) or [])})
        else:
            for v in explore.verdicts_b(p).to_dict("records"):
                checks.append({"what": v["model"], "passed": _truth(v.get("passed")), "reason": v.get("reason")})
        out.append({"stage": stage, "name": info["name"], "link": info["link"], "card": c.get("card"),
                    "commit": c.get("commit"), "date": c.get("date"), "gpu": c.get("gpu") or c.get("device"),
                    "checks": checks})
    return out


_STAGE_KEYS = ("series", "method_a", "method_b", "families")
# keys that name or place a card rather than say what it runs: no change from the published card
_NOT_COMPARED = ("card", "edition", "machine", "nanogpt_path")


def _as_read(card: dict) -> dict:
    """A card as the stages read it: optional keys filled with their defaults (as written where it is invalid)."""
    try:
        return validate_card(card)
    except Tr2Error:
        return card


def _shown(v):
    return "the model's own" if v is None else v   # null in a stage mapping: the model's own steps, evaluations


def _changes(card: dict, ref: dict) -> list[str]:
    """What the card runs differently from the published one, key by key ("models: [...] (published: [...])")."""
    lines = []
    for k, v in card.items():
        if k in _NOT_COMPARED or k not in ref:
            continue
        if k in _STAGE_KEYS and isinstance(v, dict) and isinstance(ref[k], dict):
            lines += [f"{k}.{sk}: {_shown(sv)} (published: {_shown(ref[k].get(sk))})"
                      for sk, sv in v.items() if sv != ref[k].get(sk)]
        elif v != ref[k]:
            lines.append(f"{k}: {v} (published: {ref[k]})")
    return lines or ["the same keys as the published card, under another name"]


def rule9_banners(card_name: str, dirs, devices) -> tuple[dict | None, dict | None]:
    """Protocol rule 9 on the front page: (preview, edition). Where the folders ran on one device that has a
    published card and this card is another, it is that card's reduced edition when its `edition` names it (with
    the card's reason in one line), else a preview; either way with what it runs differently, key by key. (None,
    None) for the published card itself and CPU cards (those carry the CPU banner). This card is the first folder's
    card.yaml, each stage's own keys (series, method_a, ...) from that stage's folder's card.yaml: what ran, whatever
    the checkout's card file says now (a method A card extended after its runs reads as extended), and `edition` is
    read again here, not trusted from validation (a folder's card.yaml may be one the checkout no longer accepts: it is read as written)."""
    device = next(iter(devices), None) if len(devices) == 1 else None
    published = PUBLISHED.get(device)
    if published is None or card_name == published or not dirs:
        return None, None
    card = _as_read(read_yaml(Path(dirs[0]) / "card.yaml"))
    # a stage's own keys as its own folder's card ran them (a method A folder's card extended after its runs keeps
    # its seeds there, not in the series folder's copy of the card)
    for d in dirs:
        st = stage_of(Path(d))
        own = _as_read(read_yaml(Path(d) / "card.yaml")) if st in _STAGE_KEYS and (Path(d) / "card.yaml").is_file() else {}
        if st in card and isinstance(own.get(st), dict):
            card = {**card, st: own[st]}
    changes = _changes(card, _as_read(read_yaml(PARAMS_DIR / "cards" / f"{published}.yaml")))
    e = card.get("edition")   # a claim for another card or another device's published card leaves a preview
    if isinstance(e, dict) and e.get("of") == published and isinstance(e.get("reason"), str) and e["reason"].strip():
        reason = " ".join(e["reason"].split())
        return None, {"published": published, "reason": reason, "changes": changes,
                      "reason_now": _reason_now(card_name, reason)}
    return {"published": published, "changes": changes}, None


def _reason_now(card_name: str, reason: str) -> Optional[str]:
    """The edition's reason as the checkout's card file states it, where that differs from the one its folders ran
    with (what was measured since can contradict a reason written before: default mode faster on one configuration,
    timed after the edition ran); None where it is the same, or the file is gone or holds no reason."""
    raw = read_yaml(PARAMS_DIR / "cards" / f"{card_name}.yaml")   # {} where missing or unreadable
    e = raw.get("edition") if isinstance(raw, dict) else None
    now = " ".join(e["reason"].split()) if isinstance(e, dict) and isinstance(e.get("reason"), str) else ""
    return now if now and now != reason else None


def _machine(info, series_dir) -> dict:
    """The machine of the series (or of the first folder): processor, cores, memory, GPU and driver (None where a
    folder predates their record), and the load while the series ran: the load average when it started
    (machine.json) and, on a GPU, the medians of the card's samples over every run (clocks, temperature, power)."""
    keys = ("host", "platform", "cpu_model", "cpu_cores", "memory_bytes", "gpu", "gpu_memory_mib", "driver")
    out = {k: info["conditions"].get(k) for k in keys}
    if series_dir is None:
        return out | {"load": None, "timed": None}
    gpu = [g for g in explore.runs(series_dir).get("gpu", []) if isinstance(g, dict)]
    med = {}
    for k in ("sm_mhz", "temp_c", "power_w"):
        vals = [g[k]["median"] for g in gpu if isinstance(g.get(k), dict) and g[k].get("median") is not None]
        med[k] = statistics.median(vals) if vals else None
    return out | {"load": {"loadavg": info["conditions"].get("loadavg"),
                           "gpu_samples": sum(g.get("samples", 0) for g in gpu), **med},
                  "timed": _timed_clocks(series_dir)}


def _number(x, digits: int) -> Optional[float]:
    """x rounded, or None where it is missing (None, NaN or not a number)."""
    try:
        x = float(x)
    except (TypeError, ValueError):
        return None
    return None if x != x else round(x, digits)


def _timed_clocks(series_dir) -> Optional[dict]:
    """Per configuration of the series: the card's SM clock and power while its timed runs were measured
    (explore.timed_clocks), in the card's order of models and types, cupy before PyTorch, with the window and the
    sampling interval; None where nothing was sampled."""
    from ..series import ENERGY_COUNTER_INTERVAL_S, ENERGY_MIN_SPAN_S   # here: the stage's module need not load
    t = explore.timed_clocks(series_dir)
    if t.empty:
        return None
    card = read_yaml(Path(series_dir) / "card.yaml")
    order = {k: {v: i for i, v in enumerate(card.get(k) or [])} for k in ("models", "dtypes")}
    rows = []
    for _, r in t.iterrows():
        rows.append({"model": r["model"], "dtype": r["dtype"], "side": r["side"], "build": r["build"],
                     "mode": None if r["mode"] != r["mode"] else r["mode"], "runs": int(r["runs"]),
                     "samples": int(r["samples"]), "sm_mhz": float(r["sm_mhz"]), "sm_mhz_min": float(r["sm_mhz_min"]),
                     "sm_mhz_max": float(r["sm_mhz_max"]),
                     "power_w": None if r["power_w"] != r["power_w"] else round(float(r["power_w"]), 1),
                     "joules_step": None if r["joules_step"] != r["joules_step"] else round(float(r["joules_step"]), 3),
                     "joules_bound": _number(r.get("joules_bound"), 4)})
    rows.sort(key=lambda x: (order["models"].get(x["model"], len(order["models"])), x["model"],
                             order["dtypes"].get(x["dtype"], len(order["dtypes"])), x["dtype"], x["side"] != "cupy"))
    s = card.get("series") or {}
    return {"rows": rows, "window": s.get("window"), "interval_s": s.get("sample_interval_s"),
            "energy": any(x["joules_step"] is not None for x in rows), "energy_min_span_s": ENERGY_MIN_SPAN_S,
            "energy_interval_s": ENERGY_COUNTER_INTERVAL_S}


def _replay(stage: str, d: str, by_commit, change: str, again: list, env: str = "") -> str:
    """A change made to a folder (a retirement, an extension) at the commit that made it, then the resume that ran
    its runs at the commit their records carry (where it is not the change's; where several made them, a resume split
    over calls, the first: commands says so). d: the folder as the shell names it; env: what goes before the resume,
    which runs (the products records' folder)."""
    resume_at = again[0] if again and again[0] and again[0] != by_commit else None
    return ((f"git checkout {by_commit[:12]} && " if by_commit else "") + f"python -m tr2.runner {stage} {change} && "
            + (f"git checkout {resume_at[:12]} && " if resume_at else "")
            + f"{env}python -m tr2.runner {stage} --resume {d}")


def reruns(info: dict, d: str | None = None, env: str = "") -> list[str]:
    """Each change made to the folder after its stage first ran, in the order made, so that the folder's command
    reproduces its runs at every commit: each time runs were retired (tr2.retire) and each time seeds were added to its
    card (tr2.extend), with the resume that ran their runs. d: the folder they act on, as the shell names it (the one
    the command's first step made; default the folder itself); env: as _replay's."""
    d, stage = d or f"results/{info['name']}", info["stage"]
    made = [(r.get("retired_at") or "", _replay(stage, d, r["by_commit"], f"--retire {d} --runs "
             f"{' '.join(map(shlex.quote, r['run_keys']))} --reason {shlex.quote(r['reason'] or '')}",
             r.get("rerun_commits") or [], env)) for r in info.get("retired") or ()]
    made += [(x.get("extended_at") or "", _replay(stage, d, x.get("extended_by_commit"), f"--extend {d} --seeds "
              f"{' '.join(map(str, x.get('added') or ()))} --reason {shlex.quote(x.get('extended_reason') or '')}",
              x.get("run_commits") or [], env)) for x in info.get("extended") or ()]
    return [cmd for _, cmd in sorted(made, key=lambda m: m[0])]


def commands(card_name, infos, html_dir, beside=(), out=None, repro: str = "results/repro") -> dict:
    """The command that reproduces each table, from the repository's root, and what it cannot make exact after it (a
    shell comment). A stage: its card at its commit, in a new folder under <repro>/<the folder's name>/ (the runner's
    --root, there at every commit since 2026-11-29; `latest` then names the folder made, on which the folder's later
    retirements and extensions act, with their resumes: reruns); its runs reading the cuBLASLt products records the
    folder's runs read (results.products_read): each copied, before the checkout (the commit's tree may not hold the
    folder), from the folder's products/ into <repro>/<name>/products/ under the name the runs read, which
    TR2_PRODUCTS_DIR names to the runs; a record the folder keeps no copy of comes from another folder of the page
    that keeps one of its name and count (said as not exact), else the command stops there (test -f) and says where to
    put it. This report: its folders, those beside it (beside_checks' records), and out, the HTML file it was written
    to (None: no --out, which writes the default report/TR-2.html)."""
    from ..results import folder_path, kernel_switches_set, products_read   # here: the block above is shared
    reads = {i["name"]: products_read(folder_path(i["path"])) for i in infos}
    switches = {i["name"]: kernel_switches_set(folder_path(i["path"])) for i in infos}
    kept: dict = {}   # (record name, products) -> {sha256: a copy a folder of the page keeps}
    for i in infos:
        for r in reads[i["name"]]:
            if r["kept"] and r["sha256"]:
                kept.setdefault((r["name"], r["products"]), {}).setdefault(r["sha256"], f"{i['path']}/{r['kept']}")

    def restore(i, where) -> tuple[list, list]:
        """The steps that put each record folder i's runs read into `where`, and notes on what they cannot make exact."""
        steps, notes, by_name = [f"mkdir -p {where}"], [], {}
        for r in reads[i["name"]]:
            by_name.setdefault(r["name"], []).append(r)
        for name, rs in by_name.items():
            files = [r for r in rs if r["sha256"] or r["products"]]
            if not files:
                continue   # its runs read no file of that name (the heuristic chose): `where` holds none
            if len(files) < len(rs):
                notes.append(f"some of its runs read no {name} (cuBLASLt's heuristic chose) and others one: the "
                             "command restores the one")
            digests = list(dict.fromkeys(r["sha256"] for r in files if r["sha256"]))
            src = None
            if digests:
                first = next(r for r in files if r["sha256"] == digests[0])
                src = f"{i['path']}/{first['kept']}" if first["kept"] else kept.get((name, first["products"]), {}).get(digests[0])
                if len(digests) > 1:
                    notes.append(f"not exact: its runs read {len(digests)} different {name} (sha256 "
                                 f"{', '.join(x[:12] for x in digests)}; each run's products_record says which): the "
                                 f"command restores the first")
                if len(digests) < len(files) and any(not r["sha256"] for r in files):
                    notes.append(f"not exact: its runs from before 2026-12-05 name {name} without a digest: the record "
                                 f"restored is theirs only if the cache was not rebuilt between")
                if src is None:
                    notes.append(f"its runs read {name} (sha256 {digests[0][:12]}), of which no folder of the page "
                                 f"keeps a copy" + (f" ({first['not_kept']})" if first["not_kept"] else "")
                                 + f": put it in {where}/ first")
            else:
                counts = sorted({r["products"] for r in files})
                found = kept.get((name, counts[0]), {}) if len(counts) == 1 else {}
                said = f"{name} ({' or '.join(map(str, counts))} products)"
                if len(found) == 1:
                    sha, src = next(iter(found.items()))
                    notes.append(f"not exact: its runs' logs (before 2026-12-05) name {said} without a digest and the "
                                 f"folder keeps no copy; the command restores the record of that name and count that "
                                 f"{src.rsplit('/products/', 1)[0]} keeps (sha256 {sha[:12]}), theirs only if the cache "
                                 "was not rebuilt between (docs/protocol.md, amendment 4.3)")
                else:
                    notes.append(f"not exact: its runs' logs (before 2026-12-05) name {said} without a digest and no "
                                 f"folder of the page keeps one record of that name and count: put the one they read in "
                                 f"{where}/ first (docs/protocol.md, amendment 4.3)")
            dest = shlex.quote(f"{where}/{name}")
            steps.append(f"cp {shlex.quote(src)} {dest}" if src else f"test -f {dest}")
        return steps, notes

    cmds = {}
    for i in infos:
        c, stage = i["conditions"], i["stage"]
        commit = (c.get("commit") or "")[:12]
        card = c.get("card") or card_name
        root = f"{repro}/{i['name']}"
        steps, notes, env = [], [], ""
        if reads[i["name"]]:
            steps, notes = restore(i, f"{root}/products")
            env = f'TR2_PRODUCTS_DIR="$PWD/{root}/products" '
        elif c.get("device") not in (None, "cpu"):
            notes.append("its runs' logs do not name the products record its cupy runs read (.cache/products/ or "
                         "$TR2_PRODUCTS_DIR as the machine had them): not restored")
        # the kernel switches its runs ran with, set for every run the command makes (the stage's and its resumes')
        if switches[i["name"]] is None and c.get("device") not in (None, "cpu"):
            notes.append("the kernel switches its runs ran with are not recorded (machine.json before the thirtieth "
                         "session): the command runs the defaults of its commit")
        elif switches[i["name"]]:
            env = "".join(f"{k}={shlex.quote(v)} " for k, v in switches[i["name"]].items()) + env
        if commit:
            steps.append(f"git checkout {commit}")
        else:
            notes.append("its commit is not recorded")
        if c.get("dirty") is True:
            notes.append(f"not exact: it ran with uncommitted changes on top of {commit or 'its commit'}")
        steps.append(f"{env}python -m tr2.runner {stage} --card {card} --root {root}")
        # the commits the command makes runs at (the stage's, each resume's: _replay's) against those the records name
        made_at = {commit} | {(x.get("rerun_commits") or [x.get("by_commit")])[0] for x in i.get("retired") or ()} | {
            (x.get("run_commits") or [x.get("extended_by_commit")])[0] for x in i.get("extended") or ()}
        made_at = {(m or "")[:12] for m in made_at}
        elsewhere = [x for x in i.get("commits") or () if (x.get("runs") or x.get("retired"))
                     and (x.get("commit") or "")[:12] not in made_at]
        if elsewhere:
            notes.append(f"not exact: {sum(x['runs'] + x['retired'] for x in elsewhere)} of its runs were made at "
                         f"{', '.join((x.get('commit') or 'no recorded commit')[:12] for x in elsewhere)} (a call resumed "
                         "at another commit), which the command makes at the commit of the step before them")
        again = reruns(i, '"$D"', env)
        if again:   # the folder the step above made, which the later changes act on
            steps += [f"D=$(python -m tr2.runner latest {stage} --card {card} --root {root})", *again]
        cmds[i["name"]] = " && ".join(steps) + (f"  # {'; '.join(notes)}" if notes else "")
    rels = " ".join(shlex.quote(i["path"]) for i in infos)
    cmds["report"] = f"python -m tr2.report --card {card_name}" + (f" --dirs {rels}" if rels else "")
    if beside:
        cmds["report"] += " --beside " + " ".join(shlex.quote(stored_path(Path(html_dir) / f["link"])) for f in beside)
    if out is not None:
        cmds["report"] += f" --out {shlex.quote(stored_path(out))}"
    return cmds


def unstitched(card_name: str, root=None) -> list[Path]:
    """Folders of the card that hold a summary but no executed notebook (a stage run by hand with papermill
    into another file): the report cannot stitch them and says so."""
    return [p for p in results_folders(root, card=card_name) if (p / "summary.json").is_file() and not is_finished(p)]
