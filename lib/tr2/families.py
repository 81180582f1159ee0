"""Kernel families (docs/protocol.md, rules 30-33 and 8.3): a profiled run per configuration, its kernel table,
grouped by one rules file.

Each configuration of the card (tr2.configs) is one profiled run (`python -m tr2.profile_run`: torch.profiler,
CUPTI's kernels on CUDA, the operators' self time on a CPU card) of `families.steps` iterations, whose window
`families.window` = [A, B] (steps A+1..B) is tabled. Both sides' tables are grouped by the rules file (`<regex> TAB
<family>` lines, re.search, case-insensitive, first match wins, else "other"), a copy of which the folder keeps
beside the full tables (kernels.csv). PyTorch's attention is named from the kernels it ran (`attention_kernels`).
The profiled runs of the compiled modes run under TORCH_LOGS=graph_breaks,recompiles (logging changes nothing
compiled, and spares a compilation per configuration) and their logs' counts go to the summary. A profiled run out
of memory is recorded and named with what it lacks. Family times explain a step time and never stand in for one.
"""
from __future__ import annotations

import collections
import hashlib
import re
import shutil
import sys
import time
from pathlib import Path

from . import REPO_ROOT, Tr2Error, configs
from . import explore
from . import explore_plots as plots
from .cards import rules_path
from .clock import log_text, run_logged
from .configs import RunConfig, compile_caches
from .results import read_json, read_jsonl
from .stage import FINISHED, RUNS, finished_keys, open_folder, run_plan
from .summary import finish, load_dir_card, save_figure, write_csv

STAGE = "families"
OTHER = "other"
TORCH_LOGS = "graph_breaks,recompiles"
LABEL = ("the profiled run's kernel time per step (CUDA: device time of its kernels; CPU card: self time of its "
         "operators); it explains a step time and never stands in for one")


# ---------------------------------------------------------------------------------- rules and grouping (pure)

def parse_rules(text: str, source: str = "rules") -> list[tuple[str, "re.Pattern", str]]:
    """[(pattern, compiled, family)] from `<regex> TAB <family>` lines; '#' lines and blank lines skipped."""
    rules = []
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        parts = [p for p in line.split("\t") if p]
        if len(parts) != 2:
            raise Tr2Error(f"{source}:{n}: {line!r}; allowed: <regex> TAB <family>")
        pattern, family = parts[0], parts[1].strip()
        try:
            rx = re.compile(pattern, re.IGNORECASE)
        except re.error as e:
            raise Tr2Error(f"{source}:{n}: regex {pattern!r} does not compile ({e}); allowed: a Python regular expression")
        rules.append((pattern, rx, family))
    return rules


def load_rules(path=None) -> list:
    path = Path(path) if path else REPO_ROOT / "params" / "families.tsv"
    if not path.is_absolute() and not path.is_file():
        path = REPO_ROOT / path
    if not path.is_file():
        raise Tr2Error(f"families.rules: {str(path)!r} does not exist; allowed: a rules file such as params/families.tsv")
    try:
        text = path.read_bytes().decode("utf-8")
    except UnicodeDecodeError:
        raise Tr2Error(f"families.rules: {str(path)!r} is not text (not UTF-8); allowed: a rules file such as "
                       "params/families.tsv") from None
    return parse_rules(text, str(path))


def family_of(name: str, rules) -> str:
    """The family of the first rule whose regex matches `name` (re.search), else 'other'."""
    for _pattern, rx, family in rules:
        if rx.search(name):
            return family
    return OTHER


def group(kernels: list[dict], rules, steps: int) -> dict:
    """{family: {total_us, launches, us_per_step, launches_per_step}} from [{name, total_us, launches}]."""
    out: dict[str, dict] = {}
    for k in kernels:
        g = out.setdefault(family_of(k["name"], rules), {"total_us": 0.0, "launches": 0})
        g["total_us"] += float(k["total_us"])
        g["launches"] += int(k["launches"])
    for g in out.values():
        g["us_per_step"] = g["total_us"] / steps
        g["launches_per_step"] = g["launches"] / steps
    return dict(sorted(out.items(), key=lambda kv: -kv[1]["total_us"]))


