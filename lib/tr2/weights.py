"""Initial-weight files: one .npz in float32 keyed by nanoGPT's state_dict names (lm_head tied, left out)."""
from __future__ import annotations

import math
import os
import zipfile
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


def check_weights_file(path, cfg: ModelConfig) -> None:
    """The names and shapes of an initial-weights file against the model, from the .npy headers only (no
    array is read): a missing, corrupt, empty or ill-fitting file is one line, before any work."""
    given, path = str(path), Path(path)   # as given: '' would show as '.'
    if not path.is_file():
        said = "is empty" if not given else "is a folder" if path.is_dir() else "does not exist"
        raise Tr2Error(f"--init: {given!r} {said}; allowed: an .npz written by --save-init")
    try:
        with zipfile.ZipFile(path) as z:
            shapes = {}
            for member in z.namelist():
                with z.open(member) as f:
                    version = np.lib.format.read_magic(f)
                    read = (np.lib.format.read_array_header_1_0 if version == (1, 0)
                            else np.lib.format.read_array_header_2_0)
                    shape = read(f)[0]
                shapes[member[:-4] if member.endswith(".npy") else member] = tuple(shape)
    except (zipfile.BadZipFile, ValueError, OSError, EOFError) as e:
        raise Tr2Error(f"--init: {path} is not an .npz of arrays ({' '.join(str(e).split()) or type(e).__name__}); "
                       "allowed: an .npz written by --save-init") from None
    want = param_shapes(cfg)
    extra = sorted(set(shapes) - set(want) - {"lm_head.weight"})
    missing = sorted(set(want) - set(shapes))
    if extra or missing:
        raise Tr2Error(f"--init: {path} does not fit model {cfg.name}: "
                       + (f"missing {missing[0]!r}" if missing else f"unexpected {extra[0]!r}"))
    for k, shape in want.items():
        if shapes[k] != tuple(shape):
            raise Tr2Error(f"--init: {path}: {k} has shape {shapes[k]}, model {cfg.name} needs {tuple(shape)}")


def load_weights(path, cfg: ModelConfig) -> dict[str, np.ndarray]:
    check_weights_file(path, cfg)
    with np.load(path) as f:
        weights = {k: f[k] for k in f.files}
    return {k: np.asarray(weights[k], dtype=np.float32) for k in param_shapes(cfg)}
