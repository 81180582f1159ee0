"""The trainer's arguments: parsed, then checked before any work, each error one line naming the key."""
from __future__ import annotations

import argparse
import os
import shlex
import sys
from dataclasses import dataclass
from typing import Optional

from pathlib import Path

from . import REPO_ROOT, Tr2Error, data, weights
from .models import list_models, load_model

SIDES = ("cupy", "torch", "nanogpt")  # nanogpt: nanoGPT's own train.py (tr2.nanogpt_side)
TORCH_LOOPS = ("torch", "nanogpt")  # the sides that train with PyTorch (and take --mode)
DTYPES = ("float32", "bfloat16", "float16")
MODES = ("eager", "default", "reduce-overhead", "max-autotune")
DEVICES = ("auto", "cpu", "cuda")
SEED_MAX = 2**32 - 1  # numpy's legacy seeding stops here; one range for every generator a seed reaches
MAX_STEPS = 1_000_000  # far past any model's max_iters (5000): a larger count is a typo


@dataclass(frozen=True)
class TrainArgs:
    side: str
    model: str
    dtype: str = "float32"
    mode: str = "eager"
    device: str = "auto"
    steps: int = 400
    seed: int = 1337
    init: Optional[str] = None
    save_init: Optional[str] = None
    batches: Optional[str] = None
    tf32: bool = True
    dropout: Optional[float] = None
    eval_interval: int = 0
    eval_iters: int = 0
    half_roundings: bool = False
    cuda_graph: bool = False
    metrics: Optional[str] = None
    log_interval: int = 10
    nanogpt: Optional[str] = None   # the nanogpt side's checkout (None: DEFAULT_CHECKOUT)

    def to_argv(self) -> list[str]:
        """The trainer's arguments for this run: parse(a.to_argv()) gives `a` back (device cpu or cuda)."""
        argv = ["--side", self.side, "--model", self.model, "--dtype", self.dtype, "--device", self.device,
                "--steps", str(self.steps), "--seed", str(self.seed), "--eval-interval", str(self.eval_interval),
                "--log-interval", str(self.log_interval)]
        if self.side in TORCH_LOOPS:
            argv += ["--mode", self.mode]
        if self.side == "nanogpt" and self.nanogpt is not None:
            argv += ["--nanogpt", self.nanogpt]
        for flag, value in (("--eval-iters", self.eval_iters or None), ("--dropout", self.dropout), ("--init", self.init),
                            ("--save-init", self.save_init), ("--batches", self.batches), ("--metrics", self.metrics)):
            if value is not None:
                argv += [flag, f"{value:g}" if isinstance(value, float) else str(value)]
        for flag, on in (("--no-tf32", not self.tf32), ("--half-roundings", self.half_roundings),
                         ("--cuda-graph", self.cuda_graph)):
            if on:
                argv.append(flag)
        return argv


def trainer_prefix() -> list[str]:
    """How the stages start the trainer: $TR2_TRAINER (split like a shell; tests put a fake there) or
    `python -u -m tr2.train` (unbuffered: the outside clock stamps each line as it is printed)."""
    env = os.environ.get("TR2_TRAINER")
    return shlex.split(env) if env else [sys.executable, "-u", "-m", "tr2.train"]


_GIVEN = "_tr2_given"  # the namespace's record of the options that took a value, while it is parsed


class _Once(argparse._StoreAction):
    """An option that takes a value refuses a second one: argparse keeps the last silently, so `--seed 1 ... --seed 2`
    would run seed 2 (or `--runs A --runs B` retire B's runs only), as a card refuses a key given twice."""

    def __call__(self, parser, namespace, values, option_string=None):
        given = namespace.__dict__.setdefault(_GIVEN, {})
        if option_string is not None and self.dest in given:
            parser.error(f"{option_string}: given twice ({given[self.dest]!r}, then {values!r}); allowed: each "
                         "option once")
        given[self.dest] = values
        super().__call__(parser, namespace, values, option_string)


