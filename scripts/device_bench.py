"""One call's work on the GPU machine, in phases, each inside its own time budget.

Run from the repository root on the device (after `source scripts/device_env.sh`):
    python3 scripts/device_bench.py OUTDIR PHASE[,PHASE...]
Phases:
  losscheck  the char model in bfloat16 and float16 with its dropout: the cupy side's losses at step 400 (three
             builds, LOSSCHECK_BUILDS, seed 1337) against five torch runs with seeds 1337-1341, and the compared
             build's five seeds against them by method A's rule (runs in parallel: a correctness check, not a timing)
  series     the series stage (papermill notebook) on params/cards/h200-nanogpt.yaml
  bench      single clocked runs of every model and element type, cupy side and torch eager
  profile    torch.profiler kernel tables of the char model in bfloat16, both sides
  oom        a run that asks for more memory than it may have ends as a clear out-of-memory record
  methodb    §7 B on the GPU for the three models: one torch-made start, one batch order, dropout 0,
             --no-tf32, both sides (in parallel: a correctness check, not a timing)
Everything lands in OUTDIR (JSON lines, logs); a short table is printed last.
"""
from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from tr2 import clock, data, method_b
from tr2.configs import compile_caches
from tr2.models import load_model
from tr2.results import append_jsonl
from tr2.series import ENERGY_MIN_SPAN_S, energy_counts, window_gpu, window_marker
from tr2.sysinfo import GpuSampler
from tr2.trainlog import read_metrics

REPO = Path(__file__).resolve().parents[1]

PY = sys.executable
TRAIN = [PY, "-u", "-m", "tr2.train"]
# A dry run on a CPU: TR2_BENCH_DEVICE=cpu TR2_BENCH_MODELS=tiny runs every phase's logic on the tiny model.
DEVICE = os.environ.get("TR2_BENCH_DEVICE", "cuda")
MODEL_STANDIN = os.environ.get("TR2_BENCH_MODELS")
# TR2_BENCH_SELECT=gpt2-medium/float16,nanogpt/bfloat16 limits the bench phase to those configurations.
SELECT = {tuple(x.split("/")) for x in os.environ.get("TR2_BENCH_SELECT", "").split(",") if x}
# TR2_BENCH_CUPY=eager,graph runs the cupy side without and with --cuda-graph;
# TR2_BENCH_TORCH_MODES=eager,default,reduce-overhead the torch modes (default: eager alone).
CUPY_VARIANTS = [v for v in os.environ.get("TR2_BENCH_CUPY", "eager").split(",") if v]
# TR2_BENCH_CUPY_LIBS=main=.cache/baseline/lib,...: each NAME=LIB adds a cupy variant graph@NAME, the graph run with
# LIB (another commit's lib/ with params/ beside it) first on PYTHONPATH: a kernel change against its baseline
# inside the same rotating rounds as PyTorch.
CUPY_LIBS = dict(x.split("=", 1) for x in os.environ.get("TR2_BENCH_CUPY_LIBS", "").split(",") if x)
TORCH_MODES = [m for m in os.environ.get("TR2_BENCH_TORCH_MODES", "eager").split(",") if m]
# TR2_BENCH_CUPY_ENV=KEY=VALUE;...: the environment of this tree's own cupy runs (not of the LIB variants, below)
BENCH_ENV = dict(x.split("=", 1) for x in os.environ.get("TR2_BENCH_CUPY_ENV", "").split(";") if x)
# TR2_BENCH_SAMPLE_S: the interval of the card's samples (NVML) during each bench run, default 0.1 s: a GPT-2 window of
# 100 steps lasts 1.6 s, where the series' 1 s would place one or two samples in it
SAMPLE_S = float(os.environ.get("TR2_BENCH_SAMPLE_S", "0.1"))


def lib_env(lib: Path) -> dict:
    """A LIB variant's own settings, beside its lib/: a products/ folder there is its products record
    (TR2_PRODUCTS_DIR), and a file bench.env there holds KEY=VALUE lines for its environment (e.g. TR2_GELU_REVERSE=0)."""
    env = {}
    if (lib.parent / "products").is_dir():
        env["TR2_PRODUCTS_DIR"] = str((lib.parent / "products").resolve())
    if (lib.parent / "bench.env").is_file():
        env.update(dict(line.split("=", 1) for line in (lib.parent / "bench.env").read_text().split() if "=" in line))
    return env