# Which attention ran, from kernel (or CPU operator) names. Order: the first kind whose regex matches.
ATTENTION_KINDS = (
    ("cuDNN", r"cudnn.*(sdpa|fmha|mha|attn|attention|flash)|(sdpa|fmha|mha).*cudnn"),
    ("memory-efficient (cutlass)", r"fmha_cutlass[fb]|efficient_attention|mem_eff"),
    ("FlashAttention", r"pytorch_flash::|flash_fwd|flash_bwd|flash_attn|flash::|flash_attention(?!_for_cpu)"),
    ("flex attention (Triton template)", r"^triton_tem_.*(flex|attention)"),
    ("flash (CPU)", r"_scaled_dot_product_flash_attention_for_cpu"),
    ("math", r"_scaled_dot_product_attention_math"),
    ("ours (fused attn_* kernels on tensor cores)", r"^(void )?attn_|^attention_(forward|backward)$"),
)
_ATT = [(kind, re.compile(rx, re.IGNORECASE)) for kind, rx in ATTENTION_KINDS]
_SOFTMAX = re.compile(r"softmax", re.IGNORECASE)
_LOGSOFTMAX = re.compile(r"log_?softmax|logsoftmax|cross_?entropy", re.IGNORECASE)
_BATCHED = re.compile(r"gemm|xmma|nvjet|cutlass|bmm|batched", re.IGNORECASE)


def attention_kernels(names) -> dict:
    """{'backends': [kinds found], 'kernels': {kind: [names]}} from the kernel names of one profiled run.

    Fused kernels name their backend; where none ran but softmax kernels did beside batched products
    (log-softmax, the loss's, not counted), the attention took PyTorch's unfused math path.
    """
    names = list(names)
    found: dict[str, list] = {}
    for n in names:
        if kind := next((kind for kind, rx in _ATT if rx.search(n)), None):   # the first kind that matches
            found.setdefault(kind, []).append(n)
    if not found:
        soft = [n for n in names if _SOFTMAX.search(n) and not _LOGSOFTMAX.search(n)]
        if soft and any(_BATCHED.search(n) for n in names):
            found["math (softmax between batched products)"] = soft
    return {"backends": list(found), "kernels": found}


_GB = re.compile(r"\[__graph_breaks\]\s+Graph break\b(?! Reason)")
_GB_AT = re.compile(r"Graph break.*?\bat (\S+:\d+)")
_RC = re.compile(r"\[__recompiles(?:_verbose)?\]\s+Recompiling function (\S+)(?: in (\S+))?")
_RC_WHY = re.compile(r"\[__recompiles(?:_verbose)?\]\s+-\s+(\d+/\d+: .*\S)")


def count_graph_logs(text: str) -> dict:
    """Graph breaks and recompiles in a TORCH_LOGS=graph_breaks,recompiles log.

    A graph break is one `[__graph_breaks] Graph break ...` message (the continuation lines of the
    same message, `Graph Break Reason:` and the traceback, are not counted again); a recompile is one
    `[__recompiles] Recompiling function F in FILE:LINE` message.
    """
    sites, functions, reasons = collections.Counter(), collections.Counter(), []
    for line in text.splitlines():
        if _GB.search(line):
            m = _GB_AT.search(line)
            sites[m.group(1) if m else "?"] += 1
        elif m := _RC.search(line):
            functions[m.group(1) + (f" in {m.group(2)}" if m.group(2) else "")] += 1
        elif (m := _RC_WHY.search(line)) and len(reasons) < 50:
            reasons.append(" ".join(m.group(1).split())[:200])
    return {"graph_breaks": sum(sites.values()), "break_sites": dict(sites), "recompiles": sum(functions.values()),
            "recompiled_functions": dict(functions), "recompile_reasons": reasons}


