"""The CUDA backend's host-side pieces, checked without a GPU: every operation of the backend table has its
CUDA form (a kernel file or cuBLAS), the sources declare the kernels the wrappers launch, the sources obey
the build rules (no fast math, includes inlined), and the half-type packing helpers round as the kernels do."""
import math
import re

import numpy as np
import pytest

from tr2.cupy_side import gpu
from tr2.cupy_side.gpu import halfbits

TABLE_METHODS = {
    "embedding_forward", "embedding_backward", "layernorm_forward", "layernorm_backward", "matmul_forward",
    "matmul_backward", "attention_forward", "attention_backward", "gelu_forward", "gelu_backward",
    "dropout_forward", "dropout_backward", "residual_forward", "residual_layernorm_forward",
    "residual_layernorm_backward", "cross_entropy_forward",
    "cross_entropy_forward_backward", "adamw_update", "global_norm",
}


def test_every_table_op_has_a_cuda_form():
    methods = {m for ms in gpu.OP_METHODS.values() for m in ms}
    assert TABLE_METHODS <= methods
    assert set(gpu.OP_METHODS) == set(gpu.OP_FILES)
    for op, fn in gpu.OP_FILES.items():
        if fn is None:
            assert op == "matmul"   # cuBLAS through gpu/blas.py
            continue
        assert (gpu.KERNELS_DIR / fn).is_file(), f"{op}: {fn} missing"


def test_one_file_per_op_and_sources_declare_the_launched_kernels():
    files = gpu.kernel_files()
    assert len(files) == len(set(files))
    on_disk = {p.name for p in gpu.KERNELS_DIR.glob("*.cu")}
    assert on_disk == set(files), f"kernel files not mapped: {on_disk ^ set(files)}"
    for fn in files:
        assert gpu.declared_kernels(fn) == list(gpu.FILE_KERNELS[fn]), fn


def test_forward_and_backward_sit_in_the_same_file():
    for op, fn in gpu.OP_FILES.items():
        # no backward: the optimizer and the norm; the residual add, whose gradient passes to both branches as it is
        if fn is None or op in ("adamw", "global_norm", "residual"):
            continue
        names = gpu.FILE_KERNELS[fn]
        assert any("forward" in n or "split" in n or "apply" in n for n in names), fn
        assert any("backward" in n or "accumulate" in n or "apply" in n for n in names), fn


def test_sources_inline_their_includes_and_never_use_fast_math():
    assert not any("fast_math" in o or "fast-math" in o for o in gpu.COMPILE_OPTIONS)
    for fn in gpu.kernel_files():
        src = gpu.load_source(fn)
        assert '#include "' not in src, fn
        assert "rng_bits24" in src  # common.cuh inlined
        raw = (gpu.KERNELS_DIR / fn).read_text()
        for fast in ("__expf", "__logf", "__fdividef", "__sinf", "rsqrtf", "__frsqrt", "use_fast_math"):
            assert fast not in raw, f"{fn} uses {fast}"


def test_generator_constants_match_the_architecture():
    src = (gpu.KERNELS_DIR / "common.cuh").read_text()
    for const in ("0x9E3779B97F4A7C15", "0xBF58476D1CE4E5B9", "0x94D049BB133111EB"):
        assert const in src
    assert re.search(r"x \^ \(x >> 30\)", src) and re.search(r"z \^ \(z >> 27\)", src) and "z >> 31" in src
    # elements 2c and 2c + 1 share counter offset + c: the even one takes bits 40..63, the odd one 16..39
    assert "offset + (i >> 1)" in src and "z >> 40" in src and "(z >> 16) & 0xFFFFFFu" in src


