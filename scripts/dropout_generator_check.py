"""Does the cupy side's dropout generator regularize like torch's? One model, two mask sources, on the CPU.

Method A on the H200 (results/method_a-20261202-170258-h200-edition) found the char model's cupy runs fitting the
training text a little better late in the schedule than the torch runs (lower train loss, higher validation loss from
about step 2500 on, in float32 and bfloat16 alike), the signature of weaker regularization. The sides differ there
in the dropout masks' generator (rng.py's counter-based draws against torch's Philox), among other things. This
script isolates the generator: nanoGPT's model (tr2.torch_side.model), trained in float32 on the CPU on a small
slice of the training text so that it overfits within minutes, twice per seed from the same start and the same
batches: once with torch's own dropout, once with the cupy side's masks (rng.keep_mask at the cupy side's site
numbering, handed in as tests/test_sides_agree.py's dropout test does). Only the masks differ between the arms.

    python scripts/dropout_generator_check.py --out results/.../dropout-generator.jsonl [--seeds 1337 1338 ...]

Writes one JSON line per evaluation (arm, seed, step, train, val) and prints the medians per arm at each step.
"""
from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "lib"))
from tr2.cupy_side import rng  # noqa: E402
from tr2.data import load_split, make_batch  # noqa: E402
from tr2.models import load_model  # noqa: E402
from tr2.torch_side.model import GPT  # noqa: E402


ARMS = ("torch-generator", "cupy-generator", "torch-generator-b", "cupy-generator-b")


class CupyMasks:
    """nn.Dropout and scaled_dot_product_attention replaced by the cupy side's masks for one (seed, step)."""

    def __init__(self, seed: int, n_layer: int, p: float):
        self.seed, self.n_sites, self.p, self.step, self.site = seed, rng.n_sites(n_layer), p, 0, 0
        self._orig = (torch.nn.Dropout.forward, F.scaled_dot_product_attention)

    def factor(self, shape):
        keep = rng.keep_mask(self.seed, rng.site_offset(self.step, self.n_sites, self.site), tuple(shape), self.p)
        self.site += 1
        return torch.from_numpy(keep.astype(np.float32) / np.float32(1.0 - self.p))

    def install(self):
        masks = self

        def dropout(module, x):
            return x * masks.factor(x.shape) if module.training and masks.p > 0 else x

        def sdpa(q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False, **kw):
            T = q.shape[-2]
            s = (q @ k.transpose(-2, -1)) / math.sqrt(q.shape[-1])
            s = s.masked_fill(torch.ones(T, T, dtype=torch.bool).triu(1), float("-inf"))
            a = F.softmax(s, dim=-1)
            return (a * masks.factor(a.shape) if dropout_p > 0 else a) @ v

        torch.nn.Dropout.forward = dropout
        F.scaled_dot_product_attention = sdpa

    def uninstall(self):
        torch.nn.Dropout.forward, F.scaled_dot_product_attention = self._orig


