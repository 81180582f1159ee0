"""Do the products record's picks stay the fastest where the GPT-2 steps run: at the card's power limit?

The record (tr2.cupy_side.products) times each product's cuBLASLt candidates as a graph of 20 calls, a burst of
0.1-20 ms that the H200 runs at its boost clock (1980 MHz). The GPT-2 steps run at the 700 W limit, where a product
alone settles near 1400-1470 MHz and its time follows its energy (docs/perf.md, "Calls 2 and 3: what a kernel costs at
the card's power limit"). A candidate that needs less energy for the same product (larger tiles, fewer reads from L2)
can lose the burst and win at the limit. This probe, per product key of a model's step:
  1. asks cuBLASLt for up to --candidates algorithms (the record asked for 16 and got 3-8),
  2. times every one as the record does (a captured graph of 20 calls, the least of two rounds: "burst"),
  3. times the record's pick and the --keep fastest others within --short of the best burst "sustained"
     (event_timing.sustained: back to back for --warm s, then --seconds between events; rounds in rotating order,
     the least of them), the graph of 20 calls again, so each candidate's memset node is paid as in the step,
  4. writes one JSON line per key (counts a step, every time, the configurations) as it is measured.
At the end it writes a products record beside the carried one where each key takes its fastest sustained candidate
when that is under --margin of the pick's sustained time, else the pick (--record-out DIR; the other keys as carried),
so that a bench can time the step with it (a LIB variant with a products/ folder: scripts/device_bench.py lib_env).
Usage (GPU machine, after `source scripts/device_env.sh && use_carried_caches`):
    python3 scripts/probes/products_sustained.py OUT.jsonl --record-out DIR --runs gpt2-medium:bf16r,gpt2-small:bf16r
"""
from __future__ import annotations

import argparse
import collections
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(REPO / "lib"), str(REPO / "scripts")]


class KeyCounter(collections.Counter):
    """lt.collect's stand-in: how many times a step runs each product key, not only which."""

    def add(self, key):
        self[key] += 1


def gather_counts(model: str, build: str) -> collections.Counter:
    """Each product key of one eager training step of model in build, with its count (products.gather_keys, counted)."""
    import cupy as cp
    import numpy as np

    from tr2.cupy_side.gpu.backend import CudaBackend
    from tr2.cupy_side.model import GPT
    from tr2.cupy_side.products import BUILDS
    from tr2.models import load_model
    from tr2.weights import init_numpy
    dtype, tf32, hr = BUILDS[build]
    cfg = load_model(model)
    be = CudaBackend(dtype, tf32, hr)
    lt = be.ctx.cublas.lt
    gpt = GPT(cfg, be, init_numpy(cfg, 1337), seed=1337)
    x = np.random.default_rng(0).integers(0, cfg.vocab_size, (cfg.batch_size, cfg.block_size))
    lt.collect = KeyCounter()
    try:
        gpt.forward(be.to_device(x, dtype=np.int64), be.to_device(x, dtype=np.int64), step=0, training=True)
        gpt.backward()
        be.synchronize()
        return collections.Counter(lt.collect)
    finally:
        lt.collect = None
        del gpt
        cp.get_default_memory_pool().free_all_blocks()


def candidate_graphs(cublas, key, count: int, reps: int):
    """(found, graphs, stream, buffers): cuBLASLt's candidates for key and, for each, a graph of reps calls on scratch
    operands (None where the candidate refuses the operands or the capture), as products.tune runs them."""
    import cupy as cp

    from tr2.cupy_side.gpu.lt import Plan
    from tr2.cupy_side.products import capture_calls, operands
    lt = cublas.lt
    bufs, (A, B, C), (alpha, beta), desc, layouts = operands(cublas, key)
    found = lt.candidates(key, desc, layouts, count=count)
    stream = cp.cuda.Stream(non_blocking=True)
    graphs = []
    for r in found:
        plan = Plan(desc, layouts, r.algo, int(r.workspace_size), "candidate")
        call = (lambda p: lambda: lt.matmul(p, A, B, C, alpha, beta, stream.ptr))(plan)
        if any(call() for _ in range(3)):
            graphs.append(None)
            continue
        stream.synchronize()
        graphs.append(capture_calls(stream, call, reps))
    return found, graphs, stream, bufs


def burst_ms(graph, stream, reps: int, rounds: int = 2) -> float:
    import cupy as cp
    best = float("inf")
    for _ in range(rounds):
        graph.launch(stream)
        a, b = cp.cuda.Event(), cp.cuda.Event()
        a.record(stream)
        graph.launch(stream)
        b.record(stream)
        b.synchronize()
        best = min(best, cp.cuda.get_elapsed_time(a, b) / reps)
    return best


