"""The GPU seconds each kind of run costs on the H200, from committed results folders only (issue 11, item 6).

A run is modelled as start + steps x step time. `start` is a measured run's wall time less its steps times its
step time by the outside clock: imports, data, compilation and everything the first steps take above the steady
step. It is *cold* for a configuration's first run on a fresh machine (empty caches) and *warm* for a later run
whose caches its first run filled. Every number is read from a file under results/ that git tracks (`SOURCES`);
a kind of run never measured is estimated from one that was, and its `basis` says how (`Model.cost`).
`python scripts/h200_minutes.py table` writes the table (docs/h200-minutes.csv); `plan` prints every stage's runs
for a card with these estimates, and the commands that fit a session, without running anything. A planning tool
(docs/h200-edition.md): the stages print their own plans from measured runs before they start.
"""
from __future__ import annotations

import collections
import csv
import functools
import io
import re
import statistics
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

from tr2 import REPO_ROOT, RESULTS_DIR, Tr2Error, trainargs
from tr2.clock import read_stamped_log
from tr2.results import read_jsonl, read_yaml, write_text_atomic
from tr2.trainlog import parse_iter

CSV_PATH = REPO_ROOT / "docs" / "h200-minutes.csv"
H200_MACHINE = "nvidia-h200"  # the `machine` of the cards whose runs these files measured

# --------------------------------------------------------------------------------------------------- sources

# The bench files (scripts/device_bench.py: one fresh process a run under the outside clock; the char model over
# steps 0-400, the GPT-2 shapes over 0-200): path under results/ -> the sides whose runs are taken. The cupy side
# only from the current program (0ad6d96, 5e4274b and 010d120 of the thirteenth and fourteenth sessions, 2026-12-02,
# results/h200-perf-20261202d and -20261202e: the same default kernels; what changed since then does not change a
# step's time), PyTorch's from every call but one. A record that names a variant library ("lib": pdl, ls, wsp,
# both3, b3w1) is left out: the program the edition runs is the plain one. Each call its own fresh machine but for
# `WARM_MACHINE`'s.
BENCH = {
    "h200-perf-20261202d/call4-0ad6d96/nanogpt/bench/bench.jsonl": ("cupy", "torch"),   # bf16, f16; two rounds
    "h200-perf-20261202d/call4-0ad6d96/gpt2/bench/bench.jsonl": ("cupy", "torch"),      # gpt2-small f16, f32
    "h200-perf-20261202d/call5-0ad6d96/bench/bench.jsonl": ("cupy", "torch"),           # gpt2-medium f32, f16
    "h200-perf-20261202d/call6-0ad6d96/bench/bench.jsonl": ("cupy", "torch"),           # gpt2-medium f32, bf16 (cupy)
    "h200-perf-20261202d/call7-0ad6d96/bench/bench.jsonl": ("cupy", "torch"),           # gpt2-small f16, f32 again
    "h200-perf-20261202d/call8-0ad6d96/bench/bench.jsonl": ("cupy", "torch"),           # gpt2-medium f16 again
    "h200-perf-20261202e/call1-5e4274b/bench/bench.jsonl": ("cupy", "torch"),           # nanogpt f32, bf16
    "h200-perf-20261202e/call2-010d120/bench/bench.jsonl": ("cupy", "torch"),           # nanogpt, gpt2-small bf16
    "h200-perf-20261202e/call3-010d120/bench/bench.jsonl": ("cupy", "torch"),           # nanogpt bf16, f16; 3 rounds
    "h200-perf-20261201b/call4-831b1d3/bench/bench.jsonl": ("torch",),              # cupy: 831b1d3, slower than now
    "h200-perf-20261201b/call5-71acdcc/bench/bench.jsonl": ("torch",),              # cupy: 831b1d3's kernels too
    "h200-perf-20261201b/call2-a18aeab/bench/bench.jsonl": ("torch",),              # cupy: the dQ fold, since narrowed
    "h200-perf-20261201/call9-ff4bcff/bench/bench.jsonl": ("torch",),               # three rounds: rounds 1-2 warm
    "h200-perf-20261201/call10-ff4bcff-torch-default/default/bench.jsonl": ("torch",),  # default mode
    "h200-perf-20261201/call8-ff4bcff/bench/bench.jsonl": ("torch",),
    "h200-perf-20261201/call7-abd5f10/bench/bench.jsonl": ("torch",),
    "h200-perf-20261201/call6-9cc9446/bench/bench.jsonl": ("torch",),
    "h200-perf-20261201/call5-0cd74b0/bench/bench.jsonl": ("torch",),
    "h200-perf-20261201/call4-cd849cd/bench/bench.jsonl": ("torch",),
    "h200-perf-20261201/call3-e19058d/bench/bench.jsonl": ("torch",),               # cupy: void (wrong dK/dV)
    # PyTorch eager (and default on gpt2-small) was timed only in the first sessions
    "h200-checks-20261129/call2/bench.jsonl": ("torch",),
    "h200-checks-20261129/call3/bench.jsonl": ("torch",),
    "h200-graph-20261129/call6-11acdbf/bench.jsonl": ("torch",),
    "h200-attention-20261130/call2-20b5fda/call2/bench.jsonl": ("torch",),
    "h200-attention-20261130/call5-69a6c83/call5/bench.jsonl": ("torch",),
}
# Left out: h200-perf-20261201b/call6-71acdcc (its torch runs are void: a shared Inductor cache served them float16's
# graphs; its machine was warm from call 5), the h200-graph calls 2-4 (failed captures, mixed records), and of the
# thirteenth session call 2 (460f49b, before PDL's fix; the launch entry's base build beside it) and call 3 (cupy
# alone, after a profile of the char model on its machine).

