"""What a GELU fused into the MLP's products could save, before anyone writes products of our own (docs/perf.md,
"Twenty-first session": the one path to 0.8 on the GPT-2 shapes that the session saw).

cuBLASLt can apply GELU in a product's epilogue (GELU_AUX: the output is GELU of the product and the product itself
goes to an auxiliary matrix, which the backward needs) and its derivative in the input-gradient product's (DGELU:
the output is the product times GELU' of the auxiliary matrix). Its GELU is the tanh form, nanoGPT's the exact erf
form, so the model cannot use them (docs/perf.md, the seventh session). But their cost is the question: how much
time does the epilogue add to the product, against the product alone plus our GELU kernel. The gap bounds what an
erf epilogue in products of our own (at cuBLAS's speed) could save a layer. Timing only; the outputs are not the
model's and are not checked against anything but finiteness.

Per model (the MLP of one layer, bf16 under half roundings, the step's shapes: rows B*T, C -> 4C -> C):
  forward   h = x w_fc^T (rows x 4C, K = C); then gelu(h)        against   GELU_AUX(x w_fc^T), aux = h
  backward  dh = dy w_proj (rows x 4C, K = C); then gelu'(h) dh  against   DGELU(dy w_proj, aux = h)
Each product takes the fastest of cuBLASLt's candidates for its descriptor (every candidate timed, as products.py
does), so neither side is judged on the heuristic's first guess. Rounds in rotating order, CUDA events around
`reps` back-to-back calls (event_timing.mean_ms).

    PYTHONPATH=lib:scripts python3 scripts/probes/gelu_epilogue_probe.py OUT.jsonl [rounds] [reps]
"""
from __future__ import annotations

import ctypes
import json
import statistics
import sys

import cupy as cp

from event_timing import mean_ms
from tr2.cupy_side.gpu import blas
from tr2.cupy_side.gpu.backend import CudaBackend
from tr2.cupy_side.gpu.cast import to_half
from tr2.cupy_side.gpu.halfbits import KIND_BF16
from tr2.cupy_side.gpu.lt import Plan, alignment, product_key
from tr2.models import load_model

# cublasLtMatmulDescAttributes_t and cublasLtEpilogue_t (cublasLt.h)
DESC_EPILOGUE, DESC_EPILOGUE_AUX_POINTER, DESC_EPILOGUE_AUX_LD = 7, 11, 12
EPILOGUE_DEFAULT, EPILOGUE_GELU_AUX, EPILOGUE_DGELU = 1, 160, 192
MODELS = ("nanogpt", "gpt2-small", "gpt2-medium")


def _set(lt, desc, attr, value) -> None:
    lt._check(lt.lib.cublasLtMatmulDescSetAttribute(desc, attr, ctypes.byref(value), ctypes.sizeof(value)),
              f"cublasLtMatmulDescSetAttribute({attr})")


def fastest_plan(lt, key, epilogue: int, aux_ptr: int, aux_ld: int, call) -> tuple[Plan, float, int]:
    """Every candidate of cuBLASLt for the product with this epilogue, timed; the fastest (plan, ms, candidates)."""
    desc, layouts = lt._desc(key), lt._layouts(key)
    _set(lt, desc, DESC_EPILOGUE, ctypes.c_uint32(epilogue))
    if epilogue != EPILOGUE_DEFAULT:
        _set(lt, desc, DESC_EPILOGUE_AUX_POINTER, ctypes.c_void_p(aux_ptr))
        _set(lt, desc, DESC_EPILOGUE_AUX_LD, ctypes.c_int64(aux_ld))
    found = lt.candidates(key, desc, layouts)
    if not found:
        raise RuntimeError(f"cuBLASLt has no algorithm for epilogue {epilogue} on {key[2:5]}")
    best = None
    for h in found:
        plan = Plan(desc, layouts, h.algo, int(h.workspace_size), "probe")
        try:
            ms = mean_ms(lambda: call(plan), 5)
        except blas.CublasError:
            continue
        if best is None or ms < best[1]:
            best = (plan, ms)
    if best is None:
        raise RuntimeError(f"no candidate ran for epilogue {epilogue} on {key[2:5]}")
    return best[0], best[1], len(found)