# -------------------------------------------------------------------------------------------------- the stage

configurations = configs.configurations   # every profiled configuration: model x dtype x (torch mode | cupy build)


def graph_runs(card: dict) -> list[RunConfig]:
    """The runs whose logs count graph breaks and recompiles: the profiled runs of the compiled modes,
    which run under TORCH_LOGS=graph_breaks,recompiles (one run per mode, model and type; eager compiles nothing)."""
    return [c for c in configurations(card) if c.side == "torch" and c.mode != "eager"]


def run_one(c: RunConfig, card: dict, d: Path) -> dict:
    out_dir = d / "profiles" / c.slug
    prof = out_dir / "profile.json"
    prof.unlink(missing_ok=True)  # a killed run's table: the run starts over
    log = d / "logs" / f"{STAGE}-profile-{c.slug}.log"
    f = card["families"]
    cmd = [sys.executable, "-m", "tr2.profile_run", "--window", *map(str, f["window"]), "--out", str(out_dir),
           *c.train_args(card["device"], f["steps"]).to_argv()]
    compiled = c.side == "torch" and c.mode != "eager"
    env = {"TORCH_LOGS": TORCH_LOGS} if compiled else None
    res = run_logged(cmd, log, env={**compile_caches(c.slug, d / "cache"), **(env or {})})   # caches: configs.py
    if res["status"] == "ok" and not prof.is_file():
        res.update(status="failed", reason="the profiled run wrote no profile.json")
    rec = {"kind": "profile", **c.as_record(), "label": c.label, **res, "cmd": cmd, "env": env,
           "log": str(log.relative_to(d)), "profile": str(prof.relative_to(d)),
           "finished_at": time.strftime("%Y-%m-%dT%H:%M:%S")}
    if compiled and log.is_file():
        rec.update(count_graph_logs(log_text(log)))
    return rec


def run(card: dict, results_dir=None) -> Path:
    rules_src = rules_path(card)
    load_rules(rules_src)  # a bad rules file stops before any run
    with open_folder(STAGE, card, results_dir) as folder:
        if not (folder.path / "families.tsv").is_file():
            shutil.copyfile(rules_src, folder.path / "families.tsv")
        run_plan(folder, configurations(card), lambda c: run_one(c, card, folder.path), desc="families",
                 key=lambda c: c.key, ends_stage=lambda rec: rec["status"] not in FINISHED)
    return folder.path