# Calls that ran on the machine an earlier call left (the same GPU in their machine.txt; its Inductor cache under
# /tmp kept, as the torch runs' starts show: gpt2-small f32 37.4 s in call 4 against 26.8 s in call 7): path -> the
# earlier call's. A configuration that an earlier call on the machine ran starts warm there; one it did not, cold
# (as call 10 of h200-perf-20261201 on call 9's machine, whose caches held other modes). Listed in BENCH in
# running order. Thirteenth session: calls 4-8 on GPU-2185eaba (call 5's gpt2-medium cold, call 6's float32 warm and
# bfloat16 cold, calls 7-8 warm); fourteenth: call 3 on call 2's GPU-a46bf242 (nanogpt bf16 warm, f16 cold).
WARM_MACHINE = {
    "h200-perf-20261202d/call4-0ad6d96/gpt2/bench/bench.jsonl": "h200-perf-20261202d/call4-0ad6d96/nanogpt/bench/bench.jsonl",
    "h200-perf-20261202d/call5-0ad6d96/bench/bench.jsonl": "h200-perf-20261202d/call4-0ad6d96/gpt2/bench/bench.jsonl",
    "h200-perf-20261202d/call6-0ad6d96/bench/bench.jsonl": "h200-perf-20261202d/call5-0ad6d96/bench/bench.jsonl",
    "h200-perf-20261202d/call7-0ad6d96/bench/bench.jsonl": "h200-perf-20261202d/call6-0ad6d96/bench/bench.jsonl",
    "h200-perf-20261202d/call8-0ad6d96/bench/bench.jsonl": "h200-perf-20261202d/call7-0ad6d96/bench/bench.jsonl",
    "h200-perf-20261202e/call3-010d120/bench/bench.jsonl": "h200-perf-20261202e/call2-010d120/bench/bench.jsonl",
}

# The quick card's folders (every stage on the char model, bfloat16, eager; results/h200-quick-20261201) and the
# method B folder that ran gpt2-medium (plain float32, no TF32) beside a char-model stage on the same card.
QUICK = {"series": "series-20261201-032228-h200-quick", "method_a": "method_a-20261201-032344-h200-quick",
         "method_b": "method_b-20261201-032448-h200-quick", "footprint": "footprint-20261201-032639-h200-quick",
         "families": "families-20261201-032713-h200-quick"}
QUICK_TIMES = "h200-quick-20261201/call2-b27b8a2/times.txt"   # each stage's seconds, runner start to end
METHOD_B_MEDIUM = "method_b-20261129-100402-h200-methodb-gpt2-medium"
# Method B run whole by its own stage (plain float32, no TF32, 200 steps: init, torch in default mode, cupy and the
# three floors, one fresh machine, GPU-fb5c5236; the fourteenth session, results/h200-perf-20261202e/README.md):
# model -> folder. Its runs' own starts and step times stand for the model's method B runs (`Model.method_b_measured`).
METHOD_B_RUNS = {"gpt2-small": "method_b-20261202-154615-h200-methodb-gpt2-small"}
# The cupy side with and without its whole-step graph on one machine (float32): method A runs it without the graph.
CUPY_EAGER = "h200-attention-20261130/call5-69a6c83/call5/bench.jsonl"

# Not measured in any committed folder: the h200 card's own comment (params/cards/h200.yaml, series.timeout_s) says
# max-autotune compiled the char model for 320 s before its first step; no log of it is committed.
MAX_AUTOTUNE_COMPILE_S = 320.0

SOURCES = (*BENCH, *QUICK.values(), QUICK_TIMES, METHOD_B_MEDIUM, *METHOD_B_RUNS.values(), CUPY_EAGER)


@dataclass
class Obs:
    """One measured run: a configuration, its steps, the clock's step time and its wall time."""
    model: str
    dtype: str
    build: str
    steps: int
    step_ms: float
    wall_s: float
    cold: bool
    source: str
    peak_bytes: Optional[int] = None

    @property
    def start_s(self) -> float:
        return self.wall_s - self.steps * self.step_ms / 1000.0


def _build(side: str, mode, hr) -> str:
    return f"{side}-{mode or 'eager'}" if side in ("torch", "nanogpt") else ("cupy-hr" if hr else "cupy")


def _ok(r: dict) -> bool:
    return r.get("status") == "ok" and isinstance(r.get("step_ms"), (int, float)) and isinstance(r.get("wall_s"), (int, float))


