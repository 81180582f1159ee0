"""Matrix products through cuBLASLt with the algorithm of each product shape chosen by timing on the card.

Why: gpu/blas.py's cublasGemmEx takes cuBLAS's heuristic choice. On the H200 that is, for the step's larger products,
a kernel that needs a 4-byte counter zeroed before it: 38 memsets a step of gpt2-small (18 of nanogpt), each with a
gap of about 4 us before the product and 1.4 us before the memset (call 6 of results/h200-perf-20261201c, its
timeline), about 1.3% of the step (2% of nanogpt's). cuBLASLt lists the candidates; `tune` times each on the card,
its memset included, and products.py keeps the fastest in a record that runs read (they never time).

A product whose shape the record lacks takes cuBLASLt's first candidate, the heuristic's own choice. Capture-safe as
blas.py is: a shape's descriptors and algorithm are made on its first call (the first step runs eagerly, before any
capture), the workspace is blas.py's (no allocation inside cuBLAS), alpha and beta are host scalars.

Reductions: outside half roundings no candidate may reduce split-K parts in a half output type (the reduction-scheme
mask), as blas.py's DISALLOW_REDUCED_PRECISION_REDUCTION; every product here writes float32 there anyway.
"""
from __future__ import annotations

import ctypes

from . import blas, find_nvidia_lib, memsets

# cublasLtMatmulDescAttributes_t
DESC_TRANSA, DESC_TRANSB = 3, 4
# cublasLtMatmulPreferenceAttributes_t
PREF_MAX_WORKSPACE_BYTES, PREF_REDUCTION_SCHEME_MASK = 1, 3
PREF_MIN_ALIGNMENT = {"a": 5, "b": 6, "c": 7, "d": 8}
# cublasLtReductionScheme_t: NONE 0, INPLACE 1, COMPUTE_TYPE 2, OUTPUT_TYPE 4
REDUCTION_ALL, REDUCTION_NOT_IN_OUTPUT_TYPE = 7, 3
# cublasLtMatmulAlgoConfigAttributes_t, as the record reports them
ALGO_CONFIG = {"id": 0, "tile": 1, "splitk": 2, "reduction": 3, "swizzle": 4, "custom": 5, "stages": 6}
CANDIDATES = 16
ELEMENT_BYTES = {blas.CUDA_R_32F: 4, blas.CUDA_R_64F: 8, blas.CUDA_R_16F: 2, blas.CUDA_R_16BF: 2}


class Algo(ctypes.Structure):
    _fields_ = [("data", ctypes.c_uint64 * 8)]


class HeuristicResult(ctypes.Structure):
    _fields_ = [("algo", Algo), ("workspace_size", ctypes.c_size_t), ("state", ctypes.c_int),
                ("waves_count", ctypes.c_float), ("reserved", ctypes.c_int * 4)]


def alignment(ptr: int) -> int:
    """The largest power of two, at most 256, that divides the address: the key's alignment class."""
    a = 256
    while a > 1 and ptr % a:
        a //= 2
    return a


def product_key(trans_a, trans_b, M, N, K, a_type, lda, b_type, ldb, c_type, ldc, compute, reduced, aligns) -> tuple:
    """What decides a product's algorithm: the row-major call's shape, types, leading dimensions, whether split-K
    parts may be reduced in a half output type, and the operands' alignment classes (A, B, C)."""
    return (int(trans_a), int(trans_b), M, N, K, a_type, lda, b_type, ldb, c_type, ldc, compute, int(reduced),
            *aligns)


class Plan:
    """A product shape's descriptors (column-major: cuBLASLt's A is the row-major call's B) and its algorithm."""
    __slots__ = ("desc", "layouts", "algo", "workspace", "source")

    def __init__(self, desc, layouts, algo, workspace, source):
        self.desc, self.layouts, self.algo, self.workspace, self.source = desc, layouts, algo, workspace, source


