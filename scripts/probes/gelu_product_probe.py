"""Can a product of our own carry nanoGPT's exact GELU in its epilogue and beat cuBLAS's product plus our GELU kernel?
(gelu_product_probe.cu says what the kernels do and why; docs/perf.md, "Twenty-second session", the prediction.)

Per model, on one layer's MLP shapes (bf16, the half build's tensors; gelu_epilogue_probe.cublas_forms builds them
and cuBLASLt's fastest plans):
  checks   our plain products against float32 references (within one bf16 rounding, elementwise); our GELU
           product's aux equal to our plain product's output to the bit and its out to gelu_forward_bf16_table's
           on that aux; our DGELU product's out equal to gelu_backward_bf16_table's on our plain product's output.
           The MN-major B descriptor's offsets are tried in two orders (the TMA probe's way); the first that passes
           is used. A form whose check fails is not timed.
  timing   every form in rotating rounds (event_timing.mean_ms): cuBLAS's product, our GELU kernels, cuBLASLt's
           GELU_AUX / DGELU (tanh form: their cost only), our plain and GELU products.
  sustained the forms GP_SUSTAIN names again, each for GP_SUSTAIN_S seconds back to back (event_timing.sustained):
           at the clock the card holds under its power limit, with joules a call from its energy counter, the
           ratios against what each form would replace (against_of). Off unless named.

    PYTHONPATH=lib:scripts python3 scripts/probes/gelu_product_probe.py OUT.jsonl [rounds] [reps] [models]
"""
from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
CU_FILE = HERE / "gelu_product_probe.cu"
TABLE_BYTES = {"plain": 0, "gelu": 7168 * 2, "dgelu": 7168 * 4}   # gelu.cu's GELU_TABLE_SIZE, u16 / float32
STAGE_BYTES = 6 * 8192       # a ring stage: 2 + 4 boxes of 8 KB
QBOX = 64 * 64 * 2           # a staged quarter box (forms 4-20): 64 x 64 bf16
# the staging of each epilogue form beyond the ring: bytes (0 direct / none; 1 a padded half tile a consumer
# warpgroup; 2 and the diagnostics 15-17 the padded full tile), or quarter boxes a consumer warpgroup as (plain, GELU)
_HALF, _TILE = 2 * 64 * (128 * 2 + 16), 128 * (256 * 2 + 16)
STAGING = {0: 0, 1: _HALF, 2: _TILE, 3: 0, 12: 0, 15: _TILE, 16: _TILE, 17: _TILE,
           4: (2, 4), 5: (2, 4), 8: (2, 4), 18: (2, 4), 19: (2, 4),
           6: (4, 4), 7: (4, 4), 9: (4, 4), 10: (4, 4), 13: (4, 4), 20: (4, 4), 11: (2, 2), 14: (2, 2)}
# forms timed without their stores (checked with form 0's): the products alone (3) and the diagnostics beside them
TIMED_WITHOUT_STORES = frozenset((3, 15, 16, 17, 20))
BM, BN, BK = 128, 256, 64
MN_OFFSETS_TRIED = ((8192, 1024), (1024, 8192))   # (LBO, SBO) of the MN-major B operand
# GP_PROFILE=form,form,...: run each named form once inside cudaProfilerStart/Stop after the checks, and time nothing
# (side_call.sh's gpncu stage runs the probe so under Nsight Compute, "fwd product" being cuBLAS's)
def form_names(raw: str) -> list:
    """A comma-separated list of form names from the environment (GP_PROFILE, GP_SUSTAIN), empty names left out."""
    return [n.strip() for n in (raw or "").split(",") if n.strip()]