def summarize(results_dir) -> dict:
    d = Path(results_dir)
    card = load_dir_card(d)
    rules_file = d / "families.tsv" if (d / "families.tsv").is_file() else rules_path(card)
    rules = load_rules(rules_file)
    runs = finished_keys(d / RUNS)
    last = {r.get("key"): r for r in read_jsonl(d / RUNS)}  # a configuration's last record, finished or not
    kern_rows, fam_rows, gap_rows, configs = [], [], [], []
    for c in configurations(card):
        rec = runs.get(c.key) or last.get(c.key) or {}
        entry = {k: v for k, v in c.as_record().items() if k != "build"} | {"label": c.label}
        entry.update(status=rec.get("status", "missing"), log=rec.get("log"))
        prof = read_json(d / rec["profile"]) if rec.get("status") == "ok" else {}
        configs.append(entry)
        if not prof:
            entry["reason"] = rec.get("reason")
            continue
        steps, kernels = prof["steps_in_window"], prof["kernels"]
        fams = group(kernels, rules, steps)
        total = sum(k["total_us"] for k in kernels)
        kern_rows += [{**entry, "name": k["name"], "family": family_of(k["name"], rules), "total_us": k["total_us"],
                       "launches": k["launches"], "us_per_step": k["total_us"] / steps,
                       "launches_per_step": k["launches"] / steps} for k in kernels]
        fam_rows += [{**entry, "family": f, "us_per_step": g["us_per_step"], "launches_per_step": g["launches_per_step"],
                      "share": g["total_us"] / total if total else None} for f, g in fams.items()]
        att = attention_kernels(k["name"] for k in kernels)
        entry.update(device=prof.get("device"), window=prof.get("window"), steps_in_window=steps,
                     kernel_us_per_step=total / steps, launches_per_step=sum(k["launches"] for k in kernels) / steps,
                     families={f: g["us_per_step"] for f, g in fams.items()},
                     attention=att["backends"], attention_kernels={k: v[:5] for k, v in att["kernels"].items()},
                     sdp_backends_allowed=prof.get("sdp_backends"), n_names=len(kernels))
        gaps = prof.get("gaps")   # the device's idle time between kernels (profile_run.kernel_gaps; CUDA runs only)
        if gaps and gaps.get("kernels"):
            entry.update(span_us_per_step=gaps["span_us"] / steps, busy_us_per_step=gaps["busy_us"] / steps,
                         idle_us_per_step=gaps["idle_us"] / steps)
            gap_rows += [{**entry, "before": g["before"], "after": g["after"], "idle_us_per_step": g["total_us"] / steps,
                          "gaps_per_step": g["count"] / steps, "max_us": g["max_us"]} for g in gaps["pairs"]]
    graphs = []
    for g in graph_runs(card):
        rec = runs.get(g.key) or last.get(g.key)
        status = rec["status"] if rec else "missing"
        if rec and rec.get("graph_breaks") is None and status == "ok":
            status = "no counts"
        graphs.append({"key": g.key, "model": g.model, "dtype": g.dtype, "mode": g.mode, "status": status,
                       **({k: rec.get(k) for k in ("graph_breaks", "recompiles", "break_sites", "recompiled_functions",
                                                   "recompile_reasons", "log", "reason")} if rec else {})})
    if "eager" in card["torch_modes"]:
        graphs.append({"key": "*/*/graphs-eager", "mode": "eager", "status": "not run",
                       "reason": "eager compiles nothing: no graph breaks or recompiles to count"})
    write_csv(d / "kernels.csv", kern_rows, ["key", "model", "dtype", "side", "mode", "half_roundings", "name", "family",
                                              "total_us", "launches", "us_per_step", "launches_per_step"])
    write_csv(d / "families.csv", fam_rows, ["key", "model", "dtype", "side", "mode", "half_roundings", "label", "family",
                                              "us_per_step", "launches_per_step", "share"])
    write_csv(d / "gaps.csv", gap_rows, ["key", "model", "dtype", "side", "mode", "half_roundings", "before", "after",
                                         "idle_us_per_step", "gaps_per_step", "max_us"])
    lacking = [f"{c['key']}: {c['status']} (no kernel table)" for c in configs if c["status"] != "ok"]
    lacking += [f"{g['key']}: {g['status']} (no graph-break counts)" for g in graphs if g["status"] not in ("ok", "not run")]
    summary = {
        "stage": STAGE, "label": LABEL,
        "rules": {"file": rules_file.name if rules_file.parent == d else card["families"]["rules"],
                  "sha256": hashlib.sha256(rules_file.read_bytes()).hexdigest(),
                  "n_rules": len(rules), "match": "re.search, case-insensitive, first match wins, unmatched: other"},
        "window": card["families"]["window"], "steps": card["families"]["steps"],
        "configs": configs, "graphs": graphs,
        "lacking": lacking,  # protocol rule 8.3: configurations whose kernel table or break counts are missing, and why
    }
    return finish(d, summary, runs.values(), lambda: save_figure(
        plots.family_bars(explore.kernel_families(d)), d / "families.png",
        "Kernel families per step in the profiled runs' window (they explain a step time, never stand in for one)"))
