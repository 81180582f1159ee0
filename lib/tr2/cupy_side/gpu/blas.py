"""Matrix products through cuBLAS, called by ctypes on CuPy's current stream.

Why ctypes: CuPy's own cuBLAS bindings raise NotImplementedError during stream capture, and the design
must allow one CUDA graph for the whole step later. Everything here is capture-safe: the handle has its
own workspace (no allocation inside cuBLAS), alpha/beta are host scalars fixed per call site, and the
stream is CuPy's current one.

Element types (docs/architecture.md):
  float32: CUBLAS_COMPUTE_32F_FAST_TF32 when tf32, else CUBLAS_COMPUTE_32F (plain float32).
  bfloat16 / float16: inputs are 16-bit buffers (uint16 arrays; CUDA_R_16BF / CUDA_R_16F), compute 32F;
  outputs float32, or the half type when half_roundings. cuBLAS may reduce in the half type only with
  half_roundings (CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION otherwise).
The helpers take row-major arrays and map them onto cuBLAS's column-major calls.

Products of one matrix (every product of a training step) go through cuBLASLt (gpu/lt.py: the algorithm timed on
the card, products.py's record) where USE_LT is on; cublasGemmEx where it is off, and for batched products.
"""
from __future__ import annotations

import ctypes

from . import find_nvidia_lib, kernel_switch, memsets

# cublasOperation_t
OP_N, OP_T = 0, 1
# cudaDataType_t
CUDA_R_32F, CUDA_R_64F, CUDA_R_16F, CUDA_R_16BF = 0, 1, 2, 14
# cublasComputeType_t
COMPUTE_32F, COMPUTE_32F_FAST_TF32, COMPUTE_64F = 68, 77, 70
# cublasMath_t
DEFAULT_MATH, DISALLOW_REDUCED_PRECISION_REDUCTION = 0, 16
GEMM_DEFAULT = -1
# cuBLAS's recommendation for Hopper: what cublasGemmEx is given, and the most a cuBLASLt candidate may ask for. The
# workspace itself is only as large as the products run so far have needed (Cublas.workspace_for): a cuBLASLt plan's
# own size, WORKSPACE_BYTES for cublasGemmEx (whose choice depends on the size it is given).
WORKSPACE_BYTES = 32 * 1024 * 1024
# 1: the workspace only as large as the run's products need; 0: WORKSPACE_BYTES from the first product on, as before.
# The same algorithms with the same workspace sizes either way, so the same bits (tests/test_graph_gpu.py,
# "workspace": passed in call 1 of results/h200-perf-20261202e, nanogpt float32's workspace 33554432 -> 16515735
# bytes). On since then: the step's peak in that call's bench, nanogpt float32 2.830 -> 2.813 GB (PyTorch
# reduce-overhead 2.809), bfloat16 1.692 -> 1.671 GB, the step time unchanged (9.21 / 9.20 and 4.40 / 4.41 ms, one
# round). TR2_CUBLAS_WORKSPACE_BY_PLAN=0 gives the old way.
WORKSPACE_BY_PLAN = bool(kernel_switch("TR2_CUBLAS_WORKSPACE_BY_PLAN", 1))
USE_LT = True

DATA_TYPES = {"float32": CUDA_R_32F, "float64": CUDA_R_64F, "float16": CUDA_R_16F, "bfloat16": CUDA_R_16BF}

_STATUS = {0: "SUCCESS", 1: "NOT_INITIALIZED", 3: "ALLOC_FAILED", 7: "INVALID_VALUE", 8: "ARCH_MISMATCH",
           11: "MAPPING_ERROR", 13: "EXECUTION_FAILED", 14: "INTERNAL_ERROR", 15: "NOT_SUPPORTED",
           16: "LICENSE_ERROR"}


class CublasError(RuntimeError):
    pass


def find_libcublas() -> str:
    """Path of libcublas (gpu.find_nvidia_lib), after CuPy has loaded its own: ours is then the same library."""
    try:
        import cupy_backends.cuda.libs.cublas  # noqa: F401
    except Exception:   # no CuPy here: the other places are searched
        pass
    path = find_nvidia_lib("cublas")
    if path is None:
        raise CublasError("libcublas not found (looked in this process, cuda-pathfinder, the nvidia wheels, "
                          "the CUDA install and the loader's path)")
    return path


