"""The models, read from params/models.yaml: every hyperparameter nanoGPT's train.py uses."""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from functools import lru_cache

import yaml

from . import PARAMS_DIR, Tr2Error


@dataclass(frozen=True)
class ModelConfig:
    name: str
    n_layer: int
    n_head: int
    n_embd: int
    block_size: int
    batch_size: int
    vocab_size: int
    dataset: str
    dropout: float
    learning_rate: float
    min_lr: float
    warmup_iters: int
    lr_decay_iters: int
    max_iters: int
    beta1: float
    beta2: float
    weight_decay: float
    grad_clip: float
    eval_interval: int
    eval_iters: int
    eps_ln: float
    eps_adam: float

    @property
    def head_size(self) -> int:
        return self.n_embd // self.n_head


DATASETS = ("shakespeare_char", "shakespeare")
_FIELDS = {f.name: f.type for f in dataclasses.fields(ModelConfig)}


@lru_cache(maxsize=None)
def _table() -> dict:
    with open(PARAMS_DIR / "models.yaml") as f:
        raw = yaml.safe_load(f)
    return raw


def list_models() -> list[str]:
    return list(_table()["models"])


def load_model(name: str, **overrides) -> ModelConfig:
    table = _table()
    if name not in table["models"]:
        raise Tr2Error(f"model: {name!r} is not a known model; allowed: {', '.join(list_models())}")
    values = {"name": name, **table["defaults"], **table["models"][name], **overrides}
    unknown = sorted(set(values) - set(_FIELDS))
    if unknown:
        raise Tr2Error(f"model {name}: unknown key {unknown[0]!r}; allowed: {', '.join(_FIELDS)}")
    missing = sorted(set(_FIELDS) - set(values))
    if missing:
        raise Tr2Error(f"model {name}: missing key {missing[0]!r}")
    cfg = ModelConfig(**{k: (float(v) if _FIELDS[k] == "float" else v) for k, v in values.items()})
    if cfg.n_embd % cfg.n_head:
        raise Tr2Error(f"model {name}: n_embd={cfg.n_embd} is not a multiple of n_head={cfg.n_head}")
    if cfg.dataset not in DATASETS:
        raise Tr2Error(f"model {name}: dataset={cfg.dataset!r}; allowed: {', '.join(DATASETS)}")
    return cfg


def count_params(cfg: ModelConfig, non_embedding: bool = True) -> int:
    """Parameters as nanoGPT counts them: tied embeddings once, position embeddings left out by default."""
    C, L = cfg.n_embd, cfg.n_layer
    per_layer = 2 * C + 3 * C * C + C * C + 4 * C * C + 4 * C * C
    n = cfg.vocab_size * C + cfg.block_size * C + L * per_layer + C
    return n - cfg.block_size * C if non_embedding else n


def flops_per_token(cfg: ModelConfig) -> int:
    """Training FLOPs per token: 6N plus attention's 12·L·H·Q·T (the floor of docs/perf.md)."""
    N = count_params(cfg)
    return 6 * N + 12 * cfg.n_layer * cfg.n_head * cfg.head_size * cfg.block_size
