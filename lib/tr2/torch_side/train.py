"""The torch side's trainer: nanoGPT's train.py loop (gradient accumulation 1, one process) for tr2's arguments.

What follows nanoGPT exactly: the seed set once before the model is built, TF32 switches, autocast with
the half type, GradScaler for float16, AdamW parameter groups (fused on CUDA), the learning-rate
schedule, clipping after unscale_, the first batch drawn before the loop and the next one right after
the forward, evaluation at the top of an iteration, iterations 0..steps inclusive.

Where tr2 differs, on purpose:
- Batches come from tr2.data.BatchSource. With --batches they are the recorded order (shared with the
  cupy side, and so are the evaluation batches, drawn from BatchSource's numpy generator). Without it,
  every offset is drawn as nanoGPT draws it: torch.randint(len(data) - block_size, (batch,)) from
  torch's seeded global generator.
- On the CPU nanoGPT uses no autocast at all (its CPU runs are float32 whatever --dtype says). This side
  autocasts on the CPU too, with the asked half type, wherever the installed torch can (torch >= 2.2
  has CPU autocast for bfloat16 and float16); where it cannot, the run is float32 without autocast and
  the startup line says "products float32". GradScaler runs whenever float16 autocast does.
- The iter line's time is tr2.trainlog's (mean ms per step since the last line, read after loss.item()).
"""
from __future__ import annotations

import warnings
from contextlib import nullcontext

import numpy as np
import torch

from .. import Tr2Error
from ..data import BatchSource, make_batch
from ..models import ModelConfig
from ..schedule import get_lr
from ..trainargs import TrainArgs
from ..trainlog import TrainLog, oom_line, peak_line
from ..weights import load_weights, save_weights
from .model import GPT, load_weights_into, to_weights

PT_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


class TorchBatches(BatchSource):
    """BatchSource whose own random draws are nanoGPT's: torch.randint on torch's seeded global generator.

    The recorded-order path (--batches) is BatchSource's, unchanged, so both sides read identical data.
    """

    def _draw(self, n_tokens: int) -> np.ndarray:
        return torch.randint(n_tokens - self.block_size, (self.batch_size,)).numpy()

    def train_batch(self, step: int):
        if self.order is not None:
            return super().train_batch(step)
        return make_batch(self.train, self._draw(len(self.train)), self.block_size)

    def eval_batch(self, split: str):
        if self.order is not None:
            return super().eval_batch(split)
        data = self.train if split == "train" else self.val
        return make_batch(data, self._draw(len(data)), self.block_size)


def _cpu_autocast_works(pt_dtype) -> bool:
    """Does this torch autocast a product on the CPU to pt_dtype (rather than warn and disable itself)?"""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # "CPU autocast ... not supported ... Disabling autocast" -> False
            with torch.autocast("cpu", dtype=pt_dtype):
                y = torch.ones(2, 2) @ torch.ones(2, 2)
        return y.dtype == pt_dtype
    except Exception:
        return False


def autocast_context(device_type: str, dtype: str):
    """(context, half_active, description) for --dtype on this device."""
    if dtype == "float32":
        return nullcontext(), False, "products float32, no autocast"
    pt = PT_DTYPES[dtype]
    if device_type == "cuda" or _cpu_autocast_works(pt):
        return torch.autocast(device_type, dtype=pt), True, f"autocast {device_type} {dtype}"
    return nullcontext(), False, f"products float32 (this torch has no CPU autocast for {dtype})"


def is_oom(e: BaseException) -> bool:
    if isinstance(e, torch.cuda.OutOfMemoryError):
        return True
    msg = str(e).lower()  # Inductor and others wrap the allocator's error in their own exception types
    return "out of memory" in msg or "can't allocate memory" in msg


def _to_device(batch, device: str):
    x, y = (torch.from_numpy(np.ascontiguousarray(a)) for a in batch)  # make_batch's y is a strided view
    if device.startswith("cuda"):
        # nanoGPT: pin the host arrays, copy asynchronously
        return x.pin_memory().to(device, non_blocking=True), y.pin_memory().to(device, non_blocking=True)
    return x, y


def train_step(train_model, model, optimizer, scaler, ctx, X, Y, grad_clip: float, fetch=None):
    """One nanoGPT iteration: forward under autocast, (fetch the next batch), scaled backward, unscale and
    clip, optimizer step through the scaler, zero the gradients. Returns (loss tensor, fetch's result)."""
    with ctx:
        _, loss = train_model(X, Y)
    nxt = fetch() if fetch is not None else None
    scaler.scale(loss).backward()
    if grad_clip != 0.0:
        scaler.unscale_(optimizer)
        torch.nn.utils.clip_grad_norm_(model.parameters(), grad_clip)
    scaler.step(optimizer)
    scaler.update()
    optimizer.zero_grad(set_to_none=True)
    return loss, nxt