PROFILE = form_names(os.environ.get("GP_PROFILE", ""))
# GP_SUSTAIN=form,form,...: after the timing, each named form again under sustained load (event_timing.sustained: the
# card at its power limit as in the training step, joules a call by its energy counter), GP_SUSTAIN_S seconds a form
# and round, GP_SUSTAIN_ROUNDS rounds in rotating order (sustained_summary reads them)
SUSTAIN = form_names(os.environ.get("GP_SUSTAIN", ""))
SUSTAIN_S = float(os.environ.get("GP_SUSTAIN_S", "1.5"))
SUSTAIN_ROUNDS = int(os.environ.get("GP_SUSTAIN_ROUNDS", "2"))
# the .cu's kernels: name -> (epilogue, B MN-major, cluster, ring stages, epilogue form: 0 direct, 1 staged by the
# consumers, 2 overlapped: written out by the producer warpgroup's idle warps, 3 none: timed without output, checked
# with form 0's stores, 4 TMA stores from swizzled quarter boxes, 5 form 4 with the two consumer warpgroups'
# epilogues in turns, 6 the whole tile staged and stored at once, 7 the same by stmatrix, 8 form 4 by stmatrix,
# 9 deferred under the next tile's products (plain), 10 the same with GELU, 11 with DGELU, 12 deferred and stored
# straight from the registers, 13 and 14 forms 10 and 11 computing gelu / gelu_grad for every code (no table), 15-17
# diagnostics: the products alone beside writer warps reading shared memory, writing global memory, or both (timed
# without stores, checked with form 0's), 18 form 4 with evict-first stores, 19 with B's loads evict-last, 20
# diagnostic: the products alone beside the copy engine's stores of boxes no thread writes). Big boxes (A and B a
# box each a stage): the kernels BIG_BOXES names.
BIG_BOXES = {"gp_plain_tn_bx4", "gp_plain_tn_bo", "gp_gelu_tn_bo", "gp_plain_tn_bt", "gp_gelu_tn_bt"}
KERNELS = {
    "gp_plain_tn": ("plain", False, 1, 4, 0), "gp_plain_tn_c2": ("plain", False, 2, 4, 0),
    "gp_plain_tn_d3": ("plain", False, 1, 3, 0), "gp_plain_tn_s": ("plain", False, 1, 3, 1),
    "gp_gelu_tn_s": ("gelu", False, 1, 3, 1), "gp_plain_nn_s": ("plain", True, 1, 3, 1),
    "gp_dgelu_nn_s": ("dgelu", True, 1, 3, 1), "gp_plain_tn_c2s": ("plain", False, 2, 3, 1),
    "gp_plain_tn_o": ("plain", False, 1, 3, 2), "gp_gelu_tn_o": ("gelu", False, 1, 3, 2),
    "gp_plain_nn_o": ("plain", True, 1, 3, 2), "gp_dgelu_nn_o": ("dgelu", True, 1, 2, 2),
    "gp_plain_tn_x": ("plain", False, 1, 3, 3), "gp_plain_tn_x4": ("plain", False, 1, 4, 3),
    "gp_plain_tn_c2x": ("plain", False, 2, 4, 3), "gp_plain_tn_bx4": ("plain", False, 1, 4, 3),
    "gp_plain_tn_bo": ("plain", False, 1, 3, 2), "gp_gelu_tn_bo": ("gelu", False, 1, 3, 2),
    "gp_plain_tn_t": ("plain", False, 1, 4, 4), "gp_plain_nn_t": ("plain", True, 1, 4, 4),
    "gp_gelu_tn_t": ("gelu", False, 1, 3, 4), "gp_plain_tn_bt": ("plain", False, 1, 4, 4),
    "gp_gelu_tn_bt": ("gelu", False, 1, 3, 4),
    "gp_plain_tn_tp": ("plain", False, 1, 4, 5), "gp_plain_nn_tp": ("plain", True, 1, 4, 5),
    "gp_gelu_tn_tp": ("gelu", False, 1, 3, 5),
    "gp_plain_tn_w": ("plain", False, 1, 3, 6), "gp_plain_tn_wm": ("plain", False, 1, 3, 7),
    "gp_plain_nn_wm": ("plain", True, 1, 3, 7), "gp_plain_tn_tm": ("plain", False, 1, 4, 8),
    "gp_gelu_tn_tm": ("gelu", False, 1, 3, 8),
    "gp_plain_tn_dp": ("plain", False, 1, 3, 9), "gp_plain_nn_dp": ("plain", True, 1, 3, 9),
    "gp_gelu_tn_dp": ("gelu", False, 1, 3, 10), "gp_dgelu_nn_dp": ("dgelu", True, 1, 3, 11),
    "gp_plain_tn_dd": ("plain", False, 1, 4, 12), "gp_plain_nn_dd": ("plain", True, 1, 4, 12),
    "gp_gelu_tn_dc": ("gelu", False, 1, 3, 13), "gp_dgelu_nn_dc": ("dgelu", True, 1, 3, 14),
    "gp_plain_tn_xr": ("plain", False, 1, 3, 15), "gp_plain_tn_xw": ("plain", False, 1, 3, 16),
    "gp_plain_tn_xrw": ("plain", False, 1, 3, 17),
    "gp_plain_tn_te": ("plain", False, 1, 4, 18), "gp_gelu_tn_te": ("gelu", False, 1, 3, 18),
    "gp_plain_tn_tl": ("plain", False, 1, 4, 19), "gp_plain_tn_xt": ("plain", False, 1, 3, 20),
}