class Parser(argparse.ArgumentParser):
    """argparse with a bad argument in one line, `<module>: error: ...`, exit 2, as every other bad input (the
    trainer's, the runner's, the report's; prog is `python -m <module> ...`); an option given twice is one too."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.register("action", None, _Once)
        self.register("action", "store", _Once)

    def parse_known_args(self, args=None, namespace=None):
        ns, rest = super().parse_known_args(args, namespace)
        ns.__dict__.pop(_GIVEN, None)
        return ns, rest

    def error(self, message):
        # argparse prefixes a value's own refusal (_integer, _number) with "argument "; the others name the key first
        message = message[len("argument "):] if message.startswith("argument --") else message
        sys.stderr.write(f"{self.prog.split()[2]}: error: {message}\n")
        sys.exit(2)


def _integer(text: str) -> int:
    """An integer option's value; argparse puts the option's name before the refusal."""
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not allowed; allowed: an integer") from None


def _number(text: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not allowed; allowed: a number") from None


def build_parser() -> argparse.ArgumentParser:
    p = Parser(prog="python -m tr2.train", description="Train one GPT model on one side and print nanoGPT's log lines.")
    p.add_argument("--side", required=True,
                   help="cupy (our CUDA kernels, NumPy on a CPU), torch (nanoGPT's loop written here) or nanogpt "
                        "(nanoGPT's own train.py, launched from its checkout)")
    p.add_argument("--model", required=True, help="a model of params/models.yaml")
    p.add_argument("--dtype", default="float32", help="float32 | bfloat16 | float16")
    p.add_argument("--mode", default=None, help="torch and nanogpt: eager | default | reduce-overhead | max-autotune")
    p.add_argument("--device", default="auto", help="auto (cuda when there is one) | cpu | cuda")
    p.add_argument("--steps", type=_integer, required=True, help="train iterations 0..N, as nanoGPT's max_iters")
    p.add_argument("--seed", type=_integer, default=1337)
    p.add_argument("--init", default=None, help="start from this initial-weights .npz")
    p.add_argument("--save-init", default=None, help="write the initial weights to this .npz before training")
    p.add_argument("--batches", default=None, help="read the training batches from this recorded order (.npy)")
    p.add_argument("--no-tf32", dest="tf32", action="store_false", help="plain float32 products (no TF32)")
    p.add_argument("--dropout", type=_number, default=None, help="override the model's dropout")
    p.add_argument("--eval-interval", type=_integer, default=0, help="evaluate every K steps (0: never)")
    p.add_argument("--eval-iters", type=_integer, default=None, help="batches per split at each evaluation")
    p.add_argument("--half-roundings", action="store_true", help="cupy only: round as PyTorch does in the half types")
    p.add_argument("--cuda-graph", action="store_true",
                   help="cupy on cuda only: capture the training step once as a CUDA graph and replay it")
    p.add_argument("--metrics", default=None, help="append every step's loss and every evaluation as JSON lines")
    p.add_argument("--log-interval", type=_integer, default=10)
    p.add_argument("--nanogpt", default=None, help="nanogpt only: the nanoGPT checkout, a relative path "
                   "taken from the repository's root as the card's nanogpt_path is (default ../shared/nanoGPT)")
    return p


def _allowed(key: str, value, allowed) -> None:
    if value not in allowed:
        raise Tr2Error(f"{key}: {value!r} is not allowed; allowed: {', '.join(map(str, allowed))}")


DEFAULT_CHECKOUT = "../shared/nanoGPT"  # relative to the repository root
CHECKOUT_FILES = ("train.py", "model.py", "configurator.py")


def checkout_path(path=None, key: str = "--nanogpt") -> Path:
    """The nanoGPT checkout (absolute), checked to hold what the launch runs; one-line error naming `key`
    (the trainer's --nanogpt, the card's nanogpt_path) otherwise. A relative path is the repository's."""
    p = Path(path if path is not None else DEFAULT_CHECKOUT)
    p = p if p.is_absolute() else (REPO_ROOT / p)
    missing = [f for f in CHECKOUT_FILES if not (p / f).is_file()]
    if missing:
        raise Tr2Error(f"{key}: {str(path if path is not None else DEFAULT_CHECKOUT)!r} holds no {missing[0]} "
                       f"({p}); allowed: a nanoGPT checkout with {', '.join(CHECKOUT_FILES)} (e.g. {DEFAULT_CHECKOUT})")
    return p.resolve()