def run(args: TrainArgs, cfg: ModelConfig, after_step=None, log: TrainLog | None = None) -> int:
    """Train; exit code 0, or 3 out of memory. `after_step(model, it)`, when given, is called after each
    optimizer step and once with it = -1 before step 0 (method B's noise floor moves the weights there)."""
    log = log or TrainLog(args.metrics, args.log_interval)
    return oom_exit(lambda: _train(args, cfg, log, after_step), log)


def torch_peak_line(cuda: bool) -> str:
    """The peak memory line of a PyTorch run (ours and nanoGPT's): in use and reserved on the GPU."""
    return peak_line(torch.cuda.max_memory_allocated(), torch.cuda.max_memory_reserved()) if cuda else peak_line(0)


def oom_exit(body, log: TrainLog) -> int:
    """body()'s exit code; out of memory becomes its line and exit 3 (both PyTorch sides), the log closed."""
    try:
        return body()
    except Exception as e:  # noqa: BLE001 - only out-of-memory is handled; everything else re-raises
        if not is_oom(e):
            raise
        log.say(oom_line(str(e)))
        return 3
    finally:
        log.close()


def _train(args: TrainArgs, cfg: ModelConfig, log: TrainLog, after_step=None) -> int:
    device = args.device
    device_type = "cuda" if device.startswith("cuda") else "cpu"
    if device_type == "cuda" and not torch.cuda.is_available():
        raise Tr2Error("--device: 'cuda' asked for, but torch sees no CUDA device")

    torch.manual_seed(args.seed)  # nanoGPT: torch.manual_seed(1337 + seed_offset); tr2's --seed defaults to 1337
    torch.backends.cuda.matmul.allow_tf32 = args.tf32
    torch.backends.cudnn.allow_tf32 = args.tf32
    ctx, half_active, ctx_desc = autocast_context(device_type, args.dtype)

    batches = TorchBatches(cfg.dataset, cfg.block_size, cfg.batch_size, args.seed, args.batches)

    # Built on the CPU from the seeded generator, as nanoGPT does, also when --init replaces the weights
    # afterwards (nanoGPT's resume path builds GPT(...) first too), so the generator's later draws match.
    model = GPT(cfg)
    if args.init:
        load_weights_into(model, load_weights(args.init, cfg))
    if args.save_init:
        save_weights(args.save_init, to_weights(model))
    model.to(device)

    scaler = torch.amp.GradScaler(device_type, enabled=(args.dtype == "float16" and half_active))
    optimizer = model.configure_optimizers(cfg.weight_decay, cfg.learning_rate, (cfg.beta1, cfg.beta2),
                                           cfg.eps_adam, device_type)
    train_model = model
    if args.mode == "default":
        train_model = torch.compile(model)
    elif args.mode in ("reduce-overhead", "max-autotune"):
        train_model = torch.compile(model, mode=args.mode)

    log.say(f"number of parameters: {model.get_num_params() / 1e6:.2f}M")
    log.say(f"torch side: model {cfg.name}, torch {torch.__version__}, device {device}, dtype {args.dtype} "
            f"({ctx_desc}{', GradScaler' if scaler.is_enabled() else ''}), mode {args.mode}, "
            f"tf32 {'on' if args.tf32 else 'off'}, dropout {cfg.dropout}, fused AdamW {optimizer.tr2_fused}, "
            f"seed {args.seed}, batches {args.batches or 'torch.randint'}, init {args.init or 'nanoGPT init'}, "
            f"steps 0..{args.steps}")

    @torch.no_grad()
    def estimate_loss():
        out = {}
        train_model.eval()
        for split in ("train", "val"):
            losses = torch.zeros(args.eval_iters)
            for k in range(args.eval_iters):
                X_, Y_ = _to_device(batches.eval_batch(split), device)
                with ctx:
                    _, loss_ = train_model(X_, Y_)
                losses[k] = loss_.item()
            out[split] = losses.mean().item()
        train_model.train()
        return out

    if after_step is not None:
        after_step(model, -1)
    X, Y = _to_device(batches.train_batch(0), device)
    log.start()
    for it in range(args.steps + 1):
        lr = get_lr(it, cfg)
        for group in optimizer.param_groups:
            group["lr"] = lr

        if args.eval_interval > 0 and it % args.eval_interval == 0:
            paused = log.pause_clock()
            losses = estimate_loss()
            log.evaluation(it, losses["train"], losses["val"])
            log.resume_clock(paused)

        # nanoGPT fetches the next batch right after the forward, while the device still runs it
        fetch = (lambda: _to_device(batches.train_batch(it + 1), device)) if it < args.steps else None
        loss, nxt = train_step(train_model, model, optimizer, scaler, ctx, X, Y, cfg.grad_clip, fetch)
        if nxt is not None:
            X, Y = nxt
        if after_step is not None:
            after_step(model, it)

        printed = log.wants_line(it)
        if printed or log.every_step:
            log.loss(it, loss.item(), printed)  # .item() waits for the device

    log.say(torch_peak_line(device_type == "cuda"))
    return 0