def selected(kernels: dict, only: str = "", skip: str = "") -> dict:
    """The kernels a run checks and times: those named in `only` (comma-separated; empty: all) less those in `skip`,
    in the table's order (GP_KERNELS and GP_SKIP in the environment: a form that may hang runs in a process apart,
    so that it cannot take the others' timings with it)."""
    names = [n for n in only.split(",") if n]
    unknown = [n for n in names + [n for n in skip.split(",") if n] if n not in kernels]
    if unknown:
        raise ValueError(f"GP_KERNELS / GP_SKIP: no kernel {', '.join(unknown)}; allowed are {', '.join(kernels)}")
    return {k: v for k, v in kernels.items() if (not names or k in names) and k not in skip.split(",")}


# forms timed a second time with `store` 0 (their TMA stores left out: what their staging alone costs; not checked
# that way, since nothing is written)
WITHOUT_STORES = ("gp_plain_tn_w", "gp_plain_tn_wm", "gp_plain_tn_dp")


def staging_bytes(epilogue: str, form: int) -> int:
    """The epilogue form's staging (STAGING): its bytes, or its quarter boxes for both consumer warpgroups."""
    st = STAGING[form]
    return st if isinstance(st, int) else 2 * st[epilogue == "gelu"] * QBOX


def shared_bytes(epilogue: str, stages: int = 4, form: int = 0) -> int:
    """Dynamic shared memory of a launch: the table at a 1 KB boundary, the ring, the epilogue form's staging, 1 KB
    for the base's alignment."""
    return (TABLE_BYTES[epilogue] + 1023) // 1024 * 1024 + stages * STAGE_BYTES + staging_bytes(epilogue, form) + 1024


def stmatrix_row_byte(warp: int, lane: int, j: int) -> int:
    """gp_stmatrix_box of the .cu: the swizzled byte where lane `lane` of `warp` points stmatrix's instruction j (0, 2,
    4, 6): row lane % 8 of matrix lane / 8, matrices (j, rows 0-7), (j, 8-15), (j + 1, 0-7), (j + 1, 8-15)."""
    mi = lane >> 3
    return swizzled_byte(16 * warp + (lane & 7) + 8 * (mi & 1), 8 * (j + (mi >> 1)))


def swizzled_byte(r: int, col: int) -> int:
    """gp_swz of the .cu: the byte of (row r, column col) in a 64 x 64 bf16 box under TMA's 128B swizzle."""
    return r * 128 + ((((col >> 3) ^ r) & 7) << 4) + (col & 7) * 2


def shape_ok(M: int, N: int, K: int) -> bool:
    return M % BM == 0 and N % BN == 0 and K % BK == 0


def bf16_to_f32(bits: np.ndarray) -> np.ndarray:
    return (bits.astype(np.uint32) << 16).view(np.float32)


def rounding_violations(ours_bits: np.ndarray, ref: np.ndarray) -> tuple[int, float]:
    """(elements off by more than one bf16 rounding plus float32 summation noise, the largest error in units of the
    reference's bf16 ulp). A correct bf16 product of float32 accumulation is within half an ulp of the exact value
    plus the summation's order; a wrong tile, a lost k step or a misread operand is off by far more."""
    ours = bf16_to_f32(ours_bits).astype(np.float64)
    ref = ref.astype(np.float64)
    ulp = np.ldexp(1.0, np.frexp(np.abs(ref))[1] - 8)   # bf16: 8 significant bits
    floor = 1e-6 * float(np.abs(ref).max())
    err = np.abs(ours - ref)
    within = err <= ulp + floor   # False for a NaN: an element the kernel never wrote keeps the NaN poison
    ratio = err / np.maximum(ulp, floor)
    return int((~within).sum()), float(np.nanmax(ratio)) if np.isfinite(ratio).any() else float("inf")