def validate(ns: argparse.Namespace) -> TrainArgs:
    """Check every argument before any work starts."""
    _allowed("--side", ns.side, SIDES)
    _allowed("--model", ns.model, list_models())
    _allowed("--dtype", ns.dtype, DTYPES)
    _allowed("--device", ns.device, DEVICES)
    if ns.mode is not None and ns.side not in TORCH_LOOPS:
        raise Tr2Error(f"--mode: {ns.mode!r} given for side {ns.side!r}; only --side torch | nanogpt take a mode")
    if ns.nanogpt is not None and ns.side != "nanogpt":
        raise Tr2Error(f"--nanogpt: given for side {ns.side!r}; only --side nanogpt takes a checkout")
    if ns.side == "nanogpt":
        checkout_path(ns.nanogpt)
        if ns.save_init is not None:
            raise Tr2Error("--save-init: given for side 'nanogpt'; allowed only with --side torch (method B's start)")
    mode = ns.mode or "eager"
    _allowed("--mode", mode, MODES)
    if ns.half_roundings and ns.side != "cupy":
        raise Tr2Error(f"--half-roundings: given for side {ns.side!r}; only --side cupy takes it (PyTorch always rounds)")
    if ns.cuda_graph and ns.side != "cupy":
        raise Tr2Error(f"--cuda-graph: given for side {ns.side!r}; only --side cupy takes it (PyTorch: --mode reduce-overhead)")
    if ns.half_roundings and ns.dtype == "float32":
        raise Tr2Error("--half-roundings: given with --dtype float32; allowed only with bfloat16 or float16")
    if not 0 <= ns.steps <= MAX_STEPS:
        raise Tr2Error(f"--steps: {ns.steps} is not allowed; allowed: an integer from 0 to {MAX_STEPS}")
    if not 0 <= ns.seed <= SEED_MAX:
        raise Tr2Error(f"--seed: {ns.seed} is not allowed; allowed: an integer from 0 to {SEED_MAX} "
                       "(the range every generator it seeds takes)")
    if ns.dropout is not None and not 0.0 <= ns.dropout < 1.0:
        raise Tr2Error(f"--dropout: {ns.dropout} is out of range; allowed: 0 <= p < 1")
    if ns.eval_interval < 0:
        raise Tr2Error(f"--eval-interval: {ns.eval_interval} is negative; allowed: 0 (off) or a positive integer")
    if ns.eval_iters is not None and ns.eval_iters < 1:
        raise Tr2Error(f"--eval-iters: {ns.eval_iters}; allowed: a positive integer")
    if ns.log_interval < 1:
        raise Tr2Error(f"--log-interval: {ns.log_interval}; allowed: a positive integer")
    if ns.device == "cuda" and not cuda_available(ns.side):
        raise Tr2Error(f"--device: 'cuda' asked for, but no CUDA device is visible to the {ns.side} side")
    device = ns.device
    if device == "auto":
        device = "cuda" if cuda_available(ns.side) else "cpu"
    if ns.cuda_graph and device != "cuda":
        raise Tr2Error(f"--cuda-graph: the run is on the {device}; allowed only on cuda (a graph is a CUDA object)")
    cfg = load_model(ns.model)
    # The files a run reads, checked now: a bad one would otherwise end the run after the model is built.
    if ns.init is not None:
        weights.check_weights_file(ns.init, cfg)
    if ns.batches is not None:
        data.check_batch_order(ns.batches, cfg.dataset, cfg.block_size, cfg.batch_size, ns.steps)
    # The files a run writes, checked now too: a missing folder would otherwise end the run at its first line.
    for key, path in (("--metrics", ns.metrics), ("--save-init", ns.save_init)):
        if path is not None:
            check_output_path(key, path)
    eval_iters = ns.eval_iters if ns.eval_iters is not None else cfg.eval_iters
    return TrainArgs(side=ns.side, model=ns.model, dtype=ns.dtype, mode=mode, device=device, steps=ns.steps,
                     seed=ns.seed, init=ns.init, save_init=ns.save_init, batches=ns.batches, tf32=ns.tf32,
                     dropout=ns.dropout, eval_interval=ns.eval_interval, eval_iters=eval_iters,
                     half_roundings=ns.half_roundings, cuda_graph=ns.cuda_graph, metrics=ns.metrics,
                     log_interval=ns.log_interval, nanogpt=ns.nanogpt)


def check_output_path(key: str, path: str, suffix: Optional[str] = None, make_folder: bool = False) -> None:
    """A file a run or a tool writes, checked before any work (the writer would otherwise fail at its end): not a
    folder, ending in `suffix` if given, in a folder this user can write: one that exists (the trainer's), or with
    `make_folder` (the tools that make theirs) the first of its folders that exists, which must be no file."""
    p = Path(path)
    if p.is_dir():
        raise Tr2Error(f"{key}: {path!r} is a folder; allowed: a file path (its folder must exist)")
    if suffix is not None and p.suffix != suffix:
        raise Tr2Error(f"{key}: {path!r} does not end in {suffix}; allowed: a {suffix} file path")
    folder, where = p.parent, "a file path in an existing folder"
    if make_folder:
        while not folder.exists() and folder != folder.parent:
            folder = folder.parent
        where = "a file path in a folder, or one that can be made"
    if not folder.is_dir():
        raise Tr2Error(f"{key}: {path!r} lies in {str(folder)!r}, which is not a folder; allowed: {where}")
    if not os.access(folder, os.W_OK):
        raise Tr2Error(f"{key}: {path!r} lies in {str(folder)!r}, which this user cannot write; "
                       "allowed: a file path in a writable folder")


def cuda_available(side: str) -> bool:
    if side in TORCH_LOOPS:
        try:
            import torch
            return torch.cuda.is_available()
        except Exception:
            return False
    try:
        import cupy
        return cupy.cuda.runtime.getDeviceCount() > 0
    except Exception:
        return False


def parse(argv=None) -> TrainArgs:
    return validate(build_parser().parse_args(argv))
