"""The nanogpt side: nanoGPT's own train.py, from an unmodified checkout, launched by tr2 (never copied here).

The checkout is `--nanogpt DIR` (the card's `nanogpt_path`; default ../shared/nanoGPT beside the repository,
commit 3adf61e, MIT). Its train.py takes its settings from configurator.py's `--key=value` arguments; the
model's hyperparameters, the steps, the device and the element type go in that way. What nanoGPT has no
setting for is injected at run time, without editing its files: the script runs top-level statement by
top-level statement in one namespace (its own code, in its own order), and between two statements
`_HOOKS` change what must differ:

- the seed (`torch.manual_seed(args.seed)` right after its own `manual_seed(1337 + seed_offset)`);
- the TF32 switches (set to `args.tf32` right after its own two `allow_tf32 = True`);
- the batches: its `get_batch` is replaced by tr2's (the recorded order with --batches; otherwise nanoGPT's
  own draw, torch.randint on its seeded generator, over tr2's data files: the checkout has no .bin files);
- the vocabulary (tr2's model, where nanoGPT would read data/<dataset>/meta.pkl);
- the start (--init: tr2's weights file copied into its freshly built model, as the torch side does);
- the mode handed to torch.compile (eager: compile=False; default: its own call; reduce-overhead and
  max-autotune: torch.compile wrapped with that mode before its call);
- every step's loss for --metrics, read after its optimizer's zero_grad (its log line keeps 4 decimals).

Its log lines are its own (`iter N: loss X, time Yms, mfu Z%`, every log_interval steps after a loss read
that waits for the device), read by the same outside clock; `time` is its own time of the last iteration.
Evaluation off (--eval-interval 0): nanoGPT always evaluates at iteration 0; it is given 0 batches then,
and its "step 0: ... nan" line, which reports an evaluation that did not happen, is not printed.
A statement a hook needs that the checkout lacks stops the run with one line (another nanoGPT version).
"""
from __future__ import annotations

import ast
import functools
import importlib.util
import os
import sys
import tempfile
from pathlib import Path

import numpy as np
import torch

from . import Tr2Error
from .models import ModelConfig
from .torch_side.train import TorchBatches, oom_exit, torch_peak_line  # nanoGPT's own draw; the OOM exit; peak
from .trainargs import CHECKOUT_FILES, DEFAULT_CHECKOUT, TrainArgs, checkout_path  # noqa: F401 - read from here too
from .trainlog import TrainLog
from .weights import load_weights

def config_argv(args: TrainArgs, cfg: ModelConfig, out_dir: str) -> list[str]:
    """configurator.py's `--key=value` overrides: tr2's model, run length, device and type for nanoGPT's globals.
    Floats as repr(float) so that its type check (the override's type must equal the default's) passes."""
    f = lambda v: repr(float(v))  # noqa: E731
    eval_on = args.eval_interval > 0
    kv = {
        "out_dir": out_dir, "always_save_checkpoint": False, "wandb_log": False, "init_from": "scratch",
        "dataset": cfg.dataset, "gradient_accumulation_steps": 1, "batch_size": cfg.batch_size,
        "block_size": cfg.block_size, "n_layer": cfg.n_layer, "n_head": cfg.n_head, "n_embd": cfg.n_embd,
        "dropout": f(cfg.dropout if args.dropout is None else args.dropout), "bias": False,
        "learning_rate": f(cfg.learning_rate), "max_iters": args.steps, "weight_decay": f(cfg.weight_decay),
        "beta1": f(cfg.beta1), "beta2": f(cfg.beta2), "grad_clip": f(cfg.grad_clip), "decay_lr": True,
        "warmup_iters": cfg.warmup_iters, "lr_decay_iters": cfg.lr_decay_iters, "min_lr": f(cfg.min_lr),
        # nanoGPT evaluates whenever iter_num % eval_interval == 0, iteration 0 always: off means 0 batches there
        "eval_interval": args.eval_interval if eval_on else args.steps + 1,
        "eval_iters": args.eval_iters if eval_on else 0,
        "log_interval": args.log_interval, "device": args.device, "dtype": args.dtype,
        "compile": args.mode != "eager",
    }
    return [f"--{k}={v}" for k, v in kv.items()]


