"""cuBLASLt's products (gpu/lt.py) and the timed record (cupy_side/products.py) on a GPU.

A timed record may choose any candidate cuBLASLt lists, so every candidate of each shape is checked here against
the float64 product of the same operands (outputs poisoned first), and twice for identical bits. Tolerances, relative
Frobenius: float32 output 1e-5 (plain float32 and half operands accumulate in float32; TF32 2e-3, as
test_kernels_gpu.py), a half output 1e-2 (its own rounding, 2^-8 for bfloat16). The record: a key timed, written,
read back by a new handle, whose product then runs on the timed algorithm. Skipped without CuPy or a device."""
from __future__ import annotations

import numpy as np
import pytest

cp = pytest.importorskip("cupy")
pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not cp.is_available(), reason="no CUDA device")]

from conftest import memsets_at  # noqa: E402
from tr2.cupy_side import products  # noqa: E402
from tr2.cupy_side.gpu import blas, halfbits, lt as ltmod  # noqa: E402

TYPES = {"f32": blas.CUDA_R_32F, "bf16": blas.CUDA_R_16BF, "f16": blas.CUDA_R_16F}
KIND = {"bf16": 1, "f16": 2}


def operand(rs, shape, kind):
    """(device array in the type, its values as float64)."""
    x = rs.standard_normal(shape).astype(np.float32)
    if kind == "f32":
        return cp.asarray(x), x.astype(np.float64)
    bits = halfbits.to_bits(x, KIND[kind])
    return cp.asarray(bits), halfbits.from_bits(bits, KIND[kind]).astype(np.float64)


def to_f64(c, kind):
    h = cp.asnumpy(c)
    return h.astype(np.float64) if kind == "f32" else halfbits.from_bits(h, KIND[kind]).astype(np.float64)


def rel(got, want) -> float:
    return float(np.linalg.norm(got - want) / max(np.linalg.norm(want), 1e-300))


CASES = [  # (in kind, out kind, compute, ta, tb, M, N, K)
    ("f32", "f32", blas.COMPUTE_32F, False, True, 33, 65, 7),
    ("f32", "f32", blas.COMPUTE_32F_FAST_TF32, False, False, 512, 384, 192),
    ("bf16", "f32", blas.COMPUTE_32F, True, False, 384, 192, 1023),
    ("bf16", "bf16", blas.COMPUTE_32F, False, True, 1024, 1536, 384),
    ("f16", "f16", blas.COMPUTE_32F, False, False, 257, 768, 3072),
]


@pytest.mark.parametrize("case", CASES, ids=[f"{c[0]}-{c[1]}-{c[2]}-{int(c[3])}{int(c[4])}-{c[5]}x{c[6]}x{c[7]}" for c in CASES])
def test_every_candidate_computes_the_product(case):
    ink, outk, compute, ta, tb, M, N, K = case
    cb = blas.get_cublas()
    lt = cb.lt if cb.lt is not None else ltmod.CublasLt(cb)
    rs = np.random.default_rng(M + N + K)
    A, a = operand(rs, (K, M) if ta else (M, K), ink)
    B, b = operand(rs, (N, K) if tb else (K, N), ink)
    want = (a.T if ta else a) @ (b.T if tb else b)
    C = cp.empty((M, N), dtype=np.float32 if outk == "f32" else np.uint16)
    reduced = outk != "f32"
    key = ltmod.product_key(ta, tb, M, N, K, TYPES[ink], A.shape[1], TYPES[ink], B.shape[1], TYPES[outk], N, compute,
                            reduced, (ltmod.alignment(A.data.ptr), ltmod.alignment(B.data.ptr), ltmod.alignment(C.data.ptr)))
    desc, layouts = lt._desc(key), lt._layouts(key)
    found = lt.candidates(key, desc, layouts)
    assert found, f"no candidate for {products.key_text(key)}"
    alpha, beta = cb._scalars(compute, 1.0, 0.0)
    tol = 1e-2 if outk != "f32" else (2e-3 if compute == blas.COMPUTE_32F_FAST_TF32 else 1e-5)
    for i, r in enumerate(found):
        plan = ltmod.Plan(desc, layouts, r.algo, int(r.workspace_size), "candidate")
        outs = []
        for _ in range(2):
            C.view(np.uint8).fill(0xFF)   # NaN: an element not written fails
            assert lt.matmul(plan, A.data.ptr, B.data.ptr, C.data.ptr, alpha, beta, cp.cuda.get_current_stream().ptr) == 0
            outs.append(cp.asnumpy(C).copy())
        got = to_f64(C, outk)
        assert np.isfinite(got).all(), f"candidate {i} {lt.config(r.algo)}: elements not written"
        assert rel(got, want) <= tol, f"candidate {i} {lt.config(r.algo)}: relative error {rel(got, want):.2e} > {tol}"
        assert outs[0].tobytes() == outs[1].tobytes(), f"candidate {i} {lt.config(r.algo)}: two runs differ"