def _ref_bf16(x):
    """Nearest bfloat16 by exhaustive neighbour choice in float64 (ties to even mantissa)."""
    out = []
    for v in np.asarray(x, np.float32).ravel():
        u = int(np.float32(v).view(np.uint32))
        lo = u & 0xFFFF0000
        hi = (lo + 0x10000) & 0xFFFFFFFF
        flo = float(np.uint32(lo).view(np.float32))
        finite = (hi >> 23) & 0xFF != 0xFF or (lo >> 23) & 0xFF == 0xFF
        fhi = float(np.uint32(hi).view(np.float32)) if finite else math.inf * (1 if v > 0 else -1)
        dlo, dhi = abs(float(v) - flo), abs(fhi - float(v))
        if dlo < dhi or (dlo == dhi and ((lo >> 16) & 1) == 0):
            out.append(lo >> 16)
        else:
            out.append((hi >> 16) & 0xFFFF)
    return np.array(out, dtype=np.uint16)


def test_bf16_packing_rounds_to_nearest_even():
    rng = np.random.default_rng(0)
    x = np.concatenate([rng.standard_normal(2000).astype(np.float32) * 10.0 ** rng.integers(-30, 30, 2000),
                        np.array([0.0, -0.0, 1.0, -1.0, 65504.0, 3.0e38, -3.0e38, 1e-40, -1e-40], np.float32)])
    x = x.astype(np.float32)
    bits = halfbits.f32_to_bf16_bits(x)
    assert np.array_equal(bits, _ref_bf16(x))
    back = halfbits.bf16_bits_to_f32(bits).astype(np.float64)
    normal = np.abs(x) >= np.finfo(np.float32).tiny
    assert np.all(np.abs(back - x)[normal] <= np.abs(x.astype(np.float64))[normal] * 2.0 ** -8)


def test_bf16_ties_go_to_even():
    # 1 + 2^-8 lies halfway between 1 and 1 + 2^-7: even mantissa is 1.0. 1 + 3*2^-8 goes up to 1 + 2^-6.
    x = np.array([1 + 2 ** -8, 1 + 3 * 2 ** -8, -(1 + 2 ** -8)], np.float32)
    assert halfbits.round_to_bf16(x).tolist() == [1.0, 1 + 2 ** -6, -1.0]


def test_block_sizes_are_read_from_the_sources():
    assert gpu.kernel_define("embedding.cu", "EMB_CHUNK") == 1024
    assert 1 <= gpu.kernel_define("embedding.cu", "WTE_SEG") <= 128   # gpu/embedding.py's WTE_THREADS reads them
    with pytest.raises(RuntimeError, match="no '#define NOPE"):
        gpu.kernel_define("embedding.cu", "NOPE")


def test_attention_geometry_is_read_from_the_source(tmp_path, monkeypatch):
    geo = gpu.attention_geometry()
    assert set(geo) == {"half", "float32"}
    for g in geo.values():
        assert g["mt"] in (1, 2)
        # the kernels walk the streamed tiles in pairs of n8 tiles (ldmatrix.x4) and k16 slices
        assert all(g[k] % 16 == 0 and g[k] >= 16 for k in ("forward", "backward_dq", "backward_dkdv"))
    (tmp_path / "attention.cu").write_text("template <int K> struct Geometry { static const int MT = 2; };\n")
    monkeypatch.setattr(gpu, "KERNELS_DIR", tmp_path)
    with pytest.raises(RuntimeError, match="Geometry of"):
        gpu.attention_geometry()