def observations(root=None) -> list[Obs]:
    """Every run the sources measured: the bench files' and the quick series'. A configuration's first run on a
    machine is cold (each call had a fresh machine but `WARM_MACHINE`'s; call 10 ran on call 9's, whose caches held
    other modes), its later runs warm (call 9's rounds 1-2 shared round 0's caches). A variant library's run (a
    truthy "lib") is not the program's and is left out."""
    root = Path(root) if root else RESULTS_DIR
    out = []
    seen_on = {}    # bench file -> the configurations its machine had run by its end
    for rel, sides in BENCH.items():
        seen = set(seen_on.get(WARM_MACHINE.get(rel), ()))
        for r in read_jsonl(root / rel):
            if (r.get("side") not in sides or not _ok(r) or r.get("lib")
                    or (r["side"] == "cupy" and not r.get("cuda_graph"))):
                continue
            b = _build(r["side"], r.get("mode"), r.get("half_roundings"))
            k = (r["model"], r["dtype"], b)
            out.append(Obs(r["model"], r["dtype"], b, int(r["steps"]), r["step_ms"], r["wall_s"], k not in seen,
                           rel.split("/")[0] + "/" + rel.split("/")[1], r.get("peak_bytes")))
            seen.add(k)
        seen_on[rel] = seen
    d = root / QUICK["series"]
    steps = _card_steps(d)
    for r in read_jsonl(d / "runs.jsonl"):
        if _ok(r) and r.get("side") in ("torch", "nanogpt"):   # its cupy side ran an older program
            out.append(Obs(r["model"], r["dtype"], r["build"], steps, r["step_ms"], r["wall_s"],
                           bool(r.get("cold_compile", r.get("round") == 0)), QUICK["series"], r.get("peak_bytes")))
    return out


def _card_steps(d: Path) -> int:
    return int(read_yaml(d / "card.yaml").get("series", {}).get("steps", 0))


# ---------------------------------------------------------------------------------------------- the cost model

@dataclass
class Cost:
    """One configuration's run: start (cold, warm) and step time, with how they were found."""
    model: str
    dtype: str
    build: str
    step_ms: float
    cold_s: float
    warm_s: float
    basis: str                      # "measured" or "estimated: how"
    sources: tuple = ()
    peak_gb: Optional[float] = None
    n: int = 0                      # measured runs behind it
    warm_measured: bool = False
    steps_measured: int = 0         # the most steps a measured run of it trained (0: none measured)

    def run_s(self, steps: int, cold: bool) -> float:
        return (self.cold_s if cold else self.warm_s) + steps * self.step_ms / 1000.0


def _median(xs):
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