def test_a_timed_record_is_written_read_back_and_used(tmp_path, monkeypatch):
    monkeypatch.setenv("TR2_PRODUCTS_DIR", str(tmp_path))
    cb = blas.get_cublas()
    M, N, K = 1024, 768, 3072
    rs = np.random.default_rng(3)
    A, a = operand(rs, (M, K), "bf16")
    B, b = operand(rs, (N, K), "bf16")
    C = cp.empty((M, N), dtype=np.uint16)
    key = ltmod.product_key(False, True, M, N, K, blas.CUDA_R_16BF, K, blas.CUDA_R_16BF, K, blas.CUDA_R_16BF, N,
                            blas.COMPUTE_32F, True, (256, 256, 256))
    if cb.lt is None:
        cb.attach_lt()
    choice = products.tune(cb, key, reps=3, rounds=1)
    assert 0 <= choice["rank"] < choice["candidates"] and choice["ms"] > 0 and len(choice["algo"]) == 8
    path = products.record_path(products.device_name(), cb.lt.version)
    products.write_record(path, products.device_name(), cb.lt.version, {products.key_text(key): choice})
    record, found_at = products.load_record(cb.lt.version)
    assert found_at == path and products.key_text(key) in record
    fresh = ltmod.CublasLt(cb, record=record)
    C.view(np.uint8).fill(0xFF)
    fresh.gemm_rm(False, True, M, N, K, A.data.ptr, blas.CUDA_R_16BF, K, B.data.ptr, blas.CUDA_R_16BF, K,
                  C.data.ptr, blas.CUDA_R_16BF, N, blas.COMPUTE_32F, *cb._scalars(blas.COMPUTE_32F, 1.0, 0.0), reduced=True)
    assert fresh.plan(key).source == "timed"
    assert rel(to_f64(C, "bf16"), a @ b.T) <= 1e-2


def test_a_required_record_that_is_missing_stops_the_backend_and_one_present_is_read(tmp_path, monkeypatch):
    """TR2_REQUIRE_PRODUCTS=1 on the GPU: the record this device and cuBLASLt version look for, absent, stops
    load_record_digest (where a run's backend reads it) naming the path; placed (`--place`, from a kept copy's name), it
    is read with its digest. The CPU half: tests/test_products.py."""
    monkeypatch.setenv("TR2_PRODUCTS_DIR", str(tmp_path))
    monkeypatch.setenv("TR2_REQUIRE_PRODUCTS", "1")
    cb = blas.get_cublas()
    if cb.lt is None:
        cb.attach_lt()
    version, card = cb.lt.version, products.device_name()
    want = products.record_path(card, version)
    kept = tmp_path / "kept" / f"{want.stem}-0123456789ab.json"
    kept.parent.mkdir()
    products.write_record(kept, card, version, {})
    with pytest.raises(products.RecordError, match=f"^TR2_REQUIRE_PRODUCTS=1 and there is no products record at {want}"):
        products.load_record_digest(version)
    assert products.place([kept], tmp_path) == [(kept, want)]
    record, path, digest = products.load_record_digest(version)
    assert (record, path) == ({}, want) and digest is not None


# gpu/memsets.py on the driver, in seconds (before any training run): three products of gpt2-small's c_attn forward
# shape in bf16 under half roundings (the record's plan asks for a 4-byte workspace, which cuBLAS zeroes with a memset
# before its kernel) captured back to back, TR2_MEMSET_EARLY=2's two workspaces taken in turn. The first memset has
# nothing before it; the second and third are moved (behind nothing, and behind the first product), every edge read
# back at once and at the capture's end; the replayed products must equal the eager product to the bit.
def test_memsets_moved_in_a_capture_of_three_products(monkeypatch):
    from tr2.cupy_side.gpu import memsets, runtime
    memsets_at(monkeypatch, 2)   # all of value 2's state (the default, 3, would give each product a slot)
    cb = blas.get_cublas()
    math_before = cb._math
    cb.set_math(True)
    M, N, K = 8192, 2304, 768
    rs = np.random.default_rng(5)
    A, _ = operand(rs, (M, K), "bf16")
    B, _ = operand(rs, (N, K), "bf16")
    outs = [cp.full((M, N), 0xFFFF, dtype=np.uint16) for _ in range(4)]

    def product(C):
        cb.gemm_rm(False, True, M, N, K, A, blas.CUDA_R_16BF, K, B, blas.CUDA_R_16BF, K, C, blas.CUDA_R_16BF, N,
                   blas.COMPUTE_32F)
    stream = cp.cuda.Stream(non_blocking=True)
    try:
        with stream:
            for _ in range(3):   # eager: the reference, the plan made, both workspaces grown
                product(outs[0])
            stream.synchronize()
            stream.begin_capture()
            try:
                with runtime.capturing():
                    for C in outs[1:]:
                        product(C)
            finally:
                graph = stream.end_capture()
            mover = memsets.current()
            graph.launch(stream)
            stream.synchronize()
    finally:
        if math_before is not None:
            cb.set_math(math_before == blas.DEFAULT_MATH)
    print(mover.line())
    if not mover.outcomes:
        pytest.skip("this card's plan for the shape records no memset: " + mover.line())
    assert mover.outcomes[memsets.MOVED] == 2 and mover.outcomes[memsets.FIRST] == 1, mover.line()
    for C in outs[1:]:
        assert bool((C == outs[0]).all()), "a replayed product differs from the eager one"