def test_cross_entropy_plan_picks_the_shared_memory_row_from_the_logits_alone():
    """gpu.cross_entropy_plan: half-type rows of whole 16-byte vectors from CE_SMEM_MIN_V to CE_SMEM_MAX_V columns,
    16-byte aligned, take cross_entropy.cu's shared-memory kernels (512 threads, the row's bytes of shared
    memory, two blocks an H200 SM); rows of at most CE_WARP_MAX_V columns, of any kind and alignment, the warp row
    (a warp a row, 8 rows a block); everything else keeps the first kernels."""
    F32, BF16, F16 = halfbits.KIND_F32, halfbits.KIND_BF16, halfbits.KIND_F16
    threads, lo, hi = (gpu.kernel_define("cross_entropy.cu", n) for n in ("CE_SMEM_THREADS", "CE_SMEM_MIN_V", "CE_SMEM_MAX_V"))
    assert (threads, lo, hi) == (512, 4096, 53248)
    for V in (50304, 32768, 8200, lo, hi):
        for kind in (BF16, F16):
            assert gpu.cross_entropy_plan(V, kind, True) == ("_smem", 512, 2 * V), (V, kind)
    warp_max, warp_rows = (gpu.kernel_define("cross_entropy.cu", n) for n in ("CE_WARP_MAX_V", "CE_WARP_ROWS"))
    assert (warp_max, warp_rows) == (1024, 8)
    for V in (1, 2, 24, 65, 72, 1001, 1024):
        for kind in (F32, BF16, F16):
            for aligned in (True, False):
                assert gpu.cross_entropy_plan(V, kind, aligned) == ("_warp", 256, 0), (V, kind, aligned)
    old = {1025: 256, 1031: 256, 16384: 256, 16392: 1024, 50257: 1024, 50304: 1024, 65528: 1024}
    for V, t in old.items():
        assert gpu.cross_entropy_plan(V, F32, True) == ("", t, 0), V   # float32 rows keep their kernels
    for V in (50257, 8196, lo - 8, hi + 8, 65528, 1025, 1031):   # not whole vectors, or out of range
        for kind in (BF16, F16):
            assert gpu.cross_entropy_plan(V, kind, True)[0] == "", (V, kind)
    for kind in (BF16, F16):   # logits off a 16-byte boundary
        assert gpu.cross_entropy_plan(50304, kind, False) == ("", 1024, 0)
    assert gpu.cross_entropy_plan(50257, BF16, True) == ("", 1024, 0)
    # Two blocks of the widest row fit an H200 SM's 228 KB: its row, the 128 static bytes (block_max and
    # block_sum's 32 floats) and the 1 KB the hardware keeps a block; and one block stays under 227 KB.
    row = gpu.cross_entropy_plan(hi, BF16, True)[2]
    assert 2 * (row + 128 + 1024) <= 228 * 1024 and row + 128 <= 227 * 1024
    # both kernels exist, and the launch bounds ask for two blocks of CE_SMEM_THREADS an SM (<= 64 registers)
    src = (gpu.KERNELS_DIR / "cross_entropy.cu").read_text()
    for name in ("cross_entropy_forward_smem", "cross_entropy_forward_backward_smem"):
        assert name in gpu.FILE_KERNELS["cross_entropy.cu"]
        assert re.search(rf"__launch_bounds__\(CE_SMEM_THREADS, 2\)\s+{name}\(", src), name


def test_bf16_specials():
    x = np.array([np.inf, -np.inf, np.nan], np.float32)
    b = halfbits.bf16_bits_to_f32(halfbits.f32_to_bf16_bits(x))
    assert b[0] == np.inf and b[1] == -np.inf and np.isnan(b[2])
    # the largest finite float32 rounds to infinity in bfloat16 (beyond bf16's max 3.3895e38)
    assert halfbits.round_to_bf16(np.array([np.finfo(np.float32).max], np.float32))[0] == np.inf


def test_bf16_against_torchs_rounding():
    """An outside oracle for the packing: PyTorch's float32 -> bfloat16 conversion (round to nearest even), on normal
    values, ties, subnormals and values that round up to infinity. (ml_dtypes, the oracle until 2026-12-04, is not
    installed by the project, so this test skipped in CI.)"""
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(1)
    x = (rng.standard_normal(100000) * 100).astype(np.float32)
    ties = (rng.integers(0, 1 << 16, 1000, dtype=np.uint32) << 16 | 0x8000).view(np.float32)   # halfway between two
    tiny = (rng.integers(1, 1 << 23, 1000, dtype=np.uint32)).view(np.float32)                   # subnormals
    big = np.array([np.finfo(np.float32).max, -np.finfo(np.float32).max, 3.3961e38, 0.0, -0.0], np.float32)
    for v in (x, ties[np.isfinite(ties)], tiny, big):
        want = torch.from_numpy(v).to(torch.bfloat16).view(torch.int16).numpy().view(np.uint16)
        assert np.array_equal(halfbits.f32_to_bf16_bits(v), want)