def max_active_clusters(function, shared: int, cluster: int, fallback: int) -> int:
    """How many clusters of `cluster` blocks of this kernel (compiled with __cluster_dims__) the GPU holds at once
    (cuOccupancyMaxActiveClusters): a persistent grid larger than that would run its last clusters in a second wave.
    The fallback where the driver does not answer."""
    import ctypes

    class LaunchConfig(ctypes.Structure):   # CUlaunchConfig (cuda.h, CUDA 12)
        _fields_ = [("gridDimX", ctypes.c_uint), ("gridDimY", ctypes.c_uint), ("gridDimZ", ctypes.c_uint),
                    ("blockDimX", ctypes.c_uint), ("blockDimY", ctypes.c_uint), ("blockDimZ", ctypes.c_uint),
                    ("sharedMemBytes", ctypes.c_uint), ("hStream", ctypes.c_void_p), ("attrs", ctypes.c_void_p),
                    ("numAttrs", ctypes.c_uint)]
    cfg = LaunchConfig(cluster * 64, 1, 1, 384, 1, 1, shared, None, None, 0)
    n = ctypes.c_int(0)
    rc = ctypes.CDLL("libcuda.so.1").cuOccupancyMaxActiveClusters(ctypes.byref(n), ctypes.c_void_p(function.kernel.ptr),
                                                                   ctypes.byref(cfg))
    return n.value if rc == 0 and n.value > 0 else fallback


def compile_module(cubin_path: Path):
    import cupy as cp
    from tr2.cupy_side.gpu import cubins, load_source
    nvrtc = cubins.Nvrtc()
    src = load_source("gelu.cu") + "\n" + CU_FILE.read_text()
    cubin_path.write_bytes(nvrtc.compile(src, CU_FILE.name, "sm_90a", ("-Xptxas", "-v")))
    usage = [line.strip() for line in nvrtc.last_log.splitlines() if "gp_" in line or "Used" in line or "spill" in line]
    return cp.RawModule(path=str(cubin_path)), usage


