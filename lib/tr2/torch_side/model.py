"""nanoGPT's GPT, written for this project: same modules, parameter names, initialization and behaviour.

Architecture (nanoGPT's model.py at 3adf61e with bias=False): token + position embeddings, dropout,
n_layer pre-norm blocks (LayerNorm -> causal self-attention -> residual, LayerNorm -> MLP with exact
GELU -> residual), a final LayerNorm and a bias-free head tied to the token embedding.

The modules are built and initialized in nanoGPT's order (nn.Embedding/nn.Linear constructors, then
`apply(_init_weights)` children first, then the residual projections), so under the same
`torch.manual_seed` this model draws the same initial weights as nanoGPT's own GPT.
"""
from __future__ import annotations

import math

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

from ..models import ModelConfig
from ..weights import param_shapes


class LayerNorm(nn.Module):
    """LayerNorm with a weight and no bias (nanoGPT's bias=False); eps from the config (1e-5)."""

    def __init__(self, ndim: int, eps: float = 1e-5):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(ndim))
        self.eps = eps

    def forward(self, x):
        return F.layer_norm(x, self.weight.shape, self.weight, None, self.eps)


class CausalSelfAttention(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        C = cfg.n_embd
        self.n_head, self.n_embd = cfg.n_head, C
        self.c_attn = nn.Linear(C, 3 * C, bias=False)
        self.c_proj = nn.Linear(C, C, bias=False)
        self.resid_dropout = nn.Dropout(cfg.dropout)
        # The attention weights' dropout is applied inside scaled_dot_product_attention (dropout_p),
        # as nanoGPT's flash path does; nanoGPT still builds an nn.Dropout for it, which holds no state.
        self.attn_dropout = nn.Dropout(cfg.dropout)
        self.dropout = cfg.dropout

    def forward(self, x):
        B, T, C = x.shape
        H = self.n_head
        q, k, v = self.c_attn(x).split(C, dim=2)
        q = q.view(B, T, H, C // H).transpose(1, 2)  # [B, H, T, hs]
        k = k.view(B, T, H, C // H).transpose(1, 2)
        v = v.view(B, T, H, C // H).transpose(1, 2)
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=None,
                                           dropout_p=self.dropout if self.training else 0.0, is_causal=True)
        y = y.transpose(1, 2).contiguous().view(B, T, C)
        return self.resid_dropout(self.c_proj(y))


class MLP(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        C = cfg.n_embd
        self.c_fc = nn.Linear(C, 4 * C, bias=False)
        self.gelu = nn.GELU()  # exact (erf) GELU, nanoGPT's default
        self.c_proj = nn.Linear(4 * C, C, bias=False)
        self.dropout = nn.Dropout(cfg.dropout)

    def forward(self, x):
        return self.dropout(self.c_proj(self.gelu(self.c_fc(x))))


class Block(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.ln_1 = LayerNorm(cfg.n_embd, cfg.eps_ln)
        self.attn = CausalSelfAttention(cfg)
        self.ln_2 = LayerNorm(cfg.n_embd, cfg.eps_ln)
        self.mlp = MLP(cfg)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.cfg = cfg
        self.transformer = nn.ModuleDict(dict(
            wte=nn.Embedding(cfg.vocab_size, cfg.n_embd),
            wpe=nn.Embedding(cfg.block_size, cfg.n_embd),
            drop=nn.Dropout(cfg.dropout),
            h=nn.ModuleList([Block(cfg) for _ in range(cfg.n_layer)]),
            ln_f=LayerNorm(cfg.n_embd, cfg.eps_ln),
        ))
        self.lm_head = nn.Linear(cfg.n_embd, cfg.vocab_size, bias=False)
        # Weight tying: one tensor serves as the token embedding and the output head.
        self.transformer.wte.weight = self.lm_head.weight
        self.apply(self._init_weights)
        std_proj = 0.02 / math.sqrt(2 * cfg.n_layer)
        for name, p in self.named_parameters():
            if name.endswith("c_proj.weight"):
                nn.init.normal_(p, mean=0.0, std=std_proj)

    @staticmethod
    def _init_weights(module):
        if isinstance(module, nn.Linear):
            nn.init.normal_(module.weight, mean=0.0, std=0.02)
            if module.bias is not None:
                nn.init.zeros_(module.bias)
        elif isinstance(module, nn.Embedding):
            nn.init.normal_(module.weight, mean=0.0, std=0.02)

    def get_num_params(self, non_embedding: bool = True) -> int:
        """nanoGPT's count: the tied embedding once; position embeddings left out by default."""
        n = sum(p.numel() for p in self.parameters())
        if non_embedding:
            n -= self.transformer.wpe.weight.numel()
        return n

    def forward(self, idx, targets=None):
        B, T = idx.shape
        if T > self.cfg.block_size:
            raise ValueError(f"sequence of length {T} exceeds block_size {self.cfg.block_size}")
        pos = torch.arange(0, T, dtype=torch.long, device=idx.device)
        x = self.transformer.drop(self.transformer.wte(idx) + self.transformer.wpe(pos))
        for block in self.transformer.h:
            x = block(x)
        x = self.transformer.ln_f(x)
        if targets is not None:
            logits = self.lm_head(x)
            loss = F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1), ignore_index=-1)
        else:
            logits = self.lm_head(x[:, [-1], :])  # inference: the last position only
            loss = None
        return logits, loss

    def configure_optimizers(self, weight_decay, learning_rate, betas, eps=1e-8, device_type="cpu"):
        """nanoGPT's AdamW: decay on tensors of 2+ dims, none on the rest; fused on CUDA where available."""
        import inspect
        params = {n: p for n, p in self.named_parameters() if p.requires_grad}
        decay = [p for p in params.values() if p.dim() >= 2]
        nodecay = [p for p in params.values() if p.dim() < 2]
        groups = [{"params": decay, "weight_decay": weight_decay},
                  {"params": nodecay, "weight_decay": 0.0}]
        fused = "fused" in inspect.signature(torch.optim.AdamW).parameters and device_type == "cuda"
        extra = {"fused": True} if fused else {}
        opt = torch.optim.AdamW(groups, lr=learning_rate, betas=betas, eps=eps, **extra)
        opt.tr2_fused = fused
        return opt


# ---- weights <-> tr2.weights' npz dict (nanoGPT names, float32, lm_head.weight left out: it is tied) ----

def to_weights(model: GPT) -> dict[str, np.ndarray]:
    """The model's weights as tr2.weights' dict: float32 numpy arrays in param_shapes' order."""
    sd = model.state_dict()
    return {k: sd[k].detach().to("cpu", torch.float32).numpy().copy() for k in param_shapes(model.cfg)}


@torch.no_grad()
def load_weights_into(model: GPT, weights: dict[str, np.ndarray]) -> None:
    """Copy a tr2.weights dict into the model (lm_head follows wte through the tie). Names and shapes must fit."""
    want = param_shapes(model.cfg)
    missing = sorted(set(want) - set(weights))
    extra = sorted(set(weights) - set(want) - {"lm_head.weight"})
    if missing or extra:
        raise KeyError(f"weights do not fit model {model.cfg.name}: "
                       + (f"missing {missing[0]!r}" if missing else f"unexpected {extra[0]!r}"))
    sd = model.state_dict()
    for k, shape in want.items():
        src = torch.as_tensor(np.asarray(weights[k]))
        if tuple(src.shape) != tuple(shape):
            raise ValueError(f"{k}: shape {tuple(src.shape)}, model {model.cfg.name} needs {shape}")
        sd[k].copy_(src)