class _Launch:
    """The injections, each bound to the statement of train.py it follows (matched on its source text)."""

    def __init__(self, args: TrainArgs, cfg: ModelConfig, log: TrainLog, after_step=None):
        self.args, self.cfg, self.log, self.after_step = args, cfg, log, after_step
        self.batches = TorchBatches(cfg.dataset, cfg.block_size, cfg.batch_size, args.seed, args.batches)

    def hooks(self):
        return (("torch.manual_seed(", self.seed), ("torch.backends.cudnn.allow_tf32", self.tf32),
                ("def get_batch(", self.get_batch), ("if os.path.exists(meta_path)", self.vocab),
                ("if init_from == 'scratch'", self.start), ("optimizer = model.configure_optimizers", self.per_step),
                ("def estimate_loss(", self.evaluation))

    def seed(self, g):
        torch.manual_seed(self.args.seed)

    def tf32(self, g):
        torch.backends.cuda.matmul.allow_tf32 = self.args.tf32
        torch.backends.cudnn.allow_tf32 = self.args.tf32

    def get_batch(self, g):
        device, batches = g["device"], self.batches
        # its own loop fetches batch it+1 right after the forward of it: count the training fetches
        state = {"next": 0}

        def get_batch(split):
            if split == "train":
                # its last fetch, after the final step, is never trained on: the recorded order ends before it
                last = self.args.steps if batches.order is not None else state["next"]
                x, y = batches.train_batch(min(state["next"], last))
                state["next"] += 1
            else:
                x, y = batches.eval_batch(split)
            x, y = (torch.from_numpy(np.ascontiguousarray(a)) for a in (x, y))
            if "cuda" in device:  # as nanoGPT: pinned, copied asynchronously
                return x.pin_memory().to(device, non_blocking=True), y.pin_memory().to(device, non_blocking=True)
            return x.to(device), y.to(device)
        g["get_batch"] = get_batch

    def vocab(self, g):
        g["meta_vocab_size"] = self.cfg.vocab_size

    @torch.no_grad()
    def start(self, g):
        if self.args.init:
            sd = g["model"].state_dict()  # lm_head.weight is wte's tensor (tied): it follows the copy
            for k, v in load_weights(self.args.init, self.cfg).items():
                sd[k].copy_(torch.as_tensor(np.asarray(v)))
        if self.after_step is not None:
            self.after_step(g["model"], -1)

    def per_step(self, g):
        opt, log, after = g["optimizer"], self.log, self.after_step
        if not (log.every_step or after):
            return
        zero_grad = opt.zero_grad

        def zero_grad_then_read(*a, **kw):  # the last call of each iteration of its loop
            zero_grad(*a, **kw)
            it = g["iter_num"]
            if after is not None:
                after(g["model"], it)
            if log.every_step:
                log.loss(it, g["loss"].item() * g["gradient_accumulation_steps"], printed=False)
        opt.zero_grad = zero_grad_then_read

    def evaluation(self, g):
        if self.args.eval_interval > 0:
            return
        builtin_print = print

        def quiet_print(*a, **kw):  # its step-0 evaluation of 0 batches prints nan: not an evaluation
            if a and isinstance(a[0], str) and a[0].startswith("step 0: train loss"):
                return
            builtin_print(*a, **kw)
        g["print"] = quiet_print


def _statements(train_py: Path):
    src = train_py.read_text()
    tree = ast.parse(src, filename=str(train_py))
    for node in tree.body:
        yield ast.get_source_segment(src, node), compile(ast.Module([node], []), str(train_py), "exec")


def run(args: TrainArgs, cfg: ModelConfig, after_step=None, log: TrainLog | None = None) -> int:
    """Run nanoGPT's train.py for `args`; exit code 0, or 3 out of memory (as the other sides)."""
    if args.save_init:
        raise Tr2Error("--save-init: given for side 'nanogpt'; the start is made by --side torch (method B's init)")
    home = checkout_path(args.nanogpt)
    # files named relative to where the run started: it runs inside the checkout (its configurator.py is
    # opened by a relative name)
    args = _absolute(args)
    log = log or TrainLog(args.metrics, args.log_interval)
    return oom_exit(lambda: _launch(home, args, cfg, log, after_step), log)


def _launch(home: Path, args: TrainArgs, cfg: ModelConfig, log: TrainLog, after_step) -> int:
    """train.py run inside its checkout, with its arguments and its own `model` module; this process's
    working folder, argv, path, torch.compile and `model` module are given back afterwards (tests run it here)."""
    launch = _Launch(args, cfg, log, after_step)
    saved = (os.getcwd(), list(sys.argv), list(sys.path), torch.compile, sys.modules.get("model"))
    try:
        with tempfile.TemporaryDirectory(prefix="tr2-nanogpt-") as out_dir:
            os.chdir(home)
            sys.argv = [str(home / "train.py"), *config_argv(args, cfg, out_dir)]
            sys.path.insert(0, str(home))
            spec = importlib.util.spec_from_file_location("model", home / "model.py")
            sys.modules["model"] = module = importlib.util.module_from_spec(spec)  # its model.py, not another
            spec.loader.exec_module(module)
            if args.mode in ("reduce-overhead", "max-autotune"):
                torch.compile = functools.partial(saved[3], mode=args.mode)
            log.say(f"nanogpt side: checkout {home}, model {cfg.name}, torch {torch.__version__}, device {args.device}, "
                    f"dtype {args.dtype}, mode {args.mode}, tf32 {'on' if args.tf32 else 'off'}, seed {args.seed}, "
                    f"batches {args.batches or 'torch.randint'}, init {args.init or 'nanoGPT init'}, steps 0..{args.steps}")
            _execute(home / "train.py", launch)
    finally:
        os.chdir(saved[0])
        sys.argv[:], sys.path[:] = saved[1], saved[2]
        torch.compile = saved[3]
        if saved[4] is None:
            sys.modules.pop("model", None)
        else:
            sys.modules["model"] = saved[4]
    log.say(torch_peak_line("cuda" in args.device))
    return 0


def _execute(train_py: Path, launch: _Launch) -> None:
    g = {"__name__": "__main__", "__file__": str(train_py), "__builtins__": __builtins__}
    hooks = list(launch.hooks())
    fired = {text: 0 for text, _ in hooks}
    for source, code in _statements(train_py):
        if source.startswith("while True"):  # its training loop: every injection must be in place before it
            _check_fired(fired)
        exec(code, g)  # noqa: S102 - nanoGPT's own statement, unchanged
        for text, hook in hooks:
            if source.startswith(text):
                fired[text] += 1
                hook(g)
    _check_fired(fired)


def _check_fired(fired: dict) -> None:
    """Each injection exactly once: otherwise the checkout is not the train.py tr2 knows how to launch."""
    unfired = [t for t, n in fired.items() if n != 1]
    if unfired:
        raise Tr2Error(f"--nanogpt: train.py has {fired[unfired[0]]} statement(s) starting {unfired[0]!r}; "
                       "allowed: nanoGPT's train.py as of commit 3adf61e (exactly one)")


def _absolute(args: TrainArgs) -> TrainArgs:
    from dataclasses import replace
    fix = {k: str(Path(v).resolve()) for k in ("init", "batches", "metrics") if (v := getattr(args, k))}
    return replace(args, **fix)
