"""Each kernel of OUR program's training step against the H200's roofline: the least bytes it must move to or from
device memory (its inputs read once, its outputs written once), the FLOPs of the matrix products and the attention
kernels, the time torch.profiler measured (a committed families folder's kernels.csv, or one tr2.profile_run profile
JSON of the cupy side under half roundings, its kernels grouped by params/families.tsv), and from these the achieved
TB/s and TFLOP/s, their fractions of the datasheet peaks, and the time the kernel would take at 90% of them: the most
any rewrite of it could still save.

    .venv/bin/python scripts/roofline_table.py FAMILIES_FOLDER|PROFILE.json KEY OUT.csv [--gpu h200|h100]
    e.g. results/families-20261204-143545-h200-edition gpt2-small/bfloat16/cupy-hr OUT.csv

The byte model is of the half builds under half roundings (bfloat16 or float16 with half_roundings, the 'cupy-hr'
keys): float32 residual stream, weights, masters, moments and LayerNorm statistics; products read and write the half
type (2 bytes). It is a floor: bytes a kernel must move, not what it moves (no re-reads, no L2 misses, no padding
but the classifier's rows padded to a multiple of 8 that the products run over). Where the L2 serves re-used data the
achieved rate can exceed the model's TB/s; where it exceeds the peak, the kernel moved fewer DRAM bytes than modelled.
Every kernel of the key is in the table: the ones with no model (or whose launches a step differ from the model's)
are listed as "not modelled" with their time, never dropped.

PEAKS ARE DATASHEET FIGURES (NVIDIA H200 SXM: 4.8 TB/s HBM3e, 989 TFLOP/s dense BF16/FP16 tensor; with --gpu h100,
the H100 SXM5's: 3.35 TB/s HBM3, the same 989 TFLOP/s), not measured.
"""
from __future__ import annotations

import math
import re
import sys
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

HBM_PEAK = 4.8e12        # bytes/s, H200 SXM datasheet (HBM3e)
BF16_PEAK = 989e12       # FLOP/s, H200 SXM datasheet, dense BF16 tensor (1979 is with 2:4 sparsity)
# --gpu: (HBM bytes/s, dense bf16 FLOP/s); the H100 SXM5's datasheet: 3.35 TB/s HBM3, the same tensor rate
PEAKS = {"h200": (HBM_PEAK, BF16_PEAK), "h100": (3.35e12, BF16_PEAK)}
FRACTION = 0.9           # "at 90% of peak"
H = 2                    # bytes of a half-type element (bf16/f16 as uint16 bits, gpu/context.py store_dtype)
F = 4                    # float32
I64 = 8                  # int64 token ids (backend._i64)
ROWS_PER_BLOCK = 8       # gpu/layernorm.py ROWS_PER_BLOCK: one dw partial row per 8 rows
GN_CHUNK = 4096          # gpu/tensors.py CHUNK: elements a block of the multi-tensor kernels
EMB_CHUNK = 1024         # kernels/embedding.cu EMB_CHUNK: rows a block of the counting sort