@dataclass
class Model:
    """Everything the estimates read, built once from the committed folders (`load`)."""
    obs: list
    root: Path
    costs: dict = field(default_factory=dict)

    def measured(self, model, dtype, build) -> Optional[Cost]:
        rs = [o for o in self.obs if (o.model, o.dtype, o.build) == (model, dtype, build)]
        if not rs:
            return None
        cold = [o.start_s for o in rs if o.cold]
        warm = [o.start_s for o in rs if not o.cold]
        peak = max((o.peak_bytes for o in rs if o.peak_bytes), default=None)
        c = _median(cold) if cold else _median(warm)
        return Cost(model, dtype, build, _median([o.step_ms for o in rs]), c, _median(warm) if warm else c,
                    "measured", tuple(sorted({o.source for o in rs})), peak and peak / 1e9, len(rs), bool(warm),
                    max(o.steps for o in rs))

    def cost(self, model: str, dtype: str, build: str) -> Cost:
        key = (model, dtype, build)
        if key not in self.costs:
            c = self._cost(model, dtype, build)
            if not c.warm_measured and build != "torch-max-autotune":
                c = self._warm(c)
            self.costs[key] = c
        return self.costs[key]

    def _warm(self, c: Cost) -> Cost:
        """A warm start never measured for this configuration: its cold start x the warm/cold ratio measured for
        the same model and build in another type (reduce-overhead's for default and nanoGPT's loop in a compiled
        mode), else the cold start itself (an upper bound)."""
        family = c.build.replace("nanogpt-", "torch-")
        for b in dict.fromkeys((family, "torch-reduce-overhead" if family == "torch-default" else family)):
            for o in (self.measured(c.model, t, b) for t in ("bfloat16", "float32", "float16")):
                if o is not None and o.warm_measured:
                    ratio = o.warm_s / o.cold_s
                    c.warm_s, c.warm_measured = c.cold_s * ratio, True
                    c.basis += f"; warm start estimated: x {ratio:.2f}, {b}'s warm/cold in {o.dtype}"
                    return c
        return c

    def _cost(self, model, dtype, build) -> Cost:
        m = self.measured(model, dtype, build)
        if m is not None:
            return m
        if build == "cupy" and dtype != "float32":   # the build without the half roundings: not timed on 0ad6d96-010d120
            f = self.cost(model, "float32", "cupy")
            return Cost(model, dtype, build, f.step_ms, f.cold_s, f.warm_s,
                        "estimated: the float32 cupy build's time (the exact half build was not timed on the current "
                        "program)", f.sources, f.peak_gb)
        if build.startswith("nanogpt-"):    # nanoGPT's own loop: timed only in eager bfloat16 on the char model
            t = self.cost(model, dtype, "torch-" + build[len("nanogpt-"):])
            return Cost(model, dtype, build, t.step_ms, t.cold_s, t.warm_s,
                        f"estimated: as our torch loop in the same mode ({t.basis})", t.sources, t.peak_gb)
        if build == "torch-max-autotune":
            r = self.cost(model, dtype, "torch-reduce-overhead")
            return Cost(model, dtype, build, r.step_ms, r.cold_s + MAX_AUTOTUNE_COMPILE_S, r.warm_s,
                        f"estimated: reduce-overhead's step and warm start, cold start + {MAX_AUTOTUNE_COMPILE_S:.0f} s "
                        "(the compile time params/cards/h200.yaml's comment gives; no committed log)", r.sources, r.peak_gb)
        if build == "torch-default" and dtype != "bfloat16":   # default timed in bfloat16 only
            d, r = self.cost(model, "bfloat16", "torch-default"), self.cost(model, dtype, "torch-reduce-overhead")
            return Cost(model, dtype, build, max(r.step_ms, d.step_ms), d.cold_s, d.warm_s,
                        "estimated: the larger of reduce-overhead's step in this type and default's in bfloat16 (default "
                        "launches what reduce-overhead's CUDA graph replays: its bfloat16 step is a floor of host time); "
                        "default's bfloat16 start", tuple(sorted(set(d.sources) | set(r.sources))), r.peak_gb)
        raise Tr2Error(f"h200_minutes: no committed H200 run of {model}/{dtype}/{build} to estimate it from")

    # -- what method A, method B, the footprint and the families add

    def cupy_eager_ratio(self, model: str) -> float:
        """Method A runs the cupy side without its graph: eager over graph step time, float32, one machine."""
        by = {}
        for r in read_jsonl(self.root / CUPY_EAGER):
            if _ok(r) and r["side"] == "cupy" and r["dtype"] == "float32":
                by.setdefault(r["model"], {})["graph" if r.get("cuda_graph") else "eager"] = r["step_ms"]
        m = model if model in by else "gpt2-small"  # gpt2-medium: not timed eager; as gpt2-small (GPU-bound)
        return by[m]["eager"] / by[m]["graph"]

    def eval_ratio(self, side: str) -> float:
        """One evaluation batch's time over one training step's, from the quick card's method A logs (char model,
        bfloat16, eager): the gap at the evaluation of step 250 less its 9 training steps, over 2 x eval_iters."""
        d = self.root / QUICK["method_a"]
        card = read_yaml(d / "card.yaml")
        iters = int(card["method_a"]["eval_iters"])
        ratios = []
        for log in sorted((d / "logs").glob(f"method_a-*_{side}_*.log")):
            lines = read_stamped_log(log)
            it = {p[0]: (t, p[2]) for t, line in lines if (p := parse_iter(line))}
            ev = [t for t, line in lines if line.startswith("step 250:")]
            if not ev or 240 not in it or 250 not in it:
                continue
            step_ms = it[250][1]
            batch_ms = (ev[0] - it[240][0] - 9 * step_ms / 1000.0) * 1000.0 / (2 * iters)
            ratios.append(batch_ms / step_ms)
        return statistics.median(ratios)

    def method_b_step_ms(self, model: str, side: str) -> float:
        """A step in plain float32 without TF32 (method B): from the logs of the quick card's method B (char model),
        of `METHOD_B_RUNS`' stages (gpt2-small) and of the gpt2-medium stage (which shared the card with a char-model
        stage: an upper bound); a model with none of these scaled from gpt2-medium by their float32 (TF32) step
        times on the same side."""
        side = "torch" if side in ("torch", "nanogpt") or side.startswith("floor") else side
        if model == "nanogpt":
            return _log_step_ms(self.root / QUICK["method_b"] / "logs" / f"method_b-nanogpt-{side}.log")
        if model in METHOD_B_RUNS:
            return _log_step_ms(self.root / METHOD_B_RUNS[model] / "logs" / f"method_b-{model}-{side}.log")
        med = _log_step_ms(self.root / METHOD_B_MEDIUM / "logs" / f"method_b-gpt2-medium-{side}.log")
        if model == "gpt2-medium":
            return med
        build = "cupy" if side == "cupy" else "torch-reduce-overhead"
        return med * self.cost(model, "float32", build).step_ms / self.cost("gpt2-medium", "float32", build).step_ms

    def method_b_measured(self, card: dict, model: str, what: str) -> Optional[tuple]:
        """The run `what` of the model's method B as `METHOD_B_RUNS`' folder measured it: (start_s, step_ms, steps),
        the start its wall time less its steps at the median step of its own log after step 100 (init: no steps).
        None where the folder holds no such run, or ran PyTorch in another mode than the card's (its torch run and
        floors)."""
        folder = METHOD_B_RUNS.get(model)
        if folder is None:
            return None
        d = self.root / folder
        fc = read_yaml(d / "card.yaml")
        if what not in ("init", "cupy") and fc["method_a"]["torch_mode"] != card["method_a"]["torch_mode"]:
            return None
        rec = next((r for r in read_jsonl(d / "runs.jsonl") if r.get("what") == what and r.get("status") == "ok"
                    and isinstance(r.get("wall_s"), (int, float)) and r.get("log")), None)
        if rec is None:
            return None
        if what == "init":
            return rec["wall_s"], 0.0, 0
        steps = int(fc["method_b"]["steps"]) + 1
        step = _log_step_ms(d / rec["log"])
        return rec["wall_s"] - steps * step / 1000.0, step, steps

    def quick_overheads(self) -> dict:
        """Each quick stage's seconds (runner start to end) less its runs' wall times: the notebook, the summary
        and the plot around the runs, paid once per stage command."""
        times = {}
        for line in (self.root / QUICK_TIMES).read_text().splitlines():
            p = line.split()
            if len(p) >= 4 and p[0] in QUICK:
                times[p[0]] = float(p[3])
        out = {}
        for stage, folder in QUICK.items():
            runs = read_jsonl(self.root / folder / ("footprint.jsonl" if stage == "footprint" else "runs.jsonl"))
            out[stage] = (times[stage] - sum(r.get("wall_s") or 0.0 for r in runs), len(runs))
        return out

    def stage_overhead_s(self) -> float:
        o = self.quick_overheads()
        return statistics.median(v for s, (v, _n) in o.items() if s != "footprint")

    def footprint_extra_s(self) -> float:
        """Per footprint run beyond its wall time: classifying the files it mapped (the quick footprint's
        overhead less a stage's)."""
        over, n = self.quick_overheads()["footprint"]
        return max(0.0, (over - self.stage_overhead_s()) / n)

    def profile_extra_s(self, side: str) -> float:
        """A profiled run's time beyond an unprofiled run of as many steps (the quick card's families runs against
        its series' cold runs, char model, bfloat16)."""
        fam = {r["side"]: r for r in read_jsonl(self.root / QUICK["families"] / "runs.jsonl") if r.get("status") == "ok"}
        ser = {r["side"]: r for r in read_jsonl(self.root / QUICK["series"] / "runs.jsonl")
               if r.get("status") == "ok" and r.get("round") == 0}
        steps = int(read_yaml(self.root / QUICK["families"] / "card.yaml")["families"]["steps"])
        s = ser[side]
        start = s["wall_s"] - _card_steps(self.root / QUICK["series"]) * s["step_ms"] / 1000.0
        return max(0.0, fam[side]["wall_s"] - start - steps * s["step_ms"] / 1000.0)

    def method_b_ratio(self, what: str) -> float:
        """A floor run's (or nanoGPT's loop's) wall time over the torch side's, quick card's method B."""
        recs = {r["what"]: r["wall_s"] for r in read_jsonl(self.root / QUICK["method_b"] / "runs.jsonl")
                if r.get("status") == "ok"}
        return recs[what] / recs["torch"] if what in recs else 1.0