def train_cmd(side, model, dtype, steps, mode=None, hr=False, extra=(), graph=False):
    model = MODEL_STANDIN or model
    cmd = TRAIN + ["--side", side, "--model", model, "--dtype", dtype, "--device", DEVICE, "--steps", str(steps)]
    if mode:
        cmd += ["--mode", mode]
    if hr:
        cmd += ["--half-roundings"]
    if graph:
        cmd += ["--cuda-graph"]
    return cmd + list(extra)


def parallel(jobs, out: Path, timeout_s: float):
    """jobs: {name: cmd}. All at once; each log to out/<name>.log. Returns {name: returncode or 'timeout'}."""
    procs = {}
    for name, cmd in jobs.items():
        f = open(out / f"{name}.log", "w")
        procs[name] = (subprocess.Popen(cmd, stdout=f, stderr=subprocess.STDOUT), f)
    deadline = time.monotonic() + timeout_s
    codes = {}
    for name, (p, f) in procs.items():
        try:
            codes[name] = p.wait(timeout=max(1.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            p.kill()
            codes[name] = "timeout"
        f.close()
    return codes


# The cupy builds of the loss check: (name, half roundings, CUDA graph). hr-graph is the build the H200 cards compare
# (half_roundings and cuda_graph in params/cards/h200.yaml); the graph replays the eager loop's step to the bit
# (tests/test_graph_gpu.py), and this checks the float16 loss scaler decided on the device over 400 steps.
LOSSCHECK_BUILDS = (("hr", True, False), ("exact", False, False), ("hr-graph", True, True))
LOSSCHECK_SEEDS = tuple(range(1337, 1342))
# The compared build also runs the other four seeds: a family of five a side, judged at step 400 by method A's rule
# (tr2.method_a.verdict). Why: the single-run check (one cupy seed inside the five torch runs' range) cannot hold
# steadily, since PyTorch eager on the GPU is not run-to-run deterministic and its range moves from call to call (the
# same seeds' float16 val reached 1.84151, 1.83805 and 1.83458 in three calls while our build's stayed 1.83532:
# results/h100-perf-20261206c/README.md); five runs a side, medians against the larger range, is the protocol's test.
LOSSCHECK_FAMILY_BUILD = "hr-graph"


def losscheck_name(dtype: str, build: str, seed: int) -> str:
    """A cupy run's name in the loss check: seed 1337's keeps the name it had before the families were added."""
    return f"cupy-{dtype}-{build}" + ("" if seed == LOSSCHECK_SEEDS[0] else f"-{seed}")


def losscheck_family(d: Path, dtype: str, step: int = 400) -> dict:
    """Method A's rule at one evaluation: the validation losses of five torch seeds against five cupy seeds of the
    compared build at `step` (metrics files in d, named as phase_losscheck names them). A missing run or evaluation
    fails the step, as in method A."""
    from tr2 import method_a

    def family(name_of):
        return {s: {k: v[1] for k, v in read_metrics(d / f"{name_of(s)}.jsonl")["eval"].items() if k == step}
                for s in LOSSCHECK_SEEDS}
    torch_curves = family(lambda s: f"torch-{dtype}-{s}")
    cupy_curves = family(lambda s: losscheck_name(dtype, LOSSCHECK_FAMILY_BUILD, s))
    v = method_a.verdict(torch_curves, cupy_curves, judge_from=step)
    if not v["steps"]:   # no run reached the evaluation: judged and failed, not left unread
        v.update(passed=False, reason=f"no run holds an evaluation at step {step}")
    return {"phase": "losscheck_family", "model": "nanogpt", "dtype": dtype, "cupy_build": LOSSCHECK_FAMILY_BUILD,
            "step": step, "torch_val": {s: c.get(step) for s, c in torch_curves.items()},
            "cupy_val": {s: c.get(step) for s, c in cupy_curves.items()}, "verdict": v}


def phase_losscheck(out: Path, budget: float, table: list):
    d = out / "losscheck"
    d.mkdir(exist_ok=True)
    jobs = {}
    def extra(name):
        return ["--eval-interval", "400", "--eval-iters", "20", "--metrics", str(d / f"{name}.jsonl")]
    for dtype in ("bfloat16", "float16"):
        for seed in LOSSCHECK_SEEDS:
            name = f"torch-{dtype}-{seed}"
            jobs[name] = train_cmd("torch", "nanogpt", dtype, 400, mode="eager", extra=extra(name) + ["--seed", str(seed)])
        for build, hr, graph in LOSSCHECK_BUILDS:
            for seed in LOSSCHECK_SEEDS if build == LOSSCHECK_FAMILY_BUILD else LOSSCHECK_SEEDS[:1]:
                name = losscheck_name(dtype, build, seed)
                jobs[name] = train_cmd("cupy", "nanogpt", dtype, 400, hr=hr, graph=graph,
                                       extra=extra(name) + ["--seed", str(seed)])
    codes = parallel(jobs, d, budget)
    for dtype in ("bfloat16", "float16"):
        torch_runs = [read_metrics(d / f"torch-{dtype}-{s}.jsonl") for s in LOSSCHECK_SEEDS]
        t_train = [m["loss"].get(400) for m in torch_runs]
        t_val = [m["eval"].get(400, (None, None))[1] for m in torch_runs]
        for build, _, _ in LOSSCHECK_BUILDS:
            m = read_metrics(d / f"{losscheck_name(dtype, build, LOSSCHECK_SEEDS[0])}.jsonl")
            c_train, c_val = m["loss"].get(400), m["eval"].get(400, (None, None))[1]
            ok = None not in t_train + t_val + [c_train, c_val]
            rec = {"phase": "losscheck", "model": "nanogpt", "dtype": dtype, "cupy_build": build, "exit_codes": codes,
                   "torch_train_loss_400": t_train, "torch_val_loss_400": t_val,
                   "cupy_train_loss_400": c_train, "cupy_val_loss_400": c_val,
                   "train_within_spread": ok and min(t_train) <= c_train <= max(t_train),
                   "val_within_spread": ok and min(t_val) <= c_val <= max(t_val)}
            append_jsonl(out / "losscheck.jsonl", rec)
            table.append(f"losscheck {dtype} {build}: cupy train {c_train} val {c_val}; torch train "
                         f"[{min(filter(None, t_train), default=None)}, {max(filter(None, t_train), default=None)}] val "
                         f"[{min(filter(None, t_val), default=None)}, {max(filter(None, t_val), default=None)}]; "
                         f"within: train {rec['train_within_spread']} val {rec['val_within_spread']}")
        fam = losscheck_family(d, dtype)
        append_jsonl(out / "losscheck.jsonl", fam)
        table.append(losscheck_family_line(fam))


def losscheck_family_line(fam: dict) -> str:
    v = fam["verdict"]
    row = v["steps"][0] if v["steps"] else {}

    def num(x):
        return "-" if x is None else f"{x:.5f}"
    return (f"losscheck family {fam['dtype']} {fam['cupy_build']} (step {fam['step']}, five seeds a side, method A's "
            f"rule): torch median {num(row.get('torch_median'))} range {num(row.get('torch_range'))}, cupy median "
            f"{num(row.get('cupy_median'))} range {num(row.get('cupy_range'))}, difference {num(row.get('diff'))} "
            f"allowed {num(row.get('allowed'))}: {'passed' if v['passed'] else 'FAILED'} ({v['reason']})")


def phase_series(out: Path, budget: float, table: list):
    d = out / "series"
    p = subprocess.run([PY, "-m", "tr2.runner", "series", "--card", "params/cards/h200-nanogpt.yaml",
                        "--root", str(d)], capture_output=True, text=True, timeout=budget)
    (out / "series-runner.log").write_text(p.stdout + p.stderr)
    table.append(f"series: exit {p.returncode}; " + " | ".join(p.stdout.strip().splitlines()[-3:]))


BENCH = [  # (model, dtype, steps, window): the protocol's window for the char model; GPT-2 shapes shorter (budget)
    *[("nanogpt", t, 400, (100, 400)) for t in ("float32", "bfloat16", "float16")],
    *[("gpt2-small", t, 200, (100, 200)) for t in ("float32", "bfloat16", "float16")],
    *[("gpt2-medium", t, 200, (100, 200)) for t in ("float32", "bfloat16", "float16")],
]


# TR2_BENCH_ROUNDS=3 times every configuration three times, each round in an order rotated by one (the series'
# rotating order); TR2_BENCH_ROUND0=1 numbers and rotates the rounds from 1, so that a later call continues them.
ROUNDS = int(os.environ.get("TR2_BENCH_ROUNDS", "1"))
ROUND0 = int(os.environ.get("TR2_BENCH_ROUND0", "0"))


def bench_runs(models=None) -> list:
    """(model, dtype, steps, window, side, variant) of every run of one round, in the round's first order."""
    runs = []
    for model, dtype, steps, window in BENCH:
        if (models and model not in models) or (SELECT and (model, dtype) not in SELECT):
            continue
        sides = [("cupy", v) for v in CUPY_VARIANTS]   # the float16 step is captured too (optim.py, since 2026-11-30)
        sides += [("cupy", f"graph@{name}") for name in CUPY_LIBS]
        runs += [(model, dtype, steps, window, side, variant) for side, variant in sides + [("torch", m) for m in TORCH_MODES]]
    return runs


def too_long_to_start(took_s: float | None, left_s: float) -> str | None:
    """Why a bench run is not started: the last run of its configuration in this call took longer than the time left,
    so its timeout would stop it and its device seconds would be lost (gpt2-medium's torch-default run of round 1 in
    call 3 of results/h100-perf-20261206e: 77 s in round 0, started with 37 s left, killed, while a 13 s cupy run that
    still fitted never ran). None where it may start, or where the configuration has not run yet in this call. The
    estimate is its previous run's, compile included; later rounds run faster from the compile caches, so it errs
    toward leaving a run out."""
    if took_s is not None and took_s > left_s - 5:
        return f"its last run took {took_s:.0f} s, {left_s:.0f} s left"
    return None


def phase_bench(out: Path, budget: float, table: list, models=None):
    d = out / "bench"
    d.mkdir(exist_ok=True)
    deadline = time.monotonic() + budget
    runs = bench_runs(models)
    took = {}   # a configuration's last run's seconds in this call
    for rnd in range(ROUND0, ROUND0 + ROUNDS):
        k = rnd % max(1, len(runs))
        for model, dtype, steps, window, side, variant in runs[k:] + runs[:k]:
            left = deadline - time.monotonic()
            if left < 30:
                table.append(f"bench: out of budget before round {rnd} {model} {dtype} {side} {variant}")
                table.extend(bench_table(out / "bench.jsonl"))
                return
            name = f"{model}-{dtype}-{side}" + ("" if variant == "eager" and side == "cupy" else f"-{variant.replace('@', '-')}")
            why = too_long_to_start(took.get(name), left)
            if why:
                table.append(f"bench r{rnd} {name}: not started ({why})")
                continue
            hr = side == "cupy" and dtype != "float32"
            lib = variant.partition("@")[2] or None
            graph = side == "cupy" and variant.partition("@")[0] == "graph"
            cmd = train_cmd(side, model, dtype, steps, mode=variant if side == "torch" else None, hr=hr,
                            extra=["--log-interval", "10"] + (["--cuda-graph"] if graph else []))
            # each configuration its own compile caches (tr2.configs.compile_caches says why)
            env = {**os.environ, **compile_caches(f"{model}_{dtype}_{side}-{variant}", REPO / ".cache" / "compile")}
            if lib:
                env.update(lib_env(Path(CUPY_LIBS[lib])))
                env["PYTHONPATH"] = str(Path(CUPY_LIBS[lib]).resolve()) + os.pathsep + env.get("PYTHONPATH", "")
            elif side == "cupy" and BENCH_ENV:
                env.update(BENCH_ENV)
            # the card sampled every SAMPLE_S while the run trains: its clock inside the timed window (on the H200 the
            # GPT-2 steps draw the 700 W limit and each side's clock falls with what it draws: docs/perf.md)
            with GpuSampler(interval=SAMPLE_S) as sampler:
                r = clock.run_clocked(cmd, d / f"{name}-r{rnd}.log", env=env, timeout_s=left - 5, window=window,
                                      on_line=window_marker(sampler, window) if sampler.available else None)
            rec = {"phase": "bench", "round": rnd, "model": model, "dtype": dtype, "side": side,
                   "mode": variant if side == "torch" else None, "cuda_graph": graph, "lib": lib,
                   "half_roundings": hr, "steps": steps, "window": list(window),
                   **{k: r.get(k) for k in ("status", "reason", "step_ms", "own_step_ms", "own_vs_clock", "peak_bytes",
                                            "reserved_bytes", "wall_s", "returncode")},
                   "gpu_window": window_gpu(sampler.samples, r.get("window_t")),
                   # the run's own TR2_* variables (a variant's bench.env or TR2_BENCH_CUPY_ENV: its kernel switches)
                   "tr2_environment": {k: env[k] for k in sorted(env) if k.startswith("TR2_")}}
            append_jsonl(out / "bench.jsonl", rec)
            took[name] = r.get("wall_s")
            table.append(f"bench r{rnd} {name}: {r.get('status')} clock {r.get('step_ms')} ms own "
                         f"{r.get('own_step_ms')} peak {r.get('peak_bytes')}")
    table.extend(bench_table(out / "bench.jsonl"))


def bench_table(path: Path) -> list:
    """One line per model, type and pair of variants: both sides' median clock times over the rounds run (n: how
    many), their ratio, peak memory in use and reserved (the largest of the rounds; GB), and the card's SM clock
    inside the timed windows (the median over the rounds of each run's in-window median; '-' where not sampled) and
    the joules a step there (the window's mean power by the card's energy counter times the step time, median over
    the rounds; '-' where the samples had no counter; marked '*', with a note under the table, where a reading spans
    too little of its window to be compared: tr2.series.energy_counts). Then, where variants ran, variant_table's
    lines."""
    from statistics import median

    from tr2.results import read_jsonl
    cupy, torch = {}, {}  # (model, dtype) -> {variant: [records]}
    for r in read_jsonl(path):
        if r["side"] == "cupy":
            v = ("graph" if r.get("cuda_graph") else "eager") + (f"@{r['lib']}" if r.get("lib") else "")
            cupy.setdefault((r["model"], r["dtype"]), {}).setdefault(v, []).append(r)
        else:
            torch.setdefault((r["model"], r["dtype"]), {}).setdefault(r.get("mode") or "eager", []).append(r)

    def ms(rs):
        t = [r["step_ms"] for r in rs if r.get("step_ms")]
        return (median(t), len(t)) if t else (None, 0)

    def gb(rs, key="peak_bytes"):
        b = [r[key] for r in rs if r.get(key)]
        return f"{max(b) / 1e9:.2f}" if b else "-"

    def mhz(rs):
        m = [((r.get("gpu_window") or {}).get("sm_mhz") or {}).get("median") for r in rs]
        m = [x for x in m if x is not None]
        return f"{median(m):.0f}" if m else "-"

    marked = []   # whether each joules cell shown is marked

    def joules(rs):   # a step's energy: the window's mean power by the energy counter times its step time
        j = [(r.get("gpu_window") or {}, r.get("step_ms")) for r in rs]
        j = [(g["counter_w"] * step / 1000.0, energy_counts(g.get("counter_s")))
             for g, step in j if g.get("counter_w") is not None and step]
        if not j:
            return "-"
        marked.append(not all(ok for _, ok in j))   # a reading too short to compare: shown, marked
        return f"{median(v for v, _ in j):.2f}{'*' if marked[-1] else ''}"

    lines = [f"{'model':12} {'type':9} {'cupy':12} {'torch':15} {'cupy ms':>9} {'n':>2} {'torch ms':>9} {'n':>2} "
             f"{'ratio':>6} {'cupy GB':>8} {'torch GB':>8} {'reserved':>8} {'reserved':>8} {'cupy MHz':>8} {'torch MHz':>9} "
             f"{'cupy J':>7} {'torch J':>7}"]
    for (model, dtype), cs in cupy.items():
        for cv, c in cs.items():
            for tm, t in torch.get((model, dtype), {}).items():
                (cm, cn), (tms, tn) = ms(c), ms(t)
                ratio = f"{cm / tms:.3f}" if cm and tms else "-"
                lines.append(f"{model:12} {dtype:9} {cv:12} {tm:15} {cm or 0:9.2f} {cn:2d} {tms or 0:9.2f} {tn:2d} "
                             f"{ratio:>6} {gb(c):>8} {gb(t):>8} {gb(c, 'reserved_bytes'):>8} {gb(t, 'reserved_bytes'):>8} "
                             f"{mhz(c):>8} {mhz(t):>9} {joules(c):>7} {joules(t):>7}")
    if any(marked):
        lines.append(f"  * joules from energy readings spanning under {ENERGY_MIN_SPAN_S:g} s of a window (or of unknown "
                     "span): not precise enough to compare (tr2.series.ENERGY_MIN_SPAN_S)")
    return lines + variant_table(cupy)


def variant_table(cupy: dict) -> list:
    """Each variant's cupy runs (a lib of TR2_BENCH_CUPY_LIBS: `graph@NAME`) against this tree's of the same model,
    type and path (`graph`): both medians (n: how many), the change of the medians, and round by round the variant
    less the tree where both ran in that round (the rounds rotate the order, so a pair shares its round's conditions),
    with how many pairs the variant is the faster. `cupy`: (model, dtype) -> {variant: [records]}, as bench_table
    groups them. No variants: no lines."""
    from statistics import median

    def by_round(rs):
        return {r.get("round"): r["step_ms"] for r in rs if r.get("step_ms")}

    lines = []
    for (model, dtype), cs in cupy.items():
        for name, rs in cs.items():
            path, _, lib = name.partition("@")
            base = cs.get(path)
            if not lib or not base:
                continue
            v, b = by_round(rs), by_round(base)
            if not v or not b:
                continue
            pairs = [v[k] - b[k] for k in sorted((k for k in v if k in b), key=lambda k: -1 if k is None else k)]
            vm, bm = median(v.values()), median(b.values())
            faster = sum(d < 0 for d in pairs)
            lines.append(f"{model:12} {dtype:9} {name:16} {vm:9.3f} {len(v):2d} {bm:9.3f} {len(b):2d} {vm - bm:+8.3f}  "
                         + (" ".join(f"{d:+.3f}" for d in pairs) + f" (faster in {faster} of {len(pairs)})"
                            if pairs else "no round with both"))
    if lines:
        lines.insert(0, f"{'model':12} {'type':9} {'variant':16} {'ms':>9} {'n':>2} {'tree ms':>9} {'n':>2} "
                        f"{'change':>8}  variant less tree, round by round")
    return lines


# TR2_PROFILE_MODELS=nanogpt,gpt2-small: the models the profile phase profiles (bfloat16, both sides).
PROFILE_MODELS = [m for m in os.environ.get("TR2_PROFILE_MODELS", "nanogpt").split(",") if m]


def phase_profile(out: Path, budget: float, table: list):
    d = out / "profile"
    runs = [(model, side, extra) for model in PROFILE_MODELS
            for side, extra in (("cupy", ["--half-roundings"]), ("torch", ["--mode", "eager"]))]
    for model, side, extra in runs:
        name = side if len(PROFILE_MODELS) == 1 else f"{model}-{side}"
        p = subprocess.run([PY, "-m", "tr2.profile_run", "--side", side, "--model", MODEL_STANDIN or model,
                            "--dtype", "bfloat16", *extra, "--device", DEVICE, "--steps", "130", "--window", "100",
                            "130", "--out", str(d / name)], capture_output=True, text=True, timeout=budget / len(runs))
        (d / f"{name}.log").write_text(p.stdout + p.stderr)
        table.append(f"profile {name}: exit {p.returncode}")


def phase_oom(out: Path, budget: float, table: list):
    d = out / "oom"
    env = dict(os.environ, CUPY_GPU_MEMORY_LIMIT=str(1 << 30))
    r = clock.run_clocked(train_cmd("cupy", "gpt2-medium", "float32", 5), d / "cupy.log", env=env, timeout_s=budget / 2)
    torch_cmd = [PY, "-u", "-c", "import sys, torch; torch.cuda.set_per_process_memory_fraction(0.005); "
                 "from tr2.train import main; sys.exit(main(sys.argv[1:]))",
                 *train_cmd("torch", "gpt2-medium", "float32", 5)[len(TRAIN):]]
    r2 = clock.run_clocked(torch_cmd, d / "torch.log", timeout_s=budget / 2)
    for side, res in (("cupy", r), ("torch", r2)):
        append_jsonl(out / "oom.jsonl", {"phase": "oom", "side": side,
                                         **{k: res.get(k) for k in ("status", "reason", "returncode", "wall_s", "tail")}})
        table.append(f"oom {side}: status {res.get('status')} rc {res.get('returncode')} in {res.get('wall_s')} s")


def phase_methodb(out: Path, budget: float, table: list, steps=None):
    """TR2_METHODB_STEPS (default 200) steps; TR2_METHODB_WINDOW judges steps 1..W within 1% for every model (the
    rule in force until the floor-derived window is built); unset: gpt2-medium 100, the others every step."""
    d = out / "methodb"
    d.mkdir(exist_ok=True)
    steps = steps or int(os.environ.get("TR2_METHODB_STEPS", "200"))
    window = os.environ.get("TR2_METHODB_WINDOW")
    models = [m for m in os.environ.get("TR2_METHODB_MODELS", "nanogpt,gpt2-small,gpt2-medium").split(",") if m]
    jobs = {}
    judge = ({m: int(window) for m in models} if window else {"gpt2-medium": 100})
    t0 = time.monotonic()
    for model in models:
        cfg = load_model(MODEL_STANDIN or model)
        init, order = d / f"{model}-init.npz", d / f"{model}-batches.npy"
        data.write_batch_order(order, cfg.dataset, cfg.block_size, cfg.batch_size, steps, seed=1337)
        subprocess.run(train_cmd("torch", model, "float32", 0, mode="eager",
                                 extra=["--save-init", str(init), "--no-tf32", "--dropout", "0"]),
                       check=True, capture_output=True, timeout=300)
        for side in ("torch", "cupy"):
            name = f"{model}-{side}"
            jobs[name] = train_cmd(side, model, "float32", steps, mode="eager" if side == "torch" else None,
                                   extra=["--init", str(init), "--batches", str(order), "--no-tf32", "--dropout", "0",
                                          "--metrics", str(d / f"{name}.jsonl")])
    codes = parallel(jobs, d, budget - (time.monotonic() - t0))
    for model in models:
        t, c = read_metrics(d / f"{model}-torch.jsonl")["loss"], read_metrics(d / f"{model}-cupy.jsonl")["loss"]
        v = method_b.verdict(t, c, steps, judge.get(model))
        append_jsonl(out / "methodb.jsonl", {"phase": "methodb", "model": model, "steps": steps, "exit_codes": codes,
                                             "torch_steps": len(t), "cupy_steps": len(c), **v})
        table.append(f"methodb {model}: passed {v['passed']}: {v['reason']}")


PHASES = {"losscheck": phase_losscheck, "series": phase_series, "bench": phase_bench, "profile": phase_profile,
          "oom": phase_oom, "methodb": phase_methodb}


def main():
    out = Path(sys.argv[1])
    out.mkdir(parents=True, exist_ok=True)
    plan = [p.split(":") for p in sys.argv[2].split(",")]  # phase:budget_seconds
    table = []
    for name, budget in plan:
        t = time.monotonic()
        try:
            PHASES[name](out, float(budget), table)
        except Exception as e:  # a phase that breaks leaves its record and the next phase runs
            table.append(f"{name}: FAILED {type(e).__name__}: {e}")
        table.append(f"  ({name} took {time.monotonic() - t:.0f} s)")
        (out / "table.txt").write_text("\n".join(table) + "\n")
    print("\n".join(table))


if __name__ == "__main__":
    main()
