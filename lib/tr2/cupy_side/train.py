"""The cupy side's trainer: nanoGPT's train.py loop on this side's model, optimizer and backend.

As nanoGPT: iterations 0..steps (steps + 1 updates); at the top of an iteration the learning rate is
set and, every eval_interval steps, the loss is estimated on eval_iters batches of each split with
dropout off; the first batch is drawn before the loop and the next one right after the forward; then
backward, unscale and clip, AdamW, and the loss scaler's update (float16 only).

Weights: --init's file, else tr2.weights.init_numpy(cfg, seed); --save-init writes them before
training. Batches: tr2.data.BatchSource (the recorded order with --batches). The loss is read to the
host, which waits for the device, on the steps the log prints and on every step with --metrics.

--cuda-graph (every element type on a GPU): iteration 0 runs eagerly in the graph's own memory pool
(the warm-up), iteration 1 captures forward, backward, clip, AdamW and the loss scaler's update once, and
every iteration from 1 on replays it. Before each, the host writes the step's inputs into one buffer allocated
once, by one copy (input_block.py): the batch, the dropout step counter (model.step_counter_host), lr
(AdamW.hyper_host); the rest (bias corrections, loss scale, a float16 overflow's skip) is decided on the device
(optim.py). Same kernels, same order, same arithmetic as the eager loop: the same losses to the bit
(tests/test_graph_gpu.py).
"""
from __future__ import annotations

import contextlib

import numpy as np

from ..data import BatchSource
from ..models import ModelConfig, count_params
from ..schedule import get_lr
from ..trainargs import TrainArgs
from ..trainlog import TrainLog, oom_line, peak_line
from ..weights import init_numpy, load_weights, save_weights
from .backend import get_backend
from .model import GPT
from .optim import AdamW, LossScaler, apply_update, optimizer_step


def _oom_errors(device: str) -> tuple:
    """The exception types that mean the device ran out of memory."""
    errors = [MemoryError]
    if device == "cuda":
        try:
            import cupy
            errors.append(cupy.cuda.memory.OutOfMemoryError)
        except Exception:  # noqa: BLE001 - without CuPy there is no CuPy error to catch
            pass
    return tuple(errors)


def run(args: TrainArgs, cfg: ModelConfig) -> int:
    log = TrainLog(args.metrics, args.log_interval)
    try:
        return _train(args, cfg, log)
    except _oom_errors(args.device) as e:
        log.say(oom_line(str(e) or type(e).__name__))
        return 3
    finally:
        log.close()