def _log_step_ms(path: Path, after: int = 100) -> float:
    """The median time field of a stamped log's iter lines after step `after`."""
    ts = [p[2] for _t, line in read_stamped_log(path) if (p := parse_iter(line)) and p[0] > after]
    if not ts:
        raise Tr2Error(f"h200_minutes: {path} holds no iter line after step {after}")
    return statistics.median(ts)


@functools.lru_cache(maxsize=4)
def load(root=None) -> Model:
    """The model of the committed folders under root (results/ by default); every source must be there (a model of a
    few would mislead): `scripts/device_tree.sh slim` keeps them; its trees before 2026-12-04 held none."""
    root = Path(root) if root else RESULTS_DIR
    missing = [s for s in SOURCES if not (root / s).exists()]
    if missing:
        raise Tr2Error(f"h200_minutes: {len(missing)} of its {len(SOURCES)} sources are not under {root} (first: "
                       f"{missing[0]}); the model reads every one of them (scripts/device_tree.sh slim keeps them; "
                       "`python scripts/h200_minutes.py sources` lists them)")
    return Model(observations(root), root)


# ------------------------------------------------------------------------------------------- per stage and kind

SERIES_KIND = re.compile(r"^(?P<key>[^ ]+) \((?P<what>cold compile|caches warm)\)$")


@dataclass
class Run:
    """One run of a stage's kind under a card: its seconds and how they add up."""
    seconds: float
    start_s: float
    step_ms: float
    steps: int
    basis: str
    cost: Optional[Cost] = None
    build: str = ""
    dtype: str = ""
    sources: tuple = ()             # what the stage adds is read from (beside the configuration's own sources)