class Cublas:
    """One cuBLAS handle with its own workspace; products on CuPy's current stream."""

    def __init__(self, path: str | None = None):
        import cupy as cp
        self._cp = cp
        self.path = path or find_libcublas()
        lib = ctypes.CDLL(self.path)
        self.lib = lib
        vp, ci, cll, csz = ctypes.c_void_p, ctypes.c_int, ctypes.c_longlong, ctypes.c_size_t
        lib.cublasCreate_v2.argtypes = [ctypes.POINTER(vp)]
        lib.cublasDestroy_v2.argtypes = [vp]
        lib.cublasSetStream_v2.argtypes = [vp, vp]
        lib.cublasSetMathMode.argtypes = [vp, ci]
        lib.cublasSetWorkspace_v2.argtypes = [vp, vp, csz]
        lib.cublasGetVersion_v2.argtypes = [vp, ctypes.POINTER(ci)]
        lib.cublasGemmEx.argtypes = [vp, ci, ci, ci, ci, ci, vp, vp, ci, ci, vp, ci, ci, vp, vp, ci, ci, ci, ci]
        lib.cublasGemmStridedBatchedEx.argtypes = [vp, ci, ci, ci, ci, ci, vp, vp, ci, ci, cll, vp, ci, ci, cll,
                                                   vp, vp, ci, ci, cll, ci, ci, ci]
        for f in ("cublasCreate_v2", "cublasDestroy_v2", "cublasSetStream_v2", "cublasSetMathMode",
                  "cublasSetWorkspace_v2", "cublasGetVersion_v2", "cublasGemmEx", "cublasGemmStridedBatchedEx"):
            getattr(lib, f).restype = ci
        handle = vp()
        self._check(lib.cublasCreate_v2(ctypes.byref(handle)), "cublasCreate")
        self.handle = handle
        # The one workspace of every product, on whichever stream (the step's run on one). By plan, it grows on demand
        # and never shrinks; else WORKSPACE_BYTES from the start, as before the switch. (A side stream's own workspace
        # went with the side stream: gpu.RETIRED's TR2_SIDE_STREAM.)
        self._workspace = self._first_workspace()
        # memsets.TWO_WORKSPACES: the second workspace, and which of the two the last product took
        self._second = None
        self._turn = None
        # memsets.LEAVES: the arena of the step's products' own slots (allocated at the first product, outside a capture)
        self._arena = None
        # once a step graph is captured (graph.StepGraph.capture), a workspace replaced by a larger one is kept here
        # rather than freed: the graph's products keep its address
        self.captured = False
        self._kept: list = []
        self._bound_workspace = None   # (pointer, bytes) cublasSetWorkspace was last given, for cublasGemmEx
        self._stream = None
        self._math = None
        self.lt = None   # gpu/lt.py's CublasLt, on this handle's workspace (attach_lt)
        ver = ci()
        self._check(lib.cublasGetVersion_v2(handle, ctypes.byref(ver)), "cublasGetVersion")
        self.version = ver.value
        self._one = {COMPUTE_32F: ctypes.c_float(1.0), COMPUTE_32F_FAST_TF32: ctypes.c_float(1.0),
                     COMPUTE_64F: ctypes.c_double(1.0)}
        self._zero = {COMPUTE_32F: ctypes.c_float(0.0), COMPUTE_32F_FAST_TF32: ctypes.c_float(0.0),
                      COMPUTE_64F: ctypes.c_double(0.0)}

    @staticmethod
    def _check(status: int, what: str) -> None:
        if status != 0:
            raise CublasError(f"{what} failed: CUBLAS_STATUS_{_STATUS.get(status, status)}")

    def attach_lt(self) -> None:
        """Products of one matrix through cuBLASLt from now on, with the card's record of timed algorithms."""
        if self.lt is None:
            from .. import products
            from .lt import CublasLt
            lt = CublasLt(self)
            lt.record, lt.record_path, lt.record_sha256 = products.load_record_digest(lt.version)
            self.lt = lt

    def set_math(self, half_roundings: bool) -> None:
        mode = DEFAULT_MATH if half_roundings else DEFAULT_MATH | DISALLOW_REDUCED_PRECISION_REDUCTION
        if mode != self._math:
            self._check(self.lib.cublasSetMathMode(self.handle, mode), "cublasSetMathMode")
            self._math = mode

    def _bind_stream(self) -> None:
        ptr = self._cp.cuda.get_current_stream().ptr
        if ptr != self._stream:
            self._check(self.lib.cublasSetStream_v2(self.handle, ctypes.c_void_p(ptr)), "cublasSetStream")
            # cublasSetStream puts the handle back on cuBLAS's own workspace pool (cuBLAS documentation): ours is
            # bound again before the next cublasGemmEx (_bind_workspace), so that no product allocates, inside a
            # captured graph least of all.
            self._bound_workspace = None
            self._stream = ptr

    def _bind_workspace(self) -> None:
        """cublasGemmEx's workspace: the shared one, at WORKSPACE_BYTES, bound to the handle."""
        ws = self.workspace_for(self._stream, WORKSPACE_BYTES)
        bound = (ws.data.ptr, WORKSPACE_BYTES)
        if bound != self._bound_workspace:
            self._check(self.lib.cublasSetWorkspace_v2(self.handle, ctypes.c_void_p(bound[0]), bound[1]),
                        "cublasSetWorkspace")
            self._bound_workspace = bound

    def _first_workspace(self):
        return self._cp.empty(0 if WORKSPACE_BY_PLAN else WORKSPACE_BYTES, dtype=self._cp.uint8)

    def workspace_for(self, stream_ptr: int | None, need: int = 0):
        """The workspace of products (on stream_ptr, whose capture is checked), at least `need` bytes. A larger need
        replaces it (the old one goes back to CuPy's pool, in stream order) with one from the default pool, counted in
        the peak: the graph's warm-up allocates from the graph's pool, and a workspace outlives the step. Never inside
        a capture: the captured products would keep the address of the one freed."""
        ws = self._workspace
        if need > ws.size:
            from . import runtime
            probe = getattr(self._cp.cuda.runtime, "streamIsCapturing", None)   # any capture: products.py's too
            if runtime.is_capturing() or (probe is not None and probe(stream_ptr or 0) != 0):
                raise RuntimeError(f"cuBLAS workspace: a product inside a capture needs {need} bytes, more than the "
                                   f"{ws.size} its warm-up allocated (a product the eager step did not run)")
            del ws   # this frame must not hold the old one while its successor is allocated
            ws = self._replace("_workspace", need)
        return ws

    def _replace(self, name: str, nbytes: int):
        """The workspace held as attribute `name` replaced by nbytes from the default pool, counted in the peak. The
        old one goes back to CuPy's pool first (never both held), unless a step graph has been captured: its products
        may use the old address, so it is kept (a product after the capture that needs more than the step's is not
        expected: eval's products are the training forward's)."""
        from . import runtime
        if self.captured:
            self._kept.append(getattr(self, name))
        else:
            setattr(self, name, self._cp.empty(0, dtype=self._cp.uint8))
        setattr(self, name, runtime.default_pool_array(nbytes))
        return getattr(self, name)

    def product_workspace(self, stream_ptr: int | None, need: int):
        """The workspace a product of the step on stream_ptr is given: the shared one (workspace_for); or, where
        memsets.TWO_WORKSPACES is on and the product needs at most memsets.SECOND_BYTES, whichever of the two the last
        product did not take, so that two such products in a row never share one and the second one's memset can run
        before the first has ended (gpu/memsets.py). The second grows to the largest such need seen (in the warm-up,
        never inside a capture): at most SECOND_BYTES more memory, where a copy of the first would cost the float32
        builds' 16.5 MB (their peak is within 3 MB of PyTorch's on the char model)."""
        ws = self.workspace_for(stream_ptr, need)
        if memsets.LEAVES:
            return self._slot_or(ws, need)
        if not memsets.TWO_WORKSPACES:
            return ws
        if need > memsets.SECOND_BYTES:
            self._turn = "first"
            return ws
        second = self._second
        if second is None or second.size < need:
            from . import runtime
            if runtime.is_capturing():
                raise RuntimeError(f"cuBLAS workspace: a product inside a capture needs {need} bytes of the second "
                                   f"workspace, which has {0 if second is None else second.size} (a product the "
                                   f"warm-up did not run)")
            del second   # not held here while its successor is allocated
            if self._second is None:
                self._second = self._cp.empty(0, dtype=self._cp.uint8)
            self._replace("_second", max(int(need), 1))
        # the one the last product did not take (a label, not the array: a replaced one must not be held here)
        self._turn = "second" if self._turn == "first" else "first"
        return self._second if self._turn == "second" else ws

    def _slot_or(self, ws, need: int):
        """(memsets.LEAVES) In the step's capture, a product's own slot of the arena where it needs at most
        memsets.SLOT_BYTES and one is left; else ws. The arena is allocated (zeroed, from the default pool, counted in the
        peak) at the first product outside a capture: the warm-up's."""
        from . import runtime
        if self._arena is None and not runtime.is_capturing():
            self._arena = runtime.default_pool_array(memsets.SLOTS * memsets.SLOT_BYTES)
            self._arena.fill(0)   # a memset (a fill of 0 compiles nothing)
            memsets.register_arena(self._arena.data.ptr, self._arena.size)
        mover = memsets.active()
        slot = mover.slot(need) if mover is not None and self._arena is not None else None
        if slot is None:
            return ws
        offset = slot[0] - self._arena.data.ptr
        return self._arena[offset:offset + memsets.SLOT_BYTES]

    def zero_slots(self) -> None:
        """(memsets.LEAVES) The arena zeroed by one of our kernels on the current stream: the step graph's first node
        (runtime.capturing), so that every slot's counter is zero before its product in each replay."""
        if self._arena is not None:
            from .cast import fill_f32
            fill_f32(self._arena.view(self._cp.float32), 0.0)

    def workspace_line(self) -> str:
        """The train log's account of the workspaces: the shared one's size, the largest a cuBLASLt plan of the run
        names (cublasGemmEx asks for WORKSPACE_BYTES), and the second one's where products take two in turn."""
        largest = max((p.workspace for p in self.lt._plans.values()), default=0) if self.lt is not None else 0
        return (f"cuBLAS workspace: {int(self._workspace.size)} bytes, the largest a cuBLASLt plan of this run needs "
                f"{largest}"
                + ("" if self._second is None else f"; a second workspace of {int(self._second.size)} bytes, products "
                                                   f"taking the two in turn"))

    def _scalars(self, compute: int, alpha: float, beta: float):
        if compute == COMPUTE_64F:
            a = self._one[compute] if alpha == 1.0 else ctypes.c_double(alpha)
            b = self._zero[compute] if beta == 0.0 else ctypes.c_double(beta)
        else:
            a = self._one[compute] if alpha == 1.0 else ctypes.c_float(alpha)
            b = self._zero[compute] if beta == 0.0 else ctypes.c_float(beta)
        return a, b

    def gemm_rm(self, trans_a: bool, trans_b: bool, M: int, N: int, K: int,
                A, a_type: int, lda: int, B, b_type: int, ldb: int, C, c_type: int, ldc: int,
                compute: int, alpha: float = 1.0, beta: float = 0.0,
                batch: int = 1, stride_a: int = 0, stride_b: int = 0, stride_c: int = 0) -> None:
        """Row-major C[M, N] = alpha op(A) op(B) + beta C, op(A) [M, K], op(B) [K, N]; A, B, C device pointers
        (ints) or CuPy arrays; lda/ldb/ldc are the row-major leading dimensions (row lengths in elements).

        Column-major cuBLAS computes C^T = op(B)^T op(A)^T: the call swaps A and B and M and N."""
        self._bind_stream()
        pa = A if isinstance(A, int) else A.data.ptr
        pb = B if isinstance(B, int) else B.data.ptr
        pc = C if isinstance(C, int) else C.data.ptr
        a, b = self._scalars(compute, alpha, beta)
        if self.lt is not None and batch == 1:
            self.lt.gemm_rm(trans_a, trans_b, M, N, K, pa, a_type, lda, pb, b_type, ldb, pc, c_type, ldc, compute,
                            a, b, reduced=self._math == DEFAULT_MATH)
            return
        opa, opb = (OP_T if trans_a else OP_N), (OP_T if trans_b else OP_N)
        vp = ctypes.c_void_p
        self._bind_workspace()
        if batch == 1:
            def call():
                return self.lib.cublasGemmEx(self.handle, opb, opa, N, M, K, ctypes.byref(a),
                                             vp(pb), b_type, ldb, vp(pa), a_type, lda, ctypes.byref(b),
                                             vp(pc), c_type, ldc, compute, GEMM_DEFAULT)
            what = f"cublasGemmEx(M={M}, N={N}, K={K})"
        else:
            def call():
                return self.lib.cublasGemmStridedBatchedEx(self.handle, opb, opa, N, M, K, ctypes.byref(a),
                                                           vp(pb), b_type, ldb, stride_b, vp(pa), a_type, lda,
                                                           stride_a, ctypes.byref(b), vp(pc), c_type, ldc, stride_c,
                                                           batch, compute, GEMM_DEFAULT)
            what = f"cublasGemmStridedBatchedEx(M={M}, N={N}, K={K}, batch={batch})"
        if memsets.TWO_WORKSPACES:   # cublasGemmEx's products take the first workspace
            self._turn = "first"
        mover = memsets.active()
        # in the step's capture the Mover hears of this product too: it uses the stream's workspace, which a moved
        # memset of a later product must wait for (gpu/memsets.py)
        self._check(call() if mover is None else mover.product(self._stream, self._bound_workspace, call), what)

    def close(self) -> None:
        if getattr(self, "handle", None):
            self.lib.cublasDestroy_v2(self.handle)
            self.handle = None


_instance: Cublas | None = None


def get_cublas() -> Cublas:
    """The process's one handle (created on first use, on the current device)."""
    global _instance
    if _instance is None:
        _instance = Cublas()
        if USE_LT:
            _instance.attach_lt()
    return _instance


def compute_type(dtype: str, tf32: bool) -> int:
    if dtype == "float64":
        return COMPUTE_64F
    if dtype == "float32" and tf32:
        return COMPUTE_32F_FAST_TF32
    return COMPUTE_32F
