"""Method B's noise floor: the torch side's own training loop, with every weight moved by one ulp.

    python -m tr2.floor --perturb none|once|every [--perturb-seed S] <the trainer's arguments>

The run is the trainer's torch run (tr2.torch_side.train, unchanged) with an after-step hook: 'once' moves every
weight by one ulp (`perturb_ulp`) before step 0, 'every' again after every optimizer step, 'none' moves nothing (it
should equal the trainer's own run to the bit). Exit codes as the trainer's (3: out of memory).
"""
from __future__ import annotations

import math
import sys

import torch

from . import Tr2Error
from .cards import FLOOR_NAMES
from .models import load_model
from .torch_side.train import run as run_torch
from .trainargs import SEED_MAX, Parser, TrainArgs, parse
from .trainlog import TrainLog


def perturb_ulp(params, gen=None, how: str = "random") -> int:
    """Move every element of every tensor by one unit in its last place, in place; returns the count.

    how='random': towards +inf or -inf, drawn per element from `gen` (a torch.Generator on the
    tensors' device); how='up': towards +inf (np.nextafter(x, +inf)). Shared (tied) tensors are moved
    once when `params` is `model.parameters()`, which lists each tensor once.
    """
    n = 0
    with torch.no_grad():
        for p in params:
            if how == "up":
                target = torch.full_like(p, math.inf)
            elif how == "random":
                coin = torch.randint(0, 2, p.shape, generator=gen, device=p.device, dtype=torch.int8)
                target = torch.where(coin.bool(), math.inf, -math.inf).to(p.dtype)
            else:
                raise ValueError(f"how: {how!r}; allowed: random | up")
            p.copy_(torch.nextafter(p, target))
            n += p.numel()
    return n


def floor_run(args: TrainArgs, perturb: str, perturb_seed: int, log: TrainLog | None = None) -> int:
    """The trainer's torch run of `args` with the floor's move; its exit code."""
    if perturb not in FLOOR_NAMES:
        raise Tr2Error(f"--perturb: {perturb!r}; allowed: {' | '.join(FLOOR_NAMES)}")
    # torch.Generator takes any 64-bit seed, a negative one too, and a larger one ends in an OverflowError
    if not 0 <= perturb_seed <= SEED_MAX:
        raise Tr2Error(f"--perturb-seed: {perturb_seed} is not allowed; allowed: an integer from 0 to {SEED_MAX}")
    why = "the floor runs the torch side in float32 without TF32: --side torch --dtype float32 --no-tf32"
    for flag, given, want in (("--side", args.side, "torch"), ("--dtype", args.dtype, "float32")):
        if given != want:
            raise Tr2Error(f"{flag}: {given!r} is not allowed for a floor run; allowed: {want} ({why})")
    if args.tf32:
        raise Tr2Error(f"--no-tf32: missing (TF32 on); allowed: --no-tf32 ({why})")
    gen = torch.Generator(device=args.device).manual_seed(perturb_seed)

    def after_step(model, it):
        if perturb == "every" or (perturb == "once" and it == -1):
            perturb_ulp(model.parameters(), gen)
    overrides = {} if args.dropout is None else {"dropout": args.dropout}
    return run_torch(args, load_model(args.model, **overrides), after_step=after_step, log=log)


def train_floor(model_name: str, init: str, batches: str, steps: int, seed: int, device: str, mode: str,
                perturb: str, perturb_seed: int, metrics=None, log_interval: int = 10, out=None) -> list:
    """One floor run in this process (dropout 0); returns the losses of steps 0..steps."""
    args = TrainArgs(side="torch", model=model_name, mode=mode, device=device, steps=steps, seed=seed, init=init,
                     batches=batches, tf32=False, dropout=0.0, metrics=metrics, log_interval=log_interval)
    log = TrainLog(metrics, log_interval, out=out, keep_losses=True)
    rc = floor_run(args, perturb, perturb_seed, log)
    if rc != 0:
        raise Tr2Error(f"the floor's run exited {rc}")
    return log.losses


def main(argv=None) -> int:
    p = Parser(prog="python -m tr2.floor", description=__doc__.split("\n")[0])
    p.add_argument("--perturb", default="none", choices=FLOOR_NAMES)
    p.add_argument("--perturb-seed", type=int, default=0)
    ns, rest = p.parse_known_args(argv)
    try:
        return floor_run(parse(rest), ns.perturb, ns.perturb_seed)
    except Tr2Error as e:
        sys.stderr.write(f"tr2.floor: error: {e}\n")
        return 2


if __name__ == "__main__":
    sys.exit(main())