def kind_run(m: Model, card: dict, stage: str, kind: str) -> Run:
    """One run of `kind` (the stage's own kind of run, as its plan prints it) under `card`."""
    if stage == "series":
        g = SERIES_KIND.match(kind)
        model, dtype, build = g["key"].split("/")
        c = m.cost(model, dtype, build)
        cold = g["what"] == "cold compile"
        steps = card["series"]["steps"]
        basis = c.basis if cold or c.warm_measured else f"{c.basis}; warm start not measured: the cold one"
        if 0 < c.steps_measured < steps:
            basis += f"; timed over {c.steps_measured} steps, the other {steps - c.steps_measured} extrapolated at its step"
        return Run(c.run_s(steps, cold), c.cold_s if cold else c.warm_s, c.step_ms, steps, basis, c, build, dtype)
    if stage == "method_a":
        from tr2.cards import method_a_schedule
        model, dtype, side = kind.split("/")
        sch = method_a_schedule(card, model)
        if side == "torch":
            c = m.cost(model, dtype, f"torch-{card['method_a']['torch_mode']}")
            step, basis, build = c.step_ms, c.basis, c.build
        else:
            c = m.cost(model, dtype, "cupy-hr" if dtype != "float32" else "cupy")
            step, build = c.step_ms * m.cupy_eager_ratio(model), c.build + " (no graph)"
            basis = f"estimated: the graph's step x {m.cupy_eager_ratio(model):.3f}, eager/graph ({c.basis})"
        evals = sch["steps"] // sch["eval_interval"] + 1 if sch["eval_interval"] else 0
        eval_s = evals * 2 * sch["eval_iters"] * step * m.eval_ratio(side) / 1000.0
        steps = sch["steps"] + 1
        # a configuration's seeds share its compile caches (configs.compile_caches): the first starts cold
        n = len(card["method_a"]["seeds"])
        start = (c.cold_s + (n - 1) * c.warm_s) / n
        return Run(start + steps * step / 1000.0 + eval_s, start, step, steps,
                   f"{basis}; start: the mean of one cold and {n - 1} warm; {steps} steps and {evals} evaluations of "
                   f"{2 * sch['eval_iters']} batches extrapolated from the step time (an evaluation batch: "
                   f"{m.eval_ratio(side):.2f} of a step)", c, build, dtype,
                   (QUICK["method_a"],) + (("/".join(CUPY_EAGER.split("/")[:2]),) if side == "cupy" else ()))
    if stage == "method_b":
        model, what = kind.split("/")
        mode = card["method_a"]["torch_mode"]
        if what == "order":
            return Run(0.1, 0.1, 0.0, 0, "written on the CPU (0.07 s in the quick card's method B)", None, "", "float32",
                       (QUICK["method_b"],))
        steps = card["method_b"]["steps"] + 1
        meas = m.method_b_measured(card, model, "torch" if what == "nanogpt" else what)
        if meas is not None:   # measured whole by a method B stage (nanoGPT's loop: its torch run x the quick ratio)
            start, step, _n = meas
            folder = METHOD_B_RUNS[model]
            ratio = m.method_b_ratio(what) if what == "nanogpt" else 1.0
            if what == "init":
                return Run(start, start, 0.0, 0, f"measured: the init run's wall time in {folder}", None,
                           "torch-eager", "float32", (folder,))
            build = "cupy" if what == "cupy" else f"{'nanogpt' if what == 'nanogpt' else 'torch'}-{mode}"
            return Run((start + steps * step / 1000.0) * ratio, start, step, steps,
                       ("estimated: the torch run " if ratio != 1.0 else f"measured: the {what} run ")
                       + f"in {folder}: its start (wall time less its steps at its log's median step) + {steps} steps "
                       "at that step" + (f", x {ratio:.2f} (nanoGPT's loop's wall time over the torch run's, quick "
                                         "card)" if ratio != 1.0 else ""),
                       None, build, "float32", (folder,) + ((QUICK["method_b"],) if ratio != 1.0 else ()))
        if what == "init":
            c = m.cost(model, "float32", "torch-eager")
            return Run(c.cold_s, c.cold_s, 0.0, 0, f"{c.basis}: torch eager float32's cold start", c, "torch-eager",
                       "float32")
        side, run_mode = ("cupy", None) if what in ("cupy", "also-cupy-again") else (
            ("nanogpt", mode) if what == "nanogpt" else
            ("torch", what[len("also-torch-"):] if what.startswith("also-torch-") else mode))
        c = m.cost(model, "float32", "cupy" if side == "cupy" else f"{side}-{run_mode}")
        step = m.method_b_step_ms(model, side)
        # the floors follow the torch run in its mode and type, in the Inductor cache the stage's runs share
        warm = what.startswith("floor-")
        ratio = m.method_b_ratio(what) if warm or what == "nanogpt" else 1.0
        start = c.warm_s if warm else c.cold_s
        how = {"nanogpt": "measured in the quick card's method B",
               "gpt2-medium": "measured in the gpt2-medium method B stage, which shared the card with another stage",
               **{k: f"measured in {v}" for k, v in METHOD_B_RUNS.items()}}.get(
            model, "gpt2-medium's x this model's over gpt2-medium's in float32 (TF32) on the same side")
        return Run((start + steps * step / 1000.0) * ratio, start, step, steps,
                   f"estimated: {c.build}'s {'warm' if warm else 'cold'} start + {steps} steps at method B's float32 "
                   f"step (no TF32; {how})" + (f", x {ratio:.2f} (its wall time over the torch run's, quick card)"
                                       if ratio != 1.0 else ""), c, c.build, "float32",
                   (QUICK["method_b"], METHOD_B_RUNS.get(model, METHOD_B_MEDIUM)))
    if stage in ("footprint", "families"):
        model, dtype, build = kind.split("/")
        c = m.cost(model, dtype, build)
        if stage == "footprint":
            from tr2.footprint import STEPS
            return Run(c.run_s(STEPS + 1, True) + m.footprint_extra_s(), c.cold_s, c.step_ms, STEPS + 1,
                       f"{c.basis}; cold start + {STEPS + 1} steps + {m.footprint_extra_s():.1f} s of file "
                       "classification (quick card)", c, build, dtype, (QUICK["footprint"], QUICK_TIMES.rsplit("/", 1)[0]))
        side = "cupy" if build.startswith("cupy") else "torch"
        steps = card["families"]["steps"] + 1
        return Run(c.run_s(steps, True) + m.profile_extra_s(side), c.cold_s, c.step_ms, steps,
                   f"{c.basis}; cold start + {steps} steps + {m.profile_extra_s(side):.1f} s of profiler (quick card)",
                   c, build, dtype, (QUICK["families"], QUICK["series"]))
    raise Tr2Error(f"h200_minutes: stage {stage!r} is not one of the protocol's")