def test_f16_packing_is_numpys():
    rng = np.random.default_rng(2)
    x = (rng.standard_normal(1000) * 1000).astype(np.float32)
    assert np.array_equal(halfbits.from_bits(halfbits.to_bits(x, halfbits.KIND_F16), halfbits.KIND_F16),
                          x.astype(np.float16).astype(np.float32))
    assert np.array_equal(halfbits.round_to_kind(x, halfbits.KIND_F32), x)


@pytest.mark.parametrize("p", [0.0, 0.1, 0.2, 0.5, 0.3, 1e-9, 0.999999, 0.5 + 2 ** -26])
def test_dropout_threshold_is_the_generators_test(p):
    thr = halfbits.dropout_threshold(p)
    # every 24-bit k is kept by the kernels exactly when u = k * 2^-24 >= p
    for k in {0, 1, max(thr - 1, 0), thr, min(thr + 1, 2 ** 24 - 1), 2 ** 24 - 1}:
        assert (k >= thr) == (k * 2.0 ** -24 >= p), (p, k, thr)


@pytest.mark.parametrize("p", [0.1, 0.2, 0.5, 0.9, 1e-7, 0.3333333333])
def test_dropout_threshold_reproduces_rng_keep_mask(p):
    """rng.keep_mask keeps u >= float32(p); the kernels keep k >= threshold(p) for the same draws."""
    from tr2.cupy_side import rng
    u = rng.uniform(1337, rng.site_offset(3, 7, 2), 200_000)
    k = (u * np.float32(2 ** 24)).astype(np.int64)
    thr = halfbits.dropout_threshold(p, float32_compare=True)
    assert np.array_equal(k >= thr, rng.keep_mask(1337, rng.site_offset(3, 7, 2), (200_000,), p))
    # every boundary draw too (the random ones rarely land next to the threshold)
    ks = np.arange(max(thr - 3, 0), min(thr + 3, 2 ** 24), dtype=np.int64)
    assert np.array_equal(ks >= thr, ks.astype(np.float32) * np.float32(2.0 ** -24) >= np.float32(p))


def _methods_of(path, cls_name):
    """{method: [argument names]} of a class, read from the source without importing it (CuPy-free)."""
    import ast
    tree = ast.parse(path.read_text())
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and node.name == cls_name:
            return {f.name: [a.arg for a in f.args.args] + ([f.args.vararg.arg] if f.args.vararg else [])
                    for f in node.body if isinstance(f, ast.FunctionDef)}
    raise AssertionError(f"{cls_name} not found in {path}")


def test_cuda_backend_has_numpy_backends_interface():
    """Same public methods with the same argument names, so model.py, optim.py and train.py run unchanged."""
    import inspect
    from tr2.cupy_side.backend import NumpyBackend
    cuda = _methods_of(gpu.KERNELS_DIR.parent / "gpu" / "backend.py", "CudaBackend")
    for name, fn in inspect.getmembers(NumpyBackend, inspect.isfunction):
        if name.startswith("_") and name != "__init__":
            continue
        want = list(inspect.signature(fn).parameters)
        assert name in cuda, f"CudaBackend lacks {name}"
        assert cuda[name] == want, f"{name}: CudaBackend takes {cuda[name]}, NumpyBackend {want}"
    src = (gpu.KERNELS_DIR.parent / "gpu" / "backend.py").read_text()
    for attr in ("xp = cp", 'device = "cuda"', "self.dtype", "self.float_dtype", "self.prec", "self.tf32",
                 "self.half_roundings"):
        assert attr in src, attr


def test_gpu_package_imports_without_cupy():
    """The host-side modules must not need CuPy (this machine may have none)."""
    import importlib
    import sys
    for mod in ("tr2.cupy_side.gpu", "tr2.cupy_side.gpu.halfbits"):
        importlib.import_module(mod)
    if "cupy" not in sys.modules:
        assert True