def train(arm: str, seed: int, args, cfg, train_data, val_data, eval_sets, out):
    torch.manual_seed(seed)
    model = GPT(cfg)
    params = list(model.parameters())
    opt = torch.optim.AdamW([{"params": [p for p in params if p.dim() >= 2], "weight_decay": cfg.weight_decay},
                             {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0}],
                            lr=args.lr, betas=(cfg.beta1, cfg.beta2))
    order = np.random.default_rng(seed + 10_000)
    # the arms: each generator with the run's seed, and again with another seed (the "-b" arms), which measures
    # how far two runs from one start and one batch order drift apart on masks alone
    other = 30_000 if arm.endswith("-b") else 0
    masks = CupyMasks(seed + other, cfg.n_layer, cfg.dropout) if arm.startswith("cupy-generator") else None
    torch.manual_seed(seed + 20_000 + other)  # torch's own dropout draws from here (the cupy arms draw none of it)
    rows = []
    for step in range(args.steps + 1):
        if step % args.eval_every == 0:
            model.eval()
            with torch.no_grad():
                losses = {name: float(np.mean([model(torch.from_numpy(x), torch.from_numpy(y))[1].item()
                                               for x, y in batches])) for name, batches in eval_sets.items()}
            model.train()
            row = {"arm": arm, "seed": seed, "step": step, **losses}
            rows.append(row)
            out.write(json.dumps(row) + "\n")
            out.flush()
        if step == args.steps:
            break
        offs = order.integers(0, len(train_data) - cfg.block_size, size=cfg.batch_size)
        x, y = make_batch(train_data, offs, cfg.block_size)
        if masks:
            masks.step, masks.site = step, 0
            masks.install()
        try:
            _, loss = model(torch.from_numpy(x), torch.from_numpy(y))
        finally:
            if masks:
                masks.uninstall()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--seeds", type=int, nargs="+", default=[1337, 1338, 1339, 1340, 1341])
    ap.add_argument("--steps", type=int, default=1500)
    ap.add_argument("--eval-every", type=int, default=250)
    ap.add_argument("--train-tokens", type=int, default=30_000, help="the slice of the training text (small: overfits)")
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--arms", nargs="+", default=list(ARMS), choices=ARMS)
    args = ap.parse_args()
    torch.set_num_threads(max(1, torch.get_num_threads()))
    cfg = load_model("tiny", dropout=0.2)
    train_data = load_split(cfg.dataset, "train")[: args.train_tokens]
    val_data = load_split(cfg.dataset, "val")
    g = np.random.default_rng(0)
    eval_sets = {split: [make_batch(d, g.integers(0, len(d) - cfg.block_size, size=64), cfg.block_size)
                         for _ in range(4)] for split, d in (("train", train_data), ("val", val_data))}
    print(f"model tiny ({cfg.n_layer} layers, {cfg.n_embd} wide, batch {cfg.batch_size}x{cfg.block_size}), dropout "
          f"{cfg.dropout}, train slice {len(train_data)} tokens, {args.steps} steps, lr {args.lr} constant, "
          f"torch {torch.__version__}, float32 CPU; eval: 4 fixed batches of 64 per split", flush=True)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    done = set()
    if Path(args.out).is_file():  # resumable: a (arm, seed) with its last evaluation in the file is skipped
        for line in Path(args.out).read_text().splitlines():
            r = json.loads(line)
            if r["step"] == args.steps:
                done.add((r["arm"], r["seed"]))
    allrows = [json.loads(line) for line in Path(args.out).read_text().splitlines()] if Path(args.out).is_file() else []
    allrows = [r for r in allrows if (r["arm"], r["seed"]) in done]
    with open(args.out, "w") as out:
        for r in allrows:
            out.write(json.dumps(r) + "\n")
        for seed in args.seeds:
            for arm in args.arms:
                if (arm, seed) in done:
                    continue
                t0 = time.time()
                rows = train(arm, seed, args, cfg, train_data, val_data, eval_sets, out)
                allrows += rows
                print(f"{arm} seed {seed}: train {rows[-1]['train']:.4f} val {rows[-1]['val']:.4f} "
                      f"({time.time() - t0:.0f} s)", flush=True)
    summarize(allrows)


def summarize(allrows):
    """Per evaluation step: each arm's medians, and the paired differences (same seed: same start and batches) of
    the cupy generator against torch's, beside those of each generator against itself with another seed."""
    by = {}
    for r in allrows:
        by.setdefault((r["arm"], r["step"]), {})[r["seed"]] = r
    pairs = (("cupy-generator", "torch-generator"), ("torch-generator-b", "torch-generator"),
             ("cupy-generator-b", "cupy-generator"))
    print("\nval loss: median per arm; paired differences (a - b, same seed): median and how many of the seeds > 0")
    print("step  " + "  ".join(f"{a:>17s}" for a in ARMS) + "  " + "  ".join(f"{a[:5]}-{b[:5]}{'(b)' if a.endswith('-b') else '':>3s}"
                                                                           .rjust(20) for a, b in pairs))
    for s in sorted({r["step"] for r in allrows}):
        cells = [f"{statistics.median(v['val'] for v in by[(a, s)].values()):17.4f}" if (a, s) in by else f"{'-':>17s}"
                 for a in ARMS]
        for a, b in pairs:
            common = sorted(set(by.get((a, s), {})) & set(by.get((b, s), {})))
            if not common:
                cells.append(f"{'-':>20s}")
                continue
            d = [by[(a, s)][k]["val"] - by[(b, s)][k]["val"] for k in common]
            cells.append(f"{statistics.median(d):+.4f} {sum(x > 0 for x in d)}/{len(d)}".rjust(20))
        print(f"{s:5d} " + "  ".join(cells))
    for key in ("train", "val"):
        last = max(r["step"] for r in allrows)
        print(f"\nat step {last}, {key} loss per seed:")
        for a in ARMS:
            v = by.get((a, last), {})
            print(f"  {a:17s} " + " ".join(f"{k}:{v[k][key]:.4f}" for k in sorted(v)))


if __name__ == "__main__":
    main()