def kind_seconds(m: Model, card: dict, stage: str, kind: str) -> tuple[float, str]:
    r = kind_run(m, card, stage, kind)
    return r.seconds, r.basis


# ------------------------------------------------------------------------------------------------- plans

DESC = {"series": "series runs", "method_a": "method A", "method_b": "method B", "footprint": "footprint",
        "families": "families"}


def fresh_kinds(card: dict, stage: str) -> list[str]:
    """The kinds of run a fresh folder of the stage runs for `card`, in running order, as its plan names them."""
    from tr2 import configs
    if stage == "series":
        from tr2 import series
        seen, out = set(), []
        for _r, c in series.plan(card):
            out.append(series._kind(c.key, c.key not in seen))
            seen.add(c.key)
        return out
    if stage == "method_a":
        from tr2 import method_a
        return [method_a.kind_of(r) for r in method_a.plan(card)]
    if stage == "method_b":
        from tr2 import method_b
        return [r["key"] for r in method_b.plan(card)]
    if stage in ("footprint", "families"):
        return [c.key for c in configs.configurations(card)]
    raise Tr2Error(f"stage: {stage!r} is not allowed; allowed: {' | '.join(DESC)}")


def stage_total(card: dict, stage: str, m: Optional[Model] = None) -> dict:
    """Runs and seconds of a stage on a fresh folder of `card` (the runs only; `overhead_s` once per command)."""
    m = m or load()
    kinds = fresh_kinds(card, stage)
    secs = [kind_seconds(m, card, stage, k)[0] for k in kinds]
    return {"stage": stage, "runs": len(kinds), "seconds": sum(secs), "longest_s": max(secs, default=0.0),
            "overhead_s": m.stage_overhead_s()}


def plan_text(card: dict, stage: str, m: Optional[Model] = None) -> str:
    """A fresh folder's runs of the stage for `card`, each kind with its estimated seconds and how they were found."""
    m = m or load()
    kinds = fresh_kinds(card, stage)
    lines = [f"{DESC[stage]}: {len(kinds)} runs"]
    total = 0.0
    for k, n in collections.Counter(kinds).items():
        seconds, basis = kind_seconds(m, card, stage, k)
        total += n * seconds
        lines.append(f"  {n:4d} x {k}: {seconds:.1f} s each ({basis})")
    lines.append(f"  estimate: {total / 60:.1f} GPU minutes of runs")
    return "\n".join(lines)


# ------------------------------------------------------------------------------------------------- the table

CSV_FIELDS = ["stage", "kind", "model", "dtype", "build", "runs_in_card", "seconds_each", "start_s", "step_ms",
              "steps", "start_cold_s", "start_warm_s", "peak_gb", "basis", "sources"]


def table(card: dict, m: Optional[Model] = None) -> list[dict]:
    """One row per stage and kind of run of `card`: its seconds (start + steps x step time + what the stage adds),
    the configuration's cold and warm starts, its allocator peak and how each number was found."""
    m = m or load()
    rows = []
    for stage in DESC:
        kinds = fresh_kinds(card, stage)
        for k in dict.fromkeys(kinds):
            r = kind_run(m, card, stage, k)
            c = r.cost
            rows.append({"stage": stage, "kind": k, "model": k.split("/")[0], "dtype": r.dtype, "build": r.build,
                         "runs_in_card": kinds.count(k), "seconds_each": round(r.seconds, 1),
                         "start_s": round(r.start_s, 1), "step_ms": round(r.step_ms, 2), "steps": r.steps,
                         "start_cold_s": c and round(c.cold_s, 1), "start_warm_s": c and round(c.warm_s, 1),
                         "peak_gb": c and c.peak_gb and round(c.peak_gb, 2), "basis": r.basis,
                         "sources": " ".join(dict.fromkeys((*(c.sources if c else ()), *r.sources)))})
    return rows


def csv_text(rows: list[dict]) -> str:
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=CSV_FIELDS, lineterminator="\n")
    w.writeheader()
    w.writerows({k: ("" if r.get(k) is None else r[k]) for k in CSV_FIELDS} for r in rows)
    return buf.getvalue()


def totals_text(card: dict, m: Optional[Model] = None) -> str:
    m = m or load()
    lines = [f"card {card['card']}: GPU minutes per stage (runs only; each stage command adds "
             f"{m.stage_overhead_s():.0f} s of notebook and summary)"]
    total = 0.0
    for stage in DESC:
        t = stage_total(card, stage, m)
        total += t["seconds"]
        lines.append(f"  {stage:10s} {t['runs']:4d} runs  {t['seconds'] / 60:7.1f} min  (longest run "
                     f"{t['longest_s'] / 60:.1f} min)")
    lines.append(f"  {'total':10s}       {total / 60:12.1f} min")
    return "\n".join(lines)


# What a device command adds to its runs, from the quick card's call (results/h200-quick-20261201/call2-b27b8a2):
# its 343.5 s of wall time less the stages' 331 s is the script's setup (carried wheels, the machine record).
COMMAND_SETUP_S = 343.5 - 331.0
# Method B's later runs read the start its first run wrote (runs/<model>/init.npz, 0.04-1.4 GB), which stays on the
# machine: the stage runs whole in one command.
WHOLE = ("method_b",)
PIECE_S = 510.0      # a command's estimate at most: 8.5 minutes, under the 9 the plan allows (10 the tool's limit)
SESSION_S = 1620.0   # a session's commands at most: 27 of its 30 device minutes (a machine start ~0.5-1 minute)


