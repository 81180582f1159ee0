"""Initial-weight files: one .npz in float32 keyed by nanoGPT's state_dict names (lm_head tied, left out)."""
from __future__ import annotations

import math
import os
from pathlib import Path

import numpy as np

from . import Tr2Error
from .models import ModelConfig


def param_shapes(cfg: ModelConfig) -> dict[str, tuple[int, ...]]:
    C = cfg.n_embd
    shapes = {"transformer.wte.weight": (cfg.vocab_size, C), "transformer.wpe.weight": (cfg.block_size, C)}
    for i in range(cfg.n_layer):
        p = f"transformer.h.{i}."
        shapes.update({
            p + "ln_1.weight": (C,),
            p + "attn.c_attn.weight": (3 * C, C),
            p + "attn.c_proj.weight": (C, C),
            p + "ln_2.weight": (C,),
            p + "mlp.c_fc.weight": (4 * C, C),
            p + "mlp.c_proj.weight": (C, 4 * C),
        })
    shapes["transformer.ln_f.weight"] = (C,)
    return shapes


def init_numpy(cfg: ModelConfig, seed: int) -> dict[str, np.ndarray]:
    """nanoGPT's initialization, drawn from numpy: N(0, 0.02), residual projections 0.02/sqrt(2L), LayerNorm 1."""
    gen = np.random.default_rng(seed)
    out = {}
    for name, shape in param_shapes(cfg).items():
        if len(shape) == 1:
            out[name] = np.ones(shape, dtype=np.float32)
            continue
        std = 0.02 / math.sqrt(2 * cfg.n_layer) if name.endswith("c_proj.weight") else 0.02
        out[name] = (gen.standard_normal(shape, dtype=np.float32) * np.float32(std)).astype(np.float32)
    return out


def save_weights(path, weights: dict[str, np.ndarray]) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp.npz")
    np.savez(tmp, **{k: np.asarray(v, dtype=np.float32) for k, v in weights.items()})
    os.replace(tmp, path)
    return path


def load_weights(path, cfg: ModelConfig) -> dict[str, np.ndarray]:
    path = Path(path)
    if not path.is_file():
        raise Tr2Error(f"--init: file {path} does not exist")
    with np.load(path) as f:
        weights = {k: f[k] for k in f.files}
    want = param_shapes(cfg)
    extra = sorted(set(weights) - set(want) - {"lm_head.weight"})
    missing = sorted(set(want) - set(weights))
    if extra or missing:
        raise Tr2Error(f"--init: {path} does not fit model {cfg.name}: "
                       + (f"missing {missing[0]!r}" if missing else f"unexpected {extra[0]!r}"))
    for k, shape in want.items():
        if weights[k].shape != shape:
            raise Tr2Error(f"--init: {path}: {k} has shape {weights[k].shape}, model {cfg.name} needs {shape}")
    return {k: np.asarray(weights[k], dtype=np.float32) for k in want}