class CublasLt:
    """cuBLASLt on blas.Cublas's workspace; `record` maps products.key_text(key) to a chosen algorithm."""

    def __init__(self, cublas: "blas.Cublas", record: dict | None = None, path: str | None = None):
        import cupy as cp
        self._cp = cp
        self.cublas = cublas
        self.path = path or find_nvidia_lib("cublasLt")
        if self.path is None:
            raise blas.CublasError("libcublasLt not found (it comes with libcublas)")
        lib = ctypes.CDLL(self.path)
        vp, ci, u64, i64, csz = ctypes.c_void_p, ctypes.c_int, ctypes.c_uint64, ctypes.c_int64, ctypes.c_size_t
        sig = {
            "cublasLtCreate": [ctypes.POINTER(vp)],
            "cublasLtMatmulDescCreate": [ctypes.POINTER(vp), ci, ci],
            "cublasLtMatmulDescSetAttribute": [vp, ci, vp, csz],
            "cublasLtMatrixLayoutCreate": [ctypes.POINTER(vp), ci, u64, u64, i64],
            "cublasLtMatmulPreferenceCreate": [ctypes.POINTER(vp)],
            "cublasLtMatmulPreferenceSetAttribute": [vp, ci, vp, csz],
            "cublasLtMatmulPreferenceDestroy": [vp],
            "cublasLtMatmulAlgoGetHeuristic": [vp, vp, vp, vp, vp, vp, vp, ci, ctypes.POINTER(HeuristicResult),
                                               ctypes.POINTER(ci)],
            "cublasLtMatmulAlgoConfigGetAttribute": [ctypes.POINTER(Algo), ci, vp, csz, ctypes.POINTER(csz)],
            "cublasLtMatmul": [vp, vp, vp, vp, vp, vp, vp, vp, vp, vp, vp, vp, ctypes.POINTER(Algo), vp, csz, vp],
        }
        for name, args in sig.items():
            f = getattr(lib, name)
            f.argtypes, f.restype = args, ci
        lib.cublasLtGetVersion.argtypes, lib.cublasLtGetVersion.restype = [], csz
        self.lib = lib
        self.version = int(lib.cublasLtGetVersion())
        self.handle = vp()
        self._check(lib.cublasLtCreate(ctypes.byref(self.handle)), "cublasLtCreate")
        self.record = record or {}
        self.record_path = None   # where blas.Cublas.attach_lt read the record from
        self.record_sha256 = None   # and the sha256 of the file it read (None: no file)
        self._plans: dict = {}
        self.collect: set | None = None   # products.py: the keys a step's products have, gathered on the way

    @staticmethod
    def _check(status: int, what: str) -> None:
        blas.Cublas._check(status, what)

    # ---- descriptors
    def _layouts(self, key):
        opa, opb, M, N, K, a_type, lda, b_type, ldb, c_type, ldc = key[:11]
        # cuBLASLt's first operand is the row-major B (op opb, m = N), its second the row-major A (n = M)
        shapes = (((N, K) if not opb else (K, N), b_type, ldb), ((K, M) if not opa else (M, K), a_type, lda),
                  ((N, M), c_type, ldc))
        out = []
        for (rows, cols), dtype, ld in shapes:
            lay = ctypes.c_void_p()
            self._check(self.lib.cublasLtMatrixLayoutCreate(ctypes.byref(lay), dtype, rows, cols, ld),
                        f"cublasLtMatrixLayoutCreate({rows}, {cols}, ld {ld})")
            out.append(lay)
        return out

    def _desc(self, key):
        opa, opb, compute = key[0], key[1], key[11]
        scale = blas.CUDA_R_64F if compute == blas.COMPUTE_64F else blas.CUDA_R_32F
        desc = ctypes.c_void_p()
        self._check(self.lib.cublasLtMatmulDescCreate(ctypes.byref(desc), compute, scale), "cublasLtMatmulDescCreate")
        for attr, op in ((DESC_TRANSA, opb), (DESC_TRANSB, opa)):
            v = ctypes.c_int(op)
            self._check(self.lib.cublasLtMatmulDescSetAttribute(desc, attr, ctypes.byref(v), ctypes.sizeof(v)),
                        "cublasLtMatmulDescSetAttribute")
        return desc

    def candidates(self, key, desc, layouts, count: int = CANDIDATES) -> list[HeuristicResult]:
        """cuBLASLt's candidates for the shape, its own first, those that fit the workspace and alignments."""
        pref = ctypes.c_void_p()
        self._check(self.lib.cublasLtMatmulPreferenceCreate(ctypes.byref(pref)), "cublasLtMatmulPreferenceCreate")
        try:
            settings = [(PREF_MAX_WORKSPACE_BYTES, ctypes.c_uint64(blas.WORKSPACE_BYTES)),
                        (PREF_REDUCTION_SCHEME_MASK, ctypes.c_uint32(REDUCTION_ALL if key[12] else
                                                                     REDUCTION_NOT_IN_OUTPUT_TYPE))]
            align_a, align_b, align_c = key[13:16]
            # cuBLASLt's a, b are the row-major B, A; c and d are the output
            settings += [(PREF_MIN_ALIGNMENT["a"], ctypes.c_uint32(align_b)),
                         (PREF_MIN_ALIGNMENT["b"], ctypes.c_uint32(align_a)),
                         (PREF_MIN_ALIGNMENT["c"], ctypes.c_uint32(align_c)),
                         (PREF_MIN_ALIGNMENT["d"], ctypes.c_uint32(align_c))]
            for attr, v in settings:
                self._check(self.lib.cublasLtMatmulPreferenceSetAttribute(pref, attr, ctypes.byref(v), ctypes.sizeof(v)),
                            "cublasLtMatmulPreferenceSetAttribute")
            results = (HeuristicResult * count)()
            n = ctypes.c_int()
            lb, la, lc = layouts
            self._check(self.lib.cublasLtMatmulAlgoGetHeuristic(self.handle, desc, lb, la, lc, lc, pref, count,
                                                                results, ctypes.byref(n)),
                        f"cublasLtMatmulAlgoGetHeuristic{key[2:5]}")
            return [results[i] for i in range(n.value) if results[i].state == 0
                    and results[i].workspace_size <= blas.WORKSPACE_BYTES]
        finally:
            self.lib.cublasLtMatmulPreferenceDestroy(pref)

    def config(self, algo: Algo) -> dict:
        """The algorithm's configuration (id, tile, split-K parts, reduction scheme, ...), for the record."""
        out = {}
        for name, attr in ALGO_CONFIG.items():
            v, written = ctypes.c_uint32(), ctypes.c_size_t()
            st = self.lib.cublasLtMatmulAlgoConfigGetAttribute(ctypes.byref(algo), attr, ctypes.byref(v),
                                                               ctypes.sizeof(v), ctypes.byref(written))
            out[name] = int(v.value) if st == 0 else None
        return out

    def plan(self, key) -> Plan:
        plan = self._plans.get(key)
        if plan is None:
            from .. import products
            desc, layouts = self._desc(key), self._layouts(key)
            chosen = self.record.get(products.key_text(key))
            if chosen is not None:
                algo = Algo()
                algo.data[:] = [int(x) for x in chosen["algo"]]
                plan = Plan(desc, layouts, algo, int(chosen["workspace"]), "timed")
            else:
                found = self.candidates(key, desc, layouts, count=1)
                if not found:
                    raise blas.CublasError(f"cuBLASLt has no algorithm for the product {products.key_text(key)}")
                plan = Plan(desc, layouts, found[0].algo, int(found[0].workspace_size), "heuristic")
            self._plans[key] = plan
        return plan

    # ---- the product
    def matmul(self, plan: Plan, A: int, B: int, C: int, alpha, beta, stream: int, ws: int | None = None) -> int:
        """One product with the plan's algorithm on stream; returns cuBLAS's status. ws: the workspace's pointer
        (blas.Cublas.workspace_for's where None), at least plan.workspace bytes."""
        vp = ctypes.c_void_p
        lb, la, lc = plan.layouts
        if ws is None:
            ws = self.cublas.workspace_for(stream, plan.workspace).data.ptr
        return self.lib.cublasLtMatmul(self.handle, plan.desc, ctypes.byref(alpha), vp(B), lb, vp(A), la,
                                       ctypes.byref(beta), vp(C), lc, vp(C), lc, ctypes.byref(plan.algo), vp(ws),
                                       plan.workspace, vp(stream))

    def gemm_rm(self, trans_a: bool, trans_b: bool, M: int, N: int, K: int, A: int, a_type: int, lda: int,
                B: int, b_type: int, ldb: int, C: int, c_type: int, ldc: int, compute: int, alpha, beta,
                reduced: bool) -> None:
        """blas.Cublas.gemm_rm's product (batch 1), A, B, C device pointers; alpha and beta ctypes scalars."""
        key = product_key(trans_a, trans_b, M, N, K, a_type, lda, b_type, ldb, c_type, ldc, compute, reduced,
                          (alignment(A), alignment(B), alignment(C)))
        if self.collect is not None:
            self.collect.add(key)
        plan = self.plan(key)
        stream = self._cp.cuda.get_current_stream().ptr
        if not memsets.EARLY:   # TR2_MEMSET_EARLY=0: as before gpu/memsets.py, no further call on the product's path
            status = self.matmul(plan, A, B, C, alpha, beta, stream)
        else:
            ws = self.cublas.product_workspace(stream, plan.workspace).data.ptr
            mover = memsets.active()   # in the step's capture: cuBLAS's memset, if any, off the chain

            def call():
                return self.matmul(plan, A, B, C, alpha, beta, stream, ws)
            status = call() if mover is None else mover.product(stream, (ws, plan.workspace), call)
        self._check(status, f"cublasLtMatmul(M={M}, N={N}, K={K}, {plan.source})")