@dataclass(frozen=True)
class Shapes:
    B: int
    T: int
    C: int
    n_head: int
    L: int
    V: int
    dropout: float = 0.0

    @property
    def N(self) -> int:          # rows of every activation [B*T, C]
        return self.B * self.T

    @property
    def Vp(self) -> int:         # backend.classifier_weight: wte's rows padded to a multiple of 8 for the products
        return -(-self.V // 8) * 8

    @property
    def hs(self) -> int:
        return self.C // self.n_head

    @property
    def BH(self) -> int:
        return self.B * self.n_head

    @property
    def pairs(self) -> int:      # causal (query, key) pairs of one head: T(T+1)/2
        return self.T * (self.T + 1) // 2


def shapes_of(model: str) -> Shapes:
    """The model's shapes from params/models.yaml, read as lib/tr2/models.py reads it."""
    from tr2.models import load_model
    cfg = load_model(model)
    return Shapes(B=cfg.batch_size, T=cfg.block_size, C=cfg.n_embd, n_head=cfg.n_head, L=cfg.n_layer,
                  V=cfg.vocab_size, dropout=cfg.dropout)


@dataclass(frozen=True)
class Cost:
    launches: float   # a step, as the model expects; compared with the profile's
    bytes: float      # a step, all launches
    flops: float = 0.0
    bound: str = "memory"   # memory | compute (products, flash-style attention)
    what: str = ""


# ---- parameters (tr2/weights.py param_shapes; tied wte counted once) ----

def params(s: Shapes) -> dict:
    """numel by kind: 'product' weights (half copy kept, dW in the half type under half roundings: gpu/matmul.py
    backward's dw of ctx.out_dtype), 'wte' (half copy kept; its gradient float32: model.py widens lm_head's dW with
    be.gradient_f32 and the embedding adds into it), 'f32' (wpe and the LayerNorm weights: float32 gradients, no copy)."""
    C, L = s.C, s.L
    return {"product": L * 12 * C * C, "wte": s.V * C, "f32": s.T * C + L * 2 * C + C}


def gn_blocks(s: Shapes) -> int:
    """Blocks of global_norm_partial (gpu/tensors.py table_for: CHUNK elements a block, per tensor)."""
    C, L = s.C, s.L
    sizes = [s.V * C, s.T * C] + L * [C, 3 * C * C, C * C, C, 4 * C * C, 4 * C * C] + [C]
    return sum(math.ceil(n / GN_CHUNK) for n in sizes)


# ---- matrix products: y[N,M] = x[N,K] W[M,K]^T, dx = dy W, dW = dy^T x (gpu/matmul.py) ----
# Each reads its two operands in the half type and writes its output in it (half roundings: ctx.out_dtype uint16),
# so any of the three products of a layer moves 2 (NK + MK + NM) bytes and does 2 N M K FLOPs.

def linears(s: Shapes) -> dict:
    """(M out, K in) of each Linear; lm_head over the padded rows Vp (gpu/matmul.py forward/backward, padded_rows)."""
    C = s.C
    return {"c_attn": (3 * C, C), "attn.c_proj": (C, C), "c_fc": (4 * C, C), "mlp.c_proj": (C, 4 * C),
            "lm_head": (s.Vp, C)}


def product_cost(s: Shapes, labels: list[tuple[str, int]]) -> Cost:
    """labels: (linear.pass, launches a step), pass in fwd | dx | dW."""
    lin = linears(s)
    n = b = f = 0
    for label, count in labels:
        M, K = lin[label.rsplit(".", 1)[0]]
        n += count
        b += count * H * (s.N * K + M * K + s.N * M)
        f += count * 2 * s.N * M * K
    what = " + ".join(f"{lab} x{c}" if c > 1 else lab for lab, c in labels)
    return Cost(n, b, f, "compute", what)


# Which product each cuBLASLt kernel of our program runs, per model (the kernels are cuBLASLt's, picked by timing
# per shape: gpu/lt.py). Inferred, not recorded: gemm_rm's column-major layouts give fwd = 'TN', dx = 'NN',
# dW = 'NT' (the first two letters after 'bz_'), and each class's launches a step must add up to 4L + 1 products;
# the one-launch kernels of a class are lm_head's; within a class, the per-launch times order the shapes by FLOPs
# (attn.c_proj u, c_attn 3u, c_fc and mlp.c_proj 4u, u = 2 N C^2), and the kernel whose launches are 12 + 1 is the
# c_fc forward and the lm_head forward (both K = C, wide outputs; docs/perf.md's call 5 of h200-perf-20261203i names
# 176x128 TNN as cuBLAS's c_fc product). c_fc's and mlp.c_proj's dW have the same FLOPs and bytes, so which of their
# two kernels is which does not change a number. The product family's totals do not depend on this attribution.
def _gpt2_products(L: int) -> dict:
    return {
        "nvjet_sm90_tst_144x128_64x6_1x2_h_bz_TNN": [("c_attn.fwd", L)],
        "nvjet_sm90_tst_128x128_64x6_2x1_v_bz_TNT": [("attn.c_proj.fwd", L)],
        "nvjet_sm90_tst_176x128_64x5_1x2_h_bz_TNN": [("c_fc.fwd", L), ("lm_head.fwd", 1)],
        "nvjet_sm90_tst_256x96_64x4_1x2_h_bz_coopA_TNT": [("mlp.c_proj.fwd", L)],
        "nvjet_sm90_tst_256x96_64x4_1x2_h_bz_coopA_NNT": [("c_attn.dx", L), ("attn.c_proj.dx", L), ("c_fc.dx", L)],
        "nvjet_sm90_tst_128x128_64x6_2x1_v_bz_NNT": [("mlp.c_proj.dx", L)],
        "nvjet_sm90_tst_192x128_64x5_1x2_h_bz_coopB_NNT": [("lm_head.dx", 1)],
        "nvjet_sm90_tst_96x64_64x8_2x4_h_bz_NTN": [("attn.c_proj.dW", L)],
        "nvjet_sm90_tst_128x128_64x6_2x4_h_bz_NTT": [("c_attn.dW", L)],
        "nvjet_sm90_tst_128x160_64x5_4x1_v_bz_NTT": [("c_fc.dW", L)],       # or mlp.c_proj.dW: the same numbers
        "nvjet_sm90_tst_128x160_64x5_2x4_h_bz_NTT": [("mlp.c_proj.dW", L)],  # or c_fc.dW
        "nvjet_sm90_tst_192x192_64x3_1x2_h_bz_coopB_NTN": [("lm_head.dW", 1)],
    }


def _nanogpt_products(L: int) -> dict:
    return {
        "nvjet_sm90_tst_144x128_64x6_1x2_h_bz_TNN": [("c_attn.fwd", L)],
        "nvjet_sm90_tst_176x128_64x5_1x2_h_bz_TNN": [("c_fc.fwd", L)],
        "nvjet_sm90_tst_192x128_64x5_1x2_h_bz_coopB_TNT": [("attn.c_proj.fwd", L), ("mlp.c_proj.fwd", L)],
        "nvjet_sm90_tst_72x192_64x6_1x4_h_bz_TNN": [("lm_head.fwd", 1)],
        "nvjet_sm90_tst_192x128_64x5_1x2_h_bz_coopB_NNT": [("c_attn.dx", L), ("attn.c_proj.dx", L), ("c_fc.dx", L),
                                                           ("lm_head.dx", 1)],
        "nvjet_sm90_tst_128x128_64x6_2x1_v_bz_NNT": [("mlp.c_proj.dx", L)],
        "nvjet_sm90_tst_64x128_64x8_2x1_v_bz_splitK_NTN": [("attn.c_proj.dW", L)],
        "nvjet_sm90_tst_128x192_64x5_1x2_h_bz_coopB_splitK_NTN": [("c_attn.dW", L)],
        "nvjet_sm90_tst_128x160_64x5_1x2_h_bz_splitK_NTT": [("c_fc.dW", L)],           # or mlp.c_proj.dW
        "nvjet_sm90_tst_128x192_64x5_4x2_h_bz_coopB_splitK_NTN": [("mlp.c_proj.dW", L)],  # or c_fc.dW
        "nvjet_sm90_tst_96x64_64x8_4x2_h_bz_splitK_NTN": [("lm_head.dW", 1)],
    }


PRODUCT_TABLES = {"gpt2-small": _gpt2_products, "nanogpt": _nanogpt_products}


# ---- every other kernel: name pattern -> cost of a step. s: Shapes. ----

def _rln_backward(s: Shapes) -> Cost:
    """kernels/residual_layernorm.cu backward (gpu/residual_layernorm.py backward, layernorm.py rows_backward), 2L + 1
    launches: 2L residual adds (model.py _residual_layernorm) and the embedding's first LayerNorm (_embedding_layernorm,
    branch_float32). Each reads dy (a product's dx: half), s (float32), w, mean, rstd; dskip (float32) in all but the
    last block's MLP add (only ln_f reads its s); writes ds (float32), db (half; the embedding's: float32 where p > 0,
    none at p = 0, where it is ds) and the dw partials [N/8, C] float32 that *_dw_final sums."""
    N, C = s.N, s.C
    per = H * N * C + F * N * C + F * C + 2 * F * N + F * N * C + F * (N // ROWS_PER_BLOCK) * C
    n = 2 * s.L + 1
    dskip = F * N * C * (n - 1)
    db = H * N * C * 2 * s.L + (F * N * C if s.dropout > 0 else 0)
    return Cost(n, n * per + dskip + db, what="dy half, s f32, dskip f32 (2L of 2L+1), ds f32, db half, dw partials")


MODELS = [
    # kernels/layernorm.cu layernorm_forward (gpu/layernorm.py forward): x f32 -> y half (feeds c_attn), mean, rstd
    (r"layernorm_forward$", lambda s: Cost(1, F * s.N * s.C + F * s.C + H * s.N * s.C + 2 * F * s.N,
                                           what="x f32 in; y half, mean, rstd out")),
    # kernels/residual_layernorm.cu forward (gpu/residual_layernorm.py forward), 2L launches: x f32, b half (c_proj's
    # output), w -> s f32, y half, mean, rstd. Dropout's mask is drawn from counters (no bytes).
    (r"residual_layernorm_forward(_c\d+)?$",
     lambda s: Cost(2 * s.L, 2 * s.L * ((F + H) * s.N * s.C + F * s.C + (F + H) * s.N * s.C + 2 * F * s.N),
                    what="x f32 + b half in; s f32 + y half out")),
    (r"residual_layernorm_backward(_c\d+)?(_bulk|_pf|_o3)?$", _rln_backward),
    # layernorm.py rows_backward's final: the [N/8, C] float32 partials -> dw [C]
    (r"(residual_)?layernorm_dw_final$",
     lambda s: Cost(2 * s.L + 1, (2 * s.L + 1) * (F * (s.N // ROWS_PER_BLOCK) * s.C + F * s.C), what="dw partials in")),
    # kernels/gelu.cu table, segment and within-an-ulp kernels (gpu/gelu.py): x half [N, 4C] -> y half; backward dy
    # half, x half -> dx half.
    # The tables come from L2 into shared memory (gelu.cu header): not DRAM bytes.
    (r"gelu_forward(_bf16_table|_f16_table|_f16_seg|_f16_fast)?$", lambda s: Cost(s.L, s.L * 2 * H * s.N * 4 * s.C, what="x, y half")),
    (r"gelu_backward(_bf16_table|_f16_table|_f16_seg|_f16_fast)?$",
     lambda s: Cost(s.L, s.L * 3 * H * s.N * 4 * s.C, what="dy, x, dx half")),
    # kernels/attention.cu forward (gpu/attention.py forward): q, k, v half read in place from qkv [B,T,3C]; out half,
    # lse [B,H,T] f32. FLOPs: S = QK^T and O = PV over the causal pairs. Flash-style: compute, not memory.
    (r"attn_forward_\w+$",
     lambda s: Cost(s.L, s.L * (H * s.N * 3 * s.C + H * s.N * s.C + F * s.BH * s.T), s.L * 4 * s.hs * s.pairs * s.BH,
                    "compute", "qkv half in; out half, lse out")),
    # attn_row_dots (gpu/attention.py backward): D = rowsum(dO * out), dO and out half, D [B,H,T] f32. Elementwise.
    (r"attn_row_dots_\w+$",
     lambda s: Cost(s.L, s.L * (2 * H * s.N * s.C + F * s.BH * s.T), s.L * 2 * s.N * s.C, "memory", "dO, out half; D f32")),
    # dK/dV with dS^T stored (attention.cu attention_backward_dkdv_tma_resident; store_ds_t writes only the causal
    # tiles): q, k, v, dO half, lse, D f32 in; dK, dV half (their columns of dqkv) and dS^T (half, causal pairs) out.
    # FLOPs: S = QK^T (recomputed), dP = dO V^T, dV = P^T dO, dK = dS^T Q over the causal pairs.
    (r"attn_backward_dkdv_\w+$",
     lambda s: Cost(s.L, s.L * (H * s.N * 4 * s.C + 2 * F * s.BH * s.T + H * s.N * 2 * s.C + H * s.BH * s.pairs),
                    s.L * 8 * s.hs * s.pairs * s.BH, "compute", "q,k,v,dO half, lse, D in; dK, dV, dS^T half out")),
    # dQ = scale dS k from the stored dS^T (attention.cu attention_backward_dq_ds / _tma): dS^T (causal pairs), k half
    # in; dQ half out.
    (r"attn_backward_dq_\w+$",
     lambda s: Cost(s.L, s.L * (H * s.BH * s.pairs + H * s.N * s.C + H * s.N * s.C), s.L * 2 * s.hs * s.pairs * s.BH,
                    "compute", "dS^T, k half in; dQ half out")),
    # kernels/cross_entropy.cu forward_backward (gpu/cross_entropy.py): logits half [N, V] (the first V columns of the
    # padded product output), targets int64, dloss, count -> dlogits half over the logits, per-row losses f32
    (r"cross_entropy_forward_backward(_\w+)?$",
     lambda s: Cost(1, H * s.N * s.V + I64 * s.N + 2 * F + H * s.N * s.V + F * s.N, what="logits half in, dlogits half out")),
    (r"cross_entropy_count$", lambda s: Cost(1, I64 * s.N + F, what="targets in")),
    (r"cross_entropy_mean$", lambda s: Cost(1, F * s.N + 2 * F, what="losses in")),
    # kernels/embedding.cu forward (gpu/embedding.py): idx int64, the rows of wte the batch names (at least min(N, V)
    # distinct: a floor), wpe[:T] f32 -> x f32 [N, C]. Dropout (nanogpt) draws its mask from counters.
    (r"embedding(_dropout)?_forward(_v4)?$",
     lambda s: Cost(1, I64 * s.N + F * min(s.N, s.V) * s.C + F * s.T * s.C + F * s.N * s.C, what="idx, wte rows, wpe in; x f32 out")),
    # embedding.cu counting sort (gpu/embedding.py backward): G = N / EMB_CHUNK groups, counts [G, V] int32.
    (r"embedding_sort_count$", lambda s: Cost(1, I64 * s.N + F * min(s.N, _G(s) * s.V), what="idx in; counts (touched) out")),
    (r"embedding_sort_total$", lambda s: Cost(1, F * _G(s) * s.V + F * s.V, what="counts in; total out")),
    (r"embedding_sort_scan$", lambda s: Cost(1, F * s.V + F * (s.V + 1), what="total in; starts out")),
    (r"embedding_sort_base$", lambda s: Cost(1, 2 * F * _G(s) * s.V + F * s.V, what="counts in/out, starts in")),
    (r"embedding_sort_place$", lambda s: Cost(1, I64 * s.N + F * min(s.N, _G(s) * s.V) + F * s.N, what="idx, bases in; sorted out")),
    # embedding_backward_wte: dout f32 [N, C], sorted rows, starts; dwte's touched rows (<= min(N, V)) read and written
    (r"embedding_backward_wte$",
     lambda s: Cost(1, F * s.N * s.C + F * s.N + F * (s.V + 1) + 2 * F * min(s.N, s.V) * s.C,
                    what="dout f32, sorted, starts in; dwte rows in/out")),
    # embedding_backward_wpe: dout f32 [B, T, C] summed over B into dwpe [T, C] (accumulated in place: read + written)
    (r"embedding_backward_wpe$", lambda s: Cost(1, F * s.N * s.C + 2 * F * s.T * s.C, what="dout f32 in; dwpe in/out")),
    # kernels/cast.cu cast_bf16_to_f32 (and its _wide form): lm_head's dW [V, C] half -> float32 (model.py be.gradient_f32 for wte)
    (r"cast_(bf16|f16)_to_f32(_wide)?$", lambda s: Cost(1, (H + F) * s.V * s.C, what="dW(wte) half in, f32 out")),
    # kernels/global_norm.cu partial (either form): every gradient once (products' dW half; wte, wpe, LayerNorm f32), partials out
    (r"global_norm_partial(_wide)?$",
     lambda s: Cost(1, H * params(s)["product"] + F * (params(s)["wte"] + params(s)["f32"]) + F * gn_blocks(s),
                    what="all gradients in")),
    (r"global_norm_final(_wide)?$", lambda s: Cost(1, F * gn_blocks(s) + F, what="partials in")),
    # kernels/adamw.cu adamw_update: per element p f32 in/out, m and v f32 in/out, grad (half for the products' dW,
    # f32 for wte, wpe, LayerNorm), the half copy out for product weights and wte
    (r"adamw_update$",
     lambda s: Cost(1, 6 * F * sum(params(s).values()) + H * params(s)["product"]
                    + F * (params(s)["wte"] + params(s)["f32"]) + H * (params(s)["product"] + params(s)["wte"]),
                    what="p, m, v f32 in/out; grad in; half copy out")),
    # adamw_scalars: hyper [9] f32, t f64, gnorm -> hyper, t
    (r"adamw_scalars$", lambda s: Cost(1, 2 * (9 * F + 8) + F, what="scalars")),
]


def _G(s: Shapes) -> int:
    return math.ceil(s.N / EMB_CHUNK)


def cost_of(name: str, s: Shapes, model: str | None = None) -> Cost | None:
    table = PRODUCT_TABLES.get(model or "")
    if table is not None:
        labels = table(s.L).get(name)
        if labels is not None:
            return product_cost(s, labels)
    for pattern, fn in MODELS:
        if re.match(pattern, name):
            return fn(s)
    return None


COLUMNS = ["family", "kernel", "launches", "us_per_step", "MB_per_step", "GFLOP_per_step", "TB_s", "pct_hbm_peak",
           "TFLOP_s", "pct_bf16_peak", "bound", "us_mem90", "us_flop90", "us_floor90", "saving_us", "status", "what"]


def table(kernels: pd.DataFrame, key: str, s: Shapes, model: str | None = None,
          peaks: tuple = (HBM_PEAK, BF16_PEAK)) -> pd.DataFrame:
    """One row per kernel of `key` in kernels.csv's frame, every one kept; `peaks` (HBM bytes/s, bf16 FLOP/s) the
    GPU's (PEAKS)."""
    hbm_peak, bf16_peak = peaks
    rows = []
    for _, r in kernels[kernels["key"] == key].iterrows():
        us, n = float(r["us_per_step"]), float(r["launches_per_step"])
        c = cost_of(str(r["name"]), s, model)
        row = {"family": r["family"], "kernel": r["name"], "launches": n, "us_per_step": us}
        if c is None or not math.isclose(c.launches, n, rel_tol=1e-6):
            why = "not modelled" if c is None else f"not modelled (model expects {c.launches:g} launches)"
            rows.append(row | {"status": why, "bound": "", "what": "" if c is None else c.what})
            continue
        mem90 = c.bytes / (FRACTION * hbm_peak) * 1e6
        flop90 = c.flops / (FRACTION * bf16_peak) * 1e6
        floor = max(mem90, flop90)
        rows.append(row | {
            "MB_per_step": c.bytes / 1e6, "GFLOP_per_step": c.flops / 1e9,
            "TB_s": c.bytes / (us * 1e-6) / 1e12, "pct_hbm_peak": 100 * c.bytes / (us * 1e-6) / hbm_peak,
            "TFLOP_s": c.flops / (us * 1e-6) / 1e12 if c.flops else float("nan"),
            "pct_bf16_peak": 100 * c.flops / (us * 1e-6) / bf16_peak if c.flops else float("nan"),
            "bound": c.bound, "us_mem90": mem90, "us_flop90": flop90, "us_floor90": floor,
            "saving_us": max(0.0, us - floor), "status": "modelled", "what": c.what})
    return pd.DataFrame(rows, columns=COLUMNS)


def families(t: pd.DataFrame, hbm_peak: float = HBM_PEAK) -> pd.DataFrame:
    m = t[t["status"] == "modelled"]
    g = t.groupby("family").agg(launches=("launches", "sum"), us_per_step=("us_per_step", "sum"))
    gm = m.groupby("family").agg(us_modelled=("us_per_step", "sum"), MB_per_step=("MB_per_step", "sum"),
                                 GFLOP_per_step=("GFLOP_per_step", "sum"), us_floor90=("us_floor90", "sum"),
                                 saving_us=("saving_us", "sum"))
    f = g.join(gm).fillna({"us_modelled": 0.0, "MB_per_step": 0.0, "GFLOP_per_step": 0.0, "us_floor90": 0.0,
                           "saving_us": 0.0})
    f["us_not_modelled"] = f["us_per_step"] - f["us_modelled"]
    f["TB_s"] = f["MB_per_step"] / f["us_modelled"].where(f["us_modelled"] > 0)   # MB/us = TB/s
    f["pct_hbm_peak"] = 100 * f["TB_s"] * 1e12 / hbm_peak
    f["TFLOP_s"] = (f["GFLOP_per_step"] / f["us_modelled"].where(f["us_modelled"] > 0) * 1e3).where(f["GFLOP_per_step"] > 0)
    f["memory_bound_saving_us"] = m[m["bound"] == "memory"].groupby("family")["saving_us"].sum()
    f["compute_bound_saving_us"] = m[m["bound"] == "compute"].groupby("family")["saving_us"].sum()
    f = f.fillna({"memory_bound_saving_us": 0.0, "compute_bound_saving_us": 0.0})
    return f.sort_values("us_per_step", ascending=False).reset_index()


def _fmt(v, spec):
    return "" if (v is None or (isinstance(v, float) and math.isnan(v))) else format(v, spec)


def render(t: pd.DataFrame, f: pd.DataFrame, key: str, source: str, peaks: tuple = (HBM_PEAK, BF16_PEAK)) -> str:
    out = [f"Roofline of {key}, the kernels of {source}",
           f"peaks (datasheet, not measured): HBM {peaks[0] / 1e12:g} TB/s, dense bf16 {peaks[1] / 1e12:g} TFLOP/s; "
           f"floor = max(bytes at {FRACTION:.0%} of HBM, FLOPs at {FRACTION:.0%} of bf16); bytes: a floor (inputs read "
           "once, outputs written once)", ""]
    head = (f"{'kernel':58s} {'fam':13s} {'launch':>6s} {'us/step':>8s} {'MB/step':>8s} {'TB/s':>5s} {'%HBM':>5s} "
            f"{'GFLOP':>7s} {'TFLOP/s':>7s} {'%bf16':>5s} {'bound':>7s} {'us@90%':>7s} {'saving':>7s}")
    out += [head, "-" * len(head)]
    for _, r in t.sort_values("us_per_step", ascending=False).iterrows():
        name = str(r["kernel"])
        name = name if len(name) <= 58 else name[:55] + "..."
        if r["status"] != "modelled":
            out.append(f"{name:58s} {str(r['family'])[:13]:13s} {r['launches']:6g} {r['us_per_step']:8.1f}   "
                       f"{r['status']}")
            continue
        out.append(f"{name:58s} {str(r['family'])[:13]:13s} {r['launches']:6g} {r['us_per_step']:8.1f} "
                   f"{r['MB_per_step']:8.1f} {r['TB_s']:5.2f} {r['pct_hbm_peak']:5.1f} "
                   f"{_fmt(r['GFLOP_per_step'] if r['GFLOP_per_step'] else float('nan'), '7.1f'):>7s} "
                   f"{_fmt(r['TFLOP_s'], '7.1f'):>7s} {_fmt(r['pct_bf16_peak'], '5.1f'):>5s} {r['bound']:>7s} "
                   f"{r['us_floor90']:7.1f} {r['saving_us']:7.1f}")
    out += ["", "Families (us: measured a step; modelled part: MB, TB/s, floor at 90%, saving)"]
    head = (f"{'family':15s} {'launch':>6s} {'us/step':>8s} {'not mod.':>8s} {'MB/step':>8s} {'TB/s':>5s} {'%HBM':>5s} "
            f"{'GFLOP':>7s} {'TFLOP/s':>7s} {'us@90%':>7s} {'save mem':>8s} {'save cmp':>8s}")
    out += [head, "-" * len(head)]
    for _, r in f.iterrows():
        out.append(f"{str(r['family'])[:15]:15s} {r['launches']:6g} {r['us_per_step']:8.1f} {r['us_not_modelled']:8.1f} "
                   f"{r['MB_per_step']:8.1f} {_fmt(r['TB_s'], '5.2f'):>5s} {_fmt(r['pct_hbm_peak'], '5.1f'):>5s} "
                   f"{_fmt(r['GFLOP_per_step'] if r['GFLOP_per_step'] else float('nan'), '7.1f'):>7s} "
                   f"{_fmt(r['TFLOP_s'], '7.1f'):>7s} {r['us_floor90']:7.1f} {r['memory_bound_saving_us']:8.1f} "
                   f"{r['compute_bound_saving_us']:8.1f}")
    m = t[t["status"] == "modelled"]
    mem, cmp_ = m[m["bound"] == "memory"], m[m["bound"] == "compute"]
    out += ["",
            f"all kernels: {t['us_per_step'].sum():.1f} us a step (kernel time summed; not the step's wall time)",
            f"memory-bound, modelled: {mem['us_per_step'].sum():.1f} us, {mem['MB_per_step'].sum():.1f} MB, floor at 90% "
            f"of HBM {mem['us_floor90'].sum():.1f} us, possible saving {mem['saving_us'].sum():.1f} us",
            f"compute-bound (products, attention), modelled: {cmp_['us_per_step'].sum():.1f} us, "
            f"{cmp_['GFLOP_per_step'].sum():.1f} GFLOP, floor at 90% {cmp_['us_floor90'].sum():.1f} us, gap "
            f"{cmp_['saving_us'].sum():.1f} us",
            f"not modelled: {len(t) - len(m)} kernels, {t.loc[t['status'] != 'modelled', 'us_per_step'].sum():.1f} us"]
    return "\n".join(out) + "\n"


def profile_kernels(path: Path) -> tuple[pd.DataFrame | None, str]:
    """kernels.csv's frame for one tr2.profile_run profile (its kernels a step over its window, families by
    params/families.tsv, the key model/dtype/cupy-hr where it is the cupy side under half roundings), or (None, why)."""
    import json
    from tr2.families import family_of, load_rules
    p = json.loads(path.read_text())
    if p.get("status") != "ok" or not p.get("steps_in_window"):
        return None, f"{path}: not a finished profile (status {p.get('status')!r}, {p.get('steps_in_window')} steps)"
    side = "cupy-hr" if p.get("side") == "cupy" and p.get("half_roundings") else str(p.get("side"))
    key, rules, n = f"{p['model']}/{p['dtype']}/{side}", load_rules(), p["steps_in_window"]
    rows = [{"key": key, "name": k["name"], "family": family_of(k["name"], rules), "us_per_step": k["total_us"] / n,
             "launches_per_step": k["launches"] / n} for k in p["kernels"]]
    return pd.DataFrame(rows, columns=["key", "name", "family", "us_per_step", "launches_per_step"]), ""


def main(argv: list[str]) -> int:
    gpu = "h200"
    if len(argv) == 5 and argv[3] == "--gpu":
        argv, gpu = argv[:3], argv[4]
    if len(argv) != 3 or gpu not in PEAKS:
        print(__doc__.split("\n\n")[1] + (f"\n--gpu {gpu!r}: allowed {', '.join(PEAKS)}" if gpu not in PEAKS else ""),
              file=sys.stderr)
        return 2
    peaks = PEAKS[gpu]
    folder, key, out = Path(argv[0]), argv[1], Path(argv[2])
    if folder.suffix == ".json" and folder.is_file():
        kernels, why = profile_kernels(folder)
        if kernels is None:
            print(why, file=sys.stderr)
            return 2
    elif not (folder / "kernels.csv").is_file():
        print(f"{folder}: no kernels.csv (a families stage's folder, e.g. results/families-20261204-143545-h200-edition)"
              " and not a profile's .json", file=sys.stderr)
        return 2
    else:
        kernels = pd.read_csv(folder / "kernels.csv")
    if key not in set(kernels["key"]):
        print(f"key {key!r} not in {folder}; there: {', '.join(sorted(set(kernels['key'])))}", file=sys.stderr)
        return 2
    model, dtype = key.split("/")[:2]
    if dtype not in ("bfloat16", "float16") or not key.endswith("-hr"):
        print(f"{key}: the byte model is of the half builds under half roundings (cupy-hr) only", file=sys.stderr)
        return 2
    s = shapes_of(model)
    t = table(kernels, key, s, model, peaks)
    f = families(t, peaks[0])
    t.to_csv(out, index=False)
    f.to_csv(out.with_name(out.stem + "-families.csv"), index=False)
    print(render(t, f, key, str(folder), peaks), end="")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