def probe_key(cublas, key, record_choice, args) -> dict:
    from event_timing import sustained
    found, graphs, stream, bufs = candidate_graphs(cublas, key, args.candidates, args.reps)
    algos = [[int(x) for x in r.algo.data] for r in found]
    pick = algos.index([int(x) for x in record_choice["algo"]]) if record_choice and \
        [int(x) for x in record_choice["algo"]] in algos else None
    burst = [burst_ms(g, stream, args.reps) if g is not None else None for g in graphs]
    ok = [i for i, t in enumerate(burst) if t is not None]
    best_burst = min(burst[i] for i in ok)
    others = sorted((i for i in ok if i != pick and burst[i] <= args.short * best_burst), key=lambda i: burst[i])
    shortlist = ([pick] if pick is not None and burst[pick] is not None else []) + others[:args.keep]
    sus = {i: [] for i in shortlist}
    with stream:
        for r in range(args.rounds):   # rotating order; the least of the rounds, as the record's burst
            order = shortlist[r % len(shortlist):] + shortlist[:r % len(shortlist)]
            for i in order:
                g = graphs[i]
                s = sustained(lambda g=g: g.launch(stream), seconds=args.seconds, reps=1, warm_s=args.warm)
                sus[i].append({"ms": s["ms"] / args.reps, "joules_a_call": (s["joules_a_call"] / args.reps
                                                                            if s["joules_a_call"] else None),
                               "sm_mhz": s["sm_mhz"], "power_w": s["power_w"]})
    stream.synchronize()
    del graphs, bufs
    sus_ms = {i: min(x["ms"] for x in v) for i, v in sus.items()}
    best_sus = min(sus_ms, key=sus_ms.get)
    return {"candidates": len(found), "record_rank": pick, "burst_ms": burst,
            "configs": [cublas.lt.config(r.algo) for r in found], "workspaces": [int(r.workspace_size) for r in found],
            "algos": algos, "sustained": {str(i): v for i, v in sus.items()},
            "pick_burst_ms": burst[pick] if pick is not None else None, "best_burst_ms": best_burst,
            "best_burst_rank": min(ok, key=lambda i: burst[i]),
            "pick_sustained_ms": sus_ms.get(pick), "best_sustained_ms": sus_ms[best_sus], "best_sustained_rank": best_sus}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("out", type=Path)
    p.add_argument("--record-out", type=Path, required=True)
    p.add_argument("--runs", default="gpt2-medium:bf16r,gpt2-small:bf16r")
    p.add_argument("--candidates", type=int, default=64)
    p.add_argument("--reps", type=int, default=20)
    p.add_argument("--short", type=float, default=1.15, help="sustained-time the others within this of the best burst")
    p.add_argument("--keep", type=int, default=4)
    p.add_argument("--seconds", type=float, default=0.5)
    p.add_argument("--warm", type=float, default=0.25)
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--margin", type=float, default=0.01, help="take a sustained winner only under (1 - margin) x the pick")
    p.add_argument("--min-share", type=float, default=0.005,
                   help="skip keys whose record time x count is under this share of the run's products")
    p.add_argument("--budget", type=float, default=1e9, help="seconds; no key starts after them")
    args = p.parse_args(argv)
    from tr2.cupy_side import products as P
    from tr2.cupy_side.gpu.blas import get_cublas
    from tr2.results import append_jsonl
    t0 = time.monotonic()
    cublas = get_cublas()
    lt = cublas.lt
    record, path = P.load_record(lt.version)
    print(f"record {path}: {len(record)} products; cuBLASLt {lt.version}", flush=True)
    new = dict(record)
    changed = 0
    for run in args.runs.split(","):
        model, build = run.split(":")
        counts = gather_counts(model, build)
        weight = {k: n * record[P.key_text(k)]["ms"] for k, n in counts.items() if P.key_text(k) in record}
        total = sum(weight.values())
        print(f"{model} {build}: {len(counts)} keys, {sum(counts.values())} products a step, record "
              f"{total:.3f} ms a step (burst)", flush=True)
        for k in sorted(weight, key=weight.get, reverse=True):
            if time.monotonic() - t0 > args.budget:
                print("  budget spent: the remaining keys not probed", flush=True)
                break
            if weight[k] < args.min_share * total:
                continue
            text = P.key_text(k)
            r = probe_key(cublas, k, record[text], args)
            r.update({"model": model, "build": build, "key": text, "count": counts[k],
                      "record_ms": record[text]["ms"], "record_config": record[text].get("config")})
            gain = None
            if r["pick_sustained_ms"] is not None:
                gain = counts[k] * (r["pick_sustained_ms"] - r["best_sustained_ms"])
                if r["best_sustained_ms"] < (1 - args.margin) * r["pick_sustained_ms"]:
                    b = r["best_sustained_rank"]
                    new[text] = {**record[text], "algo": r["algos"][b], "workspace": r["workspaces"][b],
                                 "config": r["configs"][b], "ms": r["burst_ms"][b], "rank": b,
                                 "timed": "sustained (scripts/probes/products_sustained.py)",
                                 "sustained_ms": r["best_sustained_ms"], "pick_sustained_ms": r["pick_sustained_ms"]}
                    changed += 1
            r["step_gain_ms_sustained"] = gain
            append_jsonl(args.out, r)
            pk = r["record_rank"]
            print(f"  x{counts[k]:<3d} M={k[2]} N={k[3]} K={k[4]} ta={k[0]} tb={k[1]}: {r['candidates']} cand; pick "
                  f"#{pk} burst {r['pick_burst_ms'] or float('nan'):.4f} sus {r['pick_sustained_ms'] or float('nan'):.4f}"
                  f" | best sus #{r['best_sustained_rank']} {r['best_sustained_ms']:.4f} (burst "
                  f"{r['burst_ms'][r['best_sustained_rank']]:.4f}) | step gain "
                  f"{(gain or 0) * 1000:.1f} us ({time.monotonic() - t0:.0f} s)", flush=True)
    P.write_record(args.record_out / path.name, P.device_name(), lt.version, new)
    print(f"record with the sustained winners: {args.record_out / path.name} ({changed} products changed)", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