def probe(model: str, mod, rounds: int, reps: int) -> list[dict]:
    import cupy as cp

    import gelu_epilogue_probe as gep
    from tr2.cupy_side.gpu import gelu as gelu_kernels, tma
    from tr2.cupy_side.gpu.halfbits import KIND_BF16

    forms, t, meta = gep.cublas_forms(model)
    rows, C = meta["rows"], meta["C"]
    M, N, K = rows, 4 * C, C
    if not shape_ok(M, N, K):
        raise ValueError(f"{model}: ({M}, {N}, {K}) is not a multiple of the tile ({BM}, {BN}, {BK})")
    tab_fwd, tab_bwd = gelu_kernels.tables(KIND_BF16)
    maps = {"x": tma.encode(t["x"], rows, C, "bfloat16"), "w_fc": tma.encode(t["w_fc"], N, C, "bfloat16"),
            "dy": tma.encode(t["dy"], rows, C, "bfloat16"), "w_proj": tma.encode(t["w_proj"], C, N, "bfloat16"),
            "x big": tma.encode(t["x"], rows, C, "bfloat16", box_rows=BM),
            "w_fc big": tma.encode(t["w_fc"], N, C, "bfloat16", box_rows=BN)}
    sms = cp.cuda.Device().attributes["MultiProcessorCount"]
    tiles = (M // BM) * (N // BN)
    null = np.uint64(0)
    recs, checks = [], {}
    kerns, grids = {}, {}
    kernels = selected(KERNELS, os.environ.get("GP_KERNELS", ""), os.environ.get("GP_SKIP", ""))
    for name, (epilogue, _, cluster, stages, form) in kernels.items():
        k = mod.get_function(name)
        k.max_dynamic_shared_size_bytes = shared_bytes(epilogue, stages, form)
        kerns[name] = k
        fit = (max_active_clusters(k, shared_bytes(epilogue, stages, form), cluster, sms // cluster)
               if cluster > 1 else sms)
        grids[name] = (cluster * min(fit, tiles // cluster),)
    print(f"{model:12} grids: " + ", ".join(f"{k} {g[0]}" for k, g in grids.items()), flush=True)

    def launch(name, a, b, out, aux, table, lbo=0, sbo=0, store=1):
        epilogue, _, _, stages, form = KERNELS[name]
        if name in BIG_BOXES:
            a, b = a + " big", b + " big"
        # form 4 stores through maps of the output buffers (made once below); the other forms ignore these two
        map_out = out_maps.get(int(out.data.ptr), maps[a]) if form >= 4 else maps[a]
        map_aux = out_maps.get(int(aux.data.ptr), maps[a]) if form >= 4 and aux is not null else maps[a]
        kerns[name](grids[name], (384,), (maps[a], maps[b], map_out, map_aux, out, aux, table, np.int32(M),
                                          np.int32(N), np.int32(K), np.uint32(lbo), np.uint32(sbo), np.int32(store)),
                    shared_mem=shared_bytes(epilogue, stages, form))

    x32 = bf16_to_f32(cp.asnumpy(t["x"])).astype(np.float32)
    wfc32 = bf16_to_f32(cp.asnumpy(t["w_fc"])).astype(np.float32)
    dy32 = bf16_to_f32(cp.asnumpy(t["dy"])).astype(np.float32)
    wproj32 = bf16_to_f32(cp.asnumpy(t["w_proj"])).astype(np.float32)
    ref_f = cp.asnumpy(cp.asarray(x32) @ cp.asarray(wfc32).T)
    ref_b = cp.asnumpy(cp.asarray(dy32) @ cp.asarray(wproj32))

    o1, o2, aux = (cp.full((M, N), 0xFFFF, dtype=cp.uint16) for _ in range(3))   # poisoned: NaN codes
    # the output buffers' maps (forms 4-11 store through them) and the pre-activation's (form 11 loads it)
    out_maps = {int(b.data.ptr): tma.encode(b, M, N, "bfloat16") for b in (o1, o2, aux, t["h"])}
    want = cp.full_like(o2, 0xFFFF)
    # the reference bits of our products: the first form's (every form's products add in the same order)
    plain_tn, plain_nn = cp.full_like(o1, 0xFFFF), cp.full_like(o1, 0xFFFF)
    lbo, sbo = MN_OFFSETS_TRIED[0]
    calls = {}
    for name, (epilogue, mn, _, _, _) in kernels.items():   # each on fresh poison, checked before it is timed
        for buf in (o1, o2, aux, want):
            buf.fill(0xFFFF)
        if epilogue == "plain" and not mn:
            launch(name, "x", "w_fc", o1, null, null)
            bad, worst = rounding_violations(cp.asnumpy(o1), ref_f)
            if plain_tn[0, 0] == 0xFFFF and bad == 0:
                plain_tn[...] = o1
            c = {"passed": bad == 0 and bool((o1 == plain_tn).all()), "violations": bad, "worst_ulps": worst,
                 "bits_equal_to_cublas": float((o1 == t["h"]).mean()), "bits_equal_to_first": bool((o1 == plain_tn).all())}
            # forms 3 and 15-17 are timed without their stores (checked above with them): the products alone, and
            # beside the diagnostics' writer work
            st = int(KERNELS[name][4] not in TIMED_WITHOUT_STORES)
            calls[name] = lambda n=name, st=st: launch(n, "x", "w_fc", o1, null, null, store=st)
        elif epilogue == "gelu":
            launch(name, "x", "w_fc", o2, aux, tab_fwd)
            gelu_kernels.launch_forward(want, aux, KIND_BF16, KIND_BF16, by_table=True)
            aux_equal, out_equal = bool((aux == plain_tn).all()), bool((o2 == want).all())
            c = {"passed": aux_equal and out_equal, "aux_equal": aux_equal, "out_equal": out_equal}
            calls[name] = lambda n=name: launch(n, "x", "w_fc", o2, aux, tab_fwd)
        elif epilogue == "plain":
            for lbo, sbo in (MN_OFFSETS_TRIED if plain_nn[0, 0] == 0xFFFF else ((lbo, sbo),)):
                o1.fill(0xFFFF)
                launch(name, "dy", "w_proj", o1, null, null, lbo, sbo)
                bad, worst = rounding_violations(cp.asnumpy(o1), ref_b)
                if bad == 0:
                    break
            if plain_nn[0, 0] == 0xFFFF and bad == 0:
                plain_nn[...] = o1
            c = {"passed": bad == 0 and bool((o1 == plain_nn).all()), "violations": bad, "worst_ulps": worst,
                 "lbo": lbo, "sbo": sbo}
            calls[name] = lambda n=name, lb=lbo, sb=sbo: launch(n, "dy", "w_proj", o1, null, null, lb, sb)
        else:
            launch(name, "dy", "w_proj", o2, t["h"], tab_bwd, lbo, sbo)
            gelu_kernels.launch_backward(want, plain_nn, t["h"], KIND_BF16, KIND_BF16, KIND_BF16, by_table=True)
            out_equal = bool((o2 == want).all()) and bool(plain_nn[0, 0] != 0xFFFF)
            c = {"passed": out_equal, "out_equal": out_equal}
            calls[name] = lambda n=name, lb=lbo, sb=sbo: launch(n, "dy", "w_proj", o2, t["h"], tab_bwd, lb, sb)
        cp.cuda.runtime.deviceSynchronize()
        checks[name] = c   # printed now: a hang in a later form keeps it
        print(f"{model:12} check {name:16} {'PASS' if c['passed'] else 'FAIL'} {json.dumps(c)}", flush=True)
        recs.append({"model": model, "check": name, **c})
    for name, fn in calls.items():
        if checks[name]["passed"]:
            forms[name] = fn
    for name in WITHOUT_STORES:
        if checks.get(name, {}).get("passed"):
            forms[name + " w/o stores"] = lambda n=name: launch(n, "x", "w_fc", o1, null, null, store=0)
    if PROFILE:   # under Nsight Compute (--profile-from-start off): one launch of each named form, nothing timed
        for name in PROFILE:
            if name not in forms:
                print(f"{model:12} profile: no form {name!r} (not checked, or failed); have {', '.join(forms)}")
                continue
            forms[name]()   # once outside the profiled range: first-launch costs stay out
            cp.cuda.runtime.deviceSynchronize()
            cp.cuda.profiler.start()
            forms[name]()
            cp.cuda.runtime.deviceSynchronize()
            cp.cuda.profiler.stop()
            print(f"{model:12} profiled {name}", flush=True)
        return recs
    med, times = gep.timed(forms, rounds, reps)
    if SUSTAIN:
        recs += sustained_forms(model, forms, SUSTAIN, SUSTAIN_ROUNDS, SUSTAIN_S)
    for n in forms:
        flops = 0 if "kernel" in n else 2 * M * N * K
        recs.append({"model": model, "M": M, "N": N, "K": K, "form": n, "ms": med[n], "rounds": times[n],
                     "tflops": flops / med[n] / 1e9 if flops else None})
    nan = float("nan")
    sep_f = med["fwd product"] + med["fwd gelu kernel"]
    sep_b = med["bwd product"] + med["bwd gelu kernel"]
    print(f"{model:12} ({M}, {N}, {K}) ms a layer; forward: cuBLAS {med['fwd product']:.4f} + gelu "
          f"{med['fwd gelu kernel']:.4f} = {sep_f:.4f}, GELU_AUX {med.get('fwd GELU_AUX product', nan):.4f}; backward: "
          f"cuBLAS {med['bwd product']:.4f} + gelu' {med['bwd gelu kernel']:.4f} = {sep_b:.4f}, DGELU "
          f"{med.get('bwd DGELU product', nan):.4f}", flush=True)
    for name, (epilogue, mn, _, _, _) in kernels.items():
        ms = med.get(name, nan)
        against = (sep_b if mn else sep_f) if epilogue != "plain" else med["bwd product" if mn else "fwd product"]
        what = "product + our GELU kernel" if epilogue != "plain" else "cuBLAS's product"
        print(f"{'':12} {name:16} {ms:.4f} ms, x{ms / against:.3f} of {what} ({ms - against:+.4f})", flush=True)
    for name in WITHOUT_STORES:
        ms = med.get(name + " w/o stores", nan)
        print(f"{'':12} {name + ' w/o stores':16} {ms:.4f} ms, x{ms / med['fwd product']:.3f} of cuBLAS's product "
              f"(timing only: nothing written)", flush=True)
    for form in ("s", "o"):
        fg, bg = med.get(f"gp_gelu_tn_{form}", nan), med.get(f"gp_dgelu_nn_{form}", nan)
        print(f"{'':12} the GELU products _{form} against product + kernel, a step x {meta['cfg'].n_layer} layers: "
              f"{(fg - sep_f + bg - sep_b) * meta['cfg'].n_layer:+.3f} ms", flush=True)
    return recs


def against_of(name: str) -> list[str]:
    """What a form is judged against (the rule of the ratios printed above): our GELU / DGELU products against
    cuBLAS's product plus our GELU kernel, every other form against cuBLAS's product in its direction."""
    if name.startswith("gp_gelu"):
        return ["fwd product", "fwd gelu kernel"]
    if name.startswith("gp_dgelu"):
        return ["bwd product", "bwd gelu kernel"]
    if name.startswith("gp_plain_nn"):
        return ["bwd product"]
    return ["fwd product"]


def sustained_summary(rounds_by_form: dict) -> dict:
    """Per form, the medians over its sustained rounds (ms a call, joules a call, SM clock, watts) and the ratios of
    ms and joules to what it is judged against (against_of; the sum of their medians), where those were measured.
    A ratio is None where a figure is missing (no energy counter, or the reference not measured)."""
    import statistics as st

    def med(name, key):
        vals = [r[key] for r in rounds_by_form.get(name, []) if r.get(key) is not None]
        return st.median(vals) if vals else None

    out = {}
    for name in rounds_by_form:
        row = {k: med(name, key) for k, key in (("ms", "ms"), ("joules", "joules_a_call"), ("mhz", "sm_mhz"),
                                                 ("watts", "mean_w"))}
        ref = against_of(name)
        for k in ("ms", "joules"):
            parts = [med(r, "ms" if k == "ms" else "joules_a_call") for r in ref]
            ok = name not in ref and row[k] is not None and all(p is not None for p in parts)
            row["x_" + k] = row[k] / sum(parts) if ok else None
        row["against"] = " + ".join(ref)
        out[name] = row
    return out


def sustained_forms(model: str, forms: dict, names: list, rounds: int, seconds: float) -> list[dict]:
    from event_timing import sustained
    missing = [n for n in names if n not in forms]
    if missing:
        print(f"{model:12} sustained: no form {', '.join(map(repr, missing))} (not checked, or failed); have "
              f"{', '.join(forms)}", flush=True)
    names = [n for n in names if n in forms]
    by_form = {n: [] for n in names}
    for r in range(rounds):   # rotating order, as the short timing
        for n in names[r % len(names):] + names[:r % len(names)]:
            by_form[n].append(sustained(forms[n], seconds))
    summary = sustained_summary(by_form)
    print(f"{model:12} sustained ({rounds} rounds of {seconds} s a form; ms and joules a call, medians):", flush=True)
    def fmt(v, f):
        return "-" if v is None else format(v, f)
    for n, row in summary.items():
        print(f"{'':12} {n:24} {fmt(row['ms'], '.4f')} ms x{fmt(row['x_ms'], '.3f')}  {fmt(row['joules'], '.5f')} J "
              f"x{fmt(row['x_joules'], '.3f')}  {fmt(row['mhz'], '.0f')} MHz {fmt(row['watts'], '.0f')} W "
              f"(against {row['against']})", flush=True)
    return [{"model": model, "form": n, "sustained": by_form[n], **{"sustained_" + k: v for k, v in summary[n].items()}}
            for n in names]


def main() -> int:
    path = Path(sys.argv[1])
    rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 3
    reps = int(sys.argv[3]) if len(sys.argv) > 3 else 20
    models = sys.argv[4].split(",") if len(sys.argv) > 4 else ["nanogpt", "gpt2-small", "gpt2-medium"]
    mod, usage = compile_module(path.with_suffix(".cubin"))
    print("\n".join(usage), flush=True)
    write_records(path, models, lambda model: probe(model, mod, rounds, reps), "model")
    return 0


def write_records(path: Path, items, run, label: str) -> None:
    """run(item)'s records for each item, as JSON lines, flushed after each item; an item that raises leaves one
    error record (a fault poisons the CUDA context: the items after it then fail too) and the rest go on."""
    with open(path, "w") as f:
        for item in items:
            try:
                recs = run(item)
            except Exception as e:
                print(f"{item}: {type(e).__name__}: {str(e)[:300]}", flush=True)
                recs = [{label: item, "error": f"{type(e).__name__}: {str(e)[:300]}"}]
            for rec in recs:
                f.write(json.dumps(rec) + "\n")
            f.flush()


if __name__ == "__main__":
    sys.exit(main())