def pieces(card: dict, m: Optional[Model] = None, piece_s: float = PIECE_S, session_s: float = SESSION_S) -> list:
    """The card's runs cut into device commands: each stage's runs in running order, a command closed before it
    would pass `piece_s` (setup, the stage's notebook and summary once per stage it runs, and its runs); stages
    follow one another in `make all`'s order and a short stage shares a command with the next. Then commands
    into sessions of at most `session_s`. Returns [{session, command, stages: {stage: (first, last, runs)},
    seconds}]."""
    m = m or load()
    over = m.stage_overhead_s()
    cmds, cur = [], None
    for stage in DESC:
        kinds = fresh_kinds(card, stage)
        secs = [kind_run(m, card, stage, k).seconds for k in kinds]
        if stage in WHOLE and cur is not None and cur["seconds"] + over + sum(secs) > piece_s:
            cur = None   # the stage starts a command of its own
        for i, s in enumerate(secs):
            add = s + (over if cur is None or stage not in cur["stages"] else 0.0)
            if cur is None or (cur["seconds"] + add > piece_s and not (stage in WHOLE and stage in cur["stages"])):
                cur = {"stages": {}, "seconds": COMMAND_SETUP_S}
                cmds.append(cur)
                add = s + over
            first, _last, n = cur["stages"].get(stage, (i + 1, i + 1, 0))
            cur["stages"][stage] = (first, i + 1, n + 1)
            cur["seconds"] += add
    session, used = 1, 0.0
    for j, c in enumerate(cmds, 1):
        if used + c["seconds"] > session_s:
            session, used = session + 1, 0.0
        used += c["seconds"]
        c.update(session=session, command=j)
    return cmds


def pieces_text(card: dict, m: Optional[Model] = None) -> str:
    cmds = pieces(card, m)
    lines = [f"card {card['card']}: {len(cmds)} device commands of at most {PIECE_S / 60:.1f} estimated minutes, in "
             f"sessions of at most {SESSION_S / 60:.0f} (each command: {COMMAND_SETUP_S:.1f} s of setup, each stage in it "
             f"{(m or load()).stage_overhead_s():.0f} s of notebook and summary, then its runs)"]
    for c in cmds:
        what = "; ".join(f"{st} runs {a}-{b} ({n})" for st, (a, b, n) in c["stages"].items())
        lines.append(f"  session {c['session']} command {c['command']}: {c['seconds'] / 60:4.1f} min  {what}")
    total = sum(c["seconds"] for c in cmds)
    lines.append(f"  total {total / 60:.1f} GPU minutes in {cmds[-1]['session'] if cmds else 0} sessions, "
                 "plus a machine start (0.5-1 min) per session")
    return "\n".join(lines)


class Parser(trainargs.Parser):   # one line for a bad argument (its subcommands' too), an option given twice refused
    def error(self, message):
        sys.stderr.write(f"h200_minutes: error: {message}\n")
        sys.exit(2)


def main(argv=None) -> int:
    from tr2.cards import load_card
    p = Parser(prog="python scripts/h200_minutes.py", description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    t = sub.add_parser("table", help="write the per-kind table of the full card (docs/h200-minutes.csv)")
    t.add_argument("--card", default="h200")
    t.add_argument("--out", default=str(CSV_PATH), help="'-' for stdout")
    for name in ("plan", "totals"):
        q = sub.add_parser(name, help="every stage's plan (or only the totals) for a card, nothing run")
        q.add_argument("--card", default="h200")
        q.add_argument("--stage", default=None, choices=list(DESC))
    sub.add_parser("sources", help="the paths it reads, one a line, relative to the repository (device_tree.sh slim "
                                   "keeps them)")
    a = p.parse_args(argv)
    if a.cmd == "sources":
        sys.stdout.write("".join(f"{(RESULTS_DIR / s).relative_to(REPO_ROOT)}\n" for s in SOURCES))
        return 0
    try:
        card = load_card(a.card)
        if card["machine"] != H200_MACHINE:   # no committed run models another machine's
            raise Tr2Error(f"--card: {a.card!r} is a card of machine {card['machine']!r}; allowed: a card of machine "
                           f"{H200_MACHINE} (e.g. h200, h200-edition)")
        if a.cmd == "table" and a.out != "-":
            trainargs.check_output_path("--out", a.out, make_folder=True)   # before the table is built, not at its end
        if a.cmd == "table":
            text = csv_text(table(card))
            if a.out == "-":
                sys.stdout.write(text)
            else:
                write_text_atomic(Path(a.out), text)
                print(f"{a.out}: {text.count(chr(10)) - 1} rows")
            return 0
        if a.cmd == "plan":
            for stage in [a.stage] if a.stage else DESC:
                print(plan_text(card, stage) + "\n")
        print(totals_text(card))
        if not a.stage:
            print(pieces_text(card))
        return 0
    except Tr2Error as e:
        sys.stderr.write(f"h200_minutes: error: {str(e).removeprefix('h200_minutes: ')}\n")
        return 2


if __name__ == "__main__":
    sys.exit(main())