def cublas_forms(model: str) -> tuple[dict, dict, dict]:
    """The MLP tensors of one layer of `model` (bf16 bits), and the timed forms on them: cuBLASLt's fastest plain
    and epilogue products, our GELU kernels. Also gelu_product_probe.py's, which adds its own products to them."""
    cfg = load_model(model)
    rows, C = cfg.batch_size * cfg.block_size, cfg.n_embd
    be = CudaBackend("bfloat16", tf32=True, half_roundings=True)
    cublas = blas.get_cublas()
    if cublas.lt is None:
        cublas.attach_lt()
    lt = cublas.lt
    rng = cp.random.default_rng(1)

    def half(shape, scale):   # bf16 bits (uint16), as the half build's activations and weight copies are
        return to_half(rng.standard_normal(shape, dtype=cp.float32) * scale, KIND_BF16)
    x, w_fc = half((rows, C), 1.0), half((4 * C, C), 0.02)
    dy, w_proj = half((rows, C), 1.0), half((C, 4 * C), 0.02)
    h = cp.empty((rows, 4 * C), dtype=cp.uint16)
    out = cp.empty_like(h)
    bf16, f32c = blas.CUDA_R_16BF, blas.COMPUTE_32F
    one, zero = ctypes.c_float(1.0), ctypes.c_float(0.0)
    stream = cp.cuda.get_current_stream().ptr

    def key_of(trans_b, A, B, Cout, N, K, lda, ldb):
        return product_key(False, trans_b, rows, N, K, bf16, lda, bf16, ldb, bf16, N, f32c, True,
                           (alignment(A), alignment(B), alignment(Cout)))

    # forward: h = x w_fc^T (row-major x [rows, C], w_fc [4C, C])
    fkey = key_of(True, x.data.ptr, w_fc.data.ptr, h.data.ptr, 4 * C, C, C, C)
    # backward: dh = dy w_proj (dy [rows, C], w_proj [C, 4C])
    bkey = key_of(False, dy.data.ptr, w_proj.data.ptr, out.data.ptr, 4 * C, C, C, 4 * C)

    def run(plan, A, B, Cout):
        lt._check(lt.matmul(plan, A, B, Cout, one, zero, stream), "cublasLtMatmul")

    def plan_or_none(*args):   # an epilogue cuBLASLt offers no algorithm for is reported, not fatal
        try:
            return fastest_plan(lt, *args)
        except RuntimeError as e:
            print(f"{model}: {e}")
            return None, None, 0
    f_plain, _, nf = plan_or_none(fkey, EPILOGUE_DEFAULT, 0, 0, lambda p: run(p, x.data.ptr, w_fc.data.ptr, h.data.ptr))
    f_aux, _, nfa = plan_or_none(fkey, EPILOGUE_GELU_AUX, h.data.ptr, 4 * C,
                                 lambda p: run(p, x.data.ptr, w_fc.data.ptr, out.data.ptr))
    b_plain, _, nb = plan_or_none(bkey, EPILOGUE_DEFAULT, 0, 0,
                                  lambda p: run(p, dy.data.ptr, w_proj.data.ptr, out.data.ptr))
    b_dgelu, _, nbd = plan_or_none(bkey, EPILOGUE_DGELU, h.data.ptr, 4 * C,
                                   lambda p: run(p, dy.data.ptr, w_proj.data.ptr, out.data.ptr))
    if f_plain is None or b_plain is None:
        raise RuntimeError(f"{model}: no plain product ran")
    run(f_plain, x.data.ptr, w_fc.data.ptr, h.data.ptr)   # h as the forward leaves it, for every backward below

    forms = {
        "fwd product": lambda: run(f_plain, x.data.ptr, w_fc.data.ptr, h.data.ptr),
        "fwd gelu kernel": lambda: be.gelu_forward(h),
        "bwd product": lambda: run(b_plain, dy.data.ptr, w_proj.data.ptr, out.data.ptr),
        "bwd gelu kernel": lambda: be.gelu_backward(out, h),
    }
    if f_aux is not None:
        forms["fwd GELU_AUX product"] = lambda: run(f_aux, x.data.ptr, w_fc.data.ptr, out.data.ptr)
    if b_dgelu is not None:
        forms["bwd DGELU product"] = lambda: run(b_dgelu, dy.data.ptr, w_proj.data.ptr, out.data.ptr)
    tensors = {"x": x, "w_fc": w_fc, "dy": dy, "w_proj": w_proj, "h": h, "out": out}
    meta = {"cfg": cfg, "rows": rows, "C": C, "be": be,
            "candidates": {"fwd product": nf, "fwd GELU_AUX product": nfa, "bwd product": nb, "bwd DGELU product": nbd}}
    return forms, tensors, meta


def timed(forms: dict, rounds: int, reps: int) -> tuple[dict, dict]:
    """Every form `rounds` times in rotating order, `reps` calls each: (medians, the rounds' values) by name."""
    names = list(forms)
    times = {n: [] for n in names}
    for r in range(rounds):
        for n in names[r % len(names):] + names[:r % len(names)]:
            times[n].append(mean_ms(forms[n], reps))
    return {n: statistics.median(t) for n, t in times.items()}, times


def probe(model: str, rounds: int, reps: int) -> list[dict]:
    forms, tensors, meta = cublas_forms(model)
    cfg, rows, C, out = meta["cfg"], meta["rows"], meta["C"], tensors["out"]
    names = list(forms)
    med, times = timed(forms, rounds, reps)
    # bf16 bits: an exponent of all ones is an infinity or a NaN
    assert bool(((out & 0x7F80) != 0x7F80).all()), "a non-finite output: the probe's products are not trustworthy"
    recs = []
    for n in names:
        recs.append({"model": model, "rows": rows, "C": C, "form": n, "ms": med[n], "rounds": times[n],
                     "candidates": meta["candidates"].get(n)})
    nan = float("nan")
    sep_f, fused_f = med["fwd product"] + med["fwd gelu kernel"], med.get("fwd GELU_AUX product", nan)
    sep_b, fused_b = med["bwd product"] + med["bwd gelu kernel"], med.get("bwd DGELU product", nan)
    print(f"{model:12} rows {rows:6d} C {C:5d}  forward: product {med['fwd product']:.4f} + gelu "
          f"{med['fwd gelu kernel']:.4f} = {sep_f:.4f} ms against GELU_AUX {fused_f:.4f} ({fused_f - sep_f:+.4f})")
    print(f"{'':12} {'':17}  backward: product {med['bwd product']:.4f} + gelu' {med['bwd gelu kernel']:.4f} = "
          f"{sep_b:.4f} ms against DGELU {fused_b:.4f} ({fused_b - sep_b:+.4f}); a step x {cfg.n_layer} layers: "
          f"{(fused_f - sep_f + fused_b - sep_b) * cfg.n_layer:+.3f} ms")
    return recs


def main() -> int:
    path = sys.argv[1]
    rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 3
    reps = int(sys.argv[3]) if len(sys.argv) > 3 else 20
    with open(path, "w") as f:
        for model in MODELS:
            for rec in probe(model, rounds, reps):
                f.write(json.dumps(rec) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
