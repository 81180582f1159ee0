"""Our plain bf16 product (gelu_product_probe.cu's forms) against cuBLASLt's fastest plan on the step's other shapes:
those whose N is a multiple of the 256-column tile and whose K is long, where a tile's output is small beside its
products. The twenty-third session found our products' loop alone at x0.88-0.93 of cuBLAS's whole kernel on the MLP's
first product (K = 768 / 1024) and the output's writing costing 10-17% on top; with K = 3072-50304 the same output
is spread over 3-50 times the products, so the loop's lead may survive (docs/perf.md, "Twenty-third session").

Per shape: A [M, K] and B (K-major [N, K], or MN-major [K, N]) random bf16; cuBLASLt's fastest candidate (every one
timed, gelu_epilogue_probe.fastest_plan); each form checked first on poisoned output (within one bf16 rounding of the
float32 product, elementwise; the share of elements equal to cuBLAS's bits reported, which need not be 1 where cuBLAS
splits K), then timed in rotating rounds beside cuBLAS. The products-alone form (`_x4`) is timed without its stores
(checked with them).

    PYTHONPATH=lib:scripts python3 scripts/probes/product_shapes_probe.py OUT.jsonl [rounds] [reps] [shape,...]
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import gelu_product_probe as gpp  # noqa: E402

# name: (M, N, K, B MN-major); the step's products on these shapes, bf16 (gpt2-small C = 768, gpt2-medium C = 1024,
# batch 8 x 1024 tokens, vocabulary 50304)
SHAPES = {
    "gpt2-small c_proj forward": (8192, 768, 3072, False),
    "gpt2-small c_fc input gradient": (8192, 768, 3072, True),
    "gpt2-small lm_head input gradient": (8192, 768, 50304, True),
    "gpt2-medium c_proj forward": (8192, 1024, 4096, False),
    "gpt2-medium attn c_proj forward": (8192, 1024, 1024, False),
    "gpt2-medium c_fc input gradient": (8192, 1024, 4096, True),
    "gpt2-medium c_attn input gradient": (8192, 1024, 3072, True),
    "gpt2-medium lm_head input gradient": (8192, 1024, 50304, True),
}
FORMS = {False: ("gp_plain_tn_x4", "gp_plain_tn_t", "gp_plain_tn_dp"), True: ("gp_plain_nn_t", "gp_plain_nn_dp")}


def tiles(M: int, N: int) -> int:
    return (M // gpp.BM) * (N // gpp.BN)


def waves(M: int, N: int, sms: int = 132) -> float:
    """Tiles over the SMs of one persistent block each: 1.45 means a second wave 45% full."""
    return tiles(M, N) / sms


def select(names: str) -> dict:
    """The shapes named (comma-separated, empty: all), refusing unknown names."""
    wanted = [n for n in names.split(",") if n]
    unknown = [n for n in wanted if n not in SHAPES]
    if unknown:
        raise ValueError(f"no shape {', '.join(map(repr, unknown))}; allowed are {', '.join(map(repr, SHAPES))}")
    return {k: v for k, v in SHAPES.items() if not wanted or k in wanted}


def probe(name: str, mod, rounds: int, reps: int) -> list[dict]:
    import ctypes

    import cupy as cp

    import gelu_epilogue_probe as gep
    from tr2.cupy_side.gpu import blas, tma
    from tr2.cupy_side.gpu.cast import to_half
    from tr2.cupy_side.gpu.halfbits import KIND_BF16
    from tr2.cupy_side.gpu.lt import alignment, product_key

    M, N, K, mn = SHAPES[name]
    if not gpp.shape_ok(M, N, K):
        raise ValueError(f"{name}: ({M}, {N}, {K}) is not a multiple of the tile ({gpp.BM}, {gpp.BN}, {gpp.BK})")
    rng = cp.random.default_rng(1)
    a = to_half(rng.standard_normal((M, K), dtype=cp.float32), KIND_BF16)
    b = to_half(rng.standard_normal((K, N) if mn else (N, K), dtype=cp.float32) * 0.02, KIND_BF16)
    ref = (gpp.bf16_to_f32(a).astype(cp.float32) @ (gpp.bf16_to_f32(b).astype(cp.float32) if mn
                                                     else gpp.bf16_to_f32(b).astype(cp.float32).T))
    ref = cp.asnumpy(ref)
    out = cp.full((M, N), 0xFFFF, dtype=cp.uint16)
    cub = cp.full((M, N), 0xFFFF, dtype=cp.uint16)

    cublas = blas.get_cublas()
    if cublas.lt is None:
        cublas.attach_lt()
    lt = cublas.lt
    one, zero = ctypes.c_float(1.0), ctypes.c_float(0.0)
    stream = cp.cuda.get_current_stream().ptr
    key = product_key(False, not mn, M, N, K, blas.CUDA_R_16BF, K, blas.CUDA_R_16BF, N if mn else K, blas.CUDA_R_16BF,
                      N, blas.COMPUTE_32F, True, (alignment(a.data.ptr), alignment(b.data.ptr), alignment(cub.data.ptr)))

    def run(plan):
        lt._check(lt.matmul(plan, a.data.ptr, b.data.ptr, cub.data.ptr, one, zero, stream), "cublasLtMatmul")
    plan, _, candidates = gep.fastest_plan(lt, key, gep.EPILOGUE_DEFAULT, 0, 0, run)
    run(plan)

    maps = {"a": tma.encode(a, M, K, "bfloat16"),
            "b": tma.encode(b, K, N, "bfloat16") if mn else tma.encode(b, N, K, "bfloat16"),
            "out": tma.encode(out, M, N, "bfloat16")}
    null = np.uint64(0)
    recs, forms = [], {"cuBLAS": lambda: run(plan)}
    for form in FORMS[mn]:
        epilogue, _, _, stages, ep = gpp.KERNELS[form]
        k = mod.get_function(form)
        shared = gpp.shared_bytes(epilogue, stages, ep)
        k.max_dynamic_shared_size_bytes = shared
        grid = (min(cp.cuda.Device().attributes["MultiProcessorCount"], tiles(M, N)),)   # persistent: one an SM

        def launch(store, k=k, shared=shared, lbo_sbo=(0, 0)):
            k(grid, (384,), (maps["a"], maps["b"], maps["out"], maps["out"], out, null, null, np.int32(M),
                             np.int32(N), np.int32(K), np.uint32(lbo_sbo[0]), np.uint32(lbo_sbo[1]),
                             np.int32(store)), shared_mem=shared)
        chosen = None
        for offsets in (gpp.MN_OFFSETS_TRIED if mn else ((0, 0),)):
            out.fill(0xFFFF)
            launch(1, lbo_sbo=offsets)
            cp.cuda.runtime.deviceSynchronize()
            bad, worst = gpp.rounding_violations(cp.asnumpy(out), ref)
            if bad == 0:
                chosen = offsets
                break
        check = {"shape": name, "check": form, "passed": chosen is not None, "violations": bad, "worst_ulps": worst,
                 "bits_equal_to_cublas": float((out == cub).mean())}
        print(f"{name:36} check {form:16} {'PASS' if chosen is not None else 'FAIL'} {json.dumps(check)}", flush=True)
        recs.append(check)
        if chosen is not None:   # the products-alone form is timed without its stores
            forms[form] = lambda launch=launch, st=int(ep not in gpp.TIMED_WITHOUT_STORES), o=chosen: launch(
                st, lbo_sbo=o)
    med, times = gep.timed(forms, rounds, reps)
    line = [f"{name:36} ({M}, {N}, {K}) {tiles(M, N)} tiles ({waves(M, N):.2f} waves), cuBLAS {med['cuBLAS']:.4f} ms "
            f"({candidates} candidates)"]
    for f in forms:
        recs.append({"shape": name, "M": M, "N": N, "K": K, "form": f, "ms": med[f], "rounds": times[f],
                     "x_cublas": med[f] / med["cuBLAS"], "tflops": 2 * M * N * K / med[f] / 1e9})
        if f != "cuBLAS":
            line.append(f"{'':36} {f:16} {med[f]:.4f} ms, x{med[f] / med['cuBLAS']:.3f} of cuBLAS"
                        + (" (no stores: timing only)" if gpp.KERNELS[f][4] in gpp.TIMED_WITHOUT_STORES else ""))
    print("\n".join(line), flush=True)
    return recs


def main() -> int:
    path = Path(sys.argv[1])
    rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 3
    reps = int(sys.argv[3]) if len(sys.argv) > 3 else 20
    shapes = select(sys.argv[4] if len(sys.argv) > 4 else "")
    mod, usage = gpp.compile_module(path.with_suffix(".cubin"))
    print("\n".join(usage), flush=True)
    gpp.write_records(path, shapes, lambda name: probe(name, mod, rounds, reps), "shape")
    return 0


if __name__ == "__main__":
    sys.exit(main())