def _train(args: TrainArgs, cfg: ModelConfig, log: TrainLog) -> int:
    backend = get_backend(args.device, args.dtype, tf32=args.tf32, half_roundings=args.half_roundings)
    batches = BatchSource(cfg.dataset, cfg.block_size, cfg.batch_size, args.seed, args.batches)

    weights = load_weights(args.init, cfg) if args.init else init_numpy(cfg, args.seed)
    if args.save_init:
        save_weights(args.save_init, weights)
    model = GPT(cfg, backend, weights, seed=args.seed)
    optimizer = AdamW(backend, model.params, (cfg.beta1, cfg.beta2), cfg.eps_adam, cfg.weight_decay)
    scaler = LossScaler(backend, enabled=(args.dtype == "float16"))

    log.say(f"number of parameters: {count_params(cfg) / 1e6:.2f}M")
    log.say(f"cupy side: model {cfg.name}, backend {backend!r}, device {args.device}, "
            f"dtype {args.dtype}{' with loss scaling' if scaler.enabled else ''}, tf32 {'on' if args.tf32 else 'off'}, "
            f"half roundings {'on' if args.half_roundings else 'off'}, dropout {cfg.dropout}, seed {args.seed}, "
            f"batches {args.batches or 'numpy generator'}, init {args.init or 'init_numpy'}, steps 0..{args.steps}")

    def to_device(batch):
        x, y = batch
        return backend.to_device(x, dtype=np.int64), backend.to_device(y, dtype=np.int64)

    def read(loss) -> float:
        return float(backend.to_host(loss))

    def estimate_loss() -> dict:
        out = {}
        for split in ("train", "val"):
            losses = [read(model.forward(*to_device(batches.eval_batch(split)), step=0, training=False))
                      for _ in range(args.eval_iters)]
            out[split] = float(np.mean(losses))
        return out

    read_every_step = log.metrics is not None
    graph = _TrainStepGraph(backend, model, optimizer, scaler, cfg) if args.cuda_graph else None
    if graph is not None:
        log.say("cuda graph: iteration 0 eager in the graph's pool, 1 captured, it and every later one replayed")
        backend.synchronize()  # the weights were copied on the default stream; from here all runs on the graph's
    X, Y = batches.train_batch(0) if graph is not None else to_device(batches.train_batch(0))
    log.start()
    with graph.stream if graph is not None else contextlib.nullcontext():
        for it in range(args.steps + 1):
            lr = get_lr(it, cfg)

            if args.eval_interval > 0 and it % args.eval_interval == 0:
                paused = log.pause_clock()
                losses = estimate_loss()
                log.evaluation(it, losses["train"], losses["val"])
                log.resume_clock(paused)

            if graph is not None:
                loss = graph.step(it, X, Y, lr)
                if it < args.steps:  # the next batch on the host while the device runs this step
                    X, Y = batches.train_batch(it + 1)
            else:
                loss = model.forward(X, Y, step=it, training=True, dloss=scaler.scale if scaler.enabled else None)
                if it < args.steps:  # as nanoGPT: the next batch while the device runs the forward
                    X, Y = to_device(batches.train_batch(it + 1))
                grads = model.backward()
                optimizer_step(backend, optimizer, scaler, grads, lr, cfg.grad_clip)

            printed = log.wants_line(it)
            if printed or read_every_step:
                log.loss(it, read(loss), printed)

    if graph is not None and graph.graph.graph is not None:
        c = graph.graph.captured
        log.say(f"cuda graph: {c['kernels']} launches of our kernels captured, {c['programmatic']} of them programmatic")
        from .gpu import memsets
        if memsets.current() is not None:
            log.say(memsets.current().line())
    # with a graph, the bytes in use in its pool (the step's activations and gradients) count in both
    if backend.device == "cuda":
        log.say(backend.workspace_line())
        log.say(backend.nvrtc_line())
        finals = backend.layernorm_finals_line()   # TR2_LN_DW_DEFER only
        if finals:
            log.say(finals)
        log.say(peak_line(backend.peak_memory_bytes(), backend.reserved_memory_bytes()))
    else:
        log.say(peak_line(0))
    return 0


def step_inputs(backend, model, optimizer, batch_shape):
    """The captured step's four inputs (X, Y, the model's dropout step counter, AdamW's scalars) as views of one
    buffer, written by one copy a step (input_block.py). Returns (block, X, Y); model.step_counter and
    optimizer.hyper are views of it from here on, so call it before anything has read them (a capture)."""
    block = backend.input_block([(batch_shape, np.int64), (batch_shape, np.int64),
                                 (model.step_counter.shape, model.step_counter.dtype),
                                 (optimizer.hyper.shape, optimizer.hyper.dtype)])
    X, Y, model.step_counter, optimizer.hyper = block.views
    return block, X, Y


def write_step_inputs(backend, block, model, optimizer, it: int, X, Y, lr: float) -> None:
    """What the four writes of an eager step (the batch, model.set_step, optimizer.set_lr) would write, as one."""
    backend.write_block(block, [X, Y, model.step_counter_host(it), optimizer.hyper_host(lr)])


class _TrainStepGraph:
    """The eager-warm-up, capture, replay sequence of --cuda-graph around the model's step."""

    WARMUP = 1

    def __init__(self, backend, model, optimizer, scaler, cfg):
        from .gpu.graph import StepGraph
        self.backend, self.model, self.optimizer, self.scaler = backend, model, optimizer, scaler
        self.inputs, self.X, self.Y = step_inputs(backend, model, optimizer, (cfg.batch_size, cfg.block_size))
        self.grad_clip = cfg.grad_clip
        self.graph = StepGraph(self._body, backend.pool_allocator)
        self.stream = self.graph.stream
        self.done = 0

    def _body(self):
        scaler = self.scaler
        loss = self.model.forward(self.X, self.Y, step=None, training=True, dloss=scaler.scale if scaler.enabled else None)
        grads = self.model.backward()
        apply_update(self.backend, self.optimizer, grads, self.grad_clip, scaler)
        self.model.grads = {}  # the step's buffers go back to the graph's pool, for the next step's eager use
        return loss

    def step(self, it: int, X, Y, lr: float):
        write_step_inputs(self.backend, self.inputs, self.model, self.optimizer, it, X, Y, lr)
        if self.done < self.WARMUP:
            loss = self.graph.warmup()
        else:
            if self.graph.graph is None:
                self.graph.capture()
            loss = self.graph.replay()
        self.done += 1
        return loss
